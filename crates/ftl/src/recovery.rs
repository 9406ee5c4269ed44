//! Recovery (batch-io §4, §6, §7.2.7).

use crate::format::{
    Checkpoint, Entry, Kind, LOG_LINKS, LogPage, NONE, Record, TAG_BYTES, Tag, page_unaddr, unpack,
};
use crate::ftl::*;
use crate::{FtlConfig, FtlError, FtlStats, RecoveryFailed, RecoveryReport};
use csd_nand::{BlockId, Nand, NandError, Ppa};
use csd_sim::SimTime;
use std::collections::BTreeMap;
use std::time::Instant;

impl Ftl {
    /// Rebuild the FTL from flash after a crash or a clean shutdown (batch-io §4, §6,
    /// §7.2.7): the newest valid checkpoint record, then redo from the RSSP to the end of
    /// the log; commits without a done record are verified by reading their sectors'
    /// TAGs and CRCs and applied only if every sector verifies (so a batch is
    /// all-or-nothing). Ends with a fresh checkpoint.
    pub fn recover(nand: Nand, cfg: FtlConfig) -> Result<Ftl, FtlError> {
        Self::try_recover(nand, cfg).map_err(|f| f.error)
    }

    /// [`Ftl::recover`], giving the flash array back when recovery fails (for example
    /// when power is cut during recovery), so that it can be tried again.
    pub fn try_recover(nand: Nand, cfg: FtlConfig) -> Result<Ftl, RecoveryFailed> {
        let mut nand = nand;
        let fail = |error, nand| RecoveryFailed {
            error,
            nand: Box::new(nand),
        };
        let found = match Self::find_checkpoint(&mut nand, &cfg) {
            Ok(x) => x,
            Err(e) => return Err(fail(e, nand)),
        };
        let (ck, rssp_links, active, ckpt_blocks, t0, t) = found;
        if ck.ext_bytes != cfg.ext_bytes {
            let e = FtlError::Config(format!(
                "the device was formatted with {} extension bytes per MAP entry, not {}",
                ck.ext_bytes, cfg.ext_bytes
            ));
            return Err(fail(e, nand));
        }
        let mut f = Ftl::skeleton(nand, cfg, ck.lbas);
        match f.recover_from(ck, rssp_links, active, ckpt_blocks, t0, t) {
            Ok(()) => Ok(f),
            Err(e) => Err(fail(e, f.nand)),
        }
    }

    #[allow(clippy::type_complexity)]
    pub(crate) fn find_checkpoint(
        nand: &mut Nand,
        cfg: &FtlConfig,
    ) -> Result<
        (
            Checkpoint,
            [u64; LOG_LINKS],
            usize,
            Vec<u32>,
            SimTime,
            SimTime,
        ),
        FtlError,
    > {
        Self::check_config(nand, cfg)?;
        let ckpt_blocks = Self::well_known_ckpt_blocks(nand)?;
        let page_size = nand.geometry().page_size as usize;
        let ppb = nand.geometry().pages_per_block;
        let t0 = nand.now();
        // 1. The newest valid checkpoint record.
        let mut best: Option<(Checkpoint, [u64; LOG_LINKS], usize)> = None;
        let mut page = vec![0u8; page_size];
        let mut t = t0;
        for (ci, &b) in ckpt_blocks.iter().enumerate() {
            for p in 0..ppb {
                match nand.read(Ppa::new(BlockId(b), p), 0, &mut page, &mut [], t0) {
                    Ok(r) if r.erased => break,
                    Ok(r) => {
                        t = t.max(r.done);
                        if let Some(c) = Checkpoint::decode(&page) {
                            let tail = page.len() - 8 * LOG_LINKS;
                            let mut links = [NONE; LOG_LINKS];
                            for (i, l) in links.iter_mut().enumerate() {
                                *l = u64::from_le_bytes(
                                    page[tail + 8 * i..tail + 8 * i + 8]
                                        .try_into()
                                        .unwrap_or([0xFF; 8]),
                                );
                            }
                            if best.as_ref().is_none_or(|(bc, _, _)| c.seq > bc.seq) {
                                best = Some((c, links, ci));
                            }
                        }
                    }
                    Err(NandError::Uncorrectable { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let (ck, rssp_links, active) = best.ok_or(FtlError::NotFormatted)?;
        Ok((ck, rssp_links, active, ckpt_blocks, t0, t))
    }

    pub(crate) fn recover_from(
        &mut self,
        ck: Checkpoint,
        rssp_links: [u64; LOG_LINKS],
        active: usize,
        ckpt_blocks: Vec<u32>,
        t0: SimTime,
        mut t: SimTime,
    ) -> Result<(), FtlError> {
        let wall0 = Instant::now();
        let f = self;
        f.recovering = true;
        let page_size = f.page_size;
        let ppb = f.pages_per_block;
        let mut page = vec![0u8; page_size];
        f.ckpt_blocks = ckpt_blocks;
        f.ckpt_active = active;
        f.ckpt_seq = ck.seq;
        f.commit_seq = ck.next_commit;
        f.life_base = FtlStats::from_words(&ck.lifetime);
        f.next_die = ck.rr;
        // 2. WEAR and bad blocks.
        for (i, &a) in ck.wear.iter().enumerate() {
            t = t.max(f.read_meta_page(a, Kind::Wear, i as u64, &mut page, t0)?);
            for k in 0..page_size / 4 {
                let b = i * page_size / 4 + k;
                if b < f.blocks.len() {
                    f.blocks[b].pe =
                        u32::from_le_bytes(page[k * 4..k * 4 + 4].try_into().unwrap_or([0; 4]));
                }
            }
        }
        for (i, &a) in ck.bbt.iter().enumerate() {
            t = t.max(f.read_meta_page(a, Kind::Bbt, i as u64, &mut page, t0)?);
            for k in 0..page_size * 8 {
                let b = i * page_size * 8 + k;
                if b < f.blocks.len() && page[k / 8] & (1 << (k % 8)) != 0 {
                    f.blocks[b].state = Use::Bad;
                }
            }
        }
        f.wear_pages = ck.wear.clone();
        f.bbt_pages = ck.bbt.clone();
        // 3. MAPT -> MAPS.
        let per = page_size / 8;
        for (mi, &a) in ck.mapt.iter().enumerate() {
            f.maps_pages[mi] = a;
            if a == NONE {
                continue;
            }
            t = t.max(f.read_meta_page(a, Kind::Maps, mi as u64, &mut page, t0)?);
            for k in 0..per {
                let idx = mi * per + k;
                if idx < f.map_pages.len() {
                    f.map_pages[idx] =
                        u64::from_le_bytes(page[k * 8..k * 8 + 8].try_into().unwrap_or([0xFF; 8]));
                }
            }
        }
        // 4. Block states for allocation during redo: erased blocks are free, anything
        //    written is provisionally full (classified after redo).
        for b in 0..f.blocks.len() {
            if f.blocks[b].state == Use::Bad {
                continue;
            }
            if f.ckpt_blocks.contains(&(b as u32)) {
                f.blocks[b].state = Use::Ckpt;
                continue;
            }
            let info = f.nand.block_info(BlockId(b as u32))?;
            f.blocks[b].state = if info.next_page == 0 {
                Use::Free
            } else {
                Use::Full
            };
        }
        f.free_count = f.blocks.iter().filter(|b| b.state == Use::Free).count() as u32;
        let mut live_log_blocks: Vec<(u32, u64)> = Vec::new();
        // 5. Redo from the RSSP.
        let mut rep = RecoveryReport {
            checkpoint_seq: ck.seq,
            ..RecoveryReport::default()
        };
        let mut pending: BTreeMap<u64, (bool, Vec<Entry>)> = BTreeMap::new();
        let mut links = rssp_links;
        let mut expect = ck.rssp_lsn;
        let mut oob = vec![0u8; f.oob_scratch.len()];
        'log: loop {
            let mut found = None;
            for &cand in links.iter() {
                if cand == NONE {
                    break;
                }
                let (b, p) = page_unaddr(cand);
                if b as usize >= f.blocks.len() || p >= ppb {
                    break;
                }
                match f
                    .nand
                    .read(Ppa::new(BlockId(b), p), 0, &mut page, &mut oob, t)
                {
                    Ok(r) if r.erased => break,
                    Ok(r) => {
                        t = t.max(r.done);
                        f.stats.meta_reads += 1;
                        if let Some(lp) = LogPage::decode(&page)
                            && lp.lsn == expect
                        {
                            found = Some((lp, b));
                            break;
                        }
                    }
                    Err(NandError::Uncorrectable { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            let Some((lp, b)) = found else { break 'log };
            rep.log_pages += 1;
            live_log_blocks.push((b, lp.lsn));
            for r in lp.records {
                match r {
                    Record::Rdesc { seq, entries } => pending
                        .entry(seq)
                        .or_insert((false, Vec::new()))
                        .1
                        .extend(entries),
                    Record::GcMove { seq, entries } => {
                        let e = pending.entry(seq).or_insert((true, Vec::new()));
                        e.0 = true;
                        e.1.extend(entries);
                    }
                    Record::Rdesca { seq, entries } => pending
                        .entry(seq)
                        .or_insert((false, Vec::new()))
                        .1
                        .extend(entries),
                    Record::Done { seq } => {
                        if let Some((gc, entries)) = pending.remove(&seq) {
                            t = t.max(f.redo(gc, &entries, t)?);
                            rep.commits_redone += 1;
                        }
                    }
                    Record::Trim { lpid, n } => {
                        for l in lpid..lpid.saturating_add(n).min(f.lbas) {
                            t = t.max(f.map_set(l, NONE, t)?);
                        }
                    }
                    Record::Ext { lpid, bytes } => {
                        if lpid < f.lbas && bytes.len() == f.cfg.ext_bytes as usize {
                            let ext = bytes.len();
                            let (s, tt) = f.map_slot((lpid / f.map_entries_per_page) as u32, t)?;
                            let o = (lpid % f.map_entries_per_page) as usize * ext;
                            f.map_slots[s].ext[o..o + ext].copy_from_slice(&bytes);
                            f.map_slots[s].dirty = true;
                            t = t.max(tt);
                        }
                    }
                }
            }
            links = lp.links;
            expect += 1;
            f.log.next_lsn = expect;
        }
        if f.log.next_lsn < ck.rssp_lsn {
            f.log.next_lsn = ck.rssp_lsn;
        }
        // 6. Commits without a done record: verify every sector, apply all or nothing.
        for (seq, (gc, entries)) in pending {
            let (ok, tt) = f.verify(seq, &entries, t)?;
            t = t.max(tt);
            if ok {
                t = t.max(f.redo(gc, &entries, t)?);
                rep.commits_verified += 1;
            } else {
                rep.commits_discarded += 1;
            }
            f.commit_seq = f.commit_seq.max(seq + 1);
        }
        // 7. Rebuild GBITV and block classes from the recovered MAP and tables.
        for mp in 0..f.map_pages.len() as u32 {
            // A MAP page never written and not touched by the redo maps nothing.
            if f.map_pages[mp as usize] == NONE && f.map_slot_of[mp as usize] == u32::MAX {
                continue;
            }
            let (s, tt) = f.map_slot(mp, t)?;
            t = t.max(tt);
            for i in 0..f.map_slots[s].entries.len() {
                let e = f.map_slots[s].entries[i];
                if e != NONE && e & CACHED == 0 {
                    let (b, _, _) = unpack(e);
                    if (b as usize) < f.blocks.len() {
                        f.set_valid(e, true);
                    }
                }
            }
        }
        let live_meta: Vec<u64> = f
            .map_pages
            .iter()
            .chain(f.maps_pages.iter())
            .chain(f.wear_pages.iter())
            .chain(f.bbt_pages.iter())
            .copied()
            .filter(|&a| a != NONE)
            .collect();
        for a in live_meta {
            let (b, _) = page_unaddr(a);
            let blk = &mut f.blocks[b as usize];
            blk.meta_live += 1;
            if blk.state == Use::Full {
                blk.state = Use::Meta;
            }
        }
        for (b, lsn) in live_log_blocks {
            let blk = &mut f.blocks[b as usize];
            if blk.state == Use::Full {
                blk.state = Use::Log;
                f.log_blocks += 1;
            }
            if blk.state == Use::Log {
                blk.max_lsn = blk.max_lsn.max(lsn);
            }
        }
        // Metadata written during this recovery (MAP evictions) sits in open META blocks.
        for s in 0..3 {
            for die in 0..f.dies as usize {
                if let Some((bi, _)) = f.open_blocks[s][die] {
                    let b = (die as u32 * f.blocks_per_die + bi) as usize;
                    f.blocks[b].state = if s == META { Use::Meta } else { Use::Full };
                }
                f.open_blocks[s][die] = None;
            }
        }
        // 8. Erase every written block with nothing live (data blocks open at the crash,
        //    log blocks before the RSSP, superseded metadata), then start a new log segment
        //    and take a checkpoint that makes it the redo start.
        for b in 0..f.blocks.len() as u32 {
            let blk = f.blocks[b as usize];
            if blk.state == Use::Full && blk.valid == 0 {
                f.erase_block(b, t)?;
            }
        }
        f.start_log()?;
        f.log.since_ckpt = 0;
        t = f.checkpoint(t)?;
        f.recovering = false;
        f.shrink_cache();
        rep.modeled_s = t.since(t0) as f64 / 1e9;
        rep.wall_s = wall0.elapsed().as_secs_f64();
        f.recovery = Some(rep);
        f.reset_stats();
        // 9. Refill the free pool before the first command. Every crash leaves the blocks
        //    that were open partly written; without this, cuts that keep striking before
        //    the first GC would drain the pool one recovery at a time. The GC here is
        //    ordinary post-recovery work (counted in the new stats, crash-safe like any
        //    GC); a device that is simply full stays readable.
        match f.ensure_free(0, t) {
            Ok(()) | Err(FtlError::NoSpace) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn redo(
        &mut self,
        gc: bool,
        entries: &[Entry],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        // Amendments (later entries for the same LPID) supersede the first location; the
        // old location of GC moves is the first entry's.
        let mut order: Vec<Entry> = Vec::with_capacity(entries.len());
        let mut at_of: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
        for e in entries {
            match at_of.get(&e.lpid) {
                Some(&i) => order[i].new = e.new,
                None => {
                    at_of.insert(e.lpid, order.len());
                    order.push(*e);
                }
            }
        }
        let mut t = at;
        for e in &order {
            if e.lpid >= self.lbas {
                continue;
            }
            if gc {
                let (cur, tt) = self.map_get(e.lpid, t)?;
                t = t.max(tt);
                if cur != e.old {
                    continue;
                }
            }
            t = t.max(self.map_set(e.lpid, e.new, t)?);
        }
        Ok(t)
    }

    /// Does every sector of a commit hold what its descriptor says (TAG LPID, sequence and CRC)?
    pub(crate) fn verify(
        &mut self,
        seq: u64,
        entries: &[Entry],
        at: SimTime,
    ) -> Result<(bool, SimTime), FtlError> {
        // Later entries for the same LPID (amendments) supersede earlier ones.
        let mut last: BTreeMap<u64, u64> = BTreeMap::new();
        for e in entries {
            last.insert(e.lpid, e.new);
        }
        let mut t = at;
        let mut data = vec![0u8; self.sector_size];
        let mut oob = vec![0u8; self.oob_per_sector];
        for (&lpid, &new) in &last {
            let (b, p, s) = unpack(new);
            if b as usize >= self.blocks.len()
                || p >= self.pages_per_block
                || s >= self.sectors_per_page
            {
                return Ok((false, t));
            }
            match self
                .nand
                .read(Ppa::new(BlockId(b), p), s, &mut data, &mut oob, at)
            {
                Ok(r) if !r.erased => {
                    t = t.max(r.done);
                    self.stats.meta_reads += 1;
                    match Tag::read(&oob[..TAG_BYTES]) {
                        Some(tag)
                            if tag.kind == Kind::Data
                                && tag.id == lpid
                                && tag.seq == seq as u32
                                && tag.crc == crc32c::crc32c(&data) => {}
                        _ => return Ok((false, t)),
                    }
                }
                Ok(_) | Err(NandError::Uncorrectable { .. }) => return Ok((false, t)),
                Err(e) => return Err(e.into()),
            }
        }
        Ok((true, t))
    }
}

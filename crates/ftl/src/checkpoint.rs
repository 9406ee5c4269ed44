//! Fuzzy incremental checkpoints (batch-io §6, §7.2.7).

use crate::format::{Checkpoint, Kind, LOG_LINKS, NONE};
use crate::ftl::*;
use crate::{FtlError, FtlStats};
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;

impl Ftl {
    /// Take a fuzzy incremental checkpoint (batch-io §6): note the redo scan start point,
    /// write dirty MAP pages, dirty MAPS pages, WEAR and the bad-block table, then the
    /// checkpoint record at the well-known double-buffered location; finally reclaim log
    /// blocks before the RSSP and metadata blocks with no live page.
    pub fn checkpoint(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        // Top up the free pool first (only possible while nothing is buffered; otherwise
        // the low-water mark already covers one commit plus the metadata pages).
        if !self.recovering {
            self.ensure_free(0, at)?;
        }
        let mut t = self.commit_inner(false, at)?;
        t = t.max(self.force_log(t)?);
        let rssp_lsn = self.log.next_lsn;
        let rssp_links = self.log_candidates()?;
        // Dirty MAP pages.
        for s in 0..self.map_slots.len() {
            if self.map_slots[s].dirty {
                t = t.max(self.write_map_page(s, t)?);
            }
        }
        // Dirty MAPS pages.
        let per = self.page_size / 8;
        for mi in 0..self.maps_page_dirty.len() {
            if !self.maps_page_dirty[mi] && self.maps_pages[mi] != NONE {
                continue;
            }
            let mut page = vec![0xFFu8; self.page_size];
            for (k, a) in self.map_pages.iter().skip(mi * per).take(per).enumerate() {
                page[k * 8..k * 8 + 8].copy_from_slice(&a.to_le_bytes());
            }
            let (addr, tt) = self.write_meta_page(Kind::Maps, mi as u64, &page, t)?;
            t = t.max(tt);
            let old = std::mem::replace(&mut self.maps_pages[mi], addr);
            self.release_meta_page(old);
            self.maps_page_dirty[mi] = false;
        }
        // WEAR and the bad-block table, whole (they are small).
        let mut wear_bytes = Vec::with_capacity(self.blocks.len() * 4);
        let mut bbt_bytes = vec![0u8; self.blocks.len().div_ceil(8)];
        for (b, blk) in self.blocks.iter().enumerate() {
            wear_bytes.extend_from_slice(&blk.pe.to_le_bytes());
            if blk.state == Use::Bad {
                bbt_bytes[b / 8] |= 1 << (b % 8);
            }
        }
        let mut new_wear = Vec::new();
        for (i, chunk) in wear_bytes.chunks(self.page_size).enumerate() {
            let mut page = vec![0u8; self.page_size];
            page[..chunk.len()].copy_from_slice(chunk);
            let (addr, tt) = self.write_meta_page(Kind::Wear, i as u64, &page, t)?;
            t = t.max(tt);
            new_wear.push(addr);
        }
        let mut new_bbt = Vec::new();
        for (i, chunk) in bbt_bytes.chunks(self.page_size).enumerate() {
            let mut page = vec![0u8; self.page_size];
            page[..chunk.len()].copy_from_slice(chunk);
            let (addr, tt) = self.write_meta_page(Kind::Bbt, i as u64, &page, t)?;
            t = t.max(tt);
            new_bbt.push(addr);
        }
        let record = Checkpoint {
            seq: self.ckpt_seq + 1,
            rssp_lsn,
            rssp_addr: rssp_links[0],
            next_commit: self.commit_seq,
            lbas: self.lbas,
            ext_bytes: self.cfg.ext_bytes,
            rr: [self.next_die[0], self.next_die[1], self.next_die[2]],
            mapt: self.maps_pages.clone(),
            wear: new_wear.clone(),
            bbt: new_bbt.clone(),
            // This checkpoint's own record program and reclaim erases count after it.
            lifetime: self
                .lifetime_stats()
                .plus(&FtlStats {
                    checkpoints: 1,
                    ..FtlStats::default()
                })
                .to_words(),
            last_recovery_ns: self.recovery.map_or([0, 0], |r| {
                [(r.modeled_s * 1e9) as u64, (r.wall_s * 1e9) as u64]
            }),
        };
        t = t.max(self.write_checkpoint_record(&record, rssp_links, t)?);
        // The new tables are durable: the old WEAR/BBT pages are dead.
        for a in std::mem::replace(&mut self.wear_pages, new_wear) {
            self.release_meta_page(a);
        }
        for a in std::mem::replace(&mut self.bbt_pages, new_bbt) {
            self.release_meta_page(a);
        }
        self.ckpt_seq = record.seq;
        self.log.since_ckpt = 0;
        self.stats.checkpoints += 1;
        // Reclaim: log blocks wholly before the RSSP, metadata blocks with nothing live.
        let cur_log = [Some(self.log.block), self.log.next_block];
        for b in 0..self.blocks.len() as u32 {
            let blk = self.blocks[b as usize];
            let dead_log =
                blk.state == Use::Log && blk.max_lsn < rssp_lsn && !cur_log.contains(&Some(b));
            let dead_meta = blk.state == Use::Meta && blk.meta_live == 0;
            if dead_log || dead_meta {
                self.blocks[b as usize].valid = 0;
                self.erase_block(b, t)?;
            }
        }
        Ok(t)
    }

    pub(crate) fn write_checkpoint_record(
        &mut self,
        c: &Checkpoint,
        rssp_links: [u64; LOG_LINKS],
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let mut page = vec![0u8; self.page_size];
        c.encode(&mut page)?;
        // The candidate links of the RSSP go after the record so recovery can skip a failed page.
        let tail = page.len() - 8 * LOG_LINKS;
        for (i, l) in rssp_links.iter().enumerate() {
            page[tail + 8 * i..tail + 8 * i + 8].copy_from_slice(&l.to_le_bytes());
        }
        for _ in 0..4 * CKPT_RING {
            let b = self.ckpt_blocks[self.ckpt_active];
            let info = self.nand.block_info(BlockId(b))?;
            if info.next_page >= self.pages_per_block || self.blocks[b as usize].state == Use::Bad {
                // Move to the next good candidate, erased first; the newest record stays
                // where it is until a newer one is written.
                let n = self.ckpt_blocks.len();
                let next = (1..n)
                    .map(|k| (self.ckpt_active + k) % n)
                    .find(|&i| self.blocks[self.ckpt_blocks[i] as usize].state != Use::Bad);
                let Some(next) = next else { break };
                let nb = self.ckpt_blocks[next];
                self.stats.meta_erases += 1;
                match self.nand.erase(BlockId(nb), at) {
                    Ok(_) => {
                        self.blocks[nb as usize].pe += 1;
                        self.ckpt_active = next;
                    }
                    Err(NandError::EraseFailed { .. }) => {
                        self.stats.erase_failures += 1;
                        self.stats.grown_bad_blocks += 1;
                        self.blocks[nb as usize].state = Use::Bad;
                    }
                    Err(e) => return Err(e.into()),
                }
                continue;
            }
            let ids = vec![c.seq; self.sectors_per_page as usize];
            let mut oob = std::mem::take(&mut self.oob_scratch);
            tags_for(
                &mut oob,
                self.oob_per_sector,
                self.sector_size,
                &page,
                Kind::Ckpt,
                &ids,
                c.seq,
            );
            let r = self
                .nand
                .program(Ppa::new(BlockId(b), info.next_page), &page, &oob, at);
            self.oob_scratch = oob;
            self.stats.meta_programs += 1;
            match r {
                Ok(done) => return Ok(done),
                Err(NandError::ProgramFailed { .. }) => {
                    self.stats.program_failures += 1;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(FtlError::Corrupt(
            "cannot write the checkpoint record".into(),
        ))
    }
}

//! Finding the checkpoint to recover from (batch-io §6, §7.2.7): every written page of
//! the checkpoint ring is read (with read retries), record heads are collected with the
//! newest sequence each ring block names, and the newest record whose body reads back
//! whole is used.
//!
//! Choices made here: damage a crash cannot cause (a programmed page no longer what was
//! written, an erased page below a block's write pointer) that is newer than the record
//! we would use is refused with `FtlError::Corrupt` rather than recovering from an older
//! record, which would serve stale data silently; a torn program (a crash during a
//! checkpoint) is not damage, nor, on an image opened after an unclean stop, the part of
//! the one record written after the last sync that reached the host's disk.

use super::*;
use crate::stats::Counters;

/// Reads of metadata pages at recovery: all from `t0`, each re-read up to `retries`
/// times when ECC fails, into one page buffer.
pub(super) struct MetaReader {
    t0: SimTime,
    retries: u32,
    /// Retries counted while the FTL is not built yet (not carried into its counters).
    retried: Counters,
    page: Vec<u8>,
}

impl MetaReader {
    /// The body of checkpoint record `head`, `None` when a page of it is out of range,
    /// erased or unreadable; `t` is moved to the last read's end.
    pub(super) fn body(
        &mut self,
        nand: &mut Nand,
        head: &RecordHead,
        t: &mut SimTime,
    ) -> Result<Option<Vec<u8>>, FtlError> {
        let ppb = nand.geometry().pages_per_block;
        let mut body = Vec::with_capacity(head.body_pages.len() * self.page.len());
        for &a in &head.body_pages {
            let (b, p) = page_unaddr(a);
            if b >= nand.addr().blocks() || p >= ppb {
                return Ok(None);
            }
            let ppa = Ppa::new(BlockId(b), p);
            let (t0, retries) = (self.t0, self.retries);
            match read_with_retries(
                nand,
                ppa,
                0,
                &mut self.page,
                &mut [],
                t0,
                retries,
                &mut self.retried,
            ) {
                Ok(r) if !r.erased => {
                    *t = (*t).max(r.done);
                    body.extend_from_slice(&self.page);
                }
                Ok(_) | Err(NandError::Uncorrectable { .. }) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Some(body))
    }
}

/// What reading every page of the checkpoint ring found.
pub(super) struct RingScan {
    /// Heads that decode: (head, its RSSP links, ring index, page).
    heads: Vec<(RecordHead, [u64; LOG_LINKS], usize, u32)>,
    /// Pages of the ring that were programmed completely but are no longer what was
    /// written (a crash never does that: a torn program reads as uncorrectable, an
    /// interrupted erase leaves the whole block erased), with the newest record
    /// sequence they could have held: (ring index, page, sequence if known).
    damaged: Vec<(usize, u32, Option<u64>)>,
    /// The newest sequence any page of each ring block names (heads and bodies).
    newest_in: Vec<Option<u64>>,
    /// A page in the older checkpoint format was seen.
    older: bool,
    /// When the last read ended.
    t: SimTime,
}

impl RingScan {
    /// Read every written page of the ring blocks `ckpt_blocks`.
    pub(super) fn read(
        nand: &mut Nand,
        ckpt_blocks: &[u32],
        rd: &mut MetaReader,
    ) -> Result<RingScan, FtlError> {
        let mut ring = RingScan {
            heads: Vec::new(),
            damaged: Vec::new(),
            newest_in: vec![None; ckpt_blocks.len()],
            older: false,
            t: rd.t0,
        };
        let mut oob = vec![0u8; nand.geometry().oob_per_page() as usize];
        for (ci, &b) in ckpt_blocks.iter().enumerate() {
            ring.read_block(nand, (ci, b), rd, &mut oob)?;
        }
        Ok(ring)
    }

    /// Read the written pages of ring block `b` (ring index `ci`).
    pub(super) fn read_block(
        &mut self,
        nand: &mut Nand,
        (ci, b): (usize, u32),
        rd: &mut MetaReader,
        oob: &mut [u8],
    ) -> Result<(), FtlError> {
        let ppb = nand.geometry().pages_per_block;
        let written = nand.block_info(BlockId(b))?.next_page.min(ppb);
        let mut erased_below = Vec::new();
        let mut programmed = false;
        for p in 0..written {
            let ppa = Ppa::new(BlockId(b), p);
            let (t0, retries) = (rd.t0, rd.retries);
            let r = read_with_retries(
                nand,
                ppa,
                0,
                &mut rd.page,
                oob,
                t0,
                retries,
                &mut rd.retried,
            );
            match r {
                Ok(r) if r.erased => erased_below.push(p),
                Ok(r) => {
                    programmed = true;
                    self.t = self.t.max(r.done);
                    self.note_page(&rd.page, &oob[..TAG_BYTES], ci, p);
                }
                // A torn or failed program (a crash during a checkpoint).
                Err(NandError::Uncorrectable {
                    bit_errors: u32::MAX,
                    ..
                }) => {
                    programmed = true;
                }
                Err(NandError::Uncorrectable { .. }) => {
                    programmed = true;
                    self.damaged.push((ci, p, None));
                }
                Err(e) => return Err(e.into()),
            }
        }
        if programmed {
            self.damaged.extend(
                erased_below
                    .into_iter()
                    .filter(|&p| erased_is_damage(p, written))
                    .map(|p| (ci, p, None)),
            );
        }
        Ok(())
    }

    /// A programmed ring page that read back: a head, a body page, or damage.
    pub(super) fn note_page(&mut self, page: &[u8], tag: &[u8], ci: usize, p: u32) {
        self.older |= Checkpoint::is_older_version(page);
        let tag = Tag::read(tag);
        if let Some(tag) = tag
            && matches!(tag.kind, Kind::Ckpt | Kind::CkptBody)
        {
            self.newest_in[ci] = self.newest_in[ci].max(Some(tag.id));
        }
        match Checkpoint::decode_head(page) {
            Some(h) => self.heads.push((h, rssp_links_of(page), ci, p)),
            None => {
                if let Some(tag) = tag
                    && tag.kind == Kind::Ckpt
                {
                    self.damaged.push((ci, p, Some(tag.id)));
                }
            }
        }
    }

    /// Refuse record `seq` (its head at ring index and page `at`) when its body is
    /// damaged or damage newer than it exists. A head is written after its body: a whole
    /// head with a damaged body, or a damaged head newer than the record we would use,
    /// means the checkpoint area was changed after the fact; going on from an older
    /// record would serve stale data silently.
    ///
    /// `unclean`: the image was opened after its host process stopped uncleanly (or its
    /// host lost power). A checkpoint is synced to the host's disk right after its ring
    /// pages are written, before anything relies on it, so the one record written after
    /// the last sync may have reached the disk in part (the host writes pages back in any
    /// order): a head page of the next record (id `seq + 1`) that does not decode is that
    /// unsynced tail (its OOB reached the disk, its data did not), not a page changed
    /// after the fact. Damage of a later record, and damage that a host crash cannot
    /// cause (an unreadable page, an erased page below a written one: a block's page
    /// states reach the disk together), are still refused.
    pub(super) fn refuse_damage(
        &self,
        ckpt_blocks: &[u32],
        seq: u64,
        (active, at_page): (usize, u32),
        body_damaged: bool,
        unclean: bool,
    ) -> Result<(), FtlError> {
        let newer_damaged = self.damaged.iter().find(|&&(ci, p, known)| match known {
            Some(s) if unclean => s > seq + 1,
            Some(s) => s > seq,
            None if ci == active => p > at_page,
            None => self.newest_in[ci].is_none_or(|n| n > seq),
        });
        if !body_damaged && newer_damaged.is_none() {
            return Ok(());
        }
        let what = match newer_damaged {
            Some(&(ci, p, _)) => format!(
                "the checkpoint ring is damaged at block {} page {p}, after record {seq}",
                ckpt_blocks[ci]
            ),
            None => format!("checkpoint record {seq} is damaged"),
        };
        Err(FtlError::Corrupt(format!(
            "{what} (its pages were changed after they were written); an older record \
             would lose the writes made since: check the image with `csd device check`"
        )))
    }
}

impl Ftl {
    /// The newest checkpoint record of the ring whose head and body read back whole;
    /// damage newer than it (pages changed after they were written) is refused.
    pub(super) fn find_checkpoint(nand: &mut Nand, cfg: &FtlConfig) -> Result<Found, FtlError> {
        Self::check_config(nand, cfg)?;
        let ckpt_blocks = Self::well_known_ckpt_blocks(nand)?;
        let mut rd = MetaReader {
            t0: nand.now(),
            retries: cfg.read_retries * crate::read::META_RETRY_FACTOR,
            retried: Counters::default(),
            page: vec![0u8; nand.geometry().page_size as usize],
        };
        let mut ring = RingScan::read(nand, &ckpt_blocks, &mut rd)?;
        // The newest record whose body reads back whole.
        ring.heads.sort_by_key(|h| std::cmp::Reverse(h.0.ckpt.seq));
        let mut t = ring.t;
        for (head, rssp_links, active, at_page) in std::mem::take(&mut ring.heads) {
            let body = rd.body(nand, &head, &mut t)?;
            let ck = body.and_then(|body| Checkpoint::with_body(&head, &body));
            ring.refuse_damage(
                &ckpt_blocks,
                head.ckpt.seq,
                (active, at_page),
                ck.is_none(),
                nand.opened_unclean(),
            )?;
            if let Some(ck) = ck {
                return Ok(Found {
                    ck,
                    rssp_links,
                    active,
                    newest_in: ring.newest_in,
                    ckpt_blocks,
                    t0: rd.t0,
                    t,
                });
            }
        }
        if ring.older {
            return Err(FtlError::Corrupt(
                "the FTL on this device was written by an older csd (checkpoint format 1); \
                 re-create the image, or format it (its data is lost)"
                    .into(),
            ));
        }
        Err(FtlError::NotFormatted)
    }
}

/// The RSSP's candidate links, kept in the last bytes of the record's page.
pub(super) fn rssp_links_of(page: &[u8]) -> [u64; LOG_LINKS] {
    let tail = page.len() - 8 * LOG_LINKS;
    let mut links = [NONE; LOG_LINKS];
    for (i, l) in links.iter_mut().enumerate() {
        *l = u64::from_le_bytes(
            page[tail + 8 * i..tail + 8 * i + 8]
                .try_into()
                .unwrap_or([0xFF; 8]),
        );
    }
    links
}

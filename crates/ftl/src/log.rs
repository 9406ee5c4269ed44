//! The recovery log (batch-io §4): logically sequential, physically scattered. Each log
//! page carries its LSN, a back link and forward links (the next candidate pages); a log
//! write that fails retries at the next link. Log pages live in their own block chain
//! (not in the HOT stream's WBLOCKs as in OX) so that the forward links are exact.

use crate::FtlError;
use crate::format::{Entry, Kind, LOG_LINKS, LogPage, NONE, Record, page_addr, page_unaddr};
use crate::ftl::*;
use crate::stats::Count;
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;

/// The log's cursor, the records waiting for the next log page and the count of log
/// blocks. Only this module changes it (recovery places the cursor through
/// [`Log::resume`] and [`Log::replayed_to`]).
#[derive(Debug)]
pub(crate) struct Log {
    /// LSN of the next log page.
    next_lsn: u64,
    /// Address of the last log page written (the next page's back link).
    prev: u64,
    /// Block of the cursor.
    block: u32,
    /// Page of the cursor in `block`.
    page: u32,
    /// The block the log continues in once `block` is full (taken when the forward links
    /// reach past `block`).
    next_block: Option<u32>,
    /// Records waiting for the next log page.
    pending: Vec<Record>,
    /// Encoded size of `pending`.
    pending_bytes: usize,
    /// Log pages written since the last checkpoint.
    since_ckpt: u32,
    /// Blocks currently holding (or reserved for) log pages.
    block_count: u32,
    /// Scratch page for log pages.
    page_scratch: Vec<u8>,
}

impl Log {
    /// An empty log (its first block is taken by [`Ftl::start_log`]).
    pub(crate) fn new(page_size: usize) -> Log {
        Log {
            next_lsn: 1,
            prev: NONE,
            block: 0,
            page: 0,
            next_block: None,
            pending: Vec::new(),
            pending_bytes: 0,
            since_ckpt: 0,
            block_count: 0,
            page_scratch: vec![0u8; page_size],
        }
    }

    /// LSN of the next log page (the redo start of a checkpoint taken now).
    #[inline]
    pub(crate) fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// Encoded bytes of the records waiting for a log page.
    #[inline]
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Log pages written since the last checkpoint.
    #[inline]
    pub(crate) fn since_checkpoint(&self) -> u32 {
        self.since_ckpt
    }

    /// Blocks holding (or reserved for) log pages.
    #[inline]
    pub(crate) fn blocks(&self) -> u32 {
        self.block_count
    }

    /// The blocks the log writes to now: the cursor's and the one it continues in.
    #[inline]
    pub(crate) fn current_blocks(&self) -> [Option<u32>; 2] {
        [Some(self.block), self.next_block]
    }

    /// A checkpoint was written: the log restarts its count of pages since one.
    pub(crate) fn checkpointed(&mut self) {
        self.since_ckpt = 0;
    }

    /// A block of the log was erased (its pages are all before the redo start).
    pub(crate) fn block_erased(&mut self) {
        self.block_count = self.block_count.saturating_sub(1);
    }

    /// One more block holds log pages (recovery found the cursor in it).
    pub(crate) fn block_added(&mut self) {
        self.block_count += 1;
    }

    /// `n` blocks hold log pages (recovery counted them).
    pub(crate) fn set_block_count(&mut self, n: u32) {
        self.block_count = n;
    }

    /// Continue the log at page `page` of `block` (then `next_block`) with LSN `lsn`;
    /// nothing is pending and no page was written since the checkpoint.
    pub(crate) fn resume(&mut self, (block, page): (u32, u32), next_block: Option<u32>, lsn: u64) {
        debug_assert!(self.pending.is_empty(), "log resumed with records pending");
        self.block = block;
        self.page = page;
        self.next_block = next_block;
        self.next_lsn = lsn;
        self.since_ckpt = 0;
    }

    /// The redo reached LSN `lsn` (the next page it expects).
    pub(crate) fn replayed_to(&mut self, lsn: u64) {
        self.next_lsn = lsn;
    }

    /// The pending records' size agrees with the records.
    #[inline]
    fn check(&self) {
        debug_assert_eq!(
            self.pending_bytes,
            self.pending.iter().map(Record::size).sum::<usize>(),
            "log: pending byte count disagrees with the {} pending records",
            self.pending.len()
        );
    }
}

impl Ftl {
    pub(crate) fn start_log(&mut self) -> Result<(), FtlError> {
        let b = self.take_any_free_block()?;
        self.blocks.set_state(b, Use::Log);
        self.log.block_count += 1;
        self.log.block = b;
        self.log.page = 0;
        self.log.next_block = None;
        self.log.prev = NONE;
        Ok(())
    }

    /// The next `LOG_LINKS` candidate page addresses of the log, from its cursor.
    pub(crate) fn log_candidates(&mut self) -> Result<[u64; LOG_LINKS], FtlError> {
        // A page written at the cursor links to the LOG_LINKS pages after it, which reach
        // into the next block once this many pages or fewer are left.
        if self.geo.pages_per_block() - self.log.page <= LOG_LINKS as u32
            && self.log.next_block.is_none()
        {
            let b = self.take_any_free_block()?;
            self.blocks.set_state(b, Use::Log);
            self.log.block_count += 1;
            self.log.next_block = Some(b);
        }
        let mut c = [NONE; LOG_LINKS];
        let (mut b, mut p) = (self.log.block, self.log.page);
        for slot in c.iter_mut() {
            if p == self.geo.pages_per_block() {
                b = self.log.next_block.unwrap_or(b);
                p = 0;
            }
            *slot = page_addr(b, p);
            p += 1;
        }
        Ok(c)
    }

    pub(crate) fn log_append(&mut self, r: Record) {
        self.log.pending_bytes += r.size();
        self.log.pending.push(r);
    }

    /// Append entry records of one kind, split so that each fits a log page.
    pub(crate) fn log_entries(
        &mut self,
        make: fn(u64, Vec<Entry>) -> Record,
        seq: u64,
        entries: Vec<Entry>,
    ) {
        let per = (LogPage::capacity(self.geo.page_size()) - 32) / 24;
        for chunk in entries.chunks(per.max(1)) {
            self.log_append(make(seq, chunk.to_vec()));
        }
    }

    /// Write every pending record to the log (the WAL force). Returns when durable.
    pub(crate) fn force_log(&mut self, at: SimTime) -> Result<SimTime, FtlError> {
        let mut t = at;
        let cap = LogPage::capacity(self.geo.page_size());
        while !self.log.pending.is_empty() {
            let mut used = 0;
            let mut n = 0;
            for r in &self.log.pending {
                if used + r.size() > cap {
                    break;
                }
                used += r.size();
                n += 1;
            }
            let n = n.max(1);
            let records: Vec<Record> = self.log.pending.drain(..n).collect();
            self.log.pending_bytes -= used;
            self.log.check();
            t = t.max(self.write_log_page(records, at)?);
        }
        self.log.pending_bytes = 0;
        Ok(t)
    }

    pub(crate) fn write_log_page(
        &mut self,
        records: Vec<Record>,
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let mut page = std::mem::take(&mut self.log.page_scratch);
        page.resize(self.geo.page_size(), 0);
        let mut oob = self.scratch.take_oob();
        let result = (|| {
            for _attempt in 0..(4 * self.geo.pages_per_block()) {
                let cands = self.log_candidates()?;
                let (b, p) = page_unaddr(cands[0]);
                // Links of this page: the candidates after it.
                let mut links = [NONE; LOG_LINKS];
                {
                    let (mut lb, mut lp) = (b, p + 1);
                    for l in links.iter_mut() {
                        if lp == self.geo.pages_per_block() {
                            lb = self.log.next_block.unwrap_or(lb);
                            lp = 0;
                        }
                        *l = page_addr(lb, lp);
                        lp += 1;
                    }
                }
                let lp = LogPage {
                    lsn: self.log.next_lsn,
                    prev: self.log.prev,
                    links,
                    records: records.clone(),
                };
                lp.encode(&mut page);
                let ids = vec![self.log.next_lsn; self.geo.sectors_per_page() as usize];
                tags_for(
                    &mut oob,
                    (self.geo.oob_per_sector(), self.geo.sector_size()),
                    &page,
                    Kind::Log,
                    &ids,
                    self.commit.next_seq(),
                    None,
                );
                let r = self.nand.program(Ppa::new(BlockId(b), p), &page, &oob, at);
                self.counters.add(Count::MetaPrograms, 1);
                // The cursor moves past this candidate whatever happened.
                self.log.page = p + 1;
                if b != self.log.block {
                    self.log.block = b;
                    self.log.next_block = None;
                }
                if self.log.page == self.geo.pages_per_block()
                    && let Some(nb) = self.log.next_block.take()
                {
                    self.log.block = nb;
                    self.log.page = 0;
                }
                match r {
                    Ok(done) => {
                        self.blocks.log_page_written(b, self.log.next_lsn);
                        self.log.prev = page_addr(b, p);
                        self.log.next_lsn += 1;
                        self.log.since_ckpt += 1;
                        self.counters.add(Count::LogPages, 1);
                        return Ok(done);
                    }
                    Err(NandError::ProgramFailed { .. }) => {
                        // Retry at the next link (batch-io §4.3); the block stays a log block.
                        self.counters.add(Count::ProgramFailures, 1);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(FtlError::NoSpace)
        })();
        self.scratch.put_oob(oob);
        self.log.page_scratch = page;
        result
    }
}

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

impl Ftl {
    pub(crate) fn start_log(&mut self) -> Result<(), FtlError> {
        let b = self.take_any_free_block()?;
        self.blocks[b as usize].state = Use::Log;
        self.log_blocks += 1;
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
            self.blocks[b as usize].state = Use::Log;
            self.log_blocks += 1;
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
        let mut page = std::mem::take(&mut self.page_scratch);
        page.resize(self.geo.page_size(), 0);
        let mut oob = std::mem::take(&mut self.oob_scratch);
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
                    self.commit_seq,
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
                        let blk = &mut self.blocks[b as usize];
                        blk.max_lsn = blk.max_lsn.max(self.log.next_lsn);
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
        self.oob_scratch = oob;
        self.page_scratch = page;
        result
    }
}

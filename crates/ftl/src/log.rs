//! The recovery log (batch-io §4): logically sequential, physically scattered. Each log
//! page carries its LSN, a back link and forward links (the next candidate pages); a log
//! write that fails retries at the next link. Log pages live in chains of blocks of their
//! own (not in the HOT stream's WBLOCKs as in OX) so that the forward links are exact.
//!
//! The log spreads over `K` chains (`csd_sim::FtlPolicy::log_chains`), chain `c` on die
//! `c * dies / K` (dies are numbered channel-first, so the chains walk the channels
//! first). The page of LSN `n` goes to chain `n mod K`, and its forward links are the
//! candidates of the chain that page `n + 1` goes to: recovery follows the links page by
//! page in LSN order, as with one chain, and needs neither `K` nor a merge. A chain whose
//! die has no free block continues on any die. With `K = 1` every choice is the one csd
//! made before chains existed (any free block, the same links).
//!
//! Choices: round robin by LSN rather than "the least busy die", so that the FTL's
//! decisions never depend on modeled time (docs/time-model.md). With more than one chain
//! a force returns when its pages and every earlier log page are durable: recovery stops
//! at the first LSN it cannot find, so a page is only worth acknowledging with all its
//! predecessors (one chain keeps returning the page's own completion, as before).

use crate::FtlError;
use crate::format::{Entry, Kind, LOG_LINKS, LogPage, NONE, Record, page_addr, page_unaddr};
use crate::ftl::*;
use crate::stats::Count;
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;

/// One chain of log blocks on one die: its cursor and the block it continues in.
#[derive(Debug, Clone, Copy)]
struct Chain {
    /// Block of the cursor.
    block: u32,
    /// Page of the cursor in `block`.
    page: u32,
    /// The block the chain continues in once `block` is full (taken when the forward
    /// links reach past `block`).
    next_block: Option<u32>,
}

/// The log's chains, the records waiting for the next log page and the count of log
/// blocks. Only this module changes it (recovery places a cursor through
/// [`Log::resume`] and [`Log::replayed_to`]).
#[derive(Debug)]
pub(crate) struct Log {
    /// LSN of the next log page.
    next_lsn: u64,
    /// Address of the last log page written (the next page's back link).
    prev: u64,
    /// The chains: the page of LSN `n` goes to chain `n % chains.len()`. `None`: not
    /// started (it takes a block when it first needs one).
    chains: Vec<Option<Chain>>,
    /// Records waiting for the next log page.
    pending: Vec<Record>,
    /// Encoded size of `pending`.
    pending_bytes: usize,
    /// Log pages written since the last checkpoint.
    since_ckpt: u32,
    /// Blocks currently holding (or reserved for) log pages.
    block_count: u32,
    /// When every log page written so far is durable (the latest completion of a log
    /// page program): a force completes no earlier, so that a page is acknowledged only
    /// with every page before it in LSN order, which is the order recovery replays.
    pub(crate) durable: SimTime,
    /// Scratch page for log pages.
    page_scratch: Vec<u8>,
}

impl Log {
    /// An empty log of `chains` chains (their first blocks are taken by
    /// [`Ftl::start_log`]).
    pub(crate) fn new(page_size: usize, chains: u32) -> Log {
        Log {
            next_lsn: 1,
            prev: NONE,
            chains: vec![None; chains.max(1) as usize],
            pending: Vec::new(),
            pending_bytes: 0,
            since_ckpt: 0,
            block_count: 0,
            durable: SimTime::ZERO,
            page_scratch: vec![0u8; page_size],
        }
    }

    /// The number of chains the log is spread over.
    #[inline]
    pub(crate) fn chains(&self) -> u32 {
        self.chains.len() as u32
    }

    /// The chain of the page of LSN `lsn`.
    #[inline]
    fn chain_of(&self, lsn: u64) -> usize {
        (lsn % self.chains.len() as u64) as usize
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

    /// The blocks the log writes to now: every chain's cursor block and the one it
    /// continues in.
    pub(crate) fn current_blocks(&self) -> Vec<u32> {
        self.chains
            .iter()
            .flatten()
            .flat_map(|c| [Some(c.block), c.next_block])
            .flatten()
            .collect()
    }

    /// The number of blocks [`Log::current_blocks`] lists.
    pub(crate) fn current_block_count(&self) -> u32 {
        self.chains
            .iter()
            .flatten()
            .map(|c| 1 + u32::from(c.next_block.is_some()))
            .sum()
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

    /// Continue the log at page `page` of `block` (then `next_block`) with LSN `lsn`, in
    /// the chain of that LSN; the other chains start afresh when first needed. Nothing
    /// is pending and no page was written since the checkpoint.
    pub(crate) fn resume(&mut self, (block, page): (u32, u32), next_block: Option<u32>, lsn: u64) {
        debug_assert!(self.pending.is_empty(), "log resumed with records pending");
        self.chains.iter_mut().for_each(|c| *c = None);
        let c = self.chain_of(lsn);
        self.chains[c] = Some(Chain {
            block,
            page,
            next_block,
        });
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
    /// Start a new log segment: every chain in a fresh block.
    pub(crate) fn start_log(&mut self) -> Result<(), FtlError> {
        self.log.prev = NONE;
        self.log.chains.iter_mut().for_each(|c| *c = None);
        for c in 0..self.log.chains.len() {
            self.start_chain(c)?;
        }
        Ok(())
    }

    /// Give chain `c` a fresh block on its die (die `c * dies / chains`, so the chains
    /// walk the channels first: dies are numbered channel-first), or on any die when
    /// its own has no free block. A log of one chain takes any free block.
    fn start_chain(&mut self, c: usize) -> Result<Chain, FtlError> {
        let b = self.take_log_block(c)?;
        let chain = Chain {
            block: b,
            page: 0,
            next_block: None,
        };
        self.log.chains[c] = Some(chain);
        Ok(chain)
    }

    /// A free block for chain `c`, marked as a log block.
    fn take_log_block(&mut self, c: usize) -> Result<u32, FtlError> {
        let k = self.log.chains.len() as u64;
        let b = if k == 1 {
            self.take_any_free_block()?
        } else {
            let die = (c as u64 * self.geo.dies() as u64 / k) as u32;
            match self.take_free_block(die) {
                Some(b) => die * self.geo.blocks_per_die() + b,
                None => self.take_any_free_block()?,
            }
        };
        self.blocks.set_state(b, Use::Log);
        self.log.block_count += 1;
        Ok(b)
    }

    /// The next `LOG_LINKS` candidate page addresses of the log: those of the chain the
    /// next log page goes to, from its cursor.
    pub(crate) fn log_candidates(&mut self) -> Result<[u64; LOG_LINKS], FtlError> {
        let c = self.log.chain_of(self.log.next_lsn);
        self.chain_candidates(c)
    }

    /// The next `LOG_LINKS` candidate page addresses of chain `c`, from its cursor
    /// (starting the chain, or taking the block it continues in, when needed).
    fn chain_candidates(&mut self, c: usize) -> Result<[u64; LOG_LINKS], FtlError> {
        let mut ch = match self.log.chains[c] {
            Some(ch) => ch,
            None => self.start_chain(c)?,
        };
        // A page written at the cursor links to the LOG_LINKS pages after it, which reach
        // into the next block once this many pages or fewer are left.
        if self.geo.pages_per_block() - ch.page <= LOG_LINKS as u32 && ch.next_block.is_none() {
            ch.next_block = Some(self.take_log_block(c)?);
            self.log.chains[c] = Some(ch);
        }
        Ok(self.links_from(ch.block, ch.page, ch.next_block))
    }

    /// `LOG_LINKS` page addresses from page `p` of block `b`, continuing at page 0 of
    /// `next` (or of `b` when there is none) past the block's end.
    fn links_from(&self, mut b: u32, mut p: u32, next: Option<u32>) -> [u64; LOG_LINKS] {
        let mut c = [NONE; LOG_LINKS];
        for slot in c.iter_mut() {
            if p == self.geo.pages_per_block() {
                b = next.unwrap_or(b);
                p = 0;
            }
            *slot = page_addr(b, p);
            p += 1;
        }
        c
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

    /// Write one log page holding `records` at the next LSN, in that LSN's chain, linked
    /// to the candidates of the chain the page after it goes to. Returns when the page
    /// and every log page before it are durable.
    pub(crate) fn write_log_page(
        &mut self,
        records: Vec<Record>,
        at: SimTime,
    ) -> Result<SimTime, FtlError> {
        let mut page = std::mem::take(&mut self.log.page_scratch);
        page.resize(self.geo.page_size(), 0);
        let mut oob = self.scratch.take_oob();
        let result = (|| {
            let c = self.log.chain_of(self.log.next_lsn);
            let c_next = self.log.chain_of(self.log.next_lsn + 1);
            for _attempt in 0..(4 * self.geo.pages_per_block()) {
                let cands = self.chain_candidates(c)?;
                let (b, p) = page_unaddr(cands[0]);
                // Links of this page: where the next log page goes, the candidates after
                // this one in this chain, or those of the next page's chain.
                let links = if c_next == c {
                    let next = self.log.chains[c].and_then(|ch| ch.next_block);
                    self.links_from(b, p + 1, next)
                } else {
                    self.chain_candidates(c_next)?
                };
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
                let mut ch = self.log.chains[c].ok_or_else(|| {
                    FtlError::Corrupt(format!("log chain {c} lost its cursor while writing"))
                })?;
                ch.page = p + 1;
                if b != ch.block {
                    ch.block = b;
                    ch.next_block = None;
                }
                if ch.page == self.geo.pages_per_block()
                    && let Some(nb) = ch.next_block.take()
                {
                    ch.block = nb;
                    ch.page = 0;
                }
                self.log.chains[c] = Some(ch);
                match r {
                    Ok(done) => {
                        self.blocks.log_page_written(b, self.log.next_lsn);
                        self.log.prev = page_addr(b, p);
                        self.log.next_lsn += 1;
                        self.log.since_ckpt += 1;
                        self.counters.add(Count::LogPages, 1);
                        self.log.durable = self.log.durable.max(done);
                        // One chain returns the page's own completion, as csd always
                        // did (the golden figures): its pages program on one die in
                        // call order, so a later page ends earlier only when the die's
                        // calendar fits it into an earlier gap.
                        return Ok(if self.log.chains.len() > 1 {
                            self.log.durable
                        } else {
                            done
                        });
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

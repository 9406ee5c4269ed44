//! Block provisioning (batch-io §7.2.3): HOT (user), COLD (GC) and META streams, each
//! with an open block per die, filled in channel round robin; the least-worn free block
//! of a die opens next (dynamic wear leveling); a block whose program fails is retired
//! and its live data moves after the current commit. When free blocks are scarce a
//! stream fills its open blocks before opening more.
//!
//! The checkpoint reserve: the last [`Ftl::checkpoint_reserve`] free blocks are for the
//! log and the META stream only. The data streams (HOT, COLD, so host writes, GC and
//! wear leveling) cannot open a block that would leave fewer free, and fail with
//! `NoSpace` instead (the device then turns read-only). So a device at the end of its
//! life can always write one more whole checkpoint (every MAP page the cache can hold
//! dirty, MAPS, WEAR, the bad-block table, GBITV, and the log pages before it) and close
//! cleanly. The reserve is part of the metadata blocks set aside at format, which count
//! two copies of all metadata, so it costs no capacity, and the GC low-water mark stays
//! a commit's worth of blocks (one per die, and two) above it, so GC does not have to dip
//! into it in normal work.

use crate::FtlError;
use crate::ftl::*;
use crate::stats::Count;
use csd_nand::{BlockId, NandError, Ppa};
use csd_sim::SimTime;

/// A write stream: each has its own open block per die (batch-io §7.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    /// User data.
    Hot = 0,
    /// Data moved by GC and wear leveling.
    Cold = 1,
    /// Metadata pages (MAP, MAPS, WEAR, bad-block table, GBITV).
    Meta = 2,
}

impl Stream {
    /// Every stream, in index order.
    pub(crate) const ALL: [Stream; 3] = [Stream::Hot, Stream::Cold, Stream::Meta];

    /// The stream's position in per-stream tables, and its code in the checkpoint's list
    /// of open blocks.
    #[inline]
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The stream with code `i` ([`Stream::index`]), if there is one.
    pub(crate) fn from_index(i: usize) -> Option<Stream> {
        Stream::ALL.get(i).copied()
    }
}

/// Provisioning state: the open block of each stream on each die and the page it writes
/// next, the round-robin position of each stream, the program clock (the age of data for
/// cost-benefit GC), blocks retired during a commit whose live data must still move, and
/// the reserves set at format. Only this module changes it.
#[derive(Debug)]
pub(crate) struct Provision {
    /// Open block (block index within the die, next page) per stream and die.
    open: [Vec<Option<(u32, u32)>>; 3],
    /// Next die in channel round robin, per stream.
    next_die: [u32; 3],
    /// Programs so far (the age clock of cost-benefit GC).
    program_seq: u64,
    /// Blocks retired during a commit whose live data must still move.
    retired: Vec<u32>,
    /// Free blocks only the log and the META stream may take (see the module
    /// documentation): room for one whole checkpoint after the data streams can no longer
    /// write.
    meta_reserve: u32,
    /// Blocks set aside at format for provisioning, GC headroom and metadata.
    reserve_blocks: u32,
    /// Spare blocks at format: usable blocks beyond the reserve and the logical capacity.
    initial_spare: u32,
}

impl Provision {
    /// Nothing open on `dies` dies.
    pub(crate) fn new(dies: usize) -> Provision {
        Provision {
            open: [vec![None; dies], vec![None; dies], vec![None; dies]],
            next_die: [0; 3],
            program_seq: 0,
            retired: Vec::new(),
            meta_reserve: 0,
            reserve_blocks: 0,
            initial_spare: 0,
        }
    }

    /// The open block (index within the die, next page) of stream `s` on each die.
    #[inline]
    pub(crate) fn open(&self, s: Stream) -> &[Option<(u32, u32)>] {
        &self.open[s.index()]
    }

    /// Stream `s` writes no more to its open block on `die` (a program failed there, or
    /// recovery settles the block); returns it.
    pub(crate) fn close(&mut self, s: Stream, die: usize) -> Option<(u32, u32)> {
        self.open[s.index()][die].take()
    }

    /// Recovery found block `bi` of `die` open for stream `s`, to write at `page` next.
    pub(crate) fn reopen(&mut self, s: Stream, die: usize, (bi, page): (u32, u32)) {
        self.open[s.index()][die] = Some((bi, page));
    }

    /// The round-robin position of each stream.
    pub(crate) fn round_robin(&self) -> [u32; 3] {
        self.next_die
    }

    /// Continue the round robin at `rr` (the checkpoint's positions).
    pub(crate) fn restore_round_robin(&mut self, rr: [u32; 3]) {
        self.next_die = rr;
    }

    /// A page was programmed (the age clock of cost-benefit GC).
    #[inline]
    pub(crate) fn programmed(&mut self) {
        self.program_seq += 1;
    }

    /// Programs so far.
    #[inline]
    pub(crate) fn program_seq(&self) -> u64 {
        self.program_seq
    }

    /// The next retired block whose live data must still move.
    pub(crate) fn next_retired(&mut self) -> Option<u32> {
        self.retired.pop()
    }

    /// Free blocks only the log and the META stream may take.
    #[inline]
    pub(crate) fn meta_reserve(&self) -> u32 {
        self.meta_reserve
    }

    /// Set the checkpoint reserve (at construction).
    pub(crate) fn set_meta_reserve(&mut self, n: u32) {
        self.meta_reserve = n;
    }

    /// Blocks set aside at format.
    pub(crate) fn reserve_blocks(&self) -> u32 {
        self.reserve_blocks
    }

    /// Record the blocks set aside at format.
    pub(crate) fn set_reserve_blocks(&mut self, n: u32) {
        self.reserve_blocks = n;
    }

    /// Spare blocks at format.
    pub(crate) fn initial_spare(&self) -> u32 {
        self.initial_spare
    }

    /// Record the spare blocks at format.
    pub(crate) fn set_initial_spare(&mut self, n: u32) {
        self.initial_spare = n;
    }
}

impl Ftl {
    /// Program one page of stream `s` at the next provisioned
    /// address, retiring blocks whose program fails. Returns (block, page, done).
    pub(crate) fn program_stream(
        &mut self,
        s: Stream,
        data: &[u8],
        oob: &[u8],
        at: SimTime,
    ) -> Result<(u32, u32, SimTime), FtlError> {
        for _ in 0..self.blocks.len() {
            let (block, page) = self.provision(s)?;
            let r = self
                .nand
                .program(Ppa::new(BlockId(block), page), data, oob, at);
            self.prov.program_seq += 1;
            match r {
                Ok(done) => {
                    self.advance(s, block, page);
                    return Ok((block, page, done));
                }
                Err(NandError::ProgramFailed { done, .. }) => {
                    self.counters.add(Count::ProgramFailures, 1);
                    let die = block / self.geo.blocks_per_die();
                    self.prov.open[s.index()][die as usize] = None;
                    self.retire(block);
                    let _ = done;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(FtlError::NoSpace)
    }

    pub(crate) fn advance(&mut self, s: Stream, block: u32, page: u32) {
        let die = block / self.geo.blocks_per_die();
        if page + 1 == self.geo.pages_per_block() {
            self.prov.open[s.index()][die as usize] = None;
            let full = if s == Stream::Meta {
                Use::Meta
            } else {
                Use::Full
            };
            self.blocks.set_state(block, full);
        } else {
            self.prov.open[s.index()][die as usize] =
                Some((block % self.geo.blocks_per_die(), page + 1));
        }
        self.blocks.stamp(block, self.prov.program_seq);
    }

    /// The next (block, page) for stream `s`: channel round robin over dies, opening the
    /// least-worn free block of a die when needed.
    ///
    /// When free blocks are scarce (no more than one per die, as after repeated power
    /// cuts that struck before GC could refill the pool), the stream first fills the
    /// blocks it already has open and opens at most one new block at a time, trading
    /// channel parallelism for the headroom GC needs to make progress.
    pub(crate) fn provision(&mut self, s: Stream) -> Result<(u32, u32), FtlError> {
        // Free blocks this stream may open: the data streams leave the checkpoint reserve.
        let free = if s == Stream::Meta {
            self.blocks.free_count()
        } else {
            self.blocks
                .free_count()
                .saturating_sub(self.prov.meta_reserve)
        };
        // A read-only device writes only checkpoints: its META stream fills the blocks it
        // has open before it opens another, so the reserve need not cover a block per die.
        let scarce =
            free <= self.geo.dies() || (s == Stream::Meta && self.health.read_only().is_some());
        // Pass 1: the next die in turn with an open block (or, unless scarce, a free one);
        // pass 2 (scarce only): the next die in turn with a free block.
        for open_new in [!scarce, free > 0] {
            for _ in 0..self.geo.dies() {
                let die = self.prov.next_die[s.index()];
                self.prov.next_die[s.index()] = (die + 1) % self.geo.dies();
                if let Some((b, p)) = self.prov.open[s.index()][die as usize] {
                    let block = die * self.geo.blocks_per_die() + b;
                    debug_assert_eq!(
                        self.blocks[block as usize].state,
                        Use::Open(Some(s)),
                        "provisioning: the open block {block} of stream {s:?} on die {die} is not open for it"
                    );
                    return Ok((block, p));
                }
                if open_new && let Some(b) = self.open_block(s, die) {
                    debug_assert!(
                        s == Stream::Meta || self.blocks.free_count() >= self.prov.meta_reserve
                    );
                    return Ok((b, 0));
                }
            }
        }
        Err(FtlError::NoSpace)
    }

    /// Free blocks kept for the log and the META stream (see the module documentation):
    /// the blocks one checkpoint writes when every MAP page the cache holds is dirty and
    /// every other table is written whole (a read-only device's META stream opens one
    /// block at a time), plus a log block per log chain, a block for a failed program and
    /// one to spare.
    pub(crate) fn checkpoint_reserve(&self) -> u32 {
        let page = self.geo.page_size() as u64;
        let nblocks = self.blocks.len() as u64;
        let pages = (self.map.capacity() as u64).min(self.map.page_addrs().len() as u64)
            + self.ckpt.maps_pages().len() as u64
            + (nblocks * 4).div_ceil(page)
            + nblocks.div_ceil(8).div_ceil(page)
            + self.ckpt.gbitv_pages().len() as u64;
        (pages.div_ceil(self.geo.pages_per_block() as u64) + 2 + u64::from(self.log.chains()))
            as u32
    }

    /// Open the least-worn free block of `die` for stream `s`; its global index.
    pub(crate) fn open_block(&mut self, s: Stream, die: u32) -> Option<u32> {
        let b = self.take_free_block(die)?;
        self.blocks
            .set_state(die * self.geo.blocks_per_die() + b, Use::Open(Some(s)));
        self.prov.open[s.index()][die as usize] = Some((b, 0));
        Some(die * self.geo.blocks_per_die() + b)
    }

    pub(crate) fn take_free_block(&mut self, die: u32) -> Option<u32> {
        let base = (die * self.geo.blocks_per_die()) as usize;
        let best = (0..self.geo.blocks_per_die())
            .filter(|&i| self.blocks[base + i as usize].state == Use::Free)
            .min_by_key(|&i| self.blocks[base + i as usize].pe)?;
        self.blocks.set_state(base as u32 + best, Use::Open(None));
        Some(best)
    }

    pub(crate) fn take_any_free_block(&mut self) -> Result<u32, FtlError> {
        for k in 0..self.geo.dies() {
            let die = (self.prov.next_die[Stream::Meta.index()] + k) % self.geo.dies();
            if let Some(b) = self.take_free_block(die) {
                return Ok(die * self.geo.blocks_per_die() + b);
            }
        }
        Err(FtlError::NoSpace)
    }

    /// Retire a block after a failure; its live data moves after the current commit.
    /// A retired block leaves the wear mean, which may then reach the rated endurance.
    pub(crate) fn retire(&mut self, block: u32) {
        self.blocks.set_state(block, Use::Bad);
        self.counters.add(Count::GrownBadBlocks, 1);
        if self.blocks[block as usize].valid > 0 {
            self.prov.retired.push(block);
        }
        self.check_wear();
    }
}

//! The block table: each erase block's state, valid-sector count, erase count, age
//! stamp, live metadata pages and highest log LSN; GBITV (batch-io §5.1), one valid bit
//! per physical sector with a dirty bit per GBITV page for incremental checkpoints; and
//! the free pool's counts, total and per die. Only this module changes them: the block
//! state and the free counts move together ([`BlockTable::set_state`]), and so do a valid
//! bit and its block's count ([`BlockTable::set_valid_bit`]).

use std::ops::Index;

use crate::provision::Stream;

/// What an erase block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// Erased, in the free pool.
    Free,
    /// Open for a stream; `None` while taken from the free pool and not yet given to one
    /// (a log block, or a block being opened).
    Open(Option<Stream>),
    /// Full of user/GC data.
    Full,
    /// Full metadata block (MAP/MAPS/WEAR/BBT pages).
    Meta,
    /// Holds log pages.
    Log,
    /// One of the checkpoint ring's blocks.
    Ckpt,
    /// Retired (factory or grown bad).
    Bad,
}

/// One erase block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Blk {
    /// What it holds.
    pub(crate) state: Use,
    /// Valid sectors (its bits set in GBITV).
    pub(crate) valid: u32,
    /// Erase count.
    pub(crate) pe: u32,
    /// Program clock when its last page was programmed (its data's age).
    pub(crate) stamp: u64,
    /// Live metadata pages (META blocks).
    pub(crate) meta_live: u32,
    /// Highest LSN of a log page in the block (log blocks).
    pub(crate) max_lsn: u64,
}

/// Every erase block of the array, GBITV and the free pool.
pub(crate) struct BlockTable {
    /// Per-block state.
    blks: Vec<Blk>,
    /// GBITV: one valid bit per physical sector.
    gbitv: Vec<u64>,
    /// GBITV pages changed since the last checkpoint.
    gbitv_dirty: Vec<bool>,
    /// Blocks in state `Free`.
    free_count: u32,
    /// Blocks in state `Free`, per die.
    free_per_die: Vec<u32>,
    /// Erase blocks per die.
    blocks_per_die: u32,
    /// Sectors per erase block.
    sectors_per_block: usize,
    /// GBITV bits per GBITV page.
    bits_per_gbitv_page: usize,
}

impl BlockTable {
    /// `dies × blocks_per_die` blocks, all free and erased never, with
    /// `sectors_per_block` sectors each and GBITV kept in pages of `page_size` bytes.
    pub(crate) fn new(
        dies: u32,
        blocks_per_die: u32,
        sectors_per_block: usize,
        page_size: usize,
    ) -> BlockTable {
        let nblocks = (dies * blocks_per_die) as usize;
        let bits = nblocks * sectors_per_block;
        BlockTable {
            blks: vec![
                Blk {
                    state: Use::Free,
                    valid: 0,
                    pe: 0,
                    stamp: 0,
                    meta_live: 0,
                    max_lsn: 0,
                };
                nblocks
            ],
            gbitv: vec![0u64; bits.div_ceil(64)],
            gbitv_dirty: vec![false; (bits as u64).div_ceil(8 * page_size as u64) as usize],
            free_count: nblocks as u32,
            free_per_die: vec![blocks_per_die; dies as usize],
            blocks_per_die,
            sectors_per_block,
            bits_per_gbitv_page: 8 * page_size,
        }
    }

    /// Number of blocks.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.blks.len()
    }

    /// Every block, in index order.
    #[inline]
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Blk> {
        self.blks.iter()
    }

    /// Blocks in the free pool.
    #[inline]
    pub(crate) fn free_count(&self) -> u32 {
        self.free_count
    }

    /// Blocks in the free pool, per die.
    #[inline]
    pub(crate) fn free_per_die(&self) -> &[u32] {
        &self.free_per_die
    }

    /// Block `b` now holds `state`; the free pool's counts follow.
    #[inline]
    pub(crate) fn set_state(&mut self, b: u32, state: Use) {
        let was = std::mem::replace(&mut self.blks[b as usize].state, state);
        let die = (b / self.blocks_per_die) as usize;
        match (was == Use::Free, state == Use::Free) {
            (false, true) => {
                self.free_count += 1;
                self.free_per_die[die] += 1;
            }
            (true, false) => {
                debug_assert!(
                    self.free_per_die[die] > 0,
                    "block table: free block {b} leaves die {die}, whose free count is 0"
                );
                self.free_count -= 1;
                self.free_per_die[die] -= 1;
            }
            _ => {}
        }
    }

    /// The free pool's counts agree with the block states (they are kept by
    /// [`BlockTable::set_state`]; checked after recovery rebuilt the states).
    pub(crate) fn check_free_counts(&self) {
        if cfg!(debug_assertions) {
            let mut per_die = vec![0u32; self.free_per_die.len()];
            for (b, blk) in self.blks.iter().enumerate() {
                if blk.state == Use::Free {
                    per_die[b / self.blocks_per_die as usize] += 1;
                }
            }
            debug_assert_eq!(
                per_die, self.free_per_die,
                "block table: free counts per die"
            );
            debug_assert_eq!(
                per_die.iter().sum::<u32>(),
                self.free_count,
                "block table: free count"
            );
        }
    }

    /// Set or clear GBITV bit `i` (a sector of block `b`), keeping `b`'s valid count and
    /// the GBITV page's dirty bit. Nothing changes when the bit already is `on`; the
    /// result says whether it changed.
    #[inline]
    pub(crate) fn set_valid_bit(&mut self, b: u32, i: usize, on: bool) -> bool {
        debug_assert_eq!(
            i / self.sectors_per_block,
            b as usize,
            "GBITV bit {i} is not in block {b}"
        );
        let bit = 1u64 << (i % 64);
        let w = &mut self.gbitv[i / 64];
        let was = *w & bit != 0;
        if on == was {
            return false;
        }
        if on {
            *w |= bit;
            self.blks[b as usize].valid += 1;
        } else {
            *w &= !bit;
            self.blks[b as usize].valid -= 1;
        }
        self.gbitv_dirty[i / self.bits_per_gbitv_page] = true;
        self.check_valid(b);
        true
    }

    /// Are none of GBITV bits `[lo, lo + n)` set (the sectors of one page)?
    #[inline]
    pub(crate) fn none_valid(&self, lo: usize, n: usize) -> bool {
        (lo..lo + n).all(|i| !self.valid_bit(i))
    }

    /// Is GBITV bit `i` set?
    #[inline]
    pub(crate) fn valid_bit(&self, i: usize) -> bool {
        self.gbitv[i / 64] & (1u64 << (i % 64)) != 0
    }

    /// GBITV bits set in block `b`.
    fn count_valid_bits(&self, b: usize) -> u32 {
        let (lo, hi) = (b * self.sectors_per_block, (b + 1) * self.sectors_per_block);
        let mut n = 0u32;
        let mut i = lo;
        while i < hi {
            let w = self.gbitv[i / 64];
            let take = (64 - i % 64).min(hi - i);
            let mask = if take == 64 {
                u64::MAX
            } else {
                ((1u64 << take) - 1) << (i % 64)
            };
            n += (w & mask).count_ones();
            i += take;
        }
        n
    }

    /// Block `b`'s invariant: its valid count is the number of its GBITV bits set.
    #[inline]
    fn check_valid(&self, b: u32) {
        debug_assert_eq!(
            self.blks[b as usize].valid,
            self.count_valid_bits(b as usize),
            "block table: valid count of block {b} disagrees with its GBITV bits"
        );
    }

    /// Set every block's valid count from GBITV (recovery, after loading it).
    pub(crate) fn recount_valid(&mut self) {
        for b in 0..self.blks.len() {
            self.blks[b].valid = self.count_valid_bits(b);
        }
    }

    /// Block `b`'s valid count is 0 (a dead log or metadata block about to be erased).
    pub(crate) fn clear_valid_count(&mut self, b: u32) {
        self.blks[b as usize].valid = 0;
    }

    /// GBITV word `i` as a checkpoint recorded it (recovery); ignored beyond GBITV.
    pub(crate) fn restore_gbitv_word(&mut self, i: usize, w: u64) {
        if let Some(word) = self.gbitv.get_mut(i) {
            *word = w;
        }
    }

    /// GBITV words.
    pub(crate) fn gbitv(&self) -> &[u64] {
        &self.gbitv
    }

    /// Did GBITV page `i` change since the last checkpoint?
    pub(crate) fn gbitv_page_dirty(&self, i: usize) -> bool {
        self.gbitv_dirty[i]
    }

    /// GBITV pages changed since the last checkpoint.
    pub(crate) fn dirty_gbitv_pages(&self) -> usize {
        self.gbitv_dirty.iter().filter(|&&d| d).count()
    }

    /// GBITV page `i` was written by a checkpoint.
    pub(crate) fn gbitv_page_written(&mut self, i: usize) {
        self.gbitv_dirty[i] = false;
    }

    /// Block `b` has erase count `pe` (format reads it from the array, recovery from WEAR);
    /// ignored beyond the table.
    pub(crate) fn set_pe(&mut self, b: usize, pe: u32) {
        if let Some(blk) = self.blks.get_mut(b) {
            blk.pe = pe;
        }
    }

    /// Block `b` of the checkpoint ring was erased (it stays in the ring).
    pub(crate) fn ring_block_erased(&mut self, b: u32) {
        self.blks[b as usize].pe += 1;
    }

    /// Block `b` was erased: it joins the free pool with nothing in it.
    pub(crate) fn erased(&mut self, b: u32) {
        self.check_valid(b);
        debug_assert_eq!(
            self.blks[b as usize].valid, 0,
            "block table: block {b} erased with valid sectors"
        );
        let blk = &mut self.blks[b as usize];
        blk.pe += 1;
        blk.meta_live = 0;
        blk.max_lsn = 0;
        self.set_state(b, Use::Free);
    }

    /// The last page of block `b` was programmed at program clock `seq`.
    #[inline]
    pub(crate) fn stamp(&mut self, b: u32, seq: u64) {
        self.blks[b as usize].stamp = seq;
    }

    /// A metadata page was written to block `b`; ignored beyond the table.
    pub(crate) fn meta_page_added(&mut self, b: u32) {
        if let Some(blk) = self.blks.get_mut(b as usize) {
            blk.meta_live += 1;
        }
    }

    /// A metadata page of block `b` is no longer referenced.
    pub(crate) fn meta_page_released(&mut self, b: u32) {
        let blk = &mut self.blks[b as usize];
        blk.meta_live = blk.meta_live.saturating_sub(1);
    }

    /// A log page with LSN `lsn` is in block `b`.
    #[inline]
    pub(crate) fn log_page_written(&mut self, b: u32, lsn: u64) {
        let blk = &mut self.blks[b as usize];
        blk.max_lsn = blk.max_lsn.max(lsn);
    }
}

impl Index<usize> for BlockTable {
    type Output = Blk;

    #[inline]
    fn index(&self, b: usize) -> &Blk {
        &self.blks[b]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DIES: u32 = 3;
    const BPD: u32 = 4;
    const SPB: usize = 70; // not a multiple of 64: blocks share GBITV words

    #[derive(Debug, Clone)]
    enum Op {
        State(u32, u8),
        Valid(u32, usize, bool),
        EraseIfEmpty(u32),
    }

    fn state(k: u8) -> Use {
        match k % 6 {
            0 => Use::Free,
            1 => Use::Open(None),
            2 => Use::Open(Some(Stream::Hot)),
            3 => Use::Full,
            4 => Use::Meta,
            _ => Use::Bad,
        }
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let n = DIES * BPD;
        let op = prop_oneof![
            1 => (0..n, any::<u8>()).prop_map(|(b, k)| Op::State(b, k)),
            3 => (0..n, 0..SPB, any::<bool>()).prop_map(|(b, s, on)| Op::Valid(b, s, on)),
            1 => (0..n).prop_map(Op::EraseIfEmpty),
        ];
        proptest::collection::vec(op, 1..400)
    }

    proptest! {
        /// Against a plain model (a state and a set of valid sectors per block): the free
        /// counts, per die and in total, and each block's valid count always agree with
        /// the states and the bits, whatever the order of changes.
        #[test]
        fn counts_follow_states_and_bits(ops in ops()) {
            let mut t = BlockTable::new(DIES, BPD, SPB, 16);
            let n = (DIES * BPD) as usize;
            let mut states = vec![Use::Free; n];
            let mut bits = vec![vec![false; SPB]; n];
            let mut pe = vec![0u32; n];
            for op in ops {
                match op {
                    Op::State(b, k) => {
                        t.set_state(b, state(k));
                        states[b as usize] = state(k);
                    }
                    Op::Valid(b, s, on) => {
                        t.set_valid_bit(b, b as usize * SPB + s, on);
                        bits[b as usize][s] = on;
                    }
                    Op::EraseIfEmpty(b) => {
                        if bits[b as usize].iter().all(|&v| !v) {
                            t.erased(b);
                            states[b as usize] = Use::Free;
                            pe[b as usize] += 1;
                        }
                    }
                }
                for die in 0..DIES as usize {
                    let free = (0..BPD as usize)
                        .filter(|&i| states[die * BPD as usize + i] == Use::Free)
                        .count() as u32;
                    prop_assert_eq!(t.free_per_die()[die], free);
                }
                prop_assert_eq!(
                    t.free_count(),
                    states.iter().filter(|&&s| s == Use::Free).count() as u32
                );
                for b in 0..n {
                    prop_assert_eq!(t[b].state, states[b]);
                    prop_assert_eq!(t[b].pe, pe[b]);
                    prop_assert_eq!(
                        t[b].valid,
                        bits[b].iter().filter(|&&v| v).count() as u32
                    );
                    for (s, &on) in bits[b].iter().enumerate() {
                        prop_assert_eq!(t.valid_bit(b * SPB + s), on);
                    }
                }
            }
        }
    }

    /// The assertion at the erase (debug builds only).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "erased with valid sectors")]
    fn erasing_a_block_with_valid_sectors_is_caught() {
        let mut t = BlockTable::new(1, 2, SPB, 16);
        t.set_valid_bit(1, SPB + 3, true);
        t.erased(1);
    }
}

//! Inspection helpers for tests and tools.

use crate::format::{NONE, unpack};
use crate::ftl::*;
use csd_nand::{BlockId, DieId};
use csd_sim::SimTime;

impl Ftl {
    /// The die of LBA `lba`'s current copy, if it is on flash (for tests and tools).
    pub fn die_of_lba(&mut self, lba: u64) -> Option<DieId> {
        let (e, _) = self.map_get(lba, SimTime::ZERO).ok()?;
        if e == NONE || is_cached(e) {
            return None;
        }
        Some(self.nand.addr().die_of(BlockId(unpack(e).0)))
    }

    /// Block counts per state, for diagnostics: free, open, full, meta, log, ckpt, bad,
    /// and the valid sectors in full blocks.
    pub fn block_census(&self) -> String {
        let mut c = [0u32; 7];
        let mut valid_full = 0u64;
        let mut meta_live = 0u64;
        for b in &self.blocks {
            let i = match b.state {
                Use::Free => 0,
                Use::Open(_) => 1,
                Use::Full => {
                    valid_full += b.valid as u64;
                    2
                }
                Use::Meta => {
                    meta_live += b.meta_live as u64;
                    3
                }
                Use::Log => 4,
                Use::Ckpt => 5,
                Use::Bad => 6,
            };
            c[i] += 1;
        }
        format!(
            "free {} open {} full {} (valid sectors {valid_full}) meta {} (live pages {meta_live}) log {} ckpt {} bad {}; lbas {} map pages {} cache {}/{}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            c[6],
            self.lbas,
            self.map_pages.len(),
            self.map_slots.len(),
            self.map_cache_capacity
        )
    }

    /// Check internal invariants (valid counts agree with the bitmap and MAP); for tests.
    pub fn check_invariants(&mut self) -> Result<(), String> {
        let mut counts = vec![0u32; self.blocks.len()];
        for mp in 0..self.map_pages.len() as u32 {
            let (s, _) = self
                .map_slot(mp, SimTime::ZERO)
                .map_err(|e| e.to_string())?;
            for (i, &e) in self.map_slots[s].entries.iter().enumerate() {
                // A buffered (write-back) sector keeps its durable old copy live until commit.
                let e = if is_cached(e) {
                    let (b, k) = (((e >> 8) & 0xFF_FFFF) as usize, (e & 0xFF) as usize);
                    self.page_bufs.get(b).map_or(NONE, |buf| buf.olds[k])
                } else {
                    e
                };
                if e == NONE {
                    continue;
                }
                let (b, p, sec) = unpack(e);
                if !self.is_valid(b, p, sec) {
                    return Err(format!(
                        "LBA {} maps to a sector not marked valid",
                        mp as u64 * self.map_entries_per_page + i as u64
                    ));
                }
                counts[b as usize] += 1;
            }
        }
        for (b, blk) in self.blocks.iter().enumerate() {
            if blk.valid != counts[b] {
                return Err(format!(
                    "block {b} ({:?}): valid count {} but {} mapped sectors",
                    blk.state, blk.valid, counts[b]
                ));
            }
            if blk.state == Use::Free && blk.valid != 0 {
                return Err(format!("free block {b} holds valid data"));
            }
        }
        let free = self.blocks.iter().filter(|b| b.state == Use::Free).count() as u32;
        if free != self.free_count {
            return Err(format!(
                "free count {} but {free} free blocks",
                self.free_count
            ));
        }
        Ok(())
    }
}

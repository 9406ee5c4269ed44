//! Inspection for tests and tools: where an LBA's copy is, block counts per state, and
//! the invariant check (MAP, GBITV, valid counts, free counts and open blocks agree with
//! each other and with the media's write pointers).

use crate::format::{NONE, unpack};
use crate::ftl::*;
use crate::provision::Stream;
use csd_nand::BlockId;
use csd_sim::SimTime;

impl Ftl {
    /// Where LBA `lba`'s current copy is on flash (page and sector), if it is there (for
    /// tests and tools).
    pub fn location_of_lba(&mut self, lba: u64) -> Option<(csd_nand::Ppa, u32)> {
        let (e, _) = self.map_get(lba, SimTime::ZERO).ok()?;
        let (b, p, s) = unpack(flash_of(e)?);
        Some((csd_nand::Ppa::new(BlockId(b), p), s))
    }

    /// Block counts per state, for diagnostics: free, open, full, meta, log, ckpt, bad,
    /// and the valid sectors in full blocks.
    pub fn block_census(&self) -> String {
        let mut c = [0u32; 7];
        let mut valid_full = 0u64;
        let mut meta_live = 0u64;
        for b in self.blocks.iter() {
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
            self.geo.lbas(),
            self.map.page_addrs().len(),
            self.map.slots().len(),
            self.map.capacity()
        )
    }

    /// Check internal invariants (valid counts agree with the bitmap and MAP); for tests.
    pub fn check_invariants(&mut self) -> Result<(), String> {
        let mut counts = vec![0u32; self.blocks.len()];
        for mp in 0..self.map.page_addrs().len() as u32 {
            let (s, _) = self
                .map_slot(mp, SimTime::ZERO)
                .map_err(|e| e.to_string())?;
            for (i, &e) in self.map.slots()[s].entries.iter().enumerate() {
                // A buffered (write-back) sector keeps its durable old copy live until commit.
                let e = match Loc::of(e) {
                    Loc::Buffered { buf, slot } => {
                        self.commit.buf(buf).map_or(NONE, |pb| pb.olds[slot])
                    }
                    _ => e,
                };
                let Some(a) = flash_of(e) else {
                    continue;
                };
                let (b, p, sec) = unpack(a);
                if !self.is_valid(b, p, sec) {
                    return Err(format!(
                        "LBA {} maps to a sector not marked valid",
                        mp as u64 * self.geo.map_entries_per_page() + i as u64
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
        for s in Stream::ALL {
            for (die, open) in self.prov.open(s).iter().enumerate() {
                let Some((bi, page)) = *open else { continue };
                let b = die as u32 * self.geo.blocks_per_die() + bi;
                let media = self
                    .nand
                    .block_info(BlockId(b))
                    .map_err(|e| e.to_string())?
                    .next_page;
                if self.blocks[b as usize].state != Use::Open(Some(s)) || media != page {
                    return Err(format!(
                        "open block {b} of stream {s:?}: state {:?}, FTL writes page {page}, media's write pointer {media}",
                        self.blocks[b as usize].state
                    ));
                }
            }
        }
        let mut per_die = vec![0u32; self.geo.dies() as usize];
        for (b, blk) in self.blocks.iter().enumerate() {
            if blk.state == Use::Free {
                per_die[b / self.geo.blocks_per_die() as usize] += 1;
            }
        }
        if per_die != self.blocks.free_per_die() {
            return Err(format!(
                "free blocks per die {:?} but the counts say {:?}",
                per_die,
                self.blocks.free_per_die()
            ));
        }
        let free = per_die.iter().sum::<u32>();
        if free != self.blocks.free_count() {
            return Err(format!(
                "free count {} but {free} free blocks",
                self.blocks.free_count()
            ));
        }
        Ok(())
    }
}

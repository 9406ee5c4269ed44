//! Typed physical addresses.
//!
//! Dies are numbered channel-first (`die = (way * dies_per_chip + die_in_chip) *
//! channels + channel`), so consecutive die numbers walk across channels, which is the
//! order in which a striping controller fills them (batch-io §7.2.3 channel round robin).
//! Blocks are numbered die-major: `block = die * blocks_per_die + plane *
//! blocks_per_plane + block_in_plane`.

use csd_sim::Geometry;
use std::fmt;

/// A die, numbered channel-first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DieId(pub u32);

/// An erase block, numbered die-major across the whole array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BlockId(pub u32);

/// A physical page address: an erase block and a page index inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ppa {
    /// The erase block.
    pub block: BlockId,
    /// Page index within the block.
    pub page: u32,
}

impl Ppa {
    /// Page `page` of block `block`.
    pub const fn new(block: BlockId, page: u32) -> Ppa {
        Ppa { block, page }
    }
}

impl fmt::Display for DieId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "die {}", self.0)
    }
}

impl fmt::Display for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "block {}", self.0)
    }
}

impl fmt::Display for Ppa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "block {} page {}", self.block.0, self.page)
    }
}

/// A fully decomposed physical address, for display and for building addresses by parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PhysAddr {
    /// Channel.
    pub channel: u32,
    /// Chip (way) on the channel.
    pub way: u32,
    /// Die inside the chip.
    pub die: u32,
    /// Plane inside the die.
    pub plane: u32,
    /// Block inside the plane.
    pub block: u32,
    /// Page inside the block.
    pub page: u32,
}

impl fmt::Display for PhysAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ch{}/way{}/die{}/pl{}/blk{}/pg{}",
            self.channel, self.way, self.die, self.plane, self.block, self.page
        )
    }
}

/// Address arithmetic over a [`Geometry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrMap {
    geo: Geometry,
    blocks_per_die: u32,
    dies: u32,
}

impl AddrMap {
    /// Address arithmetic for `geo` (which must be validated).
    pub fn new(geo: Geometry) -> AddrMap {
        AddrMap {
            geo,
            blocks_per_die: geo.blocks_per_die(),
            dies: geo.dies(),
        }
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Total blocks.
    #[inline]
    pub fn blocks(&self) -> u32 {
        self.dies * self.blocks_per_die
    }

    /// Total dies.
    #[inline]
    pub fn dies(&self) -> u32 {
        self.dies
    }

    /// The die holding `b`.
    #[inline]
    pub fn die_of(&self, b: BlockId) -> DieId {
        DieId(b.0 / self.blocks_per_die)
    }

    /// The channel of die `d`.
    #[inline]
    pub fn channel_of(&self, d: DieId) -> u32 {
        d.0 % self.geo.channels
    }

    /// Block `i` (0-based, `< blocks_per_die`) of die `d`.
    #[inline]
    pub fn block_of_die(&self, d: DieId, i: u32) -> BlockId {
        BlockId(d.0 * self.blocks_per_die + i)
    }

    /// Index of `b` inside its die.
    #[inline]
    pub fn index_in_die(&self, b: BlockId) -> u32 {
        b.0 % self.blocks_per_die
    }

    /// Decompose a page address (which must be in range).
    pub fn decompose(&self, p: Ppa) -> PhysAddr {
        let g = &self.geo;
        let d = self.die_of(p.block).0;
        let in_die = self.index_in_die(p.block);
        let rest = d / g.channels;
        PhysAddr {
            channel: d % g.channels,
            way: rest / g.dies_per_chip,
            die: rest % g.dies_per_chip,
            plane: in_die / g.blocks_per_plane,
            block: in_die % g.blocks_per_plane,
            page: p.page,
        }
    }

    /// Compose a page address from its parts; `None` when a part is out of range.
    pub fn compose(&self, a: PhysAddr) -> Option<Ppa> {
        let g = &self.geo;
        if a.channel >= g.channels
            || a.way >= g.ways
            || a.die >= g.dies_per_chip
            || a.plane >= g.planes_per_die
            || a.block >= g.blocks_per_plane
            || a.page >= g.pages_per_block
        {
            return None;
        }
        let die = (a.way * g.dies_per_chip + a.die) * g.channels + a.channel;
        let block = die * self.blocks_per_die + a.plane * g.blocks_per_plane + a.block;
        Some(Ppa::new(BlockId(block), a.page))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn geo() -> Geometry {
        Geometry {
            channels: 3,
            ways: 2,
            dies_per_chip: 2,
            planes_per_die: 2,
            blocks_per_plane: 5,
            pages_per_block: 7,
            page_size: 4096,
            sector_size: 4096,
            oob_per_sector: 16,
        }
    }

    proptest! {
        #[test]
        fn compose_decompose_roundtrip(b in 0u32..(3*2*2*2*5), page in 0u32..7) {
            let m = AddrMap::new(geo());
            let p = Ppa::new(BlockId(b), page);
            let a = m.decompose(p);
            prop_assert_eq!(m.compose(a), Some(p));
            prop_assert_eq!(m.channel_of(m.die_of(p.block)), a.channel);
        }
    }

    #[test]
    fn consecutive_dies_walk_channels() {
        let m = AddrMap::new(geo());
        let chans: Vec<u32> = (0..6).map(|d| m.channel_of(DieId(d))).collect();
        assert_eq!(chans, vec![0, 1, 2, 0, 1, 2]);
        assert!(
            m.compose(PhysAddr {
                channel: 3,
                way: 0,
                die: 0,
                plane: 0,
                block: 0,
                page: 0
            })
            .is_none()
        );
    }
}

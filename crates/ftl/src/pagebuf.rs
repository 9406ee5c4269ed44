//! The controller's page buffer: flash pages kept in DRAM with least-recently-used
//! replacement, so that a host read of a page still there needs no array read.
//!
//! It realizes the page buffer of the FLIXR paper's platform (§5: "OpenSSD assigns 16 MB
//! DRAM space as page buffers"; Table 2: "Page cache replacement: Least Recently Used";
//! the Cosmos+ OpenSSD firmware's data buffer, 16 entries of one 16 KiB slice per die).
//! A preset turns it on with `dram.page_buffer_kib`; at 0 (every preset but
//! `cosmos-openssd`) nothing here runs.
//!
//! Choices made:
//! * The unit is the flash page, keyed by its physical address. The firmware keys its
//!   buffer by logical slice because its FTL places a slice in one page; csd's FTL
//!   places sectors by write order (log-structured), so the unit read from flash, and
//!   kept, is the page.
//! * A page enters on a host read from flash (the array read lands in the buffer and
//!   goes to the host from there) and when the FTL programs it with host data (the data
//!   sat in the buffer before the program). GC and metadata traffic use their own
//!   buffers, as the firmware's garbage collector does, and leave this one alone.
//! * A hit costs no flash time and no array read (no read disturb, no bit errors): the
//!   bytes come from DRAM, like a read of data the write cache still holds, and their
//!   move to the host is the device's as for any read. The TAG/CRC check of the sectors
//!   runs as for a flash read.
//! * An entry remembers the block's erase count when it entered; after an erase the
//!   page's old entry no longer matches, so erased and reprogrammed pages are never
//!   served from a stale copy, without a sweep of the buffer at each erase.
//! * The buffer is volatile: an FTL opened from an image starts with it empty.

use lru::LruCache;
use std::num::NonZeroUsize;

/// A page buffer: at most `capacity` flash pages, least recently used evicted first.
pub(crate) struct PageBuffer {
    /// Page (block << 32 | page) -> the block's erase count when the page entered.
    pages: Option<LruCache<u64, u32>>,
    hits: u64,
    misses: u64,
}

impl PageBuffer {
    /// A buffer of `capacity` pages (0: none).
    pub(crate) fn new(capacity: usize) -> PageBuffer {
        PageBuffer {
            pages: NonZeroUsize::new(capacity).map(LruCache::new),
            hits: 0,
            misses: 0,
        }
    }

    /// Whether the buffer exists (a preset with `dram.page_buffer_kib` above 0).
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.pages.is_some()
    }

    #[inline]
    fn key(block: u32, page: u32) -> u64 {
        (block as u64) << 32 | page as u64
    }

    /// A host read of page `(block, page)` of a block erased `pe` times: whether it is in
    /// the buffer (then it becomes the most recently used). Counted as a hit or a miss.
    pub(crate) fn lookup(&mut self, block: u32, page: u32, pe: u32) -> bool {
        let Some(pages) = &mut self.pages else {
            return false;
        };
        let hit = pages.get(&Self::key(block, page)) == Some(&pe);
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        hit
    }

    /// Page `(block, page)` of a block erased `pe` times was read from flash for the
    /// host or programmed with host data: it is now the most recently used page.
    pub(crate) fn insert(&mut self, block: u32, page: u32, pe: u32) {
        if let Some(pages) = &mut self.pages {
            pages.put(Self::key(block, page), pe);
        }
    }

    /// Its figures since the FTL was opened.
    pub(crate) fn stats(&self) -> PageBufferStats {
        PageBufferStats {
            capacity_pages: self.pages.as_ref().map_or(0, |p| p.cap().get()),
            pages: self.len(),
            hits: self.hits,
            misses: self.misses,
        }
    }

    /// Pages held now.
    pub(crate) fn len(&self) -> usize {
        self.pages.as_ref().map_or(0, LruCache::len)
    }
}

/// The page buffer's figures ([`crate::Ftl::page_buffer`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageBufferStats {
    /// Flash pages it holds at most (0: the device has none).
    pub capacity_pages: usize,
    /// Flash pages it holds now.
    pub pages: usize,
    /// Host reads of a flash page served from it since the FTL was opened.
    pub hits: u64,
    /// Host reads of a flash page that went to flash since the FTL was opened.
    pub misses: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_buffer_of_no_pages_holds_nothing() {
        let mut b = PageBuffer::new(0);
        assert!(!b.enabled());
        b.insert(1, 2, 0);
        assert!(!b.lookup(1, 2, 0));
        assert_eq!(b.stats(), PageBufferStats::default());
    }

    #[test]
    fn an_erase_makes_the_old_copy_of_a_page_miss() {
        let mut b = PageBuffer::new(4);
        b.insert(7, 3, 5);
        assert!(b.lookup(7, 3, 5));
        assert!(!b.lookup(7, 3, 6), "the block was erased since");
        b.insert(7, 3, 6);
        assert!(b.lookup(7, 3, 6));
        assert_eq!(
            (b.stats().hits, b.stats().misses, b.stats().pages),
            (2, 1, 1)
        );
    }

    /// A simple reference: a vector in recency order (most recent last).
    #[derive(Default)]
    struct Reference {
        cap: usize,
        pages: Vec<(u64, u32)>,
    }

    impl Reference {
        fn touch(&mut self, key: u64) -> Option<u32> {
            let i = self.pages.iter().position(|&(k, _)| k == key)?;
            let e = self.pages.remove(i);
            self.pages.push(e);
            Some(e.1)
        }
        fn put(&mut self, key: u64, pe: u32) {
            if self.touch(key).is_some() {
                if let Some(last) = self.pages.last_mut() {
                    last.1 = pe;
                }
                return;
            }
            if self.pages.len() == self.cap {
                self.pages.remove(0);
            }
            self.pages.push((key, pe));
        }
    }

    proptest! {
        /// Random reads and programs against a recency-ordered list: the same hits, the
        /// same pages held, never more than the capacity.
        #[test]
        fn lookups_and_inserts_follow_least_recently_used(
            cap in 1usize..8,
            ops in proptest::collection::vec((any::<bool>(), 0u32..3, 0u32..5, 0u32..2), 1..200),
        ) {
            let mut b = PageBuffer::new(cap);
            let mut r = Reference { cap, ..Reference::default() };
            for (read, block, page, pe) in ops {
                let key = PageBuffer::key(block, page);
                if read {
                    let want = r.touch(key) == Some(pe);
                    prop_assert_eq!(b.lookup(block, page, pe), want);
                } else {
                    b.insert(block, page, pe);
                    r.put(key, pe);
                }
                prop_assert_eq!(b.len(), r.pages.len());
                prop_assert!(b.len() <= cap);
            }
        }
    }
}

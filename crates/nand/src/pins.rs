//! Stored bytes read on other threads while the array goes on (issue 12: "scans use all
//! cores"; the emulator's own speed, no modeled effect).
//!
//! A modeled scan steps its pages one at a time on the thread that owns the [`Nand`],
//! and would like other threads to evaluate the next pages' stored bytes meanwhile. The
//! borrow checker cannot see that this is safe, because the owner keeps mutating the
//! array (reads move counters, timing and the checked-sector memo); only the *stored
//! bytes* must stay put. [`ReadPins`] makes that a checked protocol instead of a
//! convention:
//!
//! * [`PinnedPages`] holds raw pointers to stored page bytes together with the
//!   *generation* of the array they were taken under.
//! * Every path that may change or unmap stored bytes (each goes through
//!   [`Nand::block_bytes_mut`], and the array's drop) first calls [`ReadPins::exclude`]:
//!   it moves the generation on, then waits until no reader is inside.
//! * A reader enters ([`PinnedPages::read`]) by counting itself in, then checking that
//!   the generation is still the one its pointers were taken under; otherwise it backs
//!   out and reports the bytes gone.
//!
//! Both sides use sequentially consistent operations (a store then a load on each side,
//! as in Dekker's algorithm), so either the writer sees the reader counted in and waits
//! for it, or the reader sees the new generation and touches nothing. While a reader is
//! inside, no byte it reads can change and no mapping it reads can go away.
//!
//! Choices made: a reader never waits (the writer does, at most for one batch of page
//! evaluations already under way); the writer side costs two atomic operations per
//! block write, nothing per read.
//!
//! [`Nand`]: crate::Nand
//! [`Nand::block_bytes_mut`]: crate::Nand

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// The readers of an array's stored bytes on other threads; see the
/// [module docs](self).
#[derive(Debug, Default)]
pub struct ReadPins {
    readers: AtomicUsize,
    generation: AtomicU64,
    lock: Mutex<()>,
    idle: Condvar,
}

impl ReadPins {
    /// The current generation (pages taken now are valid under it).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Before stored bytes change or go away: no reader may enter under an older
    /// generation from now on, and every reader inside has left.
    pub(crate) fn exclude(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        if self.readers.load(Ordering::SeqCst) == 0 {
            return;
        }
        // A poisoned lock only means a reader panicked while notifying: the count is
        // still exact, so go on with the guard.
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.readers.load(Ordering::SeqCst) > 0 {
            g = self.idle.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Counts a reader in if the array is still at `generation`.
    fn enter(&self, generation: u64) -> bool {
        self.readers.fetch_add(1, Ordering::SeqCst);
        if self.generation.load(Ordering::SeqCst) == generation {
            return true;
        }
        self.leave();
        false
    }

    fn leave(&self) {
        if self.readers.fetch_sub(1, Ordering::SeqCst) == 1 {
            // Taking the lock orders this notification after a waiting writer's check.
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.idle.notify_all();
        }
    }
}

/// Waits for readers when dropped: declared before the store in [`crate::Nand`], so the
/// array's memory is unmapped only after every reader left.
#[derive(Debug, Default)]
pub(crate) struct PinsHolder(pub(crate) Arc<ReadPins>);

impl Drop for PinsHolder {
    fn drop(&mut self) {
        self.0.exclude();
    }
}

/// Stored page bytes that other threads may read while the array's owner goes on; see
/// the [module docs](self).
#[derive(Debug)]
pub struct PinnedPages {
    pins: Arc<ReadPins>,
    generation: u64,
    pages: Vec<(*const u8, usize)>,
}

// SAFETY: the pointers are only dereferenced inside `read`, after `ReadPins::enter`
// succeeded: from then until `leave`, no thread changes or unmaps the bytes they point
// to (every such path calls `exclude` first, which waits for this reader). Outside
// `read` they are plain addresses, so moving or sharing the holder is harmless.
unsafe impl Send for PinnedPages {}
// SAFETY: see `Send`; `read` takes `&self` and only reads.
unsafe impl Sync for PinnedPages {}

impl PinnedPages {
    /// Pages as they are stored now.
    ///
    /// # Safety
    /// Every slice of `pages` must be stored bytes of the array whose [`ReadPins`]
    /// `pins` are (as [`crate::Nand::stored_sectors`] hands them out), taken while the
    /// array was at `pins`' current generation (see [`crate::Nand::pin_pages`]).
    pub(crate) unsafe fn new(pins: Arc<ReadPins>, pages: &[&[u8]]) -> PinnedPages {
        let generation = pins.generation();
        PinnedPages {
            pins,
            generation,
            pages: pages.iter().map(|p| (p.as_ptr(), p.len())).collect(),
        }
    }

    /// Number of pages.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether there are no pages.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Calls `f` with pages `range` (clamped to the pages held) if they are still the
    /// bytes they were when pinned, and returns what it returns; `None` if the array
    /// changed since (nothing read).
    pub fn read<R>(
        &self,
        range: std::ops::Range<usize>,
        f: impl FnOnce(&[&[u8]]) -> R,
    ) -> Option<R> {
        if !self.pins.enter(self.generation) {
            return None;
        }
        // Leaves when dropped, also if `f` panics: a writer never waits for a reader
        // that is gone.
        let _inside = Inside(&self.pins);
        let end = range.end.min(self.pages.len());
        let start = range.start.min(end);
        let slices: Vec<&[u8]> = self.pages[start..end]
            .iter()
            // SAFETY: `enter` succeeded at the generation the pointers were taken
            // under, so (module docs) the bytes are stored, mapped and unchanged until
            // `_inside` leaves, after the slices are dropped; `f` cannot keep them (its
            // signature gives them a lifetime local to this call).
            .map(|&(p, n)| unsafe { std::slice::from_raw_parts(p, n) })
            .collect();
        Some(f(&slices))
    }
}

impl PinnedPages {
    /// Calls `f` with every page of every set in `sets`, in order (one list), if each
    /// set is still the bytes it was when pinned, and returns what it returns; `None`
    /// if any set's array changed since (nothing read).
    pub fn read_all<R>(sets: &[&PinnedPages], f: impl FnOnce(&[&[u8]]) -> R) -> Option<R> {
        let mut inside = Vec::with_capacity(sets.len());
        for p in sets {
            if !p.pins.enter(p.generation) {
                // `inside` leaves the sets entered so far when dropped.
                return None;
            }
            inside.push(Inside(&p.pins));
        }
        let slices: Vec<&[u8]> = sets
            .iter()
            .flat_map(|p| p.pages.iter())
            // SAFETY: as in `read`: every set's `enter` succeeded at the generation its
            // pointers were taken under, and `inside` leaves only after `f` returned,
            // which cannot keep the slices.
            .map(|&(p, n)| unsafe { std::slice::from_raw_parts(p, n) })
            .collect();
        let r = f(&slices);
        drop(inside);
        Some(r)
    }
}

/// A reader inside [`PinnedPages::read`]; leaves when dropped.
struct Inside<'a>(&'a ReadPins);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_reader_sees_the_bytes_until_a_writer_excludes_it() {
        let pins = Arc::new(ReadPins::default());
        let data = [7u8; 64];
        // SAFETY (test): `data` outlives the pins' use and nothing writes it.
        let p = unsafe { PinnedPages::new(pins.clone(), &[&data[..]]) };
        assert_eq!(p.read(0..1, |s| s[0][3]), Some(7));
        assert_eq!(p.read(0..9, |s| s.len()), Some(1), "range clamped");
        pins.exclude();
        assert_eq!(p.read(0..1, |s| s[0][3]), None, "a later generation");
    }

    #[test]
    fn read_all_sees_every_set_in_order_until_one_changes() {
        let (pa, pb) = (Arc::new(ReadPins::default()), Arc::new(ReadPins::default()));
        let (a, b) = ([1u8; 8], [2u8; 8]);
        // SAFETY (test): `a` and `b` outlive the pins' use and nothing writes them.
        let (x, y) = unsafe {
            (
                PinnedPages::new(pa.clone(), &[&a[..], &a[..4]]),
                PinnedPages::new(pb.clone(), &[&b[..]]),
            )
        };
        let got = PinnedPages::read_all(&[&x, &y], |s| s.iter().map(|p| (p[0], p.len())).collect());
        assert_eq!(got, Some(vec![(1, 8), (1, 4), (2, 8)]));
        pb.exclude();
        assert_eq!(PinnedPages::read_all(&[&x, &y], |s| s.len()), None);
        assert_eq!(
            pa.readers.load(Ordering::SeqCst),
            0,
            "the set entered first left again"
        );
        assert_eq!(PinnedPages::read_all(&[&x], |s| s.len()), Some(2));
    }

    #[test]
    fn a_writer_waits_for_the_readers_inside() {
        let pins = Arc::new(ReadPins::default());
        let data = [1u8; 64];
        // SAFETY (test): `data` lives until both threads are joined.
        let p = unsafe { PinnedPages::new(pins.clone(), &[&data[..]]) };
        let inside = AtomicBool::new(false);
        let left = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                p.read(0..1, |_| {
                    inside.store(true, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    left.store(true, Ordering::SeqCst);
                })
            });
            while !inside.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            pins.exclude();
            assert!(
                left.load(Ordering::SeqCst),
                "exclude returned while a reader was inside"
            );
        });
    }
}

//! The host page cache and the write buffer (batch-io §8.1.2: LLAMA's cache, "a host
//! DRAM cache ... measured as a percentage of the dataset size", and the 1 MB write
//! buffer).
//!
//! Choices:
//! * The cache holds whole 4 KiB pages and evicts with CLOCK (one reference bit per
//!   frame); frames an operation is using are pinned. Each frame remembers when its data
//!   arrived (`ready_at`), so an operation that finds a page whose read is still in
//!   flight waits for that read instead of issuing another.
//! * The write buffer is a list of page ids to write with the next seal. An entry either
//!   refers to the cached frame (its state is copied when the buffer is sealed, so later
//!   updates to the page coalesce into the same write) or owns an image: a dirty page
//!   evicted from the cache, or a page host GC is relocating.
//! * The host may have a bounded number of write buffers (LLAMA's flush buffers; the paper
//!   names one 1 MB buffer, §8.1.2): a sealed buffer stays busy until the device
//!   acknowledges its write, and the host needs a free one to stage the next pages into,
//!   so once every buffer is sealed and unacknowledged the host thread waits for the
//!   earliest acknowledgement (with one buffer: for each write it seals). The store's
//!   default leaves the count unbounded (only the I/O queue bounds writes).

use crate::page::{self, Page};
use csd_sim::SimTime;
use std::collections::HashMap;

/// One cached page.
pub(crate) struct Frame {
    pub id: u64,
    pub data: Page,
    pub refbit: bool,
    pub pin: u32,
    pub ready_at: SimTime,
}

/// The page cache.
pub(crate) struct Cache {
    pub frames: Vec<Frame>,
    pub index: HashMap<u64, usize>,
    hand: usize,
    /// Most frames (pinned frames may exceed it briefly).
    pub capacity: usize,
    /// Lookups that found the page.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Frames evicted.
    pub evictions: u64,
}

impl Cache {
    pub fn new(capacity: usize) -> Cache {
        Cache {
            frames: Vec::new(),
            index: HashMap::new(),
            hand: 0,
            capacity: capacity.max(1),
            hits: 0,
            misses: 0,
            evictions: 0,
        }
    }

    pub fn get(&mut self, id: u64) -> Option<usize> {
        let f = self.index.get(&id).copied();
        if let Some(i) = f {
            self.frames[i].refbit = true;
        }
        f
    }

    pub fn is_full(&self) -> bool {
        self.frames.len() >= self.capacity
    }

    /// Choose a frame to evict (CLOCK, skipping pinned frames); `None` if all are pinned.
    pub fn victim(&mut self) -> Option<usize> {
        let n = self.frames.len();
        if n == 0 {
            return None;
        }
        for _ in 0..2 * n + 1 {
            let i = self.hand % n;
            self.hand = (i + 1) % n;
            let f = &mut self.frames[i];
            if f.pin > 0 {
                continue;
            }
            if f.refbit {
                f.refbit = false;
                continue;
            }
            return Some(i);
        }
        None
    }

    /// Remove frame `i` (swap-remove), returning its id and data.
    pub fn remove(&mut self, i: usize) -> (u64, Page) {
        let f = self.frames.swap_remove(i);
        self.index.remove(&f.id);
        if i < self.frames.len() {
            let moved = self.frames[i].id;
            self.index.insert(moved, i);
        }
        self.evictions += 1;
        (f.id, f.data)
    }

    /// Insert a page (the caller made room).
    pub fn insert(&mut self, id: u64, data: Page, ready_at: SimTime) -> usize {
        let i = self.frames.len();
        self.frames.push(Frame {
            id,
            data,
            refbit: true,
            pin: 0,
            ready_at,
        });
        self.index.insert(id, i);
        i
    }

    /// Replace the instants the frames hold by `settle(instant)` (the event core's
    /// compaction and end of recording).
    pub fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        for f in &mut self.frames {
            f.ready_at = settle(f.ready_at);
        }
    }

    /// Drop everything (a cold start).
    pub fn clear(&mut self) {
        self.frames.clear();
        self.index.clear();
        self.hand = 0;
    }
}

/// Names the earliest of some instants and its final value (the event core's
/// `CommandIssuer::earliest`).
pub(crate) type Earliest<'a> = dyn FnMut(&[SimTime]) -> Option<(usize, SimTime)> + 'a;

/// The write buffer.
pub(crate) struct WriteBuffer {
    pub order: Vec<u64>,
    /// `None`: take the page from the cache at seal time; `Some`: an owned image.
    pub slots: HashMap<u64, Option<Page>>,
    /// Pages host GC put here (relocations), for the user / GC byte split.
    pub relocated: HashMap<u64, ()>,
    /// When the data of every owned image is in host memory.
    pub ready_at: SimTime,
    /// Pages per seal (the buffer size less the descriptor block).
    pub cap: usize,
    /// When each sealed buffer that may still be in flight is acknowledged.
    in_flight: Vec<SimTime>,
}

impl WriteBuffer {
    pub fn new(cap: usize) -> WriteBuffer {
        WriteBuffer {
            order: Vec::new(),
            slots: HashMap::new(),
            relocated: HashMap::new(),
            ready_at: SimTime::ZERO,
            cap: cap.max(1),
            in_flight: Vec::new(),
        }
    }

    /// The instant a buffer is free to be sealed into, for a host with `buffers` write
    /// buffers (at least 1) whose thread is at `now`: `now` while fewer than `buffers`
    /// sealed writes are unacknowledged, else the earliest acknowledgement among them.
    pub fn free_at(&mut self, buffers: usize, now: SimTime) -> SimTime {
        let mut at = now;
        loop {
            self.in_flight.retain(|&d| d > at);
            if self.in_flight.len() < buffers.max(1) {
                return at;
            }
            let Some((i, &d)) = self.in_flight.iter().enumerate().min_by_key(|(_, d)| **d) else {
                return at;
            };
            self.in_flight.swap_remove(i);
            at = at.max(d);
        }
    }

    /// [`WriteBuffer::free_at`] on acknowledgements the event core may not have fixed:
    /// `earliest` names the earliest of some instants and its final value (the core books
    /// only as far as it must). The same instant as `free_at` gives on final values (the
    /// acknowledgement that leaves fewer than `buffers` in flight, or `now`), with no
    /// comparison of an unfixed instant.
    pub fn free_at_events(
        &mut self,
        buffers: usize,
        now: SimTime,
        earliest: &mut Earliest<'_>,
    ) -> SimTime {
        let mut at = now;
        while self.in_flight.len() >= buffers.max(1) {
            let Some((i, d)) = earliest(&self.in_flight) else {
                break;
            };
            self.in_flight.swap_remove(i);
            at = at.max(d);
        }
        at
    }

    /// Replace the instants the buffer holds by `settle(instant)` (the event core's
    /// compaction and end of recording).
    pub fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        self.ready_at = settle(self.ready_at);
        for t in &mut self.in_flight {
            *t = settle(*t);
        }
    }

    /// A sealed buffer's write is acknowledged at `done`; its buffer is busy until then.
    pub fn sealed(&mut self, done: SimTime) {
        self.in_flight.push(done);
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.slots.contains_key(&id)
    }

    /// Add `id` (from the cache when `image` is `None`); an existing entry takes the
    /// newer source.
    pub fn add(&mut self, id: u64, image: Option<Page>) {
        match self.slots.get_mut(&id) {
            Some(slot) => *slot = image,
            None => {
                self.order.push(id);
                self.slots.insert(id, image);
            }
        }
    }

    /// The owned image of `id`, if the buffer holds one.
    pub fn image(&self, id: u64) -> Option<&Page> {
        self.slots.get(&id).and_then(Option::as_ref)
    }

    /// Take everything.
    pub fn drain(&mut self) -> Vec<(u64, Option<Page>, bool)> {
        let order = std::mem::take(&mut self.order);
        let mut slots = std::mem::take(&mut self.slots);
        let reloc = std::mem::take(&mut self.relocated);
        order
            .into_iter()
            .map(|id| {
                let img = slots.remove(&id).flatten();
                (id, img, reloc.contains_key(&id))
            })
            .collect()
    }
}

/// A copy of a page.
pub(crate) fn copy(p: &Page) -> Page {
    let mut c = page::blank();
    c.copy_from_slice(&p[..]);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_free_only_once_fewer_than_all_are_in_flight() {
        let mut b = WriteBuffer::new(4);
        // Nothing in flight: free now.
        assert_eq!(b.free_at(1, SimTime::from_ns(10)), SimTime::from_ns(10));
        b.sealed(SimTime::from_ns(100));
        // One buffer, in flight until 100: the next seal waits for it.
        assert_eq!(b.free_at(1, SimTime::from_ns(20)), SimTime::from_ns(100));
        b.sealed(SimTime::from_ns(300));
        b.sealed(SimTime::from_ns(200));
        // Two buffers, both in flight: the earlier acknowledgement (200, sealed second)
        // frees one, not the first sealed.
        assert_eq!(b.free_at(2, SimTime::from_ns(150)), SimTime::from_ns(200));
        // The 300 one is still in flight; with two buffers one is free at 250.
        assert_eq!(b.free_at(2, SimTime::from_ns(250)), SimTime::from_ns(250));
        // Past every acknowledgement nothing waits, whatever the count.
        assert_eq!(b.free_at(1, SimTime::from_ns(400)), SimTime::from_ns(400));
        // A count of 0 means 1.
        b.sealed(SimTime::from_ns(500));
        assert_eq!(b.free_at(0, SimTime::from_ns(400)), SimTime::from_ns(500));
    }

    proptest::proptest! {
        /// The event core's variant decides as the calendar's does, for a host whose
        /// clock only moves forward (the store's thread), on final instants.
        #[test]
        fn the_event_cores_free_buffer_is_the_calendars(
            steps in proptest::collection::vec((0u64..500, 0u64..2_000, 0usize..4), 1..60),
        ) {
            let mut a = WriteBuffer::new(4);
            let mut b = WriteBuffer::new(4);
            let mut now = 0u64;
            let by_value = &mut |ts: &[SimTime]| {
                ts.iter().enumerate().min_by_key(|&(i, t)| (t.ns(), i)).map(|(i, &t)| (i, t))
            };
            for (step, ack, buffers) in steps {
                now += step;
                let t = SimTime::from_ns(now);
                let fa = a.free_at(buffers, t);
                let fb = b.free_at_events(buffers, t, by_value);
                proptest::prop_assert_eq!(fa, fb);
                now = fa.ns();
                a.sealed(SimTime::from_ns(now + ack));
                b.sealed(SimTime::from_ns(now + ack));
            }
        }
    }
}

//! Early write-back of an image file's dirty pages, so that the syncs the durability
//! promise needs ([`crate::store`]'s `persist`: before a FLUSH is acknowledged, around
//! every checkpoint, before every erase) find little left to write.
//!
//! An image's programs reach the host's page cache (`pwrite`, stores through the
//! mapping); the kernel writes them back only when a tenth of memory is dirty or after 30
//! seconds, so each `fdatasync` wrote everything since the last one while the thread
//! serving the device waited. Under `csd serve` 4 KiB random writes (about 400 MB/s into
//! the image) the FTL checkpoints about once a second, and a profile of the server had
//! those syncs as its largest cost: the serving thread stood still for each one.
//!
//! Choices made:
//! * After every [`KICK_BYTES`] written, a background thread asks the kernel to start
//!   writing back the dirty pages of the byte ranges written with `pwrite` since the last
//!   kick (`sync_file_range(SYNC_FILE_RANGE_WRITE)` per range, which does not wait for
//!   the disk). Ranges that meet are merged (a block's programs are consecutive slots),
//!   so a kick makes a call per block written, not per program. Kicks coalesce: ranges
//!   of a kick the thread has not taken yet join the next one.
//! * Only those ranges, not the whole file: the page states and OOB bytes are stored
//!   through the shared mapping, and starting the write-back of a page dirtied through a
//!   mapping write-protects it (`folio_mkclean`), which flushes the TLB of every core
//!   the process runs on (an inter-processor interrupt) and makes the next store to it
//!   fault. Under `csd serve` 4 KiB random writes that was half of this thread's time
//!   (perf, 2026-12-07: `smp_call_function_many_cond` under `folio_mkclean`, 10% of the
//!   server process's samples). Those pages reach the disk with the next sync.
//! * Nothing about durability changes: the kernel may write any dirty page back at any
//!   time anyway, and only a completed `fdatasync` makes anything durable. No modeled
//!   figure depends on it.
//! * Only for images that sync at all (`CSD_HOST_SYNC=off` leaves write-back to the
//!   kernel) and are open read-write; the thread starts at the first kick (an image that
//!   is only read, or little written, never has one) and is joined when the image closes.
//! * Linux only (`sync_file_range`); elsewhere nothing is started.

use std::fs::File;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Bytes written into an image after which its dirty pages are handed to the disk:
/// 8 MiB, 512 pages of 16 KiB. Small next to what a checkpoint interval writes under a
/// sustained write load (hundreds of MB), large next to one system call per kick.
pub(crate) const KICK_BYTES: usize = 8 << 20;

/// What the store and its background thread share.
#[derive(Debug, Default)]
struct Flags {
    /// Byte ranges `[start, end)` whose write-back was asked for and not started yet
    /// (empty: no kick pending).
    kicked: Vec<(u64, u64)>,
    /// The image is closing: the thread ends.
    stop: bool,
}

#[derive(Debug)]
struct Worker {
    shared: Arc<(Mutex<Flags>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

/// An image's early write-back (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Writeback {
    /// Bytes written since the last kick or sync.
    pending: usize,
    /// The byte ranges `[start, end)` written since the last kick or sync, merged where
    /// they meet.
    ranges: Ranges,
    /// The background thread, once started.
    worker: Option<Worker>,
    /// The thread could not be started: write-back stays with the kernel.
    failed: bool,
    /// Kicks handed to the thread (for tests).
    kicks: u64,
}

impl Writeback {
    /// Counts the `bytes` written into `file` at `offset` (with `pwrite`); past
    /// [`KICK_BYTES`] since the last kick, asks the background thread (started now if
    /// needed) to start writing back the ranges written since.
    pub(crate) fn wrote(&mut self, file: &File, offset: u64, bytes: usize) {
        if self.failed || !cfg!(target_os = "linux") {
            return;
        }
        self.ranges.add(offset, offset + bytes as u64);
        self.pending += bytes;
        if self.pending < KICK_BYTES {
            return;
        }
        self.pending = 0;
        if self.worker.is_none() {
            self.worker = Worker::start(file);
            if self.worker.is_none() {
                self.failed = true;
                self.ranges.clear();
                return;
            }
        }
        if let Some(w) = &self.worker {
            let (lock, cv) = &*w.shared;
            let mut f = lock.lock().unwrap_or_else(|e| e.into_inner());
            if f.kicked.is_empty() {
                self.kicks += 1;
                cv.notify_one();
            }
            self.ranges.drain_into(&mut f.kicked);
        }
    }

    /// Everything written so far is on disk (a sync completed).
    pub(crate) fn synced(&mut self) {
        self.pending = 0;
        self.ranges.clear();
    }

    /// Kicks handed to the background thread so far.
    #[cfg(test)]
    pub(crate) fn kicks(&self) -> u64 {
        self.kicks
    }
}

impl Worker {
    /// Starts the thread on a duplicate of `file`'s descriptor (`None` if either fails).
    fn start(file: &File) -> Option<Worker> {
        let file = file.try_clone().ok()?;
        let shared: Arc<(Mutex<Flags>, Condvar)> = Arc::default();
        let theirs = shared.clone();
        let handle = std::thread::Builder::new()
            .name("csd-writeback".into())
            .spawn(move || run(&file, &theirs))
            .ok()?;
        Some(Worker {
            shared,
            handle: Some(handle),
        })
    }
}

/// The byte ranges written since the last kick: `[start, end)`, a range extended where a
/// write starts at its end (the next slot of a block) or ends at its start.
#[derive(Debug, Default)]
struct Ranges {
    list: Vec<(u64, u64)>,
}

impl Ranges {
    /// Records `[start, end)`. The ranges of the blocks being filled are few (one per
    /// open block), so a scan from the most recent one finds the range to extend.
    fn add(&mut self, start: u64, end: u64) {
        debug_assert!(start <= end);
        for r in self.list.iter_mut().rev() {
            if r.1 == start {
                r.1 = end;
                return;
            }
            if r.0 == end {
                r.0 = start;
                return;
            }
        }
        self.list.push((start, end));
    }

    /// Moves every range into `out` (the kick's list).
    fn drain_into(&mut self, out: &mut Vec<(u64, u64)>) {
        out.append(&mut self.list);
    }

    fn clear(&mut self) {
        self.list.clear();
    }
}

/// The background thread: waits for a kick, starts the write-back of the dirty pages of
/// the kick's ranges, until told to stop.
fn run(file: &File, shared: &(Mutex<Flags>, Condvar)) {
    let (lock, cv) = shared;
    let mut ranges = Vec::new();
    loop {
        {
            let mut f = lock.lock().unwrap_or_else(|e| e.into_inner());
            while f.kicked.is_empty() && !f.stop {
                f = cv.wait(f).unwrap_or_else(|e| e.into_inner());
            }
            if f.stop {
                return;
            }
            std::mem::swap(&mut ranges, &mut f.kicked);
        }
        for &(start, end) in &ranges {
            start_writeback(file, start, end - start);
        }
        ranges.clear();
    }
}

/// Asks the kernel to start writing back the dirty pages of `file`'s bytes `[offset,
/// offset + len)`, without waiting for them. A failure is ignored: only a sync's result
/// says anything about durability.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    if len == 0 {
        // A length of 0 would mean "to the end of the file".
        return;
    }
    // SAFETY: `sync_file_range` on a descriptor this thread owns (a duplicate, open until
    // the thread returns) over a byte range given by value; the flag only starts
    // write-back of dirty pages and touches no memory of this process.
    let _ = unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

impl Drop for Worker {
    fn drop(&mut self) {
        {
            let (lock, cv) = &*self.shared;
            lock.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
            cv.notify_one();
        }
        // Joined, so the duplicate descriptor (and with it the image's lock) is gone when
        // the image is closed.
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kicks_after_enough_bytes_and_joins_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .expect("open");
        let mut wb = Writeback::default();
        wb.wrote(&file, 0, KICK_BYTES - 1);
        assert_eq!(wb.kicks(), 0, "no kick below the threshold");
        assert!(wb.worker.is_none(), "no thread before the first kick");
        wb.synced();
        assert!(wb.ranges.list.is_empty(), "a sync forgets the ranges");
        wb.wrote(&file, 0, KICK_BYTES - 1);
        assert_eq!(wb.kicks(), 0, "a sync starts the count again");
        wb.wrote(&file, (KICK_BYTES - 1) as u64, 1);
        if !cfg!(target_os = "linux") {
            return;
        }
        assert_eq!(wb.kicks(), 1);
        assert!(wb.ranges.list.is_empty(), "a kick hands its ranges over");
        let shared = Arc::downgrade(&wb.worker.as_ref().expect("started").shared);
        // Kicks while one is pending coalesce; each one past the threshold counts.
        wb.wrote(&file, 0, KICK_BYTES);
        assert!(wb.kicks() >= 1 && wb.kicks() <= 2);
        drop(wb);
        assert!(
            shared.upgrade().is_none(),
            "the thread ended (it held the shared flags) when the write-back was dropped"
        );
    }

    use proptest::prelude::*;

    proptest! {
        /// Writes of slots at random places (several blocks filled in turn, slots
        /// skipped, written again) against a reference set of bytes: the ranges cover
        /// exactly the bytes written (a block filled in order is one range: the test
        /// below).
        #[test]
        fn ranges_cover_exactly_the_bytes_written(
            writes in proptest::collection::vec((0u64..4, 0u64..16), 1..80)
        ) {
            const SLOT: u64 = 16;
            let mut r = Ranges::default();
            let mut want = std::collections::BTreeSet::new();
            for &(block, slot) in &writes {
                let start = block * 1000 + slot * SLOT;
                r.add(start, start + SLOT);
                want.extend(start..start + SLOT);
            }
            let mut got = std::collections::BTreeSet::new();
            for &(s, e) in &r.list {
                prop_assert!(s < e);
                got.extend(s..e);
            }
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn a_block_filled_in_order_is_one_range_per_block() {
        let mut r = Ranges::default();
        // Four blocks filled round robin, a slot at a time, as the FTL stripes programs.
        for slot in 0..64u64 {
            for block in 0..4u64 {
                let start = block * (2 << 20) + slot * 16384;
                r.add(start, start + 16384);
            }
        }
        let mut list = r.list.clone();
        list.sort_unstable();
        let want: Vec<(u64, u64)> = (0..4u64)
            .map(|b| (b * (2 << 20), b * (2 << 20) + 64 * 16384))
            .collect();
        assert_eq!(list, want);
        let mut out = vec![(1, 2)];
        r.drain_into(&mut out);
        assert_eq!(out.len(), 5, "drained after what the kick already held");
        assert!(r.list.is_empty());
    }
}

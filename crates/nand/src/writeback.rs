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
//!   writing back the file's dirty pages (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which
//!   does not wait for the disk). Kicks coalesce: one pending at most.
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
    /// A write-back was asked for and not started yet.
    kicked: bool,
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
    /// The background thread, once started.
    worker: Option<Worker>,
    /// The thread could not be started: write-back stays with the kernel.
    failed: bool,
    /// Kicks handed to the thread (for tests).
    kicks: u64,
}

impl Writeback {
    /// Counts `bytes` written into `file`; past [`KICK_BYTES`] since the last kick, asks
    /// the background thread (started now if needed) to start writing back.
    pub(crate) fn wrote(&mut self, file: &File, bytes: usize) {
        self.pending += bytes;
        if self.pending < KICK_BYTES || self.failed || !cfg!(target_os = "linux") {
            return;
        }
        self.pending = 0;
        if self.worker.is_none() {
            self.worker = Worker::start(file);
            if self.worker.is_none() {
                self.failed = true;
                return;
            }
        }
        if let Some(w) = &self.worker {
            let (lock, cv) = &*w.shared;
            let mut f = lock.lock().unwrap_or_else(|e| e.into_inner());
            if !f.kicked {
                f.kicked = true;
                self.kicks += 1;
                cv.notify_one();
            }
        }
    }

    /// Everything written so far is on disk (a sync completed).
    pub(crate) fn synced(&mut self) {
        self.pending = 0;
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

/// The background thread: waits for a kick, starts the write-back of every dirty page of
/// the file, until told to stop.
fn run(file: &File, shared: &(Mutex<Flags>, Condvar)) {
    let (lock, cv) = shared;
    loop {
        {
            let mut f = lock.lock().unwrap_or_else(|e| e.into_inner());
            while !f.kicked && !f.stop {
                f = cv.wait(f).unwrap_or_else(|e| e.into_inner());
            }
            if f.stop {
                return;
            }
            f.kicked = false;
        }
        start_writeback(file);
    }
}

/// Asks the kernel to start writing back `file`'s dirty pages, without waiting for them.
/// A failure is ignored: only a sync's result says anything about durability.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: `sync_file_range` on a descriptor this thread owns (a duplicate, open until
    // the thread returns); offset 0 and length 0 mean the whole file; the flag only starts
    // write-back of dirty pages and touches no memory of this process.
    let _ = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File) {}

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
        wb.wrote(&file, KICK_BYTES - 1);
        assert_eq!(wb.kicks(), 0, "no kick below the threshold");
        assert!(wb.worker.is_none(), "no thread before the first kick");
        wb.synced();
        wb.wrote(&file, KICK_BYTES - 1);
        assert_eq!(wb.kicks(), 0, "a sync starts the count again");
        wb.wrote(&file, 1);
        if !cfg!(target_os = "linux") {
            return;
        }
        assert_eq!(wb.kicks(), 1);
        let shared = Arc::downgrade(&wb.worker.as_ref().expect("started").shared);
        // Kicks while one is pending coalesce; each one past the threshold counts.
        wb.wrote(&file, KICK_BYTES);
        assert!(wb.kicks() >= 1 && wb.kicks() <= 2);
        drop(wb);
        assert!(
            shared.upgrade().is_none(),
            "the thread ended (it held the shared flags) when the write-back was dropped"
        );
    }
}

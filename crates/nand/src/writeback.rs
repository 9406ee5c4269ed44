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
//! * **Stale pages leave the page cache.** A page whose every sector was superseded or
//!   trimmed is never read again before its block's erase ([`crate::Nand::page_stale`],
//!   which the FTL calls when a page's last valid sector goes). Its data range joins a
//!   list that the thread hands to `posix_fadvise(POSIX_FADV_DONTNEED)` one kick after
//!   it arrived, so its write-back, started at the kick after its program, has had a
//!   kick's worth of writes to finish (the kernel drops only clean, unmapped pages; a
//!   page still dirty is skipped and reaches the disk as before). Without this, a
//!   log-structured device turns every host write into a new page of the page cache:
//!   under `csd serve` 4 KiB random writes over 2 GiB the page cache grew by 300 MB/s,
//!   all of it stale after a few seconds, and every write then paid for a page taken
//!   from free memory (on this VM, measured 2026-12-08: `copy_folio_from_iter_atomic`
//!   21% of the server's samples while free memory lasted, 46% after; 75K IOPS fell to
//!   38K after 30 s). With stale pages dropped, the page cache holds about the live
//!   data, and new pages come from the ones just freed. Only a hint: the bytes on disk
//!   stay as they are, and a read of them anyway (none should come) gets them back
//!   unchanged.
//! * Linux only (`sync_file_range`, `posix_fadvise`); elsewhere nothing is started.

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
    /// Byte ranges `[start, end)` of stale pages handed over and not taken yet.
    stale: Vec<(u64, u64)>,
    /// The thread is working on what it took.
    busy: bool,
    /// The image is closing: the thread ends.
    stop: bool,
}

impl Flags {
    /// Nothing handed over waits for the thread.
    fn idle(&self) -> bool {
        self.kicked.is_empty() && self.stale.is_empty()
    }
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
    /// Data ranges of stale pages named since the last kick (see the module docs).
    stale: Vec<(u64, u64)>,
    /// Bytes of [`Writeback::stale`].
    stale_bytes: usize,
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
        if self.pending >= KICK_BYTES {
            self.kick(file);
        }
    }

    /// The `bytes` of `file` at `offset` hold a stale page's data: dropped from the page
    /// cache one kick after the next (see the module docs). Past [`KICK_BYTES`] of them
    /// since the last kick, a kick of its own: trims make pages stale without writing.
    pub(crate) fn stale(&mut self, file: &File, offset: u64, bytes: usize) {
        if self.failed || !cfg!(target_os = "linux") || bytes == 0 {
            return;
        }
        self.stale.push((offset, offset + bytes as u64));
        self.stale_bytes += bytes;
        if self.stale_bytes >= KICK_BYTES {
            self.kick(file);
        }
    }

    /// Hands the ranges written and the stale ranges named since the last kick to the
    /// background thread (started now if needed).
    fn kick(&mut self, file: &File) {
        self.pending = 0;
        self.stale_bytes = 0;
        if self.worker.is_none() {
            self.worker = Worker::start(file);
            if self.worker.is_none() {
                self.failed = true;
                self.ranges.clear();
                self.stale = Vec::new();
                return;
            }
        }
        if let Some(w) = &self.worker {
            let (lock, cv) = &*w.shared;
            let mut f = lock.lock().unwrap_or_else(|e| e.into_inner());
            if f.idle() {
                self.kicks += 1;
                cv.notify_all();
            }
            self.ranges.drain_into(&mut f.kicked);
            f.stale.append(&mut self.stale);
        }
    }

    /// Everything written so far is on disk (a sync completed). Stale ranges stay listed:
    /// their pages are clean now, which is what dropping them needs.
    pub(crate) fn synced(&mut self) {
        self.pending = 0;
        self.ranges.clear();
    }

    /// Kicks handed to the background thread so far.
    #[cfg(test)]
    pub(crate) fn kicks(&self) -> u64 {
        self.kicks
    }

    /// Waits until the background thread (if started) has taken and worked through
    /// everything handed to it (tests).
    #[cfg(test)]
    pub(crate) fn settle(&self) {
        if let Some(w) = &self.worker {
            let (lock, cv) = &*w.shared;
            let mut f = lock.lock().unwrap_or_else(|e| e.into_inner());
            while !f.idle() || f.busy {
                f = cv.wait(f).unwrap_or_else(|e| e.into_inner());
            }
        }
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
/// the kick's ranges and drops the stale ranges of the kick before from the page cache,
/// until told to stop.
fn run(file: &File, shared: &(Mutex<Flags>, Condvar)) {
    let (lock, cv) = shared;
    let mut ranges = Vec::new();
    let mut fresh = Vec::new();
    // Stale ranges taken at the kick before this one.
    let mut aging: Vec<(u64, u64)> = Vec::new();
    loop {
        {
            let mut f = lock.lock().unwrap_or_else(|e| e.into_inner());
            f.busy = false;
            cv.notify_all();
            while f.idle() && !f.stop {
                f = cv.wait(f).unwrap_or_else(|e| e.into_inner());
            }
            if f.stop {
                return;
            }
            std::mem::swap(&mut ranges, &mut f.kicked);
            std::mem::swap(&mut fresh, &mut f.stale);
            f.busy = true;
        }
        for &(start, end) in &ranges {
            start_writeback(file, start, end - start);
        }
        ranges.clear();
        for (start, end) in merged(&mut aging) {
            drop_cached(file, start, end - start);
        }
        aging.clear();
        std::mem::swap(&mut aging, &mut fresh);
    }
}

/// `ranges` sorted, with ranges that meet or overlap merged (stale pages of one block
/// are often neighbours: a block whose data was rewritten in order goes stale in order).
fn merged(ranges: &mut [(u64, u64)]) -> impl Iterator<Item = (u64, u64)> + '_ {
    ranges.sort_unstable();
    let mut i = 0;
    std::iter::from_fn(move || {
        let &(start, mut end) = ranges.get(i)?;
        i += 1;
        while let Some(&(s, e)) = ranges.get(i).filter(|r| r.0 <= end) {
            debug_assert!(s >= start);
            end = end.max(e);
            i += 1;
        }
        Some((start, end))
    })
}

/// Asks the kernel to drop the clean, unmapped page-cache pages of `file`'s bytes
/// `[offset, offset + len)` (`POSIX_FADV_DONTNEED`; dirty pages only have their
/// write-back started). A failure is ignored: the pages only stay cached.
fn drop_cached(file: &File, offset: u64, len: u64) {
    on_range(file, offset, len, RangeCall::DropCached);
}

/// Asks the kernel to start writing back the dirty pages of `file`'s bytes `[offset,
/// offset + len)`, without waiting for them. A failure is ignored: only a sync's result
/// says anything about durability.
fn start_writeback(file: &File, offset: u64, len: u64) {
    on_range(file, offset, len, RangeCall::StartWriteback);
}

/// What the thread asks the kernel to do with a byte range of the image.
#[derive(Clone, Copy)]
enum RangeCall {
    /// `sync_file_range(SYNC_FILE_RANGE_WRITE)`.
    StartWriteback,
    /// `posix_fadvise(POSIX_FADV_DONTNEED)`.
    DropCached,
}

/// `call` on `file`'s bytes `[offset, offset + len)`; nothing for an empty range (a
/// length of 0 would mean "to the end of the file" to both calls) or off Linux. The
/// result is ignored (see the callers).
fn on_range(file: &File, offset: u64, len: u64, call: RangeCall) {
    if len == 0 || !cfg!(target_os = "linux") {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (fd, off, len) = (
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
        );
        // SAFETY: both calls take a descriptor this thread owns (a duplicate, open until
        // the thread returns) and a byte range given by value, and touch no memory of
        // this process: `sync_file_range` with this flag only starts the write-back of
        // dirty pages; `posix_fadvise` with this advice drops only clean page-cache pages
        // no process maps, whose bytes the file keeps on disk.
        let _ = unsafe {
            match call {
                RangeCall::StartWriteback => {
                    libc::sync_file_range(fd, off, len, libc::SYNC_FILE_RANGE_WRITE)
                }
                RangeCall::DropCached => {
                    libc::posix_fadvise(fd, off, len, libc::POSIX_FADV_DONTNEED)
                }
            }
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, call);
}

impl Drop for Worker {
    fn drop(&mut self) {
        {
            let (lock, cv) = &*self.shared;
            lock.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
            cv.notify_all();
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

    /// A new empty file at `path`, open for reading and writing.
    fn new_file(path: &std::path::Path) -> File {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(path)
            .expect("open")
    }

    #[test]
    fn kicks_after_enough_bytes_and_joins_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let file = new_file(&path);
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
    fn merged_sorts_and_joins_ranges_that_meet() {
        let mut v = vec![(40, 50), (0, 10), (10, 20), (30, 45), (60, 61), (5, 8)];
        let got: Vec<(u64, u64)> = merged(&mut v).collect();
        assert_eq!(got, vec![(0, 20), (30, 50), (60, 61)]);
        let mut none: Vec<(u64, u64)> = Vec::new();
        assert_eq!(merged(&mut none).count(), 0);
    }

    /// Which of the 4 KiB pages of `file`'s first `len` bytes are in the page cache
    /// (`mincore` on a shared read-only mapping, which faults nothing in).
    #[cfg(target_os = "linux")]
    fn cached_pages(file: &File, len: usize) -> Vec<bool> {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared read-only mapping of `len` bytes of a file at least that
        // long, unmapped before returning; `mincore` writes one byte per page into a
        // vector of exactly that many bytes.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED, "mmap");
            let mut v = vec![0u8; len.div_ceil(4096)];
            assert_eq!(libc::mincore(p, len, v.as_mut_ptr()), 0, "mincore");
            libc::munmap(p, len);
            v.into_iter().map(|b| b & 1 == 1).collect()
        }
    }

    /// Stale ranges leave the page cache one kick after they were named; the rest of the
    /// file stays cached, and its bytes on disk stay as they were.
    #[cfg(target_os = "linux")]
    #[test]
    fn stale_ranges_leave_the_page_cache_a_kick_later() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().expect("tempdir");
        // SAFETY: statfs fills the struct for a path we pass as a C string.
        let on_tmpfs = unsafe {
            let c = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
            let mut st: libc::statfs = std::mem::zeroed();
            libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type == 0x0102_1994
        };
        if on_tmpfs {
            eprintln!("skipped: the temporary directory is tmpfs, whose pages are the file");
            return;
        }
        let path = dir.path().join("f");
        let file = new_file(&path);
        const MIB: usize = 1 << 20;
        let page = 16384;
        let data: Vec<u8> = (0..16 * MIB).map(|i| (i * 7 % 251) as u8).collect();
        file.write_all_at(&data, 0).expect("write");
        // Clean pages, which are what the kernel drops: fdatasync by its system call
        // number, since CI runs the tests under eatmydata, whose `fdatasync` returns
        // without syncing (and would leave every page dirty).
        use std::os::fd::AsRawFd;
        // SAFETY: fdatasync on a descriptor `file` owns; no memory is passed.
        let r = unsafe { libc::syscall(libc::SYS_fdatasync, file.as_raw_fd()) };
        assert_eq!(r, 0, "fdatasync: {}", std::io::Error::last_os_error());
        let before = cached_pages(&file, 16 * MIB);
        let mut wb = Writeback::default();
        // Every other 16 KiB page of the first 8 MiB is stale (not enough for a kick),
        // then the rest of the first 8 MiB.
        for p in (0..8 * MIB / page).step_by(2) {
            wb.stale(&file, (p * page) as u64, page);
        }
        assert_eq!(wb.kicks(), 0, "4 MiB of stale pages do not kick");
        for p in (1..8 * MIB / page).step_by(2) {
            wb.stale(&file, (p * page) as u64, page);
        }
        assert_eq!(wb.kicks(), 1, "8 MiB of stale pages kick");
        wb.settle();
        // One kick later (writes elsewhere), they are dropped.
        file.write_all_at(&data[..8 * MIB], 16 * MIB as u64)
            .expect("write");
        wb.wrote(&file, 16 * MIB as u64, 8 * MIB);
        assert_eq!(wb.kicks(), 2);
        wb.settle();
        let after = cached_pages(&file, 16 * MIB);
        let stale_cached = after[..8 * MIB / 4096].iter().filter(|&&c| c).count();
        let live_cached = after[8 * MIB / 4096..].iter().filter(|&&c| c).count();
        let live_before = before[8 * MIB / 4096..].iter().filter(|&&c| c).count();
        assert_eq!(stale_cached, 0, "every stale page left the page cache");
        assert_eq!(live_cached, live_before, "no other page did");
        let mut back = vec![0u8; 16 * MIB];
        file.read_exact_at(&mut back, 0).expect("read");
        assert!(back == data, "the file's bytes are unchanged");
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

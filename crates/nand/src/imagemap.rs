//! The mapping of an image file into the process, placed (for read-only opens) so that
//! the host's kernel never maps a large page-cache folio whole, and the one owned-mapping
//! type behind it and the memory backend's blocks (the emulator's own memory, no modeled
//! effect).
//!
//! Why: the image's bytes are read through a mapping ([`crate::store`]), and a scan
//! releases the pages it read every so often (`MADV_DONTNEED`), so that its resident set
//! is bounded by that window and not by the table. Linux (6.18 here) maps a page-cache
//! folio *whole* on the first touch of any page of it when the folio lies inside one
//! page table (2 MiB of addresses) of the mapping. The page cache of an image holds
//! folios of up to 2 MiB (a reader that asked for huge pages, large reads or writes), and
//! a scan reads each erase block's pages in order, about 128 blocks at a time on the
//! default device: the first read of a block's folio mapped up to 2 MiB of pages the
//! scan reaches only much later, in every block at once. Measured 2026-12-05 (one-shot
//! `csd query --image sf1.img q6`, all three strategies, the image's page cache in 2 MiB
//! folios): 500–530 MB peak RSS, against 170–190 MB on the same image with small folios.
//!
//! The choice: a read-only open ([`Placement::PastBoundary`]; its scans let what they
//! read go) maps the file at an address one memory page past a 2 MiB boundary,
//! so every file offset that is 2 MiB-aligned (where the large folios start) lies one page
//! past a page-table boundary, no 2 MiB folio fits in one page table and no folio of
//! 1 MiB or less that straddles a boundary is mapped whole; a fault then maps only the
//! kernel's fault-around window (64 KiB by default) of it. The pages that hold the
//! image's bytes are the same; only the placement of the mapping differs. A read-write
//! open ([`Placement::Boundary`]: a server's random reads keep their pages) is placed on
//! a boundary, where a 2 MiB folio takes one page-table entry. Nothing else
//! changes: the mapping is shared for a read-write open and copy-on-write (private, no
//! swap reserved) for a read-only open.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// The span of addresses one page table maps (x86-64 and arm64 with 4 KiB pages): where
/// the kernel may map a folio whole.
const PAGE_TABLE_SPAN: usize = 2 << 20;

/// Where [`Mapped::map_file`] places a file's mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// On a page-table boundary: the kernel may map a large page-cache folio whole, a
    /// 2 MiB one with a single page-table entry. For opens that keep what they read
    /// mapped (a read-write device, `csd serve`: random reads over a working set). Measured
    /// 2026-12-05, `csd bench serve --runtime 5 --rounds 3`, one run each: `csd serve`
    /// randread on its image 191K IOPS placed on a boundary (171K where the kernel placed
    /// it, before this module), 69K past one (fault-around and 4 KiB entries for every
    /// page of the working set).
    Boundary,
    /// One memory page past a boundary (see the [module docs](self)): read-only opens,
    /// whose scans let what they read go.
    PastBoundary,
}

/// Memory this process mapped (`mmap`) and unmaps when dropped: `len` bytes, readable and
/// writable, at `ptr`, in a mapping of `mapped` bytes (`len` rounded up to whole memory
/// pages). The image file's mapping ([`Mapped::map_file`]) and the memory backend's
/// anonymous blocks (`crate::store::AnonBlock`) both are one.
pub(crate) struct Mapped {
    ptr: NonNull<u8>,
    len: usize,
    mapped: usize,
}

// SAFETY: the mapping is plain memory owned by this value (unmapped only in `drop`);
// access goes through `&self` / `&mut self` like any `[u8]`, so moving or sharing it
// between threads is as safe as for a `Vec<u8>`.
unsafe impl Send for Mapped {}
// SAFETY: see `Send`; `&Mapped` gives only shared reads.
unsafe impl Sync for Mapped {}

impl std::fmt::Debug for Mapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapped({:p}, {} bytes)", self.ptr, self.len)
    }
}

impl Mapped {
    /// Takes ownership of a mapping (`None` if `raw` is null or `MAP_FAILED`).
    ///
    /// # Safety
    /// `raw` must be the start of a mapping of `mapped >= len` bytes, readable and
    /// writable, that this process made and nothing else refers to or unmaps.
    pub(crate) unsafe fn from_raw(
        raw: *mut libc::c_void,
        len: usize,
        mapped: usize,
    ) -> Option<Mapped> {
        debug_assert!(len <= mapped);
        if raw == libc::MAP_FAILED {
            return None;
        }
        Some(Mapped {
            ptr: NonNull::new(raw.cast::<u8>())?,
            len,
            mapped,
        })
    }

    /// The mapping's first byte.
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes of the mapping, whole memory pages (`len` rounded up).
    pub(crate) fn mapped(&self) -> usize {
        self.mapped
    }

    /// `madvise(advice)` on bytes `[start, start + len)` (a page-aligned start); whether
    /// the kernel took it.
    ///
    /// # Safety
    /// The advice must not discard bytes that exist only in this process (`MADV_DONTNEED`
    /// on private pages this process stored into) or otherwise change what any slice
    /// into the range reads.
    unsafe fn advise(&self, advice: libc::c_int, start: usize, len: usize) -> bool {
        if start.checked_add(len).is_none_or(|e| e > self.mapped) {
            return false;
        }
        // SAFETY: the range lies inside the mapping (checked above); the caller vouches
        // for the advice.
        unsafe { libc::madvise(self.ptr.as_ptr().add(start).cast(), len, advice) == 0 }
    }

    /// Map all `len` bytes of `file` (its length), shared (`private` false: stores reach
    /// the file) or copy-on-write (`private`: stores stay in this process), at
    /// `placement` relative to a page-table boundary (`page`: the memory page size).
    ///
    /// # Safety
    /// As for any mapping of a file: no process may truncate `file` below `len` while
    /// the map lives, and bytes another process writes to the file appear in it (an
    /// image is held under an advisory lock for this reason).
    pub(crate) unsafe fn map_file(
        file: &File,
        len: usize,
        private: bool,
        placement: Placement,
        page: usize,
    ) -> io::Result<Mapped> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map an empty file",
            ));
        }
        let mapped = len.next_multiple_of(page);
        let span = mapped + PAGE_TABLE_SPAN;
        // SAFETY: an anonymous inaccessible reservation at an address of the kernel's
        // choosing; it maps no file and clobbers nothing. Checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base as usize;
        // `base` is page-aligned, so the next boundary is at most `SPAN - page` past it:
        // `at <= base + SPAN`, and `at + mapped <= base + span`.
        let at = base.next_multiple_of(PAGE_TABLE_SPAN)
            + match placement {
                Placement::Boundary => 0,
                Placement::PastBoundary => page,
            };
        debug_assert!(at >= base && at + mapped <= base + span);
        let flags = if private {
            libc::MAP_PRIVATE | libc::MAP_NORESERVE
        } else {
            libc::MAP_SHARED
        };
        // SAFETY: MAP_FIXED replaces pages of our own reservation only (`at..at+mapped`
        // lies inside `base..base+span`, which no one else can map while we hold it);
        // the file's contract is the caller's. Checked for MAP_FAILED.
        let got = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            )
        };
        let err = (got == libc::MAP_FAILED).then(io::Error::last_os_error);
        // SAFETY: the reservation's pages before and after the file's mapping are ours
        // and nothing refers to them; unmapping an empty range is skipped.
        unsafe {
            if at > base {
                libc::munmap(base as *mut libc::c_void, at - base);
            }
            let end = at + mapped;
            if base + span > end {
                libc::munmap(end as *mut libc::c_void, base + span - end);
            }
        }
        if let Some(e) = err {
            // SAFETY: the reservation's middle is still ours; nothing refers to it.
            unsafe { libc::munmap(at as *mut libc::c_void, mapped) };
            return Err(e);
        }
        // SAFETY: `got` is the file's mapping of `mapped` bytes just made, ours alone.
        unsafe { Mapped::from_raw(got, len, mapped) }.ok_or_else(io::Error::last_os_error)
    }

    /// Advise the kernel that accesses are random: no read-ahead on faults (a few state
    /// bytes of a sparse image must not pull in megabytes). A failure is harmless.
    pub(crate) fn advise_random(&self) {
        // SAFETY: MADV_RANDOM changes no contents.
        unsafe { self.advise(libc::MADV_RANDOM, 0, self.mapped) };
    }

    /// Ask the kernel to read bytes `[start, start + len)` (page-aligned start) into the
    /// page cache in the background (`MADV_WILLNEED`). A hint: a failure is harmless.
    pub(crate) fn will_need(&self, start: usize, len: usize) {
        // SAFETY: MADV_WILLNEED changes no contents.
        unsafe { self.advise(libc::MADV_WILLNEED, start, len) };
    }

    /// Never back the mapping with transparent huge pages (`MADV_NOHUGEPAGE`), whatever
    /// the system's setting. A failure (a kernel without them) is harmless.
    pub(crate) fn no_huge_pages(&self) {
        // SAFETY: MADV_NOHUGEPAGE changes no contents.
        unsafe { self.advise(libc::MADV_NOHUGEPAGE, 0, self.mapped) };
    }

    /// Fault every page in for writing now (`MADV_POPULATE_WRITE`); whether the kernel
    /// did (kernels before 5.14 do not know it).
    pub(crate) fn populate_write(&self) -> bool {
        // SAFETY: populating for writing changes no contents.
        unsafe { self.advise(libc::MADV_POPULATE_WRITE, 0, self.mapped) }
    }

    /// Drop this process's page-table entries for bytes `[start, start + len)`
    /// (page-aligned offsets; `MADV_DONTNEED`). A failure only leaves them mapped.
    ///
    /// # Safety
    /// The range must hold no page whose bytes exist only in this process (a
    /// copy-on-write page this process stored into): those would be lost, and any slice
    /// into them would change. Shared pages, and private pages never stored into, read
    /// back the file's bytes.
    pub(crate) unsafe fn dont_need(&self, start: usize, len: usize) {
        debug_assert!(start.checked_add(len).is_some_and(|e| e <= self.mapped));
        // SAFETY: the caller guarantees no private bytes are discarded.
        unsafe { self.advise(libc::MADV_DONTNEED, start, len) };
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` readable bytes mapped for the life of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Mapped {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `len` writable bytes mapped for the life of `self`,
        // borrowed uniquely through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours (`from_raw`'s contract) and no slice into it
        // outlives `self` (they borrow it); `mapped` covers exactly what was mapped.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.mapped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn page() -> usize {
        // SAFETY: sysconf reads a constant of the system.
        usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
    }

    #[test]
    fn maps_the_file_one_page_past_a_page_table_boundary() {
        let mut f = tempfile::tempfile().unwrap();
        let bytes: Vec<u8> = (0..3 * PAGE_TABLE_SPAN + 123)
            .map(|i| (i % 251) as u8)
            .collect();
        f.write_all(&bytes).unwrap();
        let file_byte = |i: u64| {
            let mut b = [0u8; 1];
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, i).unwrap();
            b[0]
        };
        // Copy-on-write first (its store must not reach the file), then shared.
        for private in [true, false] {
            // SAFETY: a temporary file only this test holds.
            let mut m = unsafe {
                Mapped::map_file(&f, bytes.len(), private, Placement::PastBoundary, page())
            }
            .unwrap();
            assert_eq!(m.as_ptr() as usize % PAGE_TABLE_SPAN, page(), "placement");
            // SAFETY: as above.
            let on =
                unsafe { Mapped::map_file(&f, bytes.len(), private, Placement::Boundary, page()) }
                    .unwrap();
            assert_eq!(
                on.as_ptr() as usize % PAGE_TABLE_SPAN,
                0,
                "placement on a boundary"
            );
            assert!(on[..] == bytes[..], "contents on a boundary");
            drop(on);
            assert!(m[..] == bytes[..], "contents");
            m.advise_random();
            m[5] = 7;
            // SAFETY: releases pages this process did not store into.
            unsafe { m.dont_need(PAGE_TABLE_SPAN, 2 * page()) };
            assert!(
                m[PAGE_TABLE_SPAN..] == bytes[PAGE_TABLE_SPAN..],
                "after a release"
            );
            assert_eq!(m[5], 7);
            drop(m);
            assert_eq!(
                file_byte(5),
                if private { 5 } else { 7 },
                "private {private}"
            );
        }
    }

    #[test]
    fn an_empty_file_is_refused() {
        let f = tempfile::tempfile().unwrap();
        // SAFETY: a temporary file only this test holds.
        assert!(unsafe { Mapped::map_file(&f, 0, true, Placement::PastBoundary, page()) }.is_err());
    }
}

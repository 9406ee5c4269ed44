//! CPU cache hints for the emulator's own speed (issue 12): bring memory the host is
//! about to touch towards the core. Hints change no data, never fault and have no
//! effect on any result or modeled figure; on other architectures than x86-64 they
//! do nothing.
//!
//! Shared by the flash store (page lines before a scan touches them), the FTL (MAP
//! entries) and the evaluator's group tables (slots of the next keys).

/// Hint the CPU to bring every cache line of `bytes` into its caches (x86-64
/// `prefetcht0`).
#[inline(always)]
pub fn lines(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    each_line::<{ std::arch::x86_64::_MM_HINT_T0 }>(bytes);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Hint the CPU to bring every cache line of `bytes` towards its outer caches (x86-64
/// `prefetcht2`): for lines hinted well ahead of their use, many at once. The core's
/// first-level miss buffers, which [`lines`]'s `prefetcht0` holds until each line
/// arrives, stay free for the loads under way (README, `csd bench tpch`, has the
/// measurement).
#[inline(always)]
pub fn lines_l2(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    each_line::<{ std::arch::x86_64::_MM_HINT_T2 }>(bytes);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// One `prefetch` of kind `HINT` per cache line `bytes` touches, the first and last
/// included when `bytes` does not start or end on a line boundary (64-byte chunks of
/// the slice missed the last line of an unaligned minipage).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn each_line<const HINT: i32>(bytes: &[u8]) {
    for line in line_starts(bytes) {
        // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has; it only hints
        // the cache about an address (here in a line `bytes` touches) and never faults
        // or changes data.
        unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(line as *const i8) };
    }
}

/// Hint the CPU to bring every cache line of the slice `v` into its caches (see
/// [`lines`]): for values other than bytes.
#[inline(always)]
pub fn items<T>(v: &[T]) {
    #[cfg(target_arch = "x86_64")]
    for line in addr_lines(v.as_ptr() as usize, std::mem::size_of_val(v)) {
        // SAFETY: as in `each_line`: a hint about an address in a line the slice takes.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line as *const i8)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// The addresses of the 64-byte cache lines `bytes` touches.
#[inline(always)]
fn line_starts(bytes: &[u8]) -> std::iter::StepBy<std::ops::Range<usize>> {
    addr_lines(bytes.as_ptr() as usize, bytes.len())
}

/// The addresses of the 64-byte cache lines that `len` bytes from address `start`
/// touch.
#[inline(always)]
fn addr_lines(start: usize, len: usize) -> std::iter::StepBy<std::ops::Range<usize>> {
    let end = start + len;
    let first = if len == 0 { end } else { start & !63 };
    (first..end).step_by(64)
}

/// Hint the CPU to bring the cache line holding `v` into its caches (see [`lines`]).
#[inline(always)]
pub fn value<T>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `each_line`: a hint about the address of a live reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (v as *const T).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line a slice touches is hinted once: the partial first and last lines of
    /// an unaligned slice too, nothing for an empty one.
    #[test]
    fn hints_cover_every_line_a_slice_touches() {
        let buf = vec![0u8; 1024];
        let base = buf.as_ptr() as usize;
        let aligned = base.next_multiple_of(64) - base;
        let s = &buf[aligned + 28..aligned + 28 + 440];
        assert_eq!(line_starts(s).count(), 8);
        assert_eq!(line_starts(s).next(), Some(base + aligned));
        assert_eq!(line_starts(&buf[aligned..aligned + 448]).count(), 7);
        assert_eq!(line_starts(&buf[aligned + 5..aligned + 5]).count(), 0);
        lines(s);
        lines_l2(s);
        value(&buf[0]);
        // A slice of wider values: the lines of its bytes (five 16-byte values from a
        // line's start take two; 120 bytes from 8 into a line two, 121 three).
        let wide = vec![0u128; 64];
        let at = wide.as_ptr() as usize;
        let first = (at.next_multiple_of(64) - at) / 16;
        let v = &wide[first..first + 5];
        assert_eq!(
            addr_lines(v.as_ptr() as usize, std::mem::size_of_val(v)).count(),
            2
        );
        assert_eq!(addr_lines(v.as_ptr() as usize + 8, 80).count(), 2);
        assert_eq!(addr_lines(v.as_ptr() as usize + 8, 120).count(), 2);
        assert_eq!(addr_lines(v.as_ptr() as usize + 8, 121).count(), 3);
        items(v);
        items::<u128>(&[]);
    }
}

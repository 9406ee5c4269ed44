//! `size_scan_pool`: rayon's global pool, where scans evaluate pages, gets one thread
//! fewer than a scan has (the scanning thread is the other one), once per process. Its
//! own test binary: the pool is process-wide and starts at its first use.

use csd_query::{set_scan_threads, size_scan_pool};

#[test]
fn the_scan_pool_has_one_thread_fewer_than_a_scan_and_is_sized_once() {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        // The environment sizes the pool; `size_scan_pool` leaves it so.
        let n: usize = std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let got = size_scan_pool();
        assert!(n == 0 || got == n, "{got} threads, RAYON_NUM_THREADS={n}");
        return;
    }
    set_scan_threads(3);
    assert_eq!(size_scan_pool(), 2);
    assert_eq!(rayon::current_num_threads(), 2);
    // Sized once: later calls keep the pool as it is.
    set_scan_threads(1);
    assert_eq!(size_scan_pool(), 2);
    set_scan_threads(0);
}

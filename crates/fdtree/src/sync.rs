//! Synchronization facade: `std::sync` / `std::thread` normally, the `shuttle` crate's
//! model-checked versions with the `shuttle` feature (randomized concurrency tests:
//! `cargo test -p csd-fdtree --features shuttle --test shuttle`). Only the tree's own
//! synchronization goes through here; the device behind `csd-host` keeps its std mutex,
//! which is a leaf lock held for one command and never across a scheduling point.

#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
#[cfg(feature = "shuttle")]
pub(crate) use shuttle::thread;

#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::thread;

/// Lock a mutex, recovering from poisoning (a panicking thread leaves data that the
/// tree's own checks will report; poisoning every later caller helps nobody).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Let other threads run while waiting for a condition that no condvar signals
/// (readers leaving a level set).
pub(crate) fn backoff() {
    thread::yield_now();
    #[cfg(not(feature = "shuttle"))]
    std::thread::sleep(std::time::Duration::from_micros(20));
}

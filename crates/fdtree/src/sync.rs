//! Synchronization facade. Normally the latches and conditions of
//! [`csd_host::actors::sync`] (plain `std::sync` ones on ordinary threads; on the threads
//! of a virtual-time actor group, ones that pass the turn while they wait, so that the
//! tree's workers and its merge thread run as actors whose device commands reach the
//! device in modeled-arrival order: issue 30, docs/time-model.md), and
//! [`csd_host::actors::spawn`] for the merge thread (an actor too when an actor starts
//! it). With the `shuttle` feature, the `shuttle` crate's model-checked versions
//! (randomized concurrency tests: `cargo test -p csd-fdtree --features shuttle --test
//! shuttle`). Only the tree's own synchronization goes through here; the device behind
//! `csd-host` keeps its std mutex, which is a leaf lock held for one command and never
//! across a scheduling point.
//!
//! The wrappers keep `std::sync`'s signatures (`LockResult`s that are never poisoned
//! here), so that one body of code serves both builds.

#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
#[cfg(feature = "shuttle")]
pub(crate) use shuttle::thread::JoinHandle;

#[cfg(not(feature = "shuttle"))]
pub(crate) use actor_sync::{Condvar, JoinHandle, Mutex, MutexGuard, RwLock};
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::Arc;
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// The plain std latch and condition, for the merge gate: a test's own threads (never
/// actors) hold a merge with it.
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::{
    Condvar as GateCondvar, Mutex as GateMutex, MutexGuard as GateMutexGuard,
};
#[cfg(feature = "shuttle")]
pub(crate) use {Condvar as GateCondvar, Mutex as GateMutex, MutexGuard as GateMutexGuard};

#[cfg(not(feature = "shuttle"))]
mod actor_sync {
    use csd_host::actors::sync as actors;
    use std::sync::LockResult;

    pub(crate) use csd_host::actors::JoinHandle;
    pub(crate) use csd_host::actors::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

    /// [`actors::Mutex`] with `std::sync::Mutex`'s signature.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(actors::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(actors::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
            Ok(self.0.lock())
        }
    }

    /// [`actors::RwLock`] with `std::sync::RwLock`'s signature.
    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(actors::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> RwLock<T> {
            RwLock(actors::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> LockResult<RwLockReadGuard<'_, T>> {
            Ok(self.0.read())
        }

        pub(crate) fn write(&self) -> LockResult<RwLockWriteGuard<'_, T>> {
            Ok(self.0.write())
        }
    }

    /// [`actors::Condvar`] with `std::sync::Condvar`'s signature.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(actors::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Condvar {
            Condvar(actors::Condvar::new())
        }

        pub(crate) fn wait<'a, T>(&self, held: MutexGuard<'a, T>) -> LockResult<MutexGuard<'a, T>> {
            Ok(self.0.wait(held))
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }

        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
    }
}

/// Lock a mutex, recovering from poisoning (a panicking thread leaves data that the
/// tree's own checks will report; poisoning every later caller helps nobody).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Start the merge thread running `body`: an actor of virtual time when an actor starts
/// it ([`csd_host::actors::spawn`]).
pub(crate) fn spawn(name: &str, body: Box<dyn FnOnce() + Send>) -> std::io::Result<JoinHandle<()>> {
    #[cfg(feature = "shuttle")]
    return shuttle::thread::Builder::new()
        .name(name.into())
        .spawn(body);
    #[cfg(not(feature = "shuttle"))]
    csd_host::actors::spawn(name, body)
}

/// Modeled time (ns) an actor of virtual time waits before testing again.
#[cfg(not(feature = "shuttle"))]
const ACTOR_BACKOFF_NS: u64 = 20_000;

/// Let other threads run while waiting for a condition that no condvar signals
/// (readers leaving a level set). An actor of virtual time lets modeled time pass
/// (20 µs, what other threads sleep), which passes the turn on.
pub(crate) fn backoff() {
    #[cfg(feature = "shuttle")]
    shuttle::thread::yield_now();
    #[cfg(not(feature = "shuttle"))]
    {
        if let Some(a) = csd_host::actors::Actors::current() {
            let _ = csd_host::actors::Actors::wait_until(a.now().after(ACTOR_BACKOFF_NS));
            return;
        }
        std::thread::yield_now();
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

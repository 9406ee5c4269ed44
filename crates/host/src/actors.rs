//! Host threads as actors of virtual time: their device commands reach the device in
//! modeled-arrival order, and a run is the same from one execution to the next
//! (issue 30, "service in modeled-arrival order"; docs/time-model.md).
//!
//! In virtual mode every thread keeps its own clock, and free-running threads submit in
//! whatever order the operating system runs them: a thread whose clock is behind a
//! command another thread already submitted arrives in the event core's past (a late
//! arrival, [`crate::shared::SharedDevice::event_counters`]), and which thread got there
//! first changes from run to run. An [`Actors`] group runs its threads one at a time,
//! like a discrete-event simulator's processes: the thread that holds the turn runs
//! until its next device command, and a command is submitted only by the actor whose
//! clock is the least of the group's (ties to the lowest actor number). So
//! * every command reaches the device at or after every command submitted before it
//!   (the actor with the least clock submits at that clock; every other actor's next
//!   command comes at its own clock or later): no late arrival;
//! * the order of submissions, and with it every completion instant and counter,
//!   depends only on the actors' code and clocks, never on the operating system's
//!   scheduling: a run is bit-for-bit reproducible.
//!
//! Choices:
//! * The scheduling points are the device commands of a [`crate::DeviceHandle`] in
//!   virtual mode ([`crate::CommandIssuer::exec_at`]) and [`Actors::wait_until`]; host
//!   work between them costs no modeled time, as everywhere in virtual mode. In paced
//!   mode the wall clock orders submissions already and actors are not consulted.
//! * A command's completion is not fixed when it is submitted: the actor waits with a
//!   lower bound of it as its clock, and the waiting actor that holds the turn books the
//!   stages no other actor can still precede and fixes what they decide, for every
//!   waiting actor at once (`SharedDevice::actor_completion`; docs/time-model.md has the
//!   rule and its tests). So commands of several actors are in flight together, as on a
//!   drive with several queues. This needs the event core; on calendars the group
//!   orders submissions, but each command's stages are booked when it is submitted.
//! * An actor waits for another only through the group: [`sync::Mutex`],
//!   [`sync::RwLock`] and [`sync::Condvar`] pass the turn on while they wait and wake
//!   the waiter at the waker's instant; a `std` lock that another actor holds across a
//!   command would never be released (only the turn's holder runs). A cycle of actors waiting for each
//!   other is reported (a panic naming it), not hung.
//! * One condition variable for the group: a handful of threads, woken when the turn
//!   moves.

use csd_sim::SimTime;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// The group's state: each actor's clock (`None` once it finished), who holds the
/// turn, and the actors waiting for a command's completion.
#[derive(Debug)]
struct State {
    clocks: Vec<Option<SimTime>>,
    turn: Option<usize>,
    /// Per actor: the caller's name for the completion it waits for (the device's
    /// ticket), and that completion's final instant once an actor holding the turn
    /// fixed it.
    waiting: Vec<Option<(usize, Option<SimTime>)>>,
    /// Per actor: the latch or condition it is blocked on (its address); a blocked
    /// actor does not take the turn until an actor holding it wakes it.
    blocked: Vec<Option<usize>>,
    /// Every live actor is blocked: the group can never go on.
    deadlocked: bool,
    /// Per actor: the condition its thread waits on for the turn (only the actor that
    /// gets the turn is woken, not the whole group).
    wakers: Vec<Arc<Condvar>>,
}

impl State {
    /// The live actor not blocked with the least clock, ties to the lowest number.
    fn next(&self) -> Option<usize> {
        self.clocks
            .iter()
            .zip(&self.blocked)
            .enumerate()
            .filter(|(_, (_, b))| b.is_none())
            .filter_map(|(i, (c, _))| c.map(|c| (c, i)))
            .min()
            .map(|(_, i)| i)
    }

    /// Give the turn to the next actor; with none left that could take it while some
    /// are blocked, the group is deadlocked.
    fn pass(&mut self) {
        self.turn = self.next();
        if self.turn.is_none() && self.clocks.iter().any(Option::is_some) {
            self.deadlocked = true;
        }
        self.notify();
    }

    /// Wake the thread of the actor that holds the turn (every thread when the group is
    /// deadlocked, so each reports it).
    fn notify(&self) {
        if self.deadlocked {
            self.wakers.iter().for_each(|w| w.notify_one());
        } else if let Some(t) = self.turn {
            self.wakers[t].notify_one();
        }
    }

    /// A place for a new actor with clock `start`: the first one whose actor finished,
    /// else a new one; its number.
    fn place(&mut self, start: SimTime) -> usize {
        let id = match self.clocks.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.clocks.push(None);
                self.waiting.push(None);
                self.blocked.push(None);
                self.wakers.push(Arc::new(Condvar::new()));
                self.clocks.len() - 1
            }
        };
        self.clocks[id] = Some(start);
        self.waiting[id] = None;
        self.blocked[id] = None;
        id
    }
}

/// A group of actors sharing virtual time (see the module docs).
#[derive(Debug)]
pub struct Actors {
    state: Mutex<State>,
    /// Signalled when an actor leaves (a run waits for every actor to finish).
    left: Condvar,
}

thread_local! {
    /// The group and number of the actor this thread runs, if it runs one.
    static CURRENT: RefCell<Option<(Arc<Actors>, usize)>> = const { RefCell::new(None) };
}

/// This thread's actor, if it runs one.
pub(crate) fn current() -> Option<Actor> {
    CURRENT.with(|c| {
        c.borrow().as_ref().map(|(group, id)| Actor {
            group: group.clone(),
            id: *id,
        })
    })
}

/// An actor of a group, as seen by the thread that runs it.
#[derive(Debug, Clone)]
pub struct Actor {
    group: Arc<Actors>,
    id: usize,
}

impl Actor {
    /// The actor's number in its group.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The actor's clock.
    pub fn now(&self) -> SimTime {
        let st = self.group.lock();
        st.clocks
            .get(self.id)
            .copied()
            .flatten()
            .unwrap_or(SimTime::ZERO)
    }

    /// Move the actor's clock to at least `at` and wait until it holds the turn with
    /// it: every other live actor's clock is later (or equal, with a higher number).
    /// Returns the clock, the instant at which the actor acts, and the least clock of
    /// the other live actors (`None`: none is left), before which none of them acts.
    ///
    /// An actor waiting for a command's completion takes part with a lower bound of the
    /// completion as its clock: holding the turn, it may book the device's stages that
    /// arrive by the others' least clock, which fixes the completion or raises the bound.
    pub(crate) fn turn(&self, at: SimTime) -> (SimTime, Option<SimTime>) {
        let mut st = self.group.lock();
        let mine = st.clocks[self.id].unwrap_or(SimTime::ZERO).max(at);
        st.clocks[self.id] = Some(mine);
        let next = st.next();
        if st.turn != next {
            st.turn = next;
            st.notify();
        }
        st = self.group.wait_turn(st, self.id);
        let others = st
            .clocks
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != self.id)
            .filter_map(|(_, c)| *c)
            .min();
        (mine, others)
    }

    /// The actor's clock moves to `t` if that is later (a command's completion): it
    /// keeps the turn until its next scheduling point.
    pub(crate) fn advance(&self, t: SimTime) {
        let mut st = self.group.lock();
        if let Some(c) = st.clocks[self.id].as_mut() {
            *c = (*c).max(t);
        }
    }

    /// The actor waits for the completion the caller names `ticket` (submitted at its
    /// clock): until it is fixed, the actor's clock is a lower bound of it.
    pub(crate) fn wait_for(&self, ticket: usize) {
        self.group.lock().waiting[self.id] = Some((ticket, None));
    }

    /// What an actor holding the turn decides on: the least clock of the live actors,
    /// not blocked, that wait for no completion or for one already fixed (their clock is
    /// then that completion; `None`: there is none), and every waiting
    /// actor's number and ticket, this one's included, whose completion is not fixed.
    pub(crate) fn waiting(&self) -> (Option<SimTime>, Vec<(usize, usize)>) {
        let st = self.group.lock();
        debug_assert_eq!(st.turn, Some(self.id));
        // A blocked actor is left out: it goes on at its waker's instant, and the waker,
        // holding the turn then, is at or after everything booked by then.
        let running = st
            .clocks
            .iter()
            .zip(&st.waiting)
            .zip(&st.blocked)
            .filter(|((_, w), b)| !matches!(w, Some((_, None))) && b.is_none())
            .filter_map(|((c, _), _)| *c)
            .min();
        let waiting = st
            .waiting
            .iter()
            .enumerate()
            .filter_map(|(i, w)| match w {
                Some((ticket, None)) => Some((i, *ticket)),
                _ => None,
            })
            .collect();
        (running, waiting)
    }

    /// Actor `id`'s completion is not before `t` (its clock moves up to `t`), or, with
    /// `fixed`, is exactly `t`. Called by the actor holding the turn.
    pub(crate) fn settle(&self, id: usize, t: SimTime, fixed: bool) {
        let mut st = self.group.lock();
        if let Some(c) = st.clocks[id].as_mut() {
            *c = (*c).max(t);
        }
        if fixed && let Some((_, f)) = st.waiting[id].as_mut() {
            *f = Some(t);
        }
    }

    /// This actor's completion, once fixed; it then waits no more.
    pub(crate) fn take_fixed(&self) -> Option<SimTime> {
        let mut st = self.group.lock();
        let done = st.waiting[self.id].and_then(|(_, f)| f)?;
        st.waiting[self.id] = None;
        Some(done)
    }

    /// The actor is done: it leaves the group and passes the turn on.
    fn leave(&self) {
        let mut st = self.group.lock();
        st.clocks[self.id] = None;
        st.waiting[self.id] = None;
        st.blocked[self.id] = None;
        st.pass();
        self.group.left.notify_all();
    }

    /// Take a place that never ran out of the group (its thread could not start); the
    /// caller keeps the turn.
    fn leave_quietly(&self) {
        let mut st = self.group.lock();
        st.clocks[self.id] = None;
        self.group.left.notify_all();
    }

    /// Block on `key` (a latch's or condition's address): pass the turn on and wait
    /// until an actor wakes this one ([`Actor::wake`]) and it holds the turn again.
    /// Returns the clock, moved up to the waker's instant.
    pub fn block(&self, key: usize) -> SimTime {
        let mut st = self.group.lock();
        st.blocked[self.id] = Some(key);
        st.pass();
        st = self.group.wait_turn(st, self.id);
        st.clocks[self.id].unwrap_or(SimTime::ZERO)
    }

    /// Wake every actor blocked on `key`; their clocks move up to this actor's (what
    /// they waited for happened now). It keeps the turn.
    pub fn wake(&self, key: usize) {
        let mut st = self.group.lock();
        let now = st.clocks[self.id].unwrap_or(SimTime::ZERO);
        for i in 0..st.blocked.len() {
            if st.blocked[i] == Some(key) {
                st.blocked[i] = None;
                if let Some(c) = st.clocks[i].as_mut() {
                    *c = (*c).max(now);
                }
            }
        }
    }
}

impl Actors {
    /// An empty group.
    pub fn new() -> Arc<Actors> {
        Arc::new(Actors {
            state: Mutex::new(State {
                clocks: Vec::new(),
                turn: None,
                waiting: Vec::new(),
                blocked: Vec::new(),
                deadlocked: false,
                wakers: Vec::new(),
            }),
            left: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait on `cv` (a condition of the group's state).
    fn wait<'a>(cv: &Condvar, st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        cv.wait(st).unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait until actor `id` holds the turn.
    ///
    /// # Panics
    /// When the group is deadlocked (every live actor blocked on another).
    fn wait_turn<'a>(&self, mut st: MutexGuard<'a, State>, id: usize) -> MutexGuard<'a, State> {
        while st.turn != Some(id) {
            assert!(
                !st.deadlocked,
                "actors deadlocked: every live actor is blocked on a latch or condition \
                 that only another blocked actor could release (per actor: clock, the \
                 address it is blocked on): {:?}",
                st.clocks
                    .iter()
                    .zip(&st.blocked)
                    .enumerate()
                    .filter_map(|(i, (c, b))| c.map(|c| (i, c, b.map(|k| format!("{k:#x}")))))
                    .collect::<Vec<_>>()
            );
            let waker = st.wakers[id].clone();
            st = Self::wait(&waker, st);
        }
        st
    }

    /// Run `n` actors, actor `i` on a thread of its own running `body(i)` with its clock
    /// starting at `start`; returns their results in actor order once all finished. A
    /// body that panics passes the turn on (its actor leaves) and the panic is resumed
    /// here after the others finished.
    pub fn run<T: Send>(
        self: &Arc<Self>,
        n: usize,
        start: SimTime,
        body: impl Fn(usize) -> T + Sync,
    ) -> Vec<T> {
        let base = {
            let mut st = self.lock();
            let base = st.clocks.len();
            st.clocks.extend(std::iter::repeat_n(Some(start), n));
            st.waiting.extend(std::iter::repeat_n(None, n));
            st.blocked.extend(std::iter::repeat_n(None, n));
            st.wakers
                .extend(std::iter::repeat_with(|| Arc::new(Condvar::new())).take(n));
            if st.turn.is_none() {
                st.turn = st.next();
            }
            base
        };
        let body = &body;
        let out = std::thread::scope(|s| {
            let threads: Vec<_> = (0..n)
                .map(|i| {
                    let group = self.clone();
                    s.spawn(move || group.enter(base + i, start, None, || body(i)))
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        // Actors the group's actors started ([`spawn`]) finish too: a run ends when the
        // group has no live actor (they may wait only for each other).
        let mut st = self.lock();
        while st.clocks.iter().any(Option::is_some) {
            st = Self::wait(&self.left, st);
        }
        out
    }

    /// Add an actor with clock `start` to the group (in the place of one that finished,
    /// if any: a long run starts many); returns its number.
    fn add(&self, start: SimTime) -> usize {
        let mut st = self.lock();
        let id = st.place(start);
        if st.turn.is_none() {
            st.turn = st.next();
        }
        id
    }

    /// Run `body` on this thread as actor `id` (already added with clock `start`): wait
    /// for the turn, run, and leave the group however the body ends, first marking
    /// `done` and waking the actors that wait for it ([`JoinHandle::join`]).
    fn enter<T>(
        self: Arc<Self>,
        id: usize,
        start: SimTime,
        done: Option<Arc<AtomicBool>>,
        body: impl FnOnce() -> T,
    ) -> T {
        let actor = Actor { group: self, id };
        CURRENT.with(|c| *c.borrow_mut() = Some((actor.group.clone(), id)));
        /// Leaves the group however the body ends.
        struct Leave(Actor, Option<Arc<AtomicBool>>);
        impl Drop for Leave {
            fn drop(&mut self) {
                if let Some(done) = &self.1 {
                    done.store(true, AtomicOrdering::Release);
                    self.0.wake(key_of(&**done));
                }
                CURRENT.with(|c| *c.borrow_mut() = None);
                self.0.leave();
            }
        }
        let leave = Leave(actor.clone(), done);
        // Only wait: the actor was placed with clock `start`, and the turn moves only
        // at its holder's scheduling points. Recomputing it here (`Actor::turn`) would
        // let a thread the OS starts late take the turn from a holder that is running
        // (one started by it, or whose clock a completion moved), and the two would
        // run at once: a run would differ from the next.
        debug_assert_eq!(actor.group.lock().clocks[id], Some(start));
        drop(actor.group.wait_turn(actor.group.lock(), id));
        let out = body();
        drop(leave);
        out
    }

    /// This thread's actor clock moves to at least `t` (an actor waiting for an instant
    /// without a command, e.g. a request's arrival); it then acts once every other actor
    /// has acted up to `t`. Returns the actor's clock, or `None` on a thread that runs
    /// no actor.
    pub fn wait_until(t: SimTime) -> Option<SimTime> {
        current().map(|a| a.turn(t).0)
    }

    /// This thread's actor, if it runs one.
    pub fn current() -> Option<Actor> {
        current()
    }
}

/// The name an actor blocks on for a latch, a condition or a thread's end: an address.
fn key_of<L>(latch: &L) -> usize {
    std::ptr::from_ref(latch).cast::<()>() as usize
}

/// A thread started by [`spawn`], to wait for.
#[derive(Debug)]
pub struct JoinHandle<T> {
    thread: std::thread::JoinHandle<T>,
    /// Set when the thread, an actor, finished (its wake names this flag).
    done: Option<Arc<AtomicBool>>,
}

impl<T> JoinHandle<T> {
    /// Wait for the thread to finish; its result, or its panic's payload. An actor that
    /// waits for an actor passes the turn on until it finished and goes on at the
    /// instant it did.
    ///
    /// # Errors
    /// The panic payload of a thread that panicked.
    pub fn join(self) -> std::thread::Result<T> {
        if let (Some(done), Some(me)) = (&self.done, current()) {
            // Only the turn's holder runs: the flag cannot be set between the test and
            // the block.
            while !done.load(AtomicOrdering::Acquire) {
                me.block(key_of(&**done));
            }
        }
        self.thread.join()
    }

    /// Whether the thread finished (an actor: left its group's work).
    pub fn is_finished(&self) -> bool {
        self.done.as_ref().map_or_else(
            || self.thread.is_finished(),
            |d| d.load(AtomicOrdering::Acquire),
        )
    }
}

/// Start a thread named `name` running `body`. Started by an actor, the thread is an
/// actor of the same group whose clock starts at the starter's (a background worker a
/// host structure starts, e.g. the FD+tree's merge thread): it takes turns with the
/// others, and the group's [`Actors::run`] returns only once it finished. Started by
/// any other thread, it is a plain thread.
///
/// # Errors
/// The operating system's, when it cannot start a thread.
pub fn spawn<T: Send + 'static>(
    name: &str,
    body: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    let builder = std::thread::Builder::new().name(name.to_string());
    let Some(parent) = current() else {
        return Ok(JoinHandle {
            thread: builder.spawn(body)?,
            done: None,
        });
    };
    let start = parent.now();
    let id = parent.group.add(start);
    let done = Arc::new(AtomicBool::new(false));
    let group = parent.group.clone();
    let flag = done.clone();
    match builder.spawn(move || group.enter(id, start, Some(flag), body)) {
        Ok(thread) => Ok(JoinHandle {
            thread,
            done: Some(done),
        }),
        Err(e) => {
            // Never ran: take its place out of the group.
            Actor {
                group: parent.group.clone(),
                id,
            }
            .leave_quietly();
            Err(e)
        }
    }
}

/// A latch and a condition for actors: the `std::sync` ones, but a wait passes the turn
/// on (only the turn's holder runs, so a thread that blocked without passing it would
/// stop the group) and hands the instant on: an actor woken by a release or a
/// notification goes on no earlier than the waker. On a thread that runs no actor they are plain `std::sync` ones. Every
/// thread that waits on one while an actor may hold it must run an actor of the same
/// group (an actor can only be woken by an actor).
pub mod sync {
    use super::{current, key_of as key};
    use std::sync::{PoisonError, TryLockError};

    /// Take `latch`: on a thread that runs no actor by waiting (`wait`); an actor tries
    /// (`attempt`) and passes the turn on while another actor holds it. A poisoned latch
    /// is taken as it is (the data's own checks report what a panicking holder left).
    fn acquire<L, G>(
        latch: &L,
        attempt: impl Fn() -> std::sync::TryLockResult<G>,
        wait: impl FnOnce() -> std::sync::LockResult<G>,
    ) -> G {
        let Some(actor) = current() else {
            return wait().unwrap_or_else(PoisonError::into_inner);
        };
        loop {
            match attempt() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    actor.block(key(latch));
                }
            }
        }
    }

    /// A mutual-exclusion latch (see the module docs). It keeps no release instant:
    /// actors run one at a time in the order of their clocks, so an actor that finds the
    /// latch free is at or after its last release, and one that found it held is woken
    /// at the releaser's instant.
    #[derive(Debug, Default)]
    pub struct Mutex<T> {
        inner: std::sync::Mutex<T>,
    }

    /// A held [`Mutex`]; releases it when dropped.
    #[derive(Debug)]
    pub struct MutexGuard<'a, T> {
        guard: Option<std::sync::MutexGuard<'a, T>>,
        latch: &'a Mutex<T>,
    }

    impl<T> Mutex<T> {
        /// A latch over `value`.
        pub fn new(value: T) -> Mutex<T> {
            Mutex {
                inner: std::sync::Mutex::new(value),
            }
        }

        /// Take the latch (a poisoned one too: the data's own checks report what a
        /// panicking holder left). An actor that finds it held passes the turn on until
        /// the holder releases it.
        pub fn lock(&self) -> MutexGuard<'_, T> {
            let guard = acquire(self, || self.inner.try_lock(), || self.inner.lock());
            MutexGuard {
                guard: Some(guard),
                latch: self,
            }
        }

        /// The value, the latch consumed.
        pub fn into_inner(self) -> T {
            self.inner
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner)
        }
    }

    impl<T> std::ops::Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // Present from construction until drop (a condition's wait takes the whole
            // guard).
            self.guard
                .as_deref()
                .unwrap_or_else(|| unreachable!("a latch guard without its lock"))
        }
    }

    impl<T> std::ops::DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.guard
                .as_deref_mut()
                .unwrap_or_else(|| unreachable!("a latch guard without its lock"))
        }
    }

    impl<T> Drop for MutexGuard<'_, T> {
        fn drop(&mut self) {
            if self.guard.take().is_some()
                && let Some(actor) = current()
            {
                actor.wake(key(self.latch));
            }
        }
    }

    /// A reader-writer latch (see the module docs): readers share it, a writer holds it
    /// alone; an actor that finds it taken passes the turn on until a holder releases.
    #[derive(Debug, Default)]
    pub struct RwLock<T> {
        inner: std::sync::RwLock<T>,
    }

    /// A shared hold of a [`RwLock`]; released when dropped.
    #[derive(Debug)]
    pub struct RwLockReadGuard<'a, T> {
        guard: Option<std::sync::RwLockReadGuard<'a, T>>,
        key: usize,
    }

    /// The exclusive hold of a [`RwLock`]; released when dropped.
    #[derive(Debug)]
    pub struct RwLockWriteGuard<'a, T> {
        guard: Option<std::sync::RwLockWriteGuard<'a, T>>,
        key: usize,
    }

    impl<T> RwLock<T> {
        /// A latch over `value`.
        pub fn new(value: T) -> RwLock<T> {
            RwLock {
                inner: std::sync::RwLock::new(value),
            }
        }

        /// Share the latch (a poisoned one too).
        pub fn read(&self) -> RwLockReadGuard<'_, T> {
            let g = acquire(self, || self.inner.try_read(), || self.inner.read());
            RwLockReadGuard {
                guard: Some(g),
                key: key(self),
            }
        }

        /// Hold the latch alone (a poisoned one too).
        pub fn write(&self) -> RwLockWriteGuard<'_, T> {
            let g = acquire(self, || self.inner.try_write(), || self.inner.write());
            RwLockWriteGuard {
                guard: Some(g),
                key: key(self),
            }
        }

        /// The value, the latch consumed.
        pub fn into_inner(self) -> T {
            self.inner
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner)
        }
    }

    /// Release `key`'s latch: wake the actors blocked on it.
    fn released(key: usize) {
        if let Some(actor) = current() {
            actor.wake(key);
        }
    }

    impl<T> std::ops::Deref for RwLockReadGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.guard
                .as_deref()
                .unwrap_or_else(|| unreachable!("a latch guard without its hold"))
        }
    }

    impl<T> Drop for RwLockReadGuard<'_, T> {
        fn drop(&mut self) {
            if self.guard.take().is_some() {
                released(self.key);
            }
        }
    }

    impl<T> std::ops::Deref for RwLockWriteGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.guard
                .as_deref()
                .unwrap_or_else(|| unreachable!("a latch guard without its hold"))
        }
    }

    impl<T> std::ops::DerefMut for RwLockWriteGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.guard
                .as_deref_mut()
                .unwrap_or_else(|| unreachable!("a latch guard without its hold"))
        }
    }

    impl<T> Drop for RwLockWriteGuard<'_, T> {
        fn drop(&mut self) {
            if self.guard.take().is_some() {
                released(self.key);
            }
        }
    }

    /// A condition to wait for under a [`Mutex`] (see the module docs).
    #[derive(Debug, Default)]
    pub struct Condvar {
        inner: std::sync::Condvar,
    }

    impl Condvar {
        /// A condition.
        pub fn new() -> Condvar {
            Condvar::default()
        }

        /// Release the latch, wait for a notification, take the latch again. As with
        /// `std::sync::Condvar`, a wait may end without the condition holding: callers
        /// test it in a loop.
        pub fn wait<'a, T>(&self, mut held: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            let Some(actor) = current() else {
                let Some(g) = held.guard.take() else {
                    unreachable!("a latch guard without its lock")
                };
                held.guard = Some(self.inner.wait(g).unwrap_or_else(PoisonError::into_inner));
                return held;
            };
            let latch = held.latch;
            // Only the turn's holder runs: nobody can notify between the release and
            // the block.
            drop(held);
            actor.block(key(self));
            latch.lock()
        }

        /// Wake every waiter (actors go on at the notifier's instant).
        pub fn notify_all(&self) {
            self.inner.notify_all();
            if let Some(actor) = current() {
                actor.wake(key(self));
            }
        }

        /// Wake a waiter; an actor wakes them all (each tests its condition again).
        pub fn notify_one(&self) {
            if let Some(actor) = current() {
                self.inner.notify_all();
                actor.wake(key(self));
            } else {
                self.inner.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Actors that only wait for instants act in the order of their clocks, whatever
    /// order their threads start in.
    #[test]
    fn actors_take_turns_in_clock_order() {
        let group = Actors::new();
        let log = Mutex::new(Vec::new());
        group.run(3, SimTime::ZERO, |i| {
            for k in 0..4u64 {
                // Actor i acts at 10k + i + 1: a single global order of instants.
                let t = SimTime::from_ns(10 * k + i as u64 + 1);
                let at = Actors::wait_until(t).expect("an actor");
                log.lock().expect("log").push(at.ns());
            }
        });
        let log = log.into_inner().expect("log");
        let mut sorted = log.clone();
        sorted.sort_unstable();
        assert_eq!(log, sorted);
        assert_eq!(log.len(), 12);
    }

    /// A thread outside any group is not an actor; a panicking actor passes the turn on
    /// and its panic reaches the caller after the others finished.
    #[test]
    fn outside_threads_and_panics() {
        assert!(Actors::wait_until(SimTime::from_ns(5)).is_none());
        let group = Actors::new();
        let done = Mutex::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            group.run(2, SimTime::ZERO, |i| {
                if i == 0 {
                    panic!("actor 0 fails");
                }
                Actors::wait_until(SimTime::from_ns(100));
                *done.lock().expect("done") += 1;
            })
        }));
        assert!(r.is_err());
        assert_eq!(*done.lock().expect("done"), 1);
    }

    /// A latch hands its release instant on: an actor that waited for it goes on no
    /// earlier than the holder released it, and two runs are the same.
    #[test]
    fn a_latch_hands_its_release_instant_on() {
        let run = || {
            let group = Actors::new();
            let latch = sync::Mutex::new(Vec::new());
            group.run(3, SimTime::ZERO, |i| {
                for k in 0..3u64 {
                    let mut held = latch.lock();
                    let took = Actors::current().expect("an actor").now();
                    // Work inside the latch that takes modeled time (a command would).
                    let left = Actors::wait_until(SimTime::from_ns(took.ns() + 10 + i as u64))
                        .expect("an actor");
                    held.push((i, k, took.ns(), left.ns()));
                }
            });
            latch.into_inner()
        };
        let log = run();
        assert_eq!(log.len(), 9);
        // Holds never overlap in modeled time: each starts at or after the one before
        // it ended.
        for w in log.windows(2) {
            assert!(w[1].2 >= w[0].3, "{w:?}");
        }
        assert_eq!(run(), log);
    }

    /// A condition wakes its waiters at the notifier's instant; producers and
    /// consumers deliver every item, each no earlier than it was produced.
    #[test]
    fn a_condition_wakes_waiters_at_the_notifiers_instant() {
        let group = Actors::new();
        let queue = sync::Mutex::new(std::collections::VecDeque::new());
        let ready = sync::Condvar::new();
        let got = group.run(3, SimTime::ZERO, |i| {
            let mut got = Vec::new();
            if i == 0 {
                for k in 1..=8u64 {
                    let t = Actors::wait_until(SimTime::from_ns(100 * k)).expect("an actor");
                    queue.lock().push_back(Some(t.ns()));
                    ready.notify_one();
                }
                let mut q = queue.lock();
                q.push_back(None);
                q.push_back(None);
                drop(q);
                ready.notify_all();
            } else {
                loop {
                    let mut q = queue.lock();
                    let item = loop {
                        match q.pop_front() {
                            Some(item) => break item,
                            None => q = ready.wait(q),
                        }
                    };
                    drop(q);
                    let Some(made) = item else { break };
                    let now = Actors::current().expect("an actor").now();
                    assert!(
                        now.ns() >= made,
                        "consumed at {now:?} before made at {made}"
                    );
                    got.push(made);
                }
            }
            got
        });
        let mut all: Vec<u64> = got.into_iter().flatten().collect();
        all.sort_unstable();
        assert_eq!(all, (1..=8).map(|k| 100 * k).collect::<Vec<_>>());
    }

    /// An actor started by an actor is one of the group: its clock starts at its
    /// starter's, a join waits for it in modeled time (the joiner goes on at its end),
    /// and the group's run returns only once every actor, one nobody joins included,
    /// finished. A thread started by a thread that runs no actor is a plain thread.
    #[test]
    fn a_started_actor_is_joined_at_its_end_instant() {
        let group = Actors::new();
        let unjoined_done = Arc::new(AtomicBool::new(false));
        let out = group.run(2, SimTime::ZERO, |i| {
            let me = Actors::current().expect("an actor");
            if i == 1 {
                // Acts while the child runs.
                Actors::wait_until(SimTime::from_ns(300));
                return (0, me.now().ns());
            }
            Actors::wait_until(SimTime::from_ns(10));
            let child = spawn("child", || {
                let start = Actors::current().expect("the child is an actor").now();
                Actors::wait_until(SimTime::from_ns(500));
                start.ns()
            })
            .expect("spawn");
            let started = child.join().expect("the child ran");
            let flag = unjoined_done.clone();
            let _unjoined = spawn("unjoined", move || {
                Actors::wait_until(SimTime::from_ns(900));
                flag.store(true, AtomicOrdering::SeqCst);
            })
            .expect("spawn");
            (started, me.now().ns())
        });
        assert_eq!(out, vec![(10, 500), (0, 300)]);
        assert!(unjoined_done.load(AtomicOrdering::SeqCst));
        let plain = spawn("plain", || Actors::current().is_none()).expect("spawn");
        assert!(plain.join().expect("ran"));
    }

    /// Only the turn's holder runs, a started actor included: a child placed in a
    /// finished actor's lower place (it would win a tie of clocks) does not run until
    /// its starter reaches a scheduling point, however soon its thread starts. Its
    /// thread took the turn on starting, and both ran at once (FD+FC's reruns differed).
    #[test]
    fn a_started_actor_waits_for_its_starters_scheduling_point() {
        for _ in 0..4 {
            let group = Actors::new();
            let child_ran = Arc::new(AtomicBool::new(false));
            group.run(2, SimTime::ZERO, |i| {
                if i == 0 {
                    return; // leaves place 0 free
                }
                Actors::wait_until(SimTime::from_ns(10));
                let flag = child_ran.clone();
                let child = spawn("child", move || flag.store(true, AtomicOrdering::SeqCst))
                    .expect("spawn");
                // Host work between scheduling points: the child's thread has time to
                // start, and must not run.
                std::thread::sleep(std::time::Duration::from_millis(30));
                assert!(
                    !child_ran.load(AtomicOrdering::SeqCst),
                    "the child ran while its starter held the turn"
                );
                child.join().expect("the child ran");
                assert!(child_ran.load(AtomicOrdering::SeqCst));
            });
        }
    }

    /// Actors that wait for each other in a cycle are reported, not hung.
    #[test]
    fn a_deadlock_of_actors_is_reported() {
        let group = Actors::new();
        let (a, b) = (sync::Mutex::new(()), sync::Mutex::new(()));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            group.run(2, SimTime::ZERO, |i| {
                let (first, second) = if i == 0 { (&a, &b) } else { (&b, &a) };
                let _one = first.lock();
                Actors::wait_until(SimTime::from_ns(10));
                let _two = second.lock();
            })
        }));
        assert!(r.is_err());
    }

    /// Readers share a reader-writer latch in modeled time, a writer holds it alone:
    /// no read overlaps a write, and readers that met no writer overlap each other.
    #[test]
    fn readers_share_and_a_writer_excludes() {
        let group = Actors::new();
        let latch = sync::RwLock::new(0u64);
        let spans = group.run(4, SimTime::ZERO, |i| {
            let mut spans = Vec::new();
            for k in 0..3u64 {
                let at = |a: &Actor| a.now().ns();
                let me = Actors::current().expect("an actor");
                if i == 0 {
                    let mut w = latch.write();
                    let from = at(&me);
                    *w += 1;
                    let to = Actors::wait_until(SimTime::from_ns(from + 50)).expect("an actor");
                    spans.push((true, from, to.ns()));
                } else {
                    let r = latch.read();
                    let from = at(&me);
                    let _ = *r;
                    let to = Actors::wait_until(SimTime::from_ns(from + 20 + k)).expect("an actor");
                    spans.push((false, from, to.ns()));
                }
            }
            spans
        });
        let all: Vec<(bool, u64, u64)> = spans.into_iter().flatten().collect();
        let overlap = |x: &(bool, u64, u64), y: &(bool, u64, u64)| x.1 < y.2 && y.1 < x.2;
        for (i, x) in all.iter().enumerate() {
            for (j, y) in all.iter().enumerate() {
                if i != j && (x.0 || y.0) {
                    assert!(!overlap(x, y), "a write overlaps: {x:?} {y:?}");
                }
            }
        }
        let reads: Vec<_> = all.iter().filter(|s| !s.0).collect();
        assert!(
            (0..reads.len())
                .any(|i| (0..reads.len()).any(|j| i != j && overlap(reads[i], reads[j]))),
            "readers never overlapped: {reads:?}"
        );
        assert_eq!(latch.into_inner(), 3);
    }
}

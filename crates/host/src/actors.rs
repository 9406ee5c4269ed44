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
//! * An actor must not wait for another actor outside the group (a lock another actor
//!   holds across a device command, a channel): only the actor holding the turn runs,
//!   so such a wait never ends. Host code whose threads synchronize with each other
//!   (the FD+tree's latches) needs its waits to pass the turn on; this module gives the
//!   turn-taking such waits are built from ([`Actors::run`] for independent actors).
//! * One condition variable for the group: a handful of threads, woken when the turn
//!   moves.

use csd_sim::SimTime;
use std::cell::RefCell;
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
}

impl State {
    /// The live actor with the least clock, ties to the lowest number.
    fn next(&self) -> Option<usize> {
        self.clocks
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.map(|c| (c, i)))
            .min()
            .map(|(_, i)| i)
    }
}

/// A group of actors sharing virtual time (see the module docs).
#[derive(Debug)]
pub struct Actors {
    state: Mutex<State>,
    moved: Condvar,
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
            self.group.moved.notify_all();
        }
        while st.turn != Some(self.id) {
            st = self.group.wait(st);
        }
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

    /// What an actor holding the turn decides on: the least clock of the live actors
    /// that wait for no completion, or for one already fixed (their clock is then that
    /// completion; `None`: every live actor waits for one not fixed), and every waiting
    /// actor's number and ticket, this one's included, whose completion is not fixed.
    pub(crate) fn waiting(&self) -> (Option<SimTime>, Vec<(usize, usize)>) {
        let st = self.group.lock();
        debug_assert_eq!(st.turn, Some(self.id));
        let running = st
            .clocks
            .iter()
            .zip(&st.waiting)
            .filter(|(_, w)| !matches!(w, Some((_, None))))
            .filter_map(|(c, _)| *c)
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
        st.turn = st.next();
        self.group.moved.notify_all();
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
            }),
            moved: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.moved.wait(st).unwrap_or_else(PoisonError::into_inner)
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
            if st.turn.is_none() {
                st.turn = st.next();
            }
            base
        };
        let body = &body;
        std::thread::scope(|s| {
            let threads: Vec<_> = (0..n)
                .map(|i| {
                    let group = self.clone();
                    s.spawn(move || {
                        let actor = Actor {
                            group: group.clone(),
                            id: base + i,
                        };
                        CURRENT.with(|c| *c.borrow_mut() = Some((group, base + i)));
                        /// Leaves the group however the body ends.
                        struct Leave(Actor);
                        impl Drop for Leave {
                            fn drop(&mut self) {
                                CURRENT.with(|c| *c.borrow_mut() = None);
                                self.0.leave();
                            }
                        }
                        let leave = Leave(actor.clone());
                        actor.turn(start);
                        let out = body(i);
                        drop(leave);
                        out
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
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
}

//! A device shared by many host threads: each thread holds a [`DeviceHandle`] with its
//! own queue pair and its own clock; commands execute one at a time under a lock (the
//! device model is serial, its resources keep the busy-until times that make
//! concurrency visible in modeled time), and in paced mode a thread then sleeps until
//! its command's modeled completion *outside* the lock, so other threads' commands are
//! submitted meanwhile and queue on the device as they would on a real drive.
//!
//! Choices: a handle submits at the wall-clock-derived simulated instant in paced mode
//! (so the device sees real arrival times) and at its own clock in virtual mode (a
//! thread that waits for each command); per-handle clocks in virtual mode mean threads
//! interleave by lock order, which is deterministic only for one thread.
//!
//! **On the event core** (issue 30; [`SharedDevice::with_time_model`] with
//! [`TimeModel::Events`]) the device owns one graph ([`csd_sim::events::Graph`]) that
//! whichever thread holds the lock records into ([`events::Recording::resume`](csd_sim::events::Recording::resume)), so the stages
//! of every thread's commands are booked at each resource in modeled-arrival order
//! (docs/time-model.md, "What the multi-threaded actors need"). The rule for when to
//! book differs by clock:
//! * **paced**: a command is submitted at the wall clock's instant, taken under the lock,
//!   so submissions reach the core in the order of their instants; a thread waiting for
//!   its completion lets the core book only stages that arrive by the wall clock's
//!   instant (every later submission arrives after it), and sleeps until its completion
//!   is fixed by then. No stage is ever booked behind a later arrival: the core's
//!   `late_arrivals` stays 0 by construction.
//! * **virtual**: each thread's clock is its own, so there is no instant up to which
//!   every other thread is known to have submitted; a command's completion is fixed at
//!   once (stages of other threads' commands in flight before it are booked in arrival
//!   order with it), and a thread whose clock is behind one that already booked submits
//!   in the core's past: booked correctly by the calendars' gap filling and counted as
//!   a late arrival ([`SharedDevice::event_counters`]). One thread: arrival order holds.
//!   Threads run as [`crate::actors::Actors`] take turns instead: an actor submits only
//!   at the least clock of its group, and its completion is fixed once no actor can
//!   submit before it (`SharedDevice::actor_completion`): no late arrival, and the same
//!   run every time.

use crate::client::{ClientTotals, CommandIssuer, HostError, checked, complete, device_now};
use csd_device::{Completion, IdentifyInfo, NvmeDevice, QueueId};
use csd_sim::events::{self, Counters, Graph, TimeModel};
use csd_sim::{ClockMode, Pacer, SimTime};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

struct Inner {
    dev: Mutex<NvmeDevice>,
    /// The event core (time model `events`); locked only while `dev` is.
    core: Option<Mutex<Core>>,
    pacer: RwLock<Pacer>,
    /// The latest completion instant of any command (ns), where a clock switch starts.
    latest: AtomicU64,
    identify: IdentifyInfo,
    totals: Mutex<ClientTotals>,
}

/// The event core of a shared device: its graph and the completions threads wait for.
struct Core {
    /// `None` only while a thread records into it (under the device lock).
    graph: Option<Graph>,
    /// Completions that paced handles wait for, by ticket (renamed when the graph is
    /// compacted).
    waiting: Vec<Option<SimTime>>,
    /// Commands submitted: the order key of their stages (equal arrivals, lowest first).
    seq: u64,
}

impl Core {
    /// Keep `t` for a waiting handle; its ticket.
    fn wait(&mut self, t: SimTime) -> usize {
        if let Some(i) = self.waiting.iter().position(Option::is_none) {
            self.waiting[i] = Some(t);
            i
        } else {
            self.waiting.push(Some(t));
            self.waiting.len() - 1
        }
    }
}

/// How long a paced handle sleeps (wall clock) before it asks the core again whether
/// its completion is fixed, when the core cannot tell a later instant to wake at.
const RECHECK: Duration = Duration::from_micros(10);

/// A device shared by host threads. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct SharedDevice {
    inner: Arc<Inner>,
}

impl SharedDevice {
    /// Share `dev` under clock `mode`. The pacer's origin is the completion of the
    /// Identify this issues (the device's current time once it answered), so a paced run
    /// starts "now". Commands are placed in modeled time by the default
    /// time model ([`TimeModel::default`]).
    pub fn new(dev: NvmeDevice, mode: ClockMode) -> Result<SharedDevice, HostError> {
        SharedDevice::with_time_model(dev, mode, TimeModel::default())
    }

    /// Share `dev` under clock `mode`, its commands placed in modeled time by
    /// `time_model` (see the module docs for the event core's rule under each clock).
    pub fn with_time_model(
        dev: NvmeDevice,
        mode: ClockMode,
        time_model: TimeModel,
    ) -> Result<SharedDevice, HostError> {
        let mut dev = dev;
        // Identify through a temporary queue pair. It is booked on the device's resources
        // before any handle exists (and before the event core), so the shared clock starts
        // at its completion: no handle's command can arrive while the host link still
        // carries it (a paced command submitted within microseconds of sharing queued
        // behind it, a booking outside the core's trace).
        let qid = create_qp(&mut dev)?;
        let idle = device_now(&dev);
        let c = complete(&mut dev, qid, csd_device::Command::Identify, idle)?;
        let origin = c.acct.completed;
        let identify = match c.payload {
            csd_device::Payload::Identify(info) => info,
            _ => return Err(HostError::Invalid("Identify returned no data".into())),
        };
        let _ = dev.delete_queue_pair(qid);
        let core = (time_model == TimeModel::Events).then(|| {
            Mutex::new(Core {
                graph: Some(Graph::new()),
                waiting: Vec::new(),
                seq: 0,
            })
        });
        Ok(SharedDevice {
            inner: Arc::new(Inner {
                dev: Mutex::new(dev),
                core,
                pacer: RwLock::new(Pacer::new(mode, origin)),
                latest: AtomicU64::new(origin.ns()),
                identify,
                totals: Mutex::new(ClientTotals::default()),
            }),
        })
    }

    /// How commands are placed in modeled time.
    pub fn time_model(&self) -> TimeModel {
        if self.inner.core.is_some() {
            TimeModel::Events
        } else {
            TimeModel::Calendar
        }
    }

    /// The event core's counters so far (stages booked, late arrivals, ...); `None` on
    /// calendars.
    pub fn event_counters(&self) -> Option<Counters> {
        let core = self.inner.core.as_ref()?;
        let core = core.lock().unwrap_or_else(PoisonError::into_inner);
        core.graph.as_ref().map(Graph::counters)
    }

    /// Turn on the core's trace of bookings (tests of arrival order; memory grows with
    /// every stage). Nothing on calendars.
    pub fn record_trace(&self) {
        if let Some(core) = &self.inner.core {
            let mut core = core.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(g) = core.graph.as_mut() {
                g.record_trace();
            }
        }
    }

    /// The core's trace of bookings so far ([`SharedDevice::record_trace`]); empty on
    /// calendars.
    pub fn trace(&self) -> Vec<events::Booking> {
        let Some(core) = &self.inner.core else {
            return Vec::new();
        };
        let core = core.lock().unwrap_or_else(PoisonError::into_inner);
        core.graph
            .as_ref()
            .map_or_else(Vec::new, |g| g.trace().to_vec())
    }

    /// Run `f` on the device with this thread recording into the core's graph (the
    /// device lock held by the caller), compacting the graph afterwards when it is due.
    fn on_core<T>(
        &self,
        dev: &mut NvmeDevice,
        f: impl FnOnce(&mut NvmeDevice, &mut Core) -> T,
    ) -> T {
        let core = self.inner.core.as_ref().expect("on_core on the event core");
        let mut core = core.lock().unwrap_or_else(PoisonError::into_inner);
        // A thread that panicked while recording lost the graph with its recording: go
        // on with a new one (what it had booked stays booked at the resources).
        let graph = core.graph.take().unwrap_or_default();
        let mut state = (dev, &mut *core);
        let (out, graph) = events::record_with(
            graph,
            &mut state,
            |(dev, core)| f(dev, core),
            |(dev, core), rename| {
                dev.settle_instants(rename);
                for t in core.waiting.iter_mut().flatten() {
                    *t = rename(*t);
                }
            },
        );
        core.graph = Some(graph);
        out
    }

    /// Book every stage the core holds and fix every instant the device and the waiting
    /// handles keep (before the device is handed out raw).
    fn settle(&self, dev: &mut NvmeDevice) {
        if self.inner.core.is_none() {
            return;
        }
        self.on_core(dev, |dev, core| {
            events::run_all(dev);
            dev.settle_instants(&mut events::value);
            for t in core.waiting.iter_mut().flatten() {
                *t = events::value(*t);
            }
        });
    }

    /// The completion of an actor's command waiting on the core under `ticket`
    /// (crate::actors). Whichever waiting actor holds the turn decides for every waiting
    /// actor of the group: it books stages in arrival order until the earliest of their
    /// completions is known, but none that arrives after `b`, the least clock of the
    /// actors that may submit next (none of them submits before it); the earliest is
    /// fixed (the others end no earlier), or every completion ends after `b`. Each
    /// actor's clock is thereby a lower bound of its completion, or the completion once
    /// fixed, and the turn goes to the least.
    fn actor_completion(&self, actor: &crate::actors::Actor, ticket: usize) -> SimTime {
        actor.wait_for(ticket);
        let mut lower = SimTime::ZERO;
        loop {
            actor.turn(lower);
            if let Some(done) = actor.take_fixed() {
                let mut dev = self.lock_raw();
                self.on_core(&mut dev, |_, core| core.waiting[ticket] = None);
                return done;
            }
            let (running, waiting) = actor.waiting();
            let mut dev = self.lock_raw();
            self.on_core(&mut dev, |dev, core| {
                let t = |ticket: usize| core.waiting[ticket].expect("a waiting ticket");
                let ts: Vec<SimTime> = waiting.iter().map(|&(_, k)| t(k)).collect();
                let first = match running {
                    Some(b) => dev.earliest_by(&ts, b).ok_or(b),
                    None => dev.earliest(&ts).ok_or(SimTime::ZERO),
                };
                match first {
                    // The earliest completion, fixed; the others end no earlier.
                    Ok((first, v)) => {
                        for (j, &(id, _)) in waiting.iter().enumerate() {
                            actor.settle(id, v, j == first);
                        }
                    }
                    // None ends by `b`.
                    Err(b) => {
                        for &(id, _) in &waiting {
                            actor.settle(id, SimTime::from_ns(b.ns().saturating_add(1)), false);
                        }
                    }
                }
            });
            lower = actor.now();
        }
    }

    /// A new handle with its own queue pair (at most 64 exist at once).
    pub fn handle(&self) -> Result<DeviceHandle, HostError> {
        let mut dev = self.lock_raw();
        let qid = create_qp(&mut dev)?;
        // On the core the device's clock may not be fixed yet: the latest completion
        // any handle has seen is.
        let now = if self.inner.core.is_some() {
            SimTime::from_ns(self.inner.latest.load(Ordering::Acquire))
        } else {
            device_now(&dev)
        };
        Ok(DeviceHandle {
            shared: self.clone(),
            qid,
            now,
        })
    }

    /// What the device said about itself.
    pub fn identify(&self) -> &IdentifyInfo {
        &self.inner.identify
    }

    /// The pacer (to wait for simulated instants or read the paced "now"); a copy, so
    /// that a later [`set_clock`](SharedDevice::set_clock) does not change it.
    pub fn pacer(&self) -> Pacer {
        self.inner
            .pacer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The latest instant the device has seen: its controller's clock, the latest
    /// completion any handle saw and, on the event core, the last arrival booked. A
    /// submission at or after it arrives after everything so far.
    pub fn latest_instant(&self) -> SimTime {
        let dev = self.lock();
        // On the event core `lock` booked everything recorded: the clock continues
        // after the last arrival booked, so that no later submission arrives before it.
        let booked = self.inner.core.as_ref().map_or(SimTime::ZERO, |core| {
            let core = core.lock().unwrap_or_else(PoisonError::into_inner);
            core.graph.as_ref().map_or(SimTime::ZERO, Graph::now)
        });
        dev.block()
            .controller()
            .now()
            .max(SimTime::from_ns(self.inner.latest.load(Ordering::Acquire)))
            .max(booked)
    }

    /// Switch the clock mode from now on: simulated time continues from the latest
    /// instant the device has seen ([`SharedDevice::latest_instant`]), mapped to the wall
    /// clock now. Used to build state quickly in virtual time (a benchmark's preload)
    /// and then measure in paced time. Handles whose own clock is behind move up to that
    /// instant with their next command.
    pub fn set_clock(&self, mode: ClockMode) {
        let origin = self.latest_instant();
        *self
            .inner
            .pacer
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Pacer::new(mode, origin);
    }

    /// Totals of every command issued through any handle.
    pub fn totals(&self) -> ClientTotals {
        *self.inner.totals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lock the device for inspection, fault injection or shutdown. Hold it briefly. On
    /// the event core every stage recorded so far is booked first, so the device's
    /// instants are final (a command a paced thread submits later, at an earlier
    /// instant than one booked here, counts as a late arrival).
    pub fn lock(&self) -> MutexGuard<'_, NvmeDevice> {
        let mut dev = self.lock_raw();
        self.settle(&mut dev);
        dev
    }

    /// The device lock, as it is.
    fn lock_raw(&self) -> MutexGuard<'_, NvmeDevice> {
        // A panic while holding the lock leaves the device in a state that a later
        // command would observe anyway; recover the guard rather than poison every
        // other thread.
        self.inner.dev.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take the device back once every handle and clone has been dropped.
    pub fn into_device(self) -> Result<NvmeDevice, SharedDevice> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => {
                let shared = SharedDevice {
                    inner: Arc::new(inner),
                };
                shared.settle(&mut shared.lock_raw());
                let inner = Arc::into_inner(shared.inner).expect("the only reference");
                Ok(inner.dev.into_inner().unwrap_or_else(|p| p.into_inner()))
            }
            Err(inner) => Err(SharedDevice { inner }),
        }
    }
}

fn create_qp(dev: &mut NvmeDevice) -> Result<QueueId, HostError> {
    dev.create_queue_pair(64)
        .map_err(|status| HostError::Device {
            command: "CreateQueuePair",
            status,
        })
}

/// One thread's connection to a [`SharedDevice`]: a queue pair and a clock.
pub struct DeviceHandle {
    shared: SharedDevice,
    qid: QueueId,
    now: SimTime,
}

impl DeviceHandle {
    /// The device this handle talks to.
    pub fn shared(&self) -> &SharedDevice {
        &self.shared
    }

    /// Run `cmd` on the event core (see the module docs): its completion, final.
    fn exec_on_core(
        &mut self,
        cmd: csd_device::Command,
        at: SimTime,
        pacer: &Pacer,
        actor: Option<&crate::actors::Actor>,
    ) -> Result<Completion, HostError> {
        let shared = &self.shared;
        let qid = self.qid;
        let paced = pacer.now_sim().is_some();
        // An actor's completion is fixed as the group's turns allow (below).
        let waits = paced || actor.is_some();
        let (mut c, ticket) = {
            let mut dev = shared.lock_raw();
            shared.on_core(&mut dev, |dev, core| {
                // Taken under the lock: submissions reach the core in the order of their
                // instants.
                let at = pacer.now_sim().map_or(at, |now| now.max(at));
                core.seq += 1;
                events::set_order(core.seq);
                let c = complete(dev, qid, cmd, at)?;
                if waits {
                    let ticket = core.wait(c.acct.completed);
                    Ok::<_, HostError>((c, Some(ticket)))
                } else {
                    let mut c = c;
                    let done = dev.resolve(c.acct.completed);
                    fix_completion(&mut c, done);
                    Ok((c, None))
                }
            })?
        };
        let Some(ticket) = ticket else {
            return Ok(c);
        };
        if let Some(a) = actor {
            let done = shared.actor_completion(a, ticket);
            fix_completion(&mut c, done);
            return Ok(c);
        }
        // Paced: wait until the wall clock's instant passes the completion; the core books
        // only stages that arrive by it (later submissions arrive after it).
        let mut wake = c.acct.completed.ns();
        let done = loop {
            pacer.wait_until(SimTime::from_ns(wake));
            let mut dev = shared.lock_raw();
            let fixed = shared.on_core(&mut dev, |dev, core| {
                let now = pacer.now_sim().unwrap_or(SimTime::ZERO);
                let t = core.waiting[ticket].expect("a waiting ticket");
                if dev.at_or_before(t, now) {
                    core.waiting[ticket] = None;
                    Ok(dev.resolve(t))
                } else {
                    Err(t.ns().max(now.ns()))
                }
            });
            drop(dev);
            match fixed {
                Ok(done) => break done,
                Err(lower) => {
                    if lower > pacer.now_sim().map_or(0, SimTime::ns) {
                        wake = lower;
                    } else {
                        std::thread::sleep(RECHECK);
                    }
                }
            }
        };
        fix_completion(&mut c, done);
        Ok(c)
    }
}

/// Give `c` its final completion instant `done` (its submission instant is final: the
/// handle's clock or the wall clock's instant).
fn fix_completion(c: &mut Completion, done: SimTime) {
    debug_assert!(c.acct.submitted.is_final(), "{:?}", c.acct.submitted);
    c.acct.completed = done;
    c.acct.latency_ns = done.since(c.acct.submitted);
}

impl CommandIssuer for DeviceHandle {
    fn give_back(&mut self, buf: Vec<u8>) {
        self.shared.lock_raw().give_back(buf);
    }

    fn exec_at(&mut self, cmd: csd_device::Command, at: SimTime) -> Result<Completion, HostError> {
        let name = cmd.name();
        let pacer = self.shared.pacer();
        // Virtual, on an actor's thread: submit at the actor's clock once every other
        // actor of its group has acted up to it (crate::actors).
        let actor = match pacer.mode() {
            ClockMode::Virtual => crate::actors::current(),
            _ => None,
        };
        let at = actor.as_ref().map_or(at, |a| a.turn(at).0);
        // Paced: a submission in the future waits for it; the device sees the real
        // arrival instant.
        pacer.wait_until(at);
        let result = if self.shared.inner.core.is_some() {
            self.exec_on_core(cmd, at, &pacer, actor.as_ref())
        } else {
            let at = pacer.now_sim().map_or(at, |now| now.max(at));
            let mut dev = self.shared.lock_raw();
            complete(&mut dev, self.qid, cmd, at)
        };
        let c = result?;
        let inner = &self.shared.inner;
        inner
            .totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(&c.acct);
        self.now = self.now.max(c.acct.completed);
        if let Some(a) = &actor {
            a.advance(c.acct.completed);
        }
        inner
            .latest
            .fetch_max(c.acct.completed.ns(), Ordering::AcqRel);
        pacer.wait_until(c.acct.completed);
        checked(name, c)
    }

    fn identify(&self) -> &IdentifyInfo {
        &self.shared.inner.identify
    }

    /// The handle's clock; on an actor's thread in virtual time, the actor's
    /// ([`crate::actors`]): a handle several actors share, like a pool's, carries its
    /// last user's clock, and this actor submits at its own.
    fn now(&self) -> SimTime {
        if let Some(a) = crate::actors::current()
            && self.shared.pacer().mode() == ClockMode::Virtual
        {
            return a.now();
        }
        self.now
    }

    fn wait_until(&mut self, t: SimTime) {
        let pacer = self.shared.pacer();
        let t = match (pacer.mode(), crate::actors::current()) {
            (ClockMode::Virtual, Some(a)) => a.turn(t).0,
            _ => t,
        };
        pacer.wait_until(t);
        self.now = self.now.max(t);
        self.shared.inner.latest.fetch_max(t.ns(), Ordering::AcqRel);
    }
}

impl Drop for DeviceHandle {
    fn drop(&mut self) {
        let _ = self.shared.lock_raw().delete_queue_pair(self.qid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_device::NvmeDevice;
    use csd_ftl::{Ftl, FtlConfig};
    use csd_nand::Nand;
    use csd_sim::DeviceConfig;
    use std::time::Instant;

    fn shared(mode: ClockMode) -> SharedDevice {
        shared_on(mode, TimeModel::Calendar)
    }

    fn shared_on(mode: ClockMode, time_model: TimeModel) -> SharedDevice {
        shared_preset("tiny", mode, time_model)
    }

    /// A fresh in-memory device of `preset`, shared.
    fn shared_preset(preset: &str, mode: ClockMode, time_model: TimeModel) -> SharedDevice {
        let cfg = DeviceConfig::preset(preset).expect("a built-in preset");
        let nand = Nand::new_in_memory(cfg).expect("nand");
        let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
        SharedDevice::with_time_model(NvmeDevice::new(ftl), mode, time_model).expect("share")
    }

    /// Compact the core's graph after every few nodes (exercises the renaming of the
    /// device's instants and of the completions handles wait for).
    fn compact_often(dev: &SharedDevice) {
        let core = dev.inner.core.as_ref().expect("on the core");
        let mut core = core.lock().expect("core");
        core.graph.as_mut().expect("graph").set_compact_nodes(64);
    }

    /// One thread's mix of writes and reads of its own LBAs (seeded), checking each read;
    /// the completions' (submitted, completed) instants in order.
    fn mixed_ops(h: &mut DeviceHandle, t: u64, ops: u64, lba_size: usize) -> Vec<(u64, u64)> {
        let mut times = Vec::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t;
        let mut written = std::collections::BTreeMap::new();
        for i in 0..ops {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let lba = t * 64 + x % 48;
            let c = if x.is_multiple_of(3) || !written.contains_key(&lba) {
                let byte = (x >> 8) as u8;
                let blocks = 1 + (x >> 20) % 3;
                let data = vec![byte; lba_size * blocks as usize];
                for b in 0..blocks {
                    written.insert(lba + b, byte);
                }
                h.exec(csd_device::Command::Write { lba, data })
                    .expect("write")
            } else {
                let c = h
                    .exec(csd_device::Command::Read { lba, blocks: 1 })
                    .expect("read");
                match &c.payload {
                    csd_device::Payload::Data(d) => {
                        assert!(d.iter().all(|&b| b == written[&lba]), "op {i} lba {lba}")
                    }
                    p => panic!("a read returned {p:?}"),
                }
                c
            };
            assert!(c.acct.completed.is_final() && c.acct.submitted.is_final());
            assert!(c.acct.completed >= c.acct.submitted);
            assert_eq!(c.acct.latency_ns, c.acct.completed.since(c.acct.submitted));
            times.push((c.acct.submitted.ns(), c.acct.completed.ns()));
        }
        times
    }

    /// Every counter of the core 0 but the stages booked (and late arrivals where
    /// `late_ok`).
    fn assert_clean(dev: &SharedDevice, late_ok: bool) -> Counters {
        let c = dev.event_counters().expect("on the core");
        assert!(c.booked > 0, "{}", c.sentence());
        assert_eq!(
            (c.unrecorded, c.stale, c.unfixed_comparisons),
            (0, 0, 0),
            "{}",
            c.sentence()
        );
        if !late_ok {
            assert_eq!(c.late_arrivals, 0, "{}", c.sentence());
        }
        c
    }

    #[test]
    fn one_virtual_thread_on_the_event_core_gets_the_calendars_answers() {
        // A thread that waits for each command: nothing of another command is in flight
        // when one is booked, so arrival order and booking order agree and the core must
        // reproduce the calendars' instants exactly.
        let mut runs = Vec::new();
        for tm in [TimeModel::Calendar, TimeModel::Events] {
            let dev = shared_on(ClockMode::Virtual, tm);
            let lba_size = dev.identify().lba_size as usize;
            let mut h = dev.handle().expect("handle");
            // Past the formatting's work (booked on calendars before the core existed).
            h.wait_until(SimTime::from_ns(10_000_000));
            if tm == TimeModel::Events {
                compact_often(&dev);
                dev.record_trace();
            }
            let times = mixed_ops(&mut h, 0, 300, lba_size);
            h.flush().expect("flush");
            if tm == TimeModel::Events {
                assert_clean(&dev, false);
                events::first_come_first_served(&dev.trace()).expect("arrival order");
            }
            runs.push((times, h.now().ns(), dev.totals().commands));
        }
        assert_eq!(runs[0], runs[1]);
    }

    /// The Identify a shared device issues is booked before the core exists: a paced
    /// command submitted at once must not arrive while the host link still carries it (it
    /// would wait behind a booking the trace never saw; seen once in a loaded suite run of
    /// crates/fdtree/tests/concurrent.rs). At 1,000 wall seconds per modeled second the
    /// first command arrives within a modeled microsecond of sharing.
    #[test]
    fn a_paced_command_right_after_sharing_arrives_after_the_identify() {
        for tm in [TimeModel::Calendar, TimeModel::Events] {
            let dev = shared_on(ClockMode::Paced { scale: 1000.0 }, tm);
            let idle = device_now(&dev.lock());
            dev.record_trace();
            let mut h = dev.handle().expect("handle");
            let c = h
                .exec(csd_device::Command::Identify)
                .expect("identify again");
            assert!(
                c.acct.submitted >= idle,
                "{tm:?}: submitted at {} while the device was busy until {idle}",
                c.acct.submitted
            );
            let trace = dev.trace();
            if tm == TimeModel::Events {
                let first = trace.first().expect("a traced booking");
                assert_eq!(first.start, first.arrival, "{first:?}");
                events::first_come_first_served(&trace).expect("arrival order");
            }
        }
    }

    #[test]
    fn paced_threads_on_the_event_core_are_served_in_arrival_order() {
        let dev = shared_on(ClockMode::Paced { scale: 1.0 }, TimeModel::Events);
        compact_often(&dev);
        dev.record_trace();
        let lba_size = dev.identify().lba_size as usize;
        let before = std::time::Instant::now();
        let times: Vec<Vec<(u64, u64)>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4u64)
                .map(|t| {
                    let dev = dev.clone();
                    s.spawn(move || {
                        let mut h = dev.handle().expect("handle");
                        mixed_ops(&mut h, t, 60, lba_size)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        let wall = before.elapsed().as_secs_f64();
        let c = assert_clean(&dev, false);
        events::first_come_first_served(&dev.trace()).expect("arrival order");
        assert_eq!(dev.totals().commands, 240);
        let (first, last) = times
            .iter()
            .flatten()
            .fold((u64::MAX, 0), |(a, b), &(s, e)| (a.min(s), b.max(e)));
        // Paced: the run took at least its modeled span on the wall clock.
        let modeled = (last - first) as f64 / 1e9;
        assert!(wall >= modeled * 0.9, "wall {wall} s < modeled {modeled} s");
        // Handing the device back books what is left; the data is all there.
        let mut dev = dev
            .into_device()
            .map_err(|_| "handles left")
            .expect("device");
        assert!(c.booked > 240);
        let qid = dev.create_queue_pair(4).expect("queue");
        let now = device_now(&dev);
        let c = complete(
            &mut dev,
            qid,
            csd_device::Command::Read { lba: 0, blocks: 1 },
            now,
        )
        .expect("read");
        assert!(c.status.is_success());
    }

    #[test]
    fn a_paced_run_after_a_virtual_preload_on_the_event_core_has_no_late_arrival() {
        // The benchmarks' pattern: a preload in virtual time by several threads (late
        // arrivals possible), then the clock switched to paced for the timed run.
        let dev = shared_on(ClockMode::Virtual, TimeModel::Events);
        compact_often(&dev);
        let lba_size = dev.identify().lba_size as usize;
        let threads = |dev: &SharedDevice, ops: u64| {
            std::thread::scope(|s| {
                for t in 0..3u64 {
                    let dev = dev.clone();
                    s.spawn(move || {
                        let mut h = dev.handle().expect("handle");
                        mixed_ops(&mut h, t, ops, lba_size);
                    });
                }
            })
        };
        threads(&dev, 80);
        let before = dev.event_counters().expect("core");
        dev.set_clock(ClockMode::Paced { scale: 1.0 });
        threads(&dev, 40);
        let after = assert_clean(&dev, true);
        assert_eq!(
            after.late_arrivals,
            before.late_arrivals,
            "the paced run: {} then {}",
            before.sentence(),
            after.sentence()
        );
        assert!(after.booked > before.booked);
    }

    #[test]
    fn virtual_threads_on_the_event_core_keep_their_data_and_count_late_arrivals() {
        let dev = shared_on(ClockMode::Virtual, TimeModel::Events);
        compact_often(&dev);
        let lba_size = dev.identify().lba_size as usize;
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let dev = dev.clone();
                s.spawn(move || {
                    let mut h = dev.handle().expect("handle");
                    mixed_ops(&mut h, t, 80, lba_size);
                });
            }
        });
        assert_clean(&dev, true);
        assert_eq!(dev.totals().commands, 320);
        // Inspection books everything: afterwards nothing is pending.
        let dev_guard = dev.lock();
        drop(dev_guard);
        let core = dev.inner.core.as_ref().expect("core");
        let pending = core
            .lock()
            .expect("core")
            .graph
            .as_ref()
            .map(Graph::pending);
        assert_eq!(pending, Some(0));
    }

    /// Per thread, a seeded list of writes (1-3 LBAs) and reads of its own 48 LBAs.
    fn thread_commands(t: u64, seed: u64, ops: u64, lba_size: usize) -> Vec<csd_device::Command> {
        let mut x = 0x2545_F491_4F6C_DD1Du64 ^ (t + 1).wrapping_mul(0x9E37_79B9) ^ seed << 32;
        (0..ops)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let lba = t * 64 + x % 48;
                if x % 5 < 2 {
                    let blocks = 1 + (x >> 20) % 3;
                    let data = vec![(x >> 8) as u8; lba_size * blocks as usize];
                    csd_device::Command::Write { lba, data }
                } else {
                    csd_device::Command::Read { lba, blocks: 1 }
                }
            })
            .collect()
    }

    /// `threads` handles made before any command (same queue pairs, same clocks in
    /// every run) and the instant they start at.
    fn handles(dev: &SharedDevice, threads: usize) -> (Vec<DeviceHandle>, SimTime) {
        let hs: Vec<DeviceHandle> = (0..threads)
            .map(|_| dev.handle().expect("handle"))
            .collect();
        let start = hs
            .iter()
            .map(CommandIssuer::now)
            .max()
            .unwrap_or(SimTime::ZERO);
        (hs, start)
    }

    /// The core's counters but the stages its compactions forgot (bookkeeping: when the
    /// graph is compacted depends on how often the caller records into it).
    fn modeled(c: Counters) -> Counters {
        Counters { forgotten: 0, ..c }
    }

    /// Per thread its (submitted, completed) instants; the core's counters, the client
    /// totals and the trace of bookings.
    type ActorRun = (
        Vec<Vec<(u64, u64)>>,
        Counters,
        ClientTotals,
        Vec<events::Booking>,
    );

    /// `threads` actors on the event core in virtual time (crate::actors), each running
    /// its own seeded commands: their (submitted, completed) instants per thread, the
    /// core's counters, the client totals and the trace of bookings.
    fn actor_run(preset: &str, threads: usize, ops: u64, seed: u64) -> ActorRun {
        let dev = shared_preset(preset, ClockMode::Virtual, TimeModel::Events);
        compact_often(&dev);
        dev.record_trace();
        let lba_size = dev.identify().lba_size as usize;
        let (hs, start) = handles(&dev, threads);
        let hs: Vec<Mutex<DeviceHandle>> = hs.into_iter().map(Mutex::new).collect();
        let group = crate::actors::Actors::new();
        let times = group.run(threads, start, |i| {
            let mut h = hs[i].lock().expect("handle");
            thread_commands(i as u64, seed, ops, lba_size)
                .into_iter()
                .map(|cmd| {
                    let c = h.exec(cmd).expect("command");
                    (c.acct.submitted.ns(), c.acct.completed.ns())
                })
                .collect::<Vec<_>>()
        });
        drop(hs);
        let counters = modeled(assert_clean(&dev, false));
        (times, counters, dev.totals(), dev.trace())
    }

    /// The reference of [`actor_run`]: one thread, a discrete-event loop on the core.
    /// Every thread's first command is submitted at the start (in thread order); then,
    /// repeatedly, the command in flight that completes first (ties to the lowest
    /// thread) is fixed, booking stages in arrival order only as far as needed to know
    /// it, and its thread submits its next command at that completion.
    fn reference_run(
        preset: &str,
        threads: usize,
        ops: u64,
        seed: u64,
    ) -> (Vec<Vec<(u64, u64)>>, Counters) {
        let dev = shared_preset(preset, ClockMode::Virtual, TimeModel::Events);
        compact_often(&dev);
        let lba_size = dev.identify().lba_size as usize;
        let (hs, start) = handles(&dev, threads);
        let mut todo: Vec<std::collections::VecDeque<_>> = (0..threads)
            .map(|i| thread_commands(i as u64, seed, ops, lba_size).into())
            .collect();
        let submit = |i: usize, at: SimTime, cmd| {
            let mut raw = dev.lock_raw();
            dev.on_core(&mut raw, |d, core| {
                core.seq += 1;
                events::set_order(core.seq);
                let c = complete(d, hs[i].qid, cmd, at).expect("command");
                (c.acct.submitted.ns(), core.wait(c.acct.completed))
            })
        };
        // Per thread: the command in flight (its submission and ticket).
        let mut flight: Vec<Option<(u64, usize)>> = (0..threads)
            .map(|i| todo[i].pop_front().map(|cmd| submit(i, start, cmd)))
            .collect();
        let mut want = vec![Vec::new(); threads];
        while flight.iter().any(Option::is_some) {
            let live: Vec<usize> = (0..threads).filter(|&i| flight[i].is_some()).collect();
            let ticket = |i: usize| flight[i].expect("in flight").1;
            let (i, done) = {
                let mut raw = dev.lock_raw();
                dev.on_core(&mut raw, |d, core| {
                    let ts: Vec<SimTime> = live
                        .iter()
                        .map(|&i| core.waiting[ticket(i)].expect("ticket"))
                        .collect();
                    let (k, done) = d.earliest(&ts).expect("a completion");
                    core.waiting[ticket(live[k])] = None;
                    (live[k], done)
                })
            };
            let (submitted, _) = flight[i].take().expect("in flight");
            want[i].push((submitted, done.ns()));
            if let Some(cmd) = todo[i].pop_front() {
                flight[i] = Some(submit(i, done, cmd));
            }
        }
        drop(hs);
        (want, modeled(assert_clean(&dev, false)))
    }

    /// Actors reach every resource in modeled-arrival order: no late arrival, every
    /// resource's bookings in the order of their arrivals, and exactly the reference's
    /// instants and counters; a second run is identical. Free-running threads with the
    /// same commands arrive late (what the group is for).
    #[test]
    fn virtual_actors_submit_in_arrival_order_and_repeat_exactly() {
        let (threads, ops, seed) = (4, 60, 1);
        let (times, counters, totals, trace) = actor_run("tiny", threads, ops, seed);
        assert_eq!(totals.commands, threads as u64 * ops);
        events::first_come_first_served(&trace).expect("arrival order at every resource");
        assert_eq!(
            reference_run("tiny", threads, ops, seed),
            (times.clone(), counters)
        );
        let again = actor_run("tiny", threads, ops, seed);
        assert_eq!((again.0, again.1, again.2), (times, counters, totals));
        let dev = shared_on(ClockMode::Virtual, TimeModel::Events);
        let lba_size = dev.identify().lba_size as usize;
        let (hs, _) = handles(&dev, threads);
        std::thread::scope(|s| {
            for (i, mut h) in hs.into_iter().enumerate() {
                s.spawn(move || {
                    for cmd in thread_commands(i as u64, seed, ops, lba_size) {
                        h.exec(cmd).expect("command");
                    }
                });
            }
        });
        assert!(assert_clean(&dev, true).late_arrivals > 0);
    }

    /// The same on the default device (`nvme-tlc`), eight actors: the reference's
    /// instants and counters, arrival order at every resource, no late arrival.
    #[test]
    fn virtual_actors_on_the_default_device_match_the_reference() {
        let (threads, ops, seed) = (8, 40, 7);
        let (times, counters, totals, trace) = actor_run("nvme-tlc", threads, ops, seed);
        assert_eq!(totals.commands, threads as u64 * ops);
        events::first_come_first_served(&trace).expect("arrival order at every resource");
        assert_eq!(
            reference_run("nvme-tlc", threads, ops, seed),
            (times, counters)
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// Any number of actors with any commands: the reference's instants and
        /// counters, no late arrival, arrival order at every resource.
        #[test]
        fn virtual_actors_match_the_discrete_event_reference(
            threads in 1usize..6,
            ops in 1u64..40,
            seed in 0u64..1_000,
        ) {
            let (times, counters, totals, trace) = actor_run("tiny", threads, ops, seed);
            proptest::prop_assert_eq!(totals.commands, threads as u64 * ops);
            proptest::prop_assert!(events::first_come_first_served(&trace).is_ok());
            proptest::prop_assert_eq!(reference_run("tiny", threads, ops, seed), (times, counters));
        }
    }

    #[test]
    fn threads_write_and_read_their_own_lbas() {
        let dev = shared(ClockMode::Virtual);
        let lba_size = dev.identify().lba_size as usize;
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let dev = dev.clone();
                s.spawn(move || {
                    let mut h = dev.handle().expect("handle");
                    for i in 0..50u64 {
                        let lba = t as u64 * 100 + i;
                        let data = vec![t.wrapping_mul(31).wrapping_add(i as u8); lba_size];
                        h.write(lba, &data).expect("write");
                        assert_eq!(h.read(lba, 1).expect("read"), data);
                    }
                });
            }
        });
        let mut h = dev.handle().expect("handle");
        for t in 0..4u8 {
            for i in 0..50u64 {
                let got = h.read(t as u64 * 100 + i, 1).expect("read");
                assert!(
                    got.iter()
                        .all(|&b| b == t.wrapping_mul(31).wrapping_add(i as u8))
                );
            }
        }
        let tot = dev.totals();
        assert_eq!(tot.commands, 4 * 100 + 200);
        drop(h);
        assert!(dev.into_device().is_ok(), "all handles dropped");
    }

    /// Read one LBA at paced scale 1000: (wall seconds, modeled seconds x 1000, completion).
    fn paced_read(h: &mut DeviceHandle, lba: u64) -> (f64, f64, Completion) {
        let t0 = Instant::now();
        let c = h
            .exec(csd_device::Command::Read { lba, blocks: 1 })
            .expect("read");
        let wall = t0.elapsed().as_secs_f64();
        let modeled = c.acct.latency_ns as f64 / 1e9 * 1000.0;
        (wall, modeled, c)
    }

    #[test]
    fn paced_mode_makes_threads_wait_for_modeled_completion() {
        // Scale 1000: every modeled microsecond is a wall millisecond.
        let dev = shared(ClockMode::Paced { scale: 1000.0 });
        let mut h = dev.handle().expect("handle");
        let (wall, modeled, _) = paced_read(&mut h, 0);
        assert!(modeled > 0.0);
        assert!(
            wall >= modeled * 0.9,
            "wall {wall} s < modeled x scale {modeled} s"
        );
    }

    #[test]
    fn switching_from_virtual_to_paced_starts_the_wall_clock_now() {
        let dev = shared(ClockMode::Virtual);
        let lba_size = dev.identify().lba_size as usize;
        let mut h = dev.handle().expect("handle");
        // Modeled work in virtual time (no wall-clock wait): at scale 1000 its backlog
        // would be tens of seconds of wall clock if the switch did not start from it.
        for i in 0..400u64 {
            h.write(i, &vec![i as u8; lba_size]).expect("write");
        }
        h.flush().expect("flush");
        let virtual_end = h.now();
        assert!(virtual_end.ns() > 10_000_000, "{virtual_end:?}");
        // Paced at scale 1000 from here: a read waits its own latency x 1000 on the wall
        // clock, not the virtual backlog, and simulated time does not go backwards.
        dev.set_clock(ClockMode::Paced { scale: 1000.0 });
        let mut h2 = dev.handle().expect("handle");
        let (wall, modeled, c) = paced_read(&mut h2, 1);
        assert!(c.acct.completed >= virtual_end);
        assert!(wall >= modeled * 0.9, "wall {wall} s < modeled {modeled} s");
        assert!(
            wall < modeled * 3.0 + 0.5,
            "wall {wall} s: waited for the virtual backlog too (modeled {modeled} s)"
        );
        assert_eq!(h2.read(1, 1).expect("read"), vec![1u8; lba_size]);
    }

    #[test]
    fn errors_change_nothing_and_handles_free_their_queue() {
        let dev = shared(ClockMode::Virtual);
        let lbas = dev.identify().lbas;
        let mut h = dev.handle().expect("handle");
        assert!(h.read(lbas, 1).is_err());
        assert_eq!(
            dev.totals().commands,
            1,
            "the failed command is still counted"
        );
        drop(h);
        // 64 handles at once is the limit; after dropping, handles can be made again.
        let hs: Vec<_> = (0..64).map(|_| dev.handle().expect("handle")).collect();
        assert!(dev.handle().is_err());
        drop(hs);
        assert!(dev.handle().is_ok());
    }
}

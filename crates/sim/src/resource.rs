//! Busy resources of the timing model (docs/architecture.md "Time", docs/time-model.md).
//!
//! A [`Resource`] is anything that serves one operation at a time: a flash die, a
//! channel bus, the controller's DRAM bus, the host link, an embedded core, the host
//! CPU. [`Resource::reserve`] books it for a duration starting no earlier than a given
//! instant (the operation's modeled arrival there) and returns when the booking ends.
//!
//! Choice (issue 30; the first version kept one "free at" instant per resource, served
//! bookings in the order code made them and so made an operation that arrived early but
//! was booked late wait behind everything booked before it): a resource keeps a
//! **calendar** of its busy intervals and places each operation in the earliest idle
//! interval, at or after its arrival, that holds it whole. So
//! * an operation is never delayed by one booked after it (bookings already made never
//!   move: their completions have been handed out);
//! * when code books operations in their order of arrival at the resource (one actor
//!   submitting in time order, or the NVMe executor running a queue's commands in
//!   arrival order), the calendar serves them exactly first-come first-served;
//! * an operation booked out of arrival order takes the earliest gap that fits it (as a
//!   die or bus scheduler that reorders by readiness would), instead of queueing behind
//!   later arrivals that happened to be booked first.
//!
//! Memory is bounded: a calendar keeps at most [`CALENDAR_INTERVALS`] busy intervals
//! (adjacent ones are merged, so a saturated resource keeps one); when it would keep
//! more, the oldest is forgotten and the resource counts as busy up to that interval's
//! end (its *floor*): an operation arriving before the floor starts at the floor. With
//! bookings made in arrival order the floor is never reached from below.
//!
//! Busy time and operation counts are kept so that reports can show utilization and
//! name the bottleneck.

use crate::events::{self, ResourceId};
use crate::time::SimTime;
use std::fmt;

/// Busy intervals a calendar keeps before it forgets the oldest.
pub const CALENDAR_INTERVALS: usize = 64;

/// One busy interval of a calendar: `[start, end)` and the latest arrival booked in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Interval {
    start: u64,
    end: u64,
    arrival: u64,
}

/// One resource that serves one operation at a time.
///
/// The calendar is a `Vec` whose live part is `busy[head..]`: forgetting the oldest
/// interval only advances `head`, and the dead prefix is dropped once it is a calendar
/// long, so both forgetting and the common insertion near the end (a late booking of a
/// recent arrival) move few elements.
#[derive(Debug, Clone, Default)]
pub struct Resource {
    /// Busy intervals, sorted, disjoint and not adjacent; live from `head` on.
    busy: Vec<Interval>,
    /// Index of the first live interval of `busy`.
    head: usize,
    /// Nothing may be booked before this instant (forgotten history, power cycle).
    floor: u64,
    busy_ns: u64,
    ops: u64,
    inversions: u64,
    /// Of the inverted bookings: their waits (start - arrival) and their service times,
    /// summed.
    inversion_wait_ns: u64,
    inversion_busy_ns: u64,
    /// Every booking's wait (start - arrival), summed.
    wait_ns: u64,
    /// The latest arrival booked since the last power cycle, and whether a booking was
    /// undone ([`Resource::unbook`]) since. Without an undone booking the calendar has
    /// no idle instant between `max(latest arrival, floor)` and its last end (a booking
    /// fills a gap before that instant or starts at the last end or later; forgetting
    /// old intervals only raises the floor), so a booking arriving at or after the
    /// latest arrival starts at `max(arrival, last end)` without a search: every
    /// booking of the event core, which books in arrival order (the search was most of
    /// the cost of a 4 KiB read's bookings at busy dies, measured).
    max_arrival: u64,
    unbooked: bool,
    /// [`ResourceId::raw`] of the id its owner gave it ([`Resource::with_id`]), 0 for
    /// none: bookings of a resource with an id go through the event core while it
    /// records.
    id: u32,
}

impl PartialEq for Resource {
    /// Equal when the live calendars, floors and counters are: where the dead prefix
    /// happens to be trimmed is not state.
    fn eq(&self, other: &Resource) -> bool {
        self.live() == other.live()
            && self.floor == other.floor
            && self.busy_ns == other.busy_ns
            && self.ops == other.ops
            && self.inversions == other.inversions
            && self.inversion_wait_ns == other.inversion_wait_ns
            && self.inversion_busy_ns == other.inversion_busy_ns
            && self.wait_ns == other.wait_ns
    }
}

impl Eq for Resource {}

impl Resource {
    /// A resource that is free from time zero.
    pub const fn new() -> Resource {
        Resource {
            busy: Vec::new(),
            head: 0,
            floor: 0,
            busy_ns: 0,
            ops: 0,
            inversions: 0,
            inversion_wait_ns: 0,
            inversion_busy_ns: 0,
            wait_ns: 0,
            max_arrival: 0,
            unbooked: false,
            id: 0,
        }
    }

    /// A resource free from time zero that the event core knows as `id`: while this
    /// thread records ([`crate::events::Recording`]), [`Resource::reserve`] records a
    /// stage for the core to book here in arrival order.
    pub const fn with_id(id: ResourceId) -> Resource {
        let mut r = Resource::new();
        r.id = id.raw();
        r
    }

    /// The id [`Resource::with_id`] gave, if any.
    pub fn id(&self) -> Option<ResourceId> {
        (self.id != 0).then(|| ResourceId::from_raw(self.id))
    }

    /// The calendar's live intervals.
    #[inline]
    fn live(&self) -> &[Interval] {
        &self.busy[self.head..]
    }

    /// Book the resource for `dur_ns` in the earliest idle interval that starts at or
    /// after `earliest` and holds the whole operation. Returns the (start, end) of the
    /// booking.
    ///
    /// While this thread records into the event core and the resource has an id, the
    /// operation is recorded instead and booked later in arrival order; the instants
    /// returned then name it ([`SimTime::is_final`] false).
    #[inline]
    pub fn reserve(&mut self, earliest: SimTime, dur_ns: u64) -> (SimTime, SimTime) {
        if events::recording() {
            if self.id != 0 {
                return events::record_stage(ResourceId::from_raw(self.id), earliest, dur_ns);
            }
            events::note_unrecorded();
        }
        self.reserve_now(earliest, dur_ns)
    }

    /// [`Resource::reserve`] at once, whether or not the thread records (the event
    /// core's own bookings). `earliest`'s value is taken as final.
    #[inline]
    pub fn reserve_now(&mut self, earliest: SimTime, dur_ns: u64) -> (SimTime, SimTime) {
        debug_assert!(
            earliest.is_final() || events::recording(),
            "an unfixed instant outlived its recording"
        );
        let earliest = SimTime::from_ns(earliest.ns());
        let (start, slot, inverted) = self.fit(earliest.ns(), dur_ns);
        self.max_arrival = self.max_arrival.max(earliest.ns());
        let end = start.saturating_add(dur_ns);
        if dur_ns > 0 {
            self.insert(slot, start, end, earliest.ns());
        }
        if inverted {
            self.inversions += 1;
            self.inversion_wait_ns = self.inversion_wait_ns.saturating_add(start - earliest.ns());
            self.inversion_busy_ns = self.inversion_busy_ns.saturating_add(dur_ns);
        }
        self.wait_ns = self.wait_ns.saturating_add(start - earliest.ns());
        self.busy_ns = self.busy_ns.saturating_add(dur_ns);
        self.ops += 1;
        (SimTime::from_ns(start), SimTime::from_ns(end))
    }

    /// Where [`Resource::reserve`] would start an operation of `dur_ns` arriving at
    /// `earliest`, without booking it.
    #[inline]
    pub fn earliest_start(&self, earliest: SimTime, dur_ns: u64) -> SimTime {
        SimTime::from_ns(self.fit(earliest.ns(), dur_ns).0)
    }

    /// Undo a booking `(start, end)` that [`Resource::reserve`] returned (a refused
    /// command costs nothing). The span must still be booked.
    pub fn unbook(&mut self, start: SimTime, end: SimTime) {
        let (s, e) = (start.ns(), end.ns());
        self.ops = self.ops.saturating_sub(1);
        // The undone span may leave an idle gap after the latest arrival.
        self.unbooked = true;
        if e <= s {
            return;
        }
        let i = self.head + self.live().partition_point(|iv| iv.end <= s);
        let Some(&Interval {
            start: bs,
            end: be,
            arrival,
        }) = self.busy.get(i)
        else {
            debug_assert!(false, "unbook of [{s}, {e}) that is not booked");
            return;
        };
        debug_assert!(
            bs <= s && e <= be,
            "unbook of [{s}, {e}) inside [{bs}, {be})"
        );
        if !(bs <= s && e <= be) {
            return;
        }
        self.busy_ns = self.busy_ns.saturating_sub(e - s);
        match (bs < s, e < be) {
            (false, false) => {
                self.busy.remove(i);
            }
            (true, false) => self.busy[i].end = s,
            (false, true) => self.busy[i].start = e,
            (true, true) => {
                self.busy[i].end = s;
                self.busy.insert(
                    i + 1,
                    Interval {
                        start: e,
                        end: be,
                        arrival,
                    },
                );
            }
        }
    }

    /// The instant from which the resource is free for good (the end of its last
    /// booking).
    #[inline]
    pub fn free_at(&self) -> SimTime {
        SimTime::from_ns(
            self.live()
                .last()
                .map_or(self.floor, |iv| iv.end.max(self.floor)),
        )
    }

    /// Total booked time, in nanoseconds.
    #[inline]
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns
    }

    /// Number of bookings made.
    #[inline]
    pub fn ops(&self) -> u64 {
        self.ops
    }

    /// Bookings that had to wait behind an operation that arrived later than they did
    /// but was booked first (the one case in which a calendar is not first-come
    /// first-served; see the module doc).
    #[inline]
    pub fn inversions(&self) -> u64 {
        self.inversions
    }

    /// Of the bookings [`Resource::inversions`] counts: their waits (start minus
    /// arrival) and their service times, each summed, in ns. The mean service time tells
    /// which operations waited (e.g. a die's reads against its programs).
    #[inline]
    pub fn inversion_ns(&self) -> (u64, u64) {
        (self.inversion_wait_ns, self.inversion_busy_ns)
    }

    /// Every booking's wait (start minus arrival), summed, in ns: what the inverted
    /// bookings' waits ([`Resource::inversion_ns`]) are a part of.
    #[inline]
    pub fn wait_ns(&self) -> u64 {
        self.wait_ns
    }

    /// Busy intervals the calendar holds now (for tests and inspection).
    pub fn intervals(&self) -> impl Iterator<Item = (SimTime, SimTime)> + '_ {
        self.live()
            .iter()
            .map(|iv| (SimTime::from_ns(iv.start), SimTime::from_ns(iv.end)))
    }

    /// Forget busy time and operation counts (keeps the calendar), for a measurement
    /// window.
    pub fn reset_counters(&mut self) {
        self.busy_ns = 0;
        self.ops = 0;
        self.inversions = 0;
        self.inversion_wait_ns = 0;
        self.inversion_busy_ns = 0;
        self.wait_ns = 0;
    }

    /// Forget everything, as after a power cycle: the resource is free from `now`.
    pub fn power_cycle(&mut self, now: SimTime) {
        self.busy.clear();
        self.head = 0;
        self.floor = now.ns();
        self.max_arrival = 0;
        self.unbooked = false;
    }

    /// The earliest start at or after `earliest` (and the floor) where `dur` fits, the
    /// index (in the live calendar) of the first interval after it, and whether it
    /// waits behind a booking of a later arrival.
    #[inline]
    fn fit(&self, earliest: u64, dur: u64) -> (u64, usize, bool) {
        let mut t = earliest.max(self.floor);
        let live = self.live();
        // Fast path: after everything booked (the common case of in-order arrivals).
        match live.last() {
            None => return (t, 0, false),
            Some(iv) if iv.end <= t => return (t, live.len(), false),
            // Busy from the latest arrival to its last end (see `max_arrival`).
            Some(iv) if !self.unbooked && earliest >= self.max_arrival => {
                return (iv.end, live.len(), false);
            }
            _ => {}
        }
        // The first interval that ends after `t`; walk the gaps from there.
        let first = live.partition_point(|iv| iv.end <= t);
        let mut inverted = false;
        for (i, iv) in live.iter().enumerate().skip(first) {
            // A zero-length operation needs a free instant, not a free span.
            if t.saturating_add(dur) <= iv.start && (dur > 0 || t < iv.start) {
                return (t, i, inverted);
            }
            inverted |= iv.arrival > earliest;
            t = t.max(iv.end);
        }
        (t, live.len(), inverted)
    }

    /// Insert `[start, end)` before live interval `i` (it fits there), merging
    /// neighbours; forget the oldest interval when the calendar is over its length.
    fn insert(&mut self, i: usize, start: u64, end: u64, arrival: u64) {
        let j = self.head + i;
        let joins_prev = i > 0 && self.busy[j - 1].end == start;
        let joins_next = self.busy.get(j).is_some_and(|iv| iv.start == end);
        match (joins_prev, joins_next) {
            (true, true) => {
                let next = self.busy.remove(j);
                let prev = &mut self.busy[j - 1];
                prev.end = next.end;
                prev.arrival = prev.arrival.max(next.arrival).max(arrival);
            }
            (true, false) => {
                let prev = &mut self.busy[j - 1];
                prev.end = end;
                prev.arrival = prev.arrival.max(arrival);
            }
            (false, true) => {
                let next = &mut self.busy[j];
                next.start = start;
                next.arrival = next.arrival.max(arrival);
            }
            (false, false) => {
                self.busy.insert(
                    j,
                    Interval {
                        start,
                        end,
                        arrival,
                    },
                );
                if self.busy.len() - self.head > CALENDAR_INTERVALS {
                    self.floor = self.floor.max(self.busy[self.head].end);
                    self.head += 1;
                    if self.head >= CALENDAR_INTERVALS {
                        self.busy.drain(..self.head);
                        self.head = 0;
                    }
                }
            }
        }
        debug_assert!(self.live().windows(2).all(|w| w[0].end < w[1].start));
    }
}

/// The classes of resources that reports group utilization by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceClass {
    /// Flash dies (array operations: tR, tPROG, tBERS).
    Die,
    /// Flash channel buses between the dies and the controller.
    Channel,
    /// The controller's DRAM bus.
    Dram,
    /// The host link (SATA, SAS, PCIe).
    HostLink,
    /// Embedded CPU cores of the controller.
    EmbeddedCpu,
    /// The host CPU.
    HostCpu,
}

impl ResourceClass {
    /// Every class, in data-path order.
    pub const ALL: [ResourceClass; 6] = [
        ResourceClass::Die,
        ResourceClass::Channel,
        ResourceClass::Dram,
        ResourceClass::HostLink,
        ResourceClass::EmbeddedCpu,
        ResourceClass::HostCpu,
    ];

    /// snake_case name used in JSON keys and tables.
    pub fn key(self) -> &'static str {
        match self {
            ResourceClass::Die => "die",
            ResourceClass::Channel => "channel",
            ResourceClass::Dram => "dram",
            ResourceClass::HostLink => "host_link",
            ResourceClass::EmbeddedCpu => "embedded_cpu",
            ResourceClass::HostCpu => "host_cpu",
        }
    }
}

impl fmt::Display for ResourceClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// Utilization of one resource class over a window: the mean and the maximum over the
/// members of the class (e.g. the busiest die), both as fractions of the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Utilization {
    /// Which class.
    pub class: ResourceClass,
    /// How many resources of this class exist.
    pub members: usize,
    /// Mean busy fraction over the members.
    pub mean: f64,
    /// Busy fraction of the busiest member.
    pub max: f64,
    /// Total busy nanoseconds, summed over members.
    pub busy_ns: u64,
    /// Bookings that waited behind a later arrival booked first, summed over members
    /// ([`Resource::inversions`]).
    pub inversions: u64,
    /// Bookings made, summed over members ([`Resource::ops`]): what `inversions` is a
    /// share of.
    pub ops: u64,
    /// The inverted bookings' waits and service times, summed over members
    /// ([`Resource::inversion_ns`]).
    pub inversion_ns: (u64, u64),
    /// Every booking's wait, summed over members ([`Resource::wait_ns`]).
    pub wait_ns: u64,
}

impl Utilization {
    /// Of all waiting at this class's resources, the share that bookings waiting behind a
    /// later arrival did (`None` when nothing waited).
    pub fn inversion_wait_share(&self) -> Option<f64> {
        (self.wait_ns > 0).then(|| self.inversion_ns.0 as f64 / self.wait_ns as f64)
    }

    /// Summarize `resources` of one class over a window of `window_ns`.
    pub fn of<'a>(
        class: ResourceClass,
        resources: impl IntoIterator<Item = &'a Resource>,
        window_ns: u64,
    ) -> Utilization {
        let mut members = 0usize;
        let mut total = 0u64;
        let mut max = 0u64;
        let mut inversions = 0u64;
        let mut ops = 0u64;
        let mut inversion_ns = (0u64, 0u64);
        let mut wait_ns = 0u64;
        for r in resources {
            wait_ns += r.wait_ns();
            members += 1;
            inversions += r.inversions();
            ops += r.ops();
            let (w, b) = r.inversion_ns();
            inversion_ns = (inversion_ns.0 + w, inversion_ns.1 + b);
            total += r.busy_ns();
            max = max.max(r.busy_ns());
        }
        let w = window_ns.max(1) as f64;
        Utilization {
            class,
            members,
            mean: if members == 0 {
                0.0
            } else {
                total as f64 / members as f64 / w
            },
            max: max as f64 / w,
            busy_ns: total,
            inversions,
            ops,
            inversion_ns,
            wait_ns,
        }
    }
}

/// The bottleneck among `utils`: the class whose mean utilization is highest (ties go to
/// the one earlier in the data path). `None` when nothing was busy.
pub fn bottleneck(utils: &[Utilization]) -> Option<ResourceClass> {
    utils
        .iter()
        .filter(|u| u.busy_ns > 0)
        .fold(None::<&Utilization>, |best, u| match best {
            Some(b) if b.mean >= u.mean => Some(b),
            _ => Some(u),
        })
        .map(|u| u.class)
}

/// The member of a pool of equal resources (cores) that can start `ns` of work at `at`
/// first; ties go to the lowest index. The pool is not empty.
#[inline]
pub fn first_start(pool: &[Resource], at: SimTime, ns: u64) -> usize {
    let mut best = (SimTime::from_ns(u64::MAX), 0);
    for (i, r) in pool.iter().enumerate() {
        let s = r.earliest_start(at, ns);
        if s < best.0 {
            best = (s, i);
            if s == at {
                break;
            }
        }
    }
    debug_assert!(!pool.is_empty(), "a pool has at least one member");
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookings_fill_the_earliest_gap_that_holds_them() {
        let mut r = Resource::new();
        assert_eq!(
            r.reserve(SimTime::from_ns(10), 5),
            (SimTime::from_ns(10), SimTime::from_ns(15))
        );
        // Arrived earlier than a booking made before it, and fits before it: served then.
        assert_eq!(
            r.reserve(SimTime::from_ns(0), 5),
            (SimTime::from_ns(0), SimTime::from_ns(5))
        );
        // Does not fit in [5, 10): waits for the end of [10, 15).
        assert_eq!(
            r.reserve(SimTime::from_ns(4), 6),
            (SimTime::from_ns(15), SimTime::from_ns(21))
        );
        // Asked later: idles until then.
        assert_eq!(
            r.reserve(SimTime::from_ns(100), 1),
            (SimTime::from_ns(100), SimTime::from_ns(101))
        );
        // Fits exactly in [5, 10): the calendar merges it with both neighbours.
        assert_eq!(
            r.reserve(SimTime::from_ns(5), 5),
            (SimTime::from_ns(5), SimTime::from_ns(10))
        );
        let iv: Vec<_> = r.intervals().map(|(s, e)| (s.ns(), e.ns())).collect();
        assert_eq!(iv, vec![(0, 21), (100, 101)]);
        assert_eq!(r.busy_ns(), 22);
        assert_eq!(r.ops(), 5);
        assert_eq!(r.free_at(), SimTime::from_ns(101));
    }

    #[test]
    fn waiting_behind_a_later_arrival_is_counted() {
        let mut r = Resource::new();
        r.reserve(SimTime::from_ns(100), 10); // arrived at 100, booked first
        r.reserve(SimTime::from_ns(95), 10); // arrived earlier, [95, 100) too short: after it
        assert_eq!(r.inversions(), 1);
        assert_eq!(
            r.inversion_ns(),
            (15, 10),
            "waited from 95 to 110, served 10"
        );
        r.reserve(SimTime::from_ns(0), 10); // fits before everything
        r.reserve(SimTime::from_ns(120), 10); // in order
        assert_eq!(r.inversions(), 1);
        r.reserve(SimTime::from_ns(105), 30); // waits behind arrivals at 100 and 120
        assert_eq!(r.inversions(), 2);
        r.reserve(SimTime::from_ns(200), 1);
        r.reserve(SimTime::from_ns(199), 5); // waits behind the arrival at 200
        assert_eq!(r.inversions(), 3);
        // In-order and gap-filling bookings add nothing; the three inverted ones waited
        // 15, 25 (105 to 130) and 2 (199 to 201).
        assert_eq!(r.inversion_ns(), (15 + 25 + 2, 10 + 30 + 5));
        // All waits: only the inverted bookings waited here.
        assert_eq!(r.wait_ns(), 15 + 25 + 2);
        r.reserve(SimTime::from_ns(201), 4); // arrives while the booking of 199 runs: waits 5
        assert_eq!((r.inversions(), r.wait_ns()), (3, 15 + 25 + 2 + 5));
        r.reset_counters();
        assert_eq!(
            (r.inversions(), r.inversion_ns(), r.wait_ns()),
            (0, (0, 0), 0)
        );
    }

    #[test]
    fn zero_length_operations_wait_only_for_a_free_instant() {
        let mut r = Resource::new();
        r.reserve(SimTime::from_ns(10), 10);
        assert_eq!(
            r.reserve(SimTime::from_ns(5), 0),
            (SimTime::from_ns(5), SimTime::from_ns(5))
        );
        assert_eq!(
            r.reserve(SimTime::from_ns(12), 0),
            (SimTime::from_ns(20), SimTime::from_ns(20))
        );
        assert_eq!(r.intervals().count(), 1);
    }

    #[test]
    fn unbook_restores_the_calendar() {
        let mut r = Resource::new();
        r.reserve(SimTime::from_ns(0), 10);
        let before: Vec<_> = r.intervals().collect();
        let (s, e) = r.reserve(SimTime::from_ns(3), 4);
        assert_eq!((s, e), (SimTime::from_ns(10), SimTime::from_ns(14)));
        r.unbook(s, e);
        // The calendar and the counters are as before (the latest arrival kept for the
        // merged interval stays conservative: it may only make later waits count).
        assert_eq!(r.intervals().collect::<Vec<_>>(), before);
        assert_eq!((r.busy_ns(), r.ops()), (10, 1));
        // A booking in the middle of a merged interval splits it when undone.
        let mut r = Resource::new();
        r.reserve(SimTime::from_ns(0), 10);
        let (s, e) = r.reserve(SimTime::from_ns(10), 10);
        r.reserve(SimTime::from_ns(20), 10);
        r.unbook(s, e);
        let iv: Vec<_> = r.intervals().map(|(s, e)| (s.ns(), e.ns())).collect();
        assert_eq!(iv, vec![(0, 10), (20, 30)]);
        assert_eq!(r.busy_ns(), 20);
    }

    #[test]
    fn a_full_calendar_forgets_its_oldest_gap() {
        let mut r = Resource::new();
        for k in 0..(CALENDAR_INTERVALS as u64 + 10) {
            r.reserve(SimTime::from_ns(k * 10), 5);
        }
        assert_eq!(r.intervals().count(), CALENDAR_INTERVALS);
        // The first ten intervals are forgotten: an early arrival starts at the floor.
        let (s, _) = r.reserve(SimTime::from_ns(0), 1);
        assert_eq!(
            s,
            SimTime::from_ns(95),
            "the tenth interval [90, 95) is the floor"
        );
        // In-order arrivals never notice.
        let t = r.free_at();
        assert_eq!(r.reserve(t, 3).0, t);
    }

    /// The simple reference: a set of busy nanoseconds.
    fn reference_fit(busy: &std::collections::BTreeSet<u64>, earliest: u64, dur: u64) -> u64 {
        let mut t = earliest;
        loop {
            let free = if dur == 0 {
                !busy.contains(&t)
            } else {
                (t..t + dur).all(|x| !busy.contains(&x))
            };
            if free {
                return t;
            }
            t += 1;
        }
    }

    proptest::proptest! {
        /// Against a set of busy nanoseconds: every booking starts at the first instant
        /// at or after its arrival where it fits whole, and never overlaps another.
        #[test]
        fn calendar_matches_the_reference(ops in proptest::collection::vec((0u64..400, 0u64..40), 1..60)) {
            let mut r = Resource::new();
            let mut busy = std::collections::BTreeSet::new();
            let mut total = 0;
            for (at, dur) in ops {
                let want = reference_fit(&busy, at, dur);
                proptest::prop_assert_eq!(r.earliest_start(SimTime::from_ns(at), dur), SimTime::from_ns(want));
                let (s, e) = r.reserve(SimTime::from_ns(at), dur);
                proptest::prop_assert_eq!((s.ns(), e.ns()), (want, want + dur));
                busy.extend(want..want + dur);
                total += dur;
            }
            let held: u64 = r.intervals().map(|(s, e)| e.ns() - s.ns()).sum();
            proptest::prop_assert_eq!(held, total);
            proptest::prop_assert_eq!(r.busy_ns(), total);
        }
    }

    /// The previous calendar (a `VecDeque` of `(start, end, arrival)` that pops its
    /// front), kept as the reference the current one must match booking for booking.
    #[derive(Default)]
    struct DequeCalendar {
        busy: std::collections::VecDeque<(u64, u64, u64)>,
        floor: u64,
        inversions: u64,
        inversion_ns: (u64, u64),
        wait_ns: u64,
    }

    impl DequeCalendar {
        fn reserve(&mut self, earliest: u64, dur: u64) -> (u64, u64) {
            let mut t = earliest.max(self.floor);
            let mut i = self.busy.partition_point(|&(_, e, _)| e <= t);
            let mut inverted = false;
            while let Some(&(s, e, a)) = self.busy.get(i) {
                if t.saturating_add(dur) <= s && (dur > 0 || t < s) {
                    break;
                }
                inverted |= a > earliest;
                t = t.max(e);
                i += 1;
            }
            self.inversions += u64::from(inverted);
            if inverted {
                self.inversion_ns.0 += t - earliest;
                self.inversion_ns.1 += dur;
            }
            self.wait_ns += t - earliest;
            let (start, end) = (t, t + dur);
            if dur > 0 {
                let jp = i > 0 && self.busy[i - 1].1 == start;
                let jn = self.busy.get(i).is_some_and(|&(s, _, _)| s == end);
                match (jp, jn) {
                    (true, true) => {
                        let (_, e, a) = self.busy[i];
                        let p = &mut self.busy[i - 1];
                        p.1 = e;
                        p.2 = p.2.max(a).max(earliest);
                        self.busy.remove(i);
                    }
                    (true, false) => {
                        let p = &mut self.busy[i - 1];
                        p.1 = end;
                        p.2 = p.2.max(earliest);
                    }
                    (false, true) => {
                        let n = &mut self.busy[i];
                        n.0 = start;
                        n.2 = n.2.max(earliest);
                    }
                    (false, false) => {
                        self.busy.insert(i, (start, end, earliest));
                        if self.busy.len() > CALENDAR_INTERVALS
                            && let Some((_, e, _)) = self.busy.pop_front()
                        {
                            self.floor = self.floor.max(e);
                        }
                    }
                }
            }
            (start, end)
        }
    }

    proptest::proptest! {
        /// Long runs of mostly late, out-of-order bookings (past the calendar's length,
        /// so the floor and the trimming of forgotten intervals are exercised): every
        /// booking, the inversion count and the calendar equal the reference's.
        #[test]
        fn calendar_matches_the_deque_reference(
            ops in proptest::collection::vec((0u64..1000, 0u64..6, 0u64..16), 1..600)
        ) {
            let mut r = Resource::new();
            let mut d = DequeCalendar::default();
            let mut now = 0u64;
            for (back, dur, step) in ops {
                now += step;
                let at = now.saturating_sub(back);
                let want = d.reserve(at, dur);
                let (s, e) = r.reserve(SimTime::from_ns(at), dur);
                proptest::prop_assert_eq!((s.ns(), e.ns()), want);
            }
            proptest::prop_assert_eq!(r.inversions(), d.inversions);
            proptest::prop_assert_eq!(r.inversion_ns(), d.inversion_ns);
            proptest::prop_assert_eq!(r.wait_ns(), d.wait_ns);
            proptest::prop_assert_eq!(r.floor, d.floor);
            let held: Vec<_> = r.intervals().map(|(s, e)| (s.ns(), e.ns())).collect();
            let want: Vec<_> = d.busy.iter().map(|&(s, e, _)| (s, e)).collect();
            proptest::prop_assert_eq!(held, want);
            proptest::prop_assert_eq!(r.free_at().ns(), d.busy.back().map_or(d.floor, |b| b.1.max(d.floor)));
        }
    }

    proptest::proptest! {
        /// Bookings mostly in order of arrival (the event core's, which take the fast
        /// path to the last end), now and then a late one (which searches, and leaves
        /// the fast path right for the next in-order one) and power cycles: every booking
        /// and the calendar equal the reference's.
        #[test]
        fn in_order_bookings_match_the_deque_reference(
            ops in proptest::collection::vec(
                (proptest::prop_oneof![12 => proptest::strategy::Just(0u64), 1 => 1u64..60], 0u64..8, 0u64..6, 0u8..100),
                1..400,
            )
        ) {
            let mut r = Resource::new();
            let mut d = DequeCalendar::default();
            let mut now = 0u64;
            for (back, dur, step, cycle) in ops {
                now += step;
                if cycle == 0 {
                    r.power_cycle(SimTime::from_ns(now));
                    d = DequeCalendar { floor: now, ..DequeCalendar::default() };
                }
                let at = now.saturating_sub(back);
                let want = d.reserve(at, dur);
                let (s, e) = r.reserve(SimTime::from_ns(at), dur);
                proptest::prop_assert_eq!((s.ns(), e.ns()), want);
            }
            let held: Vec<_> = r.intervals().map(|(s, e)| (s.ns(), e.ns())).collect();
            let want: Vec<_> = d.busy.iter().map(|&(s, e, _)| (s, e)).collect();
            proptest::prop_assert_eq!(held, want);
        }
    }

    /// An undone booking leaves a gap after the latest arrival: the next in-order
    /// booking that fits there takes it (the fast path is off after an unbook).
    #[test]
    fn an_unbooked_gap_is_filled() {
        let mut r = Resource::new();
        r.reserve(SimTime::from_ns(0), 10);
        let (s, e) = r.reserve(SimTime::from_ns(5), 10);
        r.reserve(SimTime::from_ns(6), 10);
        r.unbook(s, e);
        let (s, _) = r.reserve(SimTime::from_ns(7), 5);
        assert_eq!(s.ns(), 10, "the gap [10, 20) left by the unbooked span");
    }

    #[test]
    fn bottleneck_is_busiest_class() {
        let mut a = Resource::new();
        a.reserve(SimTime::from_ns(0), 50);
        let mut b = Resource::new();
        b.reserve(SimTime::from_ns(0), 90);
        let u = [
            Utilization::of(ResourceClass::Die, [&a], 100),
            Utilization::of(ResourceClass::HostLink, [&b], 100),
        ];
        assert_eq!(bottleneck(&u), Some(ResourceClass::HostLink));
        assert_eq!(u[0].inversion_wait_share(), None, "nothing waited");
        let mut c = Resource::new();
        c.reserve(SimTime::from_ns(100), 10);
        c.reserve(SimTime::from_ns(95), 10); // behind the later arrival: waits 15
        c.reserve(SimTime::from_ns(110), 10); // behind the earlier one: waits 10
        let w = Utilization::of(ResourceClass::Die, [&c], 200);
        assert_eq!((w.ops, w.inversions, w.wait_ns), (3, 1, 25));
        assert_eq!(w.inversion_wait_share(), Some(15.0 / 25.0));
        assert!((u[1].mean - 0.9).abs() < 1e-12);
        assert_eq!(bottleneck(&[]), None);
    }
}

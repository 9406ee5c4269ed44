//! The event core of issue 30: stages of commands recorded as a graph of max-plus
//! expressions and booked at their resources in order of modeled arrival
//! (docs/time-model.md, "The way to strict arrival order").
//!
//! A calendar ([`crate::Resource`]) books an operation when code asks, so an operation
//! that arrives early but is booked late can wait behind one that arrived later. The
//! FTL's decisions do not depend on modeled time (the audit in docs/time-model.md), only
//! its timing does, and that timing is a max-plus expression: a stage starts at
//! `max(arrival, resource free)`, and its arrival is a `max` of earlier stages' ends
//! plus fixed latencies. So a command can run its logic at once and leave its timing
//! as a graph here; the core then books every stage of every command in flight in order
//! of arrival at each resource, and completions come out of it.
//!
//! Choices:
//! * **Instants carry their dependency.** A [`SimTime`] is final or names a node of the
//!   [`Graph`]: an offset of another node, a join (`max`) of two instants, or the start
//!   or end of a stage (read from the stage itself: a stage makes no node). Inferring
//!   the graph from bare instants was rejected: parallel pages of one command end at
//!   equal instants, and an arrival `end + latency` names no booking.
//!   An instant also carries a *provisional* value, a lower bound of its final value (a
//!   stage starts no earlier than it arrives), for code that must look at an instant
//!   before the core has fixed it.
//! * **Recording is per thread** ([`Recording`]): while it is on, [`SimTime::after`],
//!   [`SimTime::max`] and [`Resource::reserve`] on a resource that has an id extend the
//!   graph of this thread instead of computing at once, so device code is the same in
//!   both modes. Outside a recording no instant names a node and nothing changes.
//! * **Ready stages in a heap keyed by (arrival, order, stage).** A stage becomes ready
//!   when its arrival can be evaluated (every stage it depends on is booked); the core
//!   pops the earliest arrival and books it at its resource. A stage's arrival is never
//!   earlier than the start of any stage it depends on, so popped arrivals never go
//!   backwards: each resource sees its operations first-come first-served. `order` (the
//!   caller's tie-break, e.g. the NVMe arbitration's order among commands submitted at
//!   one instant) and then the stage's index keep runs bit-for-bit reproducible.
//! * **Bookings go through [`Resources`].** The core does not own the resources (dies,
//!   buses and links stay with the code that reports on them); it asks the owner to
//!   reserve. A stage created with an arrival earlier than an arrival already popped (a
//!   caller that ran the core ahead, then submitted in the past) is still booked
//!   correctly by the calendar's gap-filling, and counted in [`Graph::late_arrivals`].
//! * **A stage waits on one blocker at a time** (an intrusive list per stage), and node
//!   values are cached once known, so each expression is evaluated once.
//!
//! Memory: the graph keeps every node until [`Graph::clear`] (when nothing is in
//! flight). Freeing resolved prefixes while instants that name them are still held
//! elsewhere needs the owners of those instants to resolve them first; that belongs to
//! the integration with the device, not to this core.

use crate::resource::{Resource, ResourceClass};
use crate::time::SimTime;
use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::marker::PhantomData;
use std::thread::LocalKey;

/// Nodes (a stage counts four, as when its start and end were two nodes of their own:
/// budgets keep their meaning) a graph holds before [`Graph::compact_due`] says so: at
/// most about 1 MB, so the graph stays in cache and a run does not fault in fresh memory
/// (at 2^20, a third of `csd io`'s time on the core went to the kernel zeroing pages on
/// this virtual machine, and peak RSS was 166 MB instead of 54 MB).
pub const DEFAULT_COMPACT_NODES: usize = 1 << 16;

/// The end of a waiting list.
const NONE: u32 = u32::MAX;
/// A cached node value that is not known yet.
const UNKNOWN: u64 = u64::MAX;
/// Node values at or above this are not known yet; below [`UNKNOWN`] they also name
/// the stage that blocked the node's last evaluation (a hint: while that stage is not
/// booked, the node is not either, and needs no walk to find out).
const HINT: u64 = 1 << 63;

/// Whether a node value is final.
#[inline]
fn fixed(v: u64) -> bool {
    v < HINT
}
/// A member index that names a whole pool.
const POOL: u32 = 0x00FF_FFFF;
/// Member indexes with this bit name a pool lent to the graph ([`Graph::lend`]): the
/// core books it itself, not through [`Resources`].
const LENT: u32 = 0x0080_0000;

/// How a run's commands are placed in modeled time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeModel {
    /// Each resource's calendar books an operation when code asks for it (an early
    /// arrival booked late takes the earliest gap that holds it).
    Calendar,
    /// Commands record their stages and the event core books every stage in order of
    /// modeled arrival at its resource (first-come first-served everywhere). The
    /// default (docs/time-model.md, "The default").
    #[default]
    Events,
}

impl TimeModel {
    /// Parse `calendar` or `events`.
    pub fn parse(s: &str) -> Option<TimeModel> {
        match s {
            "calendar" => Some(TimeModel::Calendar),
            "events" => Some(TimeModel::Events),
            _ => None,
        }
    }

    /// The name [`TimeModel::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            TimeModel::Calendar => "calendar",
            TimeModel::Events => "events",
        }
    }
}

/// Which resource (or pool of equal resources) a stage books: its class and its index
/// among the resources of that class, as their owner numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId(u32);

impl ResourceId {
    /// Member `index` of `class` (below 2^23).
    pub const fn new(class: ResourceClass, index: u32) -> ResourceId {
        debug_assert!(index < LENT);
        ResourceId(((class as u32 + 1) << 24) | (index & POOL))
    }

    /// Every member of `class` as one pool: the stage takes the member that can start it
    /// first when the core books it.
    pub const fn pool(class: ResourceClass) -> ResourceId {
        ResourceId(((class as u32 + 1) << 24) | POOL)
    }

    /// The class.
    #[inline]
    pub fn class(self) -> ResourceClass {
        // A match, not an index into `ResourceClass::ALL`: no bounds check on every
        // booking's dispatch (ids are made only by `new`, `pool` and `lent`).
        debug_assert!(
            (1..=ResourceClass::ALL.len() as u32).contains(&(self.0 >> 24)),
            "a resource id of no class: {:#x}",
            self.0
        );
        match self.0 >> 24 {
            1 => ResourceClass::Die,
            2 => ResourceClass::Channel,
            3 => ResourceClass::Dram,
            4 => ResourceClass::HostLink,
            5 => ResourceClass::EmbeddedCpu,
            _ => ResourceClass::HostCpu,
        }
    }

    /// The member's index, `None` for a pool (an owner's or one lent to the graph).
    pub fn index(self) -> Option<u32> {
        let i = self.0 & POOL;
        (i & LENT == 0).then_some(i)
    }

    /// Pool `slot` lent to the graph ([`Graph::lend`]).
    const fn lent(class: ResourceClass, slot: u32) -> ResourceId {
        ResourceId(((class as u32 + 1) << 24) | LENT | slot)
    }

    /// The slot of a pool lent to the graph, `None` for a resource of an owner.
    fn lent_slot(self) -> Option<usize> {
        let i = self.0 & POOL;
        (i != POOL && i & LENT != 0).then_some((i & !LENT) as usize)
    }

    /// The id as a number (never 0).
    pub(crate) const fn raw(self) -> u32 {
        self.0
    }

    /// The id of a number [`ResourceId::raw`] gave.
    pub(crate) fn from_raw(raw: u32) -> ResourceId {
        debug_assert!(raw != 0);
        ResourceId(raw)
    }
}

/// One stage of the graph (an operation at one resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StageId(u32);

impl StageId {
    /// The stage's index in creation order.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Bits of a node's name that hold its index in the graph; the bits above hold the
/// graph's epoch, so an instant that outlived a compaction ([`Graph::compact`]) is
/// recognized instead of naming another node. Half of the indexes name nodes (up to
/// 2^24, as before stages stopped being nodes), half the endpoints of up to 2^23 stages;
/// seven bits are left for the epoch.
const INDEX_BITS: u32 = 25;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
/// Indexes with this bit name an endpoint of a stage, not a node: `(stage << 1) | end`
/// (1: the stage's end, its start plus its duration once booked, zero once cancelled;
/// 0: its start). A stage's start and end are read from the stage itself, so recording
/// a stage makes no node (they were eight of the nine nodes of a 4 KiB read's graph, and
/// walking and compacting them about a fifth of the core's instructions per read).
const ENDPOINT: u32 = 1 << (INDEX_BITS - 1);
/// Stages a graph holds at most between compactions (their endpoints' names must fit).
const MAX_STAGES: usize = 1 << (INDEX_BITS - 2);

/// A ready stage's place in the core's heap: its arrival, then the caller's order, then
/// its index, packed in one integer so that the heap compares and moves 16 bytes, not
/// 24 (the ready heap's pops were the core's largest cost in a 4 KiB random-read run).
/// Orders (command counters) are kept below 2^41; larger ones compare as 2^41 - 1,
/// their stages then by creation (no caller comes near: 2.2 * 10^12 commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ReadyKey(u128);

/// Bits of a [`ReadyKey`] below the order: the stage index ([`MAX_STAGES`]).
const STAGE_BITS: u32 = INDEX_BITS - 2;
const MAX_ORDER: u64 = (1 << (64 - STAGE_BITS)) - 1;

impl ReadyKey {
    #[inline]
    fn new(at: u64, order: u64, stage: u32) -> ReadyKey {
        debug_assert!((stage as usize) < MAX_STAGES);
        let tie = (order.min(MAX_ORDER) << STAGE_BITS) | u64::from(stage);
        ReadyKey((u128::from(at) << 64) | u128::from(tie))
    }

    #[inline]
    fn at(self) -> u64 {
        (self.0 >> 64) as u64
    }

    #[inline]
    fn stage(self) -> u32 {
        (self.0 as u64 & ((1 << STAGE_BITS) - 1)) as u32
    }

    /// The same key for the stage's new index after a compaction (which keeps the
    /// stages' order).
    #[inline]
    fn renumbered(self, stage: u32) -> ReadyKey {
        ReadyKey((self.0 & !u128::from((1u64 << STAGE_BITS) - 1)) | u128::from(stage))
    }
}

/// The index naming the start (`end == false`) or end of stage `stage`.
#[inline]
fn endpoint_ref(stage: u32, end: bool) -> u32 {
    ENDPOINT | (stage << 1) | u32::from(end)
}

/// The stage and which endpoint an index names, if it names one.
#[inline]
fn endpoint(r: u32) -> Option<(u32, bool)> {
    (r & ENDPOINT != 0).then_some(((r & !ENDPOINT) >> 1, r & 1 == 1))
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `base + add`.
    Offset { base: u32, add: u64 },
    /// `max(a, b, floor)` (index 0 is the constant zero).
    Join { a: u32, b: u32, floor: u64 },
}

#[derive(Debug, Clone, Copy)]
struct Node {
    kind: Kind,
    /// The final value once known, else [`UNKNOWN`].
    value: u64,
}

#[derive(Debug, Clone, Copy)]
struct Stage {
    resource: ResourceId,
    dur_ns: u64,
    /// Index of the arrival's node (0: known, `arrival_ns`).
    arrival: u32,
    arrival_ns: u64,
    order: u64,
    cancelled: bool,
    /// Whether a completion in a [`Watch`] waits for this stage (only its booking needs
    /// the watch's waiting completions looked at).
    watched: bool,
    /// The final start once booked, else [`UNKNOWN`].
    start: u64,
    /// The first stage waiting on this one, and the next stage waiting on the same
    /// blocker as this one ([`NONE`] ends a list).
    first_waiter: u32,
    next_waiter: u32,
}

/// Who owns the resources the stages book: the core asks it to reserve, in arrival order.
pub trait Resources {
    /// Book resource (or pool) `id` for `dur_ns` from no earlier than `arrival` (a final
    /// instant), now; the start.
    fn reserve(&mut self, id: ResourceId, arrival: SimTime, dur_ns: u64) -> SimTime;
}

/// Resources numbered by their place in a slice, whatever their class (tests, models).
impl Resources for [Resource] {
    fn reserve(&mut self, id: ResourceId, arrival: SimTime, dur_ns: u64) -> SimTime {
        let i = id.index().unwrap_or(0) as usize;
        self[i].reserve_now(arrival, dur_ns).0
    }
}

impl Resources for Vec<Resource> {
    fn reserve(&mut self, id: ResourceId, arrival: SimTime, dur_ns: u64) -> SimTime {
        self.as_mut_slice().reserve(id, arrival, dur_ns)
    }
}

/// One booking the core made, for traces and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Booking {
    /// The stage booked.
    pub stage: StageId,
    /// Where.
    pub resource: ResourceId,
    /// When it arrived there.
    pub arrival: SimTime,
    /// Start of service.
    pub start: SimTime,
    /// End of service.
    pub end: SimTime,
}

/// What the core did in a recording, for reports ([`Graph::counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Stages booked in arrival order (cancelled ones included).
    pub booked: u64,
    /// Stages recorded with an arrival before one already booked ([`Graph::late_arrivals`]).
    pub late_arrivals: u64,
    /// Bookings made outside the core ([`Graph::unrecorded`]).
    pub unrecorded: u64,
    /// Instants that outlived a compaction unrenamed ([`Graph::stale`]).
    pub stale: u64,
    /// Comparisons of instants the core had not fixed ([`Graph::unfixed_comparisons`]).
    pub unfixed_comparisons: u64,
    /// Booked stages forgotten by compactions ([`Graph::forgotten`]).
    pub forgotten: u64,
}

impl Counters {
    /// Add `other`'s counts (several recordings of one run).
    pub fn add(&mut self, other: &Counters) {
        self.booked += other.booked;
        self.late_arrivals += other.late_arrivals;
        self.unrecorded += other.unrecorded;
        self.stale += other.stale;
        self.unfixed_comparisons += other.unfixed_comparisons;
        self.forgotten += other.forgotten;
    }

    /// The counts that say the core's order was not kept: late arrivals, bookings
    /// outside the core, stale instants, decisions on unfixed instants (all 0 in a
    /// faithful run).
    pub fn anomalies(&self) -> [u64; 4] {
        [
            self.late_arrivals,
            self.unrecorded,
            self.stale,
            self.unfixed_comparisons,
        ]
    }

    /// The counts in words, for reports.
    pub fn sentence(&self) -> String {
        format!(
            "{} stages booked, {} late arrivals, {} bookings outside the core, {} stale \
             instants, {} decisions on unfixed instants",
            self.booked, self.late_arrivals, self.unrecorded, self.stale, self.unfixed_comparisons
        )
    }
}

/// The graph of recorded stages and the core that books them in arrival order.
#[derive(Debug)]
pub struct Graph {
    /// Node 0 is the constant zero (always fixed).
    nodes: Vec<Node>,
    /// Names this graph and its numbering of nodes and stages: unique in the process,
    /// renewed by every compaction ([`Graph::generation`]).
    generation: u64,
    stages: Vec<Stage>,
    ready: BinaryHeap<Reverse<ReadyKey>>,
    /// The top of `ready` is the stage [`Graph::book_next`] is booking: the first stage
    /// its booking makes ready takes its place (one sift-down instead of a pop and a
    /// push), or it is popped at the end.
    top_booked: bool,
    /// Tags the names of this graph's nodes (1..=127; see [`INDEX_BITS`]).
    epoch: u32,
    /// The arrival of the last stage booked.
    now: u64,
    /// Stages booked (or cancelled) so far, over every compaction; `stages` holds the
    /// ones not booked at the last compaction and every one recorded since.
    booked: u64,
    /// Stages forgotten by compactions (all booked).
    forgotten: u64,
    late: u64,
    unrecorded: u64,
    stale: u64,
    unfixed: u64,
    /// Size past which host code compacts ([`Graph::compact_due`]).
    compact_nodes: usize,
    /// Size the last compaction left (nodes plus four times the stages it kept).
    kept_size: usize,
    trace: Option<Vec<Booking>>,
    /// Pools lent by host actors ([`Graph::lend`]); `None` once taken back.
    lent: Vec<Option<Vec<Resource>>>,
    /// Scratch of [`Graph::evaluate`] and [`Graph::earliest`].
    stack: Vec<u32>,
    scratch: Watch,
    /// The compaction's scratch (the vectors a compaction hands to its [`Remap`] come
    /// back through [`RemapSpare`]).
    keep: Vec<bool>,
}

/// Completions a host actor waits for (e.g. the commands a closed loop keeps in flight),
/// kept across calls of [`Graph::next_done`]: each is evaluated when added and then only
/// when the stage it waits for is booked, not on every call (re-evaluating every one per
/// completion was a fifth of `csd io`'s time on the core). Its unfixed completions name
/// nodes of the graph: pass them to [`Graph::compact`] ([`Watch::unfixed`]) and the
/// renaming back ([`Watch::remap`]).
#[derive(Debug, Default, Clone)]
pub struct Watch {
    /// The graph's epoch when the blockers below were found (0: never).
    epoch: u32,
    /// Fixed completions: (final value, key).
    fixed: BinaryHeap<Reverse<(u64, u64)>>,
    /// Unfixed completions, each in the list of the stage its last evaluation waited for
    /// (`heads`), so that a booking looks only at the completions it can fix (a scan
    /// over all of them per booking was most of the core's time in a TPC-H scan with
    /// hundreds of pages in flight). Free slots have `stage == NONE`.
    slots: Vec<Slot>,
    /// Free slots of `slots`.
    free: Vec<u32>,
    /// Blocking stage -> its first waiting slot ([`NONE`]: no list), indexed by the
    /// stage (a graph's stages are dense and bounded by its compactions; a hash map here
    /// cost about 200 instructions of a 4 KiB read on the core, measured).
    heads: Vec<u32>,
    /// The stages whose list was started since they were last pruned (a superset of
    /// the stages with a list: a taken list leaves its stage here until the next prune),
    /// for [`Graph::sync`].
    listed: Vec<u32>,
    /// Unfixed completions held.
    blocked: usize,
    /// The graph's count of booked stages when the blockers were last in step: a stage
    /// booked outside [`Graph::next_done`] (e.g. by [`Graph::at_or_before`] between two
    /// calls) has its waiting completions looked at again at the next use.
    booked: u64,
    /// Scratch of the re-evaluations: (key, instant) taken off a list.
    taken: Vec<(u64, SimTime)>,
}

/// An unfixed completion of a [`Watch`].
#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u64,
    t: SimTime,
    /// The stage it waits for ([`NONE`]: a free slot).
    stage: u32,
    /// Forgotten ([`Watch::retain`]) while in its stage's list.
    dead: bool,
    /// The next slot waiting for the same stage ([`NONE`] ends the list).
    next: u32,
}

impl Watch {
    /// Nothing to wait for.
    pub fn new() -> Watch {
        Watch::default()
    }

    /// Completions held (fixed or not).
    pub fn len(&self) -> usize {
        self.fixed.len() + self.blocked
    }

    /// Whether it holds no completion.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget every completion.
    pub fn clear(&mut self) {
        self.fixed.clear();
        self.slots.clear();
        self.free.clear();
        // Only the stages in `listed` can have a list (it holds every one that has), so
        // only their heads are reset and `heads` keeps its length. Emptying it made the
        // next push resize it from zero, setting the head of every stage up to the one
        // waited for: a memset over the graph's whole stage range per
        // [`Graph::earliest`] (3.5% of `csd serve`'s thread under fio randwrite).
        for &stage in &self.listed {
            if let Some(head) = self.heads.get_mut(stage as usize) {
                *head = NONE;
            }
        }
        self.listed.clear();
        self.blocked = 0;
    }

    /// Forget the completions whose key `keep` refuses.
    pub fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        self.fixed.retain(|Reverse((_, key))| keep(*key));
        // An unfixed one is marked dead in its list, and its slot freed when the list is
        // next taken.
        for s in &mut self.slots {
            if s.stage != NONE && !s.dead && !keep(s.key) {
                s.dead = true;
                self.blocked -= 1;
            }
        }
    }

    /// The keys of the completions held (fixed or not), in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        let fixed = self.fixed.iter().map(|Reverse((_, key))| *key);
        let blocked = self.slots.iter().filter(|s| s.stage != NONE && !s.dead);
        fixed.chain(blocked.map(|s| s.key))
    }

    /// The completions not fixed yet: roots of a compaction ([`Graph::compact`]).
    pub fn unfixed(&self) -> impl Iterator<Item = SimTime> + '_ {
        self.slots
            .iter()
            .filter(|s| s.stage != NONE && !s.dead)
            .map(|s| s.t)
    }

    /// Rename the unfixed completions after a compaction; what each waits for is found
    /// again at the next use.
    pub fn remap(&mut self, remap: &Remap) {
        for s in self.slots.iter_mut().filter(|s| s.stage != NONE && !s.dead) {
            s.t = remap.apply(s.t);
        }
        self.epoch = 0;
    }

    /// Hold unfixed completion `t` under `key`, waiting for `stage`.
    fn push_blocked(&mut self, key: u64, t: SimTime, stage: u32) {
        let st = stage as usize;
        if st >= self.heads.len() {
            self.heads.resize(st + 1, NONE);
        }
        let head = self.heads[st];
        if head == NONE {
            if self.listed.len() >= 64 && self.listed.len() >= 2 * self.blocked {
                // Most entries name taken lists (amortized over their pushes).
                self.prune_listed();
            }
            self.listed.push(stage);
        }
        let slot = Slot {
            key,
            t,
            stage,
            dead: false,
            next: head,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.heads[st] = i;
        self.blocked += 1;
    }

    /// The stages that have a list of waiting completions (a stage whose list was taken
    /// and started again would appear twice; taking a list twice takes nothing the second
    /// time).
    fn stages_waited_for(&mut self) -> impl Iterator<Item = u32> + '_ {
        self.prune_listed();
        self.listed.iter().copied()
    }

    /// Forget the stages of `listed` whose list was taken.
    fn prune_listed(&mut self) {
        let heads = &self.heads;
        self.listed.retain(|&s| heads[s as usize] != NONE);
    }

    /// Move the completions waiting for `stage` into `out` (appended), freeing their slots.
    fn take(&mut self, stage: u32, out: &mut Vec<(u64, SimTime)>) {
        let mut i = match self.heads.get_mut(stage as usize) {
            Some(head) => std::mem::replace(head, NONE),
            None => NONE,
        };
        while i != NONE {
            let s = &mut self.slots[i as usize];
            if !s.dead {
                out.push((s.key, s.t));
                self.blocked -= 1;
            }
            s.stage = NONE;
            self.free.push(i);
            i = s.next;
        }
    }
}

impl Default for Graph {
    fn default() -> Graph {
        Graph::new()
    }
}

/// The vectors a dropped [`Graph`] leaves for the next one on its thread.
#[derive(Default)]
struct Spare {
    nodes: Vec<Node>,
    stages: Vec<Stage>,
    ready: Vec<Reverse<ReadyKey>>,
}

thread_local! {
    static SPARE: Cell<Option<Spare>> = const { Cell::new(None) };
}

/// Vectors of `nodes` node capacity are kept for reuse on their thread ([`keep_spare`]):
/// those of a graph that grew far past its compaction size (a caller that never
/// compacts) give their memory back instead.
fn worth_keeping(nodes: usize) -> bool {
    nodes <= 16 * DEFAULT_COMPACT_NODES
}

/// Leaves `spare` in this thread's `slot` for the next [`take_spare`].
fn keep_spare<T: 'static>(slot: &'static LocalKey<Cell<Option<T>>>, spare: T) {
    // At thread exit the slot may be gone already: then the memory is just freed.
    let _ = slot.try_with(|s| s.set(Some(spare)));
}

/// What [`keep_spare`] left in this thread's `slot` (not cleared), else fresh vectors.
fn take_spare<T: Default + 'static>(slot: &'static LocalKey<Cell<Option<T>>>) -> T {
    slot.try_with(|s| s.take())
        .ok()
        .flatten()
        .unwrap_or_default()
}

impl Drop for Graph {
    fn drop(&mut self) {
        if !worth_keeping(self.nodes.capacity()) {
            return;
        }
        let spare = Spare {
            nodes: std::mem::take(&mut self.nodes),
            stages: std::mem::take(&mut self.stages),
            ready: std::mem::take(&mut self.ready).into_vec(),
        };
        keep_spare(&SPARE, spare);
    }
}

/// What [`Graph::compact`] did to the names of nodes: apply it to every instant held
/// outside the graph that may name one.
///
/// It holds the old graph's node and stage vectors themselves (their values and bookings
/// are what an instant of the old graph resolves to), not a summary built for it: a
/// compaction walks the stages once instead of three times. Dropped, it gives its vectors
/// back to the next compaction on its thread ([`RemapSpare`]), so a graph that grows to
/// its compaction size again does not fault in fresh memory each time (a third of the
/// core's time when it did, measured).
#[derive(Debug)]
pub struct Remap {
    old_epoch: u32,
    new_epoch: u32,
    /// Old node index -> new index (0: the node's value was fixed, see `nodes`).
    index: Vec<u32>,
    /// The old graph's nodes, each with its final value where it could be fixed.
    nodes: Vec<Node>,
    /// The old graph's stages: a forgotten one's start and duration are final.
    stages: Vec<Stage>,
    /// Old stage -> its index in the compacted graph ([`NONE`]: booked and forgotten).
    stage_index: Vec<u32>,
}

/// The vectors of a dropped [`Remap`], for the next compaction on this thread.
#[derive(Default)]
struct RemapSpare {
    index: Vec<u32>,
    nodes: Vec<Node>,
    stages: Vec<Stage>,
    stage_index: Vec<u32>,
}

thread_local! {
    static REMAP_SPARE: Cell<Option<RemapSpare>> = const { Cell::new(None) };
}

impl RemapSpare {
    /// This thread's spare vectors, cleared (fresh ones if there are none).
    fn take() -> RemapSpare {
        let mut spare = take_spare(&REMAP_SPARE);
        spare.index.clear();
        spare.nodes.clear();
        spare.stages.clear();
        spare.stage_index.clear();
        spare
    }
}

impl Drop for Remap {
    fn drop(&mut self) {
        if !worth_keeping(self.nodes.capacity()) {
            return;
        }
        let spare = RemapSpare {
            index: std::mem::take(&mut self.index),
            nodes: std::mem::take(&mut self.nodes),
            stages: std::mem::take(&mut self.stages),
            stage_index: std::mem::take(&mut self.stage_index),
        };
        keep_spare(&REMAP_SPARE, spare);
    }
}

impl Remap {
    /// `t` as the compacted graph names it: its final value, or its new node.
    pub fn apply(&self, t: SimTime) -> SimTime {
        if t.node() == 0 {
            return t;
        }
        if t.node() >> INDEX_BITS != self.old_epoch {
            debug_assert!(false, "an instant from an older graph: {t:?}");
            return SimTime::from_ns(t.ns());
        }
        let r = t.node() & INDEX_MASK;
        let n = match endpoint(r) {
            None => match self.index[r as usize] {
                0 => return SimTime::from_ns(self.nodes[r as usize].value),
                n => n,
            },
            Some((stage, end)) => match self.stage_index[stage as usize] {
                NONE => {
                    let st = &self.stages[stage as usize];
                    let v = if end {
                        st.start.saturating_add(st.dur_ns)
                    } else {
                        st.start
                    };
                    return SimTime::from_ns(v);
                }
                new => endpoint_ref(new, end),
            },
        };
        SimTime::of_node(t.ns(), (self.new_epoch << INDEX_BITS) | n)
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        // The vectors of a graph dropped on this thread, with their capacity: a scan
        // records into a fresh graph, and growing one from empty again each time copied
        // about 100 MB over TPC-H's 22 queries at SF 0.1 (and faulted in fresh memory).
        let mut spare = take_spare(&SPARE);
        spare.nodes.clear();
        spare.stages.clear();
        spare.ready.clear();
        spare.nodes.push(Node {
            kind: Kind::Offset { base: 0, add: 0 },
            value: 0,
        });
        Graph {
            nodes: spare.nodes,
            generation: next_generation(),
            stages: spare.stages,
            ready: BinaryHeap::from(spare.ready),
            top_booked: false,
            epoch: 1,
            now: 0,
            booked: 0,
            forgotten: 0,
            late: 0,
            unrecorded: 0,
            stale: 0,
            unfixed: 0,
            compact_nodes: DEFAULT_COMPACT_NODES,
            kept_size: 0,
            trace: None,
            lent: Vec::new(),
            stack: Vec::new(),
            scratch: Watch::default(),
            keep: Vec::new(),
        }
    }

    /// This graph's generation: unique in the process, and renewed by each compaction.
    /// Host code that keeps a [`Watch`] between uses of a graph it does not own (and so
    /// does not see compacted or replaced) starts it again when this changed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Keep a trace of every booking from now on ([`Graph::trace`]).
    pub fn record_trace(&mut self) {
        self.trace.get_or_insert_with(Vec::new);
    }

    /// The bookings made since [`Graph::record_trace`], in the order the core made them.
    pub fn trace(&self) -> &[Booking] {
        self.trace.as_deref().unwrap_or(&[])
    }

    /// Stages booked so far (cancelled ones included).
    pub fn booked(&self) -> u64 {
        self.booked
    }

    /// Its counters, for a report.
    pub fn counters(&self) -> Counters {
        Counters {
            booked: self.booked,
            late_arrivals: self.late,
            unrecorded: self.unrecorded,
            stale: self.stale,
            unfixed_comparisons: self.unfixed,
            forgotten: self.forgotten,
        }
    }

    /// Booked stages forgotten by compactions ([`Graph::compact`]), over the whole run.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    /// Stages that were created with an arrival earlier than one the core had already
    /// booked (their caller ran the core ahead of them); the resource's calendar placed
    /// them, but first-come first-served is not guaranteed for them.
    pub fn late_arrivals(&self) -> u64 {
        self.late
    }

    /// Bookings made at once during a recording because their resource has no id (its
    /// owner did not number it): booked at their provisional arrival, outside the core.
    pub fn unrecorded(&self) -> u64 {
        self.unrecorded
    }

    /// Instants met that named a node of a graph before a compaction (their holder was
    /// not remapped): taken at their provisional value.
    pub fn stale(&self) -> u64 {
        self.stale
    }

    /// Comparisons of instants (`==`, `<`, `cmp`, ...) made while the event core recorded
    /// with an instant it had not fixed: a decision on a provisional value, which may
    /// differ from the one the final value gives. Host code decides on instants through
    /// [`Graph::at_or_before`], [`Graph::earliest`] and [`Graph::resolve`] instead.
    pub fn unfixed_comparisons(&self) -> u64 {
        self.unfixed
    }

    /// Whether the graph has grown past the size at which its host code should compact it
    /// ([`Graph::compact`]): nodes plus four times the stages over [`DEFAULT_COMPACT_NODES`]
    /// or the size set by [`Graph::set_compact_nodes`].
    /// A compaction is due only once the graph has also doubled since the last one left
    /// it, so that a run holding much unbooked work (a scan's look-ahead) does not
    /// compact on every command: each compaction then forgets at least half of what it
    /// walks (without this, a one-shot `csd query q6` on the core spent 68% of its time
    /// compacting).
    pub fn compact_due(&self) -> bool {
        self.nodes.len() + 4 * self.stages.len() > self.compact_nodes.max(2 * self.kept_size)
    }

    /// Compact past `nodes` (nodes plus four times the stages) instead: tests make it small so
    /// that every holder's renaming is exercised.
    pub fn set_compact_nodes(&mut self, nodes: usize) {
        self.compact_nodes = nodes.max(1);
    }

    /// Nodes and stages held now (memory: about 32 and 64 bytes each).
    pub fn size(&self) -> (usize, usize) {
        (self.nodes.len(), self.stages.len())
    }

    /// The arrival of the last stage booked: everything that arrives before it has been
    /// booked.
    pub fn now(&self) -> SimTime {
        SimTime::from_ns(self.now)
    }

    /// Stages recorded and not booked yet.
    pub fn pending(&self) -> usize {
        (self.forgotten + self.stages.len() as u64 - self.booked) as usize
    }

    /// The name an instant carries for node `index`.
    fn name(&self, index: u32) -> u32 {
        (self.epoch << INDEX_BITS) | index
    }

    /// The index of the node `t` names: 0 for a final instant, and for an instant of an
    /// older graph (counted in [`Graph::stale`]; its provisional value is used).
    fn index(&mut self, t: SimTime) -> u32 {
        let n = t.node();
        if n == 0 {
            return 0;
        }
        if n >> INDEX_BITS != self.epoch {
            debug_assert!(false, "an instant that outlived a compaction: {t:?}");
            self.stale += 1;
            return 0;
        }
        n & INDEX_MASK
    }

    /// Add a node whose value is not known yet; `hint` is an operand's unfixed value (a
    /// hint naming the stage that blocks that operand blocks the node too, so the node's
    /// first evaluation, when its stage is scheduled or its completion watched, stops at
    /// that stage without a walk; a stale hint is checked and ignored as always).
    #[inline]
    fn push_node(&mut self, kind: Kind, hint: u64) -> u32 {
        debug_assert!(!fixed(hint), "a node pushed with a final value");
        let i = u32::try_from(self.nodes.len())
            .ok()
            .filter(|&i| i < ENDPOINT)
            .expect("event graph over 2^24 nodes: compact it (Graph::compact)");
        self.nodes.push(Node { kind, value: hint });
        i
    }

    /// `t`'s index and, if already fixed, its value.
    fn lookup(&mut self, t: SimTime) -> (u32, Option<u64>) {
        let (i, v) = self.lookup_raw(t);
        (i, fixed(v).then_some(v))
    }

    /// `t`'s index and the value it holds now ([`Graph::ref_value`]; final for index 0).
    #[inline]
    fn lookup_raw(&mut self, t: SimTime) -> (u32, u64) {
        match self.index(t) {
            0 => (0, t.ns()),
            i => (i, self.ref_value(i)),
        }
    }

    /// The final value of index `r`, or [`UNKNOWN`] (compaction's view of a value).
    #[inline]
    fn final_value(&self, r: u32) -> u64 {
        match self.ref_value(r) {
            v if fixed(v) => v,
            _ => UNKNOWN,
        }
    }

    /// The value index `r` holds now, as a node caches it: final, or not known yet
    /// ([`UNKNOWN`], or a hint naming the stage that blocked it). A stage's endpoint is
    /// final once the stage is booked, and until then names the stage as its blocker.
    #[inline(always)]
    fn ref_value(&self, r: u32) -> u64 {
        match endpoint(r) {
            None => self.nodes[r as usize].value,
            Some((stage, end)) => {
                let st = &self.stages[stage as usize];
                match st.start {
                    UNKNOWN => HINT | u64::from(stage),
                    start if end => start.saturating_add(st.dur_ns),
                    start => start,
                }
            }
        }
    }

    /// `t + ns`.
    pub fn offset(&mut self, t: SimTime, ns: u64) -> SimTime {
        match self.lookup_raw(t) {
            (_, v) if fixed(v) => SimTime::from_ns(v.saturating_add(ns)),
            _ if ns == 0 => t,
            (i, v) => {
                let n = self.push_node(Kind::Offset { base: i, add: ns }, v);
                SimTime::of_node(t.ns().saturating_add(ns), self.name(n))
            }
        }
    }

    /// `max(a, b)`.
    pub fn join(&mut self, a: SimTime, b: SimTime) -> SimTime {
        let provisional = a.ns().max(b.ns());
        let ((ia, va), (ib, vb)) = (self.lookup_raw(a), self.lookup_raw(b));
        match (fixed(va), fixed(vb)) {
            (true, true) => SimTime::from_ns(va.max(vb)),
            (false, false) if ia == ib => a,
            (false, false) => {
                let hint = if va != UNKNOWN { va } else { vb };
                let n = self.push_node(
                    Kind::Join {
                        a: ia,
                        b: ib,
                        floor: 0,
                    },
                    hint,
                );
                SimTime::of_node(provisional, self.name(n))
            }
            (false, true) | (true, false) => {
                let (i, hint, x) = if fixed(vb) {
                    (ia, va, vb)
                } else {
                    (ib, vb, va)
                };
                let n = self.push_node(
                    Kind::Join {
                        a: i,
                        b: 0,
                        floor: x,
                    },
                    hint,
                );
                SimTime::of_node(provisional, self.name(n))
            }
        }
    }

    /// Record an operation of `dur_ns` at `resource` that arrives at `arrival`; `order`
    /// breaks ties between equal arrivals (lower first; then creation order). Returns
    /// the stage and its start and end, fixed when the core books it.
    #[inline]
    pub fn stage(
        &mut self,
        resource: ResourceId,
        arrival: SimTime,
        dur_ns: u64,
        order: u64,
    ) -> (StageId, SimTime, SimTime) {
        assert!(
            self.stages.len() < MAX_STAGES,
            "event graph over 2^23 stages: compact it (Graph::compact)"
        );
        let id = self.stages.len() as u32;
        let (arrival_index, _) = self.lookup(arrival);
        self.stages.push(Stage {
            resource,
            dur_ns,
            arrival: arrival_index,
            arrival_ns: arrival.ns(),
            order,
            cancelled: false,
            watched: false,
            start: UNKNOWN,
            first_waiter: NONE,
            next_waiter: NONE,
        });
        let start = SimTime::of_node(arrival.ns(), self.name(endpoint_ref(id, false)));
        let end = if dur_ns == 0 {
            start
        } else {
            SimTime::of_node(
                arrival.ns().saturating_add(dur_ns),
                self.name(endpoint_ref(id, true)),
            )
        };
        self.schedule(id);
        (StageId(id), start, end)
    }

    /// Cancel the stage whose start `start` names (a refused command costs nothing): it
    /// books nothing, and what waits for it sees it take no time at its arrival. `false`
    /// if `start` names no stage not yet booked.
    pub fn cancel(&mut self, start: SimTime) -> bool {
        let Some((stage, false)) = endpoint(self.index(start)) else {
            return false;
        };
        let Some(s) = self.stages.get_mut(stage as usize) else {
            return false;
        };
        if s.start != UNKNOWN {
            return false;
        }
        s.cancelled = true;
        s.dur_ns = 0;
        true
    }

    /// Put stage `s` in the ready heap if its arrival can be evaluated, else on the
    /// waiting list of the stage that blocks it.
    #[inline]
    fn schedule(&mut self, s: u32) {
        let st = &self.stages[s as usize];
        let (arrival, arrival_ns, order) = (st.arrival, st.arrival_ns, st.order);
        let arrival = if arrival == 0 {
            Ok(arrival_ns)
        } else {
            self.evaluate_index(arrival)
        };
        match arrival {
            Ok(at) => {
                if at < self.now {
                    self.late += 1;
                }
                let key = Reverse(ReadyKey::new(at, order, s));
                if std::mem::take(&mut self.top_booked)
                    && let Some(mut top) = self.ready.peek_mut()
                {
                    // Replaces the stage being booked; sifted down when `top` drops.
                    *top = key;
                } else {
                    self.ready.push(key);
                }
            }
            Err(blocker) => {
                let b = blocker as usize;
                self.stages[s as usize].next_waiter = self.stages[b].first_waiter;
                self.stages[b].first_waiter = s;
            }
        }
    }

    /// The final value of `t`, or the first unbooked stage it depends on. Values found
    /// on the way are cached.
    fn evaluate(&mut self, t: SimTime) -> Result<u64, u32> {
        match self.lookup(t) {
            (_, Some(v)) => Ok(v),
            (i, None) => self.evaluate_index(i),
        }
    }

    /// [`Graph::evaluate`] of node `index`. Inlined: most calls find the value final or
    /// its hint still good; only the rest walk ([`Graph::walk`]).
    #[inline(always)]
    fn evaluate_index(&mut self, index: u32) -> Result<u64, u32> {
        let v = self.ref_value(index);
        if fixed(v) {
            return Ok(v);
        }
        if let Some(stage) = self.still_blocked(v) {
            return Err(stage);
        }
        self.walk(index)
    }

    /// [`Graph::evaluate_index`] of a node whose operands must be looked at.
    #[inline(never)]
    fn walk(&mut self, index: u32) -> Result<u64, u32> {
        // Only a node (not an endpoint) can need a walk.
        debug_assert!(endpoint(index).is_none());
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        stack.push(index);
        let found = self.evaluate_with(&mut stack);
        self.stack = stack;
        found.map(|()| self.nodes[index as usize].value)
    }

    /// The stage a not-yet-fixed value's hint names, if that stage is still not booked.
    #[inline(always)]
    fn still_blocked(&self, v: u64) -> Option<u32> {
        let stage = v as u32;
        (v != UNKNOWN && self.stages[stage as usize].start == UNKNOWN).then_some(stage)
    }

    /// The loop of [`Graph::evaluate`] over a stack holding the node to evaluate. On
    /// `Err(stage)` every node on the stack (each waits for that stage) keeps it as a
    /// hint.
    fn evaluate_with(&mut self, stack: &mut Vec<u32>) -> Result<(), u32> {
        let blocker = 'walk: {
            while let Some(&n) = stack.last() {
                let node = self.nodes[n as usize];
                if fixed(node.value) {
                    stack.pop();
                    continue;
                }
                if let Some(stage) = self.still_blocked(node.value) {
                    break 'walk stage;
                }
                // An operand not known yet: a stage's endpoint or a node whose hint is
                // still good stops the walk at its stage; another node is walked.
                macro_rules! operand {
                    ($r:expr) => {{
                        let r = $r;
                        let v = self.ref_value(r);
                        if !fixed(v) {
                            if let Some(stage) = self.still_blocked(v) {
                                break 'walk stage;
                            }
                            stack.push(r);
                            continue;
                        }
                        v
                    }};
                }
                let value = match node.kind {
                    Kind::Offset { base, add } => operand!(base).saturating_add(add),
                    Kind::Join { a, b, floor } => operand!(a).max(operand!(b)).max(floor),
                };
                self.nodes[n as usize].value = value;
                stack.pop();
            }
            return Ok(());
        };
        for &n in stack.iter() {
            self.nodes[n as usize].value = HINT | u64::from(blocker);
        }
        Err(blocker)
    }

    /// The final value of `t` if every stage it depends on is booked.
    pub fn value(&mut self, t: SimTime) -> Option<SimTime> {
        self.evaluate(t).ok().map(SimTime::from_ns)
    }

    /// Book the earliest ready stage; `None` when no stage is ready (then none is
    /// pending: every pending stage waits, through its blockers, on a ready one).
    pub fn step<R: Resources + ?Sized>(&mut self, resources: &mut R) -> Option<Booking> {
        let (s, at) = self.book_next(resources)?;
        Some(self.booking(s, at))
    }

    /// The booking of stage `s` (booked), which arrived at `at`.
    fn booking(&self, s: u32, at: u64) -> Booking {
        let stage = &self.stages[s as usize];
        Booking {
            stage: StageId(s),
            resource: stage.resource,
            arrival: SimTime::from_ns(at),
            start: SimTime::from_ns(stage.start),
            end: SimTime::from_ns(stage.start.saturating_add(stage.dur_ns)),
        }
    }

    /// [`Graph::step`]: the stage booked and its arrival (the core's own loops need no
    /// [`Booking`]).
    #[inline]
    fn book_next<R: Resources + ?Sized>(&mut self, resources: &mut R) -> Option<(u32, u64)> {
        // The stage stays at the top of the heap while it is booked (see `top_booked`).
        let &Reverse(key) = self.ready.peek()?;
        self.top_booked = true;
        let (at, s) = (key.at(), key.stage());
        let st = &self.stages[s as usize];
        let (resource, dur_ns, cancelled) = (st.resource, st.dur_ns, st.cancelled);
        let start = if cancelled {
            at
        } else if let Some(slot) = resource.lent_slot() {
            self.reserve_lent(slot, at, dur_ns)
        } else {
            resources
                .reserve(resource, SimTime::from_ns(at), dur_ns)
                .ns()
        };
        debug_assert!(start >= at, "a resource started a stage before it arrived");
        self.stages[s as usize].start = start;
        self.now = self.now.max(at);
        self.booked += 1;
        // Wake the stages that waited on this one; each either becomes ready or waits on
        // its next blocker.
        let mut w = std::mem::replace(&mut self.stages[s as usize].first_waiter, NONE);
        while w != NONE {
            let next = self.stages[w as usize].next_waiter;
            self.stages[w as usize].next_waiter = NONE;
            self.schedule(w);
            w = next;
        }
        if std::mem::take(&mut self.top_booked) {
            self.ready.pop();
        }
        if self.trace.is_some() && !cancelled {
            let booking = self.booking(s, at);
            if let Some(trace) = self.trace.as_mut() {
                trace.push(booking);
            }
        }
        Some((s, at))
    }

    /// The final value of `t`, booking stages in arrival order until it is fixed.
    pub fn resolve<R: Resources + ?Sized>(&mut self, t: SimTime, resources: &mut R) -> SimTime {
        loop {
            match self.evaluate(t) {
                Ok(v) => return SimTime::from_ns(v),
                Err(_) => {
                    if self.book_next(resources).is_none() {
                        debug_assert!(false, "a pending stage with nothing ready");
                        return SimTime::from_ns(t.ns());
                    }
                }
            }
        }
    }

    /// Whether `t`'s final value is at or before `bound` (a final instant), booking only
    /// stages that arrive at or before `bound`: a decision a host actor whose clock is at
    /// `bound` or later can take without running the core ahead of itself. An instant still
    /// unfixed when every stage arriving by `bound` is booked waits on a stage that
    /// arrives later, so it ends later.
    pub fn at_or_before<R: Resources + ?Sized>(
        &mut self,
        t: SimTime,
        bound: SimTime,
        resources: &mut R,
    ) -> bool {
        debug_assert!(
            bound.is_final(),
            "a bound the core has not fixed: {bound:?}"
        );
        let bound = bound.ns();
        loop {
            if t.ns() > bound {
                // The provisional value is a lower bound.
                return false;
            }
            match self.evaluate(t) {
                Ok(v) => return v <= bound,
                Err(_) => match self.ready.peek() {
                    Some(Reverse(key)) if key.at() <= bound => {
                        self.book_next(resources);
                    }
                    _ => return false,
                },
            }
        }
    }

    /// Of `targets`, the one whose final value is earliest, and that value, booking
    /// stages in arrival order only as far as needed to know that no other target can
    /// end earlier (every later submission then arrives after what the core booked).
    /// Ties go to the first in `targets`. `None` for no targets. A host actor that waits
    /// for the same completions call after call keeps them in a [`Watch`] instead
    /// ([`Graph::next_done`]), so that each is evaluated again only when the stage it
    /// waits for is booked.
    pub fn earliest<R: Resources + ?Sized>(
        &mut self,
        targets: &[SimTime],
        resources: &mut R,
    ) -> Option<(usize, SimTime)> {
        let found = self.earliest_within(targets, None, resources);
        debug_assert!(
            found.is_some() || targets.is_empty(),
            "targets with nothing ready"
        );
        found
    }

    /// [`Graph::earliest`] that books no stage arriving after `bound` (a final instant):
    /// the earliest of `targets` and its final value when it ends by `bound` (booked only
    /// as far as needed to know it), else `None`, every target then ending after
    /// `bound`. A host actor that knows nothing is submitted before `bound` decides by it
    /// without running the core ahead of the others.
    pub fn earliest_by<R: Resources + ?Sized>(
        &mut self,
        targets: &[SimTime],
        bound: SimTime,
        resources: &mut R,
    ) -> Option<(usize, SimTime)> {
        self.earliest_within(targets, Some(bound.ns()), resources)
    }

    /// [`Graph::earliest`], booking nothing past `bound` when there is one.
    fn earliest_within<R: Resources + ?Sized>(
        &mut self,
        targets: &[SimTime],
        bound: Option<u64>,
        resources: &mut R,
    ) -> Option<(usize, SimTime)> {
        let mut watch = std::mem::take(&mut self.scratch);
        watch.clear();
        self.sync(&mut watch);
        for (i, &t) in targets.iter().enumerate() {
            self.add(&mut watch, i as u64, t);
        }
        let found = self.next_done_within(&mut watch, bound, resources);
        self.scratch = watch;
        found.map(|(i, t)| (i as usize, t))
    }

    /// Add `t` to the completions `watch` waits for, under `key` (the caller's name for
    /// it; equal completions come out lowest key first).
    pub fn watch(&mut self, watch: &mut Watch, key: u64, t: SimTime) {
        self.sync(watch);
        self.add(watch, key, t);
    }

    /// [`Graph::watch`] on a watch already in step with this graph's epoch.
    #[inline]
    fn add(&mut self, watch: &mut Watch, key: u64, t: SimTime) {
        match self.evaluate(t) {
            Ok(v) => watch.fixed.push(Reverse((v, key))),
            Err(stage) => {
                self.stages[stage as usize].watched = true;
                watch.push_blocked(key, t, stage);
            }
        }
    }

    /// Take the earliest completion out of `watch`, with its key and final value,
    /// booking stages in arrival order only as far as needed to know that no other
    /// completion it holds can end earlier (as [`Graph::earliest`]). `None` when it holds
    /// none.
    pub fn next_done<R: Resources + ?Sized>(
        &mut self,
        watch: &mut Watch,
        resources: &mut R,
    ) -> Option<(u64, SimTime)> {
        self.next_done_within(watch, None, resources)
    }

    /// [`Graph::next_done`]; with a `bound`, booking no stage that arrives after it and
    /// `None` (the completion left in `watch`) when the earliest ends after it.
    fn next_done_within<R: Resources + ?Sized>(
        &mut self,
        watch: &mut Watch,
        bound: Option<u64>,
        resources: &mut R,
    ) -> Option<(u64, SimTime)> {
        self.sync(watch);
        loop {
            // An unfixed completion ends no earlier than the arrival of a ready stage:
            // every unbooked stage waits, through its blockers, on one in the heap.
            let next_arrival = self.ready.peek().map(|Reverse(key)| key.at());
            match (watch.fixed.peek(), next_arrival) {
                (Some(&Reverse((v, key))), at) if at.is_none_or(|at| v <= at) => {
                    watch.booked = self.booked;
                    if bound.is_some_and(|b| v > b) {
                        return None;
                    }
                    watch.fixed.pop();
                    return Some((key, SimTime::from_ns(v)));
                }
                (None, None) => {
                    debug_assert!(watch.blocked == 0, "completions with nothing ready");
                    watch.booked = self.booked;
                    return None;
                }
                _ => {}
            }
            // The next stage arrives after the bound: so does every completion left.
            if let (Some(b), Some(at)) = (bound, next_arrival)
                && at > b
            {
                watch.booked = self.booked;
                return None;
            }
            let (s, _) = self.book_next(resources)?;
            // Only a booking of the stage a completion waits for can fix it.
            if self.stages[s as usize].watched {
                self.reevaluate(watch, &[s]);
            }
        }
    }

    /// After a compaction renumbered the stages, or stages were booked outside
    /// [`Graph::next_done`], find again what each unfixed completion of `watch` waits for.
    #[inline]
    fn sync(&mut self, watch: &mut Watch) {
        let renamed = watch.epoch != self.epoch;
        if !renamed && watch.booked == self.booked {
            return;
        }
        watch.epoch = self.epoch;
        watch.booked = self.booked;
        // Without a compaction, only completions whose blocker was booked since can have
        // moved on; after one, every stage was renumbered.
        let stages = &self.stages;
        let stale: Vec<u32> = watch
            .stages_waited_for()
            .filter(|&stage| renamed || stages[stage as usize].start != UNKNOWN)
            .collect();
        if renamed {
            // The lists name stages of the old numbering: start them again.
            let mut taken = std::mem::take(&mut watch.taken);
            taken.clear();
            for stage in stale {
                watch.take(stage, &mut taken);
            }
            watch.slots.clear();
            watch.free.clear();
            watch.listed.clear();
            for &(key, t) in &taken {
                self.add(watch, key, t);
            }
            watch.taken = taken;
        } else {
            self.reevaluate(watch, &stale);
        }
    }

    /// Evaluate again the unfixed completions of `watch` that wait for one of `stages`
    /// (each booked): each is fixed, or waits for the next stage its evaluation stopped at.
    #[inline]
    fn reevaluate(&mut self, watch: &mut Watch, stages: &[u32]) {
        let mut taken = std::mem::take(&mut watch.taken);
        taken.clear();
        for &stage in stages {
            watch.take(stage, &mut taken);
        }
        for &(key, t) in &taken {
            self.add(watch, key, t);
        }
        watch.taken = taken;
    }

    /// Take `members` (a host actor's own pool of equal resources, e.g. the cores of a
    /// scan's host CPU) into the graph while the actor records: stages recorded at the
    /// returned pool id are booked by the core itself, each on the member that can start
    /// it first, in arrival order like every other resource. [`Graph::take_back`] returns
    /// them (with their bookings) once every stage at them is booked.
    pub fn lend(&mut self, class: ResourceClass, members: Vec<Resource>) -> ResourceId {
        debug_assert!(!members.is_empty(), "a lent pool has at least one member");
        self.lent.push(Some(members));
        ResourceId::lent(class, (self.lent.len() - 1) as u32)
    }

    /// The members of pool `id` lent by [`Graph::lend`], booked by the core so far;
    /// `None` for an id the graph was not lent (or was already handed back). The caller
    /// runs the core first ([`Graph::run`]) so that every stage at them is booked.
    pub fn take_back(&mut self, id: ResourceId) -> Option<Vec<Resource>> {
        self.lent.get_mut(id.lent_slot()?)?.take()
    }

    fn reserve_lent(&mut self, slot: usize, at: u64, dur_ns: u64) -> u64 {
        let at = SimTime::from_ns(at);
        match self.lent.get_mut(slot).and_then(Option::as_mut) {
            Some(pool) if !pool.is_empty() => {
                let i = crate::resource::first_start(pool, at, dur_ns);
                pool[i].reserve_now(at, dur_ns).0.ns()
            }
            _ => {
                debug_assert!(false, "a stage at a pool the graph does not hold");
                at.ns()
            }
        }
    }

    /// Book every pending stage.
    pub fn run<R: Resources + ?Sized>(&mut self, resources: &mut R) {
        while self.book_next(resources).is_some() {}
        debug_assert_eq!(self.pending(), 0);
    }

    /// Forget every booked stage and every node whose value is fixed or that neither a
    /// pending stage nor one of `roots` needs, so that memory stays bounded over a long
    /// run. Every instant held outside the graph that may name a node must be one of
    /// `roots` and must then be passed through the returned [`Remap`]; node names of the
    /// old graph are recognized as stale afterwards. Stage ids ([`StageId`]) and the trace
    /// keep the numbering of their time. Nothing about timing changes: pending stages
    /// keep their order, arrivals and waiting lists.
    pub fn compact(&mut self, roots: &[SimTime]) -> Remap {
        let n = self.nodes.len();
        for node in &mut self.nodes {
            if !fixed(node.value) {
                node.value = UNKNOWN;
            }
        }
        // 1. Fix every value that can be fixed: operands have lower indices.
        for i in 1..n {
            if self.nodes[i].value != UNKNOWN {
                continue;
            }
            let v = |r: u32| self.final_value(r);
            let value = match self.nodes[i].kind {
                Kind::Offset { base, add } => match v(base) {
                    UNKNOWN => UNKNOWN,
                    x => x.saturating_add(add),
                },
                Kind::Join { a, b, floor } => match (v(a), v(b)) {
                    (UNKNOWN, _) | (_, UNKNOWN) => UNKNOWN,
                    (x, y) => x.max(y).max(floor),
                },
            };
            self.nodes[i].value = value;
        }
        // 2. Mark the unfixed nodes that roots and pending stages need, downwards (a
        // pending stage's endpoints stay with the stage).
        let mut keep = std::mem::take(&mut self.keep);
        keep.clear();
        keep.resize(n, false);
        let mark = |keep: &mut Vec<bool>, r: u32| {
            if endpoint(r).is_none() {
                keep[r as usize] = true;
            }
        };
        for &t in roots {
            let r = self.index(t);
            mark(&mut keep, r);
        }
        // Pending stages are kept, renumbered in their order (ties go by stage index):
        // one walk over the stages marks their arrivals and renumbers them.
        let mut spare = RemapSpare::take();
        let mut stage_index = std::mem::take(&mut spare.stage_index);
        stage_index.reserve(self.stages.len());
        let mut kept_stages = std::mem::take(&mut spare.stages);
        for st in &self.stages {
            if st.start == UNKNOWN {
                mark(&mut keep, st.arrival);
                stage_index.push(kept_stages.len() as u32);
                kept_stages.push(*st);
            } else {
                stage_index.push(NONE);
            }
        }
        for i in (1..n).rev() {
            if !keep[i] || self.nodes[i].value != UNKNOWN {
                keep[i] = false;
                continue;
            }
            match self.nodes[i].kind {
                Kind::Offset { base, .. } => mark(&mut keep, base),
                Kind::Join { a, b, .. } => {
                    mark(&mut keep, a);
                    mark(&mut keep, b);
                }
            }
        }
        keep[0] = false;
        // 3. Kept nodes, renumbered in their order; fixed operands become constants.
        let mut index = std::mem::take(&mut spare.index);
        index.resize(n, 0);
        // An unfixed operand's new index (an endpoint's stage is pending, so kept).
        let rename = |index: &[u32], r: u32| match endpoint(r) {
            None => index[r as usize],
            Some((stage, end)) => endpoint_ref(stage_index[stage as usize], end),
        };
        let mut nodes = std::mem::take(&mut spare.nodes);
        nodes.push(self.nodes[0]);
        for i in 1..n {
            if !keep[i] {
                continue;
            }
            let v = |r: u32| self.final_value(r);
            let kind = match self.nodes[i].kind {
                Kind::Offset { base, add } => Kind::Offset {
                    base: rename(&index, base),
                    add,
                },
                Kind::Join { a, b, floor } => match (v(a), v(b)) {
                    (UNKNOWN, UNKNOWN) => Kind::Join {
                        a: rename(&index, a),
                        b: rename(&index, b),
                        floor,
                    },
                    (UNKNOWN, y) => Kind::Join {
                        a: rename(&index, a),
                        b: 0,
                        floor: floor.max(y),
                    },
                    (x, _) => Kind::Join {
                        a: rename(&index, b),
                        b: 0,
                        floor: floor.max(x),
                    },
                },
            };
            debug_assert!(nodes.len() < ENDPOINT as usize);
            index[i] = nodes.len() as u32;
            nodes.push(Node {
                kind,
                value: UNKNOWN,
            });
        }
        for st in &mut kept_stages {
            if st.arrival != 0 {
                match self.final_value(st.arrival) {
                    UNKNOWN => st.arrival = rename(&index, st.arrival),
                    v => {
                        st.arrival = 0;
                        st.arrival_ns = v;
                    }
                }
            }
            for w in [&mut st.first_waiter, &mut st.next_waiter] {
                if *w != NONE {
                    *w = stage_index[*w as usize];
                }
            }
        }
        self.ready = self
            .ready
            .drain()
            .map(|Reverse(key)| Reverse(key.renumbered(stage_index[key.stage() as usize])))
            .collect();
        self.forgotten += (self.stages.len() - kept_stages.len()) as u64;
        self.kept_size = nodes.len() + 4 * kept_stages.len();
        self.keep = keep;
        let stages = std::mem::replace(&mut self.stages, kept_stages);
        let old_nodes = std::mem::replace(&mut self.nodes, nodes);
        let old_epoch = self.epoch;
        self.generation = next_generation();
        self.epoch = if self.epoch == (u32::MAX >> INDEX_BITS) {
            1
        } else {
            self.epoch + 1
        };
        Remap {
            old_epoch,
            new_epoch: self.epoch,
            index,
            nodes: old_nodes,
            stages,
            stage_index,
        }
    }
}

thread_local! {
    /// This thread's recording graph, while a [`Recording`] is alive.
    static GRAPH: RefCell<Option<Graph>> = const { RefCell::new(None) };
    /// Whether a recording is on (read on every booking: a `Cell`, not the `RefCell`).
    static RECORDING: Cell<bool> = const { Cell::new(false) };
    /// The order key of the stages recorded now ([`Recording::set_order`]).
    static ORDER: Cell<u64> = const { Cell::new(0) };
}

/// Whether this thread records into the event core now.
#[inline]
pub fn recording() -> bool {
    RECORDING.with(Cell::get)
}

/// Run `f` on this thread's recording graph (`None` outside a recording).
fn with_graph<T>(f: impl FnOnce(&mut Graph) -> T) -> Option<T> {
    GRAPH.with_borrow_mut(|g| g.as_mut().map(f))
}

/// `t + ns` on this thread's graph ([`SimTime::after`] of an unfixed instant). Outside
/// a recording (an instant that outlived its recording: a bug, caught in debug builds)
/// the provisional value.
pub(crate) fn offset(t: SimTime, ns: u64) -> SimTime {
    with_graph(|g| g.offset(t, ns)).unwrap_or_else(|| {
        debug_assert!(false, "an unfixed instant outlived its recording");
        SimTime::from_ns(t.ns().saturating_add(ns))
    })
}

/// `max(a, b)` on this thread's graph ([`SimTime::max`] with an unfixed instant).
pub(crate) fn join(a: SimTime, b: SimTime) -> SimTime {
    with_graph(|g| g.join(a, b)).unwrap_or_else(|| {
        debug_assert!(false, "an unfixed instant outlived its recording");
        SimTime::from_ns(a.ns().max(b.ns()))
    })
}

/// Record a stage of `dur_ns` at `resource` arriving at `arrival`, in the current order;
/// its start and end. Only during a recording ([`recording`]).
pub fn record_stage(resource: ResourceId, arrival: SimTime, dur_ns: u64) -> (SimTime, SimTime) {
    let order = ORDER.with(Cell::get);
    with_graph(|g| {
        let (_, start, end) = g.stage(resource, arrival, dur_ns, order);
        (start, end)
    })
    .expect("record_stage outside a recording")
}

/// Cancel a recorded stage by its start ([`Graph::cancel`]); `false` outside a
/// recording or for an instant that names no pending stage.
pub fn cancel(start: SimTime) -> bool {
    with_graph(|g| g.cancel(start)).unwrap_or(false)
}

/// Lend `members` to this thread's graph ([`Graph::lend`]); outside a recording they
/// come back as the error (the caller keeps booking them itself).
pub fn lend(class: ResourceClass, members: Vec<Resource>) -> Result<ResourceId, Vec<Resource>> {
    if !recording() {
        return Err(members);
    }
    Ok(with_graph(|g| g.lend(class, members)).expect("a recording has a graph"))
}

/// Take a lent pool back from this thread's graph ([`Graph::take_back`]).
pub fn take_back(id: ResourceId) -> Option<Vec<Resource>> {
    with_graph(|g| g.take_back(id)).flatten()
}

/// Count a booking made at once during a recording on a resource without an id.
pub(crate) fn note_unrecorded() {
    with_graph(|g| g.unrecorded += 1);
}

/// Check a trace of the core's bookings ([`Graph::trace`], in booking order) for issue
/// 30's property 2: at every resource, operations are served in order of arrival, and a
/// single resource starts each at its arrival or when the one before it ends (never
/// idle while one waits); a pool's bookings start in arrival order. The first violation,
/// described, as the error.
pub fn first_come_first_served(trace: &[Booking]) -> Result<(), String> {
    let mut by: std::collections::BTreeMap<ResourceId, Vec<&Booking>> = Default::default();
    for b in trace {
        by.entry(b.resource).or_default().push(b);
    }
    for (id, bookings) in by {
        let mut end = SimTime::ZERO;
        let mut last = bookings[0];
        for b in bookings {
            if b.arrival.ns() < last.arrival.ns() {
                return Err(format!(
                    "{id:?}: {b:?} served after {last:?}, a later arrival"
                ));
            }
            if id.index().is_some() {
                if b.start.ns() != b.arrival.ns().max(end.ns()) {
                    return Err(format!(
                        "{id:?}: {b:?} did not start at max(arrival, {end}) (first-come first-served)"
                    ));
                }
                end = b.end;
            } else if b.start.ns() < last.start.ns() {
                return Err(format!(
                    "{id:?}: {b:?} started before {last:?}, an earlier arrival"
                ));
            }
            last = b;
        }
    }
    Ok(())
}

/// Count a comparison of instants of which one is not fixed ([`Graph::unfixed_comparisons`]);
/// with `CSD_TRACE_UNFIXED` set, print where it was made.
#[cold]
pub(crate) fn note_unfixed_comparison() {
    with_graph(|g| g.unfixed += 1);
    // A developer's aid: where the comparison is (docs/time-model.md).
    if std::env::var_os("CSD_TRACE_UNFIXED").is_some() {
        eprintln!(
            "comparison of an unfixed instant at:\n{}",
            std::backtrace::Backtrace::force_capture()
        );
    }
}

/// Set the order key of the stages this thread records from now on
/// ([`Recording::set_order`]); nothing outside a recording.
pub fn set_order(order: u64) {
    if recording() {
        ORDER.with(|o| o.set(order));
    }
}

/// The final value of `t`, booking this thread's recorded stages in arrival order as far
/// as needed ([`Graph::resolve`]); `t` itself when it is final.
pub fn resolve<R: Resources + ?Sized>(t: SimTime, resources: &mut R) -> SimTime {
    if t.is_final() {
        return t;
    }
    with_graph(|g| g.resolve(t, resources)).unwrap_or_else(|| {
        debug_assert!(false, "an unfixed instant outlived its recording");
        SimTime::from_ns(t.ns())
    })
}

/// Of `targets`, the earliest and its final value ([`Graph::earliest`] on this thread's
/// recording; outside one, the first of the least values).
pub fn earliest<R: Resources + ?Sized>(
    targets: &[SimTime],
    resources: &mut R,
) -> Option<(usize, SimTime)> {
    if recording() {
        with_graph(|g| g.earliest(targets, resources)).flatten()
    } else {
        targets
            .iter()
            .enumerate()
            .min_by_key(|&(i, t)| (t.ns(), i))
            .map(|(i, &t)| (i, t))
    }
}

/// [`Graph::earliest_by`] on this thread's recording; outside one, the first of the
/// least values when it is at or before `bound`.
pub fn earliest_by<R: Resources + ?Sized>(
    targets: &[SimTime],
    bound: SimTime,
    resources: &mut R,
) -> Option<(usize, SimTime)> {
    if recording() {
        with_graph(|g| g.earliest_by(targets, bound, resources)).flatten()
    } else {
        targets
            .iter()
            .enumerate()
            .min_by_key(|&(i, t)| (t.ns(), i))
            .filter(|(_, t)| t.ns() <= bound.ns())
            .map(|(i, &t)| (i, t))
    }
}

/// Add `t` under `key` to the completions `w` waits for ([`Graph::watch`] on this
/// thread's recording; outside one, by value).
pub fn watch(w: &mut Watch, key: u64, t: SimTime) {
    if with_graph(|g| g.watch(w, key, t)).is_none() {
        w.fixed.push(Reverse((t.ns(), key)));
    }
}

/// The earliest completion of `w`, with its key ([`Graph::next_done`] on this thread's
/// recording; outside one, the least value, lowest key first).
pub fn next_done<R: Resources + ?Sized>(
    w: &mut Watch,
    resources: &mut R,
) -> Option<(u64, SimTime)> {
    if recording() {
        with_graph(|g| g.next_done(w, resources)).flatten()
    } else {
        debug_assert!(w.blocked == 0, "unfixed completions outside a recording");
        w.fixed
            .pop()
            .map(|Reverse((v, key))| (key, SimTime::from_ns(v)))
    }
}

/// Whether `t` ends at or before `bound` ([`Graph::at_or_before`] on this thread's
/// recording; outside one, by value).
pub fn at_or_before<R: Resources + ?Sized>(t: SimTime, bound: SimTime, resources: &mut R) -> bool {
    if t.is_final() {
        return t.ns() <= bound.ns();
    }
    with_graph(|g| g.at_or_before(t, bound, resources)).unwrap_or(t.ns() <= bound.ns())
}

/// Book every stage this thread recorded ([`Graph::run`]); nothing outside a recording.
pub fn run_all<R: Resources + ?Sized>(resources: &mut R) {
    with_graph(|g| g.run(resources));
}

/// The final value of `t` once its stages are booked (after [`run_all`]); `t` when final
/// or outside a recording.
pub fn value(t: SimTime) -> SimTime {
    if t.is_final() {
        return t;
    }
    with_graph(|g| g.value(t))
        .flatten()
        .unwrap_or(SimTime::from_ns(t.ns()))
}

/// The generation of this thread's recording's graph ([`Graph::generation`]; `None`
/// outside a recording).
pub fn generation() -> Option<u64> {
    with_graph(|g| g.generation())
}

/// A fresh [`Graph::generation`].
fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Whether this thread's recording should be compacted ([`Graph::compact_due`]; never
/// outside a recording).
pub fn compact_due() -> bool {
    with_graph(|g| g.compact_due()).unwrap_or(false)
}

/// [`Graph::compact`] on this thread's recording (`None` outside one).
pub fn compact(roots: &[SimTime]) -> Option<Remap> {
    with_graph(|g| g.compact(roots))
}

/// Record on this thread into `graph` (one kept between recordings: a device shared by
/// threads lends it to whichever holds the device) while `f` runs on `state`; then,
/// when the graph is due, compact it, renaming every instant that `held` names in
/// `state` (each through the renaming it is given). `f`'s result and the graph back.
/// Panics if this thread records already (a thread holding a shared device records
/// nothing of its own).
pub fn record_with<S: ?Sized, T>(
    graph: Graph,
    state: &mut S,
    f: impl FnOnce(&mut S) -> T,
    held: impl Fn(&mut S, &mut dyn FnMut(SimTime) -> SimTime),
) -> (T, Graph) {
    let rec = match Recording::resume(graph) {
        Ok(rec) => rec,
        Err(_) => panic!("a thread that records on its own ran a command of a shared device"),
    };
    let out = f(state);
    if compact_due() {
        let mut roots = Vec::new();
        held(state, &mut |t| {
            roots.push(t);
            t
        });
        if let Some(remap) = compact(&roots) {
            held(state, &mut |t| remap.apply(t));
        }
    }
    (out, rec.finish())
}

/// A recording of this thread's device work into the event core, from
/// [`Recording::start`] until it is dropped or [`Recording::finish`]ed. Not `Send`: the
/// graph belongs to the thread.
#[derive(Debug)]
pub struct Recording {
    _thread: PhantomData<*const ()>,
}

impl Recording {
    /// Start recording on this thread; `None` if a recording is already on.
    pub fn start() -> Option<Recording> {
        if recording() {
            return None;
        }
        GRAPH.with_borrow_mut(|g| *g = Some(Graph::new()));
        RECORDING.with(|r| r.set(true));
        ORDER.with(|o| o.set(0));
        Some(Recording {
            _thread: PhantomData,
        })
    }

    /// Record on this thread into `graph`, one kept between recordings: a device shared
    /// by threads keeps its graph and lends it to whichever thread runs a command on it
    /// (`csd_host::shared`); [`Recording::finish`] hands it back. The graph comes back
    /// as the error if this thread records already.
    pub fn resume(graph: Graph) -> Result<Recording, Box<Graph>> {
        if recording() {
            return Err(Box::new(graph));
        }
        GRAPH.with_borrow_mut(|g| *g = Some(graph));
        RECORDING.with(|r| r.set(true));
        ORDER.with(|o| o.set(0));
        Ok(Recording {
            _thread: PhantomData,
        })
    }

    /// The order key of the stages recorded from now on (e.g. a command's sequence
    /// number: equal arrivals are served lowest first).
    pub fn set_order(&self, order: u64) {
        ORDER.with(|o| o.set(order));
    }

    /// Run `f` on the graph (to trace, inspect or drive it).
    pub fn graph<T>(&self, f: impl FnOnce(&mut Graph) -> T) -> T {
        with_graph(f).expect("a live recording has a graph")
    }

    /// [`Graph::earliest`] on this recording.
    pub fn earliest<R: Resources + ?Sized>(
        &self,
        targets: &[SimTime],
        resources: &mut R,
    ) -> Option<(usize, SimTime)> {
        self.graph(|g| g.earliest(targets, resources))
    }

    /// [`Graph::resolve`] on this recording.
    pub fn resolve<R: Resources + ?Sized>(&self, t: SimTime, resources: &mut R) -> SimTime {
        self.graph(|g| g.resolve(t, resources))
    }

    /// Book every pending stage; afterwards every instant of this recording has its final
    /// value ([`Recording::value`]).
    pub fn run<R: Resources + ?Sized>(&self, resources: &mut R) {
        self.graph(|g| g.run(resources));
    }

    /// The final value of an instant of this recording whose stages are all booked
    /// (after [`Recording::run`]); the provisional value otherwise.
    pub fn value(&self, t: SimTime) -> SimTime {
        self.graph(|g| g.value(t))
            .unwrap_or(SimTime::from_ns(t.ns()))
    }

    /// Stop recording and hand back the graph (for its counters and trace).
    pub fn finish(self) -> Graph {
        RECORDING.with(|r| r.set(false));
        let g = GRAPH.with_borrow_mut(Option::take);
        std::mem::forget(self);
        g.expect("a live recording has a graph")
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        RECORDING.with(|r| r.set(false));
        GRAPH.with_borrow_mut(|g| *g = None);
    }
}

#[cfg(test)]
mod tests;

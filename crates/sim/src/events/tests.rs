use super::*;
use proptest::prelude::*;

fn t(ns: u64) -> SimTime {
    SimTime::from_ns(ns)
}

/// Resource `i` of a slice ([`Resources`] for `[Resource]` goes by index).
fn rid(i: u32) -> ResourceId {
    ResourceId::new(ResourceClass::Die, i)
}

/// One stage of a generated command: where, how long, and what it waits for.
#[derive(Debug, Clone)]
struct StageSpec {
    resource: u32,
    dur: u64,
    /// Earlier stages of the same command whose ends it waits for (none: the
    /// submission).
    deps: Vec<usize>,
    /// Fixed latency after its dependencies (a transport or firmware latency).
    latency: u64,
}

#[derive(Debug, Clone)]
struct CommandSpec {
    submit: u64,
    stages: Vec<StageSpec>,
}

fn command(resources: u32) -> impl Strategy<Value = CommandSpec> {
    (
        0u64..20_000,
        prop::collection::vec(
            (
                0..resources,
                0u64..2_000,
                prop::collection::vec(any::<prop::sample::Index>(), 0..3),
                0u64..300,
            ),
            1..6,
        ),
    )
        .prop_map(|(submit, raw)| CommandSpec {
            submit,
            stages: raw
                .into_iter()
                .enumerate()
                .map(|(i, (resource, dur, deps, latency))| StageSpec {
                    resource,
                    dur,
                    deps: if i == 0 {
                        Vec::new()
                    } else {
                        deps.iter().map(|d| d.index(i)).collect()
                    },
                    latency,
                })
                .collect(),
        })
}

/// `raw` commands with their stages on resources `0..resources`.
fn on_resources(raw: Vec<CommandSpec>, resources: u32) -> Vec<CommandSpec> {
    raw.into_iter()
        .map(|mut c| {
            for s in &mut c.stages {
                s.resource %= resources;
            }
            c
        })
        .collect()
}

/// Record command `c` (number `id`) in the graph; the instant it completes (the join
/// of its stages' ends).
/// `now + p`, but no later than the earliest arrival of a command still queued (each is
/// submitted at a completion, `now` or later, plus its `submit % 100`): a bound up to which
/// a closed loop may book stages between two waits without a later submission arriving
/// before one of them.
fn bound(
    now: u64,
    p: u64,
    queue: &(impl Iterator<Item = (usize, CommandSpec)> + Clone),
) -> SimTime {
    let slack = queue
        .clone()
        .map(|(_, c)| c.submit % 100)
        .min()
        .unwrap_or(p);
    SimTime::from_ns(now + p.min(slack))
}

fn record(g: &mut Graph, id: usize, c: &CommandSpec) -> SimTime {
    let submit = t(c.submit);
    let mut ends: Vec<SimTime> = Vec::new();
    for (k, s) in c.stages.iter().enumerate() {
        let mut arrival = submit;
        for &d in &s.deps {
            arrival = g.join(arrival, ends[d]);
        }
        let arrival = g.offset(arrival, s.latency);
        let (_, _, end) = g.stage(rid(s.resource), arrival, s.dur, (id * 64 + k) as u64);
        ends.push(end);
    }
    ends.iter().fold(submit, |acc, &e| g.join(acc, e))
}

/// The reference: repeatedly book, among the stages whose dependencies are all booked,
/// the one that arrives first (ties by command, then stage), at a resource that serves
/// one operation at a time first-come first-served. Quadratic and obviously right.
/// Returns every stage's start, by command.
fn reference(commands: &[CommandSpec], resources: u32) -> Vec<Vec<u64>> {
    let mut start: Vec<Vec<Option<u64>>> = commands
        .iter()
        .map(|c| vec![None; c.stages.len()])
        .collect();
    let mut free = vec![0u64; resources as usize];
    loop {
        let mut best: Option<(u64, usize, usize)> = None;
        for (ci, c) in commands.iter().enumerate() {
            for (k, s) in c.stages.iter().enumerate() {
                if start[ci][k].is_some() {
                    continue;
                }
                let mut arrival = Some(c.submit);
                for &d in &s.deps {
                    arrival = match (arrival, start[ci][d]) {
                        (Some(a), Some(st)) => Some(a.max(st + c.stages[d].dur)),
                        _ => None,
                    };
                }
                let Some(arrival) = arrival else { continue };
                let key = (arrival + s.latency, ci, k);
                if best.is_none_or(|b| key < b) {
                    best = Some(key);
                }
            }
        }
        let Some((arrival, ci, k)) = best else { break };
        let r = commands[ci].stages[k].resource as usize;
        let s = arrival.max(free[r]);
        free[r] = s + commands[ci].stages[k].dur;
        start[ci][k] = Some(s);
    }
    start
        .into_iter()
        .map(|v| {
            v.into_iter()
                .map(|s| s.expect("every stage booked"))
                .collect()
        })
        .collect()
}

/// Record `commands` in `creation` order, run the core; every stage's start by command,
/// the completions, the resources and the trace.
#[allow(clippy::type_complexity)]
fn run(
    commands: &[CommandSpec],
    resources: u32,
    creation: &[usize],
) -> (Vec<Vec<u64>>, Vec<u64>, Vec<Resource>, Vec<Booking>) {
    let mut g = Graph::new();
    g.record_trace();
    let mut res = vec![Resource::new(); resources as usize];
    let mut done = vec![SimTime::ZERO; commands.len()];
    let mut first_stage = vec![0usize; commands.len()];
    for &ci in creation {
        first_stage[ci] = g.stages.len();
        done[ci] = record(&mut g, ci, &commands[ci]);
    }
    g.run(&mut res);
    assert_eq!(g.late_arrivals(), 0);
    let starts = commands
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            (0..c.stages.len())
                .map(|k| g.stages[first_stage[ci] + k].start)
                .collect()
        })
        .collect();
    let completions = done.iter().map(|&d| g.resolve(d, &mut res).ns()).collect();
    (starts, completions, res, g.trace().to_vec())
}

/// `commands` recorded (in order) on a new graph that keeps its trace, with its
/// resources; their completions.
fn recorded(commands: &[CommandSpec], resources: u32) -> (Graph, Vec<Resource>, Vec<SimTime>) {
    let mut g = Graph::new();
    g.record_trace();
    let res = vec![Resource::new(); resources as usize];
    let done = commands
        .iter()
        .enumerate()
        .map(|(ci, c)| record(&mut g, ci, c))
        .collect();
    (g, res, done)
}

/// Book what is left of a graph made by [`recorded`], check it stayed first come first
/// served without late arrivals, and give every command's stage starts (those of the
/// reference, checked) and the completions.
fn finish(
    mut g: Graph,
    mut res: Vec<Resource>,
    done: &[SimTime],
    commands: &[CommandSpec],
    resources: u32,
) -> (Vec<Vec<u64>>, Vec<u64>) {
    g.run(&mut res);
    assert_eq!(g.late_arrivals(), 0);
    assert_first_come_first_served(g.trace());
    let got = done.iter().map(|&d| g.resolve(d, &mut res).ns()).collect();
    (reference(commands, resources), got)
}

/// Property 2 of issue 30 on a trace ([`first_come_first_served`]).
fn assert_first_come_first_served(trace: &[Booking]) {
    if let Err(e) = first_come_first_served(trace) {
        panic!("{e}");
    }
}

/// A graph holding much unbooked work is compacted again only once it has doubled
/// since the last compaction (each compaction then forgets at least half of what it
/// walks), not on every command while it stays over the size.
#[test]
fn a_compaction_is_due_again_only_after_the_graph_doubles() {
    let mut g = Graph::new();
    g.set_compact_nodes(64);
    // A chain of 100 stages, none booked: a compaction keeps every one.
    let add = |g: &mut Graph, at: &mut SimTime, n: usize| {
        for _ in 0..n {
            *at = g.stage(rid(0), *at, 10, 0).2;
        }
    };
    let mut at = SimTime::ZERO;
    add(&mut g, &mut at, 100);
    assert!(g.compact_due());
    let remap = g.compact(&[at]);
    at = remap.apply(at);
    let (nodes, stages) = g.size();
    let kept = nodes + 4 * stages;
    assert!(kept > 64, "the chain is kept: {kept}");
    assert!(
        !g.compact_due(),
        "due again right after a compaction that kept {kept}"
    );
    // Each stage counts four: due once past twice what was kept.
    let mut added = 0;
    while !g.compact_due() {
        add(&mut g, &mut at, 1);
        added += 1;
        assert!(added < 1000);
    }
    let (nodes, stages) = g.size();
    assert!(nodes + 4 * stages > 2 * kept);
    assert!(nodes + 4 * stages <= 2 * kept + 4);
    let mut res = vec![Resource::new()];
    g.run(&mut res);
    assert_eq!(g.pending(), 0);
}

#[test]
fn an_early_arrival_recorded_late_is_served_first() {
    // Die 0: command A's read arrives at 100 (recorded first), command B's at 50 with
    // 80 ns of work (recorded second). A calendar books A at [100, 200) and B, which does
    // not fit in [50, 100), at [200, 280). The core serves B at [50, 130), A at [130, 230).
    let mut cal = Resource::new();
    cal.reserve(t(100), 100);
    assert_eq!(cal.reserve(t(50), 80), (t(200), t(280)));

    let mut g = Graph::new();
    let mut res = vec![Resource::new()];
    let (_, _, a_end) = g.stage(rid(0), t(100), 100, 0);
    let (_, b_start, b_end) = g.stage(rid(0), t(50), 80, 1);
    assert_eq!(b_start.ns(), 50);
    assert_eq!(g.resolve(a_end, &mut res), t(230));
    assert_eq!(g.resolve(b_end, &mut res), t(130));
    assert_eq!(g.resolve(b_start, &mut res), t(50));
    assert_eq!(res[0].inversions(), 0);
}

#[test]
fn a_lent_pool_is_booked_by_the_core_in_arrival_order_on_the_member_free_first() {
    // Two host cores lent by an actor; three stages recorded out of arrival order: at 100
    // (80 ns), at 0 (200 ns), at 10 (50 ns). In arrival order: 0 takes core 0 [0, 200),
    // 10 takes core 1 [10, 60), 100 takes core 1 again [100, 180).
    let mut g = Graph::new();
    let pool = g.lend(ResourceClass::HostCpu, vec![Resource::new(); 2]);
    assert_eq!(pool.index(), None, "a lent pool is a pool");
    assert_eq!(pool.class(), ResourceClass::HostCpu);
    let mut owner: Vec<Resource> = Vec::new(); // the owner is never asked
    g.record_trace();
    let (_, _, late) = g.stage(pool, t(100), 80, 0);
    let (_, _, first) = g.stage(pool, t(0), 200, 1);
    let (_, _, second) = g.stage(pool, t(10), 50, 2);
    g.run(&mut owner);
    assert_eq!(g.value(first), Some(t(200)));
    assert_eq!(g.value(second), Some(t(60)));
    assert_eq!(g.value(late), Some(t(180)));
    assert_first_come_first_served(g.trace());
    let cores = g.take_back(pool).expect("lent");
    assert_eq!(cores[0].busy_ns() + cores[1].busy_ns(), 330);
    assert_eq!(cores[1].busy_ns(), 130);
    assert!(g.take_back(pool).is_none(), "handed back once");
}

#[test]
fn offsets_and_joins_chain_stages_across_resources() {
    // Two page reads on two dies (100 and 300 ns), both transferred over one channel
    // (50 ns each) 10 ns after their read ends, then a 20-ns link transfer after both.
    let mut g = Graph::new();
    let mut res = vec![Resource::new(); 4];
    let submit = t(1_000);
    let (_, _, r0) = g.stage(rid(0), submit, 100, 0);
    let (_, _, r1) = g.stage(rid(1), submit, 300, 1);
    let a0 = g.offset(r0, 10);
    let a1 = g.offset(r1, 10);
    let (_, _, x0) = g.stage(rid(2), a0, 50, 2);
    let (_, _, x1) = g.stage(rid(2), a1, 50, 3);
    let both = g.join(x0, x1);
    let (_, link_start, done) = g.stage(rid(3), both, 20, 4);
    // Provisional values are lower bounds: each stage as if nothing waited.
    assert_eq!(done.ns(), 1_380);
    assert!(!done.is_final());
    assert_eq!(g.pending(), 5);
    assert_eq!(g.resolve(done, &mut res), t(1_380));
    assert_eq!(g.resolve(link_start, &mut res), t(1_360));
    assert_eq!(g.pending(), 0);
    // Known operands fold at once and make no node.
    let nodes = g.nodes.len();
    assert!(g.offset(t(5), 7).is_final());
    assert_eq!(g.join(t(5), t(9)), t(9));
    assert_eq!(g.offset(done, 3), t(1_383));
    assert!(g.offset(done, 3).is_final(), "done is fixed now");
    assert_eq!(g.nodes.len(), nodes);
}

#[test]
fn equal_arrivals_go_by_order_then_creation() {
    let mut g = Graph::new();
    g.record_trace();
    let mut res = vec![Resource::new()];
    let at = t(10);
    let (late, _, _) = g.stage(rid(0), at, 5, 7);
    let (first, _, _) = g.stage(rid(0), at, 5, 3);
    let (second, _, _) = g.stage(rid(0), at, 5, 3);
    g.run(&mut res);
    let order: Vec<StageId> = g.trace().iter().map(|b| b.stage).collect();
    assert_eq!(order, vec![first, second, late]);
}

#[test]
fn a_stage_created_in_the_past_is_counted_and_still_booked() {
    let mut g = Graph::new();
    let mut res = vec![Resource::new()];
    let (_, _, e) = g.stage(rid(0), t(1_000), 10, 0);
    assert_eq!(g.resolve(e, &mut res), t(1_010));
    let (_, _, e2) = g.stage(rid(0), t(100), 10, 1);
    assert_eq!(g.late_arrivals(), 1);
    assert_eq!(
        g.resolve(e2, &mut res),
        t(110),
        "the calendar fills the gap"
    );
}

#[test]
fn a_cancelled_stage_books_nothing_and_takes_no_time() {
    // A refused command's link transfer is cancelled: the resource stays free for the
    // next arrival, and what waited for the cancelled stage sees it end at its arrival.
    let mut g = Graph::new();
    g.record_trace();
    let mut res = vec![Resource::new(); 2];
    let (_, refused_start, refused_end) = g.stage(rid(0), t(100), 500, 0);
    let after_refused = g.offset(refused_end, 10);
    let (_, _, dependent) = g.stage(rid(1), after_refused, 5, 1);
    let (_, _, other) = g.stage(rid(0), t(200), 50, 2);
    assert!(g.cancel(refused_start));
    assert!(!g.cancel(t(3)), "a final instant names no stage");
    assert_eq!(
        g.resolve(other, &mut res),
        t(250),
        "not behind the cancelled stage"
    );
    assert_eq!(g.resolve(dependent, &mut res), t(115));
    assert_eq!(g.resolve(refused_end, &mut res), t(100));
    assert_eq!(res[0].ops(), 1);
    assert_eq!(g.trace().len(), 2, "a cancelled stage is not traced");
    assert!(!g.cancel(refused_start), "already booked");
}

#[test]
fn long_chains_evaluate_without_deep_recursion() {
    // One stage waits on a chain of 200,000 offsets and joins of an unbooked stage.
    let mut g = Graph::new();
    let mut res = vec![Resource::new(); 2];
    let (_, _, mut d) = g.stage(rid(0), t(0), 1, 0);
    for i in 0..100_000u64 {
        d = g.offset(d, 1);
        d = g.join(d, t(i));
    }
    let (_, _, end) = g.stage(rid(1), d, 1, 1);
    assert_eq!(g.resolve(end, &mut res), t(100_002));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Issue 30, property 1: completions, starts and every resource's counters do not
    /// depend on the order in which code records independent commands. Property 2: the
    /// trace is first-come first-served at every resource. And the core agrees with the
    /// quadratic reference stage for stage.
    #[test]
    fn the_core_is_the_reference_whatever_the_recording_order(
        resources in 1u32..5,
        seed in any::<u64>(),
        raw in prop::collection::vec(command(4), 1..25),
    ) {
        let commands = on_resources(raw, resources);
        let in_order: Vec<usize> = (0..commands.len()).collect();
        let mut shuffled = in_order.clone();
        // A deterministic shuffle from the seed (Fisher-Yates on a xorshift).
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let (starts, completions, res, trace) = run(&commands, resources, &in_order);
        let (starts2, completions2, res2, trace2) = run(&commands, resources, &shuffled);
        prop_assert_eq!(&starts, &starts2);
        prop_assert_eq!(&completions, &completions2);
        prop_assert_eq!(&res, &res2);
        assert_first_come_first_served(&trace);
        assert_first_come_first_served(&trace2);
        prop_assert_eq!(&starts, &reference(&commands, resources));
        // A command completes when its last stage ends.
        for (ci, c) in commands.iter().enumerate() {
            let last = c.stages.iter().zip(&starts[ci]).map(|(s, st)| st + s.dur).max();
            prop_assert_eq!(completions[ci], last.unwrap_or(0).max(c.submit));
        }
    }

    /// Compacting the graph between completions (the workload engine does it to bound
    /// memory) changes no completion, and instants remapped through it stay valid.
    #[test]
    fn compaction_changes_nothing(
        resources in 1u32..5,
        depth in 1usize..8,
        every in 1usize..6,
        raw in prop::collection::vec(command(4), 1..40),
    ) {
        let run = |compact_every: Option<usize>| {
            let mut g = Graph::new();
            let mut res = vec![Resource::new(); resources as usize];
            let mut queue = on_resources(raw.clone(), resources).into_iter();
            let mut in_flight: Vec<SimTime> = Vec::new();
            // An instant kept across commands, as the FTL keeps its log's: the join of
            // every completion so far.
            let mut kept = SimTime::ZERO;
            let (mut now, mut id, mut pops) = (0u64, 0usize, 0usize);
            let mut completions = Vec::new();
            loop {
                while in_flight.len() < depth {
                    let Some(mut c) = queue.next() else { break };
                    c.submit = now + c.submit % 100;
                    let done = record(&mut g, id, &c);
                    kept = g.join(kept, done);
                    in_flight.push(done);
                    id += 1;
                }
                let Some((i, at)) = g.earliest(&in_flight, &mut res) else { break };
                now = at.ns();
                completions.push(now);
                in_flight.swap_remove(i);
                pops += 1;
                if compact_every.is_some_and(|k| pops % k == 0) {
                    let mut roots = in_flight.clone();
                    roots.push(kept);
                    let remap = g.compact(&roots);
                    for t in &mut in_flight {
                        *t = remap.apply(*t);
                    }
                    kept = remap.apply(kept);
                }
            }
            let kept = g.resolve(kept, &mut res).ns();
            assert_eq!(g.stale(), 0);
            (completions, kept, res, g.size())
        };
        let (plain, kept, res, size) = run(None);
        let (compacted, kept2, res2, size2) = run(Some(every));
        prop_assert_eq!(plain, compacted);
        prop_assert_eq!(kept, kept2);
        prop_assert_eq!(res, res2);
        prop_assert!(size2.1 <= size.1);
    }

    /// A [`Watch`] kept across completions (as the workload engine keeps its commands in
    /// flight), compacted every `every` completions, gives the completions, in the same
    /// order and for the same commands, that a fresh [`Graph::earliest`] over the list
    /// in flight gives at every step. Every `drop` completions the newest command in
    /// flight stops being waited for ([`Watch::retain`]; its stages still book).
    #[test]
    fn a_kept_watch_gives_what_earliest_gives(
        resources in 1u32..5,
        depth in 1usize..8,
        every in 1usize..6,
        drop in prop::option::of(2usize..5),
        peek in prop::option::of(0u64..300),
        raw in prop::collection::vec(command(4), 1..40),
    ) {
        // Whether the `n`th completion is followed by a drop.
        let drops = |n: usize| drop.is_some_and(|d| n.is_multiple_of(d));
        let commands = on_resources(raw, resources);
        // (command id, completion) in the order they come out.
        let by_earliest = {
            let mut g = Graph::new();
            let mut res = vec![Resource::new(); resources as usize];
            let mut queue = commands.clone().into_iter().enumerate();
            let mut in_flight: Vec<(usize, SimTime)> = Vec::new();
            let mut now = 0u64;
            let mut out = Vec::new();
            let mut last: Option<SimTime> = None;
            loop {
                while in_flight.len() < depth {
                    let Some((id, mut c)) = queue.next() else { break };
                    c.submit = now + c.submit % 100;
                    in_flight.push((id, record(&mut g, id, &c)));
                    last = in_flight.last().map(|c| c.1);
                }
                let targets: Vec<SimTime> = in_flight.iter().map(|c| c.1).collect();
                let Some((i, at)) = g.earliest(&targets, &mut res) else { break };
                now = at.ns();
                out.push((in_flight.remove(i).0, now));
                if drops(out.len())
                    && let Some(newest) = in_flight.iter().map(|c| c.0).max()
                {
                    in_flight.retain(|c| c.0 != newest);
                }
                // Host code may ask whether a completion ends by a bound between two
                // waits (`at_or_before` books stages outside the watch), a bound no later
                // than the next submission's arrival.
                if let (Some(p), Some(t), false) = (peek, last, in_flight.is_empty()) {
                    g.at_or_before(t, bound(now, p, &queue), &mut res);
                }
            }
            (out, res)
        };
        let by_watch = {
            let mut g = Graph::new();
            let mut res = vec![Resource::new(); resources as usize];
            let mut queue = commands.clone().into_iter().enumerate();
            let mut watch = Watch::new();
            let mut held = std::collections::BTreeSet::new();
            let mut now = 0u64;
            let mut out = Vec::new();
            let mut last: Option<SimTime> = None;
            loop {
                while watch.len() < depth {
                    let Some((id, mut c)) = queue.next() else { break };
                    c.submit = now + c.submit % 100;
                    let done = record(&mut g, id, &c);
                    g.watch(&mut watch, id as u64, done);
                    held.insert(id);
                    last = Some(done);
                }
                let Some((id, at)) = g.next_done(&mut watch, &mut res) else { break };
                now = at.ns();
                out.push((id as usize, now));
                held.remove(&(id as usize));
                if drops(out.len())
                    && let Some(newest) = held.pop_last()
                {
                    watch.retain(|k| k != newest as u64);
                }
                if out.len() % every == 0 {
                    let roots: Vec<SimTime> = watch.unfixed().collect();
                    let remap = g.compact(&roots);
                    watch.remap(&remap);
                    last = last.map(|t| remap.apply(t));
                }
                if let (Some(p), Some(t), false) = (peek, last, watch.is_empty()) {
                    g.at_or_before(t, bound(now, p, &queue), &mut res);
                }
            }
            prop_assert!(watch.is_empty());
            prop_assert_eq!(g.stale(), 0);
            prop_assert_eq!(g.late_arrivals(), 0);
            (out, res)
        };
        if drop.is_none() {
            prop_assert_eq!(by_watch.0.len(), commands.len());
        }
        // `earliest` takes the first of equal completions in its list, which is the
        // lowest id: the list keeps submission order.
        prop_assert_eq!(by_earliest, by_watch);
    }

    /// A closed loop as the workload engine runs it: `depth` commands in flight, each
    /// completion taken with [`Graph::earliest`] and the next command submitted at it.
    /// No stage is ever created in the past, and the trace is first-come first-served.
    #[test]
    fn a_closed_loop_never_submits_into_the_past(
        resources in 1u32..5,
        depth in 1usize..8,
        raw in prop::collection::vec(command(4), 1..40),
    ) {
        let mut g = Graph::new();
        g.record_trace();
        let mut res = vec![Resource::new(); resources as usize];
        let mut queue = on_resources(raw, resources).into_iter();
        let mut in_flight: Vec<SimTime> = Vec::new();
        let mut now = 0u64;
        let mut id = 0usize;
        let mut completions = Vec::new();
        loop {
            while in_flight.len() < depth {
                let Some(mut c) = queue.next() else { break };
                // Submitted when the slot frees, plus its own think time.
                c.submit = now + c.submit % 100;
                in_flight.push(record(&mut g, id, &c));
                id += 1;
            }
            let Some((i, at)) = g.earliest(&in_flight, &mut res) else { break };
            prop_assert!(at.ns() >= now, "completions come out in time order");
            now = at.ns();
            completions.push(now);
            in_flight.swap_remove(i);
        }
        prop_assert_eq!(completions.len(), id);
        prop_assert_eq!(g.late_arrivals(), 0);
        prop_assert_eq!(g.pending(), 0);
        assert_first_come_first_served(g.trace());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// A host decision on an unfixed instant ([`Graph::at_or_before`]) gives the answer
    /// of its final value, books no stage that arrives after its bound (so a host whose
    /// clock is at the bound never submits behind what the core booked), and changes no
    /// start: the core stays the reference.
    #[test]
    fn a_bounded_decision_is_exact_and_books_nothing_past_its_bound(
        resources in 1u32..5,
        raw in prop::collection::vec(command(4), 1..25),
        asks in prop::collection::vec((any::<prop::sample::Index>(), 0u64..30_000), 1..6),
    ) {
        let commands = on_resources(raw, resources);
        let (starts, completions, _, _) =
            run(&commands, resources, &(0..commands.len()).collect::<Vec<_>>());
        let (mut g, mut res, done) = recorded(&commands, resources);
        // Bounds asked in increasing order, as a host clock moves.
        let mut asks: Vec<(usize, u64)> =
            asks.iter().map(|(i, b)| (i.index(commands.len()), *b)).collect();
        asks.sort_by_key(|a| a.1);
        for (ci, bound) in asks {
            let before = g.trace().len();
            let answer = g.at_or_before(done[ci], t(bound), &mut res);
            prop_assert_eq!(answer, completions[ci] <= bound);
            for b in &g.trace()[before..] {
                prop_assert!(b.arrival.ns() <= bound, "booked {:?} past the bound {}", b, bound);
            }
        }
        let got = finish(g, res, &done, &commands, resources);
        prop_assert_eq!(&got, &(starts, completions));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// [`Graph::earliest_by`] gives the earliest of its targets when that ends by the
    /// bound (ties to the first target) and `None` when none does, books no stage that
    /// arrives after the bound nor after the earliest it returns (a host may submit at
    /// that completion), and changes no start.
    #[test]
    fn a_bounded_earliest_is_exact_and_books_nothing_past_what_it_returns(
        resources in 1u32..5,
        raw in prop::collection::vec(command(4), 1..25),
        targets in prop::collection::vec(any::<prop::sample::Index>(), 1..6),
        bounds in prop::collection::vec(0u64..30_000, 1..6),
    ) {
        let commands = on_resources(raw, resources);
        let (starts, completions, _, _) =
            run(&commands, resources, &(0..commands.len()).collect::<Vec<_>>());
        let (mut g, mut res, done) = recorded(&commands, resources);
        let targets: Vec<usize> = targets.iter().map(|i| i.index(commands.len())).collect();
        let mut bounds = bounds;
        bounds.sort_unstable();
        for bound in bounds {
            let ts: Vec<SimTime> = targets.iter().map(|&ci| done[ci]).collect();
            let want = targets
                .iter()
                .enumerate()
                .map(|(k, &ci)| (completions[ci], k))
                .min()
                .filter(|&(v, _)| v <= bound);
            let before = g.trace().len();
            let got = g.earliest_by(&ts, t(bound), &mut res);
            prop_assert_eq!(got.map(|(k, v)| (v.ns(), k)), want);
            let horizon = want.map_or(bound, |(v, _)| v);
            for b in &g.trace()[before..] {
                prop_assert!(b.arrival.ns() <= horizon, "booked {:?} past {}", b, horizon);
            }
        }
        let got = finish(g, res, &done, &commands, resources);
        prop_assert_eq!(&got, &(starts, completions));
    }
}

/// A comparison of an instant the core has not fixed is counted, one of final ones is not.
#[test]
fn comparisons_of_unfixed_instants_are_counted() {
    let rec = Recording::start().expect("no recording on this thread");
    let (start, end) = record_stage(rid(0), t(5), 10);
    assert!(t(1) < t(2));
    assert_eq!(rec.graph(|g| g.unfixed_comparisons()), 0);
    let _ = end > start;
    let _ = end == t(15);
    let _ = end.min(t(3));
    assert_eq!(rec.graph(|g| g.unfixed_comparisons()), 3);
    let mut res = vec![Resource::new()];
    assert!(at_or_before(end, t(15), &mut res));
    assert_eq!(value(end), t(15));
    assert_eq!(rec.graph(|g| g.unfixed_comparisons()), 3);
    drop(rec);
}

proptest! {
    /// The ready heap's packed key orders stages as the triple (arrival, order, stage)
    /// does, gives back the arrival and stage, and keeps both the place and the arrival
    /// when a compaction renumbers the stage; orders past the packed range compare as
    /// its largest (then by stage).
    #[test]
    fn a_ready_key_orders_as_its_triple(
        a in (0u64..4, prop_oneof![0u64..4, Just(u64::MAX - 1), Just(MAX_ORDER)], 0u32..4)
            .prop_map(|(at, o, s)| (at * 1_000 + (at & 1) * u64::MAX / 2, o, s)),
        b in (0u64..4, prop_oneof![0u64..4, Just(u64::MAX - 1), Just(MAX_ORDER)], 0u32..4)
            .prop_map(|(at, o, s)| (at * 1_000 + (at & 1) * u64::MAX / 2, o, s)),
        stage in 0u32..(MAX_STAGES as u32),
    ) {
        let key = |(at, o, s): (u64, u64, u32)| ReadyKey::new(at, o, s);
        let clamp = |(at, o, s): (u64, u64, u32)| (at, o.min(MAX_ORDER), s);
        prop_assert_eq!(key(a).cmp(&key(b)), clamp(a).cmp(&clamp(b)));
        prop_assert_eq!((key(a).at(), key(a).stage()), (a.0, a.2));
        let r = key(a).renumbered(stage);
        prop_assert_eq!((r.at(), r.stage()), (a.0, stage));
        prop_assert_eq!(r, ReadyKey::new(a.0, a.1, stage));
    }
}

/// A compaction renames a booked stage's start and end to their final values and a
/// pending stage's to the endpoints of its new index, whichever is asked.
#[test]
fn a_compaction_renames_stage_endpoints() {
    let mut g = Graph::new();
    let mut res = vec![Resource::new(), Resource::new()];
    let (_, s1, e1) = g.stage(rid(0), t(100), 50, 0);
    let arrival = g.offset(e1, 7);
    let (_, s2, e2) = g.stage(rid(1), arrival, 30, 0);
    let (_, s3, e3) = g.stage(rid(0), t(400), 20, 0);
    // Book the first stage only: the second is ready, the third waits for its arrival.
    assert!(g.at_or_before(s1, t(120), &mut res));
    assert_eq!(g.pending(), 2);
    let remap = g.compact(&[s1, e1, s2, e2, s3, e3]);
    assert_eq!(remap.apply(s1), t(100));
    assert_eq!(remap.apply(e1), t(150));
    let (s2, e2, e3) = (remap.apply(s2), remap.apply(e2), remap.apply(e3));
    assert!(!s2.is_final() && !e2.is_final() && !e3.is_final());
    assert_eq!(g.resolve(e2, &mut res), t(187));
    assert_eq!(g.resolve(s2, &mut res), t(157));
    assert_eq!(g.resolve(e3, &mut res), t(420));
    assert_eq!(g.pending(), 0);
    assert_eq!(g.stale(), 0);
}

#[test]
fn an_id_keeps_its_class_and_member() {
    for class in ResourceClass::ALL {
        for i in [0, 1, 7, LENT - 1] {
            let id = ResourceId::new(class, i);
            assert_eq!(
                (id.class(), id.index(), id.lent_slot()),
                (class, Some(i), None)
            );
        }
        let pool = ResourceId::pool(class);
        assert_eq!(
            (pool.class(), pool.index(), pool.lent_slot()),
            (class, None, None)
        );
        let lent = ResourceId::lent(class, 5);
        assert_eq!(
            (lent.class(), lent.index(), lent.lent_slot()),
            (class, None, Some(5))
        );
    }
}

//! Issue 30 for the key-value store: YCSB on the event core (docs/time-model.md, "The
//! key-value store on the event core").

mod common;

use common::*;
use csd_device::IoTarget;
use csd_ftl::FtlConfig;
use csd_host::Client;
use csd_kv::ycsb::{self, KeyDist, Limit, Workload, YcsbConfig};
use csd_kv::{Interface, Store, StoreConfig};
use csd_sim::events::{Recording, first_come_first_served};

/// A store on a fresh `tiny` device where every mechanism runs often (`small`), with an
/// I/O queue of 4, a cache of 16 pages and `write_buffers`.
fn store(interface: Interface, write_buffers: Option<usize>) -> Store<Client> {
    let cfg = StoreConfig {
        cache_pages: Some(16),
        queue_depth: 4,
        write_buffers,
        ..small(interface)
    };
    open(client(FtlConfig::default()), cfg)
}

/// Bookings the device's calendars made behind a later arrival, so far.
fn inversions(s: &mut Store<Client>) -> u64 {
    s.device()
        .device()
        .block()
        .utilization(1)
        .iter()
        .map(|u| u.inversions)
        .sum()
}

/// Issue 30 for the key-value store: on both interfaces, with write buffers bounded
/// or not, YCSB runs on the event core with every resource first-come first-served
/// in arrival order (the trace), no command submitted behind a booking (no late
/// arrival), no booking outside the core, no decision on an unfixed instant, the
/// graph compacted on the way (every held instant renamed: none stale), every
/// operation's latency reported once, and every record readable afterwards on
/// calendars.
#[test]
fn ycsb_on_the_event_core_serves_every_resource_in_arrival_order() {
    for interface in [Interface::Batch, Interface::Block] {
        for write_buffers in [None, Some(1)] {
            for (workload, seed) in [(Workload::WriteHeavy, 3), (Workload::ReadHeavy, 4)] {
                let what = format!("{interface:?} {workload:?} write buffers {write_buffers:?}");
                let mut s = store(interface, write_buffers);
                ycsb::load(&mut s, 3000, &mut |_| {}).unwrap();
                let inversions0 = inversions(&mut s);
                let rec = Recording::start().expect("no recording on this thread");
                rec.graph(|g| {
                    g.record_trace();
                    g.set_compact_nodes(1 << 11);
                });
                let c = YcsbConfig {
                    records: 3000,
                    workload,
                    dist: KeyDist::Zipfian(0.99),
                    limit: Limit::Ops(3000),
                    seed,
                };
                let r = ycsb::run(&mut s, &c, &mut |_| {}).unwrap();
                assert_eq!(r.ops.read_misses, 0, "{what}");
                assert_eq!(r.modeled_latency.len(), 3000, "{what}");
                assert!(r.modeled_ops_per_s().unwrap() > 0.0, "{what}");
                let g = rec.finish();
                assert_eq!(
                    (
                        g.late_arrivals(),
                        g.unrecorded(),
                        g.stale(),
                        g.unfixed_comparisons(),
                        g.pending()
                    ),
                    (0, 0, 0, 0, 0),
                    "{what}"
                );
                assert!(g.forgotten() > 0, "{what}: the graph was never compacted");
                if let Err(e) = first_come_first_served(g.trace()) {
                    panic!("{what}: {e}");
                }
                assert_eq!(
                    inversions(&mut s),
                    inversions0,
                    "{what}: a booking behind a later arrival"
                );
                // Calendars again on the same store: its instants are final.
                let c = YcsbConfig {
                    records: 3000,
                    workload: Workload::A,
                    dist: KeyDist::Uniform,
                    limit: Limit::Ops(300),
                    seed: 5,
                };
                let r = ycsb::run(&mut s, &c, &mut |_| {}).unwrap();
                assert_eq!(r.ops.read_misses, 0, "{what}");
                for i in 0..3000 {
                    assert!(
                        s.get(&ycsb::record_key(i)).unwrap().is_some(),
                        "{what}: record {i}"
                    );
                }
            }
        }
    }
}

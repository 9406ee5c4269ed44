//! YCSB against the store on both interfaces: every read finds its record, the modeled
//! clock moves, and the paper's counters (user / GC bytes) are filled.

mod common;

use common::*;
use csd_ftl::FtlConfig;
use csd_kv::ycsb::{self, KeyDist, Limit, Workload, YcsbConfig};
use csd_kv::{Interface, StoreConfig};

#[test]
fn ycsb_runs_on_both_interfaces_with_every_read_finding_its_record() {
    for interface in [Interface::Batch, Interface::Block] {
        let cfg = StoreConfig {
            cache_pages: Some(16),
            ..small(interface)
        };
        let mut s = open(client(FtlConfig::default()), cfg);
        let l = ycsb::load(&mut s, 3000, &mut |_| {}).unwrap();
        assert_eq!(l.ops.inserts, 3000);
        s.reset_stats();
        for w in [
            Workload::ReadHeavy,
            Workload::WriteHeavy,
            Workload::E,
            Workload::F,
        ] {
            let c = YcsbConfig {
                records: 3000,
                workload: w,
                dist: KeyDist::Zipfian(0.99),
                limit: Limit::Ops(3000),
                seed: 3,
            };
            let r = ycsb::run(&mut s, &c, &mut |_| {}).unwrap();
            assert_eq!(r.ops.total(), 3000, "{interface:?} {w:?}");
            assert_eq!(r.ops.read_misses, 0, "{interface:?} {w:?}");
            assert!(r.modeled_ops_per_s().unwrap() > 0.0);
            assert!(r.modeled_latency.len() == 3000);
        }
        let st = s.stats();
        assert!(
            st.io.user_read_bytes > 0 && st.io.user_write_bytes > 0,
            "{st:?}"
        );
        let c = YcsbConfig {
            records: 3000,
            workload: Workload::C,
            dist: KeyDist::Uniform,
            limit: Limit::ModeledSecs(0.001),
            seed: 4,
        };
        let r = ycsb::run(&mut s, &c, &mut |_| {}).unwrap();
        assert!(r.modeled_s.unwrap() >= 0.001 && r.ops.reads > 0);
    }
}

/// With periodic checkpoints off (Figure 11's "GC only"), the block store must keep
/// writing for many times its log's size: host GC frees dead segments by forcing a
/// checkpoint, and collects victims only while live data fills the log to its threshold.
/// (Before, dead segments counted as used: host GC kept relocating live pages and the log
/// ran out of free segments.)
#[test]
fn block_store_without_periodic_checkpoints_reclaims_its_log() {
    let cfg = StoreConfig {
        cache_pages: Some(16),
        checkpoint_interval_ns: None,
        block: csd_kv::BlockOptions {
            gc: true,
            gc_start_used: 0.5,
            ..csd_kv::BlockOptions::default()
        },
        ..small(Interface::Block)
    };
    let mut s = open(client(FtlConfig::default()), cfg);
    ycsb::load(&mut s, 3000, &mut |_| {}).unwrap();
    s.reset_stats();
    let log_bytes = s.host_log_segments().map_or(0, |(n, _)| n as u64) * 1024 * 1024;
    assert!(log_bytes > 0, "a block store has a host log");
    let c = YcsbConfig {
        records: 3000,
        workload: Workload::WriteHeavy,
        dist: KeyDist::Uniform,
        limit: Limit::Ops(60_000),
        seed: 9,
    };
    let r = match ycsb::run(&mut s, &c, &mut |_| {}) {
        Ok(r) => r,
        Err(e) => panic!("write-heavy run without checkpoints failed: {e}"),
    };
    assert_eq!(r.ops.read_misses, 0);
    s.check().unwrap();
    let st = s.stats();
    let written = st.io.user_write_bytes + st.io.meta_write_bytes + st.io.gc_write_bytes;
    assert!(
        written > 3 * log_bytes,
        "the run must write several times the log ({written} of {log_bytes} bytes)"
    );
    assert!(st.io.gc_forced_checkpoints > 0, "{st:?}");
    assert!(
        st.io.gc_write_bytes < st.io.user_write_bytes,
        "host GC relocated more than the user wrote: {st:?}"
    );
}

/// With one write buffer (`write_buffers: Some(1)`) the host thread waits for each sealed
/// buffer's acknowledgement before it seals the next: a write-heavy run waits, takes at
/// least as long in modeled time as the same run with the I/O queue as the only bound,
/// and still finds every record; the unbounded run never waits.
#[test]
fn one_write_buffer_makes_the_host_wait_for_each_acknowledgement() {
    for interface in [Interface::Batch, Interface::Block] {
        let mut rates = Vec::new();
        for buffers in [None, Some(1)] {
            let cfg = StoreConfig {
                cache_pages: Some(16),
                write_buffers: buffers,
                ..small(interface)
            };
            let mut s = open(client(FtlConfig::default()), cfg);
            ycsb::load(&mut s, 3000, &mut |_| {}).unwrap();
            s.reset_stats();
            let c = YcsbConfig {
                records: 3000,
                workload: Workload::WriteHeavy,
                dist: KeyDist::Zipfian(0.99),
                limit: Limit::Ops(6000),
                seed: 5,
            };
            let r = ycsb::run(&mut s, &c, &mut |_| {}).unwrap();
            assert_eq!(r.ops.read_misses, 0, "{interface:?} {buffers:?}");
            s.check().unwrap();
            let st = s.stats();
            assert!(st.io.seals > 10, "{interface:?}: {st:?}");
            match buffers {
                None => assert_eq!(st.io.buffer_waits, 0, "{interface:?}"),
                Some(_) => assert!(
                    st.io.buffer_waits > 0 && st.io.buffer_wait_ns > 0,
                    "{interface:?}: one buffer never waited: {st:?}"
                ),
            }
            rates.push(r.modeled_ops_per_s().unwrap());
        }
        assert!(
            rates[1] < rates[0],
            "{interface:?}: waiting for every acknowledgement cannot be faster: {rates:?}"
        );
    }
}

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

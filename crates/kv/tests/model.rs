//! Model-based tests: random operations against the store and a `BTreeMap` in step, on
//! both interfaces, with a cache of a few pages (evictions), a small write buffer (many
//! seals), host GC and checkpoints (block) and device GC (a small device); clean reopens
//! in between recover the store from the device.

mod common;

use common::*;
use csd_ftl::FtlConfig;
use csd_kv::{Interface, Store};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Op {
    Put(u64, usize),
    Delete(u64),
    Get(u64),
    Scan(u64, usize),
    Sync,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..400u64, 1..300usize).prop_map(|(k, l)| Op::Put(k, l)),
        3 => (0..400u64).prop_map(Op::Delete),
        6 => (0..400u64).prop_map(Op::Get),
        2 => (0..400u64, 1..40usize).prop_map(|(k, n)| Op::Scan(k, n)),
        1 => Just(Op::Sync),
        1 => Just(Op::Reopen),
    ]
}

fn run(interface: Interface, ops: &[Op]) {
    let cfg = small(interface);
    let mut s = open(client(FtlConfig::default()), cfg.clone());
    let mut m: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (v, o) in ops.iter().enumerate() {
        match *o {
            Op::Put(k, l) => {
                let val = value(k, v as u64, l);
                s.put(&key(k), &val).unwrap();
                m.insert(key(k), val);
            }
            Op::Delete(k) => {
                assert_eq!(s.delete(&key(k)).unwrap(), m.remove(&key(k)).is_some());
            }
            Op::Get(k) => assert_eq!(s.get(&key(k)).unwrap(), m.get(&key(k)).cloned()),
            Op::Scan(k, n) => {
                let want: Vec<_> = m
                    .range(key(k)..)
                    .take(n)
                    .map(|(a, b)| (a.clone(), b.clone()))
                    .collect();
                assert_eq!(s.scan(&key(k), n).unwrap(), want);
            }
            Op::Sync => {
                s.sync().unwrap();
                assert_eq!(s.acked(), s.last_change());
            }
            Op::Reopen => {
                s.sync().unwrap();
                let c = s.into_device();
                s = open(c, cfg.clone());
                assert!(s.recovered());
            }
        }
    }
    let all: Vec<_> = m.iter().map(|(a, b)| (a.clone(), b.clone())).collect();
    assert_eq!(s.scan(&[0], usize::MAX).unwrap(), all);
    assert_eq!(s.len().unwrap(), m.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn batch_store_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..600)) {
        run(Interface::Batch, &ops);
    }

    #[test]
    fn block_store_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..600)) {
        run(Interface::Block, &ops);
    }
}

/// Enough writes that host GC, host checkpoints and device GC all run, on both interfaces.
#[test]
fn long_overwrite_run_exercises_gc_on_both_interfaces() {
    for interface in [Interface::Batch, Interface::Block] {
        let cfg = csd_kv::StoreConfig {
            // Short enough that hot pages are written back often under the calendar model
            // (50 µs let a 2026-11-29 run finish without device GC on the batch interface).
            max_dirty_age_ns: 5_000,
            block: csd_kv::BlockOptions {
                gc_start_used: 0.1,
                ..small(interface).block
            },
            ..small(interface)
        };
        let mut s = open(client(FtlConfig::default()), cfg.clone());
        let mut m = BTreeMap::new();
        for i in 0..60_000u64 {
            let k = if i < 6000 {
                (i * 7919) % 6000
            } else {
                (i * 7919) % 300
            };
            let val = value(k, i, 100);
            s.put(&key(k), &val).unwrap();
            m.insert(key(k), val);
        }
        s.sync().unwrap();
        let st = s.stats();
        let smart = s.smart().unwrap();
        if interface == Interface::Block {
            assert!(st.io.gc_victims > 0, "host GC ran: {st:?}");
            assert!(st.io.checkpoints > 0, "host checkpoints ran: {st:?}");
        }
        assert!(smart.flash_erases.gc > 0, "device GC ran: {smart:?}");
        let c = s.into_device();
        let mut s: Store<_> = open(c, cfg);
        for (k, v) in &m {
            assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
        }
    }
}

//! Crash tests in the style of the FTL's torture harness (csd_ftl::torture): power is cut
//! at a random flash operation while the store runs random puts and deletes (with syncs,
//! evictions, seals, host GC and host checkpoints on the block interface, device GC and
//! device checkpoints underneath); the FTL recovers, the store reopens, and every change
//! the store had acknowledged as durable must read back (a change not yet acknowledged
//! may read as old or new). A cut may also strike while the store itself recovers.

mod common;

use common::*;
use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::Client;
use csd_kv::{Activity, Interface, KvError, Store, StoreConfig};
use csd_nand::{Nand, PowerCut};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::collections::{BTreeMap, HashMap};

/// Cut power, recover the FTL, and give back a client.
fn crash(s: Store<Client>, ftl_cfg: FtlConfig) -> Client {
    let nand: Nand = s
        .into_device()
        .into_device()
        .into_block()
        .into_ftl()
        .crash();
    recover(nand, ftl_cfg)
}

fn recover(mut nand: Nand, ftl_cfg: FtlConfig) -> Client {
    nand.disarm_power_cut();
    nand.power_on();
    let ftl = match Ftl::try_recover(nand, ftl_cfg) {
        Ok(f) => f,
        Err(e) => panic!("FTL recovery: {}", e.error),
    };
    Client::new(NvmeDevice::new(ftl)).unwrap()
}

fn arm(c: &mut Client, ops: u64) {
    c.device()
        .block_mut()
        .ftl_mut()
        .nand_mut()
        .arm_power_cut(PowerCut::AtOp(ops));
}

/// Open the store, with a cut during its recovery one time in four.
fn reopen(
    mut c: Client,
    cfg: &StoreConfig,
    ftl_cfg: FtlConfig,
    rng: &mut SmallRng,
) -> Store<Client> {
    for _ in 0..20 {
        if rng.random_range(0..4) == 0 && std::env::var("NO_REOPEN_CUT").is_err() {
            arm(&mut c, rng.random_range(1..40));
        }
        match Store::open(c, cfg.clone()) {
            Ok(mut s) => {
                s.device()
                    .device()
                    .block_mut()
                    .ftl_mut()
                    .nand_mut()
                    .disarm_power_cut();
                return s;
            }
            Err(f) => {
                assert!(f.error.is_power_loss(), "reopen: {}", f.error);
                if std::env::var("KV_DEBUG").is_ok() {
                    eprintln!("reopen cut: {}", f.error);
                }
                let nand = f.dev.into_device().into_block().into_ftl().crash();
                c = recover(nand, ftl_cfg);
            }
        }
    }
    panic!("the store kept failing to open");
}

/// Write zeros over every LBA so the device starts full and its GC runs from the start
/// (zeros keep the device "empty" to the store's format check).
fn prefill(c: &mut Client) {
    use csd_host::CommandIssuer;
    let id = c.identify().clone();
    let step = id.mdts_blocks.max(1) as u64;
    let mut lba = 0;
    while lba < id.lbas {
        let n = step.min(id.lbas - lba);
        c.exec(csd_device::Command::Write {
            lba,
            data: vec![0; n as usize * id.lba_size as usize],
        })
        .unwrap();
        lba += n;
    }
}

/// Changes of one key since the last recovery: (sequence number, new value or deleted).
type History = Vec<(u64, Option<Vec<u8>>)>;

#[derive(Default, Debug)]
struct Tally {
    cuts: u64,
    acked_changes: u64,
    keys_checked: u64,
    lost: u64,
    by_activity: HashMap<String, u64>,
}

fn torture(interface: Interface, rounds: u64, seed: u64) -> Tally {
    let ftl_cfg = FtlConfig {
        gc_free_blocks: 12,
        checkpoint_log_pages: 64,
        map_cache_share: 0.002,
        ..FtlConfig::default()
    };
    let cfg = StoreConfig {
        max_dirty_age_ns: 200_000,
        checkpoint_interval_ns: Some(5_000_000),
        block: csd_kv::BlockOptions {
            gc: true,
            gc_start_used: 0.15,
            ..csd_kv::BlockOptions::default()
        },
        ..small(interface)
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut c = client(ftl_cfg);
    prefill(&mut c);
    let mut s = open(c, cfg.clone());
    let mut t = Tally::default();
    let mut device_gc = 0;
    // The durable state each key had at the last recovery, and changes since (lsn, value).
    let mut base: BTreeMap<u64, Option<Vec<u8>>> = BTreeMap::new();
    let mut since: BTreeMap<u64, History> = BTreeMap::new();
    let mut version = 0u64;
    for _ in 0..rounds {
        arm(s.device(), rng.random_range(50..4000));
        let mut acked = 0;
        let last_activity: String;
        loop {
            version += 1;
            let k = if rng.random_bool(0.8) {
                rng.random_range(0..200u64)
            } else {
                rng.random_range(0..3000u64)
            };
            // A change that fails (the cut struck inside it) may or may not have been
            // applied: it is remembered with an unacknowledgeable sequence number.
            let r = match rng.random_range(0..100) {
                0..80 => {
                    let v = value(k, version, rng.random_range(8..200));
                    s.put(&key(k), &v)
                        .map(|lsn| (lsn, Some(v.clone())))
                        .inspect_err(|_| {
                            since.entry(k).or_default().push((u64::MAX, Some(v)));
                        })
                }
                80..90 => s
                    .delete(&key(k))
                    .map(|_| (s.last_change(), None))
                    .inspect_err(|_| since.entry(k).or_default().push((u64::MAX, None))),
                90..98 => {
                    // A read sees the latest change, durable or not.
                    let want = since
                        .get(&k)
                        .and_then(|h| h.last())
                        .map(|(_, v)| v.clone())
                        .unwrap_or_else(|| base.get(&k).cloned().flatten());
                    match s.get(&key(k)) {
                        Ok(got) => {
                            assert_eq!(got, want, "read of key {k}");
                            continue;
                        }
                        Err(e) => Err(e),
                    }
                }
                98 => s.checkpoint().map(|_| (0, None)),
                _ => s.sync().map(|_| (0, None)),
            };
            match r {
                Ok((0, None)) => {}
                Ok((lsn, v)) => since.entry(k).or_default().push((lsn, v)),
                Err(e) => {
                    assert!(e.is_power_loss(), "unexpected error: {e}");
                    last_activity = format!("{:?} round {}", s.activity(), t.cuts);
                    *t.by_activity
                        .entry(format!("{:?}", s.activity()))
                        .or_default() += 1;
                    break;
                }
            }
            acked = s.acked();
            if std::env::var("KV_CHECK").is_ok() {
                s.device()
                    .device()
                    .block_mut()
                    .ftl_mut()
                    .nand_mut()
                    .disarm_power_cut();
                if let Err(e) = s.check() {
                    panic!("round {}: {e}", t.cuts);
                }
            }
        }
        t.cuts += 1;
        device_gc += s.device().device().block().ftl().stats().gc_victims;
        let c = crash(s, ftl_cfg);
        s = reopen(c, &cfg, ftl_cfg, &mut rng);
        if std::env::var("KV_DEBUG").is_ok() {
            eprintln!("round {} reopened", t.cuts);
        }
        // Check every key touched.
        let keys: Vec<u64> = base.keys().chain(since.keys()).copied().collect();
        for k in keys {
            let got = s.get(&key(k)).unwrap();
            let hist = since.remove(&k).unwrap_or_default();
            let durable = hist
                .iter()
                .rev()
                .find(|(l, _)| *l <= acked)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| base.get(&k).cloned().flatten());
            t.acked_changes += hist.iter().filter(|(l, _)| *l <= acked).count() as u64;
            let later: Vec<_> = hist
                .iter()
                .filter(|(l, _)| *l > acked)
                .map(|(_, v)| v.clone())
                .collect();
            t.keys_checked += 1;
            if got != durable && !later.contains(&got) {
                t.lost += 1;
                eprintln!(
                    "key {k}: got {:?}, durable {:?}, acked {acked}, base {:?}, history {:?}, activity at cut {}",
                    got.as_ref().map(|v| v.len()),
                    durable.map(|v| v.len()),
                    base.get(&k).map(|v| v.as_ref().map(|v| v.len())),
                    hist.iter()
                        .map(|(l, v)| (*l, v.as_ref().map(|v| v.len())))
                        .collect::<Vec<_>>(),
                    last_activity
                );
            }
            base.insert(k, got);
        }
        // The whole tree agrees with the keys' states.
        let all: Vec<(Vec<u8>, Vec<u8>)> = base
            .iter()
            .filter_map(|(k, v)| v.clone().map(|v| (key(*k), v)))
            .collect();
        assert_eq!(
            s.scan(&[0], usize::MAX).unwrap(),
            all,
            "scan after recovery"
        );
    }
    let f = s.device().device().block().ftl().lifetime_stats();
    eprintln!(
        "{interface:?}: {t:?}; device GC victims {device_gc}, device checkpoints {}",
        f.checkpoints
    );
    assert!(f.checkpoints > 0, "device checkpoints ran");
    assert!(device_gc > 0, "device GC ran");
    t
}

#[test]
fn batch_store_loses_no_acknowledged_change() {
    let t = torture(Interface::Batch, 60, 11);
    assert_eq!(t.lost, 0, "{t:?}");
    assert!(t.acked_changes > 1000, "{t:?}");
}

#[test]
fn block_store_loses_no_acknowledged_change() {
    let t = torture(Interface::Block, 120, 12);
    assert_eq!(t.lost, 0, "{t:?}");
    assert!(t.acked_changes > 1000, "{t:?}");
    for a in [Activity::Seal, Activity::Checkpoint] {
        assert!(
            t.by_activity.contains_key(&format!("{a:?}")),
            "no cut during {a:?}: {t:?}"
        );
    }
}

/// A value naming its version outright (the common `value` repeats every 251 versions).
fn mset_value(k: u64, version: u64) -> Vec<u8> {
    let mut v = version.to_le_bytes().to_vec();
    v.extend(value(k, version, 32 + (k % 90) as usize));
    v
}

/// MSET (`Store::put_all`) under power cuts: every group of pairs reads back whole or
/// not at all, and a group the store acknowledged reads back whole. Each key is changed
/// by at most one group between two recoveries, so a group's outcome is readable from
/// its own keys; groups are big enough to span several leaves and to split some, and the
/// cache is tiny, so group pages are evicted into the write buffer while the group runs.
fn mset_torture(interface: Interface, rounds: u64, seed: u64) -> (u64, u64, u64) {
    let ftl_cfg = FtlConfig {
        gc_free_blocks: 12,
        checkpoint_log_pages: 64,
        map_cache_share: 0.002,
        ..FtlConfig::default()
    };
    let cfg = StoreConfig {
        max_dirty_age_ns: 200_000,
        ..small(interface)
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut c = client(ftl_cfg);
    prefill(&mut c);
    let mut s = open(c, cfg.clone());
    let (mut whole, mut none, mut acked_groups) = (0u64, 0u64, 0u64);
    let mut refused = 0u64;
    let mut version = 0u64;
    for round in 0..rounds {
        arm(s.device(), rng.random_range(50..3000));
        // (lsn or MAX when the call failed, keys, version) of every group this round.
        let mut groups: Vec<(u64, Vec<u64>, u64)> = Vec::new();
        let mut used = std::collections::BTreeSet::new();
        let mut acked = 0;
        loop {
            version += 1;
            let n = rng.random_range(2..24usize);
            let mut keys = Vec::with_capacity(n);
            while keys.len() < n {
                let k = rng.random_range(0..6000u64);
                if used.insert(k) {
                    keys.push(k);
                }
            }
            let vals: Vec<(Vec<u8>, Vec<u8>)> = keys
                .iter()
                .map(|&k| (key(k), mset_value(k, version)))
                .collect();
            let pairs: Vec<(&[u8], &[u8])> = vals
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            let r = if rng.random_range(0..10) == 0 {
                s.sync().map(|_| None)
            } else {
                s.put_all(&pairs).map(Some)
            };
            match r {
                Ok(Some(lsn)) => groups.push((lsn, keys, version)),
                Ok(None) => {}
                Err(KvError::GroupTooLarge { .. }) => {
                    // Refused before anything changed: none of its pairs may read back.
                    refused += 1;
                    groups.push((u64::MAX - 1, keys, version));
                }
                Err(e) => {
                    assert!(e.is_power_loss(), "unexpected error: {e}");
                    groups.push((u64::MAX, keys, version));
                    break;
                }
            }
            acked = s.acked();
            if used.len() > 5000 {
                s.sync().unwrap();
                acked = s.acked();
            }
        }
        let c = crash(s, ftl_cfg);
        s = reopen(c, &cfg, ftl_cfg, &mut rng);
        for (lsn, keys, v) in &groups {
            let mut seen = 0;
            for &k in keys {
                let want = mset_value(k, *v);
                if s.get(&key(k)).unwrap().as_deref() == Some(want.as_slice()) {
                    seen += 1;
                }
            }
            assert!(
                seen == 0 || seen == keys.len(),
                "round {round}: group v{v} (lsn {lsn}, acked {acked}) torn: {seen} of {} pairs",
                keys.len()
            );
            if *lsn == u64::MAX - 1 {
                assert_eq!(seen, 0, "round {round}: refused group v{v} was applied");
            }
            if *lsn <= acked {
                acked_groups += 1;
                assert_eq!(
                    seen,
                    keys.len(),
                    "round {round}: acknowledged group v{v} lost"
                );
            }
            if seen == 0 { none += 1 } else { whole += 1 }
        }
    }
    eprintln!("{interface:?}: {refused} groups refused as too large for one buffer");
    (whole, none, acked_groups)
}

#[test]
fn mset_is_all_or_nothing_across_power_cuts_batch() {
    let (whole, none, acked) = mset_torture(Interface::Batch, 25, 21);
    eprintln!("batch: groups whole {whole}, none {none}, acknowledged {acked}");
    assert!(whole > 100 && acked > 50, "too few groups: {whole} {acked}");
}

#[test]
fn mset_is_all_or_nothing_across_power_cuts_block() {
    let (whole, none, acked) = mset_torture(Interface::Block, 25, 22);
    eprintln!("block: groups whole {whole}, none {none}, acknowledged {acked}");
    assert!(whole > 100 && acked > 50, "too few groups: {whole} {acked}");
}

/// FLUSHALL (`Store::clear`) gives the old tree's pages back: the host log unmaps them
/// (block) or the device no longer maps their LPIDs (batch); the empty store works and
/// survives a reopen. A cut at any point of a clear leaves either every key or none.
fn clear_case(interface: Interface, seed: u64) {
    let ftl_cfg = FtlConfig::default();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut s = open(client(ftl_cfg), small(interface));
    let n = 1500u64;
    for round in 0..12 {
        for k in 0..n {
            s.put(&key(k), &value(k, round, 60)).unwrap();
        }
        s.sync().unwrap();
        let pages = s.pages();
        assert!(pages > 20, "{pages} pages");
        if round % 3 == 2 {
            // A cut somewhere inside the clear (or just after it).
            arm(s.device(), rng.random_range(1..60));
            let r = s.clear();
            let c = crash(s, ftl_cfg);
            s = reopen(c, &small(interface), ftl_cfg, &mut rng);
            let got = s.scan(&[0], usize::MAX).unwrap().len() as u64;
            assert!(
                got == 0 || got == n,
                "round {round}: {got} keys after a cut in FLUSHALL ({r:?})"
            );
            s.check().unwrap();
            if got == n {
                s.clear().unwrap();
            }
            assert_eq!(s.len().unwrap(), 0);
            if let Some(mapped) = s.host_log_pages() {
                assert_eq!(
                    mapped, 2,
                    "round {round}: old pages still mapped after reopen"
                );
            }
            continue;
        }
        let released = s.clear().unwrap();
        assert_eq!(released, pages - 2, "round {round}");
        assert_eq!(s.len().unwrap(), 0);
        assert_eq!(s.pages(), 2);
        s.check().unwrap();
        match s.host_log_pages() {
            Some(mapped) => assert_eq!(mapped, 2, "round {round}: superpage and root only"),
            None => {
                let ftl = s.device().device().block_mut().ftl_mut();
                for lpid in 2..pages {
                    assert!(
                        ftl.location_of_lba(lpid).is_none(),
                        "round {round}: LPID {lpid} of the old tree still mapped"
                    );
                }
            }
        }
    }
    // The cleared store reopens empty, and works.
    let c = crash(s, ftl_cfg);
    let mut s = reopen(c, &small(interface), ftl_cfg, &mut rng);
    assert_eq!(s.len().unwrap(), 0);
    s.put(b"k", b"v").unwrap();
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn flushall_releases_the_old_tree_and_is_atomic_batch() {
    clear_case(Interface::Batch, 31);
}

#[test]
fn flushall_releases_the_old_tree_and_is_atomic_block() {
    clear_case(Interface::Block, 32);
}

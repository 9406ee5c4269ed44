//! Direction tests of the batch-io reproduction (§8.2) at a small scale: virtual time, so
//! every figure is deterministic. Each assertion is a headline of the paper whose
//! direction must not flip: batch beats block on write-heavy YCSB (Figure 11d/13), the
//! block interface makes about 17x more done log records per MiB (§8.2.1, Figure 12), and
//! block's read amplification and GC overhead are above batch's (Table 4).

use csd_kv::Interface;
use csd_kv::ycsb::{KeyDist, Workload};
use csd_repro::ycsb::{BenchYcsbArgs, CacheSize, Outcome, run_once};

/// One small run on ox-westlake: 60,000 records, `secs` modeled seconds, the paper's 1 MiB
/// write command (so 17 packets per block write), host and device GC from `gc_start`.
fn run(interface: Interface, workload: Workload, durable: bool, gc_start: f64) -> Outcome {
    let a = BenchYcsbArgs {
        interface,
        workload,
        records: 60_000,
        cache: CacheSize::Percent(20.0),
        checkpoint: durable,
        gc: durable,
        gc_start,
        dist: KeyDist::Zipfian(0.99),
        ops: None,
        duration: Some(0.3),
        wall_duration: None,
        preset: "ox-westlake".into(),
        device_gib: 1.0,
        ways: Some(1),
        dies: None,
        op: 0.3,
        queue_depth: 64,
        seed: 7,
        compare: Vec::new(),
        json: false,
    };
    match run_once(&a, &indicatif::ProgressBar::hidden()) {
        Ok(o) => o,
        Err(e) => panic!("{interface:?} {workload:?} run failed: {e}"),
    }
}

#[test]
fn batch_beats_block_write_heavy_with_17x_fewer_done_records_per_mib() {
    let block = run(Interface::Block, Workload::WriteHeavy, false, 0.5);
    let batch = run(Interface::Batch, Workload::WriteHeavy, false, 0.5);
    let ratio = batch.modeled_ops() / block.modeled_ops();
    assert!(
        ratio > 1.1,
        "write-heavy batch/block {ratio:.2} (paper 1.14-1.68x)"
    );
    let per_mib =
        |o: &Outcome| o.done_records as f64 / (o.dev.host_written as f64 / (1u64 << 20) as f64);
    let (b, t) = (per_mib(&block), per_mib(&batch));
    assert!(
        b / t > 10.0,
        "done records per MiB: block {b:.2}, batch {t:.2} (paper: about 17x)"
    );
    assert!(
        (14.0..=20.0).contains(&b),
        "block: one done record per 64 KiB packet, {b:.2}/MiB"
    );
}

#[test]
fn block_reads_and_collects_more_than_batch_when_gc_runs() {
    // GC from 5% used so that host and device GC both act within a short run.
    let block = run(Interface::Block, Workload::WriteHeavy, true, 0.05);
    let batch = run(Interface::Batch, Workload::WriteHeavy, true, 0.05);
    let (b, t) = (block.paper(), batch.paper());
    assert!(b.gc_read > 0, "host GC ran on block: {:?}", block.host);
    assert!(
        b.ra > t.ra,
        "RA block {:.3} vs batch {:.3} (Table 4)",
        b.ra,
        t.ra
    );
    assert!(
        b.gc_overhead > t.gc_overhead,
        "GC overhead block {:.3} vs batch {:.3} (Table 4)",
        b.gc_overhead,
        t.gc_overhead
    );
    let ratio = batch.modeled_ops() / block.modeled_ops();
    assert!(
        ratio > 1.0,
        "durable write-heavy batch/block {ratio:.2} (paper 2.71x)"
    );
}

//! Tests of the command interface: every command, bad input, queue errors, accounting,
//! arbitration and batch visibility.

use super::*;
use crate::command::*;
use csd_ftl::{FtlConfig, FtlError};
use csd_nand::Nand;
use csd_nand::NandError;
use csd_sim::DeviceConfig;
use csd_sim::wire::build_batch;

const LBA: usize = 4096;
const T0: SimTime = SimTime::ZERO;

fn dev() -> NvmeDevice {
    let cfg = DeviceConfig::preset("tiny").unwrap();
    let nand = Nand::new_in_memory(cfg).unwrap();
    NvmeDevice::new(Ftl::format(nand, FtlConfig::default()).unwrap())
}

fn wr(lba: u64, data: Vec<u8>) -> Command {
    Command::Write { lba, data }
}

fn rd(lba: u64, blocks: u32) -> Command {
    Command::Read { lba, blocks }
}

fn fill(v: u8, blocks: usize) -> Vec<u8> {
    vec![v; blocks * LBA]
}

/// Submit, run and reap one command.
fn run1(d: &mut NvmeDevice, q: QueueId, cmd: Command, at: SimTime) -> Completion {
    let cid = d.submit(q, cmd, at).unwrap();
    assert_eq!(d.process(), 1);
    let c = d.poll(q).unwrap();
    assert_eq!(c.cid, cid);
    c
}

fn data(c: Completion) -> Vec<u8> {
    assert_eq!(c.status, Status::Success, "{}", c.status);
    match c.payload {
        Payload::Data(d) => d,
        p => panic!("expected data, got {p:?}"),
    }
}

fn read(d: &mut NvmeDevice, q: QueueId, lba: u64, blocks: u32) -> Vec<u8> {
    data(run1(d, q, rd(lba, blocks), T0))
}

#[test]
fn every_command_works() {
    let mut d = dev();
    let q = d.create_queue_pair(8).unwrap();

    let c = run1(&mut d, q, Command::Identify, T0);
    assert_eq!(c.acct.host_link_bytes, IDENTIFY_BYTES);
    let Payload::Identify(id) = c.payload else {
        panic!("{c:?}")
    };
    assert_eq!((id.lbas, id.lba_size), (d.block().ftl().lbas(), LBA as u32));
    assert_eq!((id.mdts_blocks, id.max_batch_pages), (128, 340));
    assert_eq!((id.name.as_str(), id.max_queue_pairs), ("tiny", 64));

    let mut w = fill(1, 3);
    w[LBA..2 * LBA].fill(2);
    let c = run1(&mut d, q, wr(10, w.clone()), T0);
    assert_eq!((c.status, c.payload), (Status::Success, Payload::None));
    assert_eq!(read(&mut d, q, 10, 3), w);

    let c = run1(&mut d, q, Command::Trim { lba: 11, blocks: 1 }, T0);
    assert!(c.status.is_success());
    let r = read(&mut d, q, 10, 3);
    assert_eq!(&r[..LBA], &w[..LBA]);
    assert!(r[LBA..2 * LBA].iter().all(|&b| b == 0));

    assert!(run1(&mut d, q, Command::Flush, T0).status.is_success());

    // A batch; within it the later entry for LPID 20 wins.
    let (a, b) = (fill(0xA, 1), fill(0xB, 1));
    let buffer = build_batch(&[(20, &a), (21, &b), (20, &b)], LBA).unwrap();
    let c = run1(&mut d, q, Command::FlushBatch { buffer }, T0);
    assert!(c.status.is_success(), "{}", c.status);
    let lpids = vec![21, 20, 10];
    let c = run1(&mut d, q, Command::ReadLpids { lpids }, T0);
    assert_eq!(data(c), [b.clone(), b, w[..LBA].to_vec()].concat());

    let c = run1(&mut d, q, Command::GetLogPage(LogPage::Smart), T0);
    assert_eq!(c.acct.host_link_bytes, SMART_LOG_BYTES);
    let Payload::Smart(s) = c.payload else {
        panic!("{c:?}")
    };
    assert_eq!(s.host_written_bytes, 6 * LBA as u64);
    assert!(d.poll(q).is_none());
}

/// Everything a refused command could disturb.
fn state(d: &NvmeDevice) -> impl PartialEq + std::fmt::Debug + use<> {
    let b = d.block();
    let f = b.ftl();
    (*f.stats(), *f.nand().stats(), b.controller().counters())
}

#[test]
fn bad_input_gets_a_clear_status_and_changes_nothing() {
    let mut d = dev();
    let q = d.create_queue_pair(4).unwrap();
    let old = fill(7, 4);
    run1(&mut d, q, wr(0, old.clone()), T0);
    let lbas = d.block().ftl().lbas();
    let page = fill(9, 1);
    let good = build_batch(&[(0, &page), (1, &page)], LBA).unwrap();
    let mut corrupt = good.clone();
    corrupt[20] ^= 1; // inside the DESC block: its CRC no longer matches
    let mut bad_magic = good.clone();
    bad_magic[0] ^= 1;
    let batch = |buffer: Vec<u8>| Command::FlushBatch { buffer };
    let lpids = |lpids: Vec<u64>| Command::ReadLpids { lpids };
    let trim = |lba, blocks| Command::Trim { lba, blocks };
    let (range, field) = (0x80, 0x02);
    let cases = [
        (rd(lbas - 1, 2), range, "outside"),
        (rd(u64::MAX, 1), range, "outside"),
        (rd(0, 0), field, "MDTS"),
        (rd(0, 129), field, "MDTS"),
        (wr(lbas, fill(1, 1)), range, "outside"),
        (wr(0, vec![]), field, "multiple"),
        (wr(0, vec![1; 100]), field, "multiple"),
        (wr(0, vec![1; LBA + 1]), field, "multiple"),
        (wr(0, fill(1, 129)), field, "MDTS"),
        (trim(lbas - 1, 2), range, "outside"),
        (trim(0, 0), field, "0 blocks"),
        (batch(corrupt), field, "checksum"),
        (batch(bad_magic), field, "magic"),
        (
            batch(build_batch(&[(0, &page), (lbas, &page)], LBA).unwrap()),
            field,
            "outside",
        ),
        (batch(good[..LBA].to_vec()), field, "DESC"),
        (batch(good[..LBA + 7].to_vec()), field, "DESC"),
        (lpids(vec![]), field, "MDTS"),
        (lpids(vec![0; 129]), field, "MDTS"),
        (lpids(vec![0, lbas]), range, "outside"),
    ];
    let before = state(&d);
    let t = SimTime::from_ns(1_000);
    for (cmd, code, words) in cases {
        let name = cmd.name();
        let c = run1(&mut d, q, cmd, t);
        let s = &c.status;
        assert_eq!((s.sct(), s.code()), (0, code), "{name}: {s}");
        assert!(s.message().contains(words), "{name}: {s}");
        assert_eq!(c.payload, Payload::None);
        let nothing = Accounting {
            submitted: t,
            completed: t,
            ..Default::default()
        };
        assert_eq!(c.acct, nothing, "{name}: a refused command costs nothing");
        assert_eq!(state(&d), before, "{name} changed the device");
    }
    assert_eq!(read(&mut d, q, 0, 4), old);
    d.block_mut().ftl_mut().check_invariants().unwrap();
}

#[test]
fn device_errors_map_to_statuses() {
    let m = |e: FtlError| {
        let s = Status::from(e);
        (s.sct(), s.code())
    };
    let (lba, end, capacity) = (5, 9, 6);
    assert_eq!(m(FtlError::OutOfRange { lba, end, capacity }), (0, 0x80));
    let (got, lba_size) = (3, 4096);
    assert_eq!(m(FtlError::BadLength { got, lba_size }), (0, 0x02));
    assert_eq!(m(FtlError::BadBatch("x".into())), (0, 0x02));
    assert_eq!(m(FtlError::Config("x".into())), (0, 0x02));
    assert_eq!(m(FtlError::NoSpace), (0, 0x81));
    assert_eq!(m(FtlError::NotFormatted), (0, 0x82));
    assert_eq!(m(FtlError::Corrupt("x".into())), (0, 0x06));
    assert_eq!(m(FtlError::Nand(NandError::PowerLoss)), (0, 0x82));
    let ppa = csd_nand::Ppa::new(csd_nand::BlockId(3), 1);
    let failed = NandError::ProgramFailed { ppa, done: T0 };
    assert_eq!(m(FtlError::Nand(failed)), (2, 0x80));
    let unc = Status::from(FtlError::Uncorrectable { lba: 42 });
    assert_eq!(unc, Status::UnrecoveredReadError { lba: 42 });
    assert_eq!((unc.sct(), unc.code()), (2, 0x81));
    assert!(unc.message().contains("LBA 42"));

    // A power cut reaches the host as Namespace Not Ready, not as a panic.
    let mut d = dev();
    let q = d.create_queue_pair(4).unwrap();
    run1(&mut d, q, wr(3, fill(3, 1)), T0);
    d.block_mut().ftl_mut().nand_mut().power_off();
    let c = run1(&mut d, q, rd(3, 1), T0);
    assert_eq!((c.status.sct(), c.status.code()), (0, 0x82), "{}", c.status);
    assert_eq!(c.payload, Payload::None);
}

#[test]
fn queue_errors() {
    let mut d = dev();
    for depth in [0, MAX_QUEUE_DEPTH + 1] {
        let e = d.create_queue_pair(depth).unwrap_err();
        assert_eq!((e.sct(), e.code()), (1, 0x02), "{e}");
    }
    for qid in [QueueId(7), QueueId(0)] {
        let e = d.submit(qid, Command::Flush, T0).unwrap_err();
        assert_eq!((e.sct(), e.code()), (1, 0x01), "{e}");
        assert!(e.message().contains("does not exist"));
        assert!(d.poll(qid).is_none());
        assert!(d.delete_queue_pair(qid).is_err());
    }

    // A full pair refuses more until a completion is reaped.
    let q = d.create_queue_pair(2).unwrap();
    assert_eq!(q, QueueId(1));
    assert_eq!(d.submit(q, wr(5, fill(1, 1)), T0), Ok(Cid(0)));
    assert_eq!(d.submit(q, wr(5, fill(2, 1)), T0), Ok(Cid(1)));
    let e = d.submit(q, wr(5, fill(3, 1)), T0).unwrap_err();
    assert_eq!(e, Status::QueueFull { qid: 1, depth: 2 });
    assert_eq!((e.sct(), e.code()), (0, 0x21));
    assert_eq!(d.process(), 2);
    let e = d.submit(q, wr(5, fill(3, 1)), T0).unwrap_err();
    assert!(
        matches!(e, Status::QueueFull { .. }),
        "unreaped completions count"
    );
    assert_eq!(d.poll(q).unwrap().cid, Cid(0));
    assert_eq!(d.submit(q, wr(5, fill(3, 1)), T0), Ok(Cid(2)));

    // Deleting a pair aborts its pending commands: the third write never happens.
    assert_eq!(d.delete_queue_pair(q), Ok(1));
    let e = d.submit(q, Command::Flush, T0).unwrap_err();
    assert_eq!((e.sct(), e.code()), (1, 0x01));
    assert!(d.poll(q).is_none());
    assert_eq!(d.delete_queue_pair(q).unwrap_err().code(), 0x01);
    let q = d.create_queue_pair(1).unwrap();
    assert_eq!(q, QueueId(1), "freed ids are reused");
    assert_eq!(read(&mut d, q, 5, 1), fill(2, 1));

    // The pair limit.
    for i in 2..=MAX_QUEUE_PAIRS {
        assert_eq!(d.create_queue_pair(1), Ok(QueueId(i)));
    }
    let e = d.create_queue_pair(1).unwrap_err();
    assert_eq!((e.sct(), e.code()), (1, 0x01), "{e}");
    d.delete_queue_pair(QueueId(30)).unwrap();
    assert_eq!(d.create_queue_pair(1), Ok(QueueId(30)));
}

#[test]
fn accounting_of_a_write_and_a_read() {
    let mut d = dev();
    let q = d.create_queue_pair(4).unwrap();
    let bytes = 2 * LBA as u64;
    let at = SimTime::from_ns(5_000);
    let a = run1(&mut d, q, wr(8, fill(4, 2)), at).acct;
    assert_eq!(a.submitted, at);
    assert!(a.completed > at);
    assert_eq!(a.latency_ns, a.completed.since(at));
    assert!(a.flash_programs >= 1, "{a:?}");
    assert_eq!((a.host_link_bytes, a.dram_bytes), (bytes, bytes));

    // Once the write's background programs (log and metadata pages) are done.
    let idle = crate::IoTarget::now(d.block()).max(a.completed);
    let c = run1(&mut d, q, rd(8, 2), idle);
    let a = c.acct;
    assert!(a.flash_reads >= 1, "{a:?}");
    assert_eq!((a.flash_programs, a.flash_erases), (0, 0));
    assert_eq!((a.host_link_bytes, a.dram_bytes), (bytes, bytes));
    // On an idle device the latency is the read path (plus any MAP page read).
    let cfg = d.block().ftl().nand().config().clone();
    let path = cfg.flash.t_read_ns(0)
        + cfg.channel.rate().transfer_ns(bytes)
        + cfg.dram.rate().transfer_ns(bytes)
        + cfg.host_link.rate().transfer_ns(bytes)
        + cfg.host_link.command_overhead_ns();
    assert!(
        a.latency_ns >= path && a.latency_ns < 2 * path,
        "{a:?} vs {path}"
    );
    assert_eq!(data(c), fill(4, 2));
}

#[test]
fn round_robin_across_queue_pairs() {
    let mut d = dev();
    let qw = d.create_queue_pair(8).unwrap();
    let qr = d.create_queue_pair(8).unwrap();
    for v in 1..=3u8 {
        d.submit(qw, wr(9, fill(v, 1)), T0).unwrap();
    }
    for _ in 0..3 {
        d.submit(qr, rd(9, 1), T0).unwrap();
    }
    assert_eq!(d.process(), 6);
    // W1 R W2 R W3 R: each read sees the write just before it.
    for (i, v) in (1..=3u8).enumerate() {
        let w = d.poll(qw).unwrap();
        assert_eq!((w.cid, w.status), (Cid(i as u16), Status::Success));
        let r = d.poll(qr).unwrap();
        assert_eq!(r.cid, Cid(i as u16));
        assert_eq!(data(r), fill(v, 1));
    }
    assert!(d.poll(qw).is_none() && d.poll(qr).is_none());
}

/// batch-io §3.1: a read acknowledged before a batch was issued sees none of it (a);
/// a read issued after the batch was acknowledged sees all of it (b); reads
/// concurrent with batches, on another queue pair, see a time-ordered prefix of each,
/// here none or all (c); a later read sees at least what an earlier one saw (d).
#[test]
fn a_read_sees_all_or_none_of_a_batch() {
    let mut d = dev();
    let qr = d.create_queue_pair(64).unwrap();
    let qb = d.create_queue_pair(64).unwrap();
    let lpids: Vec<u64> = (100..108).collect();
    let n = lpids.len();
    run1(&mut d, qb, wr(100, fill(0xAA, n)), T0);
    let batch = |v: u8| {
        let page = fill(v, 1);
        let pages: Vec<(u64, &[u8])> = lpids.iter().map(|&l| (l, &page[..])).collect();
        let buffer = build_batch(&pages, LBA).unwrap();
        Command::FlushBatch { buffer }
    };
    // How many of the two batches a read's data shows.
    let seen = |buf: &[u8]| -> usize {
        let firsts: Vec<u8> = buf.chunks(LBA).map(|p| p[0]).collect();
        assert!(
            buf.iter().all(|&b| b == buf[0]),
            "part of a batch: {firsts:?}"
        );
        match buf[0] {
            0xAA => 0,
            0xBB => 1,
            0xCC => 2,
            v => panic!("unexpected data {v:#x}"),
        }
    };
    // (a). Done on `qb`, so that the round robin serves `qr` first below.
    assert_eq!(seen(&read(&mut d, qb, 100, n as u32)), 0);

    // Two batches on one pair, reads of both kinds on the other, in flight together.
    let mut now = d.block().controller().now();
    let mut reads = Vec::new();
    for i in 0..12 {
        let cmd = if i % 2 == 0 {
            rd(100, n as u32)
        } else {
            let lpids = lpids.iter().rev().copied().collect();
            Command::ReadLpids { lpids }
        };
        reads.push(d.submit(qr, cmd, now).unwrap());
        match i {
            1 => drop(d.submit(qb, batch(0xBB), now).unwrap()),
            3 => drop(d.submit(qb, batch(0xCC), now).unwrap()),
            _ => {}
        }
        now = now.after(10_000);
    }
    assert_eq!(d.process(), 14);
    let mut outcomes = Vec::new();
    for cid in reads {
        let c = d.poll(qr).unwrap();
        assert_eq!(c.cid, cid);
        outcomes.push(seen(&data(c)));
    }
    assert!(outcomes.is_sorted(), "(d) violated: {outcomes:?}");
    // Arrival order: R0, then B1 and R1 together (the round robin, having served `qr`
    // last, takes `qb` first), R2, then B2 and R3 together (`qb` first again): so reads
    // before, between and after the batches.
    assert_eq!(&outcomes[..4], &[0, 1, 1, 2], "{outcomes:?}");
    let mut acked = T0;
    for _ in 0..2 {
        let c = d.poll(qb).unwrap();
        assert!(c.status.is_success(), "{}", c.status);
        acked = acked.max(c.acct.completed);
    }
    // (b)
    assert_eq!(seen(&data(run1(&mut d, qr, rd(100, n as u32), acked))), 2);
}

#[test]
fn smart_log_after_writes() {
    let mut d = dev();
    let q = d.create_queue_pair(4).unwrap();
    for i in 0..50u64 {
        let c = run1(&mut d, q, wr(i * 3, fill(i as u8, 1)), T0);
        assert!(c.status.is_success());
    }
    read(&mut d, q, 0, 4);
    let c = run1(&mut d, q, Command::GetLogPage(LogPage::Smart), T0);
    let Payload::Smart(s) = c.payload else {
        panic!("{c:?}")
    };
    assert_eq!(s.host_written_bytes, 50 * LBA as u64);
    assert_eq!(s.host_read_bytes, 4 * LBA as u64);
    assert!(s.write_amplification >= 1.0, "{s:?}");
    assert!(
        s.flash_programs.user >= 25 && s.flash_programs.meta >= 1,
        "{s:?}"
    );
    assert!(s.free_blocks > 0 && s.erase_count_max >= s.erase_count_min);
    assert_eq!(s.last_recovery_modeled_s, None);
    assert_eq!(s, SmartLog::from_ftl(d.block().ftl()));
}

/// A tiny device with the per-command costs and parallelism a test chooses.
fn dev_with(sets: &[String]) -> NvmeDevice {
    let cfg =
        DeviceConfig::from_toml_with_overrides(DeviceConfig::preset_toml("tiny").unwrap(), sets)
            .unwrap();
    let nand = Nand::new_in_memory(cfg).unwrap();
    NvmeDevice::new(Ftl::format(nand, FtlConfig::default()).unwrap())
}

/// What a run leaves behind that the order of submission must not change.
fn totals(d: &NvmeDevice) -> impl PartialEq + std::fmt::Debug + use<> {
    let b = d.block();
    let busy: Vec<u64> = crate::IoTarget::utilization(b, 1)
        .iter()
        .map(|u| u.busy_ns)
        .collect();
    (
        *b.ftl().stats(),
        *b.ftl().nand().stats(),
        b.controller().counters(),
        b.controller().commands(),
        busy,
    )
}

/// A workload of independent commands: reads of LBAs written beforehand and writes of
/// other LBAs, each with its queue pair and its submission instant.
#[derive(Debug, Clone)]
struct Job {
    queue: usize,
    at: u64,
    write: bool,
    lba: u64,
    blocks: u32,
}

const PREWRITTEN: u64 = 64;

fn run_jobs(sets: &[String], jobs: &[Job], order: &[usize]) -> (Vec<Completion>, String) {
    let (out, d, _) = submit_jobs(sets, jobs, order, false);
    (out, format!("{:?}", totals(&d)))
}

/// Submit `jobs` in `order` on four queue pairs of a fresh device (its LBAs prewritten
/// first), process and poll them: their completions and the device. With `events` the
/// jobs are recorded into the event core (submitted at final instants, as a host with a
/// clock of its own does) and then booked; completions carry their final instants (and
/// latencies from them), and the core's graph comes back.
fn submit_jobs(
    sets: &[String],
    jobs: &[Job],
    order: &[usize],
    events: bool,
) -> (Vec<Completion>, NvmeDevice, Option<csd_sim::events::Graph>) {
    let mut d = dev_with(sets);
    let q0 = d.create_queue_pair(PREWRITTEN as u32).unwrap();
    d.submit(q0, wr(0, fill(7, PREWRITTEN as usize)), T0)
        .unwrap();
    d.process();
    let w = d.poll(q0).unwrap();
    assert_eq!(w.status, Status::Success);
    let start = w.acct.completed.ns();
    let rec = events.then(|| {
        let r = csd_sim::events::Recording::start().expect("no recording on this thread");
        r.graph(|g| g.record_trace());
        r
    });
    let queues: Vec<QueueId> = (0..4).map(|_| d.create_queue_pair(64).unwrap()).collect();
    let mut ids = Vec::new();
    for &i in order {
        let j = &jobs[i];
        let cmd = if j.write {
            wr(j.lba, fill(j.lba as u8, j.blocks as usize))
        } else {
            rd(j.lba, j.blocks)
        };
        let cid = d
            .submit(queues[j.queue], cmd, SimTime::from_ns(start + j.at))
            .unwrap();
        ids.push((i, cid));
    }
    assert_eq!(d.process(), jobs.len());
    let mut out: Vec<Option<Completion>> = vec![None; jobs.len()];
    for &q in &queues {
        while let Some(c) = d.poll(q) {
            let i = ids
                .iter()
                .find(|&&(i, cid)| cid == c.cid && queues[jobs[i].queue] == q)
                .unwrap()
                .0;
            out[i] = Some(c);
        }
    }
    let mut out: Vec<Completion> = out.into_iter().map(Option::unwrap).collect();
    let graph = rec.map(|r| {
        csd_sim::events::run_all(&mut d);
        for c in &mut out {
            c.acct.completed = csd_sim::events::value(c.acct.completed);
            c.acct.latency_ns = c.acct.completed.since(c.acct.submitted);
        }
        d.settle_instants(&mut csd_sim::events::value);
        r.finish()
    });
    (out, d, graph)
}

fn jobs_strategy() -> impl proptest::strategy::Strategy<Value = Vec<Job>> {
    use proptest::prelude::*;
    proptest::collection::vec((0usize..4, 0u64..400_000, any::<bool>(), 1u32..5), 1..40).prop_map(
        |v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (queue, at, write, blocks))| Job {
                    queue,
                    // Instants on a 50 µs grid, so that some arrive together.
                    at: at / 50_000 * 50_000,
                    write,
                    // Reads of the prewritten LBAs, writes past them: independent.
                    lba: if write {
                        PREWRITTEN + 8 * i as u64
                    } else {
                        (i as u64 * 13) % (PREWRITTEN - 4)
                    },
                    blocks,
                })
                .collect()
        },
    )
}

/// Two submission orders of `jobs`: by submission instant, and a random interleaving
/// (from `seed`) of the four pairs' sequences, each pair's own commands in their order (a
/// submission queue is FIFO).
fn orders(jobs: &[Job], seed: u64) -> (Vec<usize>, Vec<usize>) {
    use rand::{SeedableRng, seq::SliceRandom};
    let mut canonical: Vec<usize> = (0..jobs.len()).collect();
    canonical.sort_by_key(|&i| (jobs[i].at, i));
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut tags: Vec<usize> = canonical.iter().map(|&i| jobs[i].queue).collect();
    tags.shuffle(&mut rng);
    let mut per_queue: Vec<std::collections::VecDeque<usize>> = vec![Default::default(); 4];
    for &i in &canonical {
        per_queue[jobs[i].queue].push_back(i);
    }
    let shuffled = tags
        .iter()
        .map(|&q| {
            per_queue[q]
                .pop_front()
                .expect("as many tags as jobs per pair")
        })
        .collect();
    (canonical, shuffled)
}

fn device_strategy() -> impl proptest::strategy::Strategy<Value = Vec<String>> {
    use proptest::prelude::*;
    (2u32..5, 1u32..3, 0u32..30, 0u32..30, 0u32..15, 1u32..3).prop_map(
        |(ch, ways, overhead, latency, fw, cores)| {
            vec![
                format!("geometry.channels={ch}"),
                format!("geometry.ways={ways}"),
                format!("host_link.command_overhead_us={overhead}"),
                format!("host_link.command_latency_us={latency}"),
                format!("cpu.command_us={fw}"),
                format!("cpu.cores={cores}"),
            ]
        },
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Issue 30, property 1: for independent commands with fixed submission instants,
    /// completion times, payloads and every counter are the same whatever order the
    /// host code submits them in (each pair's own commands in their order of arrival:
    /// a submission queue is FIFO).
    #[test]
    fn completions_do_not_depend_on_submission_order(
        sets in device_strategy(),
        jobs in jobs_strategy(),
        seed in 0u64..u64::MAX,
    ) {
        let (canonical, shuffled) = orders(&jobs, seed);
        let (a, ta) = run_jobs(&sets, &jobs, &canonical);
        let (b, tb) = run_jobs(&sets, &jobs, &shuffled);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            proptest::prop_assert_eq!(&x.status, &y.status, "job {}", i);
            proptest::prop_assert_eq!(x.acct, y.acct, "job {}", i);
            proptest::prop_assert_eq!(&x.payload, &y.payload, "job {}", i);
        }
        proptest::prop_assert_eq!(ta, tb);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Issue 30 on the event core through the NVMe executor with several queue pairs:
    /// completions, payloads and counters do not depend on the order the host code
    /// submits in; every resource serves first-come first-served; nothing is booked
    /// outside the core, submitted behind a booking or decided on an unfixed instant.
    #[test]
    fn on_the_event_core_completions_do_not_depend_on_submission_order(
        sets in device_strategy(),
        jobs in jobs_strategy(),
        seed in 0u64..u64::MAX,
    ) {
        let (canonical, shuffled) = orders(&jobs, seed);
        let (a, da, ga) = submit_jobs(&sets, &jobs, &canonical, true);
        let (b, db, gb) = submit_jobs(&sets, &jobs, &shuffled, true);
        for g in [ga.unwrap(), gb.unwrap()] {
            let k = g.counters();
            proptest::prop_assert!(k.booked as usize >= jobs.len(), "{:?}", k);
            proptest::prop_assert_eq!(
                (k.late_arrivals, k.unrecorded, k.stale, k.unfixed_comparisons, g.pending()),
                (0, 0, 0, 0, 0)
            );
            if let Err(e) = csd_sim::events::first_come_first_served(g.trace()) {
                proptest::prop_assert!(false, "{}", e);
            }
        }
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            proptest::prop_assert!(x.acct.completed.is_final(), "job {}", i);
            proptest::prop_assert_eq!(&x.status, &y.status, "job {}", i);
            proptest::prop_assert_eq!(x.acct, y.acct, "job {}", i);
            proptest::prop_assert_eq!(&x.payload, &y.payload, "job {}", i);
        }
        proptest::prop_assert_eq!(format!("{:?}", totals(&da)), format!("{:?}", totals(&db)));
    }
}

/// Issue 30, property 3: with many commands in flight and no data, throughput is
/// bounded by the command-processing resource (firmware time on the embedded cores),
/// and the fixed latency overlaps across commands instead of serializing them.
#[test]
fn throughput_of_empty_commands_is_bounded_by_command_processing() {
    const N: u64 = 2_000;
    let run = |latency: u32, fw: u32, cores: u32| {
        let mut d = dev_with(&[
            "host_link.command_overhead_us=0".into(),
            format!("host_link.command_latency_us={latency}"),
            format!("cpu.command_us={fw}"),
            format!("cpu.cores={cores}"),
        ]);
        let qs: Vec<QueueId> = (0..8).map(|_| d.create_queue_pair(1024).unwrap()).collect();
        for i in 0..N {
            d.submit(qs[(i % 8) as usize], Command::Flush, T0).unwrap();
        }
        assert_eq!(d.process(), N as usize);
        let mut last = SimTime::ZERO;
        for &q in &qs {
            while let Some(c) = d.poll(q) {
                assert_eq!(c.status, Status::Success, "{}", c.status);
                last = last.max(c.acct.completed);
            }
        }
        last.ns()
    };
    // 25 µs of latency and no processing cost: every command overlaps (one latency).
    assert_eq!(run(25, 0, 1), 25_000);
    // 2 µs of firmware on one core: N x 2 µs, plus one latency; not N x 25 µs.
    let t = run(25, 2, 1);
    assert_eq!(t, N * 2_000 + 25_000);
    let ops_per_s = N as f64 / (t as f64 / 1e9);
    assert!(ops_per_s > 1e6 / 25.0 * 10.0, "{ops_per_s}");
    // Two cores handle twice the commands per second.
    assert_eq!(run(25, 2, 2), N * 1_000 + 25_000);
}

#[test]
fn weighted_round_robin_serves_urgent_then_by_weight() {
    let mut d = dev();
    assert!(matches!(
        d.set_arbitration(Arbitration::Weighted {
            high: 0,
            medium: 1,
            low: 1
        }),
        Err(Status::InvalidField(_))
    ));
    d.set_arbitration(Arbitration::Weighted {
        high: 3,
        medium: 2,
        low: 1,
    })
    .unwrap();
    let low = d.create_queue_pair_with(16, QueuePriority::Low).unwrap();
    let med = d.create_queue_pair_with(16, QueuePriority::Medium).unwrap();
    let high = d.create_queue_pair_with(16, QueuePriority::High).unwrap();
    let urgent = d.create_queue_pair_with(16, QueuePriority::Urgent).unwrap();
    for &q in &[low, med, high, urgent] {
        for _ in 0..6 {
            d.submit(q, Command::Flush, T0).unwrap();
        }
    }
    // A later arrival never goes before an earlier one, whatever its class.
    d.submit(urgent, Command::Flush, SimTime::from_ns(1))
        .unwrap();
    let mut picked = Vec::new();
    while let Some(slot) = d.arbitrate() {
        let q = d.queues[slot].as_mut().unwrap();
        q.sq.pop_front();
        picked.push(QueueId(slot as u16 + 1));
    }
    let name = |q: QueueId| match q {
        q if q == urgent => 'U',
        q if q == high => 'H',
        q if q == med => 'M',
        _ => 'L',
    };
    let s: String = picked.into_iter().map(name).collect();
    // Urgent first; then rounds of 3 high, 2 medium, 1 low while each class has work;
    // the urgent command that arrived at 1 ns last.
    assert_eq!(s, "UUUUUUHHHMMLHHHMMLMMLLLLU");
}

/// One step of [`reads_into_buffers_given_back_show_only_the_data_read`].
#[derive(Debug, Clone)]
enum BufOp {
    Write {
        lba: u64,
        blocks: u32,
        fill: u8,
    },
    Trim {
        lba: u64,
        blocks: u64,
    },
    Flush,
    Read {
        lba: u64,
        blocks: u32,
    },
    /// A bad Read (past the end): its error must not leave a buffer behind.
    ReadPastEnd {
        blocks: u32,
    },
}

fn buf_ops() -> impl proptest::strategy::Strategy<Value = Vec<BufOp>> {
    use proptest::prelude::*;
    let op = prop_oneof![
        4 => (0u64..96, 1u32..9, 1u8..255).prop_map(|(lba, blocks, fill)| BufOp::Write { lba, blocks, fill }),
        1 => (0u64..96, 1u64..9).prop_map(|(lba, blocks)| BufOp::Trim { lba, blocks }),
        1 => Just(BufOp::Flush),
        4 => (0u64..96, 1u32..9).prop_map(|(lba, blocks)| BufOp::Read { lba, blocks }),
        1 => (1u32..9).prop_map(|blocks| BufOp::ReadPastEnd { blocks }),
    ];
    proptest::collection::vec(op, 1..60)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Read payloads given back ([`NvmeDevice::give_back`]) and reused by later Reads
    /// hold exactly the data read: every Read, into a buffer given back scribbled over,
    /// equals a model of the LBAs (written bytes, zeros where never written or trimmed),
    /// whether its LBAs sit in the write buffer, on flash or nowhere.
    #[test]
    fn reads_into_buffers_given_back_show_only_the_data_read(ops in buf_ops()) {
        let mut d = dev();
        let q = d.create_queue_pair(8).unwrap();
        let lbas = d.block().ftl().lbas();
        let mut model = [0u8; 96 + 9];
        for op in ops {
            match op {
                BufOp::Write { lba, blocks, fill: v } => {
                    let c = run1(&mut d, q, wr(lba, fill(v, blocks as usize)), T0);
                    proptest::prop_assert_eq!(&c.status, &Status::Success);
                    model[lba as usize..(lba + u64::from(blocks)) as usize].fill(v);
                }
                BufOp::Trim { lba, blocks } => {
                    let c = run1(&mut d, q, Command::Trim { lba, blocks }, T0);
                    proptest::prop_assert_eq!(&c.status, &Status::Success);
                    model[lba as usize..(lba + blocks) as usize].fill(0);
                }
                BufOp::Flush => {
                    let c = run1(&mut d, q, Command::Flush, T0);
                    proptest::prop_assert_eq!(&c.status, &Status::Success);
                }
                BufOp::Read { lba, blocks } => {
                    let mut got = read(&mut d, q, lba, blocks);
                    let want: Vec<u8> = model[lba as usize..(lba + u64::from(blocks)) as usize]
                        .iter()
                        .flat_map(|&v| std::iter::repeat_n(v, LBA))
                        .collect();
                    proptest::prop_assert!(got == want, "Read of {} blocks at {}", blocks, lba);
                    // Scribbled over, as a host's buffer would be, and given back.
                    got.fill(0xA5);
                    d.give_back(got);
                }
                BufOp::ReadPastEnd { blocks } => {
                    let c = run1(&mut d, q, rd(lbas - 1, blocks + 1), T0);
                    proptest::prop_assert!(c.status != Status::Success);
                }
            }
        }
        proptest::prop_assert!(d.spare.len() <= SPARE_READ_BUFFERS);
    }
}

/// Buffers over MDTS, empty ones and those past the pool's size are not kept.
#[test]
fn give_back_keeps_only_read_sized_buffers_up_to_its_bound() {
    let mut d = dev();
    let max = d.mdts() as usize * LBA;
    d.give_back(Vec::new());
    d.give_back(vec![0; max + LBA]);
    assert!(d.spare.is_empty());
    for _ in 0..SPARE_READ_BUFFERS + 3 {
        d.give_back(vec![1; LBA]);
    }
    assert_eq!(d.spare.len(), SPARE_READ_BUFFERS);
    // A Read of another length allocates; one of the kept length takes one.
    let q = d.create_queue_pair(8).unwrap();
    assert_eq!(read(&mut d, q, 0, 2), vec![0u8; 2 * LBA]);
    assert_eq!(d.spare.len(), SPARE_READ_BUFFERS);
    assert_eq!(read(&mut d, q, 0, 1), vec![0u8; LBA]);
    assert_eq!(d.spare.len(), SPARE_READ_BUFFERS - 1);
}

//! The server against a client of our own over a Unix socket: negotiation, every
//! command against a reference model (aligned and unaligned), error replies, several
//! connections at once, clients that vanish mid-request, paced replies and shutdown.

mod common;

use common::{Client, Running};
use csd_nbd::ServerConfig;
use csd_nbd::proto::*;
use csd_sim::ClockMode;
use csd_sim::events::TimeModel;
use proptest::prelude::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const LBA: u64 = 4096;

fn fill(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn negotiation_options() {
    let srv = Running::start(ServerConfig {
        export_name: "disk".into(),
        ..Default::default()
    });
    let mut s = Client::handshake(&srv.socket).unwrap();

    // LIST: one export, then ACK.
    let r = Client::option(&mut s, OPT_LIST, &[]).unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].1, REP_SERVER);
    assert_eq!(&r[0].2[..4], &4u32.to_be_bytes());
    assert_eq!(&r[0].2[4..8], b"disk");
    assert_eq!(r[1].1, REP_ACK);
    assert_eq!(
        Client::option(&mut s, OPT_LIST, b"x").unwrap()[0].1,
        REP_ERR_INVALID
    );

    // Structured replies, TLS, meta contexts: unsupported, negotiation goes on.
    for opt in [
        OPT_STRUCTURED_REPLY,
        OPT_STARTTLS,
        OPT_LIST_META_CONTEXT,
        OPT_SET_META_CONTEXT,
        OPT_EXTENDED_HEADERS,
        999,
    ] {
        let r = Client::option(&mut s, opt, &[]).unwrap();
        assert_eq!((r.len(), r[0].0, r[0].1), (1, opt, REP_ERR_UNSUP));
    }

    // INFO: size, name and description on request, block sizes always.
    let info = InfoRequest {
        name: b"disk".to_vec(),
        requests: vec![INFO_NAME, INFO_DESCRIPTION],
    };
    let r = Client::option(&mut s, OPT_INFO, &info.encode()).unwrap();
    let kinds: Vec<u16> = r
        .iter()
        .filter(|x| x.1 == REP_INFO)
        .map(|x| u16::from_be_bytes([x.2[0], x.2[1]]))
        .collect();
    assert_eq!(
        kinds,
        [INFO_EXPORT, INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]
    );
    let bs = &r[3].2;
    let sizes: Vec<u32> = bs[2..]
        .chunks(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(sizes, [1, 4096, 32 << 20]);
    assert!(String::from_utf8_lossy(&r[2].2[2..]).contains("tiny"));
    assert_eq!(r.last().unwrap().1, REP_ACK);

    // Unknown export; malformed data; a too-long option.
    let bad = InfoRequest {
        name: b"nope".to_vec(),
        requests: vec![],
    };
    let r = Client::option(&mut s, OPT_GO, &bad.encode()).unwrap();
    assert_eq!(r[0].1, REP_ERR_UNKNOWN);
    assert!(String::from_utf8_lossy(&r[0].2).contains("disk"));
    let r = Client::option(&mut s, OPT_GO, &[0, 0, 0, 9]).unwrap();
    assert_eq!(r[0].1, REP_ERR_INVALID);
    let r = Client::option(&mut s, OPT_INFO, &vec![0u8; 70_000]).unwrap();
    assert_eq!(r[0].1, REP_ERR_TOO_BIG);

    // ABORT is acknowledged and the session ends.
    let r = Client::option(&mut s, OPT_ABORT, &[]).unwrap();
    assert_eq!(r[0].1, REP_ACK);
    let mut b = [0u8; 1];
    assert_eq!(s.read(&mut b).unwrap(), 0);

    // GO by name and by the default name; EXPORT_NAME.
    let c = Client::go(&srv.socket, "disk").unwrap();
    let size = c.size;
    assert!(size > 0 && size.is_multiple_of(LBA));
    let flags = TFLAG_HAS_FLAGS
        | TFLAG_SEND_FLUSH
        | TFLAG_SEND_FUA
        | TFLAG_SEND_TRIM
        | TFLAG_SEND_WRITE_ZEROES
        | TFLAG_CAN_MULTI_CONN;
    assert_eq!(c.flags, flags);
    c.disconnect();
    Client::go(&srv.socket, "").unwrap().disconnect();
    let mut s = Client::handshake(&srv.socket).unwrap();
    Client::send_option(&mut s, OPT_EXPORT_NAME, b"disk").unwrap();
    let mut b = [0u8; 10];
    s.read_exact(&mut b).unwrap();
    assert_eq!(u64::from_be_bytes(b[..8].try_into().unwrap()), size);
    // An unknown name on EXPORT_NAME cannot be answered: the server hangs up.
    let mut s = Client::handshake(&srv.socket).unwrap();
    Client::send_option(&mut s, OPT_EXPORT_NAME, b"nope").unwrap();
    assert_eq!(s.read(&mut [0u8; 1]).unwrap(), 0);
}

#[test]
fn bad_client_flags_and_magic_drop_only_that_connection() {
    let srv = Running::start(ServerConfig::default());
    let mut s = std::os::unix::net::UnixStream::connect(&srv.socket).unwrap();
    s.read_exact(&mut [0u8; 18]).unwrap();
    s.write_all(&0x80u32.to_be_bytes()).unwrap();
    assert_eq!(s.read(&mut [0u8; 1]).unwrap(), 0);

    let mut c = srv.client();
    c.s.write_all(&[0xAB; 28]).unwrap();
    assert_eq!(c.s.read(&mut [0u8; 1]).unwrap(), 0);
    assert_eq!(srv.server.stats().protocol_errors, 1);

    let mut c = srv.client();
    assert_eq!(c.write(0, &fill(1, 4096)), 0);
    assert_eq!(c.read(0, 4096).unwrap(), fill(1, 4096));
}

#[test]
fn error_replies() {
    let srv = Running::start(ServerConfig::default());
    let mut c = srv.client();
    let size = c.size;
    let blk = fill(3, 4096);
    assert_eq!(c.read(size - 4096, 8192), Err(EINVAL));
    assert_eq!(c.read(u64::MAX - 10, 100), Err(EINVAL));
    assert_eq!(c.write(size - 100, &blk[..200]), ENOSPC);
    assert_eq!(c.simple(CMD_WRITE_ZEROES, 0, size, 1), ENOSPC);
    assert_eq!(c.simple(CMD_TRIM, 0, size - 4096, 8192), EINVAL);
    assert_eq!(c.read(0, (32 << 20) + 1), Err(EINVAL));
    // An oversized write's payload is skipped; the stream stays in step.
    let big = vec![7u8; (32 << 20) + 4096];
    assert_eq!(c.write(0, &big), EINVAL);
    assert_eq!(c.simple(CMD_CACHE, 0, 0, 4096), EINVAL);
    assert_eq!(c.simple(CMD_BLOCK_STATUS, 0, 0, 4096), EINVAL);
    assert_eq!(c.simple(77, 0, 0, 0), EINVAL);
    assert_eq!(c.simple(CMD_FLUSH, 0, 0, 1), EINVAL);
    assert_eq!(c.simple(CMD_FLUSH, CMD_FLAG_FUA, 0, 0), EINVAL);
    assert_eq!(c.write_flags(0, &blk, CMD_FLAG_NO_HOLE), EINVAL);
    assert_eq!(c.simple(CMD_TRIM, 1 << 8, 0, 4096), EINVAL);
    let c2 = c.send(CMD_READ, 1 << 2, 0, 4096, &[]); // DF without structured replies
    assert_eq!(c.reply().unwrap(), (EINVAL, c2));
    // None of that touched the device.
    assert_eq!(c.read(0, 8192).unwrap(), vec![0u8; 8192]);
    assert_eq!(srv.server.stats().writes.count, 0);
    assert!(srv.server.stats().refused >= 14);
    // Zero-length requests succeed and do nothing.
    assert_eq!(c.read(0, 0).unwrap(), Vec::<u8>::new());
    assert_eq!(c.write(0, &[]), 0);
    assert_eq!(c.simple(CMD_TRIM, 0, 0, 0), 0);
    assert_eq!(c.simple(CMD_FLUSH, 0, 0, 0), 0);
    c.disconnect();
}

#[test]
fn read_only_export() {
    let srv = Running::start(ServerConfig {
        read_only: true,
        ..Default::default()
    });
    let mut c = srv.client();
    assert_ne!(c.flags & TFLAG_READ_ONLY, 0);
    assert_eq!(c.write(0, &fill(1, 4096)), EPERM);
    assert_eq!(c.simple(CMD_TRIM, 0, 0, 4096), EPERM);
    assert_eq!(c.simple(CMD_WRITE_ZEROES, 0, 0, 4096), EPERM);
    assert_eq!(c.read(0, 4096).unwrap(), vec![0; 4096]);
    assert_eq!(c.simple(CMD_FLUSH, 0, 0, 0), 0);
}

/// A device that accepts no writes (opened read-only, or at its end of life) keeps
/// serving reads; writes, trims and write-zeroes get EPERM, as on a read-only export.
#[test]
fn a_write_protected_device_serves_reads_and_refuses_writes_with_eperm() {
    use csd_device::NvmeDevice;
    use csd_ftl::{Ftl, FtlConfig};
    use csd_sim::SimTime;
    let cfg = csd_sim::DeviceConfig::preset("tiny").unwrap();
    let mut ftl = Ftl::format(
        csd_nand::Nand::new_in_memory(cfg).unwrap(),
        FtlConfig::default(),
    )
    .unwrap();
    ftl.write(0, &fill(5, 4096), SimTime::ZERO).unwrap();
    let nand = ftl.shutdown(SimTime::ZERO).unwrap();
    let ro = Ftl::open_read_only(nand, FtlConfig::default())
        .map_err(|e| e.error)
        .unwrap();
    let srv = Running::start_with(NvmeDevice::new(ro), ServerConfig::default());
    let mut c = srv.client();
    assert_eq!(c.read(0, 4096).unwrap(), fill(5, 4096));
    assert_eq!(c.write(0, &fill(1, 4096)), EPERM);
    assert_eq!(c.simple(CMD_TRIM, 0, 0, 4096), EPERM);
    assert_eq!(c.read(0, 4096).unwrap(), fill(5, 4096));
}

/// A sector whose bytes no longer match their checksum is a read error (EIO) naming
/// nothing else: the LBAs around it read fine.
#[test]
fn a_damaged_sector_reads_as_eio() {
    use csd_device::NvmeDevice;
    use csd_ftl::{Ftl, FtlConfig};
    use csd_sim::SimTime;
    let cfg = csd_sim::DeviceConfig::preset("tiny").unwrap();
    let mut ftl = Ftl::format(
        csd_nand::Nand::new_in_memory(cfg).unwrap(),
        FtlConfig::default(),
    )
    .unwrap();
    ftl.write(0, &fill(6, 4 * 4096), SimTime::ZERO).unwrap();
    let (ppa, s) = ftl.location_of_lba(2).unwrap();
    ftl.nand_mut().corrupt(ppa, s, 9, 0x40).unwrap();
    let srv = Running::start_with(NvmeDevice::new(ftl), ServerConfig::default());
    let mut c = srv.client();
    assert_eq!(
        c.read(0, 2 * 4096).unwrap(),
        fill(6, 4 * 4096)[..2 * 4096].to_vec()
    );
    assert_eq!(c.read(2 * 4096, 4096).unwrap_err(), EIO);
    assert_eq!(
        c.read(3 * 4096, 4096).unwrap(),
        fill(6, 4 * 4096)[3 * 4096..].to_vec()
    );
}

/// One operation of the model-based test.
#[derive(Debug, Clone)]
enum Op {
    Write {
        off: u64,
        len: u32,
        seed: u64,
        fua: bool,
    },
    Read {
        off: u64,
        len: u32,
    },
    Trim {
        off: u64,
        len: u32,
    },
    Zero {
        off: u64,
        len: u32,
        no_hole: bool,
    },
    Flush,
}

/// Offsets and lengths within the first 2 MiB, often unaligned, sometimes across the
/// 512 KiB transfer limit.
fn op() -> impl Strategy<Value = Op> {
    let off = prop_oneof![
        (0u64..512).prop_map(|b| b * LBA),
        0u64..(2 << 20) - 4096,
        (0u64..512).prop_map(|b| b * LBA + 4090),
    ];
    let len = prop_oneof![
        (1u32..4).prop_map(|b| b * 4096),
        1u32..10_000,
        Just(600 << 10),
        (1u32..130).prop_map(|b| b * 4096),
    ];
    prop_oneof![
        4 => (off.clone(), len.clone(), any::<u64>(), any::<bool>())
            .prop_map(|(off, len, seed, fua)| Op::Write { off, len, seed, fua }),
        3 => (off.clone(), len.clone()).prop_map(|(off, len)| Op::Read { off, len }),
        1 => (off.clone(), len.clone()).prop_map(|(off, len)| Op::Trim { off, len }),
        1 => (off, len, any::<bool>())
            .prop_map(|(off, len, no_hole)| Op::Zero { off, len, no_hole }),
        1 => Just(Op::Flush),
    ]
}

/// Run `ops` on a server made with `cfg` against a byte-array model, reads checked
/// byte for byte; the server's statistics.
fn run_against_the_model(
    cfg: ServerConfig,
    ops: Vec<Op>,
) -> Result<csd_nbd::ServerStats, TestCaseError> {
    let srv = Running::start(cfg);
    let mut c = srv.client();
    let mut model = vec![0u8; 3 << 20];
    for op in ops {
        match op {
            Op::Write {
                off,
                len,
                seed,
                fua,
            } => {
                let d = fill(seed, len as usize);
                let f = if fua { CMD_FLAG_FUA } else { 0 };
                prop_assert_eq!(c.write_flags(off, &d, f), 0);
                model[off as usize..off as usize + d.len()].copy_from_slice(&d);
            }
            Op::Read { off, len } => {
                let got = c.read(off, len).unwrap();
                prop_assert!(
                    got == model[off as usize..(off + len as u64) as usize],
                    "read {off}+{len}"
                );
            }
            Op::Trim { off, len } => {
                prop_assert_eq!(c.simple(CMD_TRIM, 0, off, len), 0);
                // Whole LBAs inside the range are unmapped and read as zeros.
                let (a, b) = (off.div_ceil(LBA) * LBA, (off + len as u64) / LBA * LBA);
                if a < b {
                    model[a as usize..b as usize].fill(0);
                }
            }
            Op::Zero { off, len, no_hole } => {
                let f = if no_hole { CMD_FLAG_NO_HOLE } else { 0 };
                prop_assert_eq!(c.simple(CMD_WRITE_ZEROES, f, off, len), 0);
                model[off as usize..(off + len as u64) as usize].fill(0);
            }
            Op::Flush => prop_assert_eq!(c.simple(CMD_FLUSH, 0, 0, 0), 0),
        }
    }
    prop_assert_eq!(c.read(0, 3 << 20).unwrap(), model);
    c.disconnect();
    if let Some(k) = srv.server.event_counters() {
        prop_assert!(k.booked > 0);
        prop_assert_eq!(k.anomalies(), [0; 4], "{}", k.sentence());
    }
    srv.server
        .with_device(|d| d.block_mut().ftl_mut().check_invariants())
        .unwrap();
    Ok(srv.server.stats())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    /// Every command against a byte-array model, with reads checked byte for byte.
    #[test]
    fn commands_match_a_reference_model(ops in prop::collection::vec(op(), 1..40)) {
        run_against_the_model(ServerConfig::default(), ops)?;
    }

    /// The same on the event core (virtual: one request at a time in modeled time):
    /// the calendars' requests, bytes and errors, every counter of the core 0. Modeled
    /// latencies may differ: a request split into several commands (over the 512 KiB
    /// transfer limit) has them in flight together, served in arrival order here.
    #[test]
    fn commands_on_the_event_core_match_the_model_and_the_calendars(
        ops in prop::collection::vec(op(), 1..30)
    ) {
        let calendar = run_against_the_model(ServerConfig::default(), ops.clone())?;
        let events = run_against_the_model(
            ServerConfig { time_model: TimeModel::Events, ..Default::default() },
            ops,
        )?;
        let counts = |s: &csd_nbd::ServerStats| {
            [s.reads, s.writes, s.flushes, s.trims, s.zeroes]
                .map(|o| (o.count, o.bytes, o.errors))
        };
        prop_assert_eq!(counts(&calendar), counts(&events));
        prop_assert!(events.modeled_now.ns() > 0);
    }
}

/// Four connections, each with `n` writes of 8 KiB in flight, then `n` reads of them in
/// flight, checking every byte. Virtual replies come in order of submission (`ordered`);
/// paced ones in order of modeled completion.
fn pipelined_writes_then_reads(srv: &Running, n: u64, ordered: bool) {
    let region = 1u64 << 20;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            s.spawn(move || {
                let mut c = srv.client();
                let base = t * region;
                let mut cookies = Vec::new();
                for i in 0..n {
                    let d = fill(t * 100 + i, 8192);
                    cookies.push(c.send(CMD_WRITE, 0, base + i * 8192, 8192, &d));
                }
                let mut got: Vec<u64> = (0..n)
                    .map(|_| c.reply().unwrap())
                    .map(|(e, k)| {
                        assert_eq!(e, 0);
                        k
                    })
                    .collect();
                got.sort();
                assert_eq!(got, cookies);
                let mut sent = std::collections::HashMap::new();
                for i in 0..n {
                    sent.insert(c.send(CMD_READ, 0, base + i * 8192, 8192, &[]), i);
                }
                for i in 0..n {
                    let (e, k) = c.reply().unwrap();
                    assert_eq!(e, 0);
                    if ordered {
                        assert_eq!(k, cookies[i as usize] + n);
                    }
                    let mut d = vec![0u8; 8192];
                    c.s.read_exact(&mut d).unwrap();
                    assert_eq!(d, fill(t * 100 + sent[&k], 8192));
                }
                c.disconnect();
            });
        }
    });
    let st = srv.server.stats();
    assert_eq!((st.writes.count, st.reads.count), (4 * n, 4 * n));
    assert_eq!(st.connections_total, 4);
}

#[test]
fn pipelined_requests_on_several_connections() {
    let srv = Running::start(ServerConfig::default());
    pipelined_writes_then_reads(&srv, 32, true);
}

#[test]
fn unaligned_writes_into_one_lba_from_two_connections_keep_both() {
    let srv = Running::start(ServerConfig::default());
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let srv = &srv;
            s.spawn(move || {
                let mut c = srv.client();
                for i in 0..200u64 {
                    // Connection t owns bytes [t*2048, t*2048+2048) of LBA i % 4.
                    let off = (i % 4) * LBA + t * 2048;
                    assert_eq!(c.write(off, &vec![(t + 1) as u8; 2048]), 0);
                }
            });
        }
    });
    let mut c = srv.client();
    let d = c.read(0, 4 * 4096).unwrap();
    for l in 0..4 {
        let b = &d[l * 4096..(l + 1) * 4096];
        assert!(b[..2048].iter().all(|&x| x == 1) && b[2048..].iter().all(|&x| x == 2));
    }
}

#[test]
fn requests_of_a_client_that_leaves_before_its_paced_replies_are_counted_on_the_event_core() {
    // 1 modeled µs = 1 wall ms: the replies are held for seconds; the client sends eight
    // writes and closes its socket at once. The requests ran, so the core fixes and
    // counts them when the connection ends (their tickets are not left behind).
    let srv = Running::start(ServerConfig {
        clock: ClockMode::Paced { scale: 1000.0 },
        time_model: TimeModel::Events,
        ..Default::default()
    });
    let mut c = srv.client();
    for i in 0..8u64 {
        c.send(CMD_WRITE, 0, i * 4096, 4096, &fill(i, 4096));
    }
    drop(c);
    let t0 = Instant::now();
    while srv.server.stats().writes.count < 8 && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = srv.server.stats();
    assert_eq!(st.writes.count, 8, "{st:?}");
    assert!(st.writes.modeled_ns > 0);
    let k = srv.server.event_counters().expect("on the core");
    assert_eq!(
        k.stale + k.unrecorded + k.unfixed_comparisons,
        0,
        "{}",
        k.sentence()
    );
    let mut c = srv.client();
    for i in 0..8u64 {
        assert_eq!(c.read(i * 4096, 4096).unwrap(), fill(i, 4096));
    }
}

#[test]
fn a_client_vanishing_mid_request_changes_nothing() {
    let srv = Running::start(ServerConfig::default());
    let mut c = srv.client();
    assert_eq!(c.write(0, &fill(9, 8192)), 0);
    // Header and half the payload, then gone.
    let r = Request {
        flags: 0,
        kind: CMD_WRITE,
        cookie: 99,
        offset: 0,
        length: 8192,
    };
    c.s.write_all(&r.encode()).unwrap();
    c.s.write_all(&[0xEE; 4096]).unwrap();
    drop(c);
    // A truncated header, then gone.
    let mut c = srv.client();
    c.s.write_all(&r.encode()[..13]).unwrap();
    drop(c);
    let mut c = srv.client();
    assert_eq!(c.read(0, 8192).unwrap(), fill(9, 8192));
    assert_eq!(srv.server.stats().writes.count, 1);
    srv.server
        .with_device(|d| d.block_mut().ftl_mut().check_invariants())
        .unwrap();
}

#[test]
fn paced_replies_wait_for_the_modeled_completion() {
    // 1 modeled µs = 1 wall ms: a write of 64 KiB on the tiny device (SLC, 200 µs
    // programs, SATA-class link) takes well over 300 modeled µs.
    let scale = 1000.0;
    let srv = Running::start(ServerConfig {
        clock: ClockMode::Paced { scale },
        ..Default::default()
    });
    let mut c = srv.client();
    let t0 = Instant::now();
    assert_eq!(c.write(0, &fill(1, 64 << 10)), 0);
    let wall = t0.elapsed();
    let st = srv.server.stats();
    let modeled = Duration::from_nanos(st.writes.modeled_ns);
    assert!(modeled > Duration::from_micros(300), "{modeled:?}");
    let due = modeled.mul_f64(scale);
    assert!(wall + Duration::from_millis(5) >= due, "{wall:?} < {due:?}");

    // A write and then a read of an unmapped LBA in flight: the replies come in order
    // of modeled completion, so the read (no flash work) overtakes the write (a
    // 200 µs program).
    let w = c.send(CMD_WRITE, 0, 100 * LBA, 4096, &fill(2, 4096));
    let r = c.send(CMD_READ, 0, 900 * LBA, 4096, &[]);
    assert_eq!(c.reply().unwrap(), (0, r), "the read overtakes the write");
    c.s.read_exact(&mut [0u8; 4096]).unwrap();
    assert_eq!(c.reply().unwrap(), (0, w));
}

#[test]
fn paced_connections_on_the_event_core_are_served_in_arrival_order() {
    // Four connections with 16 requests in flight each, paced at 1 modeled µs = 20 wall
    // µs: replies wait until the core has fixed their completions by the wall clock's
    // instant; the data is right and nothing was booked behind a later arrival.
    let scale = 20.0;
    let srv = Running::start(ServerConfig {
        clock: ClockMode::Paced { scale },
        time_model: TimeModel::Events,
        ..Default::default()
    });
    let t0 = Instant::now();
    // The server's own commands (SMART, as `csd serve`'s stats file reads it) run beside
    // the connections: submitted in order with them, they put no request behind them.
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                srv.server.smart().expect("SMART");
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        pipelined_writes_then_reads(&srv, 16, false);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let wall = t0.elapsed();
    let st = srv.server.stats();
    assert_eq!((st.writes.count, st.reads.count), (64, 64));
    let k = srv.server.event_counters().expect("on the core");
    assert!(k.booked > 128, "{}", k.sentence());
    assert_eq!(k.anomalies(), [0; 4], "{}", k.sentence());
    // Paced: every reply waited for its modeled completion, so the run took at least a
    // mean write's modeled latency (x scale) on the wall clock.
    let mean_write = Duration::from_nanos(st.writes.modeled_ns / st.writes.count);
    assert!(mean_write > Duration::ZERO);
    assert!(
        wall >= mean_write.mul_f64(scale),
        "{wall:?} < {mean_write:?} x {scale}"
    );
}

#[test]
fn shutdown_waits_for_connections_and_gives_the_device_back() {
    let mut srv = Running::start(ServerConfig::default());
    let mut c = srv.client();
    assert_eq!(c.write(4096, &fill(5, 4096)), 0);
    // A connection in the middle of negotiation, and one idle in transmission.
    let _half = Client::handshake(&srv.socket).unwrap();
    srv.stop();
    // Reads from the idle client now see the end of the session.
    assert_eq!(c.s.read(&mut [0u8; 1]).unwrap_or(0), 0);
    assert!(srv.server.flush().is_ok());
    let s = srv.server.smart().unwrap();
    assert_eq!(s.host_written_bytes, 4096);
}

#[test]
fn listeners_refuse_what_they_must() {
    let dir = tempfile::tempdir().unwrap();
    // A path that is not a socket is left alone.
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "keep me").unwrap();
    assert!(csd_nbd::Listener::unix(&file).is_err());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    // A live socket is not stolen; a stale one is replaced.
    let sock = dir.path().join("s.sock");
    let live = csd_nbd::Listener::unix(&sock).unwrap();
    assert!(csd_nbd::Listener::unix(&sock).is_err());
    drop(live);
    assert!(!sock.exists(), "a listener removes its socket file");
    // What a killed server leaves behind: a socket file nobody listens on.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let l = csd_nbd::Listener::unix(&sock).unwrap();
    assert!(l.uri("").contains("s.sock"));
    // Network addresses need the explicit flag; loopback does not.
    let any: std::net::SocketAddr = "0.0.0.0:0".parse().unwrap();
    let e = csd_nbd::Listener::tcp(any, false).err().unwrap();
    assert!(e.to_string().contains("--allow-remote"), "{e}");
    let lo: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let l = csd_nbd::Listener::tcp(lo, false).unwrap();
    assert!(l.uri("x").starts_with("nbd://127.0.0.1:"));
}

#[test]
fn a_client_that_does_not_read_its_replies_stalls_only_itself() {
    let srv = Running::start(ServerConfig::default());
    let mut slow = srv.client();
    // 2000 reads of 64 KiB (125 MiB of replies) from another thread, while nobody reads
    // a reply: the server's queues and the socket buffers fill, and the sender blocks.
    let mut tx = slow.s.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        for i in 0..2000u64 {
            let r = Request {
                flags: 0,
                kind: CMD_READ,
                cookie: i + 1,
                offset: (i % 256) * 65536,
                length: 65536,
            };
            tx.write_all(&r.encode()).unwrap();
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    // Another connection is served meanwhile.
    let mut c = srv.client();
    assert_eq!(c.write(0, &fill(4, 8192)), 0);
    assert_eq!(c.read(0, 8192).unwrap(), fill(4, 8192));
    // Then every reply arrives, in order (virtual clock).
    let mut d = vec![0u8; 65536];
    for i in 0..2000u64 {
        let (e, cookie) = slow.reply().unwrap();
        assert_eq!(e, 0);
        assert_eq!(cookie, i + 1);
        slow.s.read_exact(&mut d).unwrap();
    }
    sender.join().unwrap();
    let r = Request {
        flags: 0,
        kind: CMD_DISC,
        cookie: 0,
        offset: 0,
        length: 0,
    };
    slow.s.write_all(&r.encode()).unwrap();
    assert_eq!(slow.s.read(&mut [0u8; 1]).unwrap(), 0);
}

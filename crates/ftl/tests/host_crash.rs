//! Host power loss on an image file: the host's page cache keeps, of each 4 KiB page
//! changed since the last sync, the synced version or a later one, in any combination
//! (`csd_nand::hostcrash`). Random writes and flushes against a reference model, a host
//! crash at a random point, recovery: nothing acknowledged durable is lost (write-through
//! writes, flushes, batches), nothing returns that was never written, and the image opens
//! every time.

use csd_ftl::{Ftl, FtlConfig, WriteCache};
use csd_nand::{Nand, host_crash_image};
use csd_sim::{DeviceConfig, SimTime};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

fn device(seed: u64) -> DeviceConfig {
    let mut d = DeviceConfig::preset("tiny").expect("tiny preset");
    d.geometry.blocks_per_plane = 32;
    d.geometry.pages_per_block = 16;
    d.faults.seed = seed;
    d
}

fn ftl_config(cache: WriteCache) -> FtlConfig {
    FtlConfig {
        op: 0.3,
        gc_free_blocks: 4,
        mdts_sectors: 4,
        map_cache_share: 0.0005,
        checkpoint_log_pages: 48,
        write_cache: cache,
        ..FtlConfig::default()
    }
}

/// The bytes of version `v` of `lba` (version 0: never written, zeros).
fn pattern(lba: u64, v: u64, size: usize) -> Vec<u8> {
    if v == 0 {
        return vec![0; size];
    }
    (0..size)
        .map(|i| (lba.wrapping_mul(31) ^ v.wrapping_mul(131) ^ (i as u64 * 7)) as u8)
        .collect()
}

/// Per LBA: the version known durable and the versions written since (any of which a
/// host crash may leave).
struct Model {
    durable: Vec<u64>,
    since: Vec<Vec<u64>>,
    next: u64,
}

impl Model {
    fn write(&mut self, lba: u64, durable_now: bool) -> u64 {
        self.next += 1;
        let v = self.next;
        if durable_now {
            self.durable[lba as usize] = v;
            self.since[lba as usize].clear();
        } else {
            self.since[lba as usize].push(v);
        }
        v
    }

    fn flushed(&mut self) {
        for (d, s) in self.durable.iter_mut().zip(&mut self.since) {
            if let Some(&v) = s.last() {
                *d = v;
            }
            s.clear();
        }
    }

    /// Read every LBA of `ftl` after a crash: each must hold its durable version or one
    /// written since, which then becomes its durable version (`what` names the case in a
    /// failure). Returns the instant after the reads.
    fn check_after_crash(&mut self, ftl: &mut Ftl, mut t: SimTime, what: &str) -> SimTime {
        let ls = ftl.lba_size();
        let mut buf = vec![0u8; ls];
        for (i, lba) in (0..self.durable.len()).zip(0u64..) {
            t = ftl
                .read(lba, &mut buf, t)
                .unwrap_or_else(|e| panic!("{what}: LBA {lba} unreadable: {e}"));
            let found = std::iter::once(self.durable[i])
                .chain(self.since[i].iter().copied())
                .find(|&v| buf == pattern(lba, v, ls));
            let Some(v) = found else {
                panic!(
                    "{what}: LBA {lba} holds neither its durable version {} nor a later one {:?}",
                    self.durable[i], self.since[i]
                );
            };
            self.durable[i] = v;
            self.since[i].clear();
        }
        t
    }
}

/// The files of an image formatted with `cache` on [`device`]`(seed)` and tracked by its
/// durable copy.
struct Fixture {
    _dir: tempfile::TempDir,
    img: std::path::PathBuf,
    durable: std::path::PathBuf,
    crashed: std::path::PathBuf,
    cfg: FtlConfig,
    lbas: u64,
}

impl Fixture {
    /// The fixture, its FTL and a model of its first `max_lbas` LBAs (never written).
    fn new(cache: WriteCache, seed: u64, max_lbas: u64) -> (Fixture, Ftl, Model) {
        let dir = tempfile::tempdir().expect("temp dir");
        let img = dir.path().join("dev.img");
        let durable = dir.path().join("dev.img.durable");
        let crashed = dir.path().join("crashed.img");
        let cfg = ftl_config(cache);
        let mut ftl = Ftl::format(Nand::create_image(&img, device(seed)).expect("create"), cfg)
            .expect("format");
        ftl.nand_mut()
            .track_durable_copy(&durable)
            .expect("durable copy");
        let lbas = ftl.lbas().min(max_lbas);
        let model = Model {
            durable: vec![0; lbas as usize],
            since: vec![Vec::new(); lbas as usize],
            next: 0,
        };
        let fx = Fixture {
            _dir: dir,
            img,
            durable,
            crashed,
            cfg,
            lbas,
        };
        (fx, ftl, model)
    }

    /// Replace the image by what a host crash may leave of it (`keep`, `seed`: see
    /// [`host_crash_image`]); the FTL must be dropped or crashed first.
    fn host_crash(&self, seed: u64, keep: f64) {
        host_crash_image(&self.img, &self.durable, &self.crashed, seed, keep).expect("crash image");
        std::fs::rename(&self.crashed, &self.img).expect("replace image");
    }
}

/// Rounds of a run: `default`, or `CSD_HOST_CRASH_ROUNDS` for longer runs by hand.
fn rounds(default: u64) -> u64 {
    std::env::var("CSD_HOST_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run(cache: WriteCache, rounds: u64, seed: u64) {
    let (fx, mut ftl, mut model) = Fixture::new(cache, seed, 512);
    let (lbas, ls, cfg) = (fx.lbas, ftl.lba_size(), fx.cfg);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut t = SimTime::ZERO;
    let write_through = cache == WriteCache::WriteThrough;
    for round in 0..rounds {
        let ops = rng.random_range(20..300);
        for _ in 0..ops {
            if rng.random_bool(0.08) {
                t = ftl.flush(t).expect("flush");
                model.flushed();
                continue;
            }
            let n = rng.random_range(1..=4u64);
            let lba = rng.random_range(0..lbas - n);
            let mut data = Vec::with_capacity((n as usize) * ls);
            let versions: Vec<u64> = (0..n)
                .map(|i| model.write(lba + i, write_through))
                .collect();
            for (i, &v) in versions.iter().enumerate() {
                data.extend(pattern(lba + i as u64, v, ls));
            }
            t = ftl.write(lba, &data, t).expect("write");
        }
        // The host loses power: the process's changes not synced may or may not be on disk.
        drop(ftl);
        let keep = [0.0, 0.5, 1.0, 0.1, 0.9][(round % 5) as usize];
        fx.host_crash(seed ^ round, keep);
        let nand = Nand::open_image(&fx.img, None)
            .unwrap_or_else(|e| panic!("round {round}: the image must open: {e}"));
        assert!(
            nand.opened_unclean(),
            "the header must say the writer did not close"
        );
        ftl = match Ftl::try_recover(nand, cfg) {
            Ok(f) => f,
            Err(f) => panic!("round {round} (keep {keep}): recovery failed: {}", f.error),
        };
        t = model.check_after_crash(
            &mut ftl,
            t,
            &format!("round {round} (keep {keep}, {cache:?})"),
        );
        ftl.nand_mut()
            .track_durable_copy(&fx.durable)
            .expect("durable copy");
    }
    let img = fx.img.clone();
    ftl.close(t).expect("close");
    ftl.nand_mut().sync().expect("sync");
    drop(ftl);
    let nand = Nand::open_image(&img, None).expect("clean open");
    assert!(!nand.opened_unclean(), "a clean close clears the open flag");
}

#[test]
fn host_crash_write_through_loses_nothing_acknowledged() {
    run(WriteCache::WriteThrough, rounds(30), 1);
}

#[test]
fn host_crash_write_back_loses_nothing_flushed() {
    run(WriteCache::WriteBack, rounds(30), 2);
}

/// A device power loss that tears a program in flight, on a machine whose host crashes at
/// the same instant (`csd serve` on a machine that loses power): the torn page and every
/// page not synced may be kept or lost. Every cut within a checkpoint and the writes
/// around it must recover, with nothing acknowledged lost (write-through) and nothing
/// flushed lost (write-back). `CSD_TORN_SEEDS` runs more seeds by hand.
#[test]
fn torn_program_and_host_crash_together_recover() {
    let seeds: u64 = std::env::var("CSD_TORN_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    for seed in 0..seeds {
        let cache = if seed % 2 == 1 {
            WriteCache::WriteBack
        } else {
            WriteCache::WriteThrough
        };
        for cut in (1..=80u64).step_by(if seeds > 2 { 1 } else { 3 }) {
            let keep = [0.0, 0.25, 0.5, 1.0][(cut % 4) as usize];
            torn_and_host_crash(seed, cache, cut, keep);
        }
    }
}

fn torn_and_host_crash(seed: u64, cache: WriteCache, cut: u64, keep: f64) {
    let (fx, mut ftl, mut model) = Fixture::new(cache, seed, 256);
    let (lbas, ls, cfg) = (fx.lbas, ftl.lba_size(), fx.cfg);
    let mut rng = SmallRng::seed_from_u64(seed ^ cut.wrapping_mul(0x9e37));
    let mut t = SimTime::ZERO;
    let write_through = cache == WriteCache::WriteThrough;
    // One step of the workload; false once the power cut hit.
    let mut step = |ftl: &mut Ftl, model: &mut Model, t: &mut SimTime| -> bool {
        if rng.random_bool(0.05) {
            return match ftl.flush(*t) {
                Ok(done) => {
                    *t = done;
                    model.flushed();
                    true
                }
                Err(_) => false,
            };
        }
        let n = rng.random_range(1..=4u64);
        let lba = rng.random_range(0..lbas - n);
        let mut data = Vec::with_capacity(n as usize * ls);
        let versions: Vec<u64> = (0..n).map(|_| model.next + 1).collect();
        for (i, v) in versions.iter().enumerate() {
            data.extend(pattern(lba + i as u64, v + i as u64, ls));
        }
        match ftl.write(lba, &data, *t) {
            Ok(done) => {
                *t = done;
                for i in 0..n {
                    let v = model.write(lba + i, write_through);
                    debug_assert_eq!(v, versions[0] + i);
                }
                true
            }
            // Not acknowledged: any of the old versions or this one may remain.
            Err(_) => {
                for i in 0..n {
                    let v = model.write(lba + i, false);
                    debug_assert_eq!(v, versions[0] + i);
                }
                false
            }
        }
    };
    for _ in 0..64 {
        assert!(step(&mut ftl, &mut model, &mut t));
    }
    ftl.nand_mut().arm_power_cut(csd_nand::PowerCut::AtOp(cut));
    let mut alive = ftl.checkpoint(t).map(|d| t = d).is_ok();
    let mut ops = 0;
    while alive {
        alive = step(&mut ftl, &mut model, &mut t);
        ops += 1;
        assert!(ops < 10_000, "cut {cut} never hit");
    }
    drop(ftl.crash());
    fx.host_crash(seed ^ cut, keep);
    let nand = Nand::open_image(&fx.img, None).expect("open");
    let mut f = match Ftl::try_recover(nand, cfg) {
        Ok(f) => f,
        Err(f) => panic!(
            "seed {seed} {cache:?} cut {cut} keep {keep}: recovery failed: {}",
            f.error
        ),
    };
    model.check_after_crash(
        &mut f,
        t,
        &format!("seed {seed} {cache:?} cut {cut} keep {keep}"),
    );
}

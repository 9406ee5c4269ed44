//! Crash torture: cut power at random points of a random workload, recover, and check
//! that nothing acknowledged is lost, the command in flight is all-or-nothing (every
//! sector old, or every sector new), and nothing panics.
//!
//! The workload mixes single- and multi-sector writes (split by MDTS into several
//! commands), trims, flushes and checkpoints on a small device where GC, wear leveling,
//! map-cache eviction and checkpoints run constantly, so cuts land in all of them. With
//! probability `recovery_cut_prob` a second cut is armed during recovery itself.
//!
//! With media faults a drive may reach its end of life: when a write finds the device
//! read-only, the run checks every acknowledged write (now, and again after one more
//! power cycle, which must come back read-only too when the spare is exhausted) and
//! ends, reporting the cut at which that happened. With bit errors an LBA may become
//! unreadable (GC could not move it): such reads are counted, not failed, and only when
//! the FTL itself counted lost sectors or media errors.

use crate::{Ftl, FtlConfig, FtlError, WriteCache};
use csd_nand::{Nand, NandError, PowerCut};
use csd_sim::{DeviceConfig, SimTime};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use std::collections::{BTreeMap, HashMap};

/// Parameters of a torture run.
#[derive(Debug, Clone)]
pub struct TortureConfig {
    /// Power cuts to perform.
    pub cuts: u64,
    /// Seed of the workload, the cut points and the media faults.
    pub seed: u64,
    /// Device to run on.
    pub device: DeviceConfig,
    /// FTL parameters.
    pub ftl: FtlConfig,
    /// Maximum operations between cuts (a cut is armed uniformly in 1..=this many media ops).
    pub max_ops_between_cuts: u64,
    /// Probability that power is cut again during recovery.
    pub recovery_cut_prob: f64,
}

impl TortureConfig {
    /// The default torture setup: a shrunken `tiny` device, write-through, small MAP cache
    /// and frequent checkpoints.
    pub fn small(cuts: u64, seed: u64) -> TortureConfig {
        let mut device = DeviceConfig::preset("tiny")
            .unwrap_or_else(|_| unreachable!("the tiny preset is built in"));
        device.geometry.blocks_per_plane = 32;
        device.geometry.pages_per_block = 16;
        device.faults.seed = seed;
        TortureConfig {
            cuts,
            seed,
            device,
            ftl: FtlConfig {
                op: 0.3,
                gc_free_blocks: 4,
                wear_level_spread: 8,
                mdts_sectors: 4,
                map_cache_share: 0.0005,
                checkpoint_log_pages: 48,
                ..FtlConfig::default()
            },
            max_ops_between_cuts: 400,
            recovery_cut_prob: 0.2,
        }
    }

    /// [`TortureConfig::small`] with program/erase failures and bit errors: rates high
    /// enough to hit every failure path often, low enough that the small device does not
    /// wear out within tens of thousands of cuts (long runs may still reach end of life).
    pub fn with_faults(cuts: u64, seed: u64) -> TortureConfig {
        let mut c = TortureConfig::small(cuts, seed);
        c.device.faults.program_fail_prob = 0.0001;
        c.device.faults.erase_fail_prob = 0.0001;
        c.device.faults.rber_fresh = 1e-5;
        c.device.faults.rber_end_of_life = 1e-5;
        c.device.geometry.blocks_per_plane = 48;
        c
    }

    /// [`TortureConfig::with_faults`] with a weak ECC and a high bit-error rate: reads
    /// often need retries and GC meets sectors it cannot read.
    pub fn with_weak_ecc(cuts: u64, seed: u64) -> TortureConfig {
        let mut c = TortureConfig::with_faults(cuts, seed);
        c.device.faults.ecc_bits_per_sector = 2;
        c.device.faults.rber_fresh = 2.5e-5;
        c.device.faults.rber_end_of_life = 2.5e-5;
        c
    }

    /// Does this device inject bit errors (so that an LBA may become unreadable)?
    fn bit_errors(&self) -> bool {
        self.device.faults.rber_fresh > 0.0 || self.device.faults.rber_end_of_life > 0.0
    }
}

/// What a torture run found.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TortureReport {
    /// Power cuts performed (including cuts during recovery).
    pub cuts: u64,
    /// Cuts that struck during recovery.
    pub recovery_cuts: u64,
    /// Host commands acknowledged.
    pub acked_commands: u64,
    /// LBA reads compared against the reference after recoveries.
    pub writes_checked: u64,
    /// Acknowledged data that did not read back (must be 0).
    pub lost: u64,
    /// In-flight commands or batches found partly applied (must be 0).
    pub torn: u64,
    /// In-flight commands found fully applied after the cut.
    pub inflight_applied: u64,
    /// Commands discarded by recovery because their data did not verify.
    pub recovery_discarded: u64,
    /// Sum of modeled recovery times, seconds.
    pub recovery_modeled_s: f64,
    /// Longest wall-clock recovery, seconds.
    pub recovery_wall_max_s: f64,
    /// The cut count at which the device turned read-only (end of life), if it did.
    pub read_only_at_cut: Option<u64>,
    /// Why it turned read-only.
    pub read_only_reason: Option<crate::ReadOnlyReason>,
    /// Grown bad blocks at the end of the run.
    pub bad_blocks: u32,
    /// LBA reads that failed as uncorrectable (bit errors GC could not get past);
    /// allowed only with bit errors and when the FTL counted the loss.
    pub unreadable: u64,
    /// Sectors the FTL recorded as lost (lifetime, at the end of the run).
    pub lost_sectors: u64,
}

fn pattern(lba: u64, version: u64, ss: usize) -> Vec<u8> {
    let mut v = vec![0u8; ss];
    if version == 0 {
        return v;
    }
    for (i, chunk) in v.chunks_mut(8).enumerate() {
        let x = (lba.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ version.wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_add(i as u64);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    v
}

/// The command in flight when power was cut: LBAs with their old and new versions.
struct InFlight {
    lbas: Vec<(u64, u64, u64)>,
    /// LBAs per atomic unit: MDTS for host writes, the whole batch for a batch.
    unit: usize,
}

fn is_power_loss(e: &FtlError) -> bool {
    matches!(e, FtlError::Nand(NandError::PowerLoss))
}

/// Read one LBA for a check; `Ok(false)` when it is unreadable and that is allowed (bit
/// errors on, and the FTL counted a lost sector or a media error).
fn read_checked(
    f: &mut Ftl,
    lba: u64,
    buf: &mut [u8],
    cfg: &TortureConfig,
    rep: &mut TortureReport,
) -> Result<bool, String> {
    match f.read(lba, buf, SimTime::ZERO) {
        Ok(_) => Ok(true),
        Err(FtlError::Uncorrectable { .. })
            if cfg.bit_errors() && {
                let s = f.lifetime_stats();
                s.lost_sectors + s.media_errors > 0
            } =>
        {
            rep.unreadable += 1;
            Ok(false)
        }
        Err(e) => Err(format!("read of LBA {lba} after recovery failed: {e}")),
    }
}

/// Every acknowledged LBA reads back exactly; everything else reads zeros.
fn check_all(
    f: &mut Ftl,
    model: &HashMap<u64, u64>,
    cfg: &TortureConfig,
    rep: &mut TortureReport,
) -> Result<(), String> {
    let ss = cfg.device.geometry.sector_size as usize;
    let mut buf = vec![0u8; ss];
    for l in 0..f.lbas() {
        if !read_checked(f, l, &mut buf, cfg, rep)? {
            continue;
        }
        rep.writes_checked += 1;
        if buf != pattern(l, *model.get(&l).unwrap_or(&0), ss) {
            if rep.lost == 0 && std::env::var_os("CSD_TORTURE_DEBUG").is_some() {
                eprintln!(
                    "cut {}: LBA {l} expected version {:?}, zero={} ; recovery {:?}",
                    rep.cuts,
                    model.get(&l),
                    buf.iter().all(|&b| b == 0),
                    f.last_recovery()
                );
            }
            rep.lost += 1;
        }
    }
    Ok(())
}

/// Recover, retrying when a cut strikes during recovery.
fn recover_with_cuts(
    mut nand: Nand,
    cfg: &TortureConfig,
    rng: &mut SmallRng,
    rep: &mut TortureReport,
) -> Result<Ftl, String> {
    for _ in 0..100 {
        nand.power_on();
        if rng.random::<f64>() < cfg.recovery_cut_prob {
            nand.arm_power_cut(PowerCut::AtOp(rng.random_range(1..300)));
        }
        match Ftl::try_recover(nand, cfg.ftl) {
            Ok(mut f) => {
                f.nand_mut().disarm_power_cut();
                if let Some(r) = f.last_recovery() {
                    rep.recovery_discarded += r.commits_discarded;
                    rep.recovery_modeled_s += r.modeled_s;
                    rep.recovery_wall_max_s = rep.recovery_wall_max_s.max(r.wall_s);
                }
                return Ok(f);
            }
            Err(failed) if is_power_loss(&failed.error) => {
                rep.cuts += 1;
                rep.recovery_cuts += 1;
                nand = *failed.nand;
            }
            Err(failed) => return Err(format!("recovery failed: {}", failed.error)),
        }
    }
    Err("recovery kept failing".into())
}

/// A write, batch or trim that may be cut: `(lba, old version, new version)` per LBA
/// (new 0 for a trim).
type Change = Vec<(u64, u64, u64)>;

/// The state of one torture run: the workload's random stream, the model of what every
/// LBA must read back (its version, absent for zeros), and the report so far.
struct Run<'a> {
    cfg: &'a TortureConfig,
    rng: SmallRng,
    /// Sector size.
    ss: usize,
    model: HashMap<u64, u64>,
    next_version: u64,
    rep: TortureReport,
    write_back: bool,
    /// In write-back mode, writes since the last flush are "in flight" as a group.
    unflushed: Change,
}

/// How a stretch of commands between two cuts ended.
struct Stretch {
    /// The device turned read-only (end of life) rather than losing power.
    end_of_life: bool,
    /// The command that was running when it ended.
    inflight: Option<InFlight>,
}

/// Run the torture; `progress` is called after each cut with the cuts done.
pub fn torture(
    cfg: &TortureConfig,
    progress: &mut dyn FnMut(u64),
) -> Result<TortureReport, String> {
    let mut run = Run {
        cfg,
        rng: SmallRng::seed_from_u64(cfg.seed),
        ss: cfg.device.geometry.sector_size as usize,
        model: HashMap::new(),
        next_version: 1,
        rep: TortureReport::default(),
        write_back: cfg.ftl.write_cache == WriteCache::WriteBack,
        unflushed: Vec::new(),
    };
    let nand = Nand::new_in_memory(cfg.device.clone()).map_err(|e| e.to_string())?;
    let mut ftl = Ftl::format(nand, cfg.ftl).map_err(|e| e.to_string())?;
    while run.rep.cuts < cfg.cuts {
        let stretch = run.until_cut(&mut ftl)?;
        let mut f = if stretch.end_of_life {
            run.note_read_only(&mut ftl);
            ftl
        } else {
            run.rep.cuts += 1;
            // Crash, recover (maybe cut again during recovery), verify.
            let nand = ftl.crash();
            recover_with_cuts(nand, cfg, &mut run.rng, &mut run.rep)?
        };
        if run.write_back {
            run.verify_unflushed(&mut f, stretch.inflight)?;
        } else if let Some(inf) = stretch.inflight {
            run.verify_inflight(&mut f, &inf)?;
        }
        check_all(&mut f, &run.model, cfg, &mut run.rep)?;
        f.check_invariants()
            .map_err(|e| format!("after cut {}: {e}", run.rep.cuts))?;
        if stretch.end_of_life {
            return run.finish_read_only(f, progress);
        }
        run.rep.lost_sectors = f.lifetime_stats().lost_sectors;
        run.rep.bad_blocks = f.bad_blocks();
        ftl = f;
        progress(run.rep.cuts);
    }
    Ok(run.rep)
}

impl Run<'_> {
    /// Arm a cut and run random commands until power is lost or the device turns
    /// read-only.
    fn until_cut(&mut self, f: &mut Ftl) -> Result<Stretch, String> {
        let lbas = f.lbas();
        let hot = (lbas / 3).max(1);
        f.nand_mut().arm_power_cut(PowerCut::AtOp(
            self.rng.random_range(1..=self.cfg.max_ops_between_cuts),
        ));
        let mut t = SimTime::ZERO;
        loop {
            let op = self.rng.random_range(0..100u32);
            let mut inflight = None;
            let result = if op < 70 {
                self.write(f, (lbas, hot), t, &mut inflight)
            } else if op < 76 {
                self.batch(f, (lbas, hot), t, &mut inflight)?
            } else if op < 80 {
                self.trim(f, lbas, t, &mut inflight)
            } else if op < 90 {
                self.flush(f, t)
            } else if op < 93 {
                f.checkpoint(t)
            } else {
                self.read(f, lbas, t)?
            };
            match result {
                Ok(done) => {
                    t = done;
                    self.rep.acked_commands += 1;
                }
                Err(e) if is_power_loss(&e) => {
                    return Ok(Stretch {
                        end_of_life: false,
                        inflight,
                    });
                }
                Err(FtlError::ReadOnly { .. }) => {
                    return Ok(Stretch {
                        end_of_life: true,
                        inflight,
                    });
                }
                // A read of an LBA GC could not move.
                Err(FtlError::Uncorrectable { .. }) if op >= 93 && self.cfg.bit_errors() => {
                    self.rep.unreadable += 1;
                }
                Err(e) => {
                    return Err(format!(
                        "unexpected error before the cut {}: {e}; {}",
                        self.rep.cuts,
                        f.block_census()
                    ));
                }
            }
        }
    }

    /// A random LBA, in the hot third of `lbas` 70% of the time.
    fn pick_lba(&mut self, (lbas, hot): (u64, u64)) -> u64 {
        if self.rng.random_bool(0.7) {
            self.rng.random_range(0..hot)
        } else {
            self.rng.random_range(0..lbas)
        }
    }

    /// The next version number.
    fn version(&mut self) -> u64 {
        let v = self.next_version;
        self.next_version += 1;
        v
    }

    /// The model's version of `lba` (0: zeros).
    fn old(&self, lba: u64) -> u64 {
        *self.model.get(&lba).unwrap_or(&0)
    }

    /// A write of 1 LBA (or 2..10, one time in four), split by MDTS into commands.
    fn write(
        &mut self,
        f: &mut Ftl,
        span: (u64, u64),
        t: SimTime,
        inflight: &mut Option<InFlight>,
    ) -> Result<SimTime, FtlError> {
        let n = if self.rng.random_range(0..4) == 0 {
            self.rng.random_range(2..10u64)
        } else {
            1
        };
        let lba = self.pick_lba(span);
        let n = n.min(span.0 - lba);
        let mut data = Vec::with_capacity(n as usize * self.ss);
        let mut change = Vec::new();
        for i in 0..n {
            let v = self.version();
            data.extend_from_slice(&pattern(lba + i, v, self.ss));
            change.push((lba + i, self.old(lba + i), v));
        }
        *inflight = Some(InFlight {
            lbas: change.clone(),
            unit: self.cfg.ftl.mdts_sectors as usize,
        });
        let r = f.write(lba, &data, t);
        if r.is_ok() {
            if self.write_back {
                self.unflushed.extend(change.iter().copied());
            } else {
                for (l, _, v) in change {
                    self.model.insert(l, v);
                }
            }
        }
        r
    }

    /// A batch of 2..24 pages; LPIDs may repeat (the later entry wins).
    fn batch(
        &mut self,
        f: &mut Ftl,
        span: (u64, u64),
        t: SimTime,
        inflight: &mut Option<InFlight>,
    ) -> Result<Result<SimTime, FtlError>, String> {
        let n = self.rng.random_range(2..24usize);
        let mut pages: Vec<(u64, Vec<u8>)> = Vec::with_capacity(n);
        let mut last: BTreeMap<u64, u64> = BTreeMap::new();
        for _ in 0..n {
            let l = self.pick_lba(span);
            let v = self.version();
            pages.push((l, pattern(l, v, self.ss)));
            last.insert(l, v);
        }
        let refs: Vec<(u64, &[u8])> = pages.iter().map(|(l, p)| (*l, p.as_slice())).collect();
        let buf = csd_sim::wire::build_batch(&refs, self.ss).map_err(|e| e.to_string())?;
        let mut change: Change = last.iter().map(|(&l, &v)| (l, self.old(l), v)).collect();
        // The order in which the checks after a cut read these LBAs changes the MAP
        // cache's evictions; vary it, but from the seed.
        change.shuffle(&mut self.rng);
        *inflight = Some(InFlight {
            lbas: change.clone(),
            unit: change.len(),
        });
        let r = f.flush_batch(&buf, t);
        if r.is_ok() {
            // A batch is durable when it completes, in either cache mode.
            self.unflushed.retain(|(l, _, _)| !last.contains_key(l));
            for (l, _, v) in change {
                self.model.insert(l, v);
            }
        }
        Ok(r)
    }

    /// A trim of 1..6 LBAs.
    fn trim(
        &mut self,
        f: &mut Ftl,
        lbas: u64,
        t: SimTime,
        inflight: &mut Option<InFlight>,
    ) -> Result<SimTime, FtlError> {
        let lba = self.rng.random_range(0..lbas);
        let n = self.rng.random_range(1..6u64).min(lbas - lba);
        let change: Change = (lba..lba + n).map(|l| (l, self.old(l), 0)).collect();
        *inflight = Some(InFlight {
            lbas: change.clone(),
            unit: 1,
        });
        let r = f.trim(lba, n, t);
        if r.is_ok() {
            for (l, _, _) in change {
                self.model.remove(&l);
            }
            // The trim comes after any buffered write to these LBAs.
            self.unflushed
                .retain(|(l, _, _)| !(lba..lba + n).contains(l));
        }
        r
    }

    /// A flush: the buffered writes become the model's.
    fn flush(&mut self, f: &mut Ftl, t: SimTime) -> Result<SimTime, FtlError> {
        let r = f.flush(t);
        if r.is_ok() {
            for (l, _, v) in self.unflushed.drain(..) {
                self.model.insert(l, v);
            }
        }
        r
    }

    /// A read of a random LBA: must be the model's value at any time.
    fn read(
        &mut self,
        f: &mut Ftl,
        lbas: u64,
        t: SimTime,
    ) -> Result<Result<SimTime, FtlError>, String> {
        let lba = self.rng.random_range(0..lbas);
        let mut buf = vec![0u8; self.ss];
        let r = f.read(lba, &mut buf, t);
        if r.is_ok() && !self.write_back && buf != pattern(lba, self.old(lba), self.ss) {
            return Err(format!(
                "live read of LBA {lba} disagrees with the model before any crash"
            ));
        }
        Ok(r)
    }

    /// The device turned read-only: no crash; the command that found it so (and
    /// unflushed writes) are all old or all new, everything acknowledged reads back, and
    /// it stays so across a power cycle.
    fn note_read_only(&mut self, f: &mut Ftl) {
        f.nand_mut().disarm_power_cut();
        self.rep.read_only_at_cut = Some(self.rep.cuts);
        self.rep.read_only_reason = f.read_only();
        if std::env::var_os("CSD_TORTURE_DEBUG").is_some() {
            eprintln!(
                "read-only: {:?}; {}; spare {}",
                f.read_only(),
                f.block_census(),
                f.spare_blocks()
            );
        }
    }

    /// Write-back mode: unflushed writes may or may not be there; treat them all (and
    /// the command in flight) as in flight, accept any version each LBA had in the group
    /// or the model's, and adopt what is there as the new reference.
    fn verify_unflushed(&mut self, f: &mut Ftl, inflight: Option<InFlight>) -> Result<(), String> {
        let ss = self.ss;
        let mut group = std::mem::take(&mut self.unflushed);
        if let Some(inf) = inflight {
            group.extend(inf.lbas);
        }
        for (l, _, _) in &group {
            let mut buf = vec![0u8; ss];
            if !read_checked(f, *l, &mut buf, self.cfg, &mut self.rep)? {
                continue;
            }
            let ok = group
                .iter()
                .filter(|(x, _, _)| x == l)
                .any(|(_, o, n)| buf == pattern(*l, *o, ss) || buf == pattern(*l, *n, ss))
                || buf == pattern(*l, self.old(*l), ss);
            if !ok {
                self.rep.lost += 1;
            }
            let v = group
                .iter()
                .filter(|(x, _, _)| x == l)
                .flat_map(|(_, o, n)| [*o, *n])
                .find(|v| buf == pattern(*l, *v, ss));
            match v {
                Some(0) | None => {
                    self.model.remove(l);
                }
                Some(v) => {
                    self.model.insert(*l, v);
                }
            }
        }
        Ok(())
    }

    /// Write-through mode: the command in flight is all old or all new, by atomic unit
    /// (an MDTS-split host write is several commands, each atomic; a batch is one); the
    /// model then adopts what is there.
    fn verify_inflight(&mut self, f: &mut Ftl, inf: &InFlight) -> Result<(), String> {
        let ss = self.ss;
        let mut olds = 0;
        let mut news = 0;
        for &(l, old, new) in &inf.lbas {
            let mut buf = vec![0u8; ss];
            if !read_checked(f, l, &mut buf, self.cfg, &mut self.rep)? {
                continue;
            }
            if buf == pattern(l, new, ss) {
                news += 1;
            } else if buf == pattern(l, old, ss) {
                olds += 1;
            }
        }
        for chunk in inf.lbas.chunks(inf.unit.max(1)) {
            self.verify_unit(f, chunk)?;
        }
        if news > 0 && olds == 0 {
            self.rep.inflight_applied += 1;
        }
        for &(l, old, new) in &inf.lbas {
            let mut buf = vec![0u8; ss];
            if !read_checked(f, l, &mut buf, self.cfg, &mut self.rep)? {
                continue;
            }
            let v = if buf == pattern(l, new, ss) { new } else { old };
            if v == 0 {
                self.model.remove(&l);
            } else {
                self.model.insert(l, v);
            }
        }
        Ok(())
    }

    /// One atomic unit of the command in flight: every changed LBA old, or every one
    /// new (else torn); an LBA that is neither is lost.
    fn verify_unit(&mut self, f: &mut Ftl, chunk: &[(u64, u64, u64)]) -> Result<(), String> {
        let mut n_new = 0;
        for &(l, old, new) in chunk {
            let mut buf = vec![0u8; self.ss];
            if !read_checked(f, l, &mut buf, self.cfg, &mut self.rep)? {
                continue;
            }
            if buf == pattern(l, new, self.ss) && new != old {
                n_new += 1;
            } else if buf != pattern(l, old, self.ss) {
                self.rep.lost += 1;
            }
        }
        if n_new != 0 && n_new != chunk.iter().filter(|(_, o, n)| o != n).count() {
            self.rep.torn += 1;
        }
        Ok(())
    }

    /// End of life: power-cycle once more (no cut during recovery), check that a device
    /// whose spare was exhausted comes back read-only and that everything acknowledged
    /// still reads back, and report.
    fn finish_read_only(
        mut self,
        f: Ftl,
        progress: &mut dyn FnMut(u64),
    ) -> Result<TortureReport, String> {
        let reason = f.read_only();
        let nand = f.crash();
        let calm = TortureConfig {
            recovery_cut_prob: 0.0,
            ..self.cfg.clone()
        };
        let mut again = recover_with_cuts(nand, &calm, &mut self.rng, &mut self.rep)?;
        if reason == Some(crate::ReadOnlyReason::SpareExhausted) && again.read_only().is_none() {
            return Err("a device whose spare was exhausted came back writable".into());
        }
        check_all(&mut again, &self.model, self.cfg, &mut self.rep)?;
        self.rep.lost_sectors = again.lifetime_stats().lost_sectors;
        self.rep.bad_blocks = again.bad_blocks();
        progress(self.rep.cuts);
        Ok(self.rep)
    }
}

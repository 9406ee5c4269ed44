//! The device a session queries, and how its scans choose a strategy.
//!
//! `--strategy auto` answers the smart-ssd paper's "when to push down" question per scan
//! with the scan paper's analytic model (in-storage-scan-processing §4, equations 6, 8
//! and 9, [`csd_model::scan::ScanParams`]): the table's records, record width and an
//! estimated selectivity go into the model for the device's config, and the strategy
//! with the smallest modeled time runs. The selectivity is estimated without touching
//! the device (reading a sample would change the modeled figures): System R's classic
//! defaults per predicate (equality 1/10, range 1/3, `LIKE` 1/4, `IN` 1/10 per item,
//! conjunctions multiply, disjunctions add); an aggregation returns a few states, so its
//! output selectivity is that of its groups (taken as 0). The reason is printed.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use csd_host::{Client, ScanOptions, Strategy, TableInfo};
use csd_model::scan::ScanParams;
use csd_query::Plan;
use csd_query::plan::{CmpOp, Const, Expr, ExprKind};
use csd_sim::DeviceConfig;

/// A device shared by the scans of a session (commands run one at a time).
pub struct Device {
    client: Mutex<Client>,
    /// Reports of the INSERT / UPDATE / DELETE statements run since last taken.
    dml: Mutex<Vec<csd_host::dml::DmlReport>>,
    /// The device's config (host CPU, ISP costs, energy, geometry).
    pub config: DeviceConfig,
    /// The host threads the scans of this device (and the devices it shares them with)
    /// may run on at once.
    slots: Arc<ScanSlots>,
}

/// How many device scans run at once on the host: an array session's `threads` (each
/// device's scan runs on its own blocking thread, so without this an array with one
/// thread would still scan all its devices at once). A scan takes a slot before its
/// device and keeps it until it ends; it never waits for its consumer (its channel is
/// unbounded), so a slot holder always finishes and no scan can wait forever.
#[derive(Debug)]
pub struct ScanSlots {
    free: Mutex<usize>,
    freed: Condvar,
}

impl ScanSlots {
    /// `n` scans at once (at least one).
    pub fn new(n: usize) -> Arc<ScanSlots> {
        Arc::new(ScanSlots {
            free: Mutex::new(n.max(1)),
            freed: Condvar::new(),
        })
    }

    /// Waits for a free slot; it is given back when the guard drops.
    pub(crate) fn take(&self) -> ScanSlot<'_> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        ScanSlot(self)
    }
}

/// A slot taken from [`ScanSlots`]; given back when dropped.
pub(crate) struct ScanSlot<'a>(&'a ScanSlots);

impl Drop for ScanSlot<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.0.freed.notify_one();
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.config.name)
    }
}

impl Device {
    /// Wraps a client of a device with config `config`.
    pub fn new(client: Client, config: DeviceConfig) -> Device {
        Device::with_slots(client, config, ScanSlots::new(usize::MAX))
    }

    /// [`Device::new`] whose scans take their host threads from `slots`, shared with
    /// other devices (an array's members).
    pub fn with_slots(client: Client, config: DeviceConfig, slots: Arc<ScanSlots>) -> Device {
        Device {
            client: Mutex::new(client),
            dml: Mutex::new(Vec::new()),
            config,
            slots,
        }
    }

    /// A host thread slot for one scan (see [`ScanSlots`]).
    pub(crate) fn scan_slot(&self) -> ScanSlot<'_> {
        self.slots.take()
    }

    /// Records the report of a DML statement that ran on the device.
    pub fn push_dml(&self, r: csd_host::dml::DmlReport) {
        self.dml
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(r);
    }

    /// The DML reports recorded since the last call.
    pub fn take_dml(&self) -> Vec<csd_host::dml::DmlReport> {
        std::mem::take(&mut *self.dml.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The client, for one scan.
    pub fn lock(&self) -> MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Between the scans of a one-shot command: the image's pages the scans read leave
    /// this process ([`csd_device::NvmeDevice::release_read_pages`]; nothing unless the
    /// image was opened for scanning). No modeled effect.
    pub fn release_read_pages(&self) {
        self.lock().device().release_read_pages();
    }

    /// Gives the client back (`None` while a scan still holds the device).
    pub fn into_client(self: Arc<Self>) -> Option<Client> {
        Arc::into_inner(self).map(|d| {
            d.client
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner)
        })
    }
}

/// Which strategy a scan runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Choice {
    /// Always this one.
    Fixed(Strategy),
    /// Per scan, from the analytic model.
    Auto,
}

impl Choice {
    /// Parses `ihp`, `cpu-isp`, `hw-isp` or `auto`.
    pub fn parse(s: &str) -> Option<Choice> {
        if s == "auto" {
            return Some(Choice::Auto);
        }
        Strategy::parse(s).map(Choice::Fixed)
    }

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Choice::Fixed(s) => s.name(),
            Choice::Auto => "auto",
        }
    }
}

/// How a session's scans run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScanSettings {
    /// Strategy choice.
    pub choice: Choice,
    /// Queue depth and poll intervals (the strategy field is set per scan).
    pub options: ScanOptions,
    /// Push partial aggregations into the device (cpu-isp / hw-isp scans).
    pub aggregate_pushdown: bool,
}

impl ScanSettings {
    /// `choice` with the default options of `csd-host`, aggregate pushdown on.
    pub fn new(choice: Choice) -> ScanSettings {
        ScanSettings {
            choice,
            options: ScanOptions::new(Strategy::Ihp),
            aggregate_pushdown: true,
        }
    }

    /// The choice in words.
    pub fn describe(&self) -> &'static str {
        self.choice.name()
    }

    /// The strategy for a scan of `table` running `program`, and why.
    pub fn choose(&self, table: &TableInfo, program: &Plan, device: &Device) -> (Strategy, String) {
        match self.choice {
            Choice::Fixed(s) => (s, "chosen by the user".into()),
            Choice::Auto => auto(table, program, &device.config),
        }
    }
}

/// Estimated fraction of rows a predicate keeps (System R defaults). The strategy
/// choice ([`auto`]) uses these fixed defaults, so its picks do not depend on what a
/// load measured.
pub fn selectivity(e: &Expr) -> f64 {
    selectivity_with(e, &ColumnFacts::none())
}

/// What a load measured of a table's columns (by schema index), for the planner's row
/// estimates: distinct values and each numeric column's least and greatest value.
pub struct ColumnFacts<'a> {
    /// Estimated distinct values of a column.
    pub ndv: &'a dyn Fn(usize) -> Option<u64>,
    /// Least and greatest stored value of a numeric column (the integer the device
    /// compares: days, scaled decimals, microseconds).
    pub bounds: &'a dyn Fn(usize) -> Option<(i64, i64)>,
}

impl ColumnFacts<'static> {
    /// Nothing known: the fixed defaults.
    pub fn none() -> ColumnFacts<'static> {
        ColumnFacts {
            ndv: &|_| None,
            bounds: &|_| None,
        }
    }
}

/// A comparison of a column with an integer constant as the closed interval of values
/// it keeps: `(column, least, greatest)`; `None` for any other predicate.
fn range_of(e: &Expr) -> Option<(usize, i64, i64)> {
    let ExprKind::Cmp { op, left, right } = &e.kind else {
        return None;
    };
    let (column, c, op) = match (&left.kind, &right.kind) {
        (ExprKind::Column { index, .. }, ExprKind::Const(Const::Int(c))) => (*index, *c, *op),
        (ExprKind::Const(Const::Int(c)), ExprKind::Column { index, .. }) => (*index, *c, op.flip()),
        _ => return None,
    };
    let (lo, hi) = match op {
        CmpOp::Lt => (i64::MIN, c.checked_sub(1)?),
        CmpOp::Le => (i64::MIN, c),
        CmpOp::Gt => (c.checked_add(1)?, i64::MAX),
        CmpOp::Ge => (c, i64::MAX),
        CmpOp::Eq | CmpOp::Ne => return None,
    };
    Some((column, lo, hi))
}

/// The share of a column's values within `[lo, hi]`, its values taken as spread evenly
/// over its bounds `(min, max)`; at least one value's share (bounds are estimates:
/// INSERT widens them, DELETE does not narrow them).
fn range_share((min, max): (i64, i64), lo: i64, hi: i64) -> f64 {
    let span = (i128::from(max) - i128::from(min) + 1) as f64;
    let kept = i128::from(hi.min(max)) - i128::from(lo.max(min)) + 1;
    (kept.max(1) as f64 / span).min(1.0)
}

/// [`selectivity`] knowing what a load measured ([`ColumnFacts`]): `column = constant`
/// keeps `1 / ndv`, `column <> constant` all but that, and `column IN (k constants)`
/// keeps `k / ndv` (values assumed equally frequent); the comparisons of one numeric
/// column with constants in a conjunction (`d >= a AND d < b`) keep the share of its
/// bounds between them (values assumed spread evenly). The planner's row estimates use
/// it ([`crate::exec`]).
pub fn selectivity_with(e: &Expr, facts: &ColumnFacts<'_>) -> f64 {
    // The share a range on a column with known bounds keeps.
    let ranged = |e: &Expr| {
        let (c, lo, hi) = range_of(e)?;
        Some((c, lo, hi, (facts.bounds)(c)?))
    };
    // `1 / ndv` of the column `e` is, if known.
    let one_in = |e: &Expr| match &e.kind {
        ExprKind::Column { index, .. } => (facts.ndv)(*index)
            .filter(|&n| n > 0)
            .map(|n| 1.0 / n as f64),
        _ => None,
    };
    let is_const = |e: &Expr| matches!(e.kind, ExprKind::Const(_));
    match &e.kind {
        ExprKind::And(es) => {
            // Ranges on one column intersect (`d >= a AND d < b` is one interval, not two
            // independent halves); everything else multiplies.
            let mut ranges: Vec<(usize, i64, i64, (i64, i64))> = Vec::new();
            let mut s = 1.0;
            for x in es {
                match ranged(x) {
                    Some((c, lo, hi, b)) => match ranges.iter_mut().find(|r| r.0 == c) {
                        Some(r) => (r.1, r.2) = (r.1.max(lo), r.2.min(hi)),
                        None => ranges.push((c, lo, hi, b)),
                    },
                    None => s *= selectivity_with(x, facts),
                }
            }
            ranges
                .into_iter()
                .fold(s, |s, (_, lo, hi, b)| s * range_share(b, lo, hi))
        }
        ExprKind::Or(es) => es
            .iter()
            .map(|x| selectivity_with(x, facts))
            .sum::<f64>()
            .min(1.0),
        ExprKind::Not(x) => 1.0 - selectivity_with(x, facts),
        ExprKind::Cmp { op, left, right } => {
            if let Some((_, lo, hi, b)) = ranged(e) {
                return range_share(b, lo, hi);
            }
            let eq = match (is_const(left), is_const(right)) {
                (false, true) => one_in(left),
                (true, false) => one_in(right),
                _ => None,
            };
            match op {
                CmpOp::Eq => eq.unwrap_or(0.1),
                CmpOp::Ne => eq.map_or(0.9, |s| 1.0 - s),
                _ => 1.0 / 3.0,
            }
        }
        ExprKind::InList {
            expr,
            list,
            negated,
        } => {
            let per = one_in(expr).unwrap_or(0.1);
            let s = (per * list.len() as f64).min(1.0);
            if *negated { 1.0 - s } else { s }
        }
        ExprKind::Like { negated, .. } => {
            if *negated {
                0.75
            } else {
                0.25
            }
        }
        ExprKind::Const(Const::Bool(false)) => 0.0,
        _ => 1.0,
    }
}

/// The model's pick for one scan, with the reason in words.
pub fn auto(table: &TableInfo, program: &Plan, cfg: &DeviceConfig) -> (Strategy, String) {
    let sel = program.filter.as_ref().map_or(1.0, selectivity);
    // Bytes a selected row sends to the host, relative to the record: projected columns
    // only; an aggregation sends a few states.
    let width = table.schema.row_width().max(1) as f64;
    let out = if program.is_aggregate() {
        0.0
    } else {
        let cols = program.referenced_columns();
        let bytes: usize = cols
            .iter()
            .filter_map(|&c| table.schema.columns().get(c).map(|c| c.ty.width()))
            .sum();
        (bytes as f64 / width).min(1.0)
    };
    let mut p = ScanParams::from_device(cfg);
    p.records = table.rows.max(1);
    p.record_bytes = table.schema.row_width().max(1) as u64;
    p.selectivity = (sel * out).clamp(0.0, 1.0);
    let mut times = Vec::new();
    for s in Strategy::ALL {
        let t = match s {
            Strategy::Ihp => p.t_scan_ihp(),
            Strategy::CpuIsp => p.t_scan_baseline_isp(),
            Strategy::HwIsp => p.t_scan_hw_isp(),
        };
        if let Ok(t) = t {
            times.push((s, t));
        }
    }
    let Some(&(best, _)) = times.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
        return (
            Strategy::Ihp,
            "auto: the model has no estimate for this table; in-host processing".into(),
        );
    };
    let list: Vec<String> = times
        .iter()
        .map(|(s, t)| format!("{} {:.3} ms", s.name(), t * 1e3))
        .collect();
    (
        best,
        format!(
            "auto: {} (model eq. 6/8/9 with σ≈{:.3} (estimated selectivity {:.3} × output \
             share {:.2}): {})",
            best.name(),
            p.selectivity,
            sel,
            out,
            list.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::{ColumnFacts, ScanSlots, selectivity, selectivity_with};
    use csd_query::plan::{CmpOp, Const, Expr, ExprKind};
    use csd_query::types::DataType;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn col(index: usize) -> Expr {
        let name = format!("c{index}");
        let kind = ExprKind::Column {
            index,
            name,
            nullable: false,
        };
        Expr::new(kind, DataType::Date)
    }

    fn cmp(index: usize, op: CmpOp, c: i64) -> Expr {
        let (left, right) = (col(index), Expr::constant(Const::Int(c), DataType::Date));
        // Written both ways round: `c op column` is the same range.
        let (left, right, op) = if c % 2 == 0 {
            (left, right, op)
        } else {
            (right, left, op.flip())
        };
        let kind = ExprKind::Cmp {
            op,
            left: Box::new(left),
            right: Box::new(right),
        };
        Expr::new(kind, DataType::Bool)
    }

    fn and(es: Vec<Expr>) -> Expr {
        Expr::new(ExprKind::And(es), DataType::Bool)
    }

    /// TPC-H Q14's month of ship dates over lineitem's 2,526 days is one interval, 1.2%
    /// of the rows, not two independent halves; columns without bounds keep the fixed
    /// defaults, and so does [`selectivity`] (the strategy choice's).
    #[test]
    fn ranges_take_their_share_of_the_measured_bounds() {
        // 1992-01-02 ..= 1998-12-01 as days; the month 1995-09-01 ..< 1995-10-01.
        let (min, max) = (8_036, 10_561);
        let bounds = |c: usize| (c == 0).then_some((min, max));
        let facts = ColumnFacts {
            ndv: &|_| None,
            bounds: &bounds,
        };
        let month = and(vec![cmp(0, CmpOp::Ge, 9_374), cmp(0, CmpOp::Lt, 9_404)]);
        let s = selectivity_with(&month, &facts);
        assert!((s - 30.0 / 2_526.0).abs() < 1e-9, "{s}");
        assert!((selectivity(&month) - 1.0 / 9.0).abs() < 1e-9);
        // One side: everything from the constant up (inclusive) or below it.
        let s = selectivity_with(&cmp(0, CmpOp::Gt, max - 100), &facts);
        assert!((s - 100.0 / 2_526.0).abs() < 1e-9, "{s}");
        let s = selectivity_with(&cmp(0, CmpOp::Le, min + 9), &facts);
        assert!((s - 10.0 / 2_526.0).abs() < 1e-9, "{s}");
        // Past the bounds: everything, or one value's share (never zero rows).
        assert_eq!(selectivity_with(&cmp(0, CmpOp::Ge, min - 50), &facts), 1.0);
        let s = selectivity_with(&cmp(0, CmpOp::Gt, max + 1_000), &facts);
        assert!((s - 1.0 / 2_526.0).abs() < 1e-9, "{s}");
        // An empty intersection, extreme constants (no overflow).
        let empty = and(vec![cmp(0, CmpOp::Lt, 9_000), cmp(0, CmpOp::Gt, 9_500)]);
        assert!(selectivity_with(&empty, &facts) <= 1.0 / 2_526.0 + 1e-12);
        let wide = and(vec![
            cmp(0, CmpOp::Ge, i64::MIN),
            cmp(0, CmpOp::Le, i64::MAX),
        ]);
        assert_eq!(selectivity_with(&wide, &facts), 1.0);
        assert_eq!(
            selectivity_with(&cmp(0, CmpOp::Lt, i64::MIN), &facts),
            1.0 / 3.0
        );
        // A column without bounds next to one with them: 1/3 per comparison there.
        let mixed = and(vec![month.clone(), cmp(1, CmpOp::Lt, 24)]);
        let s = selectivity_with(&mixed, &facts);
        assert!((s - 30.0 / 2_526.0 / 3.0).abs() < 1e-9, "{s}");
    }

    /// However many scans want to run, at most `n` hold a slot at once, and every one
    /// gets to run.
    #[test]
    fn scan_slots_bound_the_scans_running_at_once() {
        for n in [1, 2, 3] {
            let slots = ScanSlots::new(n);
            let (inside, most, done) = (
                AtomicUsize::new(0),
                AtomicUsize::new(0),
                AtomicUsize::new(0),
            );
            std::thread::scope(|s| {
                for _ in 0..6 {
                    s.spawn(|| {
                        for _ in 0..20 {
                            let _slot = slots.take();
                            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::yield_now();
                            inside.fetch_sub(1, Ordering::SeqCst);
                            done.fetch_add(1, Ordering::SeqCst);
                        }
                    });
                }
            });
            assert!(most.load(Ordering::SeqCst) <= n, "{n} slots");
            assert_eq!(done.load(Ordering::SeqCst), 120);
        }
    }
}

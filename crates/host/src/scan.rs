//! Running a device program (a filter with a projection or a partial aggregation,
//! [`csd_query::Plan`]) over a table stored on the device, three ways (scan paper
//! §4.2–§4.4, smart-ssd paper §3–§4). SQL reaches it through `csd-sql` (DataFusion plans,
//! this module scans):
//!
//! * [`Strategy::Ihp`] (in-host processing): the host reads every table page over the
//!   link, keeping `queue_depth` reads in flight, and its CPU evaluates them; charged
//!   `isp.host_cycles_per_record` per record examined (Table 2: 0.0142 µs = 32 cycles at
//!   2.26 GHz), `isp.host_cycles_per_result` per record that passed and
//!   `isp.host_cycles_per_page` per page, at the host clock, on `host.cores` cores.
//! * [`Strategy::CpuIsp`] / [`Strategy::HwIsp`]: the host OPENs a device session
//!   (smart-ssd §3.1), polls GET with an adaptive interval until the session is done,
//!   merging result chunks as they come, then CLOSEs it. Under `HwIsp` a projection's
//!   matching records cross the link and the host folds them, charged like IHP's
//!   per-record cost on those records only; an aggregation is folded by the flash
//!   controller's logic (scan paper Figure 3) and only its state crosses the link.
//!
//! The same [`Evaluator`] runs in every strategy, so results are identical; only where it
//! runs and how its [`WorkCounters`] are charged differ.
//!
//! The report attributes the run from counters the device and host kept while working:
//! the device's telemetry log page is read before and after (busy time per resource
//! class, energy counters), and the host CPU is modeled here ([`HostCpu`]) with its
//! own reservations. Modeled time is from the first command after the opening telemetry
//! read to the end of the host's last work; wall-clock time is measured separately.
//!
//! FLIXR (flixr §4.4): when the table has a per-page index ([`TableInfo::index`]) and
//! the program's filter constrains the indexed column ([`crate::index::rule_for`]), the
//! scan registers the rule (SEND_IDX_ICR) and drops it after (DropIdxIcr). IHP reads the
//! table with READ_IDX instead of Read (same ranges, same queue depth): the device sends
//! only the pages whose entry may match. ISP sessions carry the rule in their OPEN and
//! the firmware streams only those pages. The report counts the pages skipped and the
//! index-cache misses. [`ScanOptions::use_index`] turns this off for comparison; a table
//! without an index scans exactly as before.
//!
//! FLIXR joins (flixr §4.5): [`ScanOptions::join`] makes an in-host scan read the
//! join's first (build) table with READ_IDX_JOIN1, which ORs the buckets of its rows'
//! join keys into a per-table index (registered by the caller with SEND_TIDX_ENC; the
//! rule is the filter's on the indexed column, or one matching every value), and the
//! second (probe) table with READ_IDX_JOIN2 under a join rule (SEND_TIDX_ICR), which
//! reads only the pages whose bitmap entry shares a bucket with it. Both return pages
//! to the host, as READ_IDX does: join reads run in-host ([`Strategy::Ihp`]) only.
//!
//! Polling (smart-ssd §3.1 used a fixed 10 ms and asked for an adaptive interval): a GET
//! that brought data or says `more` is followed after `poll_min_us`; otherwise the
//! interval doubles from the last one, up to half the time left the host estimates from
//! the progress GET reports (pages done of pages total since OPEN) and within
//! `poll_min_us..=poll_max_us`. Doubling matters for a result stream: a GET that falls
//! between two chunks used to send the host to sleep for half the time left, and a
//! session whose arena filled meanwhile stalled (the scan paper's Figure 7 at σ = 1 over
//! PCIe ran 12% slower than its model).

use crate::catalog::TableInfo;
use crate::client::{CommandIssuer, HostError};
use csd_device::{
    Command, IspMode, IspOpen, Payload, PinnedRead, SessionState, TableExtent, Telemetry,
};
use csd_query::{
    Batch, Evaluator, MergeTally, ParEval, PartialResult, Plan, SharedPages, WorkCounters,
};
use csd_sim::events::{self, Counters, Recording, ResourceId, TimeModel};
use csd_sim::{DeviceConfig, EnergyCounters, EnergyReport, Resource, ResourceClass, SimTime};
use csd_table::PageView;
use csd_table::page::Layout;
use std::sync::Arc;
use std::time::Instant;

/// Where a query's filter and aggregation run: the scan paper's three strategies (the
/// same enum its analytic model uses, so a run and its model are named alike).
pub use csd_model::scan::Strategy;

/// Knobs of a query run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScanOptions {
    /// Where the work runs.
    pub strategy: Strategy,
    /// IHP: read commands in flight.
    pub queue_depth: usize,
    /// ISP: first and smallest GET poll interval, µs.
    pub poll_min_us: f64,
    /// ISP: largest GET poll interval, µs (smart-ssd §3.1: 10 ms).
    pub poll_max_us: f64,
    /// Use the table's FLIXR per-page index when the filter constrains its column.
    pub use_index: bool,
    /// Read the table as one side of a FLIXR join (in-host strategy only).
    pub join: Option<JoinRead>,
    /// How the scan's commands are placed in modeled time: on calendars, or recorded into
    /// the event core ([`csd_sim::events`]: every resource first-come first-served in
    /// modeled-arrival order). `Events` records the scan on its own thread unless a
    /// recording is on already (then the scan is part of the caller's).
    pub time_model: TimeModel,
}

/// How a scan reads its table as one side of a FLIXR join (flixr §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinRead {
    /// The first (build) table: READ_IDX_JOIN1 filling per-table index `tia`.
    Build {
        /// The per-table index (of SEND_TIDX_ENC over this table's join key).
        tia: u16,
    },
    /// The second (probe) table: READ_IDX_JOIN2 under join rule `rule`.
    Probe {
        /// The join rule (of SEND_TIDX_ICR over this table and the per-table index).
        rule: u16,
    },
}

impl ScanOptions {
    /// Defaults for `strategy`: 32 reads in flight; polls between 50 µs and 10 ms.
    pub fn new(strategy: Strategy) -> ScanOptions {
        ScanOptions {
            strategy,
            queue_depth: 32,
            poll_min_us: 50.0,
            poll_max_us: 10_000.0,
            use_index: true,
            join: None,
            time_model: TimeModel::default(),
        }
    }
}

/// The host CPU model: `cores` resources at the host clock; work goes to the core that
/// frees up first. While the thread records into the event core
/// ([`csd_sim::events`]), the cores are lent to it, so the core books each page's
/// evaluation in arrival order on the core that can start it first;
/// [`HostCpu::take_back`] returns them when the core has booked everything.
#[derive(Debug, Clone)]
pub struct HostCpu {
    cores: Vec<Resource>,
    /// The pool the event core holds while it has the cores.
    lent: Option<ResourceId>,
    hz: f64,
    cycles: u64,
}

impl HostCpu {
    /// A host CPU with `threads` cores of the config's host (at least one).
    pub fn new(cfg: &DeviceConfig, threads: u32) -> HostCpu {
        let cores = vec![Resource::new(); threads.max(1) as usize];
        let (cores, lent) = match events::lend(ResourceClass::HostCpu, cores) {
            Ok(id) => (Vec::new(), Some(id)),
            Err(cores) => (cores, None),
        };
        HostCpu {
            cores,
            lent,
            hz: cfg.host.clock_mhz * 1e6,
            cycles: 0,
        }
    }

    /// Run `cycles` from `at`; returns when they are done.
    pub fn run(&mut self, at: SimTime, cycles: u64) -> SimTime {
        self.cycles += cycles;
        let ns = (cycles as f64 / self.hz * 1e9).ceil() as u64;
        if let Some(pool) = self.lent {
            return events::record_stage(pool, at, ns).1;
        }
        match self.cores.iter_mut().min_by_key(|c| c.free_at()) {
            Some(core) => core.reserve(at, ns).1,
            None => at,
        }
    }

    /// Take the cores back from the event core, which has booked every stage
    /// ([`csd_sim::events::run_all`]); nothing to do when they were never lent.
    pub fn take_back(&mut self) {
        if let Some(pool) = self.lent.take() {
            match events::take_back(pool) {
                Some(cores) => self.cores = cores,
                None => debug_assert!(false, "the event core lost a scan's host cores"),
            }
        }
    }

    /// Cycles charged so far.
    pub fn cycles(&self) -> u64 {
        self.cycles
    }

    /// Busy nanoseconds summed over cores, and the number of cores (after
    /// [`HostCpu::take_back`] on the event core).
    pub fn busy(&self) -> (u64, usize) {
        debug_assert!(self.lent.is_none(), "the host cores are still lent");
        (
            self.cores.iter().map(Resource::busy_ns).sum(),
            self.cores.len(),
        )
    }
}

/// A stage of the modeled time breakdown (serialized as its name, e.g. `flash_array`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageName {
    /// The flash dies (array reads).
    FlashArray,
    /// The flash channels (dies to controller DRAM).
    FlashToDram,
    /// Controller DRAM.
    Dram,
    /// The device's embedded cores.
    EmbeddedCpu,
    /// The host link (controller DRAM to the host).
    DramToHost,
    /// The host's cores.
    HostCpu,
}

impl StageName {
    /// Every stage, in the breakdown's order.
    pub const ALL: [StageName; 6] = [
        StageName::FlashArray,
        StageName::FlashToDram,
        StageName::Dram,
        StageName::EmbeddedCpu,
        StageName::DramToHost,
        StageName::HostCpu,
    ];

    /// The stage's name in reports (`flash_array` …).
    pub const fn name(self) -> &'static str {
        match self {
            StageName::FlashArray => "flash_array",
            StageName::FlashToDram => "flash_to_dram",
            StageName::Dram => "dram",
            StageName::EmbeddedCpu => "embedded_cpu",
            StageName::DramToHost => "dram_to_host",
            StageName::HostCpu => "host_cpu",
        }
    }

    /// The stage a report names, if any.
    pub fn parse(name: &str) -> Option<StageName> {
        StageName::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl std::fmt::Display for StageName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One stage of the modeled time breakdown.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    /// Which stage.
    pub name: StageName,
    /// Resources of the stage.
    pub members: usize,
    /// Busy time of the stage per member (its time if its members share the work evenly).
    pub busy_ns: u64,
    /// `busy_ns / modeled time`.
    pub utilization: f64,
}

/// Everything a query run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryReport {
    /// The strategy.
    pub strategy: Strategy,
    /// Table name and layout.
    pub table: String,
    /// The table's page layout.
    pub layout: Layout,
    /// Table pages and bytes scanned.
    pub pages: u64,
    /// Table bytes scanned (pages × page bytes).
    pub table_bytes: u64,
    /// Rows in the table.
    pub rows: u64,
    /// The evaluator's work over all pages.
    pub work: WorkCounters,
    /// Result rows.
    pub result_rows: u64,
    /// Modeled elapsed time, ns.
    pub modeled_ns: u64,
    /// The breakdown per stage.
    pub stages: Vec<Stage>,
    /// The stage with the highest utilization (`None`: a report without stages).
    pub bottleneck: Option<StageName>,
    /// Flash page reads.
    pub flash_reads: u64,
    /// Bytes over the flash channels.
    pub channel_bytes: u64,
    /// Bytes through controller DRAM.
    pub dram_bytes: u64,
    /// Bytes over the host link (both directions).
    pub host_link_bytes: u64,
    /// Embedded-CPU cycles.
    pub device_cpu_cycles: u64,
    /// Host-CPU cycles.
    pub host_cpu_cycles: u64,
    /// Commands the host issued (reads, or OPEN/GETs/CLOSE).
    pub commands: u64,
    /// Energy per component.
    pub energy: EnergyReport,
    /// Wall-clock seconds of the run (the emulator's speed).
    pub wall_s: f64,
    /// The FLIXR index and rule the scan used (`None`: it read every page).
    pub index: Option<String>,
    /// Table pages the per-page index ruled out (never read from flash).
    pub pages_skipped: u64,
    /// Index-cache misses of the device while comparing entries.
    pub index_misses: u64,
    /// What the event core did when the scan recorded on its own (`time_model` events and
    /// no recording of the caller's): stages booked and every count that must stay 0.
    pub event_core: Option<Counters>,
    /// Modeled nanoseconds of the scan's setup commands issued by its caller (a FLIXR
    /// join's SEND_TIDX_ENC / SEND_TIDX_ICR and their release), included in
    /// `modeled_ns`; 0 for a scan without any.
    pub setup_ns: u64,
}

impl QueryReport {
    /// The bottleneck's name (`flash_array` …), `none` for a report without stages.
    pub fn bottleneck_name(&self) -> &'static str {
        self.bottleneck.map_or("none", StageName::name)
    }

    /// Modeled seconds.
    pub fn modeled_s(&self) -> f64 {
        self.modeled_ns as f64 / 1e9
    }

    /// Table bytes scanned per modeled second.
    pub fn modeled_bytes_per_s(&self) -> f64 {
        self.table_bytes as f64 / self.modeled_s().max(1e-12)
    }

    /// Rows the emulator processed per wall-clock second.
    pub fn wall_rows_per_s(&self) -> f64 {
        self.rows as f64 / self.wall_s.max(1e-9)
    }

    /// Table bytes the emulator scanned per wall-clock second.
    pub fn wall_bytes_per_s(&self) -> f64 {
        self.table_bytes as f64 / self.wall_s.max(1e-9)
    }
}

fn telemetry(c: &mut impl CommandIssuer) -> Result<Telemetry, HostError> {
    match c
        .exec(Command::GetLogPage(csd_device::LogPage::Telemetry))?
        .payload
    {
        Payload::Telemetry(t) => Ok(t),
        _ => Err(HostError::Invalid("telemetry log page missing".into())),
    }
}

fn busy(t: &Telemetry, class: ResourceClass) -> (u64, usize) {
    t.busy
        .iter()
        .find(|u| u.class == class)
        .map_or((0, 0), |u| (u.busy_ns, u.members))
}

/// The whole table pages of a READ_IDX reply, in order: a page's LBAs come back
/// together (the device stores one entry per page in each of its LBAs); a page of which
/// only some LBAs came back (a plain write changed part of it) is read again whole with a
/// Read. Counts the pages skipped; returns the data and the extra commands.
fn whole_pages<C: CommandIssuer>(
    c: &mut C,
    table: &TableInfo,
    lpp: u64,
    r: csd_device::IndexRead,
    at: SimTime,
    skipped: &mut u64,
) -> Result<(Vec<u8>, u64), HostError> {
    let ls = c.identify().lba_size as usize;
    let page = |l: u64| (l - table.first_lba) / lpp;
    let mut out = Vec::with_capacity(r.data.len());
    let mut extra = 0;
    let mut i = 0;
    let mut read_pages = 0;
    while i < r.lbas.len() {
        let p = page(r.lbas[i]);
        let mut j = i;
        while j < r.lbas.len() && page(r.lbas[j]) == p {
            j += 1;
        }
        if (j - i) as u64 == lpp {
            out.extend_from_slice(&r.data[i * ls..j * ls]);
        } else {
            let comp = c.exec_at(
                Command::Read {
                    lba: table.first_lba + p * lpp,
                    blocks: lpp as u32,
                },
                at,
            )?;
            extra += 1;
            let Payload::Data(d) = comp.payload else {
                return Err(HostError::Invalid("Read returned no data".into()));
            };
            out.extend_from_slice(&d);
        }
        read_pages += 1;
        i = j;
    }
    let examined = (r.lbas.len() + r.skipped.len()) as u64 / lpp.max(1);
    *skipped += examined.saturating_sub(read_pages);
    Ok((out, extra))
}

/// On the event core: book everything recorded and give every instant the issuer and its
/// device keep its final value (nothing outside a recording).
fn settle_events<C: CommandIssuer>(c: &mut C) {
    if c.event_core() && events::recording() {
        c.run_events();
        c.settle_instants(&mut events::value);
    }
}

/// A renaming of instants (the event core's compaction, or final values).
type Settle<'a> = dyn FnMut(SimTime) -> SimTime + 'a;

/// When the event core's graph is due for compaction ([`events::compact_due`]), compact
/// it, renaming every instant the issuer and its device keep and those the scan holds
/// (`held` applies a renaming to each).
fn compact_events<C: CommandIssuer>(c: &mut C, held: &mut dyn FnMut(&mut Settle<'_>)) {
    if !events::compact_due() {
        return;
    }
    let mut roots = Vec::new();
    let mut note = |t: SimTime| {
        roots.push(t);
        t
    };
    c.settle_instants(&mut note);
    held(&mut note);
    if let Some(remap) = events::compact(&roots) {
        c.settle_instants(&mut |t| remap.apply(t));
        held(&mut |t| remap.apply(t));
    }
}

/// Rows a host-side (IHP) projection gathers before handing them to the sink.
pub const IHP_CHUNK_ROWS: usize = 8192;

/// Run the device program `plan` over `table` with `opts` (`cfg` is the platform: host
/// CPU, ISP costs, energy; the device is reached only through `c`), handing every partial result
/// to `sink` as it arrives (projected rows in page order, in chunks; aggregation states,
/// one per device chunk, which the caller merges), and return the report. The sink
/// never touches the device, so it cannot change a modeled figure. `result_rows` of the
/// report counts the rows (or groups) handed to the sink.
pub fn run_scan<C: CommandIssuer>(
    c: &mut C,
    table: &TableInfo,
    plan: &Plan,
    cfg: &DeviceConfig,
    opts: &ScanOptions,
    sink: &mut dyn FnMut(PartialResult) -> Result<(), HostError>,
) -> Result<QueryReport, HostError> {
    // A scan asked to run on the event core records on its own when its caller does not.
    let own = (opts.time_model == TimeModel::Events && c.event_core())
        .then(Recording::start)
        .flatten();
    let ran = scan(c, table, plan, cfg, opts, sink);
    let Some(rec) = own else {
        return ran;
    };
    // Nothing stays recorded once the scan is over (it also failed cleanly).
    settle_events(c);
    let counters = rec.finish().counters();
    ran.map(|r| QueryReport {
        event_core: Some(counters),
        ..r
    })
}

/// [`run_scan`] inside whatever recording is on.
fn scan<C: CommandIssuer>(
    c: &mut C,
    table: &TableInfo,
    plan: &Plan,
    cfg: &DeviceConfig,
    opts: &ScanOptions,
    sink: &mut dyn FnMut(PartialResult) -> Result<(), HostError>,
) -> Result<QueryReport, HostError> {
    if plan.schema.fingerprint() != table.schema.fingerprint() {
        return Err(HostError::Invalid(format!(
            "the plan is for table `{}`, not for `{}`",
            plan.table, table.name
        )));
    }
    let wall0 = Instant::now();
    let before = telemetry(c)?;
    // On the event core ([`csd_sim::events`], while the caller records) the scan starts
    // at a fixed instant; its commands are recorded and booked in arrival order.
    let t0 = c.settle_now();
    let join_table = join_table(table, opts)?;
    // FLIXR: the rule the filter implies on the indexed column, registered for this scan
    // (a join's build side always needs one: a rule matching every value by default).
    let index = register_rule(c, table, plan, opts)?;
    let read = reads_for(table, opts.join, &index, join_table)?;
    // The scan's commands start after the rule's registration (counted in the run).
    let t_run = c.now().max(t0);
    // The host scans with all its cores (a DBMS's parallel scan); the scan paper's
    // host has one.
    let mut host = HostCpu::new(cfg, cfg.host.cores);
    let run = Run {
        table,
        plan,
        cfg,
        opts,
        t0: t_run,
        index: index.as_ref().map(|(t, r, _)| (*t, *r)),
        read,
    };
    let mut skipped = (0u64, 0u64);
    let mut emitted = 0u64;
    let mut counting = |chunk: PartialResult| {
        emitted += chunk.len() as u64;
        sink(chunk)
    };
    let ran = match opts.strategy {
        Strategy::Ihp => run.ihp(c, &mut host, &mut counting, &mut skipped),
        Strategy::CpuIsp => run.isp(c, &mut host, IspMode::Cpu, &mut counting, &mut skipped),
        Strategy::HwIsp => run.isp(c, &mut host, IspMode::Hw, &mut counting, &mut skipped),
    };
    // The rule is query state: released whatever happened.
    let dropped = match &index {
        Some((table, rule, _)) => c
            .exec(Command::DropIdxIcr {
                table: *table,
                rule: *rule,
            })
            .map(|_| ()),
        None => Ok(()),
    };
    // Everything recorded is booked (the scan's figures are read from the resources'
    // counters) and every instant the client and the device keep becomes final.
    settle_events(c);
    host.take_back();
    let (work, mut commands, end) = ran?;
    dropped?;
    if index.is_some() {
        commands += 2; // SEND_IDX_ICR and its release
    }
    let end = events::value(end).max(c.now());
    c.wait_until(end);
    let after = telemetry(c)?;
    settle_events(c);
    let modeled_ns = end.since(t0).max(1);
    let counters = run_counters(&before, &after, &host);
    let energy = EnergyReport::compute(&cfg.energy, &counters, modeled_ns);
    let stages = stages(&before, &after, &host, modeled_ns);
    let bottleneck = bottleneck_of(&stages);
    Ok(QueryReport {
        strategy: opts.strategy,
        table: table.name.clone(),
        layout: table.layout,
        pages: table.pages,
        table_bytes: table.bytes(),
        rows: table.rows,
        work,
        result_rows: emitted,
        modeled_ns,
        stages,
        bottleneck,
        flash_reads: counters.page_reads,
        channel_bytes: counters.channel_bytes,
        dram_bytes: counters.dram_bytes,
        host_link_bytes: counters.host_link_bytes,
        device_cpu_cycles: counters.cpu_cycles,
        host_cpu_cycles: counters.host_cpu_cycles,
        commands,
        energy,
        wall_s: wall0.elapsed().as_secs_f64(),
        index: index_text(opts.join, index),
        pages_skipped: skipped.0,
        event_core: None,
        setup_ns: 0,
        index_misses: skipped.1,
    })
}

/// The command an in-host scan reads with: Read, READ_IDX under the scan's rule, or a
/// join read (JOIN1 under the rule, JOIN2 under the join rule of FLIXR table `join_table`).
fn reads_for(
    table: &TableInfo,
    join: Option<JoinRead>,
    index: &Option<(u8, u16, String)>,
    join_table: Option<u8>,
) -> Result<Reads, HostError> {
    Ok(match (join, index, join_table) {
        (None, Some((t, r, _)), _) => Reads::Rule(*t, *r),
        (None, None, _) => Reads::Plain,
        (Some(JoinRead::Build { tia }), Some((t, r, _)), _) => Reads::Join1(*t, *r, tia),
        (Some(JoinRead::Probe { rule }), _, Some(t)) => Reads::Join2(t, rule),
        _ => {
            return Err(HostError::Invalid(format!(
                "no rule to read the join's table `{}` under",
                table.name
            )));
        }
    })
}

/// The stage with the highest utilization (the first of equals), `None` without stages.
fn bottleneck_of(stages: &[Stage]) -> Option<StageName> {
    stages
        .iter()
        .fold(None::<&Stage>, |b, s| match b {
            Some(b) if b.utilization >= s.utilization => Some(b),
            _ => Some(s),
        })
        .map(|s| s.name)
}

/// The FLIXR table a join read reads (`None` without a join); refused for a strategy
/// other than in-host processing or a table without a FLIXR index.
fn join_table(table: &TableInfo, opts: &ScanOptions) -> Result<Option<u8>, HostError> {
    if opts.join.is_some() && opts.strategy != Strategy::Ihp {
        return Err(HostError::Invalid(format!(
            "a FLIXR join read (READ_IDX_JOIN1/2) returns pages to the host: scan `{}` with ihp, not {}",
            table.name,
            opts.strategy.name()
        )));
    }
    match (opts.join, &table.index) {
        (None, _) => Ok(None),
        (Some(_), Some(ix)) => Ok(Some(ix.flixr_table)),
        (Some(_), None) => Err(HostError::Invalid(format!(
            "table `{}` has no FLIXR index: it cannot be read with a join read",
            table.name
        ))),
    }
}

/// Register the FLIXR rule this scan reads under, if it wants one: one term per indexed
/// column the filter constrains (the table's first index and its secondary keys, flixr
/// §6.4), or for a join's build side with no such term a rule matching every value.
/// One term on the first index is the classic SEND_IDX_ICR, anything else the multi-key
/// form. Returns `(FLIXR table, rule id, description)`.
fn register_rule<C: CommandIssuer>(
    c: &mut C,
    table: &TableInfo,
    plan: &Plan,
    opts: &ScanOptions,
) -> Result<Option<(u8, u16, String)>, HostError> {
    let wants_rule = match opts.join {
        None => opts.use_index,
        Some(JoinRead::Build { .. }) => true,
        // JOIN2 reads under the join rule, not this one.
        Some(JoinRead::Probe { .. }) => false,
    };
    let Some(ix) = table.index.as_ref().filter(|_| wants_rule) else {
        return Ok(None);
    };
    let mut terms: Vec<(&crate::catalog::TableIndex, csd_device::IndexRule)> = Vec::new();
    if opts.use_index {
        for k in ix.keys() {
            if let Some(col) = table
                .schema
                .columns()
                .iter()
                .position(|c| crate::catalog::same_name(&c.name, &k.column))
                && let Some(rule) = crate::index::rule_for(plan.filter.as_ref(), col)
            {
                terms.push((k, rule));
            }
        }
    }
    if terms.is_empty() && matches!(opts.join, Some(JoinRead::Build { .. })) {
        terms.push((
            ix,
            csd_device::IndexRule::Between {
                lo: i64::MIN,
                hi: i64::MAX,
            },
        ));
    }
    if terms.is_empty() {
        return Ok(None);
    }
    let text = terms
        .iter()
        .map(|(k, r)| format!("{} ({})", k.name, crate::index::describe_rule(&k.column, r)))
        .collect::<Vec<_>>()
        .join(" AND ");
    let cmd = if terms.len() == 1 && std::ptr::eq(terms[0].0, ix) {
        Command::SendIdxIcr {
            table: ix.flixr_table,
            rule: terms[0].1.clone(),
        }
    } else {
        Command::SendIdxIcrKeys {
            table: ix.flixr_table,
            terms: terms
                .iter()
                .map(|(k, r)| csd_device::RuleTerm {
                    column: k.column.clone(),
                    rule: r.clone(),
                })
                .collect(),
        }
    };
    let id = match c.exec(cmd)?.payload {
        Payload::FlixrRule(id) => id,
        _ => return Err(HostError::Invalid("SendIdxIcr returned no rule id".into())),
    };
    Ok(Some((ix.flixr_table, id, text)))
}

/// The run's energy counters: the device's between the two telemetry pages (less the
/// closing telemetry read itself, which is not part of the query) and the host's cycles.
fn run_counters(before: &Telemetry, after: &Telemetry, host: &HostCpu) -> EnergyCounters {
    let mut counters = EnergyCounters {
        page_reads: after.counters.page_reads - before.counters.page_reads,
        page_programs: after.counters.page_programs - before.counters.page_programs,
        block_erases: after.counters.block_erases - before.counters.block_erases,
        channel_bytes: after.counters.channel_bytes - before.counters.channel_bytes,
        dram_bytes: after.counters.dram_bytes - before.counters.dram_bytes,
        host_link_bytes: after.counters.host_link_bytes - before.counters.host_link_bytes,
        cpu_cycles: after.counters.cpu_cycles - before.counters.cpu_cycles,
        host_cpu_cycles: 0,
    };
    counters.host_link_bytes = counters
        .host_link_bytes
        .saturating_sub(csd_device::command::TELEMETRY_BYTES);
    counters.dram_bytes = counters
        .dram_bytes
        .saturating_sub(csd_device::command::TELEMETRY_BYTES);
    counters.host_cpu_cycles = host.cycles();
    counters
}

/// The modeled time breakdown: each device stage's busy time per member between the two
/// telemetry pages, and the host CPU's.
fn stages(before: &Telemetry, after: &Telemetry, host: &HostCpu, modeled_ns: u64) -> Vec<Stage> {
    let mut stages = Vec::new();
    for (name, class) in [
        (StageName::FlashArray, ResourceClass::Die),
        (StageName::FlashToDram, ResourceClass::Channel),
        (StageName::Dram, ResourceClass::Dram),
        (StageName::EmbeddedCpu, ResourceClass::EmbeddedCpu),
        (StageName::DramToHost, ResourceClass::HostLink),
    ] {
        let (b1, m) = busy(after, class);
        let (b0, _) = busy(before, class);
        let per = b1.saturating_sub(b0) / m.max(1) as u64;
        stages.push(Stage {
            name,
            members: m,
            busy_ns: per,
            utilization: per as f64 / modeled_ns as f64,
        });
    }
    let (hb, hm) = host.busy();
    let per = hb / hm.max(1) as u64;
    stages.push(Stage {
        name: StageName::HostCpu,
        members: hm,
        busy_ns: per,
        utilization: per as f64 / modeled_ns as f64,
    });
    stages
}

/// The report's description of the index a scan read under.
fn index_text(join: Option<JoinRead>, index: Option<(u8, u16, String)>) -> Option<String> {
    match (join, index) {
        (Some(JoinRead::Build { tia }), Some((_, _, text))) => Some(format!(
            "READ_IDX_JOIN1 under {text}, join keys into per-table index {tia}"
        )),
        (Some(JoinRead::Probe { rule }), _) => Some(format!(
            "READ_IDX_JOIN2, join rule {rule} (pages sharing a key bucket with the build side)"
        )),
        (_, i) => i.map(|(_, _, text)| text),
    }
}

/// The evaluator's work, the commands issued and the instant the host's work ended.
type Outcome = (WorkCounters, u64, SimTime);

/// Where a scan's partial results go.
type Sink<'s> = dyn FnMut(PartialResult) -> Result<(), HostError> + 's;

fn host_cycles(cfg: &DeviceConfig, records: u64, results: u64) -> u64 {
    (cfg.isp.host_cycles_per_record * records as f64
        + cfg.isp.host_cycles_per_result * results as f64)
        .round() as u64
}

/// One query run's inputs.
struct Run<'a> {
    table: &'a TableInfo,
    plan: &'a Plan,
    cfg: &'a DeviceConfig,
    opts: &'a ScanOptions,
    /// Host instant the run starts.
    t0: SimTime,
    /// The FLIXR `(table id, rule id)` to read under, if any.
    index: Option<(u8, u16)>,
    /// The command an in-host scan reads with.
    read: Reads,
}

/// The command an in-host scan reads its pages with.
#[derive(Debug, Clone, Copy)]
enum Reads {
    /// Read.
    Plain,
    /// READ_IDX under `(table, rule)`.
    Rule(u8, u16),
    /// READ_IDX_JOIN1 under `(table, rule)` into per-table index `tia`.
    Join1(u8, u16, u16),
    /// READ_IDX_JOIN2 under join rule `(table, rule)`.
    Join2(u8, u16),
}

/// In-host processing's evaluation: pages of several reads evaluated together on all
/// host threads ([`ParEval`]), then merged, charged to the host CPU model and handed on
/// in page order, so results and modeled figures are those of evaluating them one by
/// one as they arrive.
///
/// Its reads are `ReadPinned` commands (modeled as Reads): on an image opened read-only
/// the device leaves each table page that lies in one flash page where the image keeps
/// it, pinned, and the pool and the stepping thread evaluate it there, so the stepping
/// thread no longer copies every page out of the image (in a one-shot ihp q6 those
/// copies were about half its samples, and it was the run's limit); anywhere else the
/// payload is a Read's data, as before.
///
/// The evaluation is pipelined: a full batch of reads is handed to the pool
/// ([`ParEval::submit`]) and the oldest batch is taken once more than
/// [`BATCHES_IN_POOL`] are there, so the pool evaluates earlier batches while the
/// stepping thread reads the next (a one-shot `q6` in host: the stepping thread's copies
/// of the pages were 85% of the run's CPU, and the other core idle while it waited for
/// each batch's evaluation). Taking a batch later changes nothing modeled: its pages are
/// charged with the arrivals they had (settled with the reads still waiting), in page
/// order, before any later page.
struct HostEval<'p> {
    plan: &'p Plan,
    page_bytes: usize,
    /// The stepping thread's evaluator (every page, on one thread; and any page the
    /// parallel pass leaves, to report its error).
    eval: Evaluator,
    par: Option<ParEval>,
    /// The pages the parallel pass evaluated so far (it stops where merging them costs
    /// what evaluating does).
    tally: MergeTally,
    /// Reads not evaluated yet: arrival, first page, data.
    reads: Vec<(SimTime, u64, ReadData)>,
    /// Batches of reads the pool is evaluating, oldest first, each charged when it is
    /// taken.
    pending: std::collections::VecDeque<Pending>,
    /// Payloads evaluated, for the caller to give back to the device
    /// ([`CommandIssuer::give_back`]).
    spent: Vec<Vec<u8>>,
    out: PartialResult,
    totals: WorkCounters,
}

/// Batches an in-host scan keeps in the pool: each new batch is submitted before the
/// oldest is taken, so the pool always has work while the stepping thread reads and
/// charges (with one, an evaluation slower than the reads, as TPC-H Q1's, left the pool
/// idle while the stepping thread evaluated the pieces it had not started).
const BATCHES_IN_POOL: usize = 2;

/// A batch of reads handed to the pool: per read its arrival, first page and page
/// count; the bytes (shared with the batch, for pages the pool leaves); the batch.
struct Pending {
    reads: Vec<(SimTime, u64, usize)>,
    pages: Arc<ReadPages>,
    batch: Batch,
}

/// A read's pages: copied into a buffer, or (a `ReadPinned` on an image opened
/// read-only) partly left where the device keeps them, pinned.
enum ReadData {
    Owned(Vec<u8>),
    Pinned(PinnedRead),
}

impl ReadData {
    /// Bytes read.
    fn bytes(&self) -> usize {
        match self {
            ReadData::Owned(v) => v.len(),
            ReadData::Pinned(p) => p.units() * p.unit(),
        }
    }

    /// The buffer to give back to the device, if this was its last holder.
    fn into_buffer(self) -> Option<Vec<u8>> {
        match self {
            ReadData::Owned(v) => Some(v),
            ReadData::Pinned(p) => p.into_owned(),
        }
    }
}

/// Every LBA of a unit of a `ReadPinned` (its `check`).
const ALL_LBAS: u64 = u64::MAX;

/// The LBAs of each page of `table` (`lba_size` bytes each) an in-host evaluation of
/// `columns` reads, as `ReadPinned`'s `check`, from the first page of `data` (a read
/// checked whole): the page header and the columns' minipages where they lie at the same
/// place on every page ([`PageView::pieces_read`]); every LBA otherwise.
fn lbas_read(
    data: &ReadData,
    page_bytes: usize,
    table: &TableInfo,
    columns: &[usize],
    lba_size: u32,
) -> u64 {
    let of = |page: &[u8]| {
        PageView::parse_unverified(page.get(..page_bytes)?, &table.schema)
            .ok()?
            .pieces_read(columns, lba_size as usize)
    };
    match data {
        ReadData::Owned(v) => of(v),
        ReadData::Pinned(p) => {
            PinnedRead::read_all(&[p], |units| units.first().and_then(|u| of(u))).flatten()
        }
    }
    .unwrap_or(ALL_LBAS)
}

/// Calls `f` with the pages of `reads` (`page_bytes` each), in order; an error if pages
/// left in place changed before the host looked at them (an image opened read-only
/// never changes, so this reports an emulator fault, not a user's).
fn with_pages<R>(
    reads: &[&ReadData],
    page_bytes: usize,
    f: impl FnOnce(&[&[u8]]) -> R,
) -> Result<R, HostError> {
    let pinned: Vec<&PinnedRead> = reads
        .iter()
        .filter_map(|r| match r {
            ReadData::Pinned(p) => Some(p),
            ReadData::Owned(_) => None,
        })
        .collect();
    if pinned.is_empty() {
        return Ok(f(&gather(reads, &[], page_bytes)));
    }
    PinnedRead::read_all(&pinned, |units| f(&gather(reads, units, page_bytes))).ok_or_else(|| {
        HostError::Invalid("pages read in place changed before the host evaluated them".into())
    })
}

/// The pages of `reads` in order: a copied read's `page_bytes` chunks, a pinned read's
/// units from `units` (those of every pinned read of `reads`, in order).
fn gather<'a>(reads: &[&'a ReadData], units: &[&'a [u8]], page_bytes: usize) -> Vec<&'a [u8]> {
    let mut pages = Vec::with_capacity(units.len() + 64);
    let mut k = 0;
    for r in reads {
        match r {
            ReadData::Owned(v) => pages.extend(v.chunks_exact(page_bytes.max(1))),
            ReadData::Pinned(p) => {
                pages.extend_from_slice(&units[k..k + p.units()]);
                k += p.units();
            }
        }
    }
    pages
}

/// The pages of several reads, as a batch's source ([`SharedPages`]).
struct ReadPages {
    data: Vec<ReadData>,
    pages: usize,
    page_bytes: usize,
}

/// [`ReadPages`] shared between the batch and its taker.
struct SharedReads(Arc<ReadPages>);

impl SharedPages for SharedReads {
    fn len(&self) -> usize {
        self.0.pages
    }

    fn read(&self, range: std::ops::Range<usize>, f: &mut dyn FnMut(&[&[u8]])) -> bool {
        let data: Vec<&ReadData> = self.0.data.iter().collect();
        with_pages(&data, self.0.page_bytes, |pages| f(&pages[range])).is_ok()
    }
}

impl<'p> HostEval<'p> {
    fn new(plan: &'p Plan, page_bytes: usize) -> HostEval<'p> {
        let threads = csd_query::scan_threads();
        HostEval {
            plan,
            page_bytes,
            eval: Evaluator::new(plan),
            par: (threads > 1)
                .then(|| ParEval::new(plan, threads).with_hint(csd_nand::prefetch_lines_l2)),
            tally: MergeTally::default(),
            reads: Vec::new(),
            pending: std::collections::VecDeque::new(),
            spent: Vec::new(),
            out: PartialResult::new(plan),
            totals: WorkCounters::default(),
        }
    }

    /// Whether enough pages wait to be worth a parallel pass (one thread: every read).
    fn batch_full(&self) -> bool {
        let threads = self.par.as_ref().map_or(1, ParEval::threads);
        let pages: usize =
            self.reads.iter().map(|r| r.2.bytes()).sum::<usize>() / self.page_bytes.max(1);
        threads == 1 || pages >= 64 * threads
    }

    /// Every instant the evaluation holds (reads waiting and reads in the pool), for
    /// the event core's compaction.
    fn settle(&mut self, settle: &mut Settle<'_>) {
        self.reads.iter_mut().for_each(|r| r.0 = settle(r.0));
        for p in &mut self.pending {
            p.reads.iter_mut().for_each(|r| r.0 = settle(r.0));
        }
    }

    /// Takes the batch in the pool, if any, then hands the waiting reads to the pool
    /// (`last`: evaluates them now, on every thread); the instant the host CPU model
    /// finishes what was charged.
    fn run(
        &mut self,
        table: &TableInfo,
        cfg: &DeviceConfig,
        host: &mut HostCpu,
        sink: &mut Sink<'_>,
        last: bool,
    ) -> Result<SimTime, HostError> {
        let mut end = SimTime::ZERO;
        let reads = std::mem::take(&mut self.reads);
        let pb = self.page_bytes;
        match self.par.as_mut() {
            Some(p) if !last => {
                let mut meta = Vec::with_capacity(reads.len());
                let mut data = Vec::with_capacity(reads.len());
                for (arrived, page, bytes) in reads {
                    meta.push((arrived, page, bytes.bytes() / pb.max(1)));
                    data.push(bytes);
                }
                let pages = Arc::new(ReadPages {
                    data,
                    pages: meta.iter().map(|m| m.2).sum(),
                    page_bytes: pb,
                });
                // The device's FTL checked these bytes against its end-to-end CRC
                // (pages left in place: the sectors the program reads, `ReadPinned`'s
                // `check`), and the payload is this process's memory: pages' own
                // checksums are not hashed again (all structural checks stay).
                let batch = p.submit(&table.schema, Box::new(SharedReads(pages.clone())));
                self.pending.push_back(Pending {
                    reads: meta,
                    pages,
                    batch,
                });
                while self.pending.len() > BATCHES_IN_POOL {
                    end = end.max(self.take_pending(table, cfg, host, sink)?);
                }
            }
            _ => {
                while !self.pending.is_empty() {
                    end = end.max(self.take_pending(table, cfg, host, sink)?);
                }
                let data: Vec<&ReadData> = reads.iter().map(|r| &r.2).collect();
                end = end.max(with_pages(&data, pb, |pages| {
                    let mut done = match self.par.as_mut() {
                        Some(p) => p.eval(&table.schema, pages),
                        None => Vec::new(),
                    }
                    .into_iter();
                    let mut end = SimTime::ZERO;
                    let mut k = 0;
                    for (arrived, page, data) in &reads {
                        for _ in 0..data.bytes() / pb.max(1) {
                            let r = done.next().flatten();
                            end = end.max(self.charge(
                                table,
                                cfg,
                                host,
                                sink,
                                (*arrived, *page),
                                pages[k],
                                r,
                            )?);
                            k += 1;
                        }
                    }
                    Ok::<_, HostError>(end)
                })??);
                self.spent
                    .extend(reads.into_iter().filter_map(|r| r.2.into_buffer()));
            }
        }
        Ok(end)
    }

    /// Charges the oldest batch in the pool, if any, page by page in page order.
    fn take_pending(
        &mut self,
        table: &TableInfo,
        cfg: &DeviceConfig,
        host: &mut HostCpu,
        sink: &mut Sink<'_>,
    ) -> Result<SimTime, HostError> {
        let mut end = SimTime::ZERO;
        let Some(pending) = self.pending.pop_front() else {
            return Ok(end);
        };
        let mut results = (0..pending.batch.pieces()).flat_map(|k| pending.batch.take_piece(k));
        let data: Vec<&ReadData> = pending.pages.data.iter().collect();
        end = with_pages(&data, pending.pages.page_bytes, |pages| {
            let mut end = end;
            let mut i = 0;
            for &(arrived, page, n) in &pending.reads {
                for _ in 0..n {
                    let r = results.next().flatten();
                    let p = pages[i];
                    i += 1;
                    end = end.max(self.charge(table, cfg, host, sink, (arrived, page), p, r)?);
                }
            }
            Ok::<_, HostError>(end)
        })??;
        drop(data);
        drop(results);
        drop(pending.batch);
        // A pool thread may still hold the batch for a moment: its bytes are then
        // dropped with it.
        if let Ok(pages) = Arc::try_unwrap(pending.pages) {
            self.spent
                .extend(pages.data.into_iter().filter_map(ReadData::into_buffer));
        }
        Ok(end)
    }

    /// One page's result (the pool's, else evaluated here) merged, charged to the host
    /// CPU model from the read's arrival, and handed on; the instant the model finishes
    /// it.
    #[allow(clippy::too_many_arguments)]
    fn charge(
        &mut self,
        table: &TableInfo,
        cfg: &DeviceConfig,
        host: &mut HostCpu,
        sink: &mut Sink<'_>,
        (arrived, page): (SimTime, u64),
        p: &[u8],
        pooled: Option<csd_query::PageResult>,
    ) -> Result<SimTime, HostError> {
        let w = match pooled {
            Some(r) => {
                self.tally.add(&r);
                if self.tally.merges_like_evaluating() {
                    // Evaluating elsewhere gains nothing here (see there).
                    self.par = None;
                }
                r.out
                    .merge_to(&mut self.out)
                    .map_err(|e| HostError::Invalid(format!("evaluating page {page}: {e}")))?;
                if let Some(p) = &mut self.par {
                    p.recycle(r.out);
                }
                r.work
            }
            None => {
                let view = PageView::parse_unverified(p, &table.schema)?;
                self.eval
                    .eval_page(&view, &mut self.out)
                    .map_err(|e| HostError::Invalid(format!("evaluating page {page}: {e}")))?
            }
        };
        self.totals += w;
        // Each page goes to the modeled host core that frees up first.
        let cycles = host_cycles(cfg, w.records_examined, w.rows_selected)
            + cfg.isp.host_cycles_per_page.round() as u64;
        let end = host.run(arrived, cycles);
        if !self.plan.is_aggregate() && self.out.len() >= IHP_CHUNK_ROWS {
            sink(std::mem::replace(
                &mut self.out,
                PartialResult::new(self.plan),
            ))?;
        }
        Ok(end)
    }
}

impl Run<'_> {
    /// In-host processing: reads with `queue_depth` in flight, host CPU evaluation.
    fn ihp<C: CommandIssuer>(
        &self,
        c: &mut C,
        host: &mut HostCpu,
        sink: &mut Sink<'_>,
        skipped: &mut (u64, u64),
    ) -> Result<Outcome, HostError> {
        let Run {
            table,
            plan,
            cfg,
            opts,
            t0,
            read,
            ..
        } = *self;
        let id = c.identify().clone();
        let lpp = table.lbas_per_page(id.lba_size).max(1);
        let per_cmd = (id.mdts_blocks as u64 / lpp).max(1);
        let page_bytes = table.page_bytes as usize;
        let mut ev = HostEval::new(plan, page_bytes);
        let depth = opts.queue_depth.max(1);
        let mut done: std::collections::VecDeque<SimTime> = std::collections::VecDeque::new();
        let mut end = t0;
        let mut commands = 0u64;
        let mut page = 0u64;
        // The LBAs of each page the evaluation reads (page header, the program's
        // minipages), known from the first page read (checked whole): later reads have
        // only those hashed by the end-to-end check (`ReadPinned`'s `check`).
        let mut check: Option<u64> = None;
        let columns = plan.referenced_columns();
        while page < table.pages {
            compact_events(c, &mut |settle| {
                end = settle(end);
                done.iter_mut().for_each(|t| *t = settle(*t));
                ev.settle(settle);
            });
            let n = per_cmd.min(table.pages - page);
            let at = if done.len() >= depth {
                done.pop_front().unwrap_or(t0)
            } else {
                t0
            };
            let (lba, blocks) = (table.first_lba + page * lpp, (n * lpp) as u32);
            let cmd = match read {
                // A Read whose pages may stay where an image opened read-only keeps
                // them (modeled as a Read; anywhere else it is one).
                Reads::Plain => Command::ReadPinned {
                    lba,
                    blocks,
                    unit: page_bytes,
                    check: check.unwrap_or(ALL_LBAS),
                },
                Reads::Rule(t, rule) => Command::ReadIdx {
                    table: t,
                    rule,
                    lba,
                    blocks,
                },
                Reads::Join1(t, rule, tia) => Command::ReadIdxJoin1 {
                    table: t,
                    rule,
                    tia,
                    reset: page == 0,
                    lba,
                    blocks,
                },
                Reads::Join2(t, rule) => Command::ReadIdxJoin2 {
                    table: t,
                    rule,
                    lba,
                    blocks,
                },
            };
            let comp = c.exec_at(cmd, at)?;
            commands += 1;
            let arrived = comp.acct.completed;
            done.push_back(arrived);
            let data = match comp.payload {
                Payload::Data(data) => ReadData::Owned(data),
                Payload::Pinned(p) => ReadData::Pinned(p),
                Payload::IndexRead(r) => {
                    skipped.1 += r.index_misses;
                    let (data, extra) = whole_pages(c, table, lpp, *r, arrived, &mut skipped.0)?;
                    commands += extra;
                    ReadData::Owned(data)
                }
                _ => return Err(HostError::Invalid("Read returned no data".into())),
            };
            if check.is_none() {
                check = Some(lbas_read(&data, page_bytes, table, &columns, id.lba_size));
            }
            // The device's commands do not wait for the host's evaluation, so pages are
            // gathered over several reads and evaluated together on all host threads.
            ev.reads.push((arrived, page, data));
            page += n;
            let last = page >= table.pages;
            if ev.batch_full() || last {
                end = end.max(ev.run(table, cfg, host, sink, last)?);
                ev.spent.drain(..).for_each(|b| c.give_back(b));
            }
        }
        if plan.is_aggregate() || !ev.out.is_empty() {
            sink(ev.out)?;
        }
        Ok((ev.totals, commands, end))
    }

    /// In-storage processing: OPEN, adaptive GET polling, CLOSE.
    fn isp<C: CommandIssuer>(
        &self,
        c: &mut C,
        host: &mut HostCpu,
        mode: IspMode,
        sink: &mut Sink<'_>,
        skipped: &mut (u64, u64),
    ) -> Result<Outcome, HostError> {
        let Run {
            table,
            plan,
            cfg,
            opts,
            t0,
            index,
            ..
        } = *self;
        let lpp = table.lbas_per_page(c.identify().lba_size);
        let open = IspOpen {
            plan: plan.clone(),
            mode,
            table: TableExtent {
                first_lba: table.first_lba,
                pages: table.pages,
                lbas_per_page: lpp as u32,
            },
            index,
        };
        let session = match c.exec_at(Command::IspOpen(Box::new(open)), t0)?.payload {
            Payload::IspSession(id) => id,
            _ => return Err(HostError::Invalid("IspOpen returned no session".into())),
        };
        // The host waits for each reply: its clock is final (the event core books up to it).
        let opened = c.settle_now();
        let mut commands = 1u64;
        let mut interval = opts.poll_min_us.max(1.0);
        let mut end = c.now();
        let result = (|| -> Result<WorkCounters, HostError> {
            loop {
                compact_events(c, &mut |settle| end = settle(end));
                let comp = c.exec(Command::IspGet { session })?;
                c.settle_now();
                commands += 1;
                let Payload::Isp(mut reply) = comp.payload else {
                    return Err(HostError::Invalid("IspGet returned no reply".into()));
                };
                *skipped = (reply.pages_skipped, reply.index_misses);
                let got = reply.chunk.is_some();
                if let Some(chunk) = reply.chunk.take() {
                    sink(chunk)?;
                    // A hardware projection sends the matching records: the host folds
                    // them. A hardware aggregation was folded in the controller.
                    if mode == IspMode::Hw && !plan.is_aggregate() {
                        let cy =
                            host_cycles(cfg, reply.chunk_rows_selected, reply.chunk_rows_selected);
                        end = end.max(host.run(comp.acct.completed, cy));
                    }
                }
                end = end.max(c.now());
                match reply.state {
                    SessionState::Failed(m) => {
                        return Err(HostError::Invalid(format!("in-storage scan failed: {m}")));
                    }
                    SessionState::Done if !reply.more => return Ok(reply.work),
                    _ => {}
                }
                if reply.more {
                    continue;
                }
                let (lo, hi) = (
                    opts.poll_min_us.max(1.0),
                    opts.poll_max_us.max(opts.poll_min_us.max(1.0)),
                );
                // Back off by doubling from the last interval: an empty GET between two
                // chunks of a result stream must not send the host to sleep for half
                // the time left (the session's arena would fill and stall the scan).
                let backoff = (interval * 2.0).min(hi);
                interval = if got {
                    lo
                } else if reply.pages_done > 0 {
                    let elapsed_us = c.now().since(opened) as f64 / 1e3;
                    let left = reply.pages_total.saturating_sub(reply.pages_done) as f64;
                    (elapsed_us * left / reply.pages_done as f64 / 2.0)
                        .clamp(lo, hi)
                        .min(backoff)
                } else {
                    backoff
                };
                let next = c.now().after((interval * 1e3) as u64);
                c.wait_until(next);
            }
        })();
        // CLOSE in every case, so a failed scan frees its session.
        let closed = c.exec(Command::IspClose { session });
        commands += 1;
        let work = result?;
        closed?;
        Ok((work, commands, end))
    }
}

//! SQL over device tables through DataFusion (issue 12): csd plugs into DataFusion at its
//! seams instead of growing a planner of its own.
//!
//! * [`DeviceTable`] (a `TableProvider`) per table of the device catalog, with filter,
//!   projection and limit pushdown into the device program ([`translate`], [`provider`]);
//! * [`DeviceScanExec`] runs a device program with one of the scan paper's strategies
//!   (in-storage-scan-processing §4: IHP, embedded-CPU ISP, hardware ISP) through
//!   `csd_host::run_scan`, so every scan keeps its modeled report ([`ScanLog`]) and its
//!   DataFusion metrics (`EXPLAIN ANALYZE`);
//! * [`DeviceAggregatePushdown`] turns DataFusion's partial aggregate over a device scan
//!   into the device's own aggregation (smart-ssd-query-processing §3–4);
//! * `--strategy auto` asks the scan paper's analytic model per scan ([`device::auto`]).
//! * INSERT, UPDATE and DELETE go through DataFusion's DML planning into the provider's
//!   hooks ([`dml`]), which change the pages with `csd_host::dml` (WRITE_IDX under a FLIXR
//!   index, statement atomicity through a redo record).
//!
//! Joins, sorts, final aggregates, subqueries and everything the device cannot evaluate
//! exactly run in DataFusion on the host. The core crates do not depend on this one.
//!
//! Choices: decimal literals are parsed as decimals (`parse_float_as_decimal`), so
//! `l_discount BETWEEN 0.05 AND 0.07` is exact and pushable, as in the device's own SQL
//! subset; the session uses as many partitions as the host has cores for its own
//! operators, while each device scan is one partition (the device is serial).

#![warn(missing_docs)]

pub mod agg;
pub mod array;
mod csv_empty;
pub mod ddl;
pub mod device;
pub mod dml;
pub mod exec;
pub mod import;
pub mod join;
pub mod keyset;
pub mod memory;
pub mod provider;
pub mod report;
pub mod reuse;
pub mod runtime;
pub mod schema;
pub mod shared;
pub mod tpch;
pub mod translate;

use std::sync::Arc;

use csd_host::{Catalog, Client, TableInfo};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};

pub use agg::DeviceAggregatePushdown;
pub use array::{
    ArrayAnswer, ArrayRunner, ArrayScanExec, ArraySession, Manifest, Placement, ScanRequest,
};
pub use datafusion;
pub use ddl::{Statement, StatementKind};
pub use device::{Choice, Device, ScanSettings};
pub use exec::{DeviceScanExec, ScanLog, ScanRecord};
pub use join::DeviceJoinBitmap;
pub use memory::MemorySession;
pub use parquet;
pub use provider::DeviceTable;
pub use report::{ScanRecordReport, ScanReport, StageFigures};

/// What can go wrong running SQL over a device.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// DataFusion refused or failed the query (syntax, unknown names, types, execution).
    #[error("{message}")]
    Query {
        /// DataFusion's message, with the device's table list where it helps.
        message: String,
        /// The error.
        #[source]
        source: DataFusionError,
    },
    /// The device or its catalog failed.
    #[error(transparent)]
    Host(#[from] csd_host::HostError),
    /// The async runtime could not start.
    #[error("starting the query runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// Two strategies returned different results for one query (a bug: where a scan
    /// runs must never change what it returns).
    #[error("strategy {strategy} returned a different result than {first}: this is a bug")]
    Disagree {
        /// The strategy whose result differs.
        strategy: &'static str,
        /// The strategy that ran first.
        first: &'static str,
    },
}

/// A SQL session over the tables of one device.
pub struct SqlSession {
    ctx: SessionContext,
    device: Arc<Device>,
    log: ScanLog,
    tables: Vec<String>,
    /// The catalog's tables as last read from the device.
    catalog: Vec<TableInfo>,
    settings: ScanSettings,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for SqlSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SqlSession({:?}, tables {:?})", self.device, self.tables)
    }
}

/// A query's answer: the batches, the plan that ran with its metrics, the device scans.
#[derive(Debug)]
pub struct Answer {
    /// The result's schema.
    pub schema: SchemaRef,
    /// Result batches, in order.
    pub batches: Vec<RecordBatch>,
    /// The physical plan after the run, each operator marked `[device]` or `[host]`
    /// with its metrics (what `EXPLAIN ANALYZE` shows; see [`annotated_plan`]).
    pub explained: String,
    /// The device scans that ran, in order.
    pub scans: Vec<ScanRecord>,
    /// Wall-clock seconds of planning and running.
    pub wall_s: f64,
    /// For INSERT / UPDATE / DELETE: what the statement changed and cost.
    pub dml: Option<csd_host::dml::DmlReport>,
}

impl SqlSession {
    /// A session over every table in `client`'s catalog; `config` is the device's.
    pub fn new(
        mut client: Client,
        config: csd_sim::DeviceConfig,
        settings: ScanSettings,
    ) -> Result<SqlSession, SqlError> {
        let catalog = Catalog::read(&mut client)?;
        SqlSession::with_tables(client, config, settings, catalog.tables)
    }

    /// A session over `tables` without reading the catalog (no command reaches the
    /// device): for a caller that knows the device holds no tables yet, or that loads
    /// them through [`Device::lock`] and then calls [`SqlSession::reload`].
    pub fn with_tables(
        client: Client,
        config: csd_sim::DeviceConfig,
        settings: ScanSettings,
        tables: Vec<TableInfo>,
    ) -> Result<SqlSession, SqlError> {
        let device = Arc::new(Device::new(client, config));
        let log = ScanLog::default();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (ctx, runtime) = new_context(threads)?;
        let mut session = SqlSession {
            ctx,
            device,
            log,
            tables: Vec::new(),
            catalog: tables,
            settings,
            runtime,
        };
        session.register()?;
        Ok(session)
    }

    /// (Re-)registers every table of the catalog last read, scanned with the current
    /// settings.
    fn register(&mut self) -> Result<(), SqlError> {
        for name in std::mem::take(&mut self.tables) {
            self.ctx
                .deregister_table(name.as_str())
                .map_err(|e| query_error(e, &[]))?;
        }
        for t in &self.catalog {
            let provider = DeviceTable::new(
                t.clone(),
                self.device.clone(),
                self.settings,
                self.log.clone(),
            );
            self.ctx
                .register_table(t.name.as_str(), Arc::new(provider))
                .map_err(|e| query_error(e, &[]))?;
            self.tables.push(t.name.clone());
        }
        Ok(())
    }

    /// How the scans of the queries that follow run (strategy, queue depth, polling,
    /// aggregate pushdown). The device is not touched: the catalog is not read again.
    pub fn set_settings(&mut self, settings: ScanSettings) -> Result<(), SqlError> {
        self.settings = settings;
        self.register()
    }

    /// The scan settings in force.
    pub fn settings(&self) -> ScanSettings {
        self.settings
    }

    /// Reads the device's catalog again (one catalog read through the command
    /// interface) and registers its tables: after tables were loaded through
    /// [`Device::lock`] while the session was open.
    pub fn reload(&mut self) -> Result<(), SqlError> {
        let catalog = Catalog::read(&mut *self.device.lock())?;
        self.catalog = catalog.tables;
        self.register()
    }

    /// Plans and runs `sql` once per strategy choice in `choices`, in order (the
    /// session's other settings stay), and checks that every choice returned the same
    /// rows. Each answer carries its device scans' modeled reports. This is the one way
    /// csd's commands run SQL: `csd query`, `csd bench query`, the demo and the paper
    /// reproductions. The settings in force afterwards are those of the last choice.
    pub fn run_strategies(
        &mut self,
        sql: &str,
        choices: &[Choice],
    ) -> Result<Vec<(Choice, Answer)>, SqlError> {
        let stmt = Statement::parse(sql).map_err(invalid)?;
        self.run_statement(&stmt, choices)
    }

    /// [`SqlSession::run_strategies`] for a statement already parsed (the CLI parses
    /// once to decide whether the image must be writable, then runs what it parsed).
    pub fn run_statement(
        &mut self,
        stmt: &Statement,
        choices: &[Choice],
    ) -> Result<Vec<(Choice, Answer)>, SqlError> {
        let first = choices.first().copied().unwrap_or(self.settings.choice);
        let explain = match stmt.kind() {
            StatementKind::Csd(ddl) => {
                let message = self.run_csd(ddl)?;
                return Ok(vec![(first, message_answer(&message)?)]);
            }
            StatementKind::Dml(dml) => {
                if let Some(&choice) = choices.first() {
                    self.set_settings(ScanSettings {
                        choice,
                        ..self.settings
                    })?;
                }
                return Ok(vec![(first, self.run_dml_parsed(stmt.sql(), dml)?)]);
            }
            StatementKind::Explain => true,
            StatementKind::Query => false,
        };
        let mut runs: Vec<(Choice, Answer)> = Vec::with_capacity(choices.len());
        let mut check = SameRows::default();
        for &choice in choices {
            self.set_settings(ScanSettings {
                choice,
                ..self.settings
            })?;
            let answer = self.run_query(stmt.sql())?;
            // Each strategy's scans start from the same resident set, not from the
            // last one's.
            self.device.release_read_pages();
            if !explain {
                check.check(choice, &answer)?;
            }
            runs.push((choice, answer));
        }
        Ok(runs)
    }

    /// Runs one of the statements csd runs itself ([`ddl::Ddl`]: `CREATE INDEX`, `DROP
    /// INDEX`, `SET csd.use_index`) and returns its message. Index statements change the
    /// device (its catalog and FLIXR registry) and the session's tables are registered
    /// again.
    pub fn run_csd(&mut self, stmt: &ddl::Ddl) -> Result<String, SqlError> {
        Ok(match stmt {
            ddl::Ddl::SetUseIndex(on) => {
                self.settings.options.use_index = *on;
                self.register()?;
                format!("csd.use_index = {on}")
            }
            ddl::Ddl::CreateIndex(req) => {
                let r = csd_host::index::create(&mut *self.device.lock(), req)?;
                self.reload()?;
                format!(
                    "created index {} on {}({}) as {}: {} pages rewritten through WRITE_IDX in {:.3} s modeled",
                    r.index.name,
                    r.table.name,
                    r.index.column,
                    r.index.kind(),
                    r.pages_rewritten,
                    r.modeled_s
                )
            }
            ddl::Ddl::DropIndex { name, if_exists } => {
                let exists = self.catalog.iter().any(|t| {
                    t.index
                        .as_ref()
                        .is_some_and(|i| csd_host::same_name(&i.name, name))
                });
                if !exists && *if_exists {
                    format!("no index {name}")
                } else {
                    let (table, ix) = csd_host::index::drop(&mut *self.device.lock(), name)?;
                    self.reload()?;
                    format!("dropped index {} on {table}({})", ix.name, ix.column)
                }
            }
        })
    }

    /// Ends the session and gives the device's client back (`None` if a plan of this
    /// session is still alive).
    pub fn into_client(self) -> Option<Client> {
        let SqlSession { ctx, device, .. } = self;
        drop(ctx);
        device.into_client()
    }

    /// The catalog entries of the tables on the device, as last read.
    pub fn catalog(&self) -> &[TableInfo] {
        &self.catalog
    }

    /// The tables on the device.
    pub fn tables(&self) -> &[String] {
        &self.tables
    }

    /// The DataFusion context (to register more tables or inspect plans).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Runs one INSERT, UPDATE or DELETE ([`dml`]) through DataFusion, once, and reads
    /// the catalog again so the statements that follow see the change. The answer is
    /// one row, `N rows inserted` (or updated / deleted), with the statement's modeled
    /// report in [`Answer::dml`] and the scans of an `INSERT ... SELECT` in
    /// [`Answer::scans`]. The device must be writable.
    pub fn run_dml(&mut self, sql: &str) -> Result<Answer, SqlError> {
        let stmt = Statement::parse(sql).map_err(invalid)?;
        let dml = match stmt.kind() {
            StatementKind::Dml(dml) => dml.clone(),
            // Not a DML statement: DataFusion runs it and the session reports that it
            // changed no device table.
            _ => ddl::Dml {
                op: ddl::DmlOp::Insert,
                assignments: Vec::new(),
            },
        };
        self.run_dml_parsed(sql, &dml)
    }

    fn run_dml_parsed(&mut self, sql: &str, dml: &ddl::Dml) -> Result<Answer, SqlError> {
        self.log.take();
        self.device.take_dml();
        let wall = std::time::Instant::now();
        let ran = execute(&self.ctx, &self.runtime, sql, &self.tables);
        let scans = self.log.take();
        let report = self.device.take_dml().pop();
        // Whatever happened, the session's view of the tables follows the device.
        self.reload()?;
        ran.map_err(|e| {
            dml::explain_cast(dml::explain_null(e, sql, &self.catalog), &dml.assignments)
        })?;
        let Some(report) = report else {
            return Err(invalid(format!("`{sql}` changed no device table")));
        };
        let mut answer = message_answer(&format!("{} in {}", report.summary(), report.table))?;
        answer.scans = scans;
        answer.wall_s = wall.elapsed().as_secs_f64();
        answer.dml = Some(report);
        Ok(answer)
    }

    /// Plans and runs `sql`; the scans' modeled reports come back with the batches.
    /// INSERT / UPDATE / DELETE go through [`SqlSession::run_dml`] (or
    /// [`SqlSession::run_strategies`]) instead, which keep the session's tables current.
    pub fn run(&self, sql: &str) -> Result<Answer, SqlError> {
        if Statement::parse(sql).is_ok_and(|s| s.is_dml()) {
            return Err(invalid(
                "INSERT, UPDATE and DELETE run through SqlSession::run_dml or run_strategies",
            ));
        }
        self.run_query(sql)
    }

    /// Plans and runs a query (not DML) with the settings in force.
    fn run_query(&self, sql: &str) -> Result<Answer, SqlError> {
        self.log.take();
        let mut answer = execute(&self.ctx, &self.runtime, sql, &self.tables)?;
        answer.scans = self.log.take();
        Ok(answer)
    }

    /// The physical plan of `sql` as text, without running it (`EXPLAIN`).
    pub fn explain(&self, sql: &str) -> Result<String, SqlError> {
        let plan = self
            .runtime
            .block_on(async {
                let df = self.ctx.sql(sql).await?;
                df.create_physical_plan().await
            })
            .map_err(|e| query_error(e, &self.tables))?;
        Ok(datafusion::physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string())
    }
}

/// A statement the session refuses, with its actionable message.
fn invalid(message: impl Into<String>) -> SqlError {
    SqlError::Host(csd_host::HostError::Invalid(message.into()))
}

impl Answer {
    /// The result's column names.
    pub fn column_names(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    /// The result rows as display strings (Arrow's formatting: decimals with their
    /// scale, dates as `YYYY-MM-DD`).
    pub fn rows(&self) -> Result<Vec<Vec<String>>, SqlError> {
        batch_rows(&self.batches)
    }

    /// The modeled reports of the device scans, in the order they ran.
    pub fn reports(&self) -> Vec<csd_host::QueryReport> {
        self.scans.iter().map(|s| s.report.clone()).collect()
    }
}

/// An answer of one row, one `result` column holding `message` (what a statement that
/// returns no rows, like `CREATE INDEX`, answers).
pub fn message_answer(message: &str) -> Result<Answer, SqlError> {
    use datafusion::arrow::array::StringArray;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![Field::new(
        "result",
        DataType::Utf8,
        false,
    )]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(StringArray::from(vec![message.to_string()]))],
    )
    .map_err(|e| {
        let e = DataFusionError::from(e);
        SqlError::Query {
            message: e.to_string(),
            source: e,
        }
    })?;
    Ok(Answer {
        schema,
        batches: vec![batch],
        explained: String::new(),
        scans: Vec::new(),
        wall_s: 0.0,
        dml: None,
    })
}

/// Checks that every strategy of a `run_strategies` returned the same rows.
#[derive(Debug, Default)]
pub(crate) struct SameRows {
    first: Option<(Choice, Vec<Vec<String>>)>,
}

impl SameRows {
    /// Compares `answer` (of `choice`) with the first answer seen.
    pub(crate) fn check(&mut self, choice: Choice, answer: &Answer) -> Result<(), SqlError> {
        let mut rows = answer.rows()?;
        // Without ORDER BY, DataFusion may hand rows over in any order: compare the rows
        // as a multiset.
        rows.sort_unstable();
        match &self.first {
            None => self.first = Some((choice, rows)),
            Some((first, f)) if *f != rows => {
                return Err(SqlError::Disagree {
                    strategy: choice.name(),
                    first: first.name(),
                });
            }
            Some(_) => {}
        }
        Ok(())
    }
}

/// Up to this many host threads, hash joins build one shared table (see
/// [`new_context_with`]); with more, DataFusion's partitioned builds.
const FEW_CORES: usize = 4;

/// A DataFusion context for device tables (decimal literals, the aggregate pushdown
/// rule, `threads` partitions) and a runtime of `threads` workers.
pub(crate) fn new_context(
    threads: usize,
) -> Result<(SessionContext, tokio::runtime::Runtime), SqlError> {
    new_context_with(threads, |b| b)
}

/// [`new_context`] with `configure` applied to the session state (a distributed array's
/// planner and codec, `csd-dist`).
pub(crate) fn new_context_with(
    threads: usize,
    configure: impl FnOnce(SessionStateBuilder) -> SessionStateBuilder,
) -> Result<(SessionContext, tokio::runtime::Runtime), SqlError> {
    let threads = threads.max(1);
    let mut cfg = SessionConfig::new().with_target_partitions(threads);
    cfg.options_mut().sql_parser.parse_float_as_decimal = true;
    // A join's runtime filter names its build side's keys as an `IN` list up to the
    // number worth listing (`runtime::DEVICE_KEYS`), a hash-table lookup beyond: a
    // list the device evaluates next to the data.
    let optimizer = &mut cfg.options_mut().optimizer;
    optimizer.hash_join_inlist_pushdown_max_distinct_values = runtime::DEVICE_KEYS;
    optimizer.hash_join_inlist_pushdown_max_size = optimizer
        .hash_join_inlist_pushdown_max_size
        .max(runtime::DEVICE_KEYS * 8);
    // On a few cores a hash join builds one table that every probe partition shares
    // (`CollectLeft`) whenever the build side is estimated under 10M rows, instead of
    // hash-repartitioning both sides (DataFusion's default beyond 128K rows or 1 MB):
    // moving lineitem's rows between partitions costs more than a parallel build saves
    // (2 cores, `csd bench tpch --sf 1 --repeat 5`, the ten join-heavy queries: 3.9 /
    // 4.3 s against 4.5 / 4.9 s; Q5 0.37-0.42 s against 0.50-0.61 s; README). A single
    // build table also gives the device one key list or one pair of key bounds to take.
    if threads <= FEW_CORES {
        optimizer.hash_join_single_partition_threshold_rows = 10_000_000;
        optimizer.hash_join_single_partition_threshold = 1 << 30;
    }
    options_from_env(cfg.options_mut(), |name| std::env::var(name).ok())?;
    // The device rules run just before DataFusion's last filter pushdown, which links
    // hash joins and top-K sorts to the scans below them by dynamic filters: those
    // must find the scans the device rules made (a partial aggregate's scan takes the
    // join's filter on its grouping columns), see `exec`'s runtime filters.
    let mut rules = PhysicalOptimizer::new().rules;
    let ours: [Arc<dyn PhysicalOptimizerRule + Send + Sync>; 2] = [
        Arc::new(DeviceAggregatePushdown),
        Arc::new(join::DeviceJoinBitmap),
    ];
    let at = rules
        .iter()
        .position(|r| r.name() == "FilterPushdown(Post)")
        .unwrap_or(rules.len());
    rules.splice(at..at, ours);
    // After that pushdown: the runtime filters not worth applying come off again.
    let after = (at + 3).min(rules.len());
    rules.insert(after, Arc::new(runtime::RedundantRuntimeFilters));
    // Before join selection: estimates that count the key sets device scans will take.
    if let Some(j) = rules.iter().position(|r| r.name() == "join_selection") {
        rules.insert(j, Arc::new(keyset::ExpectedKeySets));
    }
    // Last: identical device scans become one, once every filter is in place; then
    // the joins whose key lists are too long for DataFusion hand their key sets to the
    // device scans below them (`keyset`).
    rules.push(Arc::new(shared::SharedDeviceScans));
    rules.push(Arc::new(keyset::JoinKeySets));
    // Very last, once every scan holds its filters and key sets: scans of one table
    // with one static filter read the same columns and share rows of equal programs.
    rules.push(Arc::new(reuse::ReusedDeviceScans));
    let state = configure(
        SessionStateBuilder::new()
            .with_config(cfg)
            .with_default_features()
            .with_physical_optimizer_rules(rules),
    )
    .build();
    let ctx = SessionContext::new_with_state(state);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    Ok((ctx, runtime))
}

/// Applies DataFusion's own environment variables over csd's choices: each option
/// `datafusion.a.b` is set from `DATAFUSION_A_B` when `var` finds it (as DataFusion's
/// `ConfigOptions::from_env` names them), e.g.
/// `DATAFUSION_OPTIMIZER_HASH_JOIN_SINGLE_PARTITION_THRESHOLD_ROWS=1000000`. A value the
/// option does not take is an error naming the variable, and no option changes.
pub(crate) fn options_from_env(
    options: &mut datafusion::config::ConfigOptions,
    var: impl Fn(&str) -> Option<String>,
) -> Result<(), SqlError> {
    let mut set = options.clone();
    for entry in options.entries() {
        let name = entry.key.to_uppercase().replace('.', "_");
        if let Some(value) = var(&name) {
            set.set(&entry.key, &value).map_err(|e| SqlError::Query {
                message: format!("environment variable {name}={value}: {e}"),
                source: e,
            })?;
        }
    }
    *options = set;
    Ok(())
}

/// Plans and runs `sql` on `ctx` (the scans are left empty for the caller to fill).
pub(crate) fn execute(
    ctx: &SessionContext,
    runtime: &tokio::runtime::Runtime,
    sql: &str,
    tables: &[String],
) -> Result<Answer, SqlError> {
    let wall = std::time::Instant::now();
    let out = runtime.block_on(async {
        let df = ctx.sql(sql).await?;
        let plan = df.create_physical_plan().await?;
        let task = ctx.task_ctx();
        let batches = datafusion::physical_plan::collect(plan.clone(), task).await?;
        Ok::<_, DataFusionError>((batches, plan))
    });
    let (batches, plan) = out.map_err(|e| query_error(e, tables))?;
    let wall_s = wall.elapsed().as_secs_f64();
    Ok(Answer {
        schema: plan.schema(),
        batches,
        explained: annotated_plan(&plan),
        scans: Vec::new(),
        wall_s,
        dml: None,
    })
}

/// Result batches as rows of display strings.
pub fn batch_rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, SqlError> {
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let mut row = Vec::with_capacity(b.num_columns());
            for c in b.columns() {
                row.push(array_value_to_string(c, r).map_err(|e| {
                    let e = DataFusionError::from(e);
                    SqlError::Query {
                        message: format!("formatting a result: {e}"),
                        source: e,
                    }
                })?);
            }
            out.push(row);
        }
    }
    Ok(out)
}

/// The plan with each operator's metrics (what `EXPLAIN ANALYZE` prints) and where it
/// ran: `[device]` for device scans, `[host]` for DataFusion's operators.
pub fn annotated_plan(plan: &Arc<dyn ExecutionPlan>) -> String {
    fn walk(p: &Arc<dyn ExecutionPlan>, depth: usize, out: &mut String) {
        let place = if p.downcast_ref::<DeviceScanExec>().is_some() {
            "[device]"
        } else if p.downcast_ref::<ArrayScanExec>().is_some() {
            "[array] "
        } else {
            "[host]  "
        };
        let line = datafusion::physical_plan::displayable(p.as_ref())
            .one_line()
            .to_string();
        let metrics = p
            .metrics()
            .map(|m| {
                m.aggregate_by_name()
                    .sorted_for_display()
                    .timestamps_removed()
                    .to_string()
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "{place} {}{}{}\n",
            "  ".repeat(depth),
            line.trim_end(),
            if metrics.is_empty() || metrics == "[]" {
                String::new()
            } else {
                format!(", metrics={metrics}")
            }
        ));
        for c in p.children() {
            walk(c, depth + 1, out);
        }
    }
    let mut s = String::new();
    walk(plan, 0, &mut s);
    s
}

/// DataFusion's error, with the device's tables named when a table was not found.
pub(crate) fn query_error(e: DataFusionError, tables: &[String]) -> SqlError {
    let mut message = e.to_string();
    if message.contains("not found") && message.contains("table")
        || message.contains("No table named")
    {
        message.push_str(&format!("; tables on the device: {}", tables.join(", ")));
    }
    SqlError::Query { message, source: e }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datafusion_options_come_from_their_environment_variables() {
        let mut o = datafusion::config::ConfigOptions::new();
        let env = |name: &str| {
            (name == "DATAFUSION_OPTIMIZER_HASH_JOIN_SINGLE_PARTITION_THRESHOLD_ROWS")
                .then(|| "12345".to_string())
        };
        options_from_env(&mut o, env).expect("a valid value");
        assert_eq!(o.optimizer.hash_join_single_partition_threshold_rows, 12345);
        // A value the option does not take: an error naming the variable, nothing set.
        let before = o.optimizer.repartition_joins;
        let bad = |name: &str| match name {
            "DATAFUSION_OPTIMIZER_REPARTITION_JOINS" => Some("sometimes".to_string()),
            "DATAFUSION_EXECUTION_BATCH_SIZE" => Some("4096".to_string()),
            _ => None,
        };
        let e = options_from_env(&mut o, bad).expect_err("not a bool");
        assert!(
            e.to_string()
                .contains("DATAFUSION_OPTIMIZER_REPARTITION_JOINS=sometimes"),
            "{e}"
        );
        assert_eq!(o.optimizer.repartition_joins, before);
        assert_eq!(o.execution.batch_size.get(), 8192);
    }
}

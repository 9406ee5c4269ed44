//! `csd query` (a SQL query over the tables on a device image, three ways), the demo's
//! query step, and the SQL helpers `csd sql`, `csd array`, `csd bench query` and the
//! reproductions share (options, expanding `q1` / `q6`, printing answers and reports).
//! All of them run SQL one way: DataFusion
//! plans, device scans run the device program with the scan paper's strategies
//! (in-storage-scan-processing §4), through [`SqlSession::run_strategies`].

use crate::args::{JsonFlag, StrategySel};
use crate::{CliError, report};
use clap::Args;
use csd_device::NvmeDevice;
use csd_ftl::FtlConfig;
use csd_host::{Client, QueryReport, Strategy, TableInfo};
use csd_sim::DeviceConfig;
use csd_sim::events::TimeModel;
use csd_sql::datafusion::arrow::array::RecordBatch;
use csd_sql::ddl::Ddl;
use csd_sql::{
    Answer, ArraySession, Choice, ScanSettings, SqlError, SqlSession, Statement, StatementKind,
};
use csd_table::datagen::{TpchGenerator, TpchTable};
use csd_table::page::Layout;
use serde_json::{Value, json};
use std::path::PathBuf;

/// Options shared by the commands that run queries.
#[derive(Args, Clone)]
pub(crate) struct RunOpts {
    /// Where scans run: ihp, cpu-isp, hw-isp, auto (per scan, from the analytic model),
    /// or all (the three, side by side; results must agree); comma-separated for several.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    pub(crate) strategy: Vec<StrategySel>,
    /// IHP: read commands the host keeps in flight.
    #[arg(long, default_value_t = 32)]
    queue_depth: usize,
    /// ISP: smallest (first) GET poll interval, µs.
    #[arg(long, default_value_t = 50.0)]
    poll_min_us: f64,
    /// ISP: largest GET poll interval, µs (the smart-ssd paper polled every 10 ms).
    #[arg(long, default_value_t = 10_000.0)]
    poll_max_us: f64,
}

impl RunOpts {
    /// The scan settings (the strategy is set per run).
    pub(crate) fn settings(&self) -> ScanSettings {
        let mut s = ScanSettings::new(Choice::Fixed(Strategy::Ihp));
        s.options.queue_depth = self.queue_depth.max(1);
        s.options.poll_min_us = self.poll_min_us;
        s.options.poll_max_us = self.poll_max_us;
        s
    }
}

/// How the commands that run SQL over a device image (`csd query`, `csd sql`) run and
/// print their statements.
#[derive(Args, Clone)]
#[command(mut_arg("json", |a| a.help(
    "Print one JSON object per statement: rows, and per strategy the scans' modeled reports"
)))]
pub(crate) struct SqlOpts {
    /// Where scans run: ihp, cpu-isp, hw-isp, auto (per scan, from the analytic model),
    /// or all (the three, side by side; results must agree); comma-separated for several.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    pub(crate) strategy: Vec<StrategySel>,
    /// IHP: read commands the host keeps in flight.
    #[arg(long, default_value_t = 32)]
    pub(crate) queue_depth: usize,
    /// ISP: smallest (first) GET poll interval, µs.
    #[arg(long, default_value_t = 50.0)]
    pub(crate) poll_min_us: f64,
    /// ISP: largest GET poll interval, µs.
    #[arg(long, default_value_t = 10_000.0)]
    pub(crate) poll_max_us: f64,
    /// Keep partial aggregations in DataFusion instead of the device.
    #[arg(long)]
    pub(crate) no_aggregate_pushdown: bool,
    /// Read every page even where a FLIXR per-page index could skip some (as `SET
    /// csd.use_index = false`), for comparison.
    #[arg(long)]
    pub(crate) no_index: bool,
    /// Print the plan after the run: which operators ran in the device and which in
    /// the host, with per-operator metrics (EXPLAIN ANALYZE).
    #[arg(long)]
    pub(crate) explain: bool,
    /// How each scan's commands are placed in modeled time: `calendar` or `events` (the
    /// event core: every resource first-come first-served in modeled-arrival order;
    /// docs/time-model.md). Each scan records on its own while it holds its device (an
    /// array's members too, in this process or on workers).
    #[arg(long, default_value = csd_sim::events::TimeModel::default().name(), value_parser = super::io::parse_time_model)]
    pub(crate) time_model: TimeModel,
    /// Result rows to print (all are computed).
    #[arg(long, default_value_t = 20)]
    pub(crate) rows: usize,
    #[command(flatten)]
    pub(crate) report: JsonFlag,
}

impl SqlOpts {
    /// The scan settings these options ask for (the strategy is set per run).
    pub(crate) fn settings(&self) -> ScanSettings {
        let mut settings = ScanSettings::new(Choice::Auto);
        settings.options.queue_depth = self.queue_depth.max(1);
        settings.options.poll_min_us = self.poll_min_us;
        settings.options.poll_max_us = self.poll_max_us;
        settings.aggregate_pushdown = !self.no_aggregate_pushdown;
        settings.options.use_index = !self.no_index;
        settings.options.time_model = self.time_model;
        settings
    }
}

/// Where the tables are: one device image or an array of them.
#[derive(Args, Clone)]
pub(crate) struct DbArgs {
    /// Device image holding the tables (see `csd load`).
    #[arg(long, required_unless_present = "array", conflicts_with = "array")]
    pub(crate) image: Option<PathBuf>,
    /// An array of devices (see `csd array create`): each device is one partition,
    /// scanned in parallel on host threads.
    #[arg(long)]
    pub(crate) array: Option<PathBuf>,
    /// Array: host threads for the device scans and DataFusion (default: the cores).
    #[arg(long, requires = "array")]
    pub(crate) threads: Option<usize>,
    /// Array: scan the devices in this process even when the manifest lists workers
    /// (`csd worker`).
    #[arg(long, requires = "array")]
    pub(crate) in_process: bool,
}

impl DbArgs {
    /// `--image PATH` or `--array DIR [--threads N]`: where the tables are, as the
    /// shell's greeting names them.
    pub(crate) fn describe(&self) -> String {
        match (&self.image, &self.array) {
            (_, Some(d)) => format!(
                "--array {}{}{}",
                d.display(),
                self.threads
                    .map_or(String::new(), |t| format!(" --threads {t}")),
                if self.in_process { " --in-process" } else { "" }
            ),
            (Some(i), None) => format!("--image {}", i.display()),
            (None, None) => String::new(),
        }
    }
}

/// `csd query --image PATH "SELECT ..."`.
#[derive(Args)]
pub(crate) struct QueryArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The query: any SQL DataFusion accepts over the device's tables (joins, ORDER BY,
    /// LIMIT, subqueries). `q1` … `q22` stand for the TPC-H queries with their
    /// validation parameters.
    sql: String,
    #[command(flatten)]
    opts: SqlOpts,
}

/// The SQL session of `csd query` / `csd sql`: over one device or an array.
pub(crate) enum Db {
    /// One device image.
    One(SqlSession),
    /// An array of device images.
    Array(ArraySession),
    /// Closed for a moment (an index statement has the image open read-write).
    Closed,
}

/// A SQL session over the tables of a device image or an array, opened read-only, as
/// `csd query` and `csd sql` use it.
pub(crate) struct ImageSession {
    /// The session.
    pub(crate) db: Db,
    /// The device's config (every member's, for an array).
    pub(crate) cfg: DeviceConfig,
    /// The image file (`None` for an array).
    pub(crate) image: Option<std::path::PathBuf>,
    /// The image is open read-write (after the first INSERT / UPDATE / DELETE).
    pub(crate) writable: bool,
    /// Pages read stay mapped in the process (a session of several statements, whose
    /// later scans find them there) instead of leaving it every
    /// [`crate::image::SCAN_RESIDENT_BYTES`] (one statement: peak RSS bounded by that).
    keep_pages: bool,
}

impl Drop for ImageSession {
    fn drop(&mut self) {
        if let Err(e) = self.close_db() {
            eprintln!("closing the image: {e}");
        }
    }
}

impl ImageSession {
    /// Opens the image or array of `db` read-only (a query never changes an image:
    /// running it twice leaves the files byte-identical, whatever the SQL says) with
    /// the settings of `opts`.
    pub(crate) fn open(db: &DbArgs, opts: &SqlOpts, quiet: bool) -> Result<Self, CliError> {
        Self::open_for(db, opts, quiet, false)
    }

    /// [`ImageSession::open`] for several statements when `keep_pages`: the pages a
    /// scan reads stay mapped, so the next scan of the same table finds them in place
    /// (`csd sql`'s shell and statement files: a warm lineitem scan at SF 1 took
    /// 0.05 s against 0.13-0.15 s when its pages were let go and faulted in again,
    /// 2026-11-30). The resident set then grows with the data the session touched
    /// (pages of the host's page cache, which the kernel can reclaim).
    pub(crate) fn open_for(
        db: &DbArgs,
        opts: &SqlOpts,
        quiet: bool,
        keep_pages: bool,
    ) -> Result<Self, CliError> {
        let open_ro = |image: &std::path::Path, quiet: bool| {
            crate::image::open_ro_keeping(image, quiet, keep_pages)
        };
        match (&db.image, &db.array) {
            (_, Some(dir)) => {
                let (s, cfg) = crate::cmd::array::session(
                    dir,
                    opts.settings(),
                    db.threads,
                    quiet,
                    db.in_process,
                )?;
                Ok(ImageSession {
                    db: Db::Array(s),
                    cfg,
                    image: None,
                    writable: false,
                    keep_pages,
                })
            }
            (Some(image), None) => {
                let dev = open_ro(image, quiet)?;
                let cfg = dev.ftl().nand().config().clone();
                let client = Client::new(NvmeDevice::from_block(dev))?;
                let session = match SqlSession::new(client, cfg.clone(), opts.settings()) {
                    Err(SqlError::Host(csd_host::HostError::Unfinished {
                        table, pages, ..
                    })) => {
                        // A statement committed before a power cut: finish it (the one
                        // write a read-only command makes, as a database finishes its redo
                        // log at start-up), then open read-only again.
                        eprintln!(
                            "finishing an INSERT/UPDATE/DELETE on {table} that a power cut interrupted ({pages} pages)"
                        );
                        crate::cmd::index::with_rw(image, true, |c| {
                            csd_host::Catalog::read(c)?;
                            Ok(())
                        })?;
                        let dev = open_ro(image, true)?;
                        let client = Client::new(NvmeDevice::from_block(dev))?;
                        SqlSession::new(client, cfg.clone(), opts.settings()).map_err(sql_error)?
                    }
                    other => other.map_err(sql_error)?,
                };
                Ok(ImageSession {
                    db: Db::One(session),
                    cfg,
                    image: Some(image.clone()),
                    writable: false,
                    keep_pages,
                })
            }
            (None, None) => Err(CliError::Usage("give --image PATH or --array DIR".into())),
        }
    }

    /// The tables' catalog entries (for an array: each whole table, rows and pages of
    /// every device).
    pub(crate) fn catalog(&self) -> Vec<TableInfo> {
        match &self.db {
            Db::One(s) => s.catalog().to_vec(),
            Db::Array(a) => a.tables().iter().filter_map(|t| a.table_info(t)).collect(),
            Db::Closed => Vec::new(),
        }
    }

    /// The table names.
    pub(crate) fn tables(&self) -> Vec<String> {
        match &self.db {
            Db::One(s) => s.tables().to_vec(),
            Db::Array(a) => a.tables().to_vec(),
            Db::Closed => Vec::new(),
        }
    }

    /// Closes the session's device; a read-write image is shut down cleanly.
    fn close_db(&mut self) -> Result<(), CliError> {
        let db = std::mem::replace(&mut self.db, Db::Closed);
        if let (Db::One(s), true) = (db, self.writable) {
            let Some(client) = s.into_client() else {
                return Err(CliError::Usage(
                    "the image is still in use by a plan; it was not closed cleanly".into(),
                ));
            };
            let mut dev = client.into_device().into_block();
            crate::image::close(&mut dev)?;
        }
        Ok(())
    }

    /// Opens the image again, read-write or read-only, with `settings`.
    fn reopen(&mut self, writable: bool, settings: ScanSettings) -> Result<(), CliError> {
        let Some(path) = self.image.clone() else {
            return Err(CliError::Usage("no image".into()));
        };
        self.close_db()?;
        let dev = if writable {
            crate::image::open_rw(
                &path,
                &crate::ConfigSource::default(),
                &crate::image::FtlArgs::default(),
                false,
                true,
            )?
        } else {
            crate::image::open_ro_keeping(&path, true, self.keep_pages)?
        };
        let client = Client::new(NvmeDevice::from_block(dev))?;
        // Marked before the session reads the catalog, so a failure still closes cleanly.
        self.writable = writable;
        self.db = Db::One(SqlSession::new(client, self.cfg.clone(), settings).map_err(sql_error)?);
        Ok(())
    }

    /// Makes the session read-write (for INSERT / UPDATE / DELETE): the image is
    /// reopened read-write and stays so until the session ends (then closed cleanly).
    fn make_writable(&mut self) -> Result<(), CliError> {
        if self.writable {
            return Ok(());
        }
        let settings = match &self.db {
            Db::One(s) => s.settings(),
            Db::Array(_) => {
                return Err(CliError::Usage(
                    "INSERT, UPDATE and DELETE apply to one device image (--image), not to an array"
                        .into(),
                ));
            }
            Db::Closed => return Err(CliError::Usage("the session is not open".into())),
        };
        self.reopen(true, settings)
    }

    /// Runs an index statement (`CREATE INDEX`, `DROP INDEX`) on the image: the
    /// read-only session is closed, the image opened read-write for the change and
    /// closed cleanly, and the session opened again with the same settings.
    fn index_statement(&mut self, ddl: Ddl) -> Result<String, CliError> {
        let Some(path) = self.image.clone() else {
            return Err(CliError::Usage(
                "CREATE INDEX / DROP INDEX apply to one device image (--image), not to an array"
                    .into(),
            ));
        };
        let settings = match &self.db {
            Db::One(s) => s.settings(),
            _ => return Err(CliError::Usage("the session is not open".into())),
        };
        let writable = self.writable;
        self.close_db()?; // drops the device and its lock
        self.writable = false;
        let r = match ddl {
            Ddl::CreateIndex(req) => crate::cmd::index::create_on(&path, &req, true),
            Ddl::DropIndex { name, if_exists } => {
                crate::cmd::index::drop_on(&path, &name, if_exists)
            }
            Ddl::SetUseIndex(_) => Err(CliError::Usage("not an index statement".into())),
        };
        self.reopen(writable, settings)?;
        r
    }
}

/// What one statement returned: per strategy the answer (the rows agree), and the
/// column names and display rows of the first.
pub(crate) struct Ran {
    /// Per strategy, the answer.
    pub(crate) runs: Vec<(Choice, Answer)>,
    /// On an array, per strategy (as `runs`), each device's scans (and, distributed,
    /// the network figures).
    pub(crate) devices: Vec<csd_sql::array::ArrayFigures>,
    /// Column names.
    pub(crate) names: Vec<String>,
    /// Rows as display strings.
    pub(crate) rows: Vec<Vec<String>>,
}

impl Ran {
    /// The first strategy's answer (all strategies returned the same rows).
    pub(crate) fn answer(&self) -> Option<&Answer> {
        self.runs.first().map(|(_, a)| a)
    }
}

/// Runs `sql` (`q1` … `q22` expanded) with each strategy of `opts`.
pub(crate) fn run_statement(
    session: &mut ImageSession,
    sql: &str,
    opts: &SqlOpts,
) -> Result<Ran, CliError> {
    let sql = expand_tpch(sql);
    let stmt = csd_sql::Statement::parse(sql).map_err(CliError::Usage)?;
    if stmt.is_dml() && !session.writable {
        // Run it on the read-only image first: bad input (unknown names, a value that
        // does not fit its column) fails before anything is written, so the image stays
        // byte-identical; a statement that changes nothing (a DELETE matching no row)
        // is done. Only a statement that needs to write reopens the image read-write.
        if let Db::One(s) = &mut session.db {
            let cs = StrategySel::choices(&opts.strategy);
            match s.run_statement(&stmt, &cs[..cs.len().min(1)]) {
                Err(e) if csd_sql::dml::write_refused(&e) => {}
                Err(e) => return Err(sql_error(e)),
                Ok(runs) => {
                    let (names, rows) = match runs.first() {
                        Some((_, a)) => (a.column_names(), a.rows().map_err(sql_error)?),
                        None => (Vec::new(), Vec::new()),
                    };
                    return Ok(Ran {
                        runs,
                        devices: Vec::new(),
                        names,
                        rows,
                    });
                }
            }
        }
        session.make_writable()?;
    }
    if let StatementKind::Csd(ddl) = stmt.kind()
        && !matches!(ddl, Ddl::SetUseIndex(_))
    {
        let msg = session.index_statement(ddl.clone())?;
        let first = StrategySel::choices(&opts.strategy)
            .first()
            .copied()
            .unwrap_or(Choice::Fixed(Strategy::Ihp));
        let answer = csd_sql::message_answer(&msg).map_err(sql_error)?;
        return Ok(Ran {
            runs: vec![(first, answer)],
            devices: Vec::new(),
            names: vec!["result".into()],
            rows: vec![vec![msg]],
        });
    }
    let (runs, devices) = match &mut session.db {
        Db::One(s) => (run_parsed(s, &stmt, &opts.strategy)?, Vec::new()),
        Db::Closed => return Err(CliError::Usage("the session is not open".into())),
        Db::Array(a) => {
            let cs = StrategySel::choices(&opts.strategy);
            let runs = a.run_strategies(sql, &cs).map_err(sql_error)?;
            let mut answers = Vec::with_capacity(runs.len());
            let mut arrays = Vec::with_capacity(runs.len());
            for (c, a) in runs {
                let (answer, figures) = a.split();
                answers.push((c, answer));
                arrays.push(figures);
            }
            (answers, arrays)
        }
    };
    let (names, rows) = match runs.first() {
        Some((_, ans)) => (ans.column_names(), ans.rows().map_err(sql_error)?),
        None => return Err(CliError::Usage("no strategy given".into())),
    };
    Ok(Ran {
        runs,
        devices,
        names,
        rows,
    })
}

/// A statement's result and reports as one JSON object (`--json`).
pub(crate) fn ran_json(ran: &Ran, cfg: &DeviceConfig, cmd: &str) -> Value {
    let runs_json: Vec<Value> = ran
        .runs
        .iter()
        .enumerate()
        .map(|(i, (c, ans))| {
            let mut v = json!({
                "strategy": c.name(),
                "scans": ans.scans.iter().map(csd_sql::ScanRecordReport::from).collect::<Vec<_>>(),
            });
            if let Some(a) = ran.devices.get(i) {
                v["array"] = crate::cmd::array::figures_json(a);
            }
            v
        })
        .collect();
    let mut v = json!({"columns": ran.names, "rows": ran.rows, "device": cfg.name, "runs": runs_json, "command": cmd});
    if let Some(d) = ran.answer().and_then(|a| a.dml.as_ref()) {
        v["dml"] = dml_json(d);
    }
    v
}

/// A statement's result (up to `opts.rows` rows) and, per strategy, its device scans
/// with their modeled reports (per device and the array total on an array) and, with
/// `--explain`, the plan.
pub(crate) fn print_ran(ran: &Ran, cfg: &DeviceConfig, opts: &SqlOpts) {
    print_rows(&ran.names, &ran.rows, opts.rows);
    if let Some(d) = ran.answer().and_then(|a| a.dml.as_ref()) {
        print_dml(d, cfg);
        if ran.answer().is_some_and(|a| a.scans.is_empty()) {
            return;
        }
    }
    for (i, (c, ans)) in ran.runs.iter().enumerate() {
        match ran.devices.get(i) {
            Some(a) => crate::cmd::array::print_devices(*c, ans, a),
            None => print_scans(*c, ans, cfg),
        }
        if opts.explain {
            println!(
                "plan ({}; [device] ran in the device, [host] in DataFusion):",
                c.name()
            );
            print!("{}", ans.explained);
        }
    }
}

/// `csd query`: DataFusion plans, the device scans.
pub(crate) fn query_cmd(a: &QueryArgs) -> Result<(), CliError> {
    let mut s = ImageSession::open(&a.db, &a.opts, a.opts.report.json)?;
    let ran = run_statement(&mut s, &a.sql, &a.opts)?;
    let cmd = crate::reproduce::line();
    if a.opts.report.json {
        println!("{}", ran_json(&ran, &s.cfg, &cmd));
        return Ok(());
    }
    print_ran(&ran, &s.cfg, &a.opts);
    println!("reproduce: {cmd}");
    Ok(())
}

/// The SQL of `q1` … `q22`, or the text itself (the one TPC-H query text of
/// [`csd_sql::tpch`]).
pub(crate) use csd_sql::tpch::expand as expand_tpch;

/// Result batches as display rows.
pub(crate) fn batch_rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, CliError> {
    csd_sql::batch_rows(batches).map_err(sql_error)
}

/// A SQL error as the CLI reports it: bad SQL is the user's to fix; a device failure or
/// strategies that disagree are not.
pub(crate) fn sql_error(e: SqlError) -> CliError {
    match e {
        SqlError::Query { .. } => CliError::Usage(e.to_string()),
        SqlError::Host(h) => CliError::Host(h),
        SqlError::Runtime(_) | SqlError::Disagree { .. } => CliError::Sql(e),
    }
}

/// Plans and runs `sql` with each strategy of `strategy` (a `--strategy` list) on
/// `session`: the results (checked equal) and the per-scan modeled reports.
pub(crate) fn run_sql(
    session: &mut SqlSession,
    sql: &str,
    strategy: &[StrategySel],
) -> Result<Vec<(Choice, Answer)>, CliError> {
    let choices = choices(strategy)?;
    session.run_strategies(sql, &choices).map_err(sql_error)
}

/// [`run_sql`] for a statement already parsed.
fn run_parsed(
    session: &mut SqlSession,
    stmt: &Statement,
    strategy: &[StrategySel],
) -> Result<Vec<(Choice, Answer)>, CliError> {
    let choices = choices(strategy)?;
    session.run_statement(stmt, &choices).map_err(sql_error)
}

/// The strategies a `--strategy` list stands for (at least one).
fn choices(strategy: &[StrategySel]) -> Result<Vec<Choice>, CliError> {
    let choices = StrategySel::choices(strategy);
    if choices.is_empty() {
        return Err(CliError::Usage("no strategy given".into()));
    }
    Ok(choices)
}

/// The device scans of one run: what ran in the device and the modeled report.
fn print_scans(choice: Choice, ans: &csd_sql::Answer, cfg: &DeviceConfig) {
    println!(
        "strategy {}: {} device scan(s), wall {:.3} s",
        choice.name(),
        ans.scans.len(),
        ans.wall_s
    );
    let mut t = report::table(&[
        "table",
        "strategy",
        "in the device",
        "modeled s",
        "bottleneck",
        "pages read",
        "host link MB",
        "channel MB",
        "energy J",
        "rows out",
    ]);
    for s in &ans.scans {
        let r = &s.report;
        t.add_row(vec![
            format!("{} ({})", s.table, r.layout),
            s.strategy.name().to_string(),
            s.program.clone(),
            format!("{:.4}", r.modeled_s()),
            r.bottleneck_name().to_string(),
            r.flash_reads.to_string(),
            mb(r.host_link_bytes),
            mb(r.channel_bytes),
            format!("{:.3}", r.energy.total_j()),
            r.result_rows.to_string(),
        ]);
    }
    println!("{t}");
    for s in &ans.scans {
        if s.why != "chosen by the user" {
            println!("  {}: {}", s.table, s.why);
        }
        if let Some(ix) = &s.report.index {
            println!(
                "  {}: FLIXR index {ix}: {} of {} pages skipped, {} index-cache misses",
                s.table, s.report.pages_skipped, s.report.pages, s.report.index_misses
            );
        }
        if s.report.setup_ns > 0 {
            println!(
                "  {}: setup (FLIXR join registrations and releases) {:.6} s, in its modeled time",
                s.table,
                s.report.setup_ns as f64 / 1e9
            );
        }
    }
    let reports = ans.reports();
    // A fold from +0.0: an empty f64 sum is -0.0, printed "-0.0000" for a query without
    // device scans.
    let total = reports.iter().fold(0.0, |t, r| t + r.modeled_s());
    println!("modeled device time, all scans: {total:.4} s (scans run one after the other)");
    print_reports(&reports, cfg);
}

/// Print up to `max` rows of an answer.
pub(crate) fn print_answer(a: &Answer, max: usize) -> Result<(), CliError> {
    let names = a.column_names();
    let rows = a.rows().map_err(sql_error)?;
    print_rows(&names, &rows, max);
    Ok(())
}

/// Print up to `max` of `rows` under `names`, then the row count.
pub(crate) fn print_rows(names: &[String], rows: &[Vec<String>], max: usize) {
    let mut t = report::table(&names.iter().map(String::as_str).collect::<Vec<_>>());
    for r in rows.iter().take(max) {
        t.add_row(r.clone());
    }
    println!("{t}");
    if rows.len() > max {
        println!("({} rows, {} shown)", rows.len(), max);
    } else {
        println!("({} rows)", rows.len());
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

/// The comparison table of strategies and the breakdown per strategy.
pub(crate) fn print_reports(reports: &[QueryReport], cfg: &DeviceConfig) {
    let mut t = report::table(&[
        "strategy",
        "layout",
        "modeled s",
        "bottleneck",
        "MB/s (modeled)",
        "pages read",
        "host link MB",
        "channel MB",
        "DRAM MB",
        "energy J (dev / host / total)",
        "wall s",
        "rows/s (wall)",
    ]);
    for r in reports {
        t.add_row(vec![
            r.strategy.name().to_string(),
            r.layout.to_string(),
            format!("{:.4}", r.modeled_s()),
            r.bottleneck_name().to_string(),
            format!("{:.0}", r.modeled_bytes_per_s() / 1e6),
            r.flash_reads.to_string(),
            mb(r.host_link_bytes),
            mb(r.channel_bytes),
            mb(r.dram_bytes),
            format!(
                "{:.3} / {:.3} / {:.3}",
                r.energy.device_j(),
                r.energy.host_total_j(),
                r.energy.total_j()
            ),
            format!("{:.3}", r.wall_s),
            format!("{:.3e}", r.wall_rows_per_s()),
        ]);
    }
    println!("{t}");
    let mut b = report::table(&[
        "strategy",
        "flash array",
        "flash→DRAM",
        "DRAM",
        "embedded CPU",
        "DRAM→host",
        "host CPU",
    ]);
    for r in reports {
        let mut row = vec![r.strategy.name().to_string()];
        for s in &r.stages {
            row.push(format!(
                "{:.4} s ({:.0}%)",
                s.busy_ns as f64 / 1e9,
                s.utilization * 100.0
            ));
        }
        b.add_row(row);
    }
    println!("modeled busy time per stage (per member; % of the run):");
    println!("{b}");
    if reports.len() > 1 {
        let slowest = reports.iter().map(|r| r.modeled_ns).max().unwrap_or(1) as f64;
        let line: Vec<String> = reports
            .iter()
            .map(|r| {
                format!(
                    "{} {:.2}x",
                    r.strategy.name(),
                    slowest / r.modeled_ns.max(1) as f64
                )
            })
            .collect();
        println!("speed-up over the slowest: {}", line.join(", "));
    }
    println!(
        "device: {} ({}), host link {} MB/s, {} x {} MHz embedded cores, host {} x {} MHz",
        cfg.name,
        report::geometry_line(cfg),
        cfg.host_link.bandwidth_mb_s,
        cfg.cpu.cores,
        cfg.cpu.clock_mhz,
        cfg.host.cores,
        cfg.host.clock_mhz
    );
}

/// The modeled report of an INSERT / UPDATE / DELETE.
pub(crate) fn print_dml(d: &csd_host::dml::DmlReport, cfg: &DeviceConfig) {
    let mut t = report::table(&[
        "table",
        "rows",
        "modeled s",
        "pages read",
        "pages rewritten",
        "pages appended",
        "pages relocated",
        "redo log pages",
        "flash reads / programs",
        "host link MB",
        "channel MB",
        "DRAM MB",
        "energy J (dev / host / total)",
        "wall s",
    ]);
    t.add_row(vec![
        format!("{} ({})", d.table, d.layout),
        format!("{} {} ({} in the table)", d.rows, d.op.past(), d.table_rows),
        format!("{:.4}", d.modeled_s()),
        if d.pages_skipped > 0 {
            format!("{} ({} skipped by READ_IDX)", d.pages_read, d.pages_skipped)
        } else {
            d.pages_read.to_string()
        },
        format!(
            "{}{}",
            d.pages_rewritten,
            if d.write_idx { " (WRITE_IDX)" } else { "" }
        ),
        d.pages_appended.to_string(),
        d.pages_relocated.to_string(),
        d.log_pages.to_string(),
        format!("{} / {}", d.flash_reads, d.flash_programs),
        mb(d.host_link_bytes),
        mb(d.channel_bytes),
        mb(d.dram_bytes),
        format!(
            "{:.4} / {:.4} / {:.4}",
            d.energy.device_j(),
            d.energy.host_total_j(),
            d.energy.total_j()
        ),
        format!("{:.3}", d.wall_s),
    ]);
    println!("{t}");
    println!(
        "device: {} ({}), host link {} MB/s",
        cfg.name,
        report::geometry_line(cfg),
        cfg.host_link.bandwidth_mb_s
    );
}

/// The report of an INSERT / UPDATE / DELETE as JSON.
pub(crate) fn dml_json(d: &csd_host::dml::DmlReport) -> Value {
    json!({
        "op": d.op.past(),
        "table": d.table,
        "layout": d.layout,
        "rows": d.rows,
        "table_rows": d.table_rows,
        "modeled_time_s": d.modeled_s(),
        "pages_read": d.pages_read,
        "pages_skipped": d.pages_skipped,
        "pages_rewritten": d.pages_rewritten,
        "pages_appended": d.pages_appended,
        "pages_relocated": d.pages_relocated,
        "redo_log_pages": d.log_pages,
        "write_idx": d.write_idx,
        "flash_reads": d.flash_reads,
        "flash_programs": d.flash_programs,
        "channel_bytes": d.channel_bytes,
        "dram_bytes": d.dram_bytes,
        "host_link_bytes": d.host_link_bytes,
        "device_cpu_cycles": d.device_cpu_cycles,
        "host_cpu_cycles": d.host_cpu_cycles,
        "energy_j": d.energy.total_j(),
        "device_energy_j": d.energy.device_j(),
        "host_energy_j": d.energy.host_total_j(),
        "wall_s": d.wall_s,
    })
}

/// One report as JSON (snake_case keys with units): csd-sql's [`csd_sql::ScanReport`].
pub(crate) fn report_json(r: &QueryReport) -> Value {
    json!(csd_sql::ScanReport::from(r))
}

/// The demo's query step: TPC-H lineitem (SF 0.05, PAX) on the demo device, Q6 three ways.
pub(crate) fn demo_query(cfg: &DeviceConfig) -> Result<(), CliError> {
    println!(
        "\n6. Tables and queries inside the device: TPC-H lineitem (SF 0.05, PAX pages) and Q6,"
    );
    println!(
        "   in the host (ihp), on the embedded cores (cpu-isp) and in per-channel filter hardware (hw-isp):"
    );
    let nand = csd_nand::Nand::new_in_memory(cfg.clone())?;
    let ftl = csd_ftl::Ftl::format(nand, FtlConfig::default())?;
    let mut client = Client::new(NvmeDevice::new(ftl))?;
    let sf = 0.05;
    let g =
        TpchGenerator::new(TpchTable::LineItem, sf).map_err(|e| CliError::Usage(e.to_string()))?;
    let total = TpchTable::LineItem.row_count(sf, 1, 1);
    let load = crate::cmd::tables::load_one(&mut client, "lineitem", g, Layout::Pax, total, false)?;
    println!(
        "   loaded {} rows ({}) in {:.2} s wall, {:.3} s modeled",
        load.table.rows,
        report::bytes(load.table.bytes()),
        load.wall_s,
        load.modeled_s
    );
    // csd-host's default scan options: 32 reads in flight, GET polls from 50 µs to 10 ms.
    let settings = ScanSettings::new(Choice::Fixed(Strategy::Ihp));
    let mut session = SqlSession::new(client, cfg.clone(), settings).map_err(sql_error)?;
    let runs = run_sql(&mut session, expand_tpch("q6"), &[StrategySel::All])?;
    if let Some((_, first)) = runs.first() {
        print_answer(first, 5)?;
    }
    let reports: Vec<QueryReport> = runs.iter().flat_map(|(_, a)| a.reports()).collect();
    print_reports(&reports, cfg);
    println!(
        "   the three strategies returned the same result; reproduce with: csd load tpch --sf {sf} --tables lineitem --image dev.img && csd query --image dev.img q6"
    );
    Ok(())
}

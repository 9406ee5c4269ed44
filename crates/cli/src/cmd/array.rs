//! `csd array create|info`, loads into an array (`csd load ... --array DIR`), queries over
//! one (`csd query|sql --array DIR`) and `csd bench array`: an array of smart SSDs
//! (smart-ssd-query-processing §4.3) as [`csd_sql::array`] builds it — a table's pages
//! striped across N device images listed in a versioned manifest, one DataFusion
//! partition per device, the device scans in parallel on host threads.

use crate::args::{JsonFlag, LayoutArg, StrategySel, parse_count};
use crate::cmd::query::{self, SqlOpts};
use crate::{CliError, ConfigSource, image, report};
use clap::{Args, Subcommand};
use csd_device::NvmeDevice;
use csd_ftl::FtlConfig;
use csd_host::{Client, LoadReport};
use csd_sim::DeviceConfig;
use csd_sql::array::{ArrayFigures, Manifest, Placement, load_striped};
use csd_sql::{Answer, ArraySession, Choice, ScanRecord, ScanSettings};
use csd_table::datagen::{RowSource, TpchGenerator, TpchTable};
use csd_table::page::Layout;
use std::path::{Path, PathBuf};

/// `csd array ...`.
#[derive(Subcommand)]
pub(crate) enum ArrayCmd {
    /// Create an array: N device images and the manifest (csd-array.toml) in DIR.
    ///
    /// Example: csd array create --devices 4 --preset isp-ch8 --dir arr
    Create(CreateArgs),
    /// The array's devices and tables (rows and pages per device).
    ///
    /// Example: csd array info --dir arr
    Info(InfoArgs),
}

#[derive(Args)]
pub(crate) struct CreateArgs {
    /// Devices in the array.
    #[arg(long)]
    devices: usize,
    /// Directory of the array (created; must not hold an array already).
    #[arg(long)]
    dir: PathBuf,
    #[command(flatten)]
    src: ConfigSource,
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print the manifest as JSON")))]
pub(crate) struct InfoArgs {
    /// Directory of the array.
    #[arg(long)]
    dir: PathBuf,
    #[command(flatten)]
    report: JsonFlag,
}

fn array_error(e: csd_sql::array::ArrayError) -> CliError {
    CliError::Usage(e.to_string())
}

/// `csd array ...`.
pub(crate) fn array_cmd(c: &ArrayCmd) -> Result<(), CliError> {
    match c {
        ArrayCmd::Create(a) => create(a),
        ArrayCmd::Info(a) => info(a),
    }
}

fn create(a: &CreateArgs) -> Result<(), CliError> {
    if a.devices == 0 || a.devices > 64 {
        return Err(CliError::Usage(format!(
            "--devices {}: an array has 1 to 64 devices",
            a.devices
        )));
    }
    if Manifest::path(&a.dir).exists() {
        return Err(CliError::Usage(format!(
            "{} already holds an array (its {}); choose another --dir",
            a.dir.display(),
            csd_sql::array::MANIFEST_FILE
        )));
    }
    let m = Manifest::new(a.devices, &a.src.describe());
    let paths = m.device_paths(&a.dir);
    if let Some(p) = paths.iter().find(|p| p.exists()) {
        return Err(CliError::Usage(format!(
            "{} exists: an array creates its own images",
            p.display()
        )));
    }
    // The config is checked before anything is created.
    let cfg = a.src.load()?;
    std::fs::create_dir_all(&a.dir).map_err(|e| CliError::Io {
        path: a.dir.clone(),
        source: e,
    })?;
    for p in &paths {
        let mut dev = image::open_rw(p, &a.src, &image::FtlArgs::default(), true, true)?;
        image::close(&mut dev)?;
    }
    m.write(&a.dir).map_err(array_error)?;
    println!(
        "created an array of {} {} devices in {} ({})",
        a.devices,
        cfg.name,
        a.dir.display(),
        report::geometry_line(&cfg)
    );
    println!("reproduce: {}", crate::reproduce::line());
    Ok(())
}

fn info(a: &InfoArgs) -> Result<(), CliError> {
    let m = Manifest::read(&a.dir).map_err(array_error)?;
    if a.report.json {
        println!(
            "{}",
            serde_json::to_string(&m).map_err(|e| CliError::Usage(e.to_string()))?
        );
        return Ok(());
    }
    println!(
        "array {} (manifest version {}): {} devices ({}): {}",
        a.dir.display(),
        m.version,
        m.devices.len(),
        m.device_config,
        m.devices.join(", ")
    );
    let mut t = report::table(&[
        "table",
        "layout",
        "stripe pages",
        "rows",
        "pages",
        "rows per device",
        "pages per device",
    ]);
    for p in &m.tables {
        t.add_row(vec![
            p.name.clone(),
            p.layout.to_string(),
            p.stripe_pages.to_string(),
            p.rows.to_string(),
            p.pages.to_string(),
            join(&p.device_rows),
            join(&p.device_pages),
        ]);
    }
    println!("{t}");
    Ok(())
}

fn join(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(" / ")
}

/// An array opened for loading: its devices read-write in this process or, when the
/// manifest lists workers, through them (`csd_dist::load`: each device's worker writes
/// its stripe; nothing is opened here).
pub(crate) struct ArrayLoad {
    dir: PathBuf,
    manifest: Box<Manifest>,
    clients: Vec<Client>,
    stripe_pages: u64,
    through_workers: bool,
}

impl ArrayLoad {
    /// Opens every device of the array in `dir` read-write, or none when its manifest
    /// lists workers (the manifest is read and checked first: a bad one changes
    /// nothing).
    pub(crate) fn open(dir: &Path, stripe_pages: u64, quiet: bool) -> Result<Self, CliError> {
        if stripe_pages == 0 {
            return Err(CliError::Usage(
                "--stripe-pages 0: a stripe unit is at least one page".into(),
            ));
        }
        let manifest = Box::new(Manifest::read(dir).map_err(array_error)?);
        if !manifest.workers.is_empty() {
            return Ok(ArrayLoad {
                dir: dir.to_path_buf(),
                manifest,
                clients: Vec::new(),
                stripe_pages,
                through_workers: true,
            });
        }
        let mut clients = Vec::with_capacity(manifest.devices.len());
        for p in manifest.device_paths(dir) {
            let dev = image::open_rw(
                &p,
                &ConfigSource::default(),
                &image::FtlArgs::default(),
                false,
                quiet,
            )?;
            clients.push(Client::new(NvmeDevice::from_block(dev))?);
        }
        Ok(ArrayLoad {
            dir: dir.to_path_buf(),
            manifest,
            clients,
            stripe_pages,
            through_workers: false,
        })
    }

    /// [`ArrayLoad::load`] through the array's workers.
    fn load_remote(
        &mut self,
        name: &str,
        source: impl RowSource,
        layout: Layout,
        pb: Option<&indicatif::ProgressBar>,
    ) -> Result<(LoadReport, Placement), CliError> {
        let schema = source.schema().clone();
        let token = std::env::var(csd_dist::TOKEN_ENV)
            .ok()
            .filter(|t| !t.is_empty());
        let done = csd_dist::load_through_workers(
            &self.manifest,
            &array_name(&self.dir),
            token.as_deref(),
            name,
            source,
            layout,
            self.stripe_pages,
            &|n| {
                if let Some(pb) = pb {
                    pb.set_position(n);
                }
            },
        )
        .map_err(|e| CliError::Usage(e.to_string()))?;
        let p = &done.placement;
        let table = csd_host::TableInfo {
            name: name.to_string(),
            schema,
            layout,
            page_bytes: done.page_bytes,
            first_lba: done.devices.first().map_or(0, |d| d.first_lba),
            pages: p.pages,
            rows: p.rows,
            index: None,
            capacity: p.pages,
            free_hints: Vec::new(),
            distinct: None,
            bounds: None,
        };
        let replaced = done.devices.iter().any(|d| d.replaced.is_some()).then(|| {
            let mut old = table.clone();
            old.rows = done
                .devices
                .iter()
                .filter_map(|d| d.replaced)
                .map(|r| r.0)
                .sum();
            old.pages = done
                .devices
                .iter()
                .filter_map(|d| d.replaced)
                .map(|r| r.1)
                .sum();
            old
        });
        let report = LoadReport {
            table,
            replaced,
            wall_s: 0.0,
            modeled_s: done.devices.iter().map(|d| d.modeled_s).fold(0.0, f64::max),
        };
        Ok((report, done.placement))
    }

    /// Loads `source` as table `name` striped over the devices, with a progress bar
    /// (unless `json`), and records it in the manifest. The report is the whole table's
    /// (rows and pages of every device; modeled time of the slowest device).
    pub(crate) fn load(
        &mut self,
        name: &str,
        source: impl RowSource,
        layout: Layout,
        total: Option<u64>,
        json: bool,
    ) -> Result<LoadReport, CliError> {
        let n = self.manifest.devices.len();
        let pb = (!json).then(|| {
            let pb = report::progress_bar(total, "rows");
            pb.set_message(if self.through_workers {
                format!("loading {name} on {n} devices through their workers")
            } else {
                format!("loading {name} on {n} devices")
            });
            pb
        });
        let wall = std::time::Instant::now();
        let (report, placement) = if self.through_workers {
            let r = self.load_remote(name, source, layout, pb.as_ref());
            if let Some(pb) = pb {
                pb.finish_and_clear();
            }
            r?
        } else {
            let r = load_striped(
                &mut self.clients,
                name,
                source,
                layout,
                self.stripe_pages,
                &|n| {
                    if let Some(pb) = &pb {
                        pb.set_position(n);
                    }
                },
            );
            if let Some(pb) = pb {
                pb.finish_and_clear();
            }
            let (reports, placement) = r?;
            let first = reports
                .first()
                .ok_or_else(|| CliError::Usage("the array has no devices".into()))?;
            let mut table = first.table.clone();
            table.rows = placement.rows;
            table.pages = placement.pages;
            let report = LoadReport {
                table,
                replaced: first.replaced.clone(),
                wall_s: 0.0,
                modeled_s: reports.iter().map(|r| r.modeled_s).fold(0.0, f64::max),
            };
            (report, placement)
        };
        // Every device holds its stripe (through workers: every worker committed).
        self.manifest.put(placement.clone());
        self.manifest.write(&self.dir).map_err(array_error)?;
        if !json {
            eprintln!(
                "{name}: {} rows striped over {n} devices ({} pages per unit{}): pages {}",
                placement.rows,
                placement.stripe_pages,
                if self.through_workers {
                    ", through their workers"
                } else {
                    ""
                },
                join(&placement.device_pages)
            );
        }
        Ok(LoadReport {
            wall_s: wall.elapsed().as_secs_f64(),
            ..report
        })
    }

    /// Closes every device cleanly.
    pub(crate) fn close(self) -> Result<(), CliError> {
        for c in self.clients {
            let mut b = c.into_device().into_block();
            image::close(&mut b)?;
        }
        Ok(())
    }
}

/// The devices of the array in `dir`, opened read-only (nothing a query runs changes
/// them), with the manifest and the devices' config.
pub(crate) fn open_ro(
    dir: &Path,
    quiet: bool,
) -> Result<(Vec<Client>, DeviceConfig, Manifest), CliError> {
    let manifest = Manifest::read(dir).map_err(array_error)?;
    let (clients, cfg) = csd_sql::array::open_clients(&manifest, dir, |p| {
        image::open_ro(p, quiet).map_err(OpenFailed::Cli)
    })
    .map_err(OpenFailed::into_cli)?;
    Ok((clients, cfg, manifest))
}

/// A SQL session over the array in `dir` with `threads` host threads (default: the
/// cores). An array whose manifest lists workers runs its scans on them (`csd worker`)
/// unless `in_process`.
pub(crate) fn session(
    dir: &Path,
    settings: ScanSettings,
    threads: Option<usize>,
    quiet: bool,
    in_process: bool,
) -> Result<(ArraySession, DeviceConfig), CliError> {
    let (clients, cfg, manifest) = open_ro(dir, quiet)?;
    let threads =
        threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut s = ArraySession::new(clients, cfg.clone(), settings, threads, &manifest.tables)
        .map_err(query::sql_error)?;
    if !manifest.workers.is_empty() && !in_process {
        let token = std::env::var(csd_dist::TOKEN_ENV)
            .ok()
            .filter(|t| !t.is_empty());
        csd_dist::distribute(&mut s, &manifest, &array_name(dir), token.as_deref())
            .map_err(|e| CliError::Usage(e.to_string()))?;
    }
    Ok((s, cfg))
}

/// An array's name in messages: its directory's name.
fn array_name(dir: &Path) -> String {
    dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn mb(b: u64) -> String {
    format!("{:.1}", b as f64 / 1e6)
}

/// Per device: its scans' modeled time, pages, bytes and energy; then the array total;
/// on a distributed array, per worker: what its devices sent over its link.
pub(crate) fn print_devices(choice: Choice, answer: &Answer, figures: &ArrayFigures) {
    let devices = &figures.devices;
    let modeled_ns = figures.modeled_ns();
    println!(
        "strategy {}: {} devices, {} device scans, wall {:.3} s",
        choice.name(),
        devices.len(),
        answer.scans.len(),
        answer.wall_s
    );
    let mut t = report::table(&[
        "device",
        "scans",
        "modeled s",
        "pages read",
        "host link MB",
        "channel MB",
        "energy J",
        "rows out",
        "wall s (scans; array: query)",
    ]);
    let sum = |d: &[ScanRecord], f: &dyn Fn(&ScanRecord) -> u64| -> u64 { d.iter().map(f).sum() };
    for (i, d) in devices.iter().enumerate() {
        t.add_row(vec![
            format!("dev{i}"),
            d.len().to_string(),
            format!("{:.4}", sum(d, &|s| s.report.modeled_ns) as f64 / 1e9),
            sum(d, &|s| s.report.flash_reads).to_string(),
            mb(sum(d, &|s| s.report.host_link_bytes)),
            mb(sum(d, &|s| s.report.channel_bytes)),
            format!(
                "{:.3}",
                d.iter().map(|s| s.report.energy.total_j()).sum::<f64>()
            ),
            sum(d, &|s| s.report.result_rows).to_string(),
            format!("{:.3}", d.iter().map(|s| s.report.wall_s).sum::<f64>()),
        ]);
    }
    let all: Vec<&ScanRecord> = devices.iter().flatten().collect();
    t.add_row(vec![
        "array".to_string(),
        all.len().to_string(),
        format!("{:.4}", modeled_ns as f64 / 1e9),
        all.iter()
            .map(|s| s.report.flash_reads)
            .sum::<u64>()
            .to_string(),
        mb(all.iter().map(|s| s.report.host_link_bytes).sum()),
        mb(all.iter().map(|s| s.report.channel_bytes).sum()),
        format!(
            "{:.3}",
            all.iter().map(|s| s.report.energy.total_j()).sum::<f64>()
        ),
        all.iter()
            .map(|s| s.report.result_rows)
            .sum::<u64>()
            .to_string(),
        format!("{:.3}", answer.wall_s),
    ]);
    println!("{t}");
    let Some(net) = &figures.network else {
        println!(
            "array modeled time = the slowest device ({:.4} s; devices run in parallel, \
             each device's time includes the host work on its stream); DataFusion's host \
             operators above the scans: wall time only",
            modeled_ns as f64 / 1e9
        );
        return;
    };
    let device_ns = figures.device_ns();
    let mut w = report::table(&[
        "worker",
        "devices",
        "slowest device s",
        "sent MB",
        "rows sent",
        "transfer s",
        "modeled s",
    ]);
    for f in figures.workers() {
        let slowest = f
            .devices
            .iter()
            .map(|&d| device_ns.get(d).copied().unwrap_or(0))
            .max()
            .unwrap_or(0);
        w.add_row(vec![
            f.worker.trim_end_matches('/').to_string(),
            f.devices
                .iter()
                .map(|d| format!("dev{d}"))
                .collect::<Vec<_>>()
                .join(", "),
            format!("{:.4}", slowest as f64 / 1e9),
            mb(f.bytes),
            f.rows.to_string(),
            format!("{:.4}", f.transfer_ns as f64 / 1e9),
            format!("{:.4}", f.modeled_ns as f64 / 1e9),
        ]);
    }
    println!("{w}");
    println!(
        "array modeled time = the slowest worker ({:.4} s): its slowest device, then its \
         devices' scan outputs over its link to the coordinator ({} GB/s, {} µs latency; \
         the manifest's [network]); DataFusion's host operators above the scans: wall \
         time only",
        modeled_ns as f64 / 1e9,
        net.network.bandwidth_gb_s,
        net.network.latency_us
    );
}

/// An array query's figures as JSON (`runs[i].array` of `csd query --json`): the
/// array's modeled time, per device its scans and, distributed, what it sent; per
/// worker its link's figures and the network.
pub(crate) fn figures_json(f: &ArrayFigures) -> serde_json::Value {
    use serde_json::json;
    let sent = |d: usize| -> (u64, u64, f64) {
        match &f.network {
            Some(n) => (
                n.bytes.get(d).copied().unwrap_or(0),
                n.rows.get(d).copied().unwrap_or(0),
                n.device_transfer_ns(d) as f64 / 1e9,
            ),
            None => (0, 0, 0.0),
        }
    };
    let devices: Vec<serde_json::Value> = f
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut v = json!({
                "modeled_time_s": d.iter().map(|s| s.report.modeled_ns).sum::<u64>() as f64 / 1e9,
                "flash_reads": d.iter().map(|s| s.report.flash_reads).sum::<u64>(),
                "host_link_bytes": d.iter().map(|s| s.report.host_link_bytes).sum::<u64>(),
                "scans": d.iter().map(|s| query::report_json(&s.report)).collect::<Vec<_>>(),
            });
            if let Some(n) = &f.network {
                let (bytes, rows, s) = sent(i);
                v["worker"] = json!(n.workers.get(i));
                v["sent_bytes"] = json!(bytes);
                v["sent_rows"] = json!(rows);
                v["transfer_s"] = json!(s);
            }
            v
        })
        .collect();
    let mut v = json!({
        "modeled_time_s": f.modeled_ns() as f64 / 1e9,
        "devices": devices,
    });
    if let Some(n) = &f.network {
        v["network"] = json!({
            "bandwidth_gb_s": n.network.bandwidth_gb_s,
            "latency_us": n.network.latency_us,
        });
        v["workers"] = json!(
            f.workers()
                .iter()
                .map(|w| json!({
                    "worker": w.worker,
                    "devices": w.devices,
                    "sent_bytes": w.bytes,
                    "sent_rows": w.rows,
                    "transfer_s": w.transfer_ns as f64 / 1e9,
                    "modeled_time_s": w.modeled_ns as f64 / 1e9,
                }))
                .collect::<Vec<_>>()
        );
    }
    v
}

/// `csd bench array`: scan wall time of a query on an in-memory array, per host thread
/// count.
#[derive(Args)]
pub(crate) struct BenchArrayArgs {
    /// Devices in the array.
    #[arg(long, default_value_t = 2)]
    devices: usize,
    /// TPC-H scale factor of lineitem.
    #[arg(long, default_value_t = 0.1)]
    sf: f64,
    /// Host thread counts to compare, comma-separated: DataFusion's partitions, the
    /// member scans running at once, and their evaluation threads (`CSD_SCAN_THREADS`)
    /// shared among them.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2], value_parser = parse_count)]
    threads: Vec<usize>,
    /// The query (`q1` … `q22`, or SQL over lineitem).
    #[arg(long, default_value = "q6")]
    query: String,
    /// Page layout.
    #[arg(long, value_enum, default_value_t)]
    layout: LayoutArg,
    /// Runs per thread count (the best is reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    #[command(flatten)]
    opts: SqlOpts,
    #[command(flatten)]
    src: ConfigSource,
}

/// `csd bench array`.
pub(crate) fn bench_array_cmd(a: &BenchArrayArgs) -> Result<(), CliError> {
    let cfg = a.src.load()?;
    if a.devices == 0 {
        return Err(CliError::Usage("--devices must be at least 1".into()));
    }
    // One strategy: the first asked for (`all`, the default, runs hw-isp).
    let choice = match a.opts.strategy.first() {
        None | Some(StrategySel::All) => Choice::Fixed(csd_host::Strategy::HwIsp),
        Some(s) => StrategySel::choices(&[*s])[0],
    };
    let (mut clients, placement) = load_lineitem(a, &cfg)?;
    let sql = query::expand_tpch(&a.query);
    let mut settings = a.opts.settings();
    settings.choice = choice;
    let mut t = report::table(&[
        "threads",
        "best wall s (query)",
        "device scans, wall s summed",
        "speed-up",
        "array modeled s",
    ]);
    let mut base: Option<f64> = None;
    let mut lines = Vec::new();
    for &n in &a.threads {
        // The whole query on `n` host threads: at most `n` member scans at once (the
        // session's scan slots), each evaluating its pages on its share of the `n`
        // threads (a scan's look-ahead would otherwise use every core even when `n` is 1).
        csd_device::set_scan_threads(n / a.devices.min(n).max(1));
        let s = ArraySession::new(
            clients,
            cfg.clone(),
            settings,
            n,
            std::slice::from_ref(&placement),
        )
        .map_err(query::sql_error)?;
        let (best, scans_wall, modeled) = best_of(&s, sql, a.repeat, &mut lines)?;
        let speedup = base.map_or(1.0, |b| b / best);
        base.get_or_insert(best);
        t.add_row(vec![
            n.to_string(),
            format!("{best:.3}"),
            format!("{scans_wall:.3}"),
            format!("{speedup:.2}x"),
            format!("{:.4}", modeled as f64 / 1e9),
        ]);
        clients = s
            .into_clients()
            .ok_or_else(|| CliError::Usage("a plan still holds the devices".into()))?;
    }
    csd_device::set_scan_threads(0);
    if lines.windows(2).any(|w| w[0] != w[1]) {
        return Err(CliError::Nvme(
            "runs with different thread counts returned different rows: a bug".into(),
        ));
    }
    println!("{t}");
    println!(
        "device: {} ({}); strategy {}; the modeled time does not depend on host threads",
        cfg.name,
        report::geometry_line(&cfg),
        choice.name()
    );
    println!("reproduce: {}", crate::reproduce::line());
    Ok(())
}

/// TPC-H lineitem striped over `--devices` fresh in-memory devices.
fn load_lineitem(
    a: &BenchArrayArgs,
    cfg: &DeviceConfig,
) -> Result<(Vec<Client>, Placement), CliError> {
    let mut clients = Vec::with_capacity(a.devices);
    for _ in 0..a.devices {
        let nand = csd_nand::Nand::new_in_memory(cfg.clone())?;
        let ftl = csd_ftl::Ftl::format(nand, FtlConfig::default())?;
        clients.push(Client::new(NvmeDevice::new(ftl))?);
    }
    let g = TpchGenerator::new(TpchTable::LineItem, a.sf)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let (_, placement): (_, Placement) =
        load_striped(&mut clients, "lineitem", g, a.layout.layout(), 1, &|_| {})?;
    eprintln!(
        "loaded lineitem SF {} ({} rows) striped over {} devices: pages {}",
        a.sf,
        placement.rows,
        a.devices,
        join(&placement.device_pages)
    );
    Ok((clients, placement))
}

/// `sql` run `repeat` times on one session: the best wall time, the device scans' wall
/// time summed in that run, and the modeled time; each run's sorted rows go to `lines`.
fn best_of(
    s: &ArraySession,
    sql: &str,
    repeat: usize,
    lines: &mut Vec<Vec<Vec<String>>>,
) -> Result<(f64, f64, u64), CliError> {
    let mut best = f64::INFINITY;
    let mut scans_wall = 0.0;
    let mut modeled = 0u64;
    for _ in 0..repeat.max(1) {
        let r = s.run(sql).map_err(query::sql_error)?;
        if r.answer.wall_s < best {
            best = r.answer.wall_s;
            scans_wall = r.answer.scans.iter().map(|x| x.report.wall_s).sum();
        }
        modeled = r.modeled_ns();
        let mut rows = r.answer.rows().map_err(query::sql_error)?;
        rows.sort();
        lines.push(rows);
    }
    Ok((best, scans_wall, modeled))
}

/// The error type [`csd_sql::array::open_clients`] needs on the CLI side: an image that
/// does not open, a manifest that does not fit, or a device the host cannot drive.
enum OpenFailed {
    Cli(CliError),
    Array(csd_sql::array::ArrayError),
    Host(csd_host::HostError),
}

impl From<csd_sql::array::ArrayError> for OpenFailed {
    fn from(e: csd_sql::array::ArrayError) -> Self {
        OpenFailed::Array(e)
    }
}

impl From<csd_host::HostError> for OpenFailed {
    fn from(e: csd_host::HostError) -> Self {
        OpenFailed::Host(e)
    }
}

impl OpenFailed {
    fn into_cli(self) -> CliError {
        match self {
            OpenFailed::Cli(e) => e,
            OpenFailed::Array(e) => array_error(e),
            OpenFailed::Host(e) => e.into(),
        }
    }
}

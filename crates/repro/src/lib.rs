//! The papers' reproductions (`csd repro ...`): their experiments run on the emulator, each written as a
//! markdown report with PNG + SVG plots and a side-by-side table against the paper's
//! published figures. One module per reproduction, each shaped sweep → checks → render:
//!
//! | command | module | paper |
//! |---|---|---|
//! | `csd repro scan-paper` | [`scan_paper`] | in-storage scan paper: Figures 5, 7, Tables 1, 3, 4 |
//! | `csd repro smart-ssd` | [`smart_ssd`] | smart-ssd: Figures 4–7 |
//! | `csd repro fd-tree` | [`fd_tree`] | FD+tree §5: Figures 6, 7, 8 |
//! | `csd repro batch-io` | [`batch_io`] | batch-io §8: Figures 11–15, Tables 3, 4 |
//! | `csd repro flixr` | [`flixr`] | FLIXR §6: Figures 9–11 |
//!
//! This module holds the parts they share: the in-memory test bed with a SQL session
//! ([`Bed`]), the comparison with the paper ([`Comparison`], crate csd-paper) and its
//! markdown and terminal tables, markdown tables, report files that never overwrite a
//! file csd did not write, and the memory check that refuses a scale that would not fit.
//!
//! Every measured number comes from a run's report (counters the device and the host
//! kept while working); analytic models are shown beside the runs, never in their place.

pub mod all;
pub mod args;
pub mod batch_io;
mod error;
pub mod fd_tree;
pub mod fdbench;
pub mod flixr;
pub mod reproduce;
pub mod scan_paper;
pub mod smart_ssd;
pub mod util;
pub mod ycsb;

use clap::Subcommand;
use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{Catalog, Client, QueryReport, Strategy, TableInfo};
pub use csd_paper::{Comparison, PaperValue, Status};
use csd_sim::DeviceConfig;
use csd_sim::events::TimeModel;
use csd_sql::{Choice, ScanSettings, SqlSession};
use csd_table::datagen::{SyntheticGenerator, SyntheticSpec, TpchGenerator, TpchTable};
use csd_table::page::Layout;
pub use error::{ReproError, sql_error};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use util as report;

/// Which paper to reproduce.
#[derive(Subcommand)]
pub enum ReproCmd {
    /// In-storage scan paper: Figure 5 (throughput vs NAND speed, 8/16 channels, IHP /
    /// cpu / hw), Figure 7 (selectivity x host link) and Table 4, against its analytic
    /// model and published figures.
    ///
    /// Example: csd repro scan-paper --out repro/scan-paper
    ScanPaper(scan_paper::ScanPaperArgs),
    /// Smart SSD paper: Figure 4 (tuple size), Figures 5 and 6 (selection and
    /// aggregation vs selectivity: time and energy) and Figure 7 (TPC-H Q6), regular SSD
    /// vs Smart SSD with NSM and PAX.
    ///
    /// Example: csd repro smart-ssd --out repro/smart-ssd
    SmartSsd(smart_ssd::SmartSsdArgs),
    /// FD+tree paper: the W_l sweep of Figure 6 and the G_T runs of Figure 8 for the
    /// concurrency schemes, on the x25e-sata preset in paced mode.
    ///
    /// Example: csd repro fd-tree --out repro/fd-tree
    FdTree(fd_tree::ReproFdArgs),
    /// Batch-io paper §8: its key-value store on the block and batch interfaces under
    /// YCSB: Figures 11, 12, 13 and 15 and Tables 3 and 4 against the published figures.
    ///
    /// Example: csd repro batch-io --out repro/batch-io
    BatchIo(batch_io::ReproBatchIoArgs),
    /// FLIXR paper §6: Figures 9 (microbenchmarks), 10 (TPC-C, TPC-H) and 11 (storage
    /// traffic) under no index, host-side B+tree (and ideal), in-SSD B+tree, FLIXR-S and
    /// FLIXR-HS, plus the index-cache sweep, against the published figures.
    ///
    /// Example: csd repro flixr --out repro/flixr
    Flixr(flixr::ReproFlixrArgs),
    /// All five reproductions at their default scale, then one scoreboard (markdown,
    /// JSON and a plot): per headline the paper's value, csd's, the deviation and whether
    /// it is within 20%, explained by a measured parameter, or a miss.
    ///
    /// Example: csd repro all --out repro/all
    All(all::ReproAllArgs),
}

/// Runs the reproduction `c` asks for (`csd repro ...`).
pub fn repro_cmd(c: &ReproCmd) -> Result<(), ReproError> {
    match c {
        ReproCmd::ScanPaper(a) => scan_paper::run(a).map(drop),
        ReproCmd::SmartSsd(a) => smart_ssd::run(a).map(drop),
        ReproCmd::FdTree(a) => fd_tree::repro_fd_cmd(a).map(drop),
        ReproCmd::BatchIo(a) => batch_io::repro_batch_io(a).map(drop),
        ReproCmd::Flixr(a) => flixr::repro_flixr(a).map(drop),
        ReproCmd::All(a) => all::run(a).map(drop),
    }
}

/// A device in memory with a SQL session over it, on which tables are loaded and
/// queried (through DataFusion, like `csd query`).
pub struct Bed {
    session: SqlSession,
}

impl Bed {
    /// A fresh in-memory device of `cfg` whose scans place their commands in modeled time
    /// by `time_model` (calendars, or the event core: `csd_host::ScanOptions::time_model`).
    pub fn new(cfg: DeviceConfig, time_model: TimeModel) -> Result<Bed, ReproError> {
        let nand = csd_nand::Nand::new_in_memory(cfg.clone())?;
        let ftl = Ftl::format(nand, FtlConfig::default())?;
        let client = Client::new(NvmeDevice::new(ftl))?;
        // Fine polling: the reproductions measure the device, not a lazy host.
        let mut settings = ScanSettings::new(Choice::Fixed(Strategy::Ihp));
        settings.options.poll_min_us = 5.0;
        settings.options.poll_max_us = 200.0;
        settings.options.time_model = time_model;
        // An empty device: no catalog read yet (each run reads it, as before).
        let session =
            SqlSession::with_tables(client, cfg, settings, Vec::new()).map_err(sql_error)?;
        Ok(Bed { session })
    }

    pub fn load_synthetic(
        &mut self,
        name: &str,
        columns: usize,
        rows: u64,
        seed: u64,
        layout: Layout,
    ) -> Result<(TableInfo, SyntheticSpec), ReproError> {
        self.load_synthetic_padded(name, columns, rows, seed, layout, 0)
    }

    /// [`Bed::load_synthetic`] with `pad` bytes more per row: a `CHAR(pad)` column `pad`
    /// after `c1 .. cN` (none when `pad` is 0), standing for another engine's per-row
    /// overhead ([`PaddedRows`]).
    pub fn load_synthetic_padded(
        &mut self,
        name: &str,
        columns: usize,
        rows: u64,
        seed: u64,
        layout: Layout,
        pad: u16,
    ) -> Result<(TableInfo, SyntheticSpec), ReproError> {
        let spec = SyntheticSpec::new(columns, rows, seed)
            .map_err(|e| ReproError::Usage(e.to_string()))?;
        let g = SyntheticGenerator::new(spec).map_err(|e| ReproError::Usage(e.to_string()))?;
        let dev = &mut *self.session.device().lock();
        let r = if pad == 0 {
            Catalog::load(dev, name, g, layout, &mut |_| {})?
        } else {
            Catalog::load(dev, name, PaddedRows::new(g, pad)?, layout, &mut |_| {})?
        };
        Ok((r.table, spec))
    }

    pub fn load_lineitem(
        &mut self,
        name: &str,
        sf: f64,
        layout: Layout,
    ) -> Result<TableInfo, ReproError> {
        let g = TpchGenerator::new(TpchTable::LineItem, sf)
            .map_err(|e| ReproError::Usage(e.to_string()))?;
        Ok(Catalog::load(
            &mut *self.session.device().lock(),
            name,
            g,
            layout,
            &mut |_| {},
        )?
        .table)
    }

    /// Runs `sql` (one scan of `table`) with strategy `s`; the scan's modeled report.
    /// The catalog is read before every run, as a host that just loaded would.
    pub fn run(
        &mut self,
        table: &TableInfo,
        sql: &str,
        s: Strategy,
    ) -> Result<QueryReport, ReproError> {
        self.session.reload().map_err(sql_error)?;
        let runs = self
            .session
            .run_strategies(sql, &[Choice::Fixed(s)])
            .map_err(sql_error)?;
        let mut scans = runs.into_iter().flat_map(|(_, a)| a.scans);
        match (scans.next(), scans.next()) {
            (Some(scan), None) if csd_host::same_name(&scan.table, &table.name) => Ok(scan.report),
            _ => Err(ReproError::Nvme(format!(
                "`{sql}` did not run as one scan of {}",
                table.name
            ))),
        }
    }
}

/// A progress bar over `total` runs.
pub fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
    let pb = report::progress_bar(Some(total), "runs");
    pb.set_message(what.to_string());
    pb
}

/// A preset with `--set`-style overrides.
pub fn preset(name: &str, set: &[String]) -> Result<DeviceConfig, ReproError> {
    Ok(DeviceConfig::from_toml_with_overrides(
        DeviceConfig::preset_toml(name)?,
        set,
    )?)
}

/// A plot that could not be written, as the CLI's error.
pub fn plot_err(e: csd_plot::PlotError) -> ReproError {
    ReproError::Usage(format!("writing a plot: {e}"))
}

/// A markdown table.
pub fn md_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

/// The side-by-side table as markdown ([`csd_paper::markdown`]).
pub fn checks_md(checks: &[Comparison]) -> String {
    csd_paper::markdown(checks)
}

/// The side-by-side table on the terminal.
pub fn print_checks(checks: &[Comparison]) {
    let mut t = report::table(&csd_paper::HEADER[..5]);
    for c in checks {
        let r = c.row();
        t.add_row(r[..5].to_vec());
    }
    println!("{t}");
}

/// Writes one report file into the report directory (never over a file csd did not
/// write); its path.
pub fn write_report(dir: &Path, name: &str, text: &str) -> Result<PathBuf, ReproError> {
    std::fs::create_dir_all(dir).map_err(|e| ReproError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    let path = dir.join(name);
    util::guard_output(&path, &["md", "json", "csv", "txt"])?;
    std::fs::write(&path, text).map_err(|e| ReproError::Io {
        path: path.clone(),
        source: e,
    })?;
    Ok(path)
}

/// Bytes of memory available now (`MemAvailable` of `/proc/meminfo`); `None` where the
/// system does not say.
pub fn available_memory() -> Option<f64> {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("MemAvailable:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|kib| kib * 1024.0)
    })
}

/// Refuse a run whose in-memory devices would not fit in the memory available now.
pub fn check_memory(need_bytes: f64, flag: &str, value: f64) -> Result<(), ReproError> {
    let avail_kib = available_memory().map(|b| b / 1024.0);
    match avail_kib {
        Some(kib) if need_bytes > kib * 1024.0 => Err(ReproError::Usage(format!(
            "{flag} {value} needs about {:.1} GB of memory for its in-memory devices; {:.1} GB \
             are available: use {flag} {:.4} or less",
            need_bytes / 1e9,
            kib * 1024.0 / 1e9,
            value * kib * 1024.0 / need_bytes
        ))),
        _ => Ok(()),
    }
}

/// A row source with `pad` more bytes per row: every row of `inner`, then a `CHAR(pad)`
/// column `pad` of spaces. Stands for the per-row overhead of another engine's row format
/// (the smart-ssd paper's SQL Server pages hold fewer rows than csd's), so a run can be
/// repeated at the paper's page density without touching the table's data.
pub struct PaddedRows<S> {
    inner: S,
    schema: csd_table::Schema,
    pad: usize,
}

impl<S: csd_table::datagen::RowSource> PaddedRows<S> {
    /// `inner`'s rows with `pad` (> 0) bytes more each.
    pub fn new(inner: S, pad: u16) -> Result<PaddedRows<S>, ReproError> {
        let mut cols = inner.schema().columns().to_vec();
        cols.push(csd_table::schema::Column::new(
            "pad",
            csd_table::schema::ColumnType::Char(pad),
        ));
        let schema = csd_table::Schema::new(inner.schema().name(), cols)
            .map_err(|e| ReproError::Usage(format!("padded schema: {e}")))?;
        Ok(PaddedRows {
            inner,
            schema,
            pad: pad as usize,
        })
    }
}

impl<S: csd_table::datagen::RowSource> csd_table::datagen::RowSource for PaddedRows<S> {
    fn schema(&self) -> &csd_table::Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        if !self.inner.next_row(row) {
            return false;
        }
        row.resize(row.len() + self.pad, b' ');
        true
    }

    fn remaining_rows(&self) -> Option<u64> {
        self.inner.remaining_rows()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_table::datagen::RowSource;

    #[test]
    fn padded_rows_keep_the_values_and_add_a_char_column_of_spaces() {
        let spec = SyntheticSpec::new(4, 50, 9).expect("spec");
        let plain: Vec<Vec<u8>> = SyntheticGenerator::new(spec).expect("gen").collect();
        let mut p = PaddedRows::new(SyntheticGenerator::new(spec).expect("gen"), 7).expect("pad");
        assert_eq!(p.schema().columns().len(), 5);
        assert_eq!(p.schema().columns()[4].name, "pad");
        assert_eq!(p.schema().row_width(), 16 + 7);
        assert_eq!(p.remaining_rows(), Some(50));
        let mut row = Vec::new();
        for want in &plain {
            assert!(p.next_row(&mut row));
            assert_eq!(&row[..16], &want[..]);
            assert_eq!(&row[16..], b"       ");
        }
        assert!(!p.next_row(&mut row));
    }
}

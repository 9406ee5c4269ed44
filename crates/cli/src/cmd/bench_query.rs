//! `csd bench query`: the emulator's scan speed — TPC-H lineitem loaded into an
//! in-memory device per layout, then a query per strategy, run as `csd query` runs it
//! (DataFusion plans, device scans run the scan paper's strategies, §4). Load time is
//! excluded from the figures. Its modeled figures are golden (`bench/golden/bench-q*.json`).

use super::query::{RunOpts, expand_tpch, report_json, run_sql, sql_error};
use crate::args::JsonFlag;
use crate::args::LayoutArg;
use crate::{CliError, ConfigSource, report};
use clap::Args;
use csd_device::NvmeDevice;
use csd_ftl::FtlConfig;
use csd_host::Client;
use csd_sql::SqlSession;
use csd_table::datagen::{TpchGenerator, TpchTable};
use serde_json::json;

/// `csd bench query`: load TPC-H lineitem into an in-memory device and time a query per
/// strategy and layout.
#[derive(Args)]
pub(crate) struct BenchQueryArgs {
    /// TPC-H scale factor of lineitem.
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// Layouts, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [LayoutArg::Nsm, LayoutArg::Pax])]
    layouts: Vec<LayoutArg>,
    /// The query (`q1`, `q6` or SQL over `lineitem`).
    #[arg(long, default_value = "q6")]
    query: String,
    #[command(flatten)]
    run: RunOpts,
    #[command(flatten)]
    src: ConfigSource,
    #[command(flatten)]
    report: JsonFlag,
}

/// `csd bench query`.
pub(crate) fn bench_query_cmd(a: &BenchQueryArgs) -> Result<(), CliError> {
    let cfg = a.src.load()?;
    let sql = expand_tpch(&a.query);
    let mut all = Vec::new();
    for layout in a.layouts.iter().map(|l| l.layout()) {
        let nand = csd_nand::Nand::new_in_memory(cfg.clone())?;
        let ftl = csd_ftl::Ftl::format(nand, FtlConfig::default())?;
        let mut client = Client::new(NvmeDevice::new(ftl))?;
        let g = TpchGenerator::new(TpchTable::LineItem, a.sf)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        let total = TpchTable::LineItem.row_count(a.sf, 1, 1);
        let load =
            crate::cmd::tables::load_one(&mut client, "lineitem", g, layout, total, a.report.json)?;
        if !a.report.json {
            eprintln!(
                "loaded lineitem {layout}: {} rows, {} in {:.1} s wall",
                load.table.rows,
                report::bytes(load.table.bytes()),
                load.wall_s
            );
        }
        let mut session =
            SqlSession::new(client, cfg.clone(), a.run.settings()).map_err(sql_error)?;
        for (_, answer) in run_sql(&mut session, sql, &a.run.strategy)? {
            all.extend(answer.reports());
        }
    }
    let cmd = crate::reproduce::line();
    if a.report.json {
        println!(
            "{}",
            json!({"device": cfg.name, "sf": a.sf, "runs": all.iter().map(report_json).collect::<Vec<_>>(), "command": cmd})
        );
        return Ok(());
    }
    let mut t = report::table(&[
        "strategy",
        "layout",
        "wall s",
        "table MB/s (wall)",
        "rows/s (wall)",
        "modeled s",
        "bottleneck",
    ]);
    for r in &all {
        t.add_row(vec![
            r.strategy.name().to_string(),
            r.layout.to_string(),
            format!("{:.3}", r.wall_s),
            format!("{:.0}", r.wall_bytes_per_s() / 1e6),
            format!("{:.3e}", r.wall_rows_per_s()),
            format!("{:.4}", r.modeled_s()),
            r.bottleneck_name().to_string(),
        ]);
    }
    println!("{t}");
    println!("device: {} ({})", cfg.name, report::geometry_line(&cfg));
    println!("reproduce: {cmd}");
    Ok(())
}

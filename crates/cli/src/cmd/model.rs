//! `csd model scan`: the in-storage-scan paper's analytic model (§4, equations 1-9)
//! evaluated for a device config — modeled time, records/s, MB/s, the per-term
//! breakdown and the bottleneck of a table scan by in-host processing (ihp), the
//! embedded CPU (cpu-isp) and per-channel hardware (hw-isp). The model lives in
//! csd-model; it is shown beside the simulation, never used in its place.

use crate::args::JsonFlag;
use crate::{CliError, ConfigSource, report};
use clap::{Args, Subcommand, ValueEnum};
use csd_model::{Composition, ScanModel, ScanParams, Strategy};
use csd_sim::DeviceConfig;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// `csd model` subcommands.
#[derive(Subcommand)]
pub(crate) enum ModelCmd {
    /// The in-storage-scan paper's model (§4, eqs. 1-9): modeled time, records/s, MB/s, the
    /// per-term breakdown and the bottleneck of a table scan by in-host processing (ihp),
    /// the embedded CPU (cpu-isp) and per-channel hardware (hw-isp).
    ///
    /// Example: csd model scan --preset isp-ch16 --set channel.rate_mt_s=400
    Scan(ModelScanArgs),
}

/// Options of `csd model scan`.
#[derive(Args)]
pub(crate) struct ModelScanArgs {
    #[command(flatten)]
    src: ConfigSource,
    /// Fraction of records that match, in [0, 1] (Table 2: 0.013).
    #[arg(long, default_value_t = csd_model::scan::DEFAULT_SELECTIVITY, allow_negative_numbers = true)]
    selectivity: f64,
    /// Records in the table (default: TPC-H lineitem at scale factor 1).
    #[arg(long, default_value_t = csd_model::scan::DEFAULT_RECORDS)]
    records: u64,
    /// Bytes per record (§5.2.2: 128).
    #[arg(long, default_value_t = csd_model::scan::DEFAULT_RECORD_BYTES)]
    record_bytes: u64,
    /// How the phases combine: pipelined (slowest phase; default) or summed (as printed).
    #[arg(long, value_enum, default_value_t)]
    composition: CompositionArg,
    #[command(flatten)]
    report: JsonFlag,
}

/// `csd model scan`: evaluate the scan paper's equations 1-9 and print them.
pub(crate) fn scan(a: &ModelScanArgs) -> Result<(), CliError> {
    let cfg = a.src.load()?;
    let mut p = ScanParams::from_device(&cfg);
    p.selectivity = a.selectivity;
    p.records = a.records;
    p.record_bytes = a.record_bytes;
    p.composition = a.composition.into();
    let m = ScanModel::evaluate(&p)?;
    let cmd = crate::reproduce::line();
    if a.report.json {
        println!("{:#}", scan_json(&cfg, a, &m, &cmd));
    } else {
        print_scan(&cfg, a, &p, &m, &cmd);
    }
    Ok(())
}

/// `csd model scan --json`: the parameters, and per strategy (keys prefixed with the
/// strategy's key, `ihp_time_s` …) time, rates, per-term breakdown and bottleneck.
#[derive(Serialize)]
struct ModelFigures<'a> {
    device: &'a str,
    overrides: &'a [String],
    table_bytes: u64,
    #[serde(flatten)]
    params: &'a ScanParams,
    #[serde(flatten)]
    per_strategy: BTreeMap<String, Value>,
    command: &'a str,
}

/// The model's figures as one JSON object ([`ModelFigures`]).
fn scan_json(cfg: &DeviceConfig, a: &ModelScanArgs, m: &ScanModel, cmd: &str) -> Value {
    let mut per_strategy = BTreeMap::new();
    for r in m.results() {
        let k = r.strategy.key();
        let mut put = |name: &str, v: Value| per_strategy.insert(format!("{k}_{name}"), v);
        put("time_s", r.time_s.into());
        put("records_per_s", r.records_per_s.into());
        put("table_mb_per_s", r.table_mb_per_s.into());
        for (term, v) in r.breakdown.terms() {
            put(term, v.into());
        }
        put("bottleneck", r.bottleneck.key().into());
    }
    for over in [Strategy::Ihp, Strategy::CpuIsp] {
        per_strategy.insert(
            format!("hw_isp_speedup_over_{}", over.key()),
            m.speedup(Strategy::HwIsp, over).into(),
        );
    }
    let figures = ModelFigures {
        device: &cfg.name,
        overrides: &a.src.set,
        table_bytes: m.table_bytes,
        params: &m.params,
        per_strategy,
        command: cmd,
    };
    serde_json::to_value(figures).unwrap_or(Value::Null)
}

/// A modeled time in the unit that suits it (`-` for a term that does not apply).
fn time(s: f64) -> String {
    if s == 0.0 {
        "-".to_string()
    } else if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else if s >= 1e-6 {
        format!("{:.3} us", s * 1e6)
    } else {
        format!("{:.1} ns", s * 1e9)
    }
}

/// The model's figures as a table, one column per strategy, then the parameters.
fn print_scan(cfg: &DeviceConfig, a: &ModelScanArgs, p: &ScanParams, m: &ScanModel, cmd: &str) {
    println!(
        "scan model (in-storage-scan paper §4, eqs. 1-9, {}) on {}: {} records x {} B = {:.1} MB ({}), selectivity {}",
        p.composition,
        cfg.name,
        p.records,
        p.record_bytes,
        m.table_bytes as f64 / 1e6,
        report::bytes(m.table_bytes),
        p.selectivity
    );
    let rs = m.results();
    let mut t = report::table(&["", "ihp (eq. 9)", "cpu-isp (eq. 6)", "hw-isp (eq. 8)"]);
    let mut row = |name: &str, f: &dyn Fn(&csd_model::StrategyResult) -> String| {
        let mut cells = vec![name.to_string()];
        cells.extend(rs.iter().map(|r| f(r)));
        t.add_row(cells);
    };
    row("modeled time", &|r| time(r.time_s));
    row("records/s", &|r| format!("{:.3e}", r.records_per_s));
    row("table MB/s", &|r| format!("{:.1}", r.table_mb_per_s));
    row("flash array (eq. 1)", &|r| time(r.breakdown.flash_array_s));
    row("flash->DRAM (eq. 2/7)", &|r| {
        time(r.breakdown.flash_to_dram_s)
    });
    row("embedded CPU (eq. 5)", &|r| {
        time(r.breakdown.embedded_cpu_s)
    });
    row("DRAM->host (eq. 3)", &|r| time(r.breakdown.dram_to_host_s));
    row("host CPU (eq. 9)", &|r| time(r.breakdown.host_cpu_s));
    row("bottleneck", &|r| r.bottleneck.to_string());
    row("hw-isp faster by", &|r| {
        format!("{:.2}x", r.time_s / m.hw_isp.time_s)
    });
    println!("{t}");
    println!(
        "parameters: N_ch {}, N_way {}, tR {:.1} us, page {} B, channel {:.0} MB/s, DRAM {:.0} MB/s, host link {:.0} MB/s; \
         t_comp {} + σ·t_result {} cycles = {:.2} cycles/record at {:.0} MHz (CPU {} MHz / bus ratio {}); host {:.4} us/record",
        p.channels,
        p.ways,
        p.t_r_s * 1e6,
        p.page_bytes,
        p.channel_bytes_per_s / 1e6,
        p.dram_bytes_per_s / 1e6,
        p.host_link_bytes_per_s / 1e6,
        p.t_comp_cycles,
        p.t_result_cycles,
        p.cycles_per_record(),
        p.cycle_hz / 1e6,
        cfg.cpu.clock_mhz,
        csd_model::scan::CPU_TO_BUS_CLOCK_RATIO,
        p.t_ihp_scan_cpu_s * 1e6
    );
    println!(
        "device: {}  overrides: {}  deterministic (analytic, no seed)",
        cfg.name,
        if a.src.set.is_empty() {
            "none".to_string()
        } else {
            a.src.set.join(", ")
        }
    );
    println!("reproduce: {cmd}");
}

/// `--composition`: how the model combines the phases of a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum CompositionArg {
    /// Phases overlap chunk by chunk; the slowest one sets the time.
    #[default]
    Pipelined,
    /// Phases run one after the other, as the paper prints the equations.
    Summed,
}

impl From<CompositionArg> for Composition {
    fn from(c: CompositionArg) -> Composition {
        match c {
            CompositionArg::Pipelined => Composition::Pipelined,
            CompositionArg::Summed => Composition::Summed,
        }
    }
}

impl std::fmt::Display for CompositionArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(Composition::from(*self).key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composition_names_are_the_model_crates() {
        for c in CompositionArg::value_variants() {
            assert_eq!(Composition::parse(&c.to_string()), Some((*c).into()));
        }
    }

    #[test]
    fn times_pick_their_unit() {
        assert_eq!(time(0.0), "-");
        assert_eq!(time(2.5), "2.500 s");
        assert_eq!(time(2.5e-3), "2.500 ms");
        assert_eq!(time(2.5e-6), "2.500 us");
        assert_eq!(time(2.5e-9), "2.5 ns");
    }
}

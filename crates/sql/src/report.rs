//! A device scan's modeled report as plain data, the one shape every front end prints
//! (`csd query --json`, `csd bench query --json`, the Python package's
//! `SqlResult.reports`): snake_case names with their units, figures copied from the
//! scan's [`QueryReport`] counters. The types derive `Serialize`; the edges turn them
//! into JSON (`serde_json::to_value`), so this crate needs no JSON library.
//!
//! Fields that only mean something for some scans are left out rather than printed as
//! zero: the FLIXR index figures (`index`, `pages_skipped`, `index_cache_misses`) only
//! when the scan used an index, `setup_s` only when the scan had setup commands.

use crate::exec::ScanRecord;
use csd_host::{QueryReport, StageName, Strategy};
use csd_table::page::Layout;
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;

/// One pipeline stage of a scan (a [`csd_host::Stage`]) in seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageFigures {
    /// Busy seconds of the stage per member.
    pub busy_s: f64,
    /// Busy time over the modeled time.
    pub utilization: f64,
    /// Resources of the stage (dies, channels, cores...).
    pub members: usize,
}

/// A device scan's modeled report (the keys of `csd query --json`'s scans).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScanReport {
    /// The strategy that ran (serialized as its CLI name: `ihp`, `cpu-isp`, `hw-isp`).
    #[serde(serialize_with = "strategy_name")]
    pub strategy: Strategy,
    /// The table scanned.
    pub table: String,
    /// The table's page layout (`nsm` or `pax`).
    pub layout: Layout,
    /// Table pages scanned.
    pub pages: u64,
    /// Table bytes scanned (pages × page bytes).
    pub table_bytes: u64,
    /// Rows in the table.
    pub rows: u64,
    /// Rows the predicate selected.
    pub rows_selected: u64,
    /// Result rows the scan returned.
    pub result_rows: u64,
    /// Modeled seconds.
    pub modeled_time_s: f64,
    /// Table bytes per modeled second.
    pub modeled_bytes_per_s: f64,
    /// The stage with the highest utilization (serialized as its name, `flash_array` …;
    /// `none` for a report without stages).
    #[serde(serialize_with = "bottleneck_name")]
    pub bottleneck: Option<StageName>,
    /// Busy time per stage, by stage name.
    pub stages: BTreeMap<&'static str, StageFigures>,
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
    /// Commands the host issued.
    pub commands: u64,
    /// Joules, device and host.
    pub energy_j: f64,
    /// Joules of the device.
    pub device_energy_j: f64,
    /// Joules of the host.
    pub host_energy_j: f64,
    /// Joules per energy component (`nand_j`, `channel_j`...).
    pub energy_components_j: BTreeMap<&'static str, f64>,
    /// Wall-clock seconds of the run (the emulator's speed).
    pub wall_s: f64,
    /// Rows the emulator processed per wall-clock second.
    pub wall_rows_per_s: f64,
    /// Table bytes the emulator scanned per wall-clock second.
    pub wall_table_bytes_per_s: f64,
    /// The FLIXR index and rule the scan used; absent when it read every page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    /// Table pages the index ruled out (with `index` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages_skipped: Option<u64>,
    /// The device's index-cache misses (with `index` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_cache_misses: Option<u64>,
    /// Modeled seconds of the scan's setup commands (a FLIXR join's), included in
    /// `modeled_time_s`; absent for a scan without any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup_s: Option<f64>,
    /// What the event core did when the scan ran on it (`--time-model events`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_core: Option<csd_sim::events::Counters>,
}

/// A strategy as the CLI names it (`cpu-isp`; [`Strategy::name`]).
fn strategy_name<S: Serializer>(strategy: &Strategy, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(strategy.name())
}

/// A bottleneck as [`QueryReport::bottleneck_name`] names it (`none` without stages).
fn bottleneck_name<S: Serializer>(stage: &Option<StageName>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(stage.map_or("none", StageName::name))
}

impl From<&QueryReport> for ScanReport {
    fn from(r: &QueryReport) -> ScanReport {
        let indexed = r.index.is_some();
        ScanReport {
            strategy: r.strategy,
            table: r.table.clone(),
            layout: r.layout,
            pages: r.pages,
            table_bytes: r.table_bytes,
            rows: r.rows,
            rows_selected: r.work.rows_selected,
            result_rows: r.result_rows,
            modeled_time_s: r.modeled_s(),
            modeled_bytes_per_s: r.modeled_bytes_per_s(),
            bottleneck: r.bottleneck,
            stages: r
                .stages
                .iter()
                .map(|s| {
                    (
                        s.name.name(),
                        StageFigures {
                            busy_s: s.busy_ns as f64 / 1e9,
                            utilization: s.utilization,
                            members: s.members,
                        },
                    )
                })
                .collect(),
            flash_reads: r.flash_reads,
            channel_bytes: r.channel_bytes,
            dram_bytes: r.dram_bytes,
            host_link_bytes: r.host_link_bytes,
            device_cpu_cycles: r.device_cpu_cycles,
            host_cpu_cycles: r.host_cpu_cycles,
            commands: r.commands,
            energy_j: r.energy.total_j(),
            device_energy_j: r.energy.device_j(),
            host_energy_j: r.energy.host_total_j(),
            energy_components_j: r.energy.components().into_iter().collect(),
            wall_s: r.wall_s,
            wall_rows_per_s: r.wall_rows_per_s(),
            wall_table_bytes_per_s: r.wall_bytes_per_s(),
            index: r.index.clone(),
            pages_skipped: indexed.then_some(r.pages_skipped),
            index_cache_misses: indexed.then_some(r.index_misses),
            setup_s: (r.setup_ns > 0).then(|| r.setup_ns as f64 / 1e9),
            event_core: r.event_core,
        }
    }
}

/// A scan of a statement: its report with what the device ran and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScanRecordReport {
    /// The scan's modeled report (its keys appear at the top level).
    #[serde(flatten)]
    pub report: ScanReport,
    /// The device program in words: filter, columns, aggregation.
    pub device_program: String,
    /// Why that strategy (`--strategy auto`) or "chosen by the user".
    pub why: String,
}

impl From<&ScanRecord> for ScanRecordReport {
    fn from(s: &ScanRecord) -> ScanRecordReport {
        ScanRecordReport {
            report: ScanReport::from(&s.report),
            device_program: s.program.clone(),
            why: s.why.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_host::scan::Stage;
    use csd_sim::energy::EnergyReport;
    use serde_json::{Value, json};

    fn report() -> QueryReport {
        QueryReport {
            strategy: Strategy::Ihp,
            table: "lineitem".into(),
            layout: Layout::Pax,
            pages: 10,
            table_bytes: 40960,
            rows: 1000,
            work: Default::default(),
            result_rows: 3,
            modeled_ns: 2_000_000,
            stages: vec![Stage {
                name: StageName::FlashArray,
                members: 8,
                busy_ns: 1_000_000,
                utilization: 0.5,
            }],
            bottleneck: Some(StageName::FlashArray),
            flash_reads: 10,
            channel_bytes: 40960,
            dram_bytes: 40960,
            host_link_bytes: 40960,
            device_cpu_cycles: 0,
            host_cpu_cycles: 123,
            commands: 10,
            energy: EnergyReport::default(),
            wall_s: 0.5,
            index: None,
            pages_skipped: 0,
            index_misses: 0,
            event_core: None,
            setup_ns: 0,
        }
    }

    #[test]
    fn optional_figures_are_left_out() {
        let v = serde_json::to_value(ScanReport::from(&report())).unwrap();
        for k in ["index", "pages_skipped", "index_cache_misses", "setup_s"] {
            assert!(v.get(k).is_none(), "{k} printed without an index/setup");
        }
        assert_eq!(v["modeled_time_s"], json!(0.002));
        assert_eq!(v["wall_rows_per_s"], json!(2000.0));
        assert_eq!(
            v["stages"]["flash_array"],
            json!({"busy_s": 0.001, "utilization": 0.5, "members": 8})
        );
        assert_eq!(v["energy_components_j"].as_object().unwrap().len(), 7);
    }

    #[test]
    fn strategy_and_bottleneck_print_as_their_names() {
        let mut r = report();
        let v = serde_json::to_value(ScanReport::from(&r)).unwrap();
        assert_eq!(v["strategy"], json!("ihp"));
        assert_eq!(v["bottleneck"], json!("flash_array"));
        for stage in StageName::ALL {
            r.bottleneck = Some(stage);
            let v = serde_json::to_value(ScanReport::from(&r)).unwrap();
            assert_eq!(v["bottleneck"], json!(stage.name()));
        }
        r.strategy = Strategy::CpuIsp;
        r.stages.clear();
        r.bottleneck = None;
        let v = serde_json::to_value(ScanReport::from(&r)).unwrap();
        assert_eq!(
            v["strategy"],
            json!("cpu-isp"),
            "the CLI name, not the snake_case key"
        );
        assert_eq!(v["bottleneck"], json!("none"));
        assert_eq!(v["bottleneck"], json!(r.bottleneck_name()));
    }

    #[test]
    fn index_and_setup_figures_appear_with_an_index() {
        let mut r = report();
        r.index = Some("range(l_shipdate)".into());
        r.pages_skipped = 4;
        r.index_misses = 2;
        r.setup_ns = 5_000;
        let v = serde_json::to_value(ScanReport::from(&r)).unwrap();
        assert_eq!(v["index"], json!("range(l_shipdate)"));
        assert_eq!(v["pages_skipped"], json!(4));
        assert_eq!(v["index_cache_misses"], json!(2));
        assert_eq!(v["setup_s"], json!(5e-6));
    }

    #[test]
    fn a_record_adds_program_and_why_at_the_top_level() {
        let rec = ScanRecord {
            table: "lineitem".into(),
            strategy: Strategy::Ihp,
            why: "chosen by the user".into(),
            program: "filter l_quantity < 24".into(),
            report: report(),
        };
        let v = serde_json::to_value(ScanRecordReport::from(&rec)).unwrap();
        let Value::Object(m) = &v else {
            panic!("not an object: {v}")
        };
        assert_eq!(m["why"], json!("chosen by the user"));
        assert_eq!(m["device_program"], json!("filter l_quantity < 24"));
        assert_eq!(m["strategy"], json!("ihp"));
        assert!(m.get("report").is_none(), "the report is flattened");
    }
}

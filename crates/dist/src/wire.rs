//! What crosses the network as plain data, besides what DataFusion's own protobuf codec
//! carries: a device scan's description ([`WireMember`]) inside the plan, and its scan
//! records ([`WireRecord`]) back in the task's metrics. JSON through serde: small (a few
//! hundred bytes per scan), versioned by [`WIRE_VERSION`], readable in a packet capture.

use csd_host::{QueryReport, StageName, Strategy};
use csd_sim::EnergyReport;
use csd_sim::events::{Counters, TimeModel};
use csd_sql::{Choice, ScanRecord, ScanSettings};
use csd_table::page::Layout;
use serde::{Deserialize, Serialize};

use crate::DistError;

/// Version of the wire format and of the scan semantics: a worker refuses a plan made
/// by a coordinator of another version (and says which).
pub const WIRE_VERSION: &str = concat!("csd-", env!("CARGO_PKG_VERSION"), "/wire-5");

/// How a scan runs ([`ScanSettings`] as plain data).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireSettings {
    /// `ihp`, `cpu-isp`, `hw-isp` or `auto`.
    pub choice: String,
    /// IHP read commands in flight.
    pub queue_depth: usize,
    /// ISP first poll interval, µs.
    pub poll_min_us: f64,
    /// ISP largest poll interval, µs.
    pub poll_max_us: f64,
    /// Use a FLIXR index when the filter constrains its column.
    pub use_index: bool,
    /// Push partial aggregations into the device.
    pub aggregate_pushdown: bool,
    /// `calendar` or `events` (how the scan's commands are placed in modeled time).
    pub time_model: String,
}

impl WireSettings {
    /// The settings as plain data (a FLIXR join read is never shipped: each side of such
    /// a join must be on one device, which a distributed plan does not promise).
    pub fn of(s: &ScanSettings) -> WireSettings {
        WireSettings {
            choice: s.choice.name().to_string(),
            queue_depth: s.options.queue_depth,
            poll_min_us: s.options.poll_min_us,
            poll_max_us: s.options.poll_max_us,
            use_index: s.options.use_index,
            aggregate_pushdown: s.aggregate_pushdown,
            time_model: s.options.time_model.name().to_string(),
        }
    }

    /// The settings again.
    pub fn settings(&self) -> Result<ScanSettings, DistError> {
        let choice = Choice::parse(&self.choice)
            .ok_or_else(|| DistError::Wire(format!("unknown strategy `{}`", self.choice)))?;
        let mut s = ScanSettings::new(choice);
        s.options.queue_depth = self.queue_depth;
        s.options.poll_min_us = self.poll_min_us;
        s.options.poll_max_us = self.poll_max_us;
        s.options.use_index = self.use_index;
        s.aggregate_pushdown = self.aggregate_pushdown;
        s.options.time_model = TimeModel::parse(&self.time_model)
            .ok_or_else(|| DistError::Wire(format!("unknown time model `{}`", self.time_model)))?;
        Ok(s)
    }
}

/// Who a member scan is: the array device, where it runs and what the coordinator's
/// manifest says the device holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberDesc {
    /// The array's id (its directory name), for messages.
    pub array: String,
    /// The device's image file name (the array's `devices[index]`).
    pub device: String,
    /// The device's index in the array.
    pub index: usize,
    /// The worker serving the device (the coordinator routed the scan to it).
    pub worker: String,
    /// The table.
    pub table: String,
    /// Rows of the table on the device, as the manifest says.
    pub rows: u64,
    /// Pages of the table on the device, as the manifest says.
    pub pages: u64,
    /// Layout, as the manifest says.
    pub layout: String,
}

/// One device's scan in a plan: which device, what the coordinator believes it holds,
/// and what the table provider was asked for (the same device program is built from it
/// next to the device).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireMember {
    /// [`WIRE_VERSION`] of the coordinator.
    pub version: String,
    /// The device and what it holds.
    #[serde(flatten)]
    pub member: MemberDesc,
    /// Columns asked for (`None`: all).
    pub projection: Option<Vec<usize>>,
    /// The filters, DataFusion's protobuf `LogicalExprList`.
    pub filters: Vec<u8>,
    /// The limit.
    pub limit: Option<usize>,
    /// How the scan runs.
    pub settings: WireSettings,
    /// For a pushed partial aggregation: the partial aggregate plan it replaced (over a
    /// row scan of this member), DataFusion's protobuf physical plan.
    pub partial: Option<Vec<u8>>,
    /// The output schema, `name: type` per field, checked after the rebuild.
    pub schema: Vec<String>,
}

/// What one member scan (one device's task) sends back in its task's metrics: the
/// device, the worker, the output that crossed the network and the scans' records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireScan {
    /// The array's device index.
    pub device: usize,
    /// The worker that ran it.
    pub worker: String,
    /// Bytes of the output batches sent to the coordinator (Arrow buffers).
    pub output_bytes: u64,
    /// Rows of the output batches.
    pub output_rows: u64,
    /// The device scans' records.
    pub records: Vec<WireRecord>,
}

/// A scan record as plain data (what [`ScanRecord`] holds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireRecord {
    /// The table.
    pub table: String,
    /// The strategy that ran.
    pub strategy: String,
    /// Why.
    pub why: String,
    /// The device program in words.
    pub program: String,
    /// The modeled report.
    pub report: WireReport,
}

/// One stage of a report's breakdown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireStage {
    /// Stage name.
    pub name: String,
    /// Resources of the stage.
    pub members: usize,
    /// Busy time per member, ns.
    pub busy_ns: u64,
    /// Utilization.
    pub utilization: f64,
}

/// [`QueryReport`] as plain data, every field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct WireReport {
    pub strategy: String,
    pub table: String,
    pub layout: String,
    pub pages: u64,
    pub table_bytes: u64,
    pub rows: u64,
    pub work: [u64; 12],
    pub result_rows: u64,
    pub modeled_ns: u64,
    pub stages: Vec<WireStage>,
    pub bottleneck: String,
    pub flash_reads: u64,
    pub channel_bytes: u64,
    pub dram_bytes: u64,
    pub host_link_bytes: u64,
    pub device_cpu_cycles: u64,
    pub host_cpu_cycles: u64,
    pub commands: u64,
    pub energy: [f64; 7],
    pub wall_s: f64,
    pub index: Option<String>,
    pub pages_skipped: u64,
    pub index_misses: u64,
    pub setup_ns: u64,
    pub event_core: Option<Counters>,
}

/// The bottleneck of a report without stages, on the wire.
const NO_STAGE: &str = "none";

fn stage_name(s: &str) -> Result<StageName, DistError> {
    StageName::parse(s).ok_or_else(|| DistError::Wire(format!("unknown report stage `{s}`")))
}

fn layout(s: &str) -> Result<Layout, DistError> {
    s.parse()
        .map_err(|_| DistError::Wire(format!("unknown page layout `{s}`")))
}

fn strategy(s: &str) -> Result<Strategy, DistError> {
    Strategy::parse(s).ok_or_else(|| DistError::Wire(format!("unknown strategy `{s}`")))
}

impl WireReport {
    /// The report as plain data.
    pub fn of(r: &QueryReport) -> WireReport {
        let w = &r.work;
        let e = &r.energy;
        WireReport {
            strategy: r.strategy.name().to_string(),
            table: r.table.clone(),
            layout: r.layout.to_string(),
            pages: r.pages,
            table_bytes: r.table_bytes,
            rows: r.rows,
            work: [
                w.pages,
                w.records_examined,
                w.predicates_evaluated,
                w.bytes_touched,
                w.values_touched,
                w.values_computed,
                w.rows_selected,
                w.results_written,
                w.result_bytes,
                w.agg_updates,
                w.var_bytes_compared,
                w.selected_var_bytes,
            ],
            result_rows: r.result_rows,
            modeled_ns: r.modeled_ns,
            stages: r
                .stages
                .iter()
                .map(|s| WireStage {
                    name: s.name.to_string(),
                    members: s.members,
                    busy_ns: s.busy_ns,
                    utilization: s.utilization,
                })
                .collect(),
            bottleneck: r.bottleneck.map_or(NO_STAGE, StageName::name).to_string(),
            flash_reads: r.flash_reads,
            channel_bytes: r.channel_bytes,
            dram_bytes: r.dram_bytes,
            host_link_bytes: r.host_link_bytes,
            device_cpu_cycles: r.device_cpu_cycles,
            host_cpu_cycles: r.host_cpu_cycles,
            commands: r.commands,
            energy: [
                e.nand_j,
                e.channel_j,
                e.dram_j,
                e.embedded_cpu_j,
                e.controller_idle_j,
                e.host_link_j,
                e.host_j,
            ],
            wall_s: r.wall_s,
            index: r.index.clone(),
            pages_skipped: r.pages_skipped,
            index_misses: r.index_misses,
            setup_ns: r.setup_ns,
            event_core: r.event_core,
        }
    }

    /// The report again.
    pub fn report(&self) -> Result<QueryReport, DistError> {
        let w = &self.work;
        let e = &self.energy;
        let work = csd_query::WorkCounters {
            pages: w[0],
            records_examined: w[1],
            predicates_evaluated: w[2],
            bytes_touched: w[3],
            values_touched: w[4],
            values_computed: w[5],
            rows_selected: w[6],
            results_written: w[7],
            result_bytes: w[8],
            agg_updates: w[9],
            var_bytes_compared: w[10],
            selected_var_bytes: w[11],
        };
        let stages = self
            .stages
            .iter()
            .map(|s| {
                Ok(csd_host::scan::Stage {
                    name: stage_name(&s.name)?,
                    members: s.members,
                    busy_ns: s.busy_ns,
                    utilization: s.utilization,
                })
            })
            .collect::<Result<Vec<_>, DistError>>()?;
        Ok(QueryReport {
            strategy: strategy(&self.strategy)?,
            table: self.table.clone(),
            layout: layout(&self.layout)?,
            pages: self.pages,
            table_bytes: self.table_bytes,
            rows: self.rows,
            work,
            result_rows: self.result_rows,
            modeled_ns: self.modeled_ns,
            stages,
            bottleneck: match self.bottleneck.as_str() {
                NO_STAGE => None,
                s => Some(stage_name(s)?),
            },
            flash_reads: self.flash_reads,
            channel_bytes: self.channel_bytes,
            dram_bytes: self.dram_bytes,
            host_link_bytes: self.host_link_bytes,
            device_cpu_cycles: self.device_cpu_cycles,
            host_cpu_cycles: self.host_cpu_cycles,
            commands: self.commands,
            energy: EnergyReport {
                nand_j: e[0],
                channel_j: e[1],
                dram_j: e[2],
                embedded_cpu_j: e[3],
                controller_idle_j: e[4],
                host_link_j: e[5],
                host_j: e[6],
            },
            wall_s: self.wall_s,
            index: self.index.clone(),
            pages_skipped: self.pages_skipped,
            index_misses: self.index_misses,
            event_core: self.event_core,
            setup_ns: self.setup_ns,
        })
    }
}

impl WireRecord {
    /// `r` as plain data.
    pub fn of(r: &ScanRecord) -> WireRecord {
        WireRecord {
            table: r.table.clone(),
            strategy: r.strategy.name().to_string(),
            why: r.why.clone(),
            program: r.program.clone(),
            report: WireReport::of(&r.report),
        }
    }

    /// The scan record again.
    pub fn record(&self) -> Result<ScanRecord, DistError> {
        Ok(ScanRecord {
            table: self.table.clone(),
            strategy: strategy(&self.strategy)?,
            why: self.why.clone(),
            program: self.program.clone(),
            report: self.report.report()?,
        })
    }
}

/// One column of a table being loaded ([`csd_table::schema::Column`] as plain data: its
/// type by the catalog's tag and parameter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireColumn {
    /// Column name.
    pub name: String,
    /// [`csd_table::schema::ColumnType::tag`].
    pub tag: u8,
    /// [`csd_table::schema::ColumnType::param`].
    pub param: u16,
    /// May hold NULL.
    pub nullable: bool,
    /// A TIMESTAMP column's time zone.
    pub tz: Option<String>,
}

/// A load of one device's stripe (the `FlightDescriptor` command of a `DoPut`): which
/// device, which table, its layout and schema. The rows follow as Arrow batches of one
/// binary column (each value one row image).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireLoad {
    /// [`WIRE_VERSION`] of the coordinator.
    pub version: String,
    /// The array's id, for messages.
    pub array: String,
    /// The device's image file name.
    pub device: String,
    /// The device's index in the array.
    pub index: usize,
    /// The table.
    pub table: String,
    /// `nsm` or `pax`.
    pub layout: String,
    /// The schema's name.
    pub schema_name: String,
    /// The columns.
    pub columns: Vec<WireColumn>,
    /// The schema's fingerprint, checked after the rebuild.
    pub fingerprint: u32,
}

impl WireLoad {
    /// The columns of `schema` as plain data.
    pub fn columns_of(schema: &csd_table::schema::Schema) -> Vec<WireColumn> {
        schema
            .columns()
            .iter()
            .map(|c| WireColumn {
                name: c.name.clone(),
                tag: c.ty.tag(),
                param: c.ty.param(),
                nullable: c.nullable,
                tz: c.tz.clone(),
            })
            .collect()
    }

    /// The schema again (refused when a type is unknown or the fingerprint differs).
    pub fn schema(&self) -> Result<csd_table::schema::Schema, DistError> {
        use csd_table::schema::{Column, ColumnType, Schema};
        let columns = self
            .columns
            .iter()
            .map(|c| {
                let ty = ColumnType::from_tag(c.tag, c.param).ok_or_else(|| {
                    DistError::Wire(format!(
                        "column {}: unknown type tag {} (param {})",
                        c.name, c.tag, c.param
                    ))
                })?;
                Ok(Column::new(c.name.clone(), ty)
                    .with_nullable(c.nullable)
                    .with_tz(c.tz.clone()))
            })
            .collect::<Result<Vec<_>, DistError>>()?;
        let s = Schema::new(self.schema_name.clone(), columns)
            .map_err(|e| DistError::Wire(format!("schema of {}: {e}", self.table)))?;
        if s.fingerprint() != self.fingerprint {
            return Err(DistError::Wire(format!(
                "schema of {}: fingerprint {:#x} after decoding, {:#x} sent",
                self.table,
                s.fingerprint(),
                self.fingerprint
            )));
        }
        Ok(s)
    }
}

/// The coordinator's word in a load stream, after the descriptor (`app_metadata` of a
/// `FlightData` without a body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadControl {
    /// Every row was sent: write the stripe (under its staging name) and say prepared.
    End,
    /// Every device prepared: publish the stripe under the table's name.
    Commit,
    /// Another device failed: drop the staging table.
    Abort,
}

/// The worker's word in a load stream (`app_metadata` of a `PutResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadReply {
    /// The device is open read-write for the load; its page size deals the rows.
    Ready {
        /// Bytes of a table page on the device.
        page_bytes: u32,
    },
    /// The stripe is durable under the staging name; the old table is untouched.
    Prepared {
        /// Rows of the stripe.
        rows: u64,
        /// Pages of the stripe.
        pages: u64,
        /// First LBA of the stripe's extent.
        first_lba: u64,
        /// Modeled seconds of the device's load.
        modeled_s: f64,
        /// Wall seconds of the device's load.
        wall_s: f64,
    },
    /// The stripe is published under the table's name.
    Committed {
        /// Rows and pages of the table it replaced, if any.
        replaced: Option<(u64, u64)>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a worker runs is what the coordinator asked for: every setting (the time
    /// model included) survives the wire; an unknown one is refused with its name.
    #[test]
    fn settings_cross_the_wire_whole() {
        let mut s = ScanSettings::new(Choice::Fixed(Strategy::HwIsp));
        s.options.queue_depth = 7;
        s.options.poll_min_us = 3.0;
        s.options.poll_max_us = 90.0;
        s.options.use_index = false;
        s.options.time_model = TimeModel::Events;
        s.aggregate_pushdown = false;
        let text = serde_json::to_string(&WireSettings::of(&s)).expect("encode");
        let back: WireSettings = serde_json::from_str(&text).expect("decode");
        assert_eq!(back.settings().expect("settings"), s);
        let bad = WireSettings {
            time_model: "fcfs".into(),
            ..back
        };
        let e = bad.settings().expect_err("unknown time model");
        assert!(e.to_string().contains("fcfs"), "{e}");
    }
}

//! The same tables held in host memory as Arrow batches and queried by DataFusion with
//! the session's configuration: the engine's own floor for a query, without a device.
//! `csd bench tpch --compare datafusion` runs it beside csd, so the difference between
//! the two columns is what storage emulation (page reads, the device program, the
//! conversion of pages into Arrow arrays) costs in wall time.
//!
//! Choices: every table is read once through the device with `SELECT *` (so the rows
//! are exactly the device's); its batches are dealt round-robin into as many
//! partitions as the session has threads, so DataFusion scans them in parallel as it
//! does a device table. Each table's scans report the row count and the distinct
//! values the device catalog holds ([`csd_host::TableInfo::distinct`]), as a device
//! scan does, so both sessions plan alike (the same join sides): the difference is the
//! emulation, not a plan.

use crate::exec::{only_child, recompute};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::{MemTable, TableType};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::{
    ChildStats, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions, SendableRecordBatchStream, Statistics, StatisticsArgs,
};
use datafusion::prelude::SessionContext;

use crate::runtime::{FilteringScan, RuntimeFilters};
use crate::{Answer, SqlError, SqlSession, execute, new_context, query_error};

/// A DataFusion session over in-memory copies of a device session's tables.
pub struct MemorySession {
    ctx: SessionContext,
    runtime: tokio::runtime::Runtime,
    tables: Vec<String>,
}

impl std::fmt::Debug for MemorySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemorySession(tables {:?})", self.tables)
    }
}

impl MemorySession {
    /// Reads every table of `session` (one full scan each, through the device) into
    /// memory and registers it under the same name, in a context with `threads`
    /// partitions.
    pub fn snapshot(session: &SqlSession, threads: usize) -> Result<MemorySession, SqlError> {
        let threads = threads.max(1);
        let (ctx, runtime) = new_context(threads)?;
        for name in session.tables() {
            let ans = session.run(&format!("SELECT * FROM \"{name}\""))?;
            let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new(); threads];
            for (i, b) in ans.batches.into_iter().enumerate() {
                parts[i % threads].push(b);
            }
            let inner = MemTable::try_new(ans.schema, parts).map_err(|e| query_error(e, &[]))?;
            let distinct = session
                .catalog()
                .iter()
                .find(|t| csd_host::same_name(&t.name, name))
                .and_then(|t| t.distinct.clone());
            let table = StatsTable { inner, distinct };
            ctx.register_table(name.as_str(), Arc::new(table))
                .map_err(|e| query_error(e, &[]))?;
        }
        Ok(MemorySession {
            ctx,
            runtime,
            tables: session.tables().to_vec(),
        })
    }

    /// Plans and runs `sql` over the in-memory tables (no device scans).
    pub fn run(&self, sql: &str) -> Result<Answer, SqlError> {
        execute(&self.ctx, &self.runtime, sql, &self.tables)
    }
}

/// A memory table whose scans also report its columns' distinct values.
#[derive(Debug)]
struct StatsTable {
    inner: MemTable,
    /// Distinct values per column (schema order), as the device catalog has them.
    distinct: Option<Vec<u64>>,
}

#[async_trait]
impl TableProvider for StatsTable {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = self.inner.scan(state, projection, filters, limit).await?;
        let Some(d) = &self.distinct else {
            return Ok(input);
        };
        let distinct = match projection {
            Some(p) => p.iter().map(|&c| d.get(c).copied()).collect(),
            None => d.iter().copied().map(Some).collect(),
        };
        Ok(Arc::new(WithDistinct {
            input,
            distinct,
            runtime_filters: Vec::new(),
        }))
    }
}

/// A memory scan with its columns' distinct values added to its statistics, which
/// applies the dynamic filters of the joins and top-K sorts above it as a device scan
/// does ([`crate::exec`]'s runtime filters), so both sessions run the same plans.
#[derive(Debug)]
struct WithDistinct {
    input: Arc<dyn ExecutionPlan>,
    /// Distinct values per output column, where known.
    distinct: Vec<Option<u64>>,
    runtime_filters: Vec<Arc<dyn PhysicalExpr>>,
}

impl DisplayAs for WithDistinct {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "WithDistinct")?;
        for rf in &self.runtime_filters {
            write!(f, ", runtime filter {rf}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for WithDistinct {
    fn name(&self) -> &'static str {
        "WithDistinct"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        datafusion::physical_plan::apply_expression_roots(&self.runtime_filters, f)
    }

    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        Ok(self.take_dynamic_filters(phase, child_pushdown_result, true))
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(WithDistinct {
            input: only_child(children, "WithDistinct")?,
            distinct: self.distinct.clone(),
            runtime_filters: self.runtime_filters.clone(),
        }))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(children, recompute())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let filters = RuntimeFilters::new(self.runtime_filters.clone(), None);
        Ok(filters.wrap(self.input.execute(partition, context)?))
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let Some(st) = input_stats.first() else {
            return Ok(Arc::new(Statistics::new_unknown(&self.input.schema())));
        };
        let mut st = Statistics::clone(st);
        let rows = st.num_rows.get_value().copied();
        for (cs, d) in st.column_statistics.iter_mut().zip(&self.distinct) {
            if let (Some(d), Some(rows)) = (d, rows) {
                let d = usize::try_from(*d).unwrap_or(usize::MAX).min(rows);
                cs.distinct_count = Precision::Inexact(d);
            }
        }
        Ok(Arc::new(st))
    }
}

impl FilteringScan for WithDistinct {
    fn runtime_filters(&self) -> &[Arc<dyn PhysicalExpr>] {
        &self.runtime_filters
    }

    fn with_runtime_filters(&self, filters: Vec<Arc<dyn PhysicalExpr>>) -> Arc<dyn ExecutionPlan> {
        Arc::new(WithDistinct {
            input: self.input.clone(),
            distinct: self.distinct.clone(),
            runtime_filters: filters,
        })
    }
}

/// `node` as a memory scan that applies runtime filters, if it is one.
pub(crate) fn as_filtering_scan(node: &Arc<dyn ExecutionPlan>) -> Option<&dyn FilteringScan> {
    node.downcast_ref::<WithDistinct>()
        .map(|s| s as &dyn FilteringScan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ScanSettings;
    use csd_device::NvmeDevice;
    use csd_ftl::{Ftl, FtlConfig};
    use csd_host::{Catalog, Client};
    use csd_nand::Nand;
    use csd_sim::DeviceConfig;
    use csd_table::Layout;
    use csd_table::datagen::{TpchGenerator, TpchTable};

    #[test]
    fn memory_tables_answer_as_the_device_does() {
        let cfg = DeviceConfig::preset("tiny").expect("preset");
        let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
        let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
        let mut c = Client::new(NvmeDevice::new(ftl)).expect("client");
        for t in [TpchTable::Nation, TpchTable::Region] {
            let g = TpchGenerator::new(t, 0.01).expect("generator");
            Catalog::load(&mut c, t.name(), g, Layout::Pax, &mut |_| {}).expect("load");
        }
        let s = SqlSession::new(c, cfg, ScanSettings::new(crate::Choice::Auto)).expect("session");
        let m = MemorySession::snapshot(&s, 2).expect("snapshot");
        let q = "SELECT r_name, count(*) FROM nation JOIN region ON n_regionkey = r_regionkey \
                 GROUP BY r_name ORDER BY r_name";
        let dev = s.run(q).expect("device").rows().expect("rows");
        let mem = m.run(q).expect("memory");
        assert!(mem.scans.is_empty(), "no device scan in the memory session");
        assert_eq!(mem.rows().expect("rows"), dev);
        assert_eq!(dev.len(), 5);
        // The memory scans report the distinct values the device's load measured.
        m.run("SET datafusion.explain.show_statistics = true")
            .expect("set");
        let plan = m
            .run("EXPLAIN SELECT n_nationkey FROM nation")
            .expect("explain");
        let text = format!("{:?}", plan.rows().expect("rows"));
        assert!(text.contains("Distinct=Inexact(25)"), "{text}");
        // The join's dynamic filter reached the memory scan of its probe side and came
        // off again, as on a device scan: the rows go straight to that join.
        let plan = m.run(&format!("EXPLAIN {q}")).expect("explain");
        let text = format!("{:?}", plan.rows().expect("rows"));
        assert!(text.contains("WithDistinct"), "{text}");
        assert!(!text.contains("runtime filter"), "{text}");
        let err = m.run("SELECT * FROM nope").expect_err("unknown table");
        assert!(err.to_string().contains("nation"), "{err}");
    }
}

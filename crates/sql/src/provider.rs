//! [`DeviceTable`]: a DataFusion `TableProvider` over one table of the device catalog.
//!
//! The schema comes from the catalog ([`crate::schema`]). DataFusion offers each
//! conjunct of a query's `WHERE` to [`TableProvider::supports_filters_pushdown`]: a
//! conjunct the device evaluates exactly ([`crate::translate`]) is `Exact` and becomes
//! part of the device program (DataFusion then drops its own filter); any other is
//! `Unsupported` and DataFusion filters the scan's output. The projection DataFusion
//! asks for is the device program's output, so only those columns cross the host link
//! (with PAX, the device reads only their minipages' bytes, smart-ssd §4.1.1). A limit
//! DataFusion pushes (no filter left above the scan) ends the scan's output early.

use std::sync::Arc;

use async_trait::async_trait;
use csd_host::TableInfo;
use csd_query::build;
use csd_query::plan::{Expr as DevExpr, Plan};
use datafusion::arrow::datatypes::{Schema as ArrowSchema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::DFSchema;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::TableType;
use datafusion::datasource::sink::DataSinkExec;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;

use crate::dml::{DeviceSink, SinkOp};

use crate::device::{Device, ScanSettings};
use crate::exec::{DeviceScanExec, ScanLog, ScanOutput};
use crate::schema::arrow_schema;
use crate::translate;

/// The environment variable that turns off (`off`) the row estimates of range filters
/// from the columns' measured bounds ([`csd_host::TableInfo::bounds`]), to measure what
/// they change; `on` (the default when unset) keeps them.
pub const RANGE_SWITCH: &str = "CSD_RANGE_ESTIMATES";

/// One device table as a DataFusion table.
#[derive(Debug)]
pub struct DeviceTable {
    info: TableInfo,
    device: Arc<Device>,
    settings: ScanSettings,
    log: ScanLog,
    schema: SchemaRef,
}

impl DeviceTable {
    /// The table `info` on `device`, scanned with `settings`, logging to `log`.
    pub fn new(info: TableInfo, device: Arc<Device>, settings: ScanSettings, log: ScanLog) -> Self {
        let schema = arrow_schema(&info.schema);
        DeviceTable {
            info,
            device,
            settings,
            log,
            schema,
        }
    }

    /// The catalog entry.
    pub fn info(&self) -> &TableInfo {
        &self.info
    }

    fn sink(&self, op: SinkOp, rule: Option<csd_device::IndexRule>) -> DeviceSink {
        DeviceSink::new(
            self.info.name.clone(),
            self.info.schema.clone(),
            self.device.clone(),
            op,
            rule,
        )
    }

    /// The FLIXR rule the WHERE conjuncts `filters` imply on the table's indexed column
    /// (`None` without an index, with `csd.use_index = false`, or when they do not
    /// constrain it).
    fn rule(&self, filters: &[Expr]) -> Option<csd_device::IndexRule> {
        let ix = self.info.index.as_ref()?;
        if !self.settings.options.use_index {
            return None;
        }
        let col = self
            .info
            .schema
            .columns()
            .iter()
            .position(|c| csd_host::same_name(&c.name, &ix.column))?;
        let terms: Vec<DevExpr> = filters
            .iter()
            .filter_map(|f| translate::predicate(f, &self.info.schema).ok())
            .collect();
        if terms.is_empty() {
            return None;
        }
        csd_host::index::rule_for(Some(&build::and(terms)), col)
    }

    /// A plan running the DML sink `op` when executed (its input: no rows).
    fn dml_exec(&self, op: SinkOp, filters: &[Expr]) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(DataSinkExec::new(
            Arc::new(EmptyExec::new(self.schema.clone())),
            Arc::new(self.sink(op, self.rule(filters))),
            None,
        )))
    }

    /// WHERE conjuncts as physical expressions over the table's schema.
    fn physical(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> Result<Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>>> {
        let df = DFSchema::try_from(self.schema.clone())?;
        filters
            .into_iter()
            .map(|f| state.create_physical_expr(f, &df))
            .collect()
    }
}

/// The device program for a projection of `columns` (schema indices) under `filter`.
pub(crate) fn projection_program(
    info: &TableInfo,
    columns: &[usize],
    filter: Option<DevExpr>,
) -> Result<Plan> {
    Plan::projection(&info.name, &info.schema, columns, filter).ok_or_else(|| {
        DataFusionError::Plan(format!(
            "a column of {columns:?} is not in table {}",
            info.name
        ))
    })
}

#[async_trait]
impl TableProvider for DeviceTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| match translate::predicate(f, &self.info.schema) {
                Ok(_) => TableProviderFilterPushDown::Exact,
                Err(_) => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::Plan(format!(
                "INSERT {insert_op} into {}: device tables take plain INSERT INTO (append)",
                self.info.name
            )));
        }
        Ok(Arc::new(DataSinkExec::new(
            input,
            Arc::new(self.sink(SinkOp::Insert, None)),
            None,
        )))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let physical = self.physical(state, filters.clone())?;
        self.dml_exec(SinkOp::Delete { filters: physical }, &filters)
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let df = DFSchema::try_from(self.schema.clone())?;
        let mut set = Vec::with_capacity(assignments.len());
        for (name, e) in assignments {
            let c = self.schema.index_of(&name).map_err(|_| {
                DataFusionError::Plan(format!(
                    "UPDATE {}: no column {name}; columns: {}",
                    self.info.name,
                    self.schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            set.push((c, state.create_physical_expr(e, &df)?));
        }
        let physical = self.physical(state, filters.clone())?;
        self.dml_exec(
            SinkOp::Update {
                assignments: set,
                filters: physical,
            },
            &filters,
        )
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let columns: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.info.schema.len()).collect(),
        };
        let mut terms = Vec::with_capacity(filters.len());
        for f in filters {
            // Only filters answered `Exact` arrive here; a failure is a planning bug.
            terms.push(translate::predicate(f, &self.info.schema).map_err(|e| {
                DataFusionError::Plan(format!("filter {f} on {}: {e}", self.info.name))
            })?);
        }
        let filter = (!terms.is_empty()).then(|| build::and(terms));
        let filter_text = filter.as_ref().map(|f| {
            filters
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(" AND ")
                + if f.as_const().is_some() {
                    " (constant)"
                } else {
                    ""
                }
        });
        let program = projection_program(&self.info, &columns, filter)?;
        let schema = Arc::new(ArrowSchema::new(
            columns
                .iter()
                .map(|&c| self.schema.field(c).clone())
                .collect::<Vec<_>>(),
        ));
        let mut info = self.info.clone();
        let var = std::env::var(RANGE_SWITCH).ok();
        if !crate::keyset::switch(RANGE_SWITCH, var.as_deref())? {
            // Estimates as before bounds were measured (an A/B switch).
            info.bounds = None;
        }
        Ok(Arc::new(DeviceScanExec::new(
            info,
            self.device.clone(),
            self.settings,
            self.log.clone(),
            program,
            ScanOutput::Rows(columns),
            schema,
            limit,
            filter_text,
        )))
    }
}

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
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::TableType;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use crate::device::{Device, ScanSettings};
use crate::exec::{DeviceScanExec, ScanLog, ScanOutput};
use crate::schema::arrow_schema;
use crate::translate;

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
        Ok(Arc::new(DeviceScanExec::new(
            self.info.clone(),
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

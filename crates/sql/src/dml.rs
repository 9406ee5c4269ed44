//! INSERT, UPDATE and DELETE on device tables through DataFusion's DML planning (issue 13:
//! "a small row store ... reachable from SQL"; flixr §4.3, §6.1 Insert/Delete).
//!
//! DataFusion plans the statement (`LogicalPlan::Dml`) and hands it to the table's
//! provider ([`crate::DeviceTable`]): `insert_into` gets the plan of the rows (`VALUES`
//! or any `SELECT`, cast to the table's Arrow types), `delete_from` the WHERE conjuncts,
//! `update` the SET assignments and the WHERE conjuncts. Each becomes a `DataSinkExec`
//! whose sink ([`DeviceSink`]) runs when the plan executes (so `EXPLAIN` changes
//! nothing): INSERT collects its input, checks every value against the stored schema
//! and calls `csd_host::dml::insert`; DELETE and UPDATE call `csd_host::dml::modify`,
//! which hands the rows of each MDTS-sized chunk of pages over as one Arrow batch, on
//! which DataFusion's physical expressions evaluate the WHERE mask and the SET values.
//! The page changes, FLIXR index upkeep (WRITE_IDX), growth and crash safety are
//! `csd_host::dml`'s. The statement's modeled report goes to the device's DML log
//! ([`crate::Device::take_dml`]).
//!
//! Value checks (nothing is written when one fails; the error names the column): no
//! NULLs (device columns are never NULL), a decimal must fit `DECIMAL(18, scale)`
//! (Arrow casts without the lossy "safe" mode, so an overflow is an error, not a NULL),
//! a string must fit its `CHAR(n)` in bytes, INT32 and DATE values their 32 bits.
//! SQL three-valued logic: a row whose WHERE is NULL is not changed.

use std::sync::Arc;

use async_trait::async_trait;
use csd_host::HostError;
use csd_host::dml::{DmlOp, PageEdits};
use csd_table::Value;
use csd_table::schema::{ColumnType, Schema, trim_char};
use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Int32Array, Int64Array,
    RecordBatch, StringArray, StringBuilder,
};
use datafusion::arrow::compute::kernels::cast::{CastOptions, cast_with_options};
use datafusion::arrow::compute::kernels::zip::zip;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use futures::StreamExt;

use crate::device::Device;
use crate::schema::{DECIMAL_PRECISION, arrow_schema, arrow_type};

/// What a [`DeviceSink`] does with the statement.
#[derive(Debug)]
pub enum SinkOp {
    /// INSERT: the input's rows.
    Insert,
    /// DELETE the rows where every filter is true (all rows without filters).
    Delete {
        /// The WHERE conjuncts, as physical expressions over the table's schema.
        filters: Vec<Arc<dyn PhysicalExpr>>,
    },
    /// UPDATE: set columns (by index) to expressions on the rows where every filter is
    /// true.
    Update {
        /// `(column, value)` assignments.
        assignments: Vec<(usize, Arc<dyn PhysicalExpr>)>,
        /// The WHERE conjuncts.
        filters: Vec<Arc<dyn PhysicalExpr>>,
    },
}

/// The sink of a DML statement on one device table.
#[derive(Debug)]
pub struct DeviceSink {
    table: String,
    schema: Schema,
    arrow: SchemaRef,
    device: Arc<Device>,
    op: SinkOp,
    rule: Option<csd_device::IndexRule>,
}

impl DeviceSink {
    /// A sink changing `table` (stored schema `schema`) on `device`; DELETE and UPDATE
    /// read the pages under `rule` (READ_IDX) when the table has a FLIXR index and the
    /// WHERE constrains its column.
    pub fn new(
        table: String,
        schema: Schema,
        device: Arc<Device>,
        op: SinkOp,
        rule: Option<csd_device::IndexRule>,
    ) -> DeviceSink {
        let arrow = arrow_schema(&schema);
        DeviceSink {
            table,
            schema,
            arrow,
            device,
            op,
            rule,
        }
    }

    fn run(&self, batches: Vec<RecordBatch>) -> Result<u64> {
        let cfg = self.device.config.clone();
        let report = match &self.op {
            SinkOp::Insert => {
                let mut rows = Vec::new();
                for b in &batches {
                    rows.extend(batch_rows(&self.schema, b, "INSERT")?);
                }
                csd_host::dml::insert(&mut *self.device.lock(), &cfg, &self.table, &rows)
            }
            SinkOp::Delete { filters } => {
                let mut edit =
                    |pages: &[Vec<Vec<Value>>]| -> std::result::Result<PageEdits, HostError> {
                        self.edit_delete(pages, filters).map_err(host)
                    };
                csd_host::dml::modify(
                    &mut *self.device.lock(),
                    &cfg,
                    &self.table,
                    DmlOp::Delete,
                    self.rule.clone(),
                    &mut edit,
                )
            }
            SinkOp::Update {
                assignments,
                filters,
            } => {
                let mut edit =
                    |pages: &[Vec<Vec<Value>>]| -> std::result::Result<PageEdits, HostError> {
                        self.edit_update(pages, assignments, filters).map_err(host)
                    };
                csd_host::dml::modify(
                    &mut *self.device.lock(),
                    &cfg,
                    &self.table,
                    DmlOp::Update,
                    self.rule.clone(),
                    &mut edit,
                )
            }
        }
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let n = report.rows;
        self.device.push_dml(report);
        Ok(n)
    }

    /// The rows of a chunk of pages as one batch, and each row's page.
    fn chunk_batch(&self, pages: &[Vec<Vec<Value>>]) -> Result<(RecordBatch, Vec<usize>)> {
        let mut rows = Vec::new();
        let mut owner = Vec::new();
        for (i, p) in pages.iter().enumerate() {
            for r in p {
                rows.push(r.as_slice());
                owner.push(i);
            }
        }
        Ok((rows_batch(&self.schema, &self.arrow, &rows)?, owner))
    }

    fn edit_delete(
        &self,
        pages: &[Vec<Vec<Value>>],
        filters: &[Arc<dyn PhysicalExpr>],
    ) -> Result<PageEdits> {
        let (batch, owner) = self.chunk_batch(pages)?;
        let mask = mask(filters, &batch)?;
        let mut out: Vec<Option<Vec<Vec<Value>>>> = vec![None; pages.len()];
        let mut n = 0;
        for (i, &p) in owner.iter().enumerate() {
            if mask.value(i) {
                n += 1;
                if out[p].is_none() {
                    out[p] = Some(Vec::new());
                }
            }
        }
        // Pages that lost rows keep the others, in order.
        let mut at = 0;
        for (p, rows) in pages.iter().enumerate() {
            if let Some(kept) = out[p].as_mut() {
                for (k, r) in rows.iter().enumerate() {
                    if !mask.value(at + k) {
                        kept.push(r.clone());
                    }
                }
            }
            at += rows.len();
        }
        Ok((out, n))
    }

    fn edit_update(
        &self,
        pages: &[Vec<Vec<Value>>],
        assignments: &[(usize, Arc<dyn PhysicalExpr>)],
        filters: &[Arc<dyn PhysicalExpr>],
    ) -> Result<PageEdits> {
        let (batch, owner) = self.chunk_batch(pages)?;
        let mask = mask(filters, &batch)?;
        let n = mask.true_count() as u64;
        let mut out: Vec<Option<Vec<Vec<Value>>>> = vec![None; pages.len()];
        if n == 0 {
            return Ok((out, 0));
        }
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        for (c, expr) in assignments {
            let field = self.arrow.field(*c);
            // Evaluated on the rows that change only (no error from rows that stay).
            let v = expr
                .evaluate_selection(&batch, &mask)?
                .into_array(batch.num_rows())?;
            let v = cast_strict(&v, field.data_type(), field.name())?;
            let merged = zip(&mask, &v.as_ref(), &columns[*c].as_ref())?;
            columns[*c] = merged;
        }
        let updated = RecordBatch::try_new(self.arrow.clone(), columns)?;
        let rows = batch_rows(&self.schema, &updated, "UPDATE")?;
        let mut at = 0;
        for (p, page) in pages.iter().enumerate() {
            let changed = (at..at + page.len()).any(|i| mask.value(i));
            if changed {
                out[p] = Some(rows[at..at + page.len()].to_vec());
            }
            at += page.len();
        }
        debug_assert_eq!(at, owner.len());
        Ok((out, n))
    }
}

fn host(e: DataFusionError) -> HostError {
    HostError::Invalid(e.to_string())
}

/// Every filter true (NULL counts as false); all true without filters.
fn mask(filters: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<BooleanArray> {
    let n = batch.num_rows();
    let mut m = BooleanArray::from(vec![true; n]);
    for f in filters {
        let v = f.evaluate(batch)?.into_array(n)?;
        let b = v
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| DataFusionError::Plan(format!("WHERE term {f} is not boolean")))?;
        m = datafusion::arrow::compute::and(&m, b)?;
    }
    // NULL -> false.
    Ok(m.iter().map(|v| Some(v == Some(true))).collect())
}

/// `v` cast to `ty` without turning failures into NULLs; errors name `column`.
fn cast_strict(v: &ArrayRef, ty: &DataType, column: &str) -> Result<ArrayRef> {
    if v.data_type() == ty {
        return Ok(v.clone());
    }
    let opts = CastOptions {
        safe: false,
        ..Default::default()
    };
    cast_with_options(v, ty, &opts).map_err(|e| {
        DataFusionError::Plan(format!("column {column}: a value does not fit {ty}: {e}"))
    })
}

/// Rows of stored values as an Arrow batch of the table's schema.
pub fn rows_batch(schema: &Schema, arrow: &SchemaRef, rows: &[&[Value]]) -> Result<RecordBatch> {
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.len());
    if schema.is_extended() {
        // Tables with NULLs or the newer types: every value as it is, NULLs included.
        for (c, col) in schema.columns().iter().enumerate() {
            let vals: Vec<Option<&Value>> = rows.iter().map(|r| r.get(c)).collect();
            cols.push(crate::schema::values_array(col, &vals)?);
        }
        return Ok(RecordBatch::try_new(arrow.clone(), cols)?);
    }
    for (c, col) in schema.columns().iter().enumerate() {
        let num = |r: &&[Value]| r.get(c).and_then(Value::as_i64).unwrap_or(0);
        let a: ArrayRef = match col.ty {
            ColumnType::Int32 => Arc::new(Int32Array::from_iter_values(
                rows.iter().map(|r| num(r) as i32),
            )),
            ColumnType::Date => Arc::new(Date32Array::from_iter_values(
                rows.iter().map(|r| num(r) as i32),
            )),
            ColumnType::Int64 => Arc::new(Int64Array::from_iter_values(rows.iter().map(num))),
            ColumnType::Decimal { scale } => Arc::new(
                Decimal128Array::from_iter_values(rows.iter().map(|r| i128::from(num(r))))
                    .with_precision_and_scale(DECIMAL_PRECISION, scale as i8)?,
            ),
            ColumnType::Char(_) => {
                let mut b = StringBuilder::with_capacity(rows.len(), rows.len() * 8);
                for r in rows {
                    match r.get(c) {
                        Some(Value::Char(bytes)) => {
                            b.append_value(String::from_utf8_lossy(trim_char(bytes)))
                        }
                        _ => b.append_value(""),
                    }
                }
                Arc::new(b.finish())
            }
            other => {
                return Err(DataFusionError::NotImplemented(format!(
                    "changing rows of a table with a {other} column (column {})",
                    col.name
                )));
            }
        };
        cols.push(a);
    }
    Ok(RecordBatch::try_new(arrow.clone(), cols)?)
}

/// The rows of `batch` (columns in the table's order) as stored values, every value
/// checked against the stored column type; `what` names the statement in errors.
pub fn batch_rows(schema: &Schema, batch: &RecordBatch, what: &str) -> Result<Vec<Vec<Value>>> {
    let n = batch.num_rows();
    if batch.num_columns() != schema.len() {
        return Err(DataFusionError::Plan(format!(
            "{what} {}: {} values per row, the table has {} columns",
            schema.name(),
            batch.num_columns(),
            schema.len()
        )));
    }
    let mut rows: Vec<Vec<Value>> = (0..n).map(|_| Vec::with_capacity(schema.len())).collect();
    if schema.is_extended() {
        // Tables with NULLs or the newer types: NULL where the column allows it; the
        // schema checks widths and UTF-8 when the rows are encoded.
        for (c, col) in schema.columns().iter().enumerate() {
            let bad = |m: String| {
                DataFusionError::Plan(format!(
                    "{what} {}: column {}: {m}",
                    schema.name(),
                    col.name
                ))
            };
            let a = cast_strict(batch.column(c), &arrow_type(col.ty), &col.name)?;
            if !col.nullable && a.null_count() > 0 {
                return Err(bad(format!(
                    "NULL is not allowed (the column is NOT NULL); give a {} value",
                    col.ty
                )));
            }
            for (i, r) in rows.iter_mut().enumerate() {
                let v = crate::schema::array_value(col, &a, i)
                    .ok_or_else(|| bad(format!("a value does not fit {}", col.ty)))?;
                if let (ColumnType::Char(w), Value::Char(b)) = (col.ty, &v)
                    && b.len() > usize::from(w)
                {
                    return Err(bad(format!(
                        "a {}-byte value; CHAR({w}) holds at most {w}",
                        b.len()
                    )));
                }
                r.push(v);
            }
        }
        return Ok(rows);
    }
    for (c, col) in schema.columns().iter().enumerate() {
        let bad = |m: String| {
            DataFusionError::Plan(format!(
                "{what} {}: column {}: {m}",
                schema.name(),
                col.name
            ))
        };
        let a = cast_strict(batch.column(c), &arrow_type(col.ty), &col.name)?;
        if a.null_count() > 0 {
            return Err(bad(format!(
                "NULL is not allowed (device columns are NOT NULL); give a {} value",
                col.ty
            )));
        }
        match col.ty {
            ColumnType::Int32 | ColumnType::Date => {
                let v = a
                    .as_any()
                    .downcast_ref::<Int32Array>()
                    .map(|x| x.values().to_vec())
                    .or_else(|| {
                        a.as_any()
                            .downcast_ref::<Date32Array>()
                            .map(|x| x.values().to_vec())
                    })
                    .ok_or_else(|| bad(format!("expected {}", col.ty)))?;
                for (r, x) in rows.iter_mut().zip(v) {
                    r.push(if col.ty == ColumnType::Date {
                        Value::Date(x)
                    } else {
                        Value::Int32(x)
                    });
                }
            }
            ColumnType::Int64 => {
                let v = a
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| bad("expected INT64".into()))?;
                for (r, x) in rows.iter_mut().zip(v.values().iter()) {
                    r.push(Value::Int64(*x));
                }
            }
            ColumnType::Decimal { .. } => {
                let v = a
                    .as_any()
                    .downcast_ref::<Decimal128Array>()
                    .ok_or_else(|| bad(format!("expected {}", col.ty)))?;
                for (r, x) in rows.iter_mut().zip(v.values().iter()) {
                    let x = i64::try_from(*x)
                        .map_err(|_| bad(format!("{x} is out of range for {}", col.ty)))?;
                    r.push(Value::Decimal(x));
                }
            }
            ColumnType::Char(w) => {
                let v = a
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .ok_or_else(|| bad(format!("expected {}", col.ty)))?;
                for (r, s) in rows.iter_mut().zip(v.iter()) {
                    let s = s.unwrap_or("");
                    if s.len() > usize::from(w) {
                        return Err(bad(format!(
                            "'{s}' is {} bytes, CHAR({w}) holds at most {w}",
                            s.len()
                        )));
                    }
                    r.push(Value::Char(s.as_bytes().to_vec()));
                }
            }
            other => {
                return Err(DataFusionError::NotImplemented(format!(
                    "INSERT / UPDATE of a {other} column (column {})",
                    col.name
                )));
            }
        }
    }
    Ok(rows)
}

impl DisplayAs for DeviceSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = match self.op {
            SinkOp::Insert => "INSERT",
            SinkOp::Delete { .. } => "DELETE",
            SinkOp::Update { .. } => "UPDATE",
        };
        write!(f, "DeviceSink: {op} {}", self.table)
    }
}

#[async_trait]
impl DataSink for DeviceSink {
    fn metrics(&self) -> Option<MetricsSet> {
        None
    }

    /// The input's schema: the table's (DELETE and UPDATE get no input rows).
    fn schema(&self) -> &SchemaRef {
        &self.arrow
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let mut batches = Vec::new();
        while let Some(b) = data.next().await {
            batches.push(b?);
        }
        self.run(batches)
    }
}

/// Whether `e` is the device refusing a write because it was opened read-only (so the
/// statement was valid up to its first write, and nothing was written).
pub fn write_refused(e: &crate::SqlError) -> bool {
    let text = format!("{e:?}");
    text.contains("WriteProtected") || text.contains("ReadOnly")
}

/// DataFusion's refusal of a NULL in an INSERT's VALUES names the value's position
/// (`column3`); this names the table column too.
pub fn explain_null(
    e: crate::SqlError,
    sql: &str,
    catalog: &[csd_host::TableInfo],
) -> crate::SqlError {
    let text = e.to_string();
    if !text.contains("non-nullable but contains null") {
        return e;
    }
    let pos = text
        .split("Column 'column")
        .nth(1)
        .and_then(|r| r.split('\'').next())
        .and_then(|n| n.parse::<usize>().ok());
    let words: Vec<String> = sql
        .split(|c: char| c.is_whitespace() || c == '(')
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let table = words
        .iter()
        .position(|w| w.eq_ignore_ascii_case("into"))
        .and_then(|i| words.get(i + 1))
        .and_then(|n| catalog.iter().find(|t| csd_host::same_name(&t.name, n)));
    let column = match (table, pos) {
        (Some(t), Some(p)) => t
            .schema
            .columns()
            .get(p.saturating_sub(1))
            .map(|c| format!(" (column {} of {}, without a column list)", c.name, t.name)),
        _ => None,
    };
    crate::SqlError::Host(HostError::Invalid(format!(
        "INSERT: NULL is not allowed: device table columns are NOT NULL; value {}{} is NULL",
        pos.map_or("?".to_string(), |p| p.to_string()),
        column.unwrap_or_default()
    )))
}

/// DataFusion's refusal of a SET or VALUES value its column's type cannot hold (a cast
/// error while planning) names the value, not the column; this names the column too,
/// from the statement's `SET` list (`(column, value)` as parsed, [`crate::ddl::Dml`]).
pub fn explain_cast(e: crate::SqlError, assignments: &[(String, String)]) -> crate::SqlError {
    let text = e.to_string();
    let Some(value) = text
        .split("Can't cast value ")
        .nth(1)
        .and_then(|r| r.split(" to type").next())
    else {
        return e;
    };
    let column = assignments
        .iter()
        .find(|(_, v)| v.contains(value))
        .map(|(c, _)| c);
    match column {
        Some(c) => crate::SqlError::Host(HostError::Invalid(format!(
            "column {c}: the value {value} does not fit the column's type ({})",
            text.lines().last().unwrap_or_default()
        ))),
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_table::Column;

    fn schema() -> Schema {
        Schema::new(
            "t",
            vec![
                Column::new("k", ColumnType::Int32),
                Column::new("d", ColumnType::Decimal { scale: 2 }),
                Column::new("s", ColumnType::Char(3)),
                Column::new("day", ColumnType::Date),
                Column::new("b", ColumnType::Int64),
            ],
        )
        .unwrap()
    }

    #[test]
    fn rows_round_trip_through_arrow() {
        let s = schema();
        let a = arrow_schema(&s);
        let rows = [
            vec![
                Value::Int32(-3),
                Value::Decimal(1234),
                Value::Char(b"ab ".to_vec()),
                Value::Date(19000),
                Value::Int64(1 << 40),
            ],
            vec![
                Value::Int32(7),
                Value::Decimal(-5),
                Value::Char(b"xyz".to_vec()),
                Value::Date(0),
                Value::Int64(-1),
            ],
        ];
        let refs: Vec<&[Value]> = rows.iter().map(|r| r.as_slice()).collect();
        let b = rows_batch(&s, &a, &refs).unwrap();
        let back = batch_rows(&s, &b, "INSERT").unwrap();
        assert_eq!(back[1], rows[1]);
        // CHAR comes back without its padding; it encodes to the same bytes.
        assert_eq!(back[0][2], Value::Char(b"ab".to_vec()));
        assert_eq!(
            s.encode_row_vec(&back[0]).unwrap(),
            s.encode_row_vec(&rows[0]).unwrap()
        );
    }

    #[test]
    fn bad_values_name_their_column() {
        let s = Schema::new("t", vec![Column::new("s", ColumnType::Char(2))]).unwrap();
        let a = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
            datafusion::arrow::datatypes::Field::new("s", DataType::Utf8, true),
        ]));
        let long = RecordBatch::try_new(a.clone(), vec![Arc::new(StringArray::from(vec!["abc"]))])
            .unwrap();
        let e = batch_rows(&s, &long, "INSERT").unwrap_err().to_string();
        assert!(e.contains("column s") && e.contains("CHAR(2)"), "{e}");
        let null =
            RecordBatch::try_new(a, vec![Arc::new(StringArray::from(vec![None::<&str>]))]).unwrap();
        let e = batch_rows(&s, &null, "INSERT").unwrap_err().to_string();
        assert!(e.contains("NULL"), "{e}");
    }
}

//! Arrow types of device tables and the conversion of device results into Arrow arrays.
//!
//! Choices (issue 12): a scaled decimal `DECIMAL(s)` stored as an `i64` is
//! `Decimal128(18, s)` (18 digits is what every `i64` at any scale is guaranteed to
//! fit in as a decimal of that precision when the loader checked the value; TPC-H money
//! fits with room to spare); a `DATE` (days since 1970-01-01) is `Date32`; `CHAR(n)` is
//! a `Utf8` string without its blank padding (what a user of `VARCHAR` expects);
//! `INT32`/`INT64` keep their width. Columns are never NULL.

use std::sync::Arc;

use csd_query::ColumnData;
use csd_table::schema::{ColumnType, Schema, trim_char};
use datafusion::arrow::array::{
    ArrayRef, Date32Array, Decimal128Array, Int32Array, Int64Array, StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use datafusion::arrow::error::ArrowError;

/// Decimal precision of a stored scaled decimal (an `i64`).
pub const DECIMAL_PRECISION: u8 = 18;

/// The Arrow type of a stored column type.
pub fn arrow_type(ty: ColumnType) -> DataType {
    match ty {
        ColumnType::Int32 => DataType::Int32,
        ColumnType::Int64 => DataType::Int64,
        ColumnType::Date => DataType::Date32,
        ColumnType::Decimal { scale } => DataType::Decimal128(DECIMAL_PRECISION, scale as i8),
        ColumnType::Char(_) => DataType::Utf8,
    }
}

/// The Arrow schema of a device table (column names as stored, never NULL).
pub fn arrow_schema(schema: &Schema) -> SchemaRef {
    Arc::new(ArrowSchema::new(
        schema
            .columns()
            .iter()
            .map(|c| Field::new(c.name.clone(), arrow_type(c.ty), false))
            .collect::<Vec<_>>(),
    ))
}

/// One column of device output as an Arrow array of the stored column type `ty`.
pub fn column_array(ty: ColumnType, data: ColumnData<'_>) -> Result<ArrayRef, ArrowError> {
    Ok(match (ty, data) {
        (ColumnType::Int32, ColumnData::Num(v)) => Arc::new(Int32Array::from(
            v.iter()
                .map(|&x| i32::try_from(x))
                .collect::<Result<Vec<i32>, _>>()
                .map_err(|e| ArrowError::ComputeError(format!("INT32 value out of range: {e}")))?,
        )),
        (ColumnType::Int64, ColumnData::Num(v)) => Arc::new(Int64Array::from(v.to_vec())),
        (ColumnType::Date, ColumnData::Num(v)) => Arc::new(Date32Array::from(
            v.iter()
                .map(|&x| i32::try_from(x))
                .collect::<Result<Vec<i32>, _>>()
                .map_err(|e| ArrowError::ComputeError(format!("DATE value out of range: {e}")))?,
        )),
        (ColumnType::Decimal { scale }, ColumnData::Num(v)) => Arc::new(
            Decimal128Array::from_iter_values(v.iter().map(|&x| i128::from(x)))
                .with_precision_and_scale(DECIMAL_PRECISION, scale as i8)?,
        ),
        (ColumnType::Char(_), ColumnData::Char { width, bytes }) => {
            let n = bytes.len().checked_div(width).unwrap_or(0);
            let mut b = StringBuilder::with_capacity(n, bytes.len());
            for i in 0..n {
                let s = trim_char(&bytes[i * width..(i + 1) * width]);
                b.append_value(String::from_utf8_lossy(s));
            }
            Arc::new(b.finish())
        }
        (ty, _) => {
            return Err(ArrowError::ComputeError(format!(
                "device column of type {ty:?} came back in the wrong representation"
            )));
        }
    })
}

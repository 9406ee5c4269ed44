//! Arrow types of device tables and the conversion of device results into Arrow arrays.
//!
//! Choices (issue 12): a scaled decimal `DECIMAL(s)` stored as an `i64` is
//! `Decimal128(18, s)` (18 digits is what every `i64` at any scale is guaranteed to
//! fit in as a decimal of that precision when the loader checked the value; TPC-H money
//! fits with room to spare); a `DATE` (days since 1970-01-01) is `Date32`; `CHAR(n)` is
//! a `Utf8` string without its blank padding (what a user of `VARCHAR` expects);
//! `INT32`/`INT64` keep their width. The types of users' own tables map one to one
//! (BOOLEAN, INT8/16, FLOAT32/64, TIMESTAMP(µs) with its time zone, DECIMAL128(p, s),
//! VARCHAR as Utf8, VARBINARY as Binary), nullable where the column is.

use std::sync::Arc;

use csd_query::ColumnData;
use csd_table::schema::{Column, ColumnType, Schema, trim_char};
use datafusion::arrow::array::{
    ArrayRef, Date32Array, Decimal128Array, Int32Array, Int64Array, StringBuilder,
};
use datafusion::arrow::buffer::ScalarBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef, TimeUnit};
use datafusion::arrow::error::ArrowError;

/// Decimal precision of a stored scaled decimal (an `i64`).
pub const DECIMAL_PRECISION: u8 = 18;

/// The Arrow type of a stored column type (a TIMESTAMP without its column's time zone:
/// see [`arrow_field`]).
pub fn arrow_type(ty: ColumnType) -> DataType {
    match ty {
        ColumnType::Int32 => DataType::Int32,
        ColumnType::Int64 => DataType::Int64,
        ColumnType::Date => DataType::Date32,
        ColumnType::Decimal { scale } => DataType::Decimal128(DECIMAL_PRECISION, scale as i8),
        ColumnType::Char(_) => DataType::Utf8,
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Int8 => DataType::Int8,
        ColumnType::Int16 => DataType::Int16,
        ColumnType::Float32 => DataType::Float32,
        ColumnType::Float64 => DataType::Float64,
        ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        ColumnType::Decimal128 { precision, scale } => DataType::Decimal128(precision, scale as i8),
        ColumnType::Varchar => DataType::Utf8,
        ColumnType::Varbinary => DataType::Binary,
    }
}

/// The Arrow field of a stored column: its type (a TIMESTAMP with its time zone) and
/// whether it is nullable.
pub fn arrow_field(col: &Column) -> Field {
    let ty = match (col.ty, &col.tz) {
        (ColumnType::Timestamp, Some(tz)) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some(tz.as_str().into()))
        }
        (ty, _) => arrow_type(ty),
    };
    Field::new(col.name.clone(), ty, col.nullable)
}

/// The Arrow schema of a device table (column names as stored).
pub fn arrow_schema(schema: &Schema) -> SchemaRef {
    Arc::new(ArrowSchema::new(
        schema.columns().iter().map(arrow_field).collect::<Vec<_>>(),
    ))
}

/// One column of device output as an Arrow array of the stored column type `ty`.
pub fn column_array(ty: ColumnType, data: ColumnData<'_>) -> Result<ArrayRef, ArrowError> {
    column_array_of(ty, &[data])
}

/// One column of several device result chunks, in order, as one Arrow array of the
/// stored column type `ty`: one pass writing the array's buffer, with a range check
/// where the type narrows (`INT32` and `DATE` values travel as `i64`).
pub fn column_array_of(ty: ColumnType, parts: &[ColumnData<'_>]) -> Result<ArrayRef, ArrowError> {
    let nums = || {
        parts
            .iter()
            .map(|p| match p {
                ColumnData::Num(v) => Ok(*v),
                ColumnData::Char { .. } => Err(wrong_representation(ty)),
            })
            .collect::<Result<Vec<&[i64]>, ArrowError>>()
    };
    let narrow = |what: &str| -> Result<Vec<i32>, ArrowError> {
        let parts = nums()?;
        let mut out = Vec::with_capacity(parts.iter().map(|v| v.len()).sum());
        for v in parts {
            if let Some(x) = v.iter().find(|&&x| i32::try_from(x).is_err()) {
                return Err(ArrowError::ComputeError(format!(
                    "{what} value {x} out of range"
                )));
            }
            out.extend(v.iter().map(|&x| x as i32));
        }
        Ok(out)
    };
    Ok(match ty {
        ColumnType::Int32 => Arc::new(Int32Array::from(narrow("INT32")?)),
        ColumnType::Date => Arc::new(Date32Array::from(narrow("DATE")?)),
        ColumnType::Int64 => Arc::new(Int64Array::from(nums()?.concat())),
        ColumnType::Decimal { scale } => {
            let parts = nums()?;
            let mut out: Vec<i128> = Vec::with_capacity(parts.iter().map(|v| v.len()).sum());
            for v in parts {
                out.extend(v.iter().map(|&x| i128::from(x)));
            }
            Arc::new(
                Decimal128Array::new(ScalarBuffer::from(out), None)
                    .with_precision_and_scale(DECIMAL_PRECISION, scale as i8)?,
            )
        }
        ColumnType::Char(_) => {
            let (mut n, mut bytes_total) = (0, 0);
            for p in parts {
                if let ColumnData::Char { width, bytes } = p {
                    n += bytes.len().checked_div(*width).unwrap_or(0);
                    bytes_total += bytes.len();
                }
            }
            let mut b = StringBuilder::with_capacity(n, bytes_total);
            for p in parts {
                let ColumnData::Char { width, bytes } = p else {
                    return Err(wrong_representation(ty));
                };
                for v in bytes.chunks_exact((*width).max(1)) {
                    b.append_value(String::from_utf8_lossy(trim_char(v)));
                }
            }
            Arc::new(b.finish())
        }
        // A device program never outputs these (csd_query::DataType::of_column).
        other => {
            return Err(ArrowError::ComputeError(format!(
                "a device program does not output {other} columns"
            )));
        }
    })
}

fn wrong_representation(ty: ColumnType) -> ArrowError {
    ArrowError::ComputeError(format!(
        "device column of type {ty:?} came back in the wrong representation"
    ))
}

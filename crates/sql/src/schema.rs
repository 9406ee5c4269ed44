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
    ArrayRef, ArrowPrimitiveType, BinaryBuilder, BooleanArray, Date32Array, Decimal128Array,
    Int32Array, Int64Array, PrimitiveArray, StringBuilder,
};
use datafusion::arrow::buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef, TimeUnit};
use datafusion::arrow::datatypes::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, TimestampMicrosecondType,
};
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
    if parts.iter().any(|p| matches!(p, ColumnData::Stored { .. })) {
        return stored_array(ty, parts);
    }
    let nums = || {
        parts
            .iter()
            .map(|p| match p {
                ColumnData::Num(v) => Ok(*v),
                _ => Err(wrong_representation(ty)),
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
        // The newer types come back as stored columns (`stored_array`).
        other => {
            return Err(ArrowError::ComputeError(format!(
                "a {other} column came back without its stored representation"
            )));
        }
    })
}

/// Columns returned as stored (tables with NULLs or the newer types) as one Arrow array
/// of `ty` (a TIMESTAMP without its time zone: the caller sets it from the field).
fn stored_array(ty: ColumnType, parts: &[ColumnData<'_>]) -> Result<ArrayRef, ArrowError> {
    let mut valid: Vec<bool> = Vec::new();
    let mut fixed: Vec<u8> = Vec::new();
    let mut values: Vec<&[u8]> = Vec::new();
    for p in parts {
        let ColumnData::Stored {
            ty: t,
            valid: v,
            fixed: f,
            starts,
            heap,
        } = p
        else {
            return Err(wrong_representation(ty));
        };
        if *t != ty {
            return Err(wrong_representation(ty));
        }
        valid.extend_from_slice(v);
        fixed.extend_from_slice(f);
        if ty.is_variable() {
            for (i, &start) in starts.iter().enumerate() {
                let end = starts.get(i + 1).copied().unwrap_or(heap.len());
                values.push(
                    heap.get(start..end)
                        .ok_or_else(|| wrong_representation(ty))?,
                );
            }
        }
    }
    let n = valid.len();
    let nulls = valid
        .iter()
        .any(|v| !v)
        .then(|| NullBuffer::from(valid.clone()));
    let w = ty.width();
    if !ty.is_variable() && fixed.len() != n * w {
        return Err(wrong_representation(ty));
    }
    fn prim<T: ArrowPrimitiveType, const W: usize>(
        fixed: &[u8],
        nulls: Option<NullBuffer>,
        conv: impl Fn([u8; W]) -> T::Native,
    ) -> PrimitiveArray<T> {
        let vals: Vec<T::Native> = fixed
            .chunks_exact(W)
            .map(|c| {
                let mut a = [0u8; W];
                a.copy_from_slice(c);
                conv(a)
            })
            .collect();
        PrimitiveArray::<T>::new(ScalarBuffer::from(vals), nulls)
    }
    Ok(match ty {
        ColumnType::Bool => Arc::new(BooleanArray::new(
            BooleanBuffer::from_iter(fixed.iter().map(|&b| b != 0)),
            nulls,
        )),
        ColumnType::Int8 => Arc::new(prim::<Int8Type, 1>(&fixed, nulls, i8::from_le_bytes)),
        ColumnType::Int16 => Arc::new(prim::<Int16Type, 2>(&fixed, nulls, i16::from_le_bytes)),
        ColumnType::Int32 => Arc::new(prim::<Int32Type, 4>(&fixed, nulls, i32::from_le_bytes)),
        ColumnType::Int64 => Arc::new(prim::<Int64Type, 8>(&fixed, nulls, i64::from_le_bytes)),
        ColumnType::Date => Arc::new(prim::<Date32Type, 4>(&fixed, nulls, i32::from_le_bytes)),
        ColumnType::Float32 => Arc::new(prim::<Float32Type, 4>(&fixed, nulls, f32::from_le_bytes)),
        ColumnType::Float64 => Arc::new(prim::<Float64Type, 8>(&fixed, nulls, f64::from_le_bytes)),
        ColumnType::Timestamp => Arc::new(prim::<TimestampMicrosecondType, 8>(
            &fixed,
            nulls,
            i64::from_le_bytes,
        )),
        ColumnType::Decimal { scale } => Arc::new(
            prim::<Decimal128Type, 8>(&fixed, nulls, |b| i128::from(i64::from_le_bytes(b)))
                .with_precision_and_scale(DECIMAL_PRECISION, scale as i8)?,
        ),
        ColumnType::Decimal128 { precision, scale } => Arc::new(
            prim::<Decimal128Type, 16>(&fixed, nulls, i128::from_le_bytes)
                .with_precision_and_scale(precision, scale as i8)?,
        ),
        ColumnType::Char(_) => {
            let mut b = StringBuilder::with_capacity(n, fixed.len());
            for (i, v) in fixed.chunks_exact(w.max(1)).enumerate() {
                if valid[i] {
                    b.append_value(String::from_utf8_lossy(trim_char(v)));
                } else {
                    b.append_null();
                }
            }
            Arc::new(b.finish())
        }
        ColumnType::Varchar => {
            let total = values.iter().map(|v| v.len()).sum();
            let mut b = StringBuilder::with_capacity(n, total);
            for (v, ok) in values.iter().zip(&valid) {
                if *ok {
                    let s = std::str::from_utf8(v).map_err(|e| {
                        ArrowError::ComputeError(format!(
                            "a VARCHAR value read from the device is not UTF-8: {e}"
                        ))
                    })?;
                    b.append_value(s);
                } else {
                    b.append_null();
                }
            }
            Arc::new(b.finish())
        }
        ColumnType::Varbinary => {
            let total = values.iter().map(|v| v.len()).sum();
            let mut b = BinaryBuilder::with_capacity(n, total);
            for (v, ok) in values.iter().zip(&valid) {
                if *ok {
                    b.append_value(v);
                } else {
                    b.append_null();
                }
            }
            Arc::new(b.finish())
        }
    })
}

fn wrong_representation(ty: ColumnType) -> ArrowError {
    ArrowError::ComputeError(format!(
        "device column of type {ty:?} came back in the wrong representation"
    ))
}

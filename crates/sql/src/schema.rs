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
use csd_table::schema::{Column, ColumnType, Schema, Value, trim_char};
use datafusion::arrow::array::{
    ArrayRef, ArrowPrimitiveType, BinaryBuilder, BooleanArray, Date32Array, Decimal128Array,
    Int32Array, Int64Array, PrimitiveArray, StringArray, StringBuilder,
};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
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
            char_array(ty, parts, n, bytes_total)?
        }
        // The newer types come back as stored columns (`stored_array`).
        other => {
            return Err(ArrowError::ComputeError(format!(
                "a {other} column came back without its stored representation"
            )));
        }
    })
}

/// `CHAR` values (padded, back to back) as one `Utf8` array without their padding: the
/// trimmed bytes and their offsets are written straight into the array's buffers and
/// checked as UTF-8 once (Arrow checks every value's boundaries); bytes that are not
/// UTF-8 fall back to one value at a time, each invalid sequence replaced by U+FFFD.
fn char_array(
    ty: ColumnType,
    parts: &[ColumnData<'_>],
    n: usize,
    bytes_total: usize,
) -> Result<ArrayRef, ArrowError> {
    let mut values: Vec<u8> = Vec::with_capacity(bytes_total);
    let mut offsets: Vec<i32> = Vec::with_capacity(n + 1);
    offsets.push(0);
    for p in parts {
        let ColumnData::Char { width, bytes } = p else {
            return Err(wrong_representation(ty));
        };
        for v in bytes.chunks_exact((*width).max(1)) {
            values.extend_from_slice(trim_char(v));
            let end = i32::try_from(values.len()).map_err(|_| {
                ArrowError::ComputeError(format!(
                    "{bytes_total} bytes of CHAR values do not fit one string array"
                ))
            })?;
            offsets.push(end);
        }
    }
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    match StringArray::try_new(offsets, Buffer::from_vec(values), None) {
        Ok(a) => Ok(Arc::new(a)),
        Err(_) => {
            let mut b = StringBuilder::with_capacity(n, bytes_total);
            for p in parts {
                if let ColumnData::Char { width, bytes } = p {
                    for v in bytes.chunks_exact((*width).max(1)) {
                        b.append_value(String::from_utf8_lossy(trim_char(v)));
                    }
                }
            }
            Ok(Arc::new(b.finish()))
        }
    }
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

/// Values of `col` (one per row, `None` or [`Value::Null`] for a NULL) as an Arrow
/// array of the column's field type: the DML path of tables with NULLs or the newer
/// types. A value of another kind than the column's is an error.
pub fn values_array(col: &Column, vals: &[Option<&Value>]) -> Result<ArrayRef, ArrowError> {
    use datafusion::arrow::array::{
        BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder,
        Float64Builder, Int8Builder, Int16Builder, Int32Builder, Int64Builder,
        TimestampMicrosecondBuilder,
    };
    let wrong = |v: &Value| {
        ArrowError::ComputeError(format!(
            "column {} is {} but holds a {} value",
            col.name,
            col.ty,
            v.kind()
        ))
    };
    macro_rules! build {
        ($b:expr, $pat:pat => $x:expr) => {{
            let mut b = $b;
            for v in vals {
                match v {
                    None | Some(Value::Null) => b.append_null(),
                    Some($pat) => b.append_value($x),
                    Some(other) => return Err(wrong(other)),
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    let a: ArrayRef = match col.ty {
        ColumnType::Bool => build!(BooleanBuilder::new(), Value::Bool(x) => *x),
        ColumnType::Int8 => build!(Int8Builder::new(), Value::Int8(x) => *x),
        ColumnType::Int16 => build!(Int16Builder::new(), Value::Int16(x) => *x),
        ColumnType::Int32 => build!(Int32Builder::new(), Value::Int32(x) => *x),
        ColumnType::Int64 => build!(Int64Builder::new(), Value::Int64(x) => *x),
        ColumnType::Date => build!(Date32Builder::new(), Value::Date(x) => *x),
        ColumnType::Float32 => {
            build!(Float32Builder::new(), Value::Float32(x) => f32::from_bits(*x))
        }
        ColumnType::Float64 => {
            build!(Float64Builder::new(), Value::Float64(x) => f64::from_bits(*x))
        }
        ColumnType::Timestamp => {
            build!(TimestampMicrosecondBuilder::new(), Value::Timestamp(x) => *x)
        }
        ColumnType::Decimal { scale } => build!(
            Decimal128Builder::new().with_precision_and_scale(DECIMAL_PRECISION, scale as i8)?,
            Value::Decimal(x) => i128::from(*x)
        ),
        ColumnType::Decimal128 { precision, scale } => build!(
            Decimal128Builder::new().with_precision_and_scale(precision, scale as i8)?,
            Value::Decimal128(x) => *x
        ),
        ColumnType::Char(_) => build!(
            StringBuilder::new(),
            Value::Char(x) => String::from_utf8_lossy(trim_char(x))
        ),
        ColumnType::Varchar => build!(StringBuilder::new(), Value::Varchar(x) => x.as_str()),
        ColumnType::Varbinary => build!(BinaryBuilder::new(), Value::Varbinary(x) => x.as_slice()),
    };
    let field = arrow_field(col);
    if a.data_type() == field.data_type() {
        Ok(a)
    } else {
        datafusion::arrow::compute::cast(&a, field.data_type())
    }
}

/// Value `i` of `a`, an array of `col`'s Arrow type ([`arrow_type`]), as a stored value
/// ([`Value::Null`] for a NULL); `None` if the array is not of that type.
pub fn array_value(col: &Column, a: &ArrayRef, i: usize) -> Option<Value> {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes as t;
    if a.is_null(i) {
        return Some(Value::Null);
    }
    Some(match col.ty {
        ColumnType::Bool => Value::Bool(a.as_boolean_opt()?.value(i)),
        ColumnType::Int8 => Value::Int8(a.as_primitive_opt::<t::Int8Type>()?.value(i)),
        ColumnType::Int16 => Value::Int16(a.as_primitive_opt::<t::Int16Type>()?.value(i)),
        ColumnType::Int32 => Value::Int32(a.as_primitive_opt::<t::Int32Type>()?.value(i)),
        ColumnType::Int64 => Value::Int64(a.as_primitive_opt::<t::Int64Type>()?.value(i)),
        ColumnType::Date => Value::Date(a.as_primitive_opt::<t::Date32Type>()?.value(i)),
        ColumnType::Float32 => {
            Value::Float32(a.as_primitive_opt::<t::Float32Type>()?.value(i).to_bits())
        }
        ColumnType::Float64 => {
            Value::Float64(a.as_primitive_opt::<t::Float64Type>()?.value(i).to_bits())
        }
        ColumnType::Timestamp => Value::Timestamp(
            a.as_primitive_opt::<t::TimestampMicrosecondType>()?
                .value(i),
        ),
        ColumnType::Decimal { .. } => {
            Value::Decimal(i64::try_from(a.as_primitive_opt::<t::Decimal128Type>()?.value(i)).ok()?)
        }
        ColumnType::Decimal128 { .. } => {
            Value::Decimal128(a.as_primitive_opt::<t::Decimal128Type>()?.value(i))
        }
        ColumnType::Char(_) => Value::Char(a.as_string_opt::<i32>()?.value(i).as_bytes().to_vec()),
        ColumnType::Varchar => Value::Varchar(a.as_string_opt::<i32>()?.value(i).to_string()),
        ColumnType::Varbinary => Value::Varbinary(a.as_binary_opt::<i32>()?.value(i).to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray};

    /// `CHAR(width)` chunks of `vals`, each padded with blanks (a value as long as the
    /// width fills it).
    fn padded(width: usize, vals: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for v in vals {
            out.extend_from_slice(v);
            out.resize(out.len() + width - v.len(), b' ');
        }
        out
    }

    #[test]
    fn char_values_lose_their_padding_across_chunks() {
        let a = padded(6, &[b"MAIL", b"", "h\u{e9}llo".as_bytes(), b"  x"]);
        let b = padded(6, &[b"SHIP  ", b"TRUCKS"]);
        let parts = [
            ColumnData::Char {
                width: 6,
                bytes: &a,
            },
            ColumnData::Char {
                width: 6,
                bytes: &b,
            },
        ];
        let arr = column_array_of(ColumnType::Char(6), &parts).expect("array");
        let s = arr.as_string::<i32>();
        let got: Vec<&str> = (0..s.len()).map(|i| s.value(i)).collect();
        assert_eq!(got, ["MAIL", "", "h\u{e9}llo", "  x", "SHIP", "TRUCKS"]);
        assert_eq!(arr.null_count(), 0);
    }

    #[test]
    fn char_bytes_that_are_not_utf8_are_replaced_as_before() {
        // An invalid byte, and a two-byte character cut by the width: each value is
        // converted on its own, invalid sequences replaced by U+FFFD.
        let bytes = [b'a', 0xFF, b'b', b' ', 0xC3, 0xA9, 0xC3, 0xA9];
        let parts = [ColumnData::Char {
            width: 4,
            bytes: &bytes,
        }];
        let arr = column_array_of(ColumnType::Char(4), &parts).expect("array");
        let s = arr.as_string::<i32>();
        let want: Vec<String> = bytes
            .chunks_exact(4)
            .map(|v| String::from_utf8_lossy(trim_char(v)).into_owned())
            .collect();
        let got: Vec<&str> = (0..s.len()).map(|i| s.value(i)).collect();
        assert_eq!(got, want);
        assert_eq!(got[0], "a\u{fffd}b");
        // Whole-buffer UTF-8 that splits a character between two values is refused
        // by Arrow's boundary check and converted value by value.
        let split = [b'x', 0xC3, 0xA9, 0xC3, 0xA9, b'y'];
        let parts = [ColumnData::Char {
            width: 2,
            bytes: &split,
        }];
        let arr = column_array_of(ColumnType::Char(2), &parts).expect("array");
        let s = arr.as_string::<i32>();
        let got: Vec<&str> = (0..s.len()).map(|i| s.value(i)).collect();
        assert_eq!(got, ["x\u{fffd}", "\u{fffd}\u{fffd}", "\u{fffd}y"]);
    }
}

//! A user's own data onto the device (`csd load csv|parquet`, issue 12): Arrow record
//! batches, read with Arrow's CSV reader or the Parquet crate's Arrow reader, become
//! row images of a device table ([`csd_table::schema`], the tuple format of smart-ssd
//! §4.1.1: fixed-width values, decimals as scaled integers, dates as days).
//!
//! Type mapping (the device stores no NULLs and no floating point):
//!
//! | Arrow | device column |
//! |---|---|
//! | Int8, Int16, Int32, UInt8, UInt16 | `INT32` |
//! | Int64, UInt32, UInt64 (values up to `i64::MAX`) | `INT64` |
//! | Decimal128/256 (p, s), 0 ≤ s ≤ 18, values within `i64` | `DECIMAL(scale s)` (negative scales become 0) |
//! | Float16/32/64 | `DECIMAL(scale S)` with `--float-scale S` (rounded), else an error |
//! | Date32, Date64 | `DATE` |
//! | Utf8, LargeUtf8, Utf8View, dictionaries of them | `CHAR(n)`, n the longest value in bytes (at least 1) |
//!
//! Anything else (booleans, timestamps, binary, lists, ...) is an [`ImportError`] naming
//! the column and its type; so is a NULL (naming the row), a value out of range, or a
//! string that does not fit. CSV has no NULL: an empty string field is an empty string;
//! a CSV column Arrow infers as Float64 is read as text and stored as an exact decimal
//! with as many digits after the point as its longest fraction (so `12.34` stays
//! `12.34`, never `12.339999`); written in exponent form it falls back to the float
//! rule. `CHAR` keeps no trailing blanks (the device pads with them).
//!
//! Choices: a file is read and converted completely, in memory, before the device is
//! touched, so a bad type or value (or a missing file) writes nothing; the converted
//! rows are [`RowImages`], a [`RowSource`] for `Catalog::load`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use csd_table::datagen::RowSource;
use csd_table::schema::{Column, ColumnType, MAX_DECIMAL_SCALE, Schema, SchemaError};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Date32Array, Decimal128Array, Int32Array, Int64Array, RecordBatch,
    StringArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef};

/// Why a file could not become a device table (nothing was written).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid CSV / Parquet.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The reader's message.
        message: String,
    },
    /// A column type the device cannot store.
    #[error("column `{column}` has type {ty}, which a device table cannot store: {hint}")]
    UnsupportedType {
        /// The column.
        column: String,
        /// Its Arrow type.
        ty: DataType,
        /// What to do about it.
        hint: String,
    },
    /// A NULL (device tables have none).
    #[error(
        "column `{column}` is NULL in row {row}: device tables store no NULLs; \
         fill or drop those rows first"
    )]
    Null {
        /// The column.
        column: String,
        /// The row (0-based, in file order).
        row: u64,
    },
    /// A value the column's device type cannot hold.
    #[error("column `{column}`, row {row}: {message}")]
    Value {
        /// The column.
        column: String,
        /// The row (0-based, in file order).
        row: u64,
        /// What is wrong.
        message: String,
    },
    /// The resulting schema is invalid (e.g. two columns of one name).
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The file holds no columns.
    #[error("{0}: the file holds no columns")]
    NoColumns(PathBuf),
}

/// How a file is read and its types mapped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImportOptions {
    /// Store floating-point columns as `DECIMAL` with this many digits after the point
    /// (rounded); `None`: a floating-point column is an error.
    pub float_scale: Option<u8>,
    /// CSV: the first line names the columns (otherwise `column_1`, `column_2`, ...).
    pub header: bool,
    /// CSV: the field delimiter.
    pub delimiter: u8,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            float_scale: None,
            header: true,
            delimiter: b',',
        }
    }
}

/// Rows ready for the device: the table schema and the row images back to back.
#[derive(Debug, Clone)]
pub struct RowImages {
    schema: Schema,
    data: Vec<u8>,
    rows: u64,
    next: u64,
}

impl RowImages {
    /// Rows in total.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The device table's schema.
    pub fn table_schema(&self) -> &Schema {
        &self.schema
    }

    /// Row `i`'s image.
    pub fn row(&self, i: u64) -> Option<&[u8]> {
        let w = self.schema.row_width();
        let s = usize::try_from(i).ok()?.checked_mul(w)?;
        self.data.get(s..s + w)
    }
}

impl RowSource for RowImages {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        let w = self.schema.row_width();
        let Some(img) = usize::try_from(self.next)
            .ok()
            .and_then(|i| self.data.get(i * w..(i + 1) * w))
        else {
            return false;
        };
        row.clear();
        row.extend_from_slice(img);
        self.next += 1;
        true
    }

    fn remaining_rows(&self) -> Option<u64> {
        Some(self.rows - self.next)
    }
}

/// Reads a Parquet file completely (Arrow batches).
pub fn read_parquet(path: &Path) -> Result<(SchemaRef, Vec<RecordBatch>), ImportError> {
    use datafusion::arrow::array::RecordBatchReader;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let file = std::fs::File::open(path).map_err(|e| ImportError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let fmt = |e: String| ImportError::Format {
        path: path.to_path_buf(),
        message: e,
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| fmt(format!("not a readable Parquet file: {e}")))?
        .build()
        .map_err(|e| fmt(e.to_string()))?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fmt(e.to_string()))?;
    Ok((schema, batches))
}

/// Reads a CSV file completely: types inferred over every row by Arrow, Float64
/// columns read as text (see the [module docs](self)).
pub fn read_csv(
    path: &Path,
    opts: &ImportOptions,
) -> Result<(SchemaRef, Vec<RecordBatch>), ImportError> {
    use datafusion::arrow::csv::ReaderBuilder;
    use datafusion::arrow::csv::reader::Format;
    let io = |e: std::io::Error| ImportError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let fmt = |e: String| ImportError::Format {
        path: path.to_path_buf(),
        message: e,
    };
    let format = Format::default()
        .with_header(opts.header)
        .with_delimiter(opts.delimiter);
    let file = std::fs::File::open(path).map_err(io)?;
    let (inferred, _) = format
        .infer_schema(std::io::BufReader::new(file), None)
        .map_err(|e| fmt(format!("not readable as CSV: {e}")))?;
    // Floats as text (exact decimals later); strings stay strings, empty ones included.
    let fields: Vec<Field> = inferred
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Float64 | DataType::Float32 | DataType::Float16 | DataType::Null => {
                Field::new(f.name(), DataType::Utf8, true)
            }
            _ => f.as_ref().clone(),
        })
        .collect();
    let schema = Arc::new(ArrowSchema::new(fields));
    let file = std::fs::File::open(path).map_err(io)?;
    let reader = ReaderBuilder::new(schema.clone())
        .with_format(format)
        .with_batch_size(8192)
        .build(file)
        .map_err(|e| fmt(e.to_string()))?;
    let mut batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fmt(e.to_string()))?;
    // Text columns that were floats become exact decimals.
    let float_cols: Vec<usize> = inferred
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            matches!(
                f.data_type(),
                DataType::Float64 | DataType::Float32 | DataType::Float16
            )
        })
        .map(|(i, _)| i)
        .collect();
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    for &c in &float_cols {
        let name = fields[c].name().clone();
        let target = match (decimal_text_scale(&batches, c), opts.float_scale) {
            (Some(s), _) if s <= MAX_DECIMAL_SCALE => DataType::Decimal128(38, s as i8),
            // Read as Float64: the float rule (`--float-scale`) applies in `to_rows`.
            (_, Some(_)) => DataType::Float64,
            (_, None) => {
                return Err(ImportError::UnsupportedType {
                    column: name,
                    ty: DataType::Float64,
                    hint: "its values are floating-point numbers (exponents, or more than 18 \
                           digits after the point); pass --float-scale N to store them as \
                           DECIMAL with N digits (rounded)"
                        .into(),
                });
            }
        };
        fields[c] = Field::new(&name, target.clone(), true);
        let s = Arc::new(ArrowSchema::new(fields.clone()));
        let mut base = 0u64;
        for b in &mut batches {
            let col = b.column(c);
            let arr = cast(col, &target).map_err(|e| ImportError::Value {
                column: name.clone(),
                row: base,
                message: format!("not a number: {e}"),
            })?;
            if let Some(i) = (0..arr.len()).find(|&i| arr.is_null(i) && !col.is_null(i)) {
                return Err(ImportError::Value {
                    column: name.clone(),
                    row: base + i as u64,
                    message: format!("`{}` is not a number", col.as_string::<i32>().value(i)),
                });
            }
            let mut cols = b.columns().to_vec();
            cols[c] = arr;
            base += b.num_rows() as u64;
            *b = RecordBatch::try_new(s.clone(), cols).map_err(|e| fmt(e.to_string()))?;
        }
    }
    let schema = Arc::new(ArrowSchema::new(fields));
    Ok((schema, batches))
}

/// The largest number of digits after the point among the text values of column `c`;
/// `None` if one is not a plain decimal (exponent, inf, nan).
fn decimal_text_scale(batches: &[RecordBatch], c: usize) -> Option<u8> {
    let mut scale = 0usize;
    for b in batches {
        let col = b.column(c);
        let s = col.as_string_opt::<i32>()?;
        for v in s.iter().flatten() {
            let v = v.trim();
            if v.is_empty() {
                continue;
            }
            let body = v.strip_prefix(['-', '+']).unwrap_or(v);
            if !body.chars().all(|ch| ch.is_ascii_digit() || ch == '.') {
                return None;
            }
            if let Some(p) = body.find('.') {
                scale = scale.max(body.len() - p - 1);
            }
        }
    }
    u8::try_from(scale).ok()
}

/// What a column of the file becomes.
struct Plan {
    column: String,
    ty: ColumnType,
    /// Nulls in a string column are empty strings (CSV).
    null_is_empty: bool,
}

fn unsupported(column: &str, ty: &DataType, hint: &str) -> ImportError {
    ImportError::UnsupportedType {
        column: column.to_string(),
        ty: ty.clone(),
        hint: hint.to_string(),
    }
}

/// The device type of one Arrow column (strings get their width later).
fn device_type(field: &Field, opts: &ImportOptions) -> Result<ColumnType, ImportError> {
    let name = field.name();
    let ty = field.data_type();
    Ok(match ty {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            ColumnType::Int32
        }
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => ColumnType::Int64,
        DataType::Decimal32(_, s)
        | DataType::Decimal64(_, s)
        | DataType::Decimal128(_, s)
        | DataType::Decimal256(_, s) => {
            if *s > MAX_DECIMAL_SCALE as i8 {
                return Err(unsupported(
                    name,
                    ty,
                    &format!(
                        "a device DECIMAL has at most {MAX_DECIMAL_SCALE} digits after the point"
                    ),
                ));
            }
            ColumnType::Decimal {
                scale: (*s).max(0) as u8,
            }
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => match opts.float_scale {
            Some(s) if s <= MAX_DECIMAL_SCALE => ColumnType::Decimal { scale: s },
            Some(s) => {
                return Err(unsupported(
                    name,
                    ty,
                    &format!("--float-scale {s} is more than {MAX_DECIMAL_SCALE}"),
                ));
            }
            None => {
                return Err(unsupported(
                    name,
                    ty,
                    "the device stores no floating point; pass --float-scale N to store it as \
                     DECIMAL with N digits after the point (rounded)",
                ));
            }
        },
        DataType::Date32 | DataType::Date64 => ColumnType::Date,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ColumnType::Char(1),
        DataType::Dictionary(_, v)
            if matches!(
                v.as_ref(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) =>
        {
            ColumnType::Char(1)
        }
        DataType::Boolean => {
            return Err(unsupported(
                name,
                ty,
                "store it as an integer (0/1) or a string",
            ));
        }
        DataType::Timestamp(..) | DataType::Time32(_) | DataType::Time64(_) => {
            return Err(unsupported(
                name,
                ty,
                "the device has DATE (days) only; convert it to a date or to an integer",
            ));
        }
        _ => {
            return Err(unsupported(
                name,
                ty,
                "supported: integers, decimals, floats (with --float-scale), dates and strings",
            ));
        }
    })
}

/// One column of every batch as arrays of the device type's Arrow form (`Int32`,
/// `Int64`, `Decimal128(38, s)`, `Date32`, `Utf8`), checked for NULLs and range.
fn column_arrays(
    batches: &[RecordBatch],
    c: usize,
    plan: &Plan,
) -> Result<Vec<ArrayRef>, ImportError> {
    let target = match plan.ty {
        ColumnType::Int32 => DataType::Int32,
        ColumnType::Int64 => DataType::Int64,
        ColumnType::Decimal { scale } => DataType::Decimal128(38, scale as i8),
        ColumnType::Date => DataType::Date32,
        ColumnType::Char(_) => DataType::Utf8,
        other => {
            return Err(ImportError::UnsupportedType {
                column: plan.column.clone(),
                ty: DataType::Null,
                hint: format!("the importer does not write {other} columns"),
            });
        }
    };
    let mut out = Vec::with_capacity(batches.len());
    let mut base = 0u64;
    for b in batches {
        let col = b.column(c);
        let is_string = matches!(plan.ty, ColumnType::Char(_));
        if col.null_count() > 0 && !(is_string && plan.null_is_empty) {
            let row = (0..col.len()).find(|&i| col.is_null(i)).unwrap_or(0) as u64;
            return Err(ImportError::Null {
                column: plan.column.clone(),
                row: base + row,
            });
        }
        // A value that does not fit becomes NULL under a safe cast: found below.
        let arr = if col.data_type() == &target {
            col.clone()
        } else {
            cast(col, &target).map_err(|e| ImportError::Value {
                column: plan.column.clone(),
                row: base,
                message: format!("cannot be converted to {}: {e}", plan.ty),
            })?
        };
        // A value that did not fit (too large, NaN, infinity) is NULL now.
        if arr.null_count() > col.null_count() {
            let row = (0..arr.len())
                .find(|&i| arr.is_null(i) && !col.is_null(i))
                .unwrap_or(0) as u64;
            return Err(ImportError::Value {
                column: plan.column.clone(),
                row: base + row,
                message: format!("the value does not fit {}", plan.ty),
            });
        }
        out.push(arr);
        base += b.num_rows() as u64;
    }
    Ok(out)
}

/// Converts Arrow batches of `schema` into the rows of a device table named `table`.
/// `null_strings_empty`: NULL strings become empty ones (CSV, which has no NULL).
pub fn to_rows(
    table: &str,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    opts: &ImportOptions,
    null_strings_empty: bool,
    path: &Path,
) -> Result<RowImages, ImportError> {
    if schema.fields().is_empty() {
        return Err(ImportError::NoColumns(path.to_path_buf()));
    }
    let mut plans = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        plans.push(Plan {
            column: f.name().clone(),
            ty: device_type(f, opts)?,
            null_is_empty: null_strings_empty,
        });
    }
    let mut columns: Vec<Vec<ArrayRef>> = Vec::with_capacity(plans.len());
    for (c, plan) in plans.iter_mut().enumerate() {
        let arrays = column_arrays(batches, c, plan)?;
        if let ColumnType::Char(_) = plan.ty {
            let mut width = 1usize;
            for a in &arrays {
                let s: &StringArray = a.as_string::<i32>();
                for v in s.iter().flatten() {
                    width = width.max(v.trim_end_matches(' ').len());
                }
            }
            let w = u16::try_from(width).map_err(|_| ImportError::Value {
                column: plan.column.clone(),
                row: 0,
                message: format!(
                    "a value is {width} bytes; a device CHAR column holds at most {} bytes",
                    u16::MAX
                ),
            })?;
            plan.ty = ColumnType::Char(w);
        }
        columns.push(arrays);
    }
    let table_schema = Schema::new(
        table,
        plans
            .iter()
            .map(|p| Column::new(p.column.clone(), p.ty))
            .collect(),
    )?;
    let width = table_schema.row_width();
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut data = vec![0u8; rows * width];
    let offsets = table_schema.offsets().to_vec();
    for (c, plan) in plans.iter().enumerate() {
        let off = offsets[c];
        let mut r = 0usize;
        for a in &columns[c] {
            for i in 0..a.len() {
                let dst = &mut data[r * width + off..r * width + off + plan.ty.width()];
                encode(plan, a, i, dst, r as u64)?;
                r += 1;
            }
        }
    }
    Ok(RowImages {
        schema: table_schema,
        data,
        rows: rows as u64,
        next: 0,
    })
}

/// Writes value `i` of `a` (the device type's Arrow form) into `dst`.
fn encode(
    plan: &Plan,
    a: &ArrayRef,
    i: usize,
    dst: &mut [u8],
    row: u64,
) -> Result<(), ImportError> {
    let bad = |message: String| ImportError::Value {
        column: plan.column.clone(),
        row,
        message,
    };
    match plan.ty {
        ColumnType::Int32 => {
            let v = a
                .as_any()
                .downcast_ref::<Int32Array>()
                .ok_or_else(|| bad("not an INT32 array".into()))?
                .value(i);
            dst.copy_from_slice(&v.to_le_bytes());
        }
        ColumnType::Date => {
            let v = a
                .as_any()
                .downcast_ref::<Date32Array>()
                .ok_or_else(|| bad("not a DATE array".into()))?
                .value(i);
            dst.copy_from_slice(&v.to_le_bytes());
        }
        ColumnType::Int64 => {
            let v = a
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| bad("not an INT64 array".into()))?
                .value(i);
            dst.copy_from_slice(&v.to_le_bytes());
        }
        ColumnType::Decimal { scale } => {
            let v = a
                .as_any()
                .downcast_ref::<Decimal128Array>()
                .ok_or_else(|| bad("not a DECIMAL array".into()))?
                .value(i);
            let v = i64::try_from(v).map_err(|_| {
                bad(format!(
                    "{} does not fit a device DECIMAL (a 64-bit scaled integer at scale {scale})",
                    Decimal128Array::from(vec![v])
                        .with_precision_and_scale(38, scale as i8)
                        .map(|d| d.value_as_string(0))
                        .unwrap_or_else(|_| v.to_string())
                ))
            })?;
            dst.copy_from_slice(&v.to_le_bytes());
        }
        ColumnType::Char(_) => {
            let s = a.as_string::<i32>();
            let v = if s.is_null(i) { "" } else { s.value(i) };
            let v = v.trim_end_matches(' ').as_bytes();
            if v.len() > dst.len() {
                return Err(bad(format!("a {}-byte string in {}", v.len(), plan.ty)));
            }
            dst[..v.len()].copy_from_slice(v);
            dst[v.len()..].fill(b' ');
        }
        // `column_plan` maps every Arrow type to one of the five above.
        other => return Err(bad(format!("the importer does not write {other} columns"))),
    }
    Ok(())
}

/// Reads `path` (CSV or Parquet, by `csv`) and converts it into the rows of table
/// `table`: everything is checked before anything is returned.
pub fn import_file(
    path: &Path,
    table: &str,
    csv: bool,
    opts: &ImportOptions,
) -> Result<RowImages, ImportError> {
    let (schema, batches) = if csv {
        read_csv(path, opts)?
    } else {
        read_parquet(path)?
    };
    to_rows(table, &schema, &batches, opts, csv, path)
}

#[cfg(test)]
mod tests;

//! A user's own data onto the device (`csd load csv|parquet`, issues 12 and 34): Arrow
//! record batches, read with Arrow's CSV reader or the Parquet crate's Arrow reader,
//! become row images of a device table ([`csd_table::schema`]).
//!
//! Type mapping (one to one; a column holding a NULL becomes a nullable column):
//!
//! | Arrow | device column |
//! |---|---|
//! | Boolean | `BOOLEAN` |
//! | Int8, Int16, Int32, Int64 | `INT8`, `INT16`, `INT32`, `INT64` |
//! | UInt8, UInt16, UInt32, UInt64 (values up to `i64::MAX`) | `INT16`, `INT32`, `INT64`, `INT64` |
//! | Float16/32, Float64 | `FLOAT32`, `FLOAT64` (IEEE, unscaled); with `--float-scale S`: `DECIMAL(scale S)`, rounded |
//! | Decimal (p <= 18, 0 <= s <= 18) | `DECIMAL(scale s)` (an exact `i64`, which the device computes with) |
//! | Decimal (p <= 38) | `DECIMAL(p, s)` (Decimal128) |
//! | Date32, Date64 | `DATE` |
//! | Timestamp (s, ms, us, ns; time zone kept) | `TIMESTAMP` (microseconds; a nanosecond value must be whole microseconds) |
//! | Utf8, LargeUtf8, Utf8View, dictionaries of them | `VARCHAR` (no padding, no trimming) |
//! | Binary, LargeBinary, BinaryView, FixedSizeBinary | `VARBINARY` |
//!
//! Anything else (times of day, lists, ...) is an [`ImportError`] naming the column and
//! its type; so is a value that does not fit its column (naming the row and the column).
//!
//! CSV: the header line is sniffed as DuckDB does unless `header` says: the first line
//! is a header when one of its fields does not parse as the type the other lines give
//! that column (a quoted `"id","name"` line over integers), or when every column is
//! text; `--header` / `--no-header` override. An empty field is NULL, a quoted empty
//! field (`""`) of a text column an empty string (as DuckDB reads them; see
//! `csv_empty`), so a CSV written with quoted strings keeps empty strings and NULLs
//! apart.
//!
//! CSV decimals: a column Arrow's reader would type `DOUBLE` whose every non-empty
//! value is a plain decimal literal (`[+-]digits.digits`, no exponent, no blanks) with
//! the same number `s >= 1` of digits after the point, and at most 38 significant
//! digits, is `DECIMAL(p, s)` with `p` the most significant digits seen (integer
//! digits without leading zeros, plus `s`; at least 1): exactly the values written, as
//! pyarrow and pandas write a decimal column (`123.45000`). Anything else (an exponent,
//! `NaN`, `inf`, an integer among them, differing fractional digits) stays `DOUBLE`.
//! `--no-decimal` (`csv_decimal: false`) keeps such columns `DOUBLE`. DuckDB (2.0)
//! reads them as `DOUBLE` unless `auto_type_candidates` lists a `DECIMAL` (measured:
//! `read_csv` of `123.45000` gives `DOUBLE`); csd keeps the digits by default, since a
//! file of fixed fractional digits is a decimal column written out, and a double would
//! not read back as the same value.
//!
//! CSV timestamps: a column Arrow's reader types as a timestamp whose every non-empty
//! value carries a time-zone designator after its time (`Z`, `+05:30`, `-0500`, `+01`,
//! as pyarrow's `write_csv` writes a zoned column) is `TIMESTAMP` with time zone `UTC`
//! (Arrow `Timestamp(µs, "UTC")`, what pyarrow's `read_csv` gives it): each value the
//! instant it names, exactly; the offsets themselves are not kept (a column written from
//! `America/New_York` reads back as the same instants in UTC). DuckDB (2.0) reads such
//! a column as `TIMESTAMP WITH TIME ZONE` too, returned to Arrow in the session's zone.
//! A column of values without designators stays a `TIMESTAMP` without time zone. A
//! column mixing the two is an error naming the column and the first row that differs
//! from the column's first value (pyarrow reads such a column as text; DuckDB takes the
//! local values in its session zone).
//!
//! Choices: a file is read twice, streaming record batch by record batch both times:
//! the first pass types the columns and checks every value (so a bad type or value, or a
//! missing file, writes nothing), the second converts batches into row images as the
//! device takes them ([`RowImages`], a [`RowSource`] for `Catalog::load`). Memory stays
//! at a batch and its rows whatever the file's size. The rule for bad input: the whole
//! file is checked before the first row is written, so nothing needs rolling back; the
//! price is reading the file twice (measured, 70M rows / 5.1 GB of Parquet in a
//! release build: the check pass 50 s of 194 s).
//!
//! Measured peak memory of `csd load parquet` (release, that file, 4.8 GiB of table):
//! anonymous memory (`RssAnon`: batches, row images, the FTL) peaks at 77 MB (54 MB for
//! 4M rows); the process's RSS (`VmHWM`, what `/usr/bin/time` reports) reached 4.1 GB,
//! all of it `RssFile`: the image file's pages the device wrote through its memory
//! mapping, which count as resident until the kernel reclaims them (page cache, not
//! heap). Bounding that needs the image store to drop written pages from the mapping
//! (`madvise(MADV_DONTNEED)` after they are persisted), in crates/nand.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use csd_table::datagen::RowSource;
use csd_table::schema::{
    Column, ColumnType, MAX_DECIMAL_SCALE, MAX_DECIMAL128_PRECISION, Schema, SchemaError, Value,
};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef, TimeUnit};

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
    /// A NULL where the column takes none.
    #[error("column `{column}` is NULL in row {row}: the column is NOT NULL")]
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
    /// (rounded); `None`: they are `FLOAT32` / `FLOAT64`.
    pub float_scale: Option<u8>,
    /// CSV: the first line names the columns (`Some(true)`), is data (`Some(false)`:
    /// columns `column_1`, `column_2`, ...), or is sniffed (`None`, see the module docs).
    pub header: Option<bool>,
    /// CSV: the field delimiter.
    pub delimiter: u8,
    /// CSV: a column of plain decimal literals with one number of fractional digits
    /// becomes `DECIMAL(p, s)` (see the module docs); `false` keeps it `DOUBLE`.
    pub csv_decimal: bool,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            float_scale: None,
            header: None,
            delimiter: b',',
            csv_decimal: true,
        }
    }
}

/// Record batches per read.
const BATCH_ROWS: usize = 8192;

/// Where the batches come from (read once to check, once to convert).
#[derive(Debug, Clone)]
enum Source {
    Memory(Arc<Vec<RecordBatch>>),
    Parquet(PathBuf),
    Csv {
        path: PathBuf,
        schema: SchemaRef,
        header: bool,
        delimiter: u8,
    },
}

type Batches = Box<dyn Iterator<Item = Result<RecordBatch, ImportError>> + Send>;

impl Source {
    fn path(&self) -> PathBuf {
        match self {
            Source::Memory(_) => PathBuf::from("<arrow data>"),
            Source::Parquet(p) | Source::Csv { path: p, .. } => p.clone(),
        }
    }

    fn batches(&self) -> Result<Batches, ImportError> {
        let path = self.path();
        let io = {
            let path = path.clone();
            move |e: std::io::Error| ImportError::Io {
                path: path.clone(),
                source: e,
            }
        };
        let fmt = move |e: String| ImportError::Format {
            path: path.clone(),
            message: e,
        };
        match self {
            Source::Memory(b) => {
                let b = b.clone();
                Ok(Box::new((0..b.len()).map(move |i| Ok(b[i].clone()))))
            }
            Source::Parquet(p) => {
                use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
                let file = std::fs::File::open(p).map_err(io)?;
                let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                    .map_err(|e| fmt(format!("not a readable Parquet file: {e}")))?
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(|e| fmt(e.to_string()))?;
                Ok(Box::new(
                    reader.map(move |r| r.map_err(|e| fmt(e.to_string()))),
                ))
            }
            Source::Csv {
                path,
                schema,
                header,
                delimiter,
            } => {
                use datafusion::arrow::csv::ReaderBuilder;
                use datafusion::arrow::csv::reader::Format;
                let format = Format::default()
                    .with_header(*header)
                    .with_delimiter(*delimiter);
                use crate::csv_empty::{QuotedEmpty, restore};
                use std::sync::atomic::{AtomicU64, Ordering};
                let file = std::fs::File::open(path).map_err(io)?;
                // A quoted empty text field is an empty string, not a NULL.
                let text = schema
                    .fields()
                    .iter()
                    .map(|f| f.data_type() == &DataType::Utf8)
                    .collect();
                let replaced = Arc::new(AtomicU64::new(0));
                let filtered = QuotedEmpty::new(
                    std::io::BufReader::with_capacity(1 << 16, file),
                    *delimiter,
                    text,
                    *header,
                    replaced.clone(),
                );
                let mut reader = ReaderBuilder::new(schema.clone())
                    .with_format(format)
                    .with_batch_size(BATCH_ROWS)
                    .build(filtered)
                    .map_err(|e| fmt(e.to_string()))?;
                let mut found = 0u64;
                let mut ended = false;
                Ok(Box::new(std::iter::from_fn(move || {
                    if ended {
                        return None;
                    }
                    match reader.next() {
                        Some(Ok(b)) => Some(restore(b).map_err(&fmt).map(|(b, n)| {
                            found += n;
                            b
                        })),
                        Some(Err(e)) => Some(Err(fmt(e.to_string()))),
                        None => {
                            ended = true;
                            let made = replaced.load(Ordering::Relaxed);
                            (found != made).then(|| {
                                Err(fmt(format!(
                                    "the text holds csd's marker of a quoted empty field \
                                     ({} times; a NUL byte, then `csd:quoted-empty`): \
                                     remove it from the file",
                                    found - made.min(found)
                                )))
                            })
                        }
                    }
                })))
            }
        }
    }
}

/// Reads a Parquet file completely (Arrow batches): for tests and tools; loading
/// streams ([`import_file`]).
pub fn read_parquet(path: &Path) -> Result<(SchemaRef, Vec<RecordBatch>), ImportError> {
    let src = Source::Parquet(path.to_path_buf());
    let batches = src.batches()?.collect::<Result<Vec<_>, _>>()?;
    let schema = parquet_schema(path)?;
    Ok((schema, batches))
}

fn parquet_schema(path: &Path) -> Result<SchemaRef, ImportError> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let file = std::fs::File::open(path).map_err(|e| ImportError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let b = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| ImportError::Format {
        path: path.to_path_buf(),
        message: format!("not a readable Parquet file: {e}"),
    })?;
    Ok(b.schema().clone())
}

/// Splits one CSV line into fields (quotes `"` with `""` inside), for header sniffing.
fn csv_fields(line: &str, delimiter: u8) -> Vec<String> {
    let d = delimiter as char;
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            c if c == d && !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Whether `text` reads as a value of the inferred CSV type `ty`.
fn parses_as(text: &str, ty: &DataType) -> bool {
    let t = text.trim();
    if t.is_empty() {
        return true;
    }
    match ty {
        DataType::Int64 | DataType::Int32 => t.parse::<i64>().is_ok(),
        DataType::Float64 => t.parse::<f64>().is_ok(),
        DataType::Boolean => t.eq_ignore_ascii_case("true") || t.eq_ignore_ascii_case("false"),
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) => {
            let a = datafusion::arrow::array::StringArray::from(vec![t]);
            cast(&a, ty).is_ok_and(|r| !r.is_null(0))
        }
        _ => true,
    }
}

/// The CSV file's schema and whether its first line is a header (sniffed unless given).
fn csv_schema(path: &Path, opts: &ImportOptions) -> Result<(SchemaRef, bool), ImportError> {
    use datafusion::arrow::csv::reader::Format;
    use std::io::BufRead;
    let io = |e: std::io::Error| ImportError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let fmt = |e: String| ImportError::Format {
        path: path.to_path_buf(),
        message: e,
    };
    let infer = |header: bool| -> Result<ArrowSchema, ImportError> {
        let file = std::fs::File::open(path).map_err(io)?;
        let format = Format::default()
            .with_header(header)
            .with_delimiter(opts.delimiter);
        let (schema, _) = format
            .infer_schema(std::io::BufReader::new(file), None)
            .map_err(|e| fmt(format!("not readable as CSV: {e}")))?;
        Ok(schema)
    };
    let header = match opts.header {
        Some(h) => h,
        None => {
            let file = std::fs::File::open(path).map_err(io)?;
            let mut first = String::new();
            std::io::BufReader::new(file)
                .read_line(&mut first)
                .map_err(io)?;
            let first = first.trim_end_matches(['\n', '\r']);
            let fields = csv_fields(first, opts.delimiter);
            // The types of the lines after the first.
            let rest = infer(true)?;
            let all_text = rest
                .fields()
                .iter()
                .all(|f| matches!(f.data_type(), DataType::Utf8 | DataType::Null));
            all_text
                || fields
                    .iter()
                    .zip(rest.fields())
                    .any(|(v, f)| !parses_as(v, f.data_type()))
        }
    };
    let inferred = infer(header)?;
    // An all-empty column (inferred Null) is text.
    let mut fields: Vec<Field> = inferred
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Null => Field::new(f.name(), DataType::Utf8, true),
            _ => f.as_ref().clone(),
        })
        .collect();
    let decimals = opts.csv_decimal && fields.iter().any(|f| f.data_type() == &DataType::Float64);
    let stamps = fields
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Timestamp(..)));
    if decimals || stamps {
        let found = csv_text_types(path, &fields, header, opts)?;
        for (i, d) in found.decimals {
            let f = &fields[i];
            fields[i] = Field::new(f.name(), DataType::Decimal128(d.0, d.1 as i8), true);
        }
        for i in found.zoned {
            let f = &fields[i];
            if let DataType::Timestamp(unit, _) = f.data_type() {
                let ty = DataType::Timestamp(*unit, Some(CSV_TIME_ZONE.into()));
                fields[i] = Field::new(f.name(), ty, true);
            }
        }
    }
    Ok((Arc::new(ArrowSchema::new(fields)), header))
}

/// The time zone of a CSV timestamp column whose values carry offsets (`Z`, `+05:30`,
/// `-0500`): the instants are UTC, as pyarrow's `read_csv` types such a column.
pub const CSV_TIME_ZONE: &str = "UTC";

/// Whether a CSV timestamp (a value Arrow's reader typed as a timestamp:
/// `YYYY-MM-DD[T ]HH:MM:SS[.f]` and maybe more) carries a time-zone designator after
/// its time (`Z`, `+hh:mm`, `-hhmm`, `+hh`, ...). A date alone carries none.
fn carries_zone(text: &str) -> bool {
    let Some(rest) = text.get(19..) else {
        return false;
    };
    let rest = rest
        .strip_prefix('.')
        .map_or(rest, |r| r.trim_start_matches(|c: char| c.is_ascii_digit()));
    !rest.trim().is_empty()
}

/// What the values of a CSV timestamp column seen so far say about time zones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ZoneScan {
    /// No non-empty value yet.
    Unknown,
    /// Every value so far carries an offset (`true`) or none does (`false`); `row` is
    /// the first value's row (0-based data row, in file order).
    Seen {
        /// Whether the values carry offsets.
        zoned: bool,
        /// The first value's row.
        row: u64,
    },
}

/// What the values of a CSV column seen so far say about it as a decimal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DecimalScan {
    /// No non-empty value yet.
    Unknown,
    /// Plain decimal literals with `scale` fractional digits, at most `precision`
    /// significant digits.
    Decimal {
        /// Most significant digits seen.
        precision: u8,
        /// Fractional digits of every value.
        scale: u8,
    },
    /// Not a decimal column.
    No,
}

impl DecimalScan {
    /// The scan after value `text` (an empty value is NULL and says nothing).
    fn see(self, text: &str) -> DecimalScan {
        if text.is_empty() || self == DecimalScan::No {
            return self;
        }
        let Some((precision, scale)) = plain_decimal(text) else {
            return DecimalScan::No;
        };
        match self {
            DecimalScan::Unknown => DecimalScan::Decimal { precision, scale },
            DecimalScan::Decimal {
                precision: p,
                scale: s,
            } if s == scale => DecimalScan::Decimal {
                precision: p.max(precision),
                scale,
            },
            _ => DecimalScan::No,
        }
    }
}

/// `(significant digits, fractional digits)` of a plain decimal literal
/// `[+-]digits.digits` with at least one digit on each side and at most 38 significant
/// digits (the integer part's without leading zeros, plus the fraction's; at least 1).
fn plain_decimal(text: &str) -> Option<(u8, u8)> {
    let t = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (int, frac) = t.split_once('.')?;
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !digits(frac) {
        return None;
    }
    let significant = int.trim_start_matches('0').len() + frac.len();
    if significant > usize::from(MAX_DECIMAL128_PRECISION) {
        return None;
    }
    Some((significant.max(1) as u8, frac.len() as u8))
}

/// A column's index and its `(precision, scale)` as a decimal.
type DecimalColumn = (usize, (u8, u8));

/// What the CSV text pass found ([`csv_text_types`]).
#[derive(Debug, Default)]
struct TextTypes {
    /// Columns typed DOUBLE that are decimal columns (see the module docs).
    decimals: Vec<DecimalColumn>,
    /// Timestamp columns whose every value carries a time-zone offset.
    zoned: Vec<usize>,
}

/// Reads the file once more, as text, for what Arrow's inference does not tell: which
/// DOUBLE columns are decimal columns (with `opts.csv_decimal`) and which timestamp
/// columns carry time-zone offsets (every value, or none: a column mixing the two is
/// an error naming the first value that differs from the column's first value).
fn csv_text_types(
    path: &Path,
    fields: &[Field],
    header: bool,
    opts: &ImportOptions,
) -> Result<TextTypes, ImportError> {
    use datafusion::arrow::csv::ReaderBuilder;
    let text = Arc::new(ArrowSchema::new(
        fields
            .iter()
            .map(|f| Field::new(f.name(), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let file = std::fs::File::open(path).map_err(|e| ImportError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let reader = ReaderBuilder::new(text)
        .with_header(header)
        .with_delimiter(opts.delimiter)
        .with_batch_size(BATCH_ROWS)
        .build(std::io::BufReader::new(file))
        .map_err(|e| ImportError::Format {
            path: path.to_path_buf(),
            message: format!("not readable as CSV: {e}"),
        })?;
    let mut scans: Vec<(usize, DecimalScan)> = fields
        .iter()
        .enumerate()
        .filter(|(_, f)| opts.csv_decimal && f.data_type() == &DataType::Float64)
        .map(|(i, _)| (i, DecimalScan::Unknown))
        .collect();
    let mut zones: Vec<(usize, ZoneScan)> = fields
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(f.data_type(), DataType::Timestamp(..)))
        .map(|(i, _)| (i, ZoneScan::Unknown))
        .collect();
    let mut base = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| ImportError::Format {
            path: path.to_path_buf(),
            message: format!("not readable as CSV: {e}"),
        })?;
        for (i, scan) in &mut scans {
            let col = batch.column(*i).as_string::<i32>();
            for v in col.iter().flatten() {
                *scan = scan.see(v);
                if *scan == DecimalScan::No {
                    break;
                }
            }
        }
        scans.retain(|(_, s)| *s != DecimalScan::No);
        for (i, scan) in &mut zones {
            let col = batch.column(*i).as_string::<i32>();
            for (k, v) in col.iter().enumerate() {
                let Some(v) = v.filter(|v| !v.is_empty()) else {
                    continue;
                };
                let row = base + k as u64;
                let zoned = carries_zone(v);
                match *scan {
                    ZoneScan::Unknown => *scan = ZoneScan::Seen { zoned, row },
                    ZoneScan::Seen { zoned: z, .. } if z == zoned => {}
                    ZoneScan::Seen { row: first, .. } => {
                        let (has, lacks) = if zoned { (row, first) } else { (first, row) };
                        return Err(ImportError::Value {
                            column: fields[*i].name().clone(),
                            row,
                            message: format!(
                                "the timestamp `{v}`: row {has}'s value carries a time-zone \
                                 offset and row {lacks}'s does not (an instant and a local \
                                 time of no zone in one column); give every value an offset \
                                 (`Z` for UTC) or none"
                            ),
                        });
                    }
                }
            }
        }
        base += batch.num_rows() as u64;
        if scans.is_empty() && zones.is_empty() {
            break;
        }
    }
    Ok(TextTypes {
        decimals: scans
            .into_iter()
            .filter_map(|(i, s)| match s {
                DecimalScan::Decimal { precision, scale } => Some((i, (precision, scale))),
                _ => None,
            })
            .collect(),
        zoned: zones
            .into_iter()
            .filter(|(_, z)| matches!(z, ZoneScan::Seen { zoned: true, .. }))
            .map(|(i, _)| i)
            .collect(),
    })
}

/// What a column of the file becomes.
#[derive(Debug, Clone)]
struct Plan {
    column: String,
    ty: ColumnType,
    tz: Option<String>,
    /// The Arrow type the column is cast to before encoding.
    target: DataType,
    /// Nanosecond timestamps: each must be whole microseconds.
    nanos: bool,
    nullable: bool,
}

fn unsupported(column: &str, ty: &DataType, hint: &str) -> ImportError {
    ImportError::UnsupportedType {
        column: column.to_string(),
        ty: ty.clone(),
        hint: hint.to_string(),
    }
}

/// The device column of one Arrow column.
fn column_plan(field: &Field, opts: &ImportOptions) -> Result<Plan, ImportError> {
    let name = field.name();
    let ty = field.data_type();
    let value_ty = match ty {
        DataType::Dictionary(_, v) => v.as_ref(),
        t => t,
    };
    let mut tz = None;
    let mut nanos = false;
    let col = match value_ty {
        DataType::Boolean => ColumnType::Bool,
        DataType::Int8 => ColumnType::Int8,
        DataType::Int16 | DataType::UInt8 => ColumnType::Int16,
        DataType::Int32 | DataType::UInt16 => ColumnType::Int32,
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => ColumnType::Int64,
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => {
            let s = u8::try_from(*s).map_err(|_| {
                unsupported(
                    name,
                    ty,
                    "a negative decimal scale: cast it to a scale of 0 or more",
                )
            })?;
            if *p <= 18 && s <= MAX_DECIMAL_SCALE {
                ColumnType::Decimal { scale: s }
            } else if *p <= MAX_DECIMAL128_PRECISION {
                ColumnType::Decimal128 {
                    precision: *p,
                    scale: s,
                }
            } else {
                return Err(unsupported(
                    name,
                    ty,
                    &format!("a device DECIMAL has at most {MAX_DECIMAL128_PRECISION} digits"),
                ));
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
            None if matches!(value_ty, DataType::Float64) => ColumnType::Float64,
            None => ColumnType::Float32,
        },
        DataType::Date32 | DataType::Date64 => ColumnType::Date,
        DataType::Timestamp(unit, z) => {
            tz = z.as_ref().map(|z| z.to_string());
            nanos = *unit == TimeUnit::Nanosecond;
            ColumnType::Timestamp
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ColumnType::Varchar,
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => ColumnType::Varbinary,
        _ => {
            return Err(unsupported(
                name,
                ty,
                "supported: booleans, integers, floats, decimals, dates, timestamps, strings \
                 and binary",
            ));
        }
    };
    let target = match col {
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Int8 => DataType::Int8,
        ColumnType::Int16 => DataType::Int16,
        ColumnType::Int32 => DataType::Int32,
        ColumnType::Int64 => DataType::Int64,
        ColumnType::Float32 => DataType::Float32,
        ColumnType::Float64 => DataType::Float64,
        ColumnType::Date => DataType::Date32,
        ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        ColumnType::Decimal { scale } => DataType::Decimal128(38, scale as i8),
        ColumnType::Decimal128 { precision, scale } => DataType::Decimal128(precision, scale as i8),
        ColumnType::Varchar | ColumnType::Char(_) => DataType::Utf8,
        ColumnType::Varbinary => DataType::Binary,
    };
    Ok(Plan {
        column: name.clone(),
        ty: col,
        tz,
        target,
        nanos,
        nullable: false,
    })
}

/// Column `c` of a batch as the plan's Arrow type; a value that does not fit is an error
/// naming its row (`base` is the batch's first row in the file).
fn cast_column(b: &RecordBatch, c: usize, plan: &Plan, base: u64) -> Result<ArrayRef, ImportError> {
    let col = b.column(c);
    let bad = |row: usize, message: String| ImportError::Value {
        column: plan.column.clone(),
        row: base + row as u64,
        message,
    };
    let col = match col.data_type() {
        DataType::Timestamp(u, Some(_)) => cast(col, &DataType::Timestamp(*u, None))
            .map_err(|e| bad(0, format!("cannot be read as a timestamp: {e}")))?,
        _ => col.clone(),
    };
    if plan.nanos {
        let ns = col.as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>();
        if let Some(i) = (0..ns.len()).find(|&i| ns.is_valid(i) && ns.value(i) % 1000 != 0) {
            return Err(bad(
                i,
                format!(
                    "the timestamp {} ns has a fraction of a microsecond: a device TIMESTAMP \
                     holds microseconds",
                    ns.value(i)
                ),
            ));
        }
    }
    let arr = if col.data_type() == &plan.target {
        col.clone()
    } else {
        cast(&col, &plan.target)
            .map_err(|e| bad(0, format!("cannot be converted to {}: {e}", plan.ty)))?
    };
    // A value that did not fit (too large, NaN or infinity for a decimal) is NULL now.
    if arr.null_count() > col.null_count() {
        let row = (0..arr.len())
            .find(|&i| arr.is_null(i) && !col.is_null(i))
            .unwrap_or(0);
        return Err(bad(row, format!("the value does not fit {}", plan.ty)));
    }
    Ok(arr)
}

/// Value `i` of `a` (the plan's Arrow type) for the device.
fn value_of(plan: &Plan, a: &ArrayRef, i: usize, row: u64) -> Result<Value, ImportError> {
    use datafusion::arrow::datatypes as t;
    if a.is_null(i) {
        return Ok(Value::Null);
    }
    let bad = |message: String| ImportError::Value {
        column: plan.column.clone(),
        row,
        message,
    };
    Ok(match plan.ty {
        ColumnType::Bool => Value::Bool(a.as_boolean().value(i)),
        ColumnType::Int8 => Value::Int8(a.as_primitive::<t::Int8Type>().value(i)),
        ColumnType::Int16 => Value::Int16(a.as_primitive::<t::Int16Type>().value(i)),
        ColumnType::Int32 => Value::Int32(a.as_primitive::<t::Int32Type>().value(i)),
        ColumnType::Int64 => Value::Int64(a.as_primitive::<t::Int64Type>().value(i)),
        ColumnType::Float32 => {
            Value::Float32(a.as_primitive::<t::Float32Type>().value(i).to_bits())
        }
        ColumnType::Float64 => {
            Value::Float64(a.as_primitive::<t::Float64Type>().value(i).to_bits())
        }
        ColumnType::Date => Value::Date(a.as_primitive::<t::Date32Type>().value(i)),
        ColumnType::Timestamp => {
            Value::Timestamp(a.as_primitive::<t::TimestampMicrosecondType>().value(i))
        }
        ColumnType::Decimal { scale } => {
            let v = a.as_primitive::<t::Decimal128Type>().value(i);
            Value::Decimal(i64::try_from(v).map_err(|_| {
                bad(format!(
                    "{v} (units of 10^-{scale}) does not fit a device DECIMAL (a 64-bit \
                     scaled integer)"
                ))
            })?)
        }
        ColumnType::Decimal128 { .. } => {
            Value::Decimal128(a.as_primitive::<t::Decimal128Type>().value(i))
        }
        ColumnType::Varchar | ColumnType::Char(_) => {
            Value::Varchar(a.as_string::<i32>().value(i).to_string())
        }
        ColumnType::Varbinary => Value::Varbinary(a.as_binary::<i32>().value(i).to_vec()),
    })
}

/// Rows ready for the device: the table schema and a stream of row images converted
/// batch by batch from a source already checked (see the [module docs](self)).
pub struct RowImages {
    schema: Schema,
    plans: Vec<Plan>,
    source: Source,
    rows: u64,
    next: u64,
    batches: Option<Batches>,
    /// Row images of the current batch, back to back, and where each ends.
    buf: Vec<u8>,
    ends: Vec<usize>,
    pos: usize,
}

impl std::fmt::Debug for RowImages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowImages")
            .field("schema", &self.schema)
            .field("rows", &self.rows)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
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

    /// Every row image, in order (reads the source again; for tests and small inputs).
    pub fn all_rows(&self) -> Result<Vec<Vec<u8>>, ImportError> {
        let mut out = Vec::new();
        let mut base = 0u64;
        for b in self.source.batches()? {
            let b = b?;
            let (buf, ends) = encode_batch(&self.schema, &self.plans, &b, base)?;
            let mut s = 0;
            for e in ends {
                out.push(buf[s..e].to_vec());
                s = e;
            }
            base += b.num_rows() as u64;
        }
        Ok(out)
    }

    /// Converts the next batch into `buf`; false at the end (or on a read error, which
    /// the first pass would have reported: the file changed in between).
    fn fill(&mut self) -> bool {
        if self.batches.is_none() {
            match self.source.batches() {
                Ok(b) => self.batches = Some(b),
                Err(_) => return false,
            }
        }
        let Some(it) = self.batches.as_mut() else {
            return false;
        };
        loop {
            let Some(Ok(b)) = it.next() else {
                return false;
            };
            if b.num_rows() == 0 {
                continue;
            }
            match encode_batch(&self.schema, &self.plans, &b, self.next) {
                Ok((buf, ends)) => {
                    self.buf = buf;
                    self.ends = ends;
                    self.pos = 0;
                    return true;
                }
                Err(_) => return false,
            }
        }
    }
}

impl RowSource for RowImages {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        if self.next >= self.rows {
            return false;
        }
        if self.pos >= self.ends.len() && !self.fill() {
            return false;
        }
        let start = if self.pos == 0 {
            0
        } else {
            self.ends[self.pos - 1]
        };
        let end = self.ends[self.pos];
        row.clear();
        row.extend_from_slice(&self.buf[start..end]);
        self.pos += 1;
        self.next += 1;
        true
    }

    fn remaining_rows(&self) -> Option<u64> {
        Some(self.rows - self.next)
    }
}

/// The rows of one batch as row images of `schema`, back to back, with their ends.
fn encode_batch(
    schema: &Schema,
    plans: &[Plan],
    b: &RecordBatch,
    base: u64,
) -> Result<(Vec<u8>, Vec<usize>), ImportError> {
    let arrays = plans
        .iter()
        .enumerate()
        .map(|(c, p)| cast_column(b, c, p, base))
        .collect::<Result<Vec<_>, _>>()?;
    let mut buf = Vec::with_capacity(b.num_rows() * schema.row_width());
    let mut ends = Vec::with_capacity(b.num_rows());
    let mut values = Vec::with_capacity(plans.len());
    let mut img = Vec::new();
    for i in 0..b.num_rows() {
        let row = base + i as u64;
        values.clear();
        for (p, a) in plans.iter().zip(&arrays) {
            values.push(value_of(p, a, i, row)?);
        }
        schema
            .encode_row_into(&values, &mut img)
            .map_err(|e| row_error(schema, &values, row, e))?;
        buf.extend_from_slice(&img);
        ends.push(buf.len());
    }
    Ok((buf, ends))
}

/// A row the schema refused, as an error naming the row (and the column, if one).
fn row_error(schema: &Schema, values: &[Value], row: u64, e: SchemaError) -> ImportError {
    let column = match &e {
        SchemaError::CharTooLong { column, .. }
        | SchemaError::NullNotAllowed { column }
        | SchemaError::TypeMismatch { column, .. }
        | SchemaError::InvalidUtf8 { column } => column.clone(),
        _ => {
            // A row too long: name its longest value's column.
            let longest = values
                .iter()
                .enumerate()
                .max_by_key(|(_, v)| match v {
                    Value::Varchar(s) => s.len(),
                    Value::Varbinary(b) => b.len(),
                    _ => 0,
                })
                .map_or(0, |(c, _)| c);
            schema
                .columns()
                .get(longest)
                .map(|c| c.name.clone())
                .unwrap_or_default()
        }
    };
    ImportError::Value {
        column,
        row,
        message: e.to_string(),
    }
}

/// Types the columns of `source` (with `schema`) and checks every value (first pass).
fn plan_source(
    table: &str,
    schema: &SchemaRef,
    source: Source,
    opts: &ImportOptions,
) -> Result<RowImages, ImportError> {
    if schema.fields().is_empty() {
        return Err(ImportError::NoColumns(source.path()));
    }
    let mut plans = schema
        .fields()
        .iter()
        .map(|f| column_plan(f, opts))
        .collect::<Result<Vec<_>, _>>()?;
    // Pass 1a: which columns hold NULLs (and that every value converts).
    let mut rows = 0u64;
    for b in source.batches()? {
        let b = b?;
        for (c, p) in plans.iter_mut().enumerate() {
            let a = cast_column(&b, c, p, rows)?;
            p.nullable |= a.null_count() > 0;
        }
        rows += b.num_rows() as u64;
    }
    let table_schema = Schema::new(
        table,
        plans
            .iter()
            .map(|p| {
                Column::new(p.column.clone(), p.ty)
                    .with_nullable(p.nullable)
                    .with_tz(p.tz.clone())
            })
            .collect(),
    )?;
    // Pass 1b: every row encodes (row size limits).
    let mut base = 0u64;
    for b in source.batches()? {
        let b = b?;
        encode_batch(&table_schema, &plans, &b, base)?;
        base += b.num_rows() as u64;
    }
    Ok(RowImages {
        schema: table_schema,
        plans,
        source,
        rows,
        next: 0,
        batches: None,
        buf: Vec::new(),
        ends: Vec::new(),
        pos: 0,
    })
}

/// Converts Arrow batches of `schema` (in memory) into the rows of a device table named
/// `table`; every value is checked before this returns. `_null_strings_empty` is kept
/// for callers of the first version (device tables hold NULLs now).
pub fn to_rows(
    table: &str,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    opts: &ImportOptions,
    _null_strings_empty: bool,
    path: &Path,
) -> Result<RowImages, ImportError> {
    if schema.fields().is_empty() {
        return Err(ImportError::NoColumns(path.to_path_buf()));
    }
    plan_source(
        table,
        schema,
        Source::Memory(Arc::new(batches.to_vec())),
        opts,
    )
}

/// Reads `path` (CSV or Parquet, by `csv`) and types and checks it for table `table`
/// (first pass); the rows stream from the file as the device takes them.
pub fn import_file(
    path: &Path,
    table: &str,
    csv: bool,
    opts: &ImportOptions,
) -> Result<RowImages, ImportError> {
    if csv {
        let (schema, header) = csv_schema(path, opts)?;
        let src = Source::Csv {
            path: path.to_path_buf(),
            schema: schema.clone(),
            header,
            delimiter: opts.delimiter,
        };
        plan_source(table, &schema, src, opts)
    } else {
        let schema = parquet_schema(path)?;
        plan_source(table, &schema, Source::Parquet(path.to_path_buf()), opts)
    }
}

#[cfg(test)]
mod tests;

//! Table schemas: column types, named columns, row images.
//!
//! A row is handed between the layers as a *row image*. For a schema whose columns are
//! all fixed-width and `NOT NULL` (every TPC-H and synthetic table: a *fixed* schema)
//! the row image is the columns' values back to back in schema order, with no padding,
//! no null bitmap and no per-row header, exactly the tuple format of smart-ssd §4.1.1
//! (fixed-length strings, decimals times 100 as integers, dates as days since the
//! epoch). Every value is little-endian; the column widths are:
//!
//! | type | width | stored as |
//! |---|---|---|
//! | [`ColumnType::Bool`] | 1 | `0` or `1` |
//! | [`ColumnType::Int8`] / [`ColumnType::Int16`] | 1 / 2 | `i8` / `i16` |
//! | [`ColumnType::Int32`] | 4 | `i32` |
//! | [`ColumnType::Int64`] | 8 | `i64` |
//! | [`ColumnType::Float32`] / [`ColumnType::Float64`] | 4 / 8 | IEEE 754 bits, unscaled |
//! | [`ColumnType::Date`] | 4 | `i32` days since 1970-01-01 (see [`crate::date`]) |
//! | [`ColumnType::Timestamp`] | 8 | `i64` microseconds since 1970-01-01 00:00 UTC |
//! | [`ColumnType::Decimal`] | 8 | `i64` scaled by `10^scale` (TPC-H prices: scale 2, i.e. x100) |
//! | [`ColumnType::Decimal128`] | 16 | `i128` scaled by `10^scale`, precision up to 38 |
//! | [`ColumnType::Char`] | n | n bytes, right-padded with spaces (`b' '`) |
//! | [`ColumnType::Varchar`] / [`ColumnType::Varbinary`] | 4 (slot) | `u16` offset + `u16` length of the bytes, which lie elsewhere |
//!
//! A schema with a nullable column or a variable-length column is *extended*. Its row
//! image is `[null bitmap][slots][variable bytes]`: the bitmap has `ceil(columns / 8)`
//! bytes, bit `c % 8` of byte `c / 8` set when column `c` is NULL (a NULL's slot is
//! zero); the slots are the fixed-width values as above, a variable-length column's slot
//! holding the offset (from the row image's start) and length of its bytes; the bytes
//! of the variable-length values follow the slots in column order, unpadded and
//! untrimmed. [`Schema::row_width`] of an extended schema is the bitmap plus the slots:
//! the smallest row image. A row image is at most 65,535 bytes (the largest page is
//! 64 KiB; a row must fit a page).
//!
//! Choice: fixed schemas keep the format they always had (so their pages, their
//! fingerprints and every figure modeled on them are unchanged); only extended schemas
//! pay for a bitmap and slots. A timestamp's time zone is a property of its column
//! ([`Column::tz`]), as in Arrow: the stored instant is UTC either way.
//!
//! The schema also carries a *fingerprint* (CRC-32C of the table name, column names and
//! types) that every page header records, so a page of another table, or of an older
//! version of this table, is rejected with a typed error instead of being misread.

use std::fmt;

/// Largest decimal scale accepted: `10^18` is the largest power of ten in an `i64`.
pub const MAX_DECIMAL_SCALE: u8 = 18;
/// Largest precision of a [`ColumnType::Decimal128`] (Arrow's Decimal128).
pub const MAX_DECIMAL128_PRECISION: u8 = 38;
/// Largest row image (and variable-length value) in bytes.
pub const MAX_ROW_IMAGE: usize = 65_535;
/// Bytes of a variable-length column's slot (`u16` offset, `u16` length).
pub const VAR_SLOT_LEN: usize = 4;

/// Errors about schemas, column names and row values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A schema needs at least one column.
    #[error("table '{table}' has no columns: a schema needs at least one column")]
    NoColumns {
        /// The table name.
        table: String,
    },
    /// Table or column names must be non-empty.
    #[error("a table or column name in table '{table}' is empty: give every column a name")]
    EmptyName {
        /// The table name (possibly empty itself).
        table: String,
    },
    /// Two columns have the same name.
    #[error("table '{table}' has two columns named '{name}': column names must be unique")]
    DuplicateColumn {
        /// The table name.
        table: String,
        /// The repeated column name.
        name: String,
    },
    /// A `CHAR(0)` column was declared.
    #[error("column '{column}' is CHAR(0): a CHAR column needs a width of at least 1 byte")]
    ZeroWidthChar {
        /// The column name.
        column: String,
    },
    /// A decimal scale larger than [`MAX_DECIMAL_SCALE`].
    #[error(
        "column '{column}' has DECIMAL scale {scale}: the largest scale an i64 can hold is {max}",
        max = MAX_DECIMAL_SCALE
    )]
    DecimalScale {
        /// The column name.
        column: String,
        /// The rejected scale.
        scale: u8,
    },
    /// A column name that the table does not have.
    #[error("table '{table}' has no column '{name}' (its columns are: {available})")]
    UnknownColumn {
        /// The table name.
        table: String,
        /// The name that was looked up.
        name: String,
        /// Comma-separated list of the table's column names.
        available: String,
    },
    /// A column index past the last column.
    #[error("column index {index} is out of range: table '{table}' has {count} columns")]
    ColumnIndex {
        /// The table name.
        table: String,
        /// The rejected index.
        index: usize,
        /// The number of columns.
        count: usize,
    },
    /// A row given as values has the wrong number of values.
    #[error("table '{table}' has {expected} columns but the row has {found} values")]
    Arity {
        /// The table name.
        table: String,
        /// Number of columns.
        expected: usize,
        /// Number of values supplied.
        found: usize,
    },
    /// A value of the wrong type for its column.
    #[error("column '{column}' has type {expected} but was given a {found} value")]
    TypeMismatch {
        /// The column name.
        column: String,
        /// The column's type.
        expected: ColumnType,
        /// The kind of the value supplied.
        found: &'static str,
    },
    /// A string longer than its `CHAR(n)` column.
    #[error(
        "value for column '{column}' is {len} bytes but the column is CHAR({width}): \
         shorten the value or widen the column"
    )]
    CharTooLong {
        /// The column name.
        column: String,
        /// The column width.
        width: usize,
        /// The value's length.
        len: usize,
    },
    /// A row image whose length is not the schema's row width.
    #[error(
        "row image for table '{table}' is {found} bytes but rows of this table are {expected} bytes"
    )]
    RowWidth {
        /// The table name.
        table: String,
        /// The schema's row width.
        expected: usize,
        /// The length supplied.
        found: usize,
    },
    /// A numeric operation on a `CHAR` column.
    #[error("column '{column}' is {ty}, not a numeric column (INT32, INT64, DATE or DECIMAL)")]
    NotNumeric {
        /// The column name.
        column: String,
        /// The column's type.
        ty: ColumnType,
    },
    /// A DECIMAL128 precision outside 1..=38 or a scale larger than its precision.
    #[error(
        "column '{column}' is DECIMAL({precision}, {scale}): the precision must be 1 ..= {max} \
         and the scale at most the precision",
        max = MAX_DECIMAL128_PRECISION
    )]
    Decimal128Precision {
        /// The column name.
        column: String,
        /// The rejected precision.
        precision: u8,
        /// The scale.
        scale: u8,
    },
    /// A time zone on a column that is not a timestamp.
    #[error("column '{column}' is {ty}: only TIMESTAMP columns carry a time zone")]
    TimeZoneNotTimestamp {
        /// The column name.
        column: String,
        /// The column's type.
        ty: ColumnType,
    },
    /// A NULL for a `NOT NULL` column.
    #[error("column '{column}' is NOT NULL but was given a NULL")]
    NullNotAllowed {
        /// The column name.
        column: String,
    },
    /// A row whose image would exceed [`MAX_ROW_IMAGE`] bytes.
    #[error(
        "a row of table '{table}' would take {len} bytes: a row (its strings included) \
         must fit {max} bytes to fit a page",
        max = MAX_ROW_IMAGE
    )]
    RowTooLong {
        /// The table name.
        table: String,
        /// The row image's length.
        len: usize,
    },
    /// An extended row image whose slots do not describe its bytes.
    #[error("row image for table '{table}' is malformed: {reason}")]
    BadRowImage {
        /// The table name.
        table: String,
        /// What is wrong.
        reason: String,
    },
    /// A VARCHAR value that is not UTF-8.
    #[error("value for column '{column}' is not valid UTF-8 (VARCHAR holds text; use VARBINARY)")]
    InvalidUtf8 {
        /// The column name.
        column: String,
    },
}

/// The type of a column. Every type but VARCHAR and VARBINARY has a fixed width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// 32-bit signed integer, 4 bytes.
    Int32,
    /// 64-bit signed integer, 8 bytes.
    Int64,
    /// Date as `i32` days since 1970-01-01, 4 bytes.
    Date,
    /// Fixed-point decimal stored as an `i64` equal to `value * 10^scale`, 8 bytes.
    Decimal {
        /// Number of decimal digits after the point (TPC-H money: 2).
        scale: u8,
    },
    /// Fixed-length byte string of `n` bytes, right-padded with spaces.
    Char(u16),
    /// A truth value, 1 byte (`0` false, `1` true).
    Bool,
    /// 8-bit signed integer, 1 byte.
    Int8,
    /// 16-bit signed integer, 2 bytes.
    Int16,
    /// IEEE 754 single precision, 4 bytes, stored as its bits (never scaled).
    Float32,
    /// IEEE 754 double precision, 8 bytes, stored as its bits (never scaled).
    Float64,
    /// Instant as `i64` microseconds since 1970-01-01 00:00 UTC, 8 bytes; the column's
    /// time zone, if any, is [`Column::tz`].
    Timestamp,
    /// Fixed-point decimal of up to 38 digits (Arrow's Decimal128), stored as an `i128`
    /// equal to `value * 10^scale`, 16 bytes.
    Decimal128 {
        /// Total digits, 1 ..= 38.
        precision: u8,
        /// Digits after the point, at most the precision.
        scale: u8,
    },
    /// Variable-length UTF-8 text (no padding, no trimming).
    Varchar,
    /// Variable-length bytes.
    Varbinary,
}

impl ColumnType {
    /// Width of a value's slot in a row image and in a page, in bytes (for VARCHAR and
    /// VARBINARY the 4-byte offset and length: [`VAR_SLOT_LEN`]).
    pub const fn width(self) -> usize {
        match self {
            ColumnType::Bool | ColumnType::Int8 => 1,
            ColumnType::Int16 => 2,
            ColumnType::Int32 | ColumnType::Date | ColumnType::Float32 => 4,
            ColumnType::Int64
            | ColumnType::Decimal { .. }
            | ColumnType::Float64
            | ColumnType::Timestamp => 8,
            ColumnType::Decimal128 { .. } => 16,
            ColumnType::Char(n) => n as usize,
            ColumnType::Varchar | ColumnType::Varbinary => VAR_SLOT_LEN,
        }
    }

    /// True for the types that [`decode_numeric`] reads exactly as an `i64`: the
    /// integers, DATE, TIMESTAMP and the 8-byte DECIMAL (not BOOLEAN, floats,
    /// DECIMAL128 or strings).
    pub const fn is_numeric(self) -> bool {
        matches!(
            self,
            ColumnType::Int8
                | ColumnType::Int16
                | ColumnType::Int32
                | ColumnType::Int64
                | ColumnType::Date
                | ColumnType::Timestamp
                | ColumnType::Decimal { .. }
        )
    }

    /// True for VARCHAR and VARBINARY: the value lies outside its slot.
    pub const fn is_variable(self) -> bool {
        matches!(self, ColumnType::Varchar | ColumnType::Varbinary)
    }

    /// True for the types of the original fixed format (INT32, INT64, DATE, DECIMAL,
    /// CHAR): a schema of only these, all `NOT NULL`, keeps the original page layout.
    pub const fn is_classic(self) -> bool {
        matches!(
            self,
            ColumnType::Int32
                | ColumnType::Int64
                | ColumnType::Date
                | ColumnType::Decimal { .. }
                | ColumnType::Char(_)
        )
    }

    /// Stable one-byte tag, used in the schema fingerprint and the catalog.
    pub const fn tag(self) -> u8 {
        match self {
            ColumnType::Int32 => 1,
            ColumnType::Int64 => 2,
            ColumnType::Date => 3,
            ColumnType::Decimal { .. } => 4,
            ColumnType::Char(_) => 5,
            ColumnType::Bool => 6,
            ColumnType::Int8 => 7,
            ColumnType::Int16 => 8,
            ColumnType::Float32 => 9,
            ColumnType::Float64 => 10,
            ColumnType::Timestamp => 11,
            ColumnType::Decimal128 { .. } => 12,
            ColumnType::Varchar => 13,
            ColumnType::Varbinary => 14,
        }
    }

    /// Type parameter (decimal scale, char width, or `precision << 8 | scale`), used in
    /// the schema fingerprint and the catalog.
    pub const fn param(self) -> u16 {
        match self {
            ColumnType::Decimal { scale } => scale as u16,
            ColumnType::Char(n) => n,
            ColumnType::Decimal128 { precision, scale } => (precision as u16) << 8 | scale as u16,
            _ => 0,
        }
    }

    /// The type of a [`ColumnType::tag`] and [`ColumnType::param`], if the tag is one.
    pub const fn from_tag(tag: u8, param: u16) -> Option<ColumnType> {
        Some(match tag {
            1 => ColumnType::Int32,
            2 => ColumnType::Int64,
            3 => ColumnType::Date,
            4 => ColumnType::Decimal { scale: param as u8 },
            5 => ColumnType::Char(param),
            6 => ColumnType::Bool,
            7 => ColumnType::Int8,
            8 => ColumnType::Int16,
            9 => ColumnType::Float32,
            10 => ColumnType::Float64,
            11 => ColumnType::Timestamp,
            12 => ColumnType::Decimal128 {
                precision: (param >> 8) as u8,
                scale: param as u8,
            },
            13 => ColumnType::Varchar,
            14 => ColumnType::Varbinary,
            _ => return None,
        })
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnType::Int32 => f.write_str("INT32"),
            ColumnType::Int64 => f.write_str("INT64"),
            ColumnType::Date => f.write_str("DATE"),
            ColumnType::Decimal { scale } => write!(f, "DECIMAL(scale {scale})"),
            ColumnType::Char(n) => write!(f, "CHAR({n})"),
            ColumnType::Bool => f.write_str("BOOLEAN"),
            ColumnType::Int8 => f.write_str("INT8"),
            ColumnType::Int16 => f.write_str("INT16"),
            ColumnType::Float32 => f.write_str("FLOAT32"),
            ColumnType::Float64 => f.write_str("FLOAT64"),
            ColumnType::Timestamp => f.write_str("TIMESTAMP"),
            ColumnType::Decimal128 { precision, scale } => {
                write!(f, "DECIMAL({precision}, {scale})")
            }
            ColumnType::Varchar => f.write_str("VARCHAR"),
            ColumnType::Varbinary => f.write_str("VARBINARY"),
        }
    }
}

/// Reads a numeric value (see [`ColumnType::is_numeric`]) from its stored bytes and
/// widens it to `i64`. Returns `None` for the other types or if `bytes` is shorter than
/// the type's width.
#[inline]
pub fn decode_numeric(ty: ColumnType, bytes: &[u8]) -> Option<i64> {
    match ty {
        ColumnType::Int32 | ColumnType::Date => {
            let b: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
            Some(i64::from(i32::from_le_bytes(b)))
        }
        ColumnType::Int64 | ColumnType::Decimal { .. } | ColumnType::Timestamp => {
            let b: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
            Some(i64::from_le_bytes(b))
        }
        ColumnType::Int8 => Some(i64::from(*bytes.first()? as i8)),
        ColumnType::Int16 => {
            let b: [u8; 2] = bytes.get(..2)?.try_into().ok()?;
            Some(i64::from(i16::from_le_bytes(b)))
        }
        _ => None,
    }
}

/// Strips the trailing space padding from a stored `CHAR` value.
pub fn trim_char(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|&b| b != b' ').map_or(0, |p| p + 1);
    &bytes[..end]
}

/// One named column.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Column {
    /// Column name, unique within its table.
    pub name: String,
    /// Column type.
    pub ty: ColumnType,
    /// Whether the column may hold NULL (false: `NOT NULL`).
    pub nullable: bool,
    /// A TIMESTAMP column's time zone as Arrow names it (`"UTC"`, `"+02:00"`,
    /// `"Europe/Paris"`), or `None` for a timestamp without time zone.
    pub tz: Option<String>,
}

impl Column {
    /// A `NOT NULL` column with a name and a type.
    pub fn new(name: impl Into<String>, ty: ColumnType) -> Self {
        Column {
            name: name.into(),
            ty,
            nullable: false,
            tz: None,
        }
    }

    /// The same column, nullable or not.
    pub fn with_nullable(mut self, nullable: bool) -> Self {
        self.nullable = nullable;
        self
    }

    /// The same column with a time zone (TIMESTAMP columns only; checked by
    /// [`Schema::new`]).
    pub fn with_tz(mut self, tz: Option<String>) -> Self {
        self.tz = tz;
        self
    }
}

/// A typed value, used by the row-at-a-time convenience API ([`Schema::encode_row_vec`],
/// [`Schema::decode_row`]). Hot paths work on row images and column views instead.
/// Floating-point values are held as their IEEE bits, so a value compares and hashes
/// exactly (`-0.0` and `0.0` differ, a NaN equals itself).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
    /// SQL NULL, of any type.
    Null,
    /// Value of an `INT32` column.
    Int32(i32),
    /// Value of an `INT64` column.
    Int64(i64),
    /// Value of a `DATE` column: days since 1970-01-01.
    Date(i32),
    /// Value of a `DECIMAL` column: the scaled integer (`12.34` at scale 2 is `1234`).
    Decimal(i64),
    /// Value of a `CHAR(n)` column. When encoding, at most `n` bytes, padded with
    /// spaces; when decoding, exactly the `n` stored bytes, padding included.
    Char(Vec<u8>),
    /// Value of a `BOOLEAN` column.
    Bool(bool),
    /// Value of an `INT8` column.
    Int8(i8),
    /// Value of an `INT16` column.
    Int16(i16),
    /// Value of a `FLOAT32` column: its IEEE bits (`f32::to_bits`).
    Float32(u32),
    /// Value of a `FLOAT64` column: its IEEE bits (`f64::to_bits`).
    Float64(u64),
    /// Value of a `TIMESTAMP` column: microseconds since the epoch (UTC).
    Timestamp(i64),
    /// Value of a `DECIMAL128` column: the scaled integer.
    Decimal128(i128),
    /// Value of a `VARCHAR` column (exactly the bytes given: no padding, no trimming).
    Varchar(String),
    /// Value of a `VARBINARY` column.
    Varbinary(Vec<u8>),
}

impl Value {
    /// Short kind name used in error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Int32(_) => "INT32",
            Value::Int64(_) => "INT64",
            Value::Date(_) => "DATE",
            Value::Decimal(_) => "DECIMAL",
            Value::Char(_) => "CHAR",
            Value::Bool(_) => "BOOLEAN",
            Value::Int8(_) => "INT8",
            Value::Int16(_) => "INT16",
            Value::Float32(_) => "FLOAT32",
            Value::Float64(_) => "FLOAT64",
            Value::Timestamp(_) => "TIMESTAMP",
            Value::Decimal128(_) => "DECIMAL128",
            Value::Varchar(_) => "VARCHAR",
            Value::Varbinary(_) => "VARBINARY",
        }
    }

    /// The value widened to `i64`, or `None` for the types not held as one (see
    /// [`ColumnType::is_numeric`]) and NULL.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int32(v) | Value::Date(v) => Some(i64::from(v)),
            Value::Int64(v) | Value::Decimal(v) | Value::Timestamp(v) => Some(v),
            Value::Int8(v) => Some(i64::from(v)),
            Value::Int16(v) => Some(i64::from(v)),
            _ => None,
        }
    }

    /// True for [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// A validated table schema: named, typed columns.
///
/// Column `i`'s slot occupies bytes `offset(i) .. offset(i) + width(i)` of a row image
/// of at least `row_width()` bytes (exactly, for a fixed schema).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    name: String,
    columns: Vec<Column>,
    offsets: Vec<usize>,
    row_width: usize,
    null_bytes: usize,
    variable: Vec<usize>,
    fingerprint: u32,
}

impl Schema {
    /// Builds and validates a schema: at least one column, non-empty unique names,
    /// `CHAR` widths of at least 1, decimal scales of at most [`MAX_DECIMAL_SCALE`],
    /// DECIMAL128 precisions of 1 ..= 38 with a scale at most the precision, time zones
    /// only on timestamps.
    pub fn new(name: impl Into<String>, columns: Vec<Column>) -> Result<Self, SchemaError> {
        let name = name.into();
        if name.is_empty() {
            return Err(SchemaError::EmptyName { table: name });
        }
        if columns.is_empty() {
            return Err(SchemaError::NoColumns { table: name });
        }
        let extended = columns.iter().any(|c| c.nullable || c.ty.is_variable());
        let null_bytes = if extended {
            columns.len().div_ceil(8)
        } else {
            0
        };
        let mut offsets = Vec::with_capacity(columns.len());
        let mut variable = Vec::new();
        let mut row_width = null_bytes;
        for (i, c) in columns.iter().enumerate() {
            if c.name.is_empty() {
                return Err(SchemaError::EmptyName { table: name });
            }
            if columns[..i].iter().any(|p| p.name == c.name) {
                return Err(SchemaError::DuplicateColumn {
                    table: name,
                    name: c.name.clone(),
                });
            }
            match c.ty {
                ColumnType::Char(0) => {
                    return Err(SchemaError::ZeroWidthChar {
                        column: c.name.clone(),
                    });
                }
                ColumnType::Decimal { scale } if scale > MAX_DECIMAL_SCALE => {
                    return Err(SchemaError::DecimalScale {
                        column: c.name.clone(),
                        scale,
                    });
                }
                ColumnType::Decimal128 { precision, scale }
                    if precision == 0
                        || precision > MAX_DECIMAL128_PRECISION
                        || scale > precision =>
                {
                    return Err(SchemaError::Decimal128Precision {
                        column: c.name.clone(),
                        precision,
                        scale,
                    });
                }
                _ => {}
            }
            if c.tz.is_some() && c.ty != ColumnType::Timestamp {
                return Err(SchemaError::TimeZoneNotTimestamp {
                    column: c.name.clone(),
                    ty: c.ty,
                });
            }
            if c.ty.is_variable() {
                variable.push(i);
            }
            offsets.push(row_width);
            row_width += c.ty.width();
        }
        if row_width > MAX_ROW_IMAGE {
            return Err(SchemaError::RowTooLong {
                table: name,
                len: row_width,
            });
        }
        let fingerprint = fingerprint(&name, &columns);
        Ok(Schema {
            name,
            columns,
            offsets,
            row_width,
            null_bytes,
            variable,
            fingerprint,
        })
    }

    /// The table name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The columns, in storage order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Number of columns.
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    /// Always false: a valid schema has at least one column.
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// Width of one row image in bytes for a fixed schema (the sum of the column
    /// widths); for an extended schema the null bitmap plus the slots, the smallest
    /// row image.
    pub fn row_width(&self) -> usize {
        self.row_width
    }

    /// True if the schema has a nullable or a variable-length column (see the module
    /// docs): its row images carry a null bitmap and its pages use format version 2.
    pub fn is_extended(&self) -> bool {
        self.null_bytes > 0
    }

    /// Bytes of the null bitmap at the start of a row image (0 for a fixed schema).
    pub fn null_bytes(&self) -> usize {
        self.null_bytes
    }

    /// Indices of the variable-length columns, in column order.
    pub fn variable_columns(&self) -> &[usize] {
        &self.variable
    }

    /// Identifier of this schema recorded in every page header: CRC-32C over the table
    /// name, the column names and the column types (and, for extended schemas, the
    /// nullability and time zones).
    pub fn fingerprint(&self) -> u32 {
        self.fingerprint
    }

    /// The column at `index`, with a typed error if there is none.
    pub fn column(&self, index: usize) -> Result<&Column, SchemaError> {
        self.columns
            .get(index)
            .ok_or_else(|| SchemaError::ColumnIndex {
                table: self.name.clone(),
                index,
                count: self.columns.len(),
            })
    }

    /// Byte offset of column `index`'s slot within a row image.
    pub fn offset(&self, index: usize) -> Result<usize, SchemaError> {
        self.column(index)?;
        Ok(self.offsets[index])
    }

    /// All column offsets, in column order.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Index of the column called `name`; [`SchemaError::UnknownColumn`] lists the
    /// table's columns if there is no such column. Names are matched exactly.
    pub fn column_index(&self, name: &str) -> Result<usize, SchemaError> {
        self.columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| SchemaError::UnknownColumn {
                table: self.name.clone(),
                name: name.to_string(),
                available: self
                    .columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Checks that `row` is one well-formed row image: exactly `row_width()` bytes for
    /// a fixed schema; for an extended schema the slots, NULL flags and variable bytes
    /// agree (values in column order right after the slots, nothing after them).
    pub fn check_row(&self, row: &[u8]) -> Result<(), SchemaError> {
        if !self.is_extended() {
            return if row.len() == self.row_width {
                Ok(())
            } else {
                Err(SchemaError::RowWidth {
                    table: self.name.clone(),
                    expected: self.row_width,
                    found: row.len(),
                })
            };
        }
        if row.len() < self.row_width {
            return Err(SchemaError::RowWidth {
                table: self.name.clone(),
                expected: self.row_width,
                found: row.len(),
            });
        }
        let bad = |reason: String| SchemaError::BadRowImage {
            table: self.name.clone(),
            reason,
        };
        for (c, col) in self.columns.iter().enumerate() {
            if row_is_null(row, c) && !col.nullable {
                return Err(bad(format!(
                    "NOT NULL column '{}' is marked NULL",
                    col.name
                )));
            }
        }
        let mut next = self.row_width;
        for &c in &self.variable {
            let (off, len) = var_slot(row, self.offsets[c]);
            if row_is_null(row, c) {
                if (off, len) != (0, 0) {
                    return Err(bad(format!(
                        "NULL column '{}' has a value",
                        self.columns[c].name
                    )));
                }
                continue;
            }
            if off != next || off + len > row.len() {
                return Err(bad(format!(
                    "column '{}' claims bytes {off}..{} of {} (expected to start at {next})",
                    self.columns[c].name,
                    off + len,
                    row.len()
                )));
            }
            next = off + len;
        }
        if next != row.len() {
            return Err(bad(format!(
                "{} bytes after the last value",
                row.len() - next
            )));
        }
        Ok(())
    }

    /// Encodes typed values into the row image `out` of a fixed schema (which must be
    /// `row_width()` bytes). `CHAR` values are padded with spaces; a value longer than
    /// its column is an error. On error `out` may be partly written. An extended schema
    /// encodes with [`Schema::encode_row_into`].
    pub fn encode_row(&self, values: &[Value], out: &mut [u8]) -> Result<(), SchemaError> {
        if self.is_extended() || out.len() != self.row_width {
            return Err(SchemaError::RowWidth {
                table: self.name.clone(),
                expected: self.row_width,
                found: out.len(),
            });
        }
        let mut v = Vec::with_capacity(self.row_width);
        self.encode_row_into(values, &mut v)?;
        out.copy_from_slice(&v);
        Ok(())
    }

    /// Encodes typed values into a row image in `out` (cleared first), for any schema.
    /// Errors name the column: a value of the wrong type, a NULL in a `NOT NULL`
    /// column, a `CHAR` value too long, a row longer than [`MAX_ROW_IMAGE`].
    pub fn encode_row_into(&self, values: &[Value], out: &mut Vec<u8>) -> Result<(), SchemaError> {
        if values.len() != self.columns.len() {
            return Err(SchemaError::Arity {
                table: self.name.clone(),
                expected: self.columns.len(),
                found: values.len(),
            });
        }
        out.clear();
        out.resize(self.row_width, 0);
        for (c, ((col, &off), value)) in self
            .columns
            .iter()
            .zip(&self.offsets)
            .zip(values)
            .enumerate()
        {
            let w = col.ty.width();
            let mismatch = || SchemaError::TypeMismatch {
                column: col.name.clone(),
                expected: col.ty,
                found: value.kind(),
            };
            let mut var: Option<&[u8]> = None;
            match (col.ty, value) {
                (_, Value::Null) => {
                    if !col.nullable {
                        return Err(SchemaError::NullNotAllowed {
                            column: col.name.clone(),
                        });
                    }
                    out[c / 8] |= 1 << (c % 8);
                }
                (ColumnType::Int32, Value::Int32(v)) | (ColumnType::Date, Value::Date(v)) => {
                    out[off..off + w].copy_from_slice(&v.to_le_bytes());
                }
                (ColumnType::Int64, Value::Int64(v))
                | (ColumnType::Decimal { .. }, Value::Decimal(v))
                | (ColumnType::Timestamp, Value::Timestamp(v)) => {
                    out[off..off + w].copy_from_slice(&v.to_le_bytes());
                }
                (ColumnType::Bool, Value::Bool(v)) => out[off] = u8::from(*v),
                (ColumnType::Int8, Value::Int8(v)) => out[off] = *v as u8,
                (ColumnType::Int16, Value::Int16(v)) => {
                    out[off..off + w].copy_from_slice(&v.to_le_bytes());
                }
                (ColumnType::Float32, Value::Float32(v)) => {
                    out[off..off + w].copy_from_slice(&v.to_le_bytes());
                }
                (ColumnType::Float64, Value::Float64(v)) => {
                    out[off..off + w].copy_from_slice(&v.to_le_bytes());
                }
                (ColumnType::Decimal128 { .. }, Value::Decimal128(v)) => {
                    out[off..off + w].copy_from_slice(&v.to_le_bytes());
                }
                (ColumnType::Char(n), Value::Char(bytes)) => {
                    if bytes.len() > usize::from(n) {
                        return Err(SchemaError::CharTooLong {
                            column: col.name.clone(),
                            width: usize::from(n),
                            len: bytes.len(),
                        });
                    }
                    out[off..off + bytes.len()].copy_from_slice(bytes);
                    out[off + bytes.len()..off + w].fill(b' ');
                }
                (ColumnType::Varchar, Value::Varchar(s)) => var = Some(s.as_bytes()),
                (ColumnType::Varbinary, Value::Varbinary(b)) => var = Some(b),
                _ => return Err(mismatch()),
            }
            if let Some(bytes) = var {
                let start = out.len();
                if start + bytes.len() > MAX_ROW_IMAGE {
                    return Err(SchemaError::RowTooLong {
                        table: self.name.clone(),
                        len: start + bytes.len(),
                    });
                }
                out.extend_from_slice(bytes);
                // Both fit a u16: the row image is at most MAX_ROW_IMAGE bytes.
                out[off..off + 2].copy_from_slice(&(start as u16).to_le_bytes());
                out[off + 2..off + 4].copy_from_slice(&(bytes.len() as u16).to_le_bytes());
            }
        }
        Ok(())
    }

    /// Encodes typed values into a new row image.
    pub fn encode_row_vec(&self, values: &[Value]) -> Result<Vec<u8>, SchemaError> {
        let mut out = Vec::with_capacity(self.row_width);
        self.encode_row_into(values, &mut out)?;
        Ok(out)
    }

    /// The stored bytes of column `index` in the row image `row` (a variable-length
    /// value's own bytes), or `None` if the value is NULL. The row must have passed
    /// [`Schema::check_row`]; out-of-range slots read as empty, never panic.
    pub fn value_bytes<'r>(&self, row: &'r [u8], index: usize) -> Option<&'r [u8]> {
        let col = self.columns.get(index)?;
        if self.is_extended() && row_is_null(row, index) {
            return None;
        }
        let off = self.offsets[index];
        if col.ty.is_variable() {
            let (o, l) = var_slot(row, off);
            Some(row.get(o..o + l).unwrap_or(&[]))
        } else {
            row.get(off..off + col.ty.width())
        }
    }

    /// Reads column `index` of the row image `row` as a typed value.
    pub fn value(&self, row: &[u8], index: usize) -> Result<Value, SchemaError> {
        self.check_row(row)?;
        let col = self.column(index)?;
        Ok(match self.value_bytes(row, index) {
            None => Value::Null,
            Some(bytes) => value_from_bytes(col.ty, bytes),
        })
    }

    /// Decodes a whole row image into typed values (`CHAR` values keep their padding).
    pub fn decode_row(&self, row: &[u8]) -> Result<Vec<Value>, SchemaError> {
        self.check_row(row)?;
        Ok(self
            .columns
            .iter()
            .enumerate()
            .map(|(c, col)| match self.value_bytes(row, c) {
                None => Value::Null,
                Some(bytes) => value_from_bytes(col.ty, bytes),
            })
            .collect())
    }
}

/// True if bit `c` of a row image's null bitmap is set (the row must belong to an
/// extended schema).
#[inline]
pub fn row_is_null(row: &[u8], c: usize) -> bool {
    row.get(c / 8).is_some_and(|b| b & (1 << (c % 8)) != 0)
}

/// The `(offset, length)` held in a variable-length slot at `off` (zeros if out of
/// range).
#[inline]
pub fn var_slot(bytes: &[u8], off: usize) -> (usize, usize) {
    match bytes.get(off..off + VAR_SLOT_LEN) {
        Some(s) => (
            usize::from(u16::from_le_bytes([s[0], s[1]])),
            usize::from(u16::from_le_bytes([s[2], s[3]])),
        ),
        None => (0, 0),
    }
}

/// Typed value from a value's stored bytes (`ty.width()` bytes, or a variable-length
/// value's own bytes). A VARCHAR that is not UTF-8 (a corrupt page that passed its
/// checks unverified) becomes its lossy conversion rather than a panic.
pub fn value_from_bytes(ty: ColumnType, bytes: &[u8]) -> Value {
    let num = decode_numeric(ty, bytes).unwrap_or(0);
    let arr = |n: usize| -> [u8; 16] {
        let mut a = [0u8; 16];
        let m = bytes.len().min(n);
        a[..m].copy_from_slice(&bytes[..m]);
        a
    };
    match ty {
        // The casts are exact: these values were read from fields of their width.
        ColumnType::Int32 => Value::Int32(num as i32),
        ColumnType::Date => Value::Date(num as i32),
        ColumnType::Int64 => Value::Int64(num),
        ColumnType::Decimal { .. } => Value::Decimal(num),
        ColumnType::Timestamp => Value::Timestamp(num),
        ColumnType::Int8 => Value::Int8(num as i8),
        ColumnType::Int16 => Value::Int16(num as i16),
        ColumnType::Char(_) => Value::Char(bytes.to_vec()),
        ColumnType::Bool => Value::Bool(bytes.first().is_some_and(|&b| b != 0)),
        ColumnType::Float32 => {
            let a = arr(4);
            Value::Float32(u32::from_le_bytes([a[0], a[1], a[2], a[3]]))
        }
        ColumnType::Float64 => {
            let a = arr(8);
            Value::Float64(u64::from_le_bytes([
                a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
            ]))
        }
        ColumnType::Decimal128 { .. } => Value::Decimal128(i128::from_le_bytes(arr(16))),
        ColumnType::Varchar => Value::Varchar(String::from_utf8_lossy(bytes).into_owned()),
        ColumnType::Varbinary => Value::Varbinary(bytes.to_vec()),
    }
}

fn fingerprint(name: &str, columns: &[Column]) -> u32 {
    let mut crc = crc32c::crc32c(b"csd-schema-v1");
    let mut put = |bytes: &[u8]| crc = crc32c::crc32c_append(crc, bytes);
    put(&(name.len() as u64).to_le_bytes());
    put(name.as_bytes());
    put(&(columns.len() as u64).to_le_bytes());
    for c in columns {
        put(&(c.name.len() as u64).to_le_bytes());
        put(c.name.as_bytes());
        put(&[c.ty.tag()]);
        put(&c.ty.param().to_le_bytes());
        // Only what the original format lacked: classic NOT NULL columns hash as
        // they always did, so the fingerprints of existing tables are unchanged.
        if c.nullable {
            put(b"null");
        }
        if let Some(tz) = &c.tz {
            put(&(tz.len() as u64).to_le_bytes());
            put(tz.as_bytes());
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Schema {
        Schema::new(
            "t",
            vec![
                Column::new("a", ColumnType::Int32),
                Column::new("b", ColumnType::Int64),
                Column::new("d", ColumnType::Date),
                Column::new("m", ColumnType::Decimal { scale: 2 }),
                Column::new("s", ColumnType::Char(5)),
            ],
        )
        .expect("valid schema")
    }

    #[test]
    fn widths_and_offsets() {
        let s = sample();
        assert_eq!(s.row_width(), 4 + 8 + 4 + 8 + 5);
        assert_eq!(s.offsets(), &[0, 4, 12, 16, 24]);
        assert_eq!(s.offset(4), Ok(24));
        assert!(s.offset(5).is_err());
        assert_eq!(s.len(), 5);
        assert!(!s.is_empty());
    }

    #[test]
    fn lookup_by_name() {
        let s = sample();
        assert_eq!(s.column_index("m"), Ok(3));
        let err = s.column_index("zz").unwrap_err();
        assert_eq!(
            err,
            SchemaError::UnknownColumn {
                table: "t".into(),
                name: "zz".into(),
                available: "a, b, d, m, s".into()
            }
        );
        assert!(err.to_string().contains("a, b, d, m, s"));
    }

    #[test]
    fn invalid_schemas() {
        assert!(matches!(
            Schema::new("t", vec![]),
            Err(SchemaError::NoColumns { .. })
        ));
        assert!(matches!(
            Schema::new("", vec![Column::new("a", ColumnType::Int32)]),
            Err(SchemaError::EmptyName { .. })
        ));
        assert!(matches!(
            Schema::new("t", vec![Column::new("", ColumnType::Int32)]),
            Err(SchemaError::EmptyName { .. })
        ));
        assert!(matches!(
            Schema::new(
                "t",
                vec![
                    Column::new("a", ColumnType::Int32),
                    Column::new("a", ColumnType::Int64)
                ]
            ),
            Err(SchemaError::DuplicateColumn { .. })
        ));
        assert!(matches!(
            Schema::new("t", vec![Column::new("a", ColumnType::Char(0))]),
            Err(SchemaError::ZeroWidthChar { .. })
        ));
        assert!(matches!(
            Schema::new(
                "t",
                vec![Column::new("a", ColumnType::Decimal { scale: 19 })]
            ),
            Err(SchemaError::DecimalScale { .. })
        ));
    }

    #[test]
    fn encode_decode_row() {
        let s = sample();
        let values = vec![
            Value::Int32(-7),
            Value::Int64(1 << 40),
            Value::Date(8035),
            Value::Decimal(-1234),
            Value::Char(b"ab".to_vec()),
        ];
        let row = s.encode_row_vec(&values).expect("encodes");
        assert_eq!(&row[24..], b"ab   ");
        let back = s.decode_row(&row).expect("decodes");
        assert_eq!(back[..4], values[..4]);
        assert_eq!(back[4], Value::Char(b"ab   ".to_vec()));
        assert_eq!(s.value(&row, 3), Ok(Value::Decimal(-1234)));
        assert_eq!(trim_char(b"ab   "), b"ab");
        assert_eq!(trim_char(b"    "), b"");
    }

    #[test]
    fn encode_errors() {
        let s = sample();
        let mut row = vec![0u8; s.row_width()];
        assert!(matches!(
            s.encode_row(&[Value::Int32(1)], &mut row),
            Err(SchemaError::Arity { .. })
        ));
        let mut bad = vec![
            Value::Int64(1),
            Value::Int64(1),
            Value::Date(0),
            Value::Decimal(0),
            Value::Char(vec![]),
        ];
        assert!(matches!(
            s.encode_row(&bad, &mut row),
            Err(SchemaError::TypeMismatch { .. })
        ));
        bad[0] = Value::Int32(1);
        bad[4] = Value::Char(b"toolong".to_vec());
        assert!(matches!(
            s.encode_row(&bad, &mut row),
            Err(SchemaError::CharTooLong { .. })
        ));
        assert!(matches!(
            s.encode_row(&bad, &mut row[1..]),
            Err(SchemaError::RowWidth { .. })
        ));
        assert!(s.decode_row(&row[..3]).is_err());
    }

    #[test]
    fn fingerprint_distinguishes_schemas() {
        let a = sample();
        let b = Schema::new(
            "t",
            vec![
                Column::new("a", ColumnType::Int32),
                Column::new("b", ColumnType::Int64),
                Column::new("d", ColumnType::Date),
                Column::new("m", ColumnType::Decimal { scale: 3 }),
                Column::new("s", ColumnType::Char(5)),
            ],
        )
        .expect("valid");
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint(), sample().fingerprint());
    }
}

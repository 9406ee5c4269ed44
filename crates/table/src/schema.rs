//! Table schemas: fixed-width column types, named columns, row images.
//!
//! A row is stored as a fixed-width *row image*: the columns' values back to back in
//! schema order, with no padding, no null bitmap and no per-row header. Every value is
//! little-endian; the column widths are:
//!
//! | type | width | stored as |
//! |---|---|---|
//! | [`ColumnType::Int32`] | 4 | `i32` |
//! | [`ColumnType::Int64`] | 8 | `i64` |
//! | [`ColumnType::Date`] | 4 | `i32` days since 1970-01-01 (see [`crate::date`]) |
//! | [`ColumnType::Decimal`] | 8 | `i64` scaled by `10^scale` (TPC-H prices: scale 2, i.e. x100) |
//! | [`ColumnType::Char`] | n | n bytes, right-padded with spaces (`b' '`) |
//!
//! This realizes the tuple format of smart-ssd §4.1.1 (fixed-length strings, decimals
//! times 100 as integers, dates as days since the epoch). Both page layouts of
//! [`crate::page`] store exactly these value bytes, so a row image read back from either
//! layout is byte-identical to the one written.
//!
//! The schema also carries a *fingerprint* (CRC-32C of the table name, column names and
//! types) that every page header records, so a page of another table, or of an older
//! version of this table, is rejected with a typed error instead of being misread.

use std::fmt;

/// Largest decimal scale accepted: `10^18` is the largest power of ten in an `i64`.
pub const MAX_DECIMAL_SCALE: u8 = 18;

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
}

/// The type of a column; every type has a fixed width in bytes.
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
}

impl ColumnType {
    /// Width of a value of this type in a row image and in a page, in bytes.
    pub const fn width(self) -> usize {
        match self {
            ColumnType::Int32 | ColumnType::Date => 4,
            ColumnType::Int64 | ColumnType::Decimal { .. } => 8,
            ColumnType::Char(n) => n as usize,
        }
    }

    /// True for the types that [`decode_numeric`] reads as an `i64`
    /// (everything except `CHAR`).
    pub const fn is_numeric(self) -> bool {
        !matches!(self, ColumnType::Char(_))
    }

    /// Stable one-byte tag used in the schema fingerprint.
    const fn tag(self) -> u8 {
        match self {
            ColumnType::Int32 => 1,
            ColumnType::Int64 => 2,
            ColumnType::Date => 3,
            ColumnType::Decimal { .. } => 4,
            ColumnType::Char(_) => 5,
        }
    }

    /// Type parameter (decimal scale or char width) used in the schema fingerprint.
    const fn param(self) -> u16 {
        match self {
            ColumnType::Decimal { scale } => scale as u16,
            ColumnType::Char(n) => n,
            _ => 0,
        }
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
        }
    }
}

/// Reads a numeric value (`INT32`, `INT64`, `DATE`, `DECIMAL`) from its stored bytes and
/// widens it to `i64`. Returns `None` for `CHAR` or if `bytes` is shorter than the
/// type's width.
#[inline]
pub fn decode_numeric(ty: ColumnType, bytes: &[u8]) -> Option<i64> {
    match ty {
        ColumnType::Int32 | ColumnType::Date => {
            let b: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
            Some(i64::from(i32::from_le_bytes(b)))
        }
        ColumnType::Int64 | ColumnType::Decimal { .. } => {
            let b: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
            Some(i64::from_le_bytes(b))
        }
        ColumnType::Char(_) => None,
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
}

impl Column {
    /// A column with a name and a type.
    pub fn new(name: impl Into<String>, ty: ColumnType) -> Self {
        Column {
            name: name.into(),
            ty,
        }
    }
}

/// A typed value, used by the row-at-a-time convenience API ([`Schema::encode_row`],
/// [`Schema::decode_row`]). Hot paths work on row images and column views instead.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
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
}

impl Value {
    /// Short kind name used in error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Int32(_) => "INT32",
            Value::Int64(_) => "INT64",
            Value::Date(_) => "DATE",
            Value::Decimal(_) => "DECIMAL",
            Value::Char(_) => "CHAR",
        }
    }

    /// The value widened to `i64`, or `None` for `CHAR`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int32(v) | Value::Date(v) => Some(i64::from(v)),
            Value::Int64(v) | Value::Decimal(v) => Some(v),
            Value::Char(_) => None,
        }
    }
}

/// A validated table schema: named, typed, fixed-width columns.
///
/// Column `i` occupies bytes `offset(i) .. offset(i) + width(i)` of a row image of
/// `row_width()` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    name: String,
    columns: Vec<Column>,
    offsets: Vec<usize>,
    row_width: usize,
    fingerprint: u32,
}

impl Schema {
    /// Builds and validates a schema: at least one column, non-empty unique names,
    /// `CHAR` widths of at least 1, decimal scales of at most [`MAX_DECIMAL_SCALE`].
    pub fn new(name: impl Into<String>, columns: Vec<Column>) -> Result<Self, SchemaError> {
        let name = name.into();
        if name.is_empty() {
            return Err(SchemaError::EmptyName { table: name });
        }
        if columns.is_empty() {
            return Err(SchemaError::NoColumns { table: name });
        }
        let mut offsets = Vec::with_capacity(columns.len());
        let mut row_width = 0usize;
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
                _ => {}
            }
            offsets.push(row_width);
            row_width += c.ty.width();
        }
        let fingerprint = fingerprint(&name, &columns);
        Ok(Schema {
            name,
            columns,
            offsets,
            row_width,
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

    /// Width of one row image in bytes (the sum of the column widths).
    pub fn row_width(&self) -> usize {
        self.row_width
    }

    /// Identifier of this schema recorded in every page header: CRC-32C over the table
    /// name, the column names and the column types.
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

    /// Byte offset of column `index` within a row image.
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

    /// Checks that `row` is exactly one row image long.
    pub fn check_row(&self, row: &[u8]) -> Result<(), SchemaError> {
        if row.len() == self.row_width {
            Ok(())
        } else {
            Err(SchemaError::RowWidth {
                table: self.name.clone(),
                expected: self.row_width,
                found: row.len(),
            })
        }
    }

    /// Encodes typed values into the row image `out` (which must be `row_width()` bytes).
    /// `CHAR` values are padded with spaces; a value longer than its column is an error.
    /// On error `out` may be partly written.
    pub fn encode_row(&self, values: &[Value], out: &mut [u8]) -> Result<(), SchemaError> {
        self.check_row(out)?;
        if values.len() != self.columns.len() {
            return Err(SchemaError::Arity {
                table: self.name.clone(),
                expected: self.columns.len(),
                found: values.len(),
            });
        }
        for ((col, &off), value) in self.columns.iter().zip(&self.offsets).zip(values) {
            let dst = &mut out[off..off + col.ty.width()];
            match (col.ty, value) {
                (ColumnType::Int32, Value::Int32(v)) | (ColumnType::Date, Value::Date(v)) => {
                    dst.copy_from_slice(&v.to_le_bytes());
                }
                (ColumnType::Int64, Value::Int64(v))
                | (ColumnType::Decimal { .. }, Value::Decimal(v)) => {
                    dst.copy_from_slice(&v.to_le_bytes());
                }
                (ColumnType::Char(n), Value::Char(bytes)) => {
                    if bytes.len() > usize::from(n) {
                        return Err(SchemaError::CharTooLong {
                            column: col.name.clone(),
                            width: usize::from(n),
                            len: bytes.len(),
                        });
                    }
                    dst[..bytes.len()].copy_from_slice(bytes);
                    dst[bytes.len()..].fill(b' ');
                }
                (expected, v) => {
                    return Err(SchemaError::TypeMismatch {
                        column: col.name.clone(),
                        expected,
                        found: v.kind(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Encodes typed values into a new row image.
    pub fn encode_row_vec(&self, values: &[Value]) -> Result<Vec<u8>, SchemaError> {
        let mut out = vec![0u8; self.row_width];
        self.encode_row(values, &mut out)?;
        Ok(out)
    }

    /// Reads column `index` of the row image `row` as a typed value.
    pub fn value(&self, row: &[u8], index: usize) -> Result<Value, SchemaError> {
        self.check_row(row)?;
        let col = self.column(index)?;
        let off = self.offsets[index];
        let bytes = &row[off..off + col.ty.width()];
        Ok(value_from_bytes(col.ty, bytes))
    }

    /// Decodes a whole row image into typed values (`CHAR` values keep their padding).
    pub fn decode_row(&self, row: &[u8]) -> Result<Vec<Value>, SchemaError> {
        self.check_row(row)?;
        Ok(self
            .columns
            .iter()
            .zip(&self.offsets)
            .map(|(c, &off)| value_from_bytes(c.ty, &row[off..off + c.ty.width()]))
            .collect())
    }
}

/// Typed value from exactly `ty.width()` stored bytes.
pub(crate) fn value_from_bytes(ty: ColumnType, bytes: &[u8]) -> Value {
    let num = decode_numeric(ty, bytes).unwrap_or(0);
    match ty {
        // The casts are exact: these values were read from 4-byte fields.
        ColumnType::Int32 => Value::Int32(num as i32),
        ColumnType::Date => Value::Date(num as i32),
        ColumnType::Int64 => Value::Int64(num),
        ColumnType::Decimal { .. } => Value::Decimal(num),
        ColumnType::Char(_) => Value::Char(bytes.to_vec()),
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

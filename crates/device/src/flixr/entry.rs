//! The per-page index entry (flixr §4.1, §4.8): its bytes in the FTL's MAP-entry
//! extension (version 1, one key; version 2, a generation and several key slots), the
//! layout of a table's keys in it ([`KeyLayout`]), building an entry from a page's
//! column values, and comparing an entry with a rule's terms.
//!
//! Choices made here: comparisons are conservative (an entry that is not indexed, of
//! another generation or table, or for a column without a key, rules nothing out);
//! a 4-byte column's range is kept as two `i32`, an 8-byte one as two `i64`; a bitmap
//! is one bit per bucket of the encoding's split points.

use super::*;

pub(super) const ENTRY_V1: u8 = 0xF1;

pub(super) const ENTRY_V2: u8 = 0xF2;

pub(super) const ST_PENDING: u8 = 0;

pub(super) const ST_INDEXED: u8 = 1;

pub(super) const ST_EMPTY: u8 = 2;

pub(super) const ST_OPAQUE: u8 = 3;

pub(super) const KIND_RANGE: u8 = 1;

pub(super) const KIND_BITMAP: u8 = 2;

/// The `(min, max)` of a range key over no value (a page whose key column is NULL in
/// every row): `min > max`, which no rule matches (also once narrowed to two `i32`).
pub const EMPTY_RANGE: (i64, i64) = (i64::MAX, i64::MIN);

/// Where one key sits in a table's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySlot {
    /// The column (schema index).
    pub column: usize,
    /// Its encoding.
    pub encoding: IndexEncoding,
    /// Byte offset in the entry's payload (after the 4 header bytes).
    pub offset: usize,
    /// Bytes of the slot.
    pub width: usize,
    /// A range stored as two `i32` (4-byte columns, version 2 only).
    pub narrow: bool,
}

/// How a table's keys are laid out in its entries (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    /// The table id.
    pub table: u8,
    /// The generation (0: version-1 entries, one key).
    pub generation: u8,
    /// The keys, in entry order.
    pub slots: Vec<KeySlot>,
}

/// One key's part of an entry, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyEntry {
    /// The page's values of the column span `min..=max`.
    Range {
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
    /// Bucket bits of the page's values (bit `i % 8` of byte `i / 8`: bucket `i`).
    Bitmap(Vec<u8>),
}

pub(super) fn key_may_match(k: &KeyEntry, enc: &IndexEncoding, rule: &IndexRule) -> bool {
    match (k, enc) {
        // A range with min > max holds no value: every row's key was NULL.
        (KeyEntry::Range { min, max }, _) => match rule {
            IndexRule::Between { lo, hi } => min <= max && lo <= max && hi >= min,
            IndexRule::In(vs) => vs.iter().any(|v| min <= v && v <= max),
        },
        (KeyEntry::Bitmap(bits), IndexEncoding::Bitmap { bounds }) => {
            let set = |i: usize| bits.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0);
            match rule {
                IndexRule::Between { lo, hi } => {
                    lo <= hi && (bucket(bounds, *lo)..=bucket(bounds, *hi)).any(set)
                }
                IndexRule::In(vs) => vs.iter().any(|&v| set(bucket(bounds, v))),
            }
        }
        _ => true,
    }
}

/// How a column's values become the `i64` keys an entry summarizes and a rule compares
/// (both sides use the same mapping, so an entry is a bound on its page's keys).
///
/// Choice: a string's key is its first 8 bytes as a big-endian unsigned number (shifted
/// to sort as a signed one), a shorter string padded: a monotone map of the string
/// order, not a one-to-one one. `a <= b` gives `key(a) <= key(b)`, so a page whose
/// strings lie in `lo..=hi` has keys in `key(lo)..=key(hi)` whatever their lengths, and
/// a rule on a string constant becomes a rule on its key with inclusive bounds (`s <
/// 'abc'` admits `key <= key('abc')`). A long string is bounded by its prefix, never
/// cut to a wrong bound: the entry keeps the keys, not the strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// INT8/16/32/64, DATE, TIMESTAMP, DECIMAL(p <= 18): the stored integer itself.
    Number,
    /// FLOAT32 / FLOAT64 (`width` bytes): the evaluator's total-order key
    /// ([`csd_query::types::float_key`]), which its float constants already are.
    Float {
        /// 4 or 8.
        width: usize,
    },
    /// CHAR(n): compared padded with spaces (SQL's CHAR order), so the key pads with
    /// spaces.
    PaddedPrefix,
    /// VARCHAR, VARBINARY: compared byte for byte, a shorter string first; the key pads
    /// with zero bytes.
    Prefix,
}

impl KeyKind {
    /// The key kind of a column type; `None` for the types a per-page index does not
    /// cover (BOOLEAN, DECIMAL(p > 18)).
    pub const fn of(ty: ColumnType) -> Option<KeyKind> {
        match ty {
            ColumnType::Int8
            | ColumnType::Int16
            | ColumnType::Int32
            | ColumnType::Int64
            | ColumnType::Date
            | ColumnType::Timestamp
            | ColumnType::Decimal { .. } => Some(KeyKind::Number),
            ColumnType::Float32 => Some(KeyKind::Float { width: 4 }),
            ColumnType::Float64 => Some(KeyKind::Float { width: 8 }),
            ColumnType::Char(_) => Some(KeyKind::PaddedPrefix),
            ColumnType::Varchar | ColumnType::Varbinary => Some(KeyKind::Prefix),
            ColumnType::Bool | ColumnType::Decimal128 { .. } => None,
        }
    }

    /// True when equal keys mean equal values (numbers and floats): a strict bound
    /// (`< v`) may then become `<= key(v) - 1`.
    pub const fn exact(self) -> bool {
        matches!(self, KeyKind::Number | KeyKind::Float { .. })
    }

    /// The key of a value of type `ty` from its bytes (a string's own bytes, CHAR with
    /// its padding; `None` if the bytes are too short for the type).
    pub fn key(self, ty: ColumnType, bytes: &[u8]) -> Option<i64> {
        match self {
            KeyKind::Number => csd_table::schema::decode_numeric(ty, bytes),
            KeyKind::Float { width } => {
                let b = bytes.get(..width)?;
                let mut w = [0u8; 8];
                w[..width].copy_from_slice(b);
                Some(csd_query::types::float_key(u64::from_le_bytes(w), width))
            }
            KeyKind::PaddedPrefix => Some(prefix_key(bytes, b' ')),
            KeyKind::Prefix => Some(prefix_key(bytes, 0)),
        }
    }

    /// The keys of the strings that start with `prefix` (a string kind): `prefix` padded
    /// with zero bytes up to padded with `0xFF` bytes.
    pub fn prefix_range(prefix: &[u8]) -> (i64, i64) {
        (prefix_key(prefix, 0), prefix_key(prefix, 0xFF))
    }
}

/// The key of a string: its first 8 bytes (padded with `pad`) as a big-endian number,
/// its top bit flipped so keys sort as `i64` the way the bytes sort.
pub fn prefix_key(bytes: &[u8], pad: u8) -> i64 {
    let mut b = [pad; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    (u64::from_be_bytes(b) ^ (1 << 63)) as i64
}

pub(super) fn narrow_type(ty: ColumnType) -> bool {
    matches!(ty, ColumnType::Int32 | ColumnType::Date)
}

impl KeyLayout {
    pub(super) fn of(table: u8, t: &TableEntry) -> KeyLayout {
        let v1 = t.generation == 0;
        let mut offset = 0;
        let slots = t
            .keys
            .iter()
            .map(|(col, enc)| {
                let narrow = !v1
                    && matches!(enc, IndexEncoding::Range)
                    && t.format
                        .columns
                        .get(*col)
                        .is_some_and(|c| narrow_type(c.ty));
                let width = match enc {
                    IndexEncoding::Range if narrow => 8,
                    IndexEncoding::Range => 16,
                    IndexEncoding::Bitmap { bounds } => (bounds.len() + 1).div_ceil(8),
                };
                let s = KeySlot {
                    column: *col,
                    encoding: enc.clone(),
                    offset,
                    width,
                    narrow,
                };
                offset += width;
                s
            })
            .collect();
        KeyLayout {
            table,
            generation: t.generation,
            slots,
        }
    }

    /// Bytes the entry needs, header included.
    pub fn entry_bytes(&self) -> usize {
        4 + self.slots.iter().map(|s| s.width).sum::<usize>()
    }

    /// The key parts of `e`, slot by slot, if `e` is an indexed entry of this table and
    /// generation (otherwise the entry says nothing about the keys).
    pub fn keys(&self, e: &Entry) -> Option<Vec<KeyEntry>> {
        match e {
            Entry::Range { table, min, max }
                if *table == self.table && self.generation == 0 && self.slots.len() == 1 =>
            {
                Some(vec![KeyEntry::Range {
                    min: *min,
                    max: *max,
                }])
            }
            Entry::Bitmap { table, bits }
                if *table == self.table && self.generation == 0 && self.slots.len() == 1 =>
            {
                Some(vec![KeyEntry::Bitmap(bits.clone())])
            }
            Entry::Packed {
                table,
                generation,
                bytes,
            } if *table == self.table && *generation == self.generation && self.generation != 0 => {
                let mut out = Vec::with_capacity(self.slots.len());
                for s in &self.slots {
                    let b = bytes.get(s.offset..s.offset + s.width)?;
                    out.push(match (&s.encoding, s.narrow) {
                        (IndexEncoding::Range, true) => KeyEntry::Range {
                            min: i32::from_le_bytes(b[0..4].try_into().ok()?) as i64,
                            max: i32::from_le_bytes(b[4..8].try_into().ok()?) as i64,
                        },
                        (IndexEncoding::Range, false) => KeyEntry::Range {
                            min: i64::from_le_bytes(b[0..8].try_into().ok()?),
                            max: i64::from_le_bytes(b[8..16].try_into().ok()?),
                        },
                        (IndexEncoding::Bitmap { .. }, _) => KeyEntry::Bitmap(b.to_vec()),
                    });
                }
                Some(out)
            }
            _ => None,
        }
    }

    /// Can a page with entry `e` hold a row satisfying every term of `terms` (column,
    /// predicate)? Conservative: `true` unless some term's key proves otherwise.
    pub fn may_match(&self, e: &Entry, terms: &[(usize, IndexRule)]) -> bool {
        if e.table() != Some(self.table) {
            return true;
        }
        if matches!(e, Entry::Empty(_)) {
            return false;
        }
        let Some(keys) = self.keys(e) else {
            return true;
        };
        terms.iter().all(
            |(col, r)| match self.slots.iter().position(|s| s.column == *col) {
                Some(i) => key_may_match(&keys[i], &self.slots[i].encoding, r),
                None => true,
            },
        )
    }

    /// The entry of a page with `values[i]` the keys of slot `i`'s column's non-NULL
    /// values (a page with at least one row). A key without values (every row NULL)
    /// is a range with `min > max` ([`EMPTY_RANGE`]) or a bitmap without bits: no rule
    /// matches it, since a rule comes from predicates a NULL never satisfies.
    pub(super) fn build(&self, values: &[Vec<i64>]) -> Entry {
        let parts: Vec<KeyEntry> = self
            .slots
            .iter()
            .zip(values)
            .map(|(s, vals)| match &s.encoding {
                IndexEncoding::Range => KeyEntry::Range {
                    min: vals.iter().copied().min().unwrap_or(EMPTY_RANGE.0),
                    max: vals.iter().copied().max().unwrap_or(EMPTY_RANGE.1),
                },
                IndexEncoding::Bitmap { bounds } => {
                    let mut bits = vec![0u8; (bounds.len() + 1).div_ceil(8)];
                    for &v in vals {
                        let b = bucket(bounds, v);
                        bits[b / 8] |= 1 << (b % 8);
                    }
                    KeyEntry::Bitmap(bits)
                }
            })
            .collect();
        let table = self.table;
        if self.generation == 0 {
            return match parts.into_iter().next() {
                Some(KeyEntry::Range { min, max }) => Entry::Range { table, min, max },
                Some(KeyEntry::Bitmap(bits)) => Entry::Bitmap { table, bits },
                None => Entry::None,
            };
        }
        let mut bytes = vec![0u8; self.entry_bytes() - 4];
        for (s, k) in self.slots.iter().zip(parts) {
            let o = s.offset;
            match k {
                KeyEntry::Range { min, max } if s.narrow => {
                    let c = |v: i64| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                    bytes[o..o + 4].copy_from_slice(&c(min).to_le_bytes());
                    bytes[o + 4..o + 8].copy_from_slice(&c(max).to_le_bytes());
                }
                KeyEntry::Range { min, max } => {
                    bytes[o..o + 8].copy_from_slice(&min.to_le_bytes());
                    bytes[o + 8..o + 16].copy_from_slice(&max.to_le_bytes());
                }
                KeyEntry::Bitmap(bits) => {
                    let n = bits.len().min(s.width);
                    bytes[o..o + n].copy_from_slice(&bits[..n]);
                }
            }
        }
        Entry::Packed {
            table,
            generation: self.generation,
            bytes,
        }
    }
}

/// A per-page index entry, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// No entry: the page must be read.
    None,
    /// Being recomputed (redo bit 0): the page must be read.
    Pending(u8),
    /// A page of the table without rows.
    Empty(u8),
    /// Data that is not a page of the table: always read.
    Opaque(u8),
    /// The page's values span `min..=max`.
    Range {
        /// Table id.
        table: u8,
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
    /// Bucket bits of the page's values.
    Bitmap {
        /// Table id.
        table: u8,
        /// Bit `i` of byte `i / 8`: bucket `i` occurs.
        bits: Vec<u8>,
    },
    /// Several keys packed (version 2): read with the table's [`KeyLayout`].
    Packed {
        /// Table id.
        table: u8,
        /// The table's layout generation when the entry was built.
        generation: u8,
        /// The key slots (the bytes after the header).
        bytes: Vec<u8>,
    },
}

impl Entry {
    /// Decode extension bytes (anything unrecognized is `None`: read the page).
    pub fn decode(b: &[u8]) -> Entry {
        if b.len() < 4 || (b[0] != ENTRY_V1 && b[0] != ENTRY_V2) {
            return Entry::None;
        }
        let t = b[1];
        if b[0] == ENTRY_V2 {
            return match b[2] {
                ST_PENDING => Entry::Pending(t),
                ST_EMPTY => Entry::Empty(t),
                ST_OPAQUE => Entry::Opaque(t),
                ST_INDEXED => Entry::Packed {
                    table: t,
                    generation: b[3],
                    bytes: b[4..].to_vec(),
                },
                _ => Entry::None,
            };
        }
        match (b[2], b[3]) {
            (ST_PENDING, _) => Entry::Pending(t),
            (ST_EMPTY, _) => Entry::Empty(t),
            (ST_OPAQUE, _) => Entry::Opaque(t),
            (ST_INDEXED, KIND_RANGE) if b.len() >= 20 => Entry::Range {
                table: t,
                min: i64::from_le_bytes(b[4..12].try_into().unwrap_or([0; 8])),
                max: i64::from_le_bytes(b[12..20].try_into().unwrap_or([0; 8])),
            },
            (ST_INDEXED, KIND_BITMAP) => Entry::Bitmap {
                table: t,
                bits: b[4..].to_vec(),
            },
            _ => Entry::None,
        }
    }

    /// Encode into `ext` extension bytes.
    pub fn encode(&self, ext: usize) -> Vec<u8> {
        let mut v = vec![0u8; ext];
        let head = |v: &mut [u8], t: u8, st: u8, kind: u8| {
            v[0] = ENTRY_V1;
            v[1] = t;
            v[2] = st;
            v[3] = kind;
        };
        match self {
            Entry::None => {}
            Entry::Pending(t) => head(&mut v, *t, ST_PENDING, 0),
            Entry::Empty(t) => head(&mut v, *t, ST_EMPTY, 0),
            Entry::Opaque(t) => head(&mut v, *t, ST_OPAQUE, 0),
            Entry::Range { table, min, max } => {
                head(&mut v, *table, ST_INDEXED, KIND_RANGE);
                v[4..12].copy_from_slice(&min.to_le_bytes());
                v[12..20].copy_from_slice(&max.to_le_bytes());
            }
            Entry::Bitmap { table, bits } => {
                head(&mut v, *table, ST_INDEXED, KIND_BITMAP);
                let n = bits.len().min(ext - 4);
                v[4..4 + n].copy_from_slice(&bits[..n]);
            }
            Entry::Packed {
                table,
                generation,
                bytes,
            } => {
                head(&mut v, *table, ST_INDEXED, *generation);
                v[0] = ENTRY_V2;
                let n = bytes.len().min(ext - 4);
                v[4..4 + n].copy_from_slice(&bytes[..n]);
            }
        }
        v
    }

    /// The table the entry names, if any.
    pub fn table(&self) -> Option<u8> {
        match self {
            Entry::None => None,
            Entry::Pending(t) | Entry::Empty(t) | Entry::Opaque(t) => Some(*t),
            Entry::Range { table, .. }
            | Entry::Bitmap { table, .. }
            | Entry::Packed { table, .. } => Some(*table),
        }
    }
}

pub(super) fn bucket(bounds: &[i64], v: i64) -> usize {
    bounds.partition_point(|&b| b <= v)
}

/// Can a page with entry `e` hold a row of table `table` satisfying `rule`? Conservative:
/// `true` unless the entry proves otherwise.
pub fn may_match(e: &Entry, table: u8, enc: &IndexEncoding, rule: &IndexRule) -> bool {
    if e.table() != Some(table) {
        return true;
    }
    match e {
        Entry::Empty(_) => false,
        Entry::Range { min, max, .. } => key_may_match(
            &KeyEntry::Range {
                min: *min,
                max: *max,
            },
            enc,
            rule,
        ),
        Entry::Bitmap { bits, .. } => key_may_match(&KeyEntry::Bitmap(bits.clone()), enc, rule),
        _ => true,
    }
}

//! Synthetic4/16/64 (smart-ssd §4.1.1): tables of N `INT32` columns `c1 .. cN`, used by
//! the paper's selection query `SELECT c2 FROM SyntheticN WHERE c1 < [VALUE]` at chosen
//! selectivities (0.1%, 10%, 100%).
//!
//! Choices (the paper does not say how its values were drawn):
//! * `c1` is a seeded pseudo-random **permutation of `0..rows`**, so `c1 < v` selects
//!   exactly `v` rows for `0 <= v <= rows`: the selectivity of a threshold is exact, not
//!   approximate ([`SyntheticSpec::threshold`]). The permutation is a 4-round Feistel
//!   network over the smallest even power of two `>= rows`, with cycle walking
//!   back into `0..rows`; it is computed per row, so nothing is materialized.
//! * `c2 .. cN` are independent seeded uniform values in `0 ..= i32::MAX` (non-negative,
//!   so sums and averages of a column are easy to check).
//! * Every value is a pure function of `(seed, row, column)` (SplitMix64 mixing, no
//!   `rand` state), so any row range can be generated independently
//!   ([`SyntheticGenerator::range`]) and the data never changes with dependency
//!   upgrades.

use super::{GenError, RowSource, mix64};
use crate::schema::{Column, ColumnType, Schema};

/// Most columns a synthetic table may have.
pub const MAX_COLUMNS: usize = 1024;
/// Most rows a synthetic table may have: `c1` values `0..rows` and every threshold
/// `0..=rows` must fit an `i32`.
pub const MAX_ROWS: u64 = i32::MAX as u64;

/// Parameters of a synthetic table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyntheticSpec {
    /// Number of `INT32` columns (4, 16 and 64 in the paper).
    pub columns: usize,
    /// Number of rows (400 M in the paper).
    pub rows: u64,
    /// Seed of every value.
    pub seed: u64,
}

impl SyntheticSpec {
    /// A spec with `columns` `INT32` columns and `rows` rows, validated.
    pub fn new(columns: usize, rows: u64, seed: u64) -> Result<Self, GenError> {
        if columns == 0 || columns > MAX_COLUMNS {
            return Err(GenError::SyntheticColumns { columns });
        }
        if rows > MAX_ROWS {
            return Err(GenError::SyntheticRows { rows });
        }
        Ok(SyntheticSpec {
            columns,
            rows,
            seed,
        })
    }

    /// Synthetic4: 4 `INT32` columns (16-byte rows).
    pub fn synthetic4(rows: u64, seed: u64) -> Result<Self, GenError> {
        Self::new(4, rows, seed)
    }

    /// Synthetic16: 16 `INT32` columns (64-byte rows).
    pub fn synthetic16(rows: u64, seed: u64) -> Result<Self, GenError> {
        Self::new(16, rows, seed)
    }

    /// Synthetic64: 64 `INT32` columns (256-byte rows).
    pub fn synthetic64(rows: u64, seed: u64) -> Result<Self, GenError> {
        Self::new(64, rows, seed)
    }

    /// The table's schema: name `synthetic{N}`, columns `c1 .. cN`, all `INT32`.
    pub fn schema(&self) -> Schema {
        schema(self.columns)
    }

    /// The `v` for which `c1 < v` selects exactly `round(fraction * rows)` rows, i.e.
    /// exactly `v` rows. `fraction` must be within `0..=1`.
    pub fn threshold(&self, fraction: f64) -> Result<i32, GenError> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(GenError::Selectivity(fraction));
        }
        // 0 <= v <= rows <= i32::MAX (f64 holds every such integer exactly)
        let v = (fraction * self.rows as f64).round() as i64;
        Ok(v.clamp(0, self.rows as i64) as i32)
    }
}

/// Schema of a synthetic table with `columns` `INT32` columns `c1 .. cN`.
///
/// `columns` is clamped to `1 ..= MAX_COLUMNS`.
pub fn schema(columns: usize) -> Schema {
    let n = columns.clamp(1, MAX_COLUMNS);
    let cols = (1..=n)
        .map(|i| Column::new(format!("c{i}"), ColumnType::Int32))
        .collect();
    // Names c1..cN are non-empty and unique, so this cannot fail.
    Schema::new(format!("synthetic{n}"), cols).expect("synthetic schema is valid")
}

/// A seeded pseudo-random permutation of `0..n` (Feistel network + cycle walking).
#[derive(Debug, Clone)]
struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl Permutation {
    fn new(n: u64, seed: u64) -> Self {
        // smallest even bit count 2h with 2^(2h) >= n, h >= 1
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut keys = [0u64; 4];
        for (r, k) in keys.iter_mut().enumerate() {
            *k = mix64(seed ^ mix64(0xC0FF_EE00 + r as u64));
        }
        Permutation { n, half_bits, keys }
    }

    #[inline]
    fn feistel(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for &k in &self.keys {
            let f = mix64(r ^ k) & mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }

    /// The image of `i < n`. Each step is a bijection of `0..2^(2h)` and `2^(2h) < 4n`,
    /// so the walk returns into `0..n` after fewer than 4 steps on average and always
    /// terminates (the cycle through `i` re-enters `0..n` at the latest at `i`).
    #[inline]
    fn apply(&self, i: u64) -> u64 {
        let mut x = i;
        loop {
            x = self.feistel(x);
            if x < self.n {
                return x;
            }
        }
    }
}

/// Streams the rows of a synthetic table, or of a range of its rows.
#[derive(Debug, Clone)]
pub struct SyntheticGenerator {
    spec: SyntheticSpec,
    schema: Schema,
    perm: Permutation,
    column_keys: Vec<u64>,
    next: u64,
    end: u64,
}

impl SyntheticGenerator {
    /// All rows of the table.
    pub fn new(spec: SyntheticSpec) -> Result<Self, GenError> {
        Self::range(spec, 0, spec.rows)
    }

    /// Rows `start..end` of the table: the same values as rows `start..end` of
    /// [`SyntheticGenerator::new`], so a table can be generated in parallel pieces.
    pub fn range(spec: SyntheticSpec, start: u64, end: u64) -> Result<Self, GenError> {
        let spec = SyntheticSpec::new(spec.columns, spec.rows, spec.seed)?;
        if start > end || end > spec.rows {
            return Err(GenError::RowRange {
                start,
                end,
                rows: spec.rows,
            });
        }
        let column_keys = (0..spec.columns as u64)
            .map(|c| mix64(spec.seed ^ mix64(0x5EED_0000_0000 + c)))
            .collect();
        Ok(SyntheticGenerator {
            schema: spec.schema(),
            perm: Permutation::new(spec.rows, spec.seed),
            spec,
            column_keys,
            next: start,
            end,
        })
    }

    /// The table's parameters.
    pub fn spec(&self) -> &SyntheticSpec {
        &self.spec
    }

    /// Value of `c1` in row `row` (a permutation of `0..rows`), or `None` past the end.
    pub fn c1_at(&self, row: u64) -> Option<i32> {
        // values < rows <= i32::MAX
        (row < self.spec.rows).then(|| self.perm.apply(row) as i32)
    }
}

impl RowSource for SyntheticGenerator {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        if self.next >= self.end {
            return false;
        }
        let r = self.next;
        self.next += 1;
        row.clear();
        row.reserve(self.spec.columns * 4);
        // c1: permutation of 0..rows (< i32::MAX, fits i32)
        row.extend_from_slice(&(self.perm.apply(r) as i32).to_le_bytes());
        for &k in &self.column_keys[1..] {
            let v = (mix64(k ^ r) >> 33) as i32; // 31 bits: 0 ..= i32::MAX
            row.extend_from_slice(&v.to_le_bytes());
        }
        true
    }

    fn remaining_rows(&self) -> Option<u64> {
        Some(self.end - self.next)
    }
}

impl Iterator for SyntheticGenerator {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        let mut row = Vec::new();
        self.next_row(&mut row).then_some(row)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.end - self.next).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for SyntheticGenerator {}

#[cfg(test)]
mod tests {
    use super::*;

    fn c1_values(spec: SyntheticSpec) -> Vec<i32> {
        SyntheticGenerator::new(spec)
            .expect("valid")
            .map(|r| i32::from_le_bytes([r[0], r[1], r[2], r[3]]))
            .collect()
    }

    #[test]
    fn c1_is_a_permutation() {
        for rows in [0u64, 1, 2, 3, 4, 5, 17, 64, 1000, 4097] {
            let spec = SyntheticSpec::synthetic4(rows, 42).expect("valid");
            let mut v = c1_values(spec);
            assert_eq!(v.len() as u64, rows);
            v.sort_unstable();
            assert!(
                v.iter().enumerate().all(|(i, &x)| x as usize == i),
                "rows {rows}"
            );
        }
    }

    #[test]
    fn c1_is_shuffled_and_seeded() {
        let a = c1_values(SyntheticSpec::synthetic4(1000, 1).expect("valid"));
        let b = c1_values(SyntheticSpec::synthetic4(1000, 2).expect("valid"));
        assert_ne!(a, b);
        let in_place = a
            .iter()
            .enumerate()
            .filter(|&(i, &x)| i as i32 == x)
            .count();
        assert!(in_place < 20, "{in_place} fixed points: not shuffled");
        let ascending = a.windows(2).filter(|w| w[0] < w[1]).count();
        assert!((350..650).contains(&ascending), "{ascending} ascents");
    }

    #[test]
    fn exact_selectivity() {
        let spec = SyntheticSpec::synthetic16(10_000, 7).expect("valid");
        let c1 = c1_values(spec);
        for f in [0.0, 0.001, 0.01, 0.1, 0.5, 1.0] {
            let v = spec.threshold(f).expect("fraction");
            let hits = c1.iter().filter(|&&x| x < v).count();
            assert_eq!(hits, (f * 10_000.0).round() as usize, "fraction {f}");
            assert_eq!(hits, v as usize);
        }
        assert!(spec.threshold(1.5).is_err());
        assert!(spec.threshold(-0.1).is_err());
        assert!(spec.threshold(f64::NAN).is_err());
    }

    #[test]
    fn deterministic_and_range_consistent() {
        let spec = SyntheticSpec::synthetic64(500, 99).expect("valid");
        let all: Vec<_> = SyntheticGenerator::new(spec).expect("valid").collect();
        let again: Vec<_> = SyntheticGenerator::new(spec).expect("valid").collect();
        assert_eq!(all, again);
        let mut pieces = Vec::new();
        for (s, e) in [(0, 123), (123, 124), (124, 500)] {
            pieces.extend(SyntheticGenerator::range(spec, s, e).expect("valid"));
        }
        assert_eq!(all, pieces);
        assert!(all.iter().all(|r| r.len() == 256));
        let g = SyntheticGenerator::new(spec).expect("valid");
        assert_eq!(g.len(), 500);
        assert_eq!(
            g.c1_at(3),
            Some(i32::from_le_bytes([
                all[3][0], all[3][1], all[3][2], all[3][3]
            ]))
        );
        assert_eq!(g.c1_at(500), None);
    }

    #[test]
    fn other_columns_look_uniform_and_non_negative() {
        let spec = SyntheticSpec::synthetic4(20_000, 5).expect("valid");
        let mut sum = 0f64;
        let mut n = 0f64;
        for r in SyntheticGenerator::new(spec).expect("valid") {
            for c in 1..4 {
                let v = i32::from_le_bytes([r[4 * c], r[4 * c + 1], r[4 * c + 2], r[4 * c + 3]]);
                assert!(v >= 0);
                sum += f64::from(v);
                n += 1.0;
            }
        }
        let mean = sum / n / f64::from(i32::MAX);
        assert!((0.49..0.51).contains(&mean), "mean {mean}");
    }

    #[test]
    fn invalid_specs() {
        assert!(matches!(
            SyntheticSpec::new(0, 1, 0),
            Err(GenError::SyntheticColumns { .. })
        ));
        assert!(matches!(
            SyntheticSpec::new(MAX_COLUMNS + 1, 1, 0),
            Err(GenError::SyntheticColumns { .. })
        ));
        assert!(matches!(
            SyntheticSpec::new(4, MAX_ROWS + 1, 0),
            Err(GenError::SyntheticRows { .. })
        ));
        let spec = SyntheticSpec::synthetic4(10, 0).expect("valid");
        assert!(matches!(
            SyntheticGenerator::range(spec, 5, 11),
            Err(GenError::RowRange { .. })
        ));
        assert!(matches!(
            SyntheticGenerator::range(spec, 6, 5),
            Err(GenError::RowRange { .. })
        ));
    }

    #[test]
    fn largest_domain_permutation_stays_in_range() {
        let spec = SyntheticSpec::synthetic4(MAX_ROWS, 3).expect("valid");
        let g = SyntheticGenerator::range(spec, MAX_ROWS - 1000, MAX_ROWS).expect("valid");
        for r in g {
            let v = i32::from_le_bytes([r[0], r[1], r[2], r[3]]);
            assert!(v >= 0);
        }
        assert_eq!(spec.threshold(1.0), Ok(i32::MAX));
    }
}

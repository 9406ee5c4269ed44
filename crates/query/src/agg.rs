//! Mergeable aggregation state: per group, one accumulator per aggregate: the partial
//! aggregation a Smart SSD computes next to the data (smart-ssd-query-processing §3–4,
//! the aggregation experiments of §4.2.2 and TPC-H Q6 of §4.2.3), finished on the host.
//!
//! Accumulators are exact: each group keeps its row count (`u64`: `COUNT(*)`, and every
//! `COUNT` and `AVG` divisor of a NOT NULL argument), `SUM`/`AVG` an `i128` sum (`AVG` is
//! `sum / count`, divided once by the host's final aggregate), `MIN`/`MAX` the extreme
//! value. An aggregate whose argument may be NULL skips the NULL rows, as SQL does: it
//! keeps its own count of the values it folded (`COUNT(x)`, the divisor of `AVG(x)`, and
//! whether `SUM(x)` saw any value at all; see [`AggState::value_rows`]). `MIN`/`MAX` of a
//! float folds its total-order key ([`crate::types::float_key`]). Because every accumulator is an
//! exact, associative and commutative fold, the state of any split of the input
//! (pages, channels, devices) merges into the state of the whole input:
//! `merge(state(A), state(B)) == state(A ∪ B)`.
//!
//! Groups are keyed by the grouping columns' stored bytes, back to back. Keys of up to
//! 16 bytes (TPC-H Q1's two `CHAR(1)` flags take 2) are packed into a `u128` and, while
//! there are at most 16 groups, looked up by a linear scan that beats hashing (keys of
//! at most two bytes read from minipages first try a 256-slot cache, `NarrowIndex`, one
//! load a row with no branch on the group); larger
//! key sets use [`PackedIndex`] (longer keys a hash map), which a state builds only when
//! it passes 16 groups (a page's state of a few groups, merged and cleared for the next
//! page, never hashes a key). Without `GROUP BY` there is
//! exactly one group; when its aggregates are numbers, its value also exists inline as a
//! [`ScalarState`], which pages evaluated on other threads hand over without allocating.
//!
//! [`PackedIndex`] is an open-addressing table of four-byte group numbers whose keys
//! live in the state's key array: a device arena's table (26K groups in the default
//! 1 MiB arena) takes a quarter of a MiB, and the slots of the keys a few rows ahead
//! are prefetched while a row is probed, so an aggregation over many groups (TPC-H
//! Q17's and Q18's `GROUP BY` on a key) waits on memory for a batch of rows at once
//! instead of once per row. Group numbers, their order and every result are what a
//! hash map gives: the table is only an index.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

/// The group index's hasher: foldhash with a fixed seed. Group keys come from table
/// pages, not from an adversary, and SipHash was most of a 200K-group aggregation's
/// wall time (hashing u128 keys); a fixed seed keeps runs repeatable.
type GroupHasher = foldhash::fast::FixedState;

use csd_table::{ColumnType, ColumnView, PageView};

use crate::error::EvalError;
use crate::plan::{AggFunc, Aggregation};
use crate::types::DataType;

/// Groups found by linear scan up to this many.
const LINEAR_GROUPS: usize = 16;

/// The sums of `v[k]` per group `gids[k]` (groups `0..groups`, the rest 0) for an
/// aggregation of at most [`LINEAR_GROUPS`] groups (TPC-H Q1's four), which the caller
/// adds to its accumulators. Consecutive rows keep hitting the same few accumulators: a
/// read-modify-write chain through memory per group, so local banks take alternate rows
/// (four banks, by row index) and are summed into the result once per call. When no sum of the
/// call can leave `i64` (rows x the largest magnitude, bounded from above by OR-ing the
/// magnitudes, below 2^63) the banks are `i64`, one add a row instead of `i128`'s two
/// (wrapping adds, which never wrap under that bound, so the loop has no overflow
/// branch); otherwise `i128`. Either way the result is the exact sum.
fn few_group_sums(gids: &[u32], v: &[i64], groups: usize) -> [i128; LINEAR_GROUPS] {
    debug_assert!(groups <= LINEAR_GROUPS && gids.len() == v.len());
    debug_assert!(gids.iter().all(|&g| (g as usize) < groups));
    const BANKS: usize = 4;
    let mut out = [0i128; LINEAR_GROUPS];
    let bound = v.iter().fold(0u64, |a, &x| a | x.unsigned_abs());
    let fits = (bound as u128 + 1) * (v.len() as u128) < (1u128 << 63);
    if fits {
        let mut bank = [[0i64; LINEAR_GROUPS]; BANKS];
        for (k, (&g, &x)) in gids.iter().zip(v).enumerate() {
            let b = &mut bank[k % BANKS][g as usize % LINEAR_GROUPS];
            *b = b.wrapping_add(x);
        }
        for (g, s) in out.iter_mut().enumerate().take(groups) {
            *s = bank.iter().map(|b| i128::from(b[g])).sum::<i128>();
        }
    } else {
        let mut bank = [[0i128; LINEAR_GROUPS]; BANKS];
        for (k, (&g, &x)) in gids.iter().zip(v).enumerate() {
            bank[k % BANKS][g as usize % LINEAR_GROUPS] += i128::from(x);
        }
        for (g, s) in out.iter_mut().enumerate().take(groups) {
            *s = bank.iter().map(|b| b[g]).sum::<i128>();
        }
    }
    out
}

/// A group table bounded to at most this many groups (a device session's arena) gets
/// its whole index at once when it outgrows [`LINEAR_GROUPS`].
const RESERVE_GROUPS: usize = 1 << 16;

/// Rows ahead whose index slots are prefetched while a row is probed.
const PREFETCH_AHEAD: usize = 16;

/// The index of packed keys (see the [module docs](self)): linear probing over a
/// power-of-two table of `group + 1` (0: empty) at most half full; the keys are the
/// state's `packed` array, so a probe compares `keys[group]`.
#[derive(Debug, Clone, Default)]
struct PackedIndex {
    slots: Vec<u32>,
    /// `64 - log2(slots.len())`: a hash's top bits pick the home slot.
    shift: u32,
}

/// The index is a function of the keys it indexes: two states with equal keys are equal
/// whatever their tables' sizes.
impl PartialEq for PackedIndex {
    fn eq(&self, _: &PackedIndex) -> bool {
        true
    }
}

/// The groups of keys of at most two bytes (TPC-H Q1's two `CHAR(1)` flags), found
/// by one load a row, where the linear search of a page's few groups branched
/// unpredictably on every row whose group differs from the row before (with groups in
/// random order, most rows). A direct-mapped cache of 256 slots, `group + 1` (0: empty)
/// at a multiplicative hash of the key; every hit is checked against the state's own
/// `packed` keys, so a slot another key took, or one left from before an
/// [`AggState::clear`], is only a miss, and the state stays the only truth about its
/// groups. Not copied by `clone` (a state is cloned per page evaluated ahead) and not
/// compared.
#[derive(Debug, Default)]
struct NarrowIndex(Option<Box<[u32; NARROW_SLOTS]>>);

/// Slots of a [`NarrowIndex`].
const NARROW_SLOTS: usize = 256;

impl Clone for NarrowIndex {
    fn clone(&self) -> NarrowIndex {
        NarrowIndex::default()
    }
}

impl PartialEq for NarrowIndex {
    fn eq(&self, _: &NarrowIndex) -> bool {
        true
    }
}

impl NarrowIndex {
    /// The slot of key `p` (at most 16 bits).
    #[inline(always)]
    fn slot(p: u32) -> usize {
        (p.wrapping_mul(0x9E37_79B1) >> 24) as usize
    }

    /// The slots, made on first use.
    #[inline]
    fn slots(&mut self) -> &mut [u32; NARROW_SLOTS] {
        self.0.get_or_insert_with(|| Box::new([0; NARROW_SLOTS]))
    }
}

impl PackedIndex {
    /// Fewest slots of a table in use.
    const MIN_SLOTS: usize = 64;

    /// The home slot of `p` (Fibonacci hashing of both halves; the table is not empty).
    #[inline(always)]
    fn home(&self, p: u128) -> usize {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let x = (p as u64) ^ ((p >> 64) as u64).wrapping_mul(K).rotate_left(29);
        (x.wrapping_mul(K) >> self.shift) as usize
    }

    /// Hints the key of the group in `p`'s home slot (the one a probe for `p` compares
    /// first), once that slot is in the cache ([`PackedIndex::prefetch`]).
    #[inline(always)]
    fn prefetch_key(&self, p: u128, keys: &[u128]) {
        if self.slots.is_empty() {
            return;
        }
        if let Some(g) = self.slots[self.home(p)].checked_sub(1)
            && let Some(k) = keys.get(g as usize)
        {
            csd_sim::prefetch::value(k);
        }
    }

    /// The group of `p`, if the table holds it.
    #[inline(always)]
    fn find(&self, p: u128, keys: &[u128]) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(p);
        loop {
            match self.slots[i] {
                0 => return None,
                s if keys[(s - 1) as usize] == p => return Some(s - 1),
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Records the newest group (`keys.len() - 1`, whose key is last in `keys` and not
    /// in the table yet); past half full the table doubles.
    #[inline]
    fn insert(&mut self, keys: &[u128]) {
        let n = keys.len();
        if n * 2 > self.slots.len() {
            self.rebuild((n * 2).next_power_of_two(), keys);
            return;
        }
        let mask = self.slots.len() - 1;
        let mut i = keys.last().map_or(0, |&p| self.home(p));
        while self.slots[i] != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = n as u32;
    }

    /// Forgets every group, keeping the table's slots.
    fn clear(&mut self) {
        self.slots.fill(0);
    }

    /// Indexes every key of `keys` in a table that holds none yet (its slots all empty),
    /// growing it first where they would fill it past half.
    fn fill(&mut self, keys: &[u128]) {
        debug_assert!(self.slots.iter().all(|&s| s == 0), "the index is empty");
        if keys.len() * 2 > self.slots.len() {
            self.rebuild((keys.len() * 2).next_power_of_two(), keys);
        } else {
            self.index_all(keys);
        }
    }

    /// Makes room for `groups` groups without growing again.
    fn reserve(&mut self, groups: usize, keys: &[u128]) {
        if groups * 2 > self.slots.len() {
            self.rebuild((groups * 2).next_power_of_two(), keys);
        }
    }

    /// A table of at least `slots` slots holding every group of `keys`.
    fn rebuild(&mut self, slots: usize, keys: &[u128]) {
        let len = slots.max(Self::MIN_SLOTS);
        self.slots.clear();
        self.slots.resize(len, 0);
        self.shift = 64 - len.trailing_zeros();
        self.index_all(keys);
    }

    /// Enters group `g` for every key `keys[g]` into a table with room for them all.
    fn index_all(&mut self, keys: &[u128]) {
        let mask = self.slots.len() - 1;
        for (g, &p) in keys.iter().enumerate() {
            let mut i = self.home(p);
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = g as u32 + 1;
        }
    }

    /// Hints the cache line of `p`'s home slot (no effect on anything else).
    #[inline(always)]
    fn prefetch(&self, p: u128) {
        if !self.slots.is_empty() {
            csd_sim::prefetch::value(&self.slots[self.home(p)]);
        }
    }
}

/// One aggregate's input on the current page, aligned with the selection.
pub(crate) enum AggInput<'a> {
    /// `COUNT(*)` / `COUNT(x)`: no values needed.
    Rows,
    /// `COUNT(x)` of an `x` that may be NULL: per selected row, whether `x` is not NULL.
    Valid(&'a [bool]),
    /// Numeric values (`INT`, `DECIMAL`, `DATE`, float keys).
    Num(&'a [i64]),
    /// Numeric values of an argument that may be NULL, and per selected row whether it
    /// is not (a NULL row's value is 0 and is skipped).
    NumValid(&'a [i64], &'a [bool]),
    /// A `CHAR`, `VARCHAR` or `VARBINARY` column, read per selected row (NULL rows
    /// skipped).
    Char(ColumnView<'a>),
    /// `DECIMAL(p, s)` (128-bit) values, and for an argument that may be NULL per
    /// selected row whether it is not (a NULL row's value is 0 and is skipped).
    Wide(&'a [i128], Option<&'a [bool]>),
}

/// Per-aggregate accumulator columns. `COUNT` and `SUM`/`AVG` of a NOT NULL argument
/// keep no count of their own: it is the group's row count, kept once per group in
/// [`AggState`]; over an argument that may be NULL they count the values folded
/// (`nn`, per group).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Acc {
    Count {
        nn: Option<Vec<u64>>,
    },
    Sum {
        sum: Vec<i128>,
        nn: Option<Vec<u64>>,
    },
    MinMax {
        max: bool,
        val: Vec<i64>,
        seen: Vec<bool>,
    },
    MinMaxChar {
        max: bool,
        /// `VARCHAR` / `VARBINARY` (values of their own lengths) rather than `CHAR(n)`.
        variable: bool,
        val: Vec<Vec<u8>>,
        seen: Vec<bool>,
    },
    /// `MIN` / `MAX` of a `DECIMAL(p, s)` (128-bit) value.
    MinMaxWide {
        max: bool,
        val: Vec<i128>,
        seen: Vec<bool>,
    },
}

impl Acc {
    fn new(func: AggFunc, arg: Option<DataType>, nullable: bool) -> Acc {
        let nn = nullable.then(Vec::new);
        match func {
            AggFunc::CountStar => Acc::Count { nn: None },
            AggFunc::Count => Acc::Count { nn },
            AggFunc::Sum | AggFunc::Avg => Acc::Sum {
                sum: Vec::new(),
                nn,
            },
            AggFunc::Min | AggFunc::Max => {
                let max = func == AggFunc::Max;
                if let Some(t @ (DataType::Char(_) | DataType::Varchar | DataType::Varbinary)) = arg
                {
                    Acc::MinMaxChar {
                        max,
                        variable: t.is_variable(),
                        val: Vec::new(),
                        seen: Vec::new(),
                    }
                } else if matches!(arg, Some(DataType::Decimal128 { .. })) {
                    Acc::MinMaxWide {
                        max,
                        val: Vec::new(),
                        seen: Vec::new(),
                    }
                } else {
                    Acc::MinMax {
                        max,
                        val: Vec::new(),
                        seen: Vec::new(),
                    }
                }
            }
        }
    }

    fn reserve(&mut self, more: usize) {
        match self {
            Acc::Count { nn } => nn.iter_mut().for_each(|n| n.reserve(more)),
            Acc::Sum { sum, nn } => {
                sum.reserve(more);
                nn.iter_mut().for_each(|n| n.reserve(more));
            }
            Acc::MinMax { val, seen, .. } => {
                val.reserve(more);
                seen.reserve(more);
            }
            Acc::MinMaxChar { val, seen, .. } => {
                val.reserve(more);
                seen.reserve(more);
            }
            Acc::MinMaxWide { val, seen, .. } => {
                val.reserve(more);
                seen.reserve(more);
            }
        }
    }

    /// Drops every group's value, keeping the buffers.
    fn clear(&mut self) {
        match self {
            Acc::Count { nn } => nn.iter_mut().for_each(Vec::clear),
            Acc::Sum { sum, nn } => {
                sum.clear();
                nn.iter_mut().for_each(Vec::clear);
            }
            Acc::MinMax { val, seen, .. } => {
                val.clear();
                seen.clear();
            }
            Acc::MinMaxChar { val, seen, .. } => {
                val.clear();
                seen.clear();
            }
            Acc::MinMaxWide { val, seen, .. } => {
                val.clear();
                seen.clear();
            }
        }
    }

    fn push_group(&mut self) {
        match self {
            Acc::Count { nn } => nn.iter_mut().for_each(|n| n.push(0)),
            Acc::Sum { sum, nn } => {
                sum.push(0);
                nn.iter_mut().for_each(|n| n.push(0));
            }
            Acc::MinMax { val, seen, .. } => {
                val.push(0);
                seen.push(false);
            }
            Acc::MinMaxChar { val, seen, .. } => {
                val.push(Vec::new());
                seen.push(false);
            }
            Acc::MinMaxWide { val, seen, .. } => {
                val.push(0);
                seen.push(false);
            }
        }
    }

    /// Group `g`'s accumulated value.
    fn value(&self, g: usize) -> AccValue<'_> {
        match self {
            Acc::Count { nn } => AccValue::Count(nn.as_ref().map(|n| n[g])),
            Acc::Sum { sum, nn } => AccValue::Sum(sum[g], nn.as_ref().map(|n| n[g])),
            Acc::MinMax { val, seen, .. } => AccValue::MinMax(seen[g].then(|| val[g])),
            Acc::MinMaxChar { val, seen, .. } => {
                AccValue::MinMaxChar(seen[g].then(|| val[g].as_slice()))
            }
            Acc::MinMaxWide { val, seen, .. } => AccValue::MinMaxWide(seen[g].then(|| val[g])),
        }
    }

    /// Folds another state's value of the same aggregate into group `g`.
    fn fold(&mut self, g: usize, v: AccValue<'_>) -> Result<(), EvalError> {
        match (self, v) {
            (Acc::Count { nn }, AccValue::Count(n2)) => fold_count(nn, g, n2)?,
            (Acc::Sum { sum, nn }, AccValue::Sum(s2, n2)) => {
                sum[g] = sum[g].checked_add(s2).ok_or_else(merge_overflow)?;
                fold_count(nn, g, n2)?;
            }
            (Acc::MinMax { max, val, seen }, AccValue::MinMax(v2)) => {
                if let Some(v2) = v2 {
                    fold_extreme(*max, &mut val[g], &mut seen[g], v2);
                }
            }
            (Acc::MinMaxChar { max, val, seen, .. }, AccValue::MinMaxChar(v2)) => {
                if let Some(v2) = v2 {
                    fold_extreme_char(*max, &mut val[g], &mut seen[g], v2);
                }
            }
            (Acc::MinMaxWide { max, val, seen }, AccValue::MinMaxWide(v2)) => {
                if let Some(v2) = v2 {
                    fold_extreme_wide(*max, &mut val[g], &mut seen[g], v2);
                }
            }
            _ => {
                return Err(EvalError::PlanMismatch("accumulator kinds differ".into()));
            }
        }
        Ok(())
    }

    /// Bytes this accumulator takes in a result sent to the host: `groups` times its
    /// width, or for variable-length extremes each group's value with a 4-byte length.
    fn wire_bytes(&self, groups: usize) -> usize {
        match self {
            Acc::Count { nn } => groups * 8 * usize::from(nn.is_some()),
            Acc::Sum { nn, .. } => groups * (16 + 8 * usize::from(nn.is_some())),
            Acc::MinMax { .. } => groups * 9,
            Acc::MinMaxChar {
                variable: false,
                val,
                ..
            } => groups * (1 + val.first().map_or(0, Vec::len)),
            Acc::MinMaxChar {
                variable: true,
                val,
                ..
            } => val.iter().map(|v| 5 + v.len()).sum(),
            Acc::MinMaxWide { .. } => groups * 17,
        }
    }
}

/// One group's value of an accumulator, borrowed ([`Acc::value`], [`Acc::fold`]).
#[derive(Debug, Clone, Copy)]
enum AccValue<'a> {
    /// The values counted, where the aggregate counts its own.
    Count(Option<u64>),
    /// The sum, and the values summed where the aggregate counts its own.
    Sum(i128, Option<u64>),
    MinMax(Option<i64>),
    MinMaxChar(Option<&'a [u8]>),
    MinMaxWide(Option<i128>),
}

/// Adds another state's count of values (`n2`) to group `g`'s (both present or both
/// absent: the aggregations are the same).
fn fold_count(nn: &mut Option<Vec<u64>>, g: usize, n2: Option<u64>) -> Result<(), EvalError> {
    match (nn, n2) {
        (None, None) => Ok(()),
        (Some(n), Some(x)) => {
            n[g] = n[g].checked_add(x).ok_or_else(merge_overflow)?;
            Ok(())
        }
        _ => Err(EvalError::PlanMismatch(
            "an aggregate counts its values in one state and not in the other".into(),
        )),
    }
}

fn merge_overflow() -> EvalError {
    EvalError::Overflow {
        expr: "merging partial sums".into(),
    }
}

/// Folds `x` into a `MIN`/`MAX` accumulator (`val`, valid once `seen`).
#[inline(always)]
fn fold_extreme(max: bool, val: &mut i64, seen: &mut bool, x: i64) {
    if !*seen || better(max, x, *val) {
        *val = x;
        *seen = true;
    }
}

/// [`fold_extreme`] of stored `CHAR` bytes (compared bytewise, padding included).
#[inline]
fn fold_extreme_char(max: bool, val: &mut Vec<u8>, seen: &mut bool, x: &[u8]) {
    let want = if max {
        Ordering::Greater
    } else {
        Ordering::Less
    };
    if !*seen || x.cmp(val.as_slice()) == want {
        val.clear();
        val.extend_from_slice(x);
        *seen = true;
    }
}

/// [`fold_extreme`] of a 128-bit decimal.
#[inline(always)]
fn fold_extreme_wide(max: bool, val: &mut i128, seen: &mut bool, x: i128) {
    if !*seen || (if max { x > *val } else { x < *val }) {
        *val = x;
        *seen = true;
    }
}

/// A `SUM` of 128-bit decimals went past `i128` (DataFusion's sum would wrap around).
fn wide_sum_overflow() -> EvalError {
    EvalError::Overflow {
        expr: "SUM of DECIMAL(p, s) values (beyond 128 bits)".into(),
    }
}

#[inline(always)]
fn better(max: bool, new: i64, old: i64) -> bool {
    if max { new > old } else { new < old }
}

/// The partial (or final) state of an aggregation; see the [module docs](self).
#[derive(Debug, Clone, PartialEq)]
pub struct AggState {
    /// The aggregation's shape, shared by every state of it (a state is cloned per
    /// page evaluated ahead: these are not copied).
    funcs: Arc<[AggFunc]>,
    arg_types: Arc<[Option<DataType>]>,
    /// (schema index, stored type, offset in the key) per grouping column.
    group_cols: Arc<[(usize, ColumnType, usize)]>,
    key_width: usize,
    keys: Vec<u8>,
    /// Rows folded into each group (every `COUNT`, and the divisor of `AVG`).
    rows: Vec<u64>,
    groups: usize,
    packed: Vec<u128>,
    packed_index: PackedIndex,
    narrow: NarrowIndex,
    bytes_index: HashMap<Vec<u8>, u32, GroupHasher>,
    accs: Vec<Acc>,
    limit: usize,
}

impl AggState {
    pub(crate) fn new(agg: &Aggregation, schema: &csd_table::Schema, limit: usize) -> AggState {
        let mut group_cols = Vec::with_capacity(agg.group_by.len());
        let mut off = 0;
        for &c in &agg.group_by {
            let ty = schema
                .columns()
                .get(c)
                .map_or(ColumnType::Int64, |col| col.ty);
            group_cols.push((c, ty, off));
            off += ty.width();
        }
        let mut state = AggState {
            funcs: agg.aggregates.iter().map(|a| a.func).collect(),
            arg_types: agg
                .aggregates
                .iter()
                .map(|a| a.arg.as_ref().map(|e| e.ty))
                .collect(),
            group_cols: group_cols.into(),
            key_width: off,
            keys: Vec::new(),
            rows: Vec::new(),
            groups: 0,
            packed: Vec::new(),
            packed_index: PackedIndex::default(),
            narrow: NarrowIndex::default(),
            bytes_index: HashMap::default(),
            accs: agg
                .aggregates
                .iter()
                .map(|a| {
                    let nullable = a.arg.as_ref().is_some_and(|e| e.may_be_null());
                    Acc::new(a.func, a.arg.as_ref().map(|e| e.ty), nullable)
                })
                .collect(),
            limit: limit.max(1),
        };
        if state.group_cols.is_empty() {
            // The one global group exists even when no row is selected; it is always
            // group 0 and never looked up.
            state.append_group(&[]);
        }
        state
    }

    /// Number of groups so far.
    pub fn group_count(&self) -> usize {
        self.groups
    }

    /// Bytes this state would take on the wire to the host (keys plus accumulators).
    pub fn wire_bytes(&self) -> u64 {
        let accs: usize = self.accs.iter().map(|a| a.wire_bytes(self.groups)).sum();
        (self.groups * (self.key_width + 8) + accs) as u64
    }

    fn push_group(&mut self, key: &[u8]) -> u32 {
        let g = self.groups as u32;
        if self.key_width <= 16 {
            let p = pack(key);
            self.insert_packed(p);
        } else {
            self.bytes_index.insert(key.to_vec(), g);
            self.append_group(key);
        }
        g
    }

    /// Appends a new group's key, row count and accumulators (its index entry is the
    /// caller's).
    fn append_group(&mut self, key: &[u8]) {
        self.keys.extend_from_slice(key);
        self.rows.push(0);
        for a in &mut self.accs {
            a.push_group();
        }
        self.groups += 1;
    }

    /// [`AggState::append_group`] for a packed key (`key_width <= 16`).
    fn append_packed(&mut self, p: u128) {
        if self.groups == LINEAR_GROUPS && self.limit <= RESERVE_GROUPS {
            // A bounded table past its linear-search size is likely to fill: size its
            // index once instead of rehashing it on every doubling.
            let more = self.limit - self.groups;
            // Sized only: the index is empty until the state passes its linear
            // search (`insert_packed` then indexes every key).
            self.packed_index.reserve(self.limit, &[]);
            self.packed.reserve(more);
            self.keys.reserve(more * self.key_width);
            self.rows.reserve(more);
            for a in &mut self.accs {
                a.reserve(more);
            }
        }
        self.packed.push(p);
        let bytes = p.to_le_bytes();
        self.append_group(&bytes[..self.key_width]);
    }

    /// Appends a new group of key `p`, which the state does not hold. The index is kept
    /// only past the linear search ([`LINEAR_GROUPS`]): the state that passes it indexes
    /// every key at once, and a state that never does (a page's few groups, merged and
    /// cleared for the next page) never hashes a key nor clears a slot.
    fn insert_packed(&mut self, p: u128) -> u32 {
        let g = self.groups as u32;
        self.append_packed(p);
        match self.groups.cmp(&(LINEAR_GROUPS + 1)) {
            std::cmp::Ordering::Less => {}
            std::cmp::Ordering::Equal => self.packed_index.fill(&self.packed),
            std::cmp::Ordering::Greater => self.packed_index.insert(&self.packed),
        }
        g
    }

    /// Lets the state grow without a group limit (where states are only packaged
    /// together, e.g. several result chunks in one reply, no device memory bound
    /// applies).
    pub fn lift_group_limit(&mut self) {
        self.limit = usize::MAX;
    }

    fn check_limit(&self) -> Result<(), EvalError> {
        if self.groups >= self.limit {
            Err(EvalError::TooManyGroups { limit: self.limit })
        } else {
            Ok(())
        }
    }

    #[inline]
    fn lookup_packed(&mut self, p: u128) -> Result<u32, EvalError> {
        let found = if self.groups <= LINEAR_GROUPS {
            // Every group is in `packed`: the linear search is the whole answer (the
            // index of a recycled state may be sized for its arena; no probe of it).
            self.packed.iter().position(|&x| x == p).map(|g| g as u32)
        } else {
            self.packed_index.find(p, &self.packed)
        };
        match found {
            Some(g) => Ok(g),
            None if self.groups >= self.limit => {
                Err(EvalError::TooManyGroups { limit: self.limit })
            }
            None => Ok(self.insert_packed(p)),
        }
    }

    fn lookup_bytes(&mut self, key: &[u8]) -> Result<u32, EvalError> {
        if self.key_width <= 16 {
            return self.lookup_packed(pack(key));
        }
        match self.bytes_index.get(key) {
            Some(&g) => Ok(g),
            None => {
                self.check_limit()?;
                Ok(self.push_group(key))
            }
        }
    }

    /// [`AggState::group_ids`] of a key of at most two bytes whose columns are minipages
    /// (PAX): the key is the column bytes, little-endian at their offsets (as `packed`
    /// holds it), looked up in [`NarrowIndex`]; a key it does not know goes through
    /// [`AggState::lookup_packed`] (which numbers a new group, or finds one the table has
    /// not seen) and is remembered. `false` (nothing done) when a column is not a
    /// minipage of one- or two-byte values.
    fn narrow_ids(
        &mut self,
        view: &PageView<'_>,
        sel: &[u32],
        gids: &mut Vec<u32>,
    ) -> Result<bool, EvalError> {
        let w = self.key_width;
        // (minipage, value width, byte offset in the key) per grouping column.
        let mut cols: [(&[u8], usize, usize); 2] = [(&[], 0, 0); 2];
        if self.group_cols.is_empty() || self.group_cols.len() > cols.len() {
            return Ok(false);
        }
        for (slot, &(c, _, off)) in cols.iter_mut().zip(self.group_cols.iter()) {
            let cv = view.column(c)?;
            let cw = cv.width();
            match cv.contiguous() {
                Some(d) if (1..=2).contains(&cw) && off + cw <= w => *slot = (d, cw, off),
                _ => return Ok(false),
            }
        }
        let ncols = self.group_cols.len();
        let key = |i: usize| -> u32 {
            let mut k = 0u32;
            for &(d, cw, off) in &cols[..ncols] {
                let o = i * cw;
                let v = match cw {
                    1 => d.get(o).map_or(0, |&b| u32::from(b)),
                    _ => d
                        .get(o..o + 2)
                        .map_or(0, |b| u32::from(u16::from_le_bytes([b[0], b[1]]))),
                };
                k |= v << (8 * off);
            }
            k
        };
        for &i in sel {
            let p = key(i as usize);
            let slot = NarrowIndex::slot(p);
            let hint = self.narrow.slots()[slot];
            let g = match hint.checked_sub(1) {
                Some(g) if self.packed.get(g as usize) == Some(&u128::from(p)) => g,
                _ => {
                    let g = self.lookup_packed(u128::from(p))?;
                    self.narrow.slots()[slot] = g + 1;
                    g
                }
            };
            gids.push(g);
        }
        Ok(true)
    }

    /// Computes the group of every selected row into `gids`.
    fn group_ids(
        &mut self,
        view: &PageView<'_>,
        sel: &[u32],
        gids: &mut Vec<u32>,
        packed: &mut Vec<u128>,
        keybuf: &mut Vec<u8>,
    ) -> Result<(), EvalError> {
        gids.clear();
        // Borrowed (the lookups below run after the last use): no reference count
        // touched per page on a line every evaluating thread shares.
        if self.key_width <= 2 && self.narrow_ids(view, sel, gids)? {
            return Ok(());
        }
        let cols = &self.group_cols;
        if self.key_width <= 16 {
            packed.clear();
            packed.resize(sel.len(), 0);
            for &(c, _, off) in cols.iter() {
                let cv = view.column(c)?;
                let w = cv.width();
                match cv.contiguous() {
                    // A minipage: one masked load per row (the bytes little-endian, as
                    // below).
                    // One byte (a flag such as TPC-H's l_returnflag): a byte load.
                    Some(data) if w == 1 => {
                        for (p, &i) in packed.iter_mut().zip(sel) {
                            *p |=
                                u128::from(data.get(i as usize).copied().unwrap_or(0)) << (8 * off);
                        }
                    }
                    Some(data) if (1..=16).contains(&w) => {
                        for (k, &i) in sel.iter().enumerate() {
                            packed[k] |=
                                crate::kernels::value_bits(data, i as usize, w) << (8 * off);
                        }
                    }
                    _ => {
                        for (k, &i) in sel.iter().enumerate() {
                            let bytes = cv.raw(i as usize).unwrap_or(&[]);
                            let mut v = 0u128;
                            for (b, &byte) in bytes.iter().enumerate() {
                                v |= u128::from(byte) << (8 * (off + b));
                            }
                            packed[k] |= v;
                        }
                    }
                }
            }
            let mut last: Option<(u128, u32)> = None;
            for (k, &p) in packed.iter().enumerate() {
                // Only a state past the linear search probes its index (checked per row:
                // a page can take it past): hashing every row's key ahead for a state
                // of four groups (TPC-H Q1) cost time and prefetched nothing used.
                if self.groups > LINEAR_GROUPS
                    && let Some(&ahead) = packed.get(k + PREFETCH_AHEAD)
                {
                    self.packed_index.prefetch(ahead);
                }
                let g = match last {
                    Some((lp, lg)) if lp == p => lg,
                    _ => {
                        let g = self.lookup_packed(p)?;
                        last = Some((p, g));
                        g
                    }
                };
                gids.push(g);
            }
        } else {
            let w = self.key_width;
            keybuf.clear();
            keybuf.resize(sel.len() * w, 0);
            for &(c, _, off) in cols.iter() {
                let cv = view.column(c)?;
                for (k, &i) in sel.iter().enumerate() {
                    let bytes = cv.raw(i as usize).unwrap_or(&[]);
                    let dst = &mut keybuf[k * w + off..k * w + off + bytes.len()];
                    dst.copy_from_slice(bytes);
                }
            }
            for k in 0..sel.len() {
                let g = self.lookup_bytes(&keybuf[k * w..(k + 1) * w])?;
                gids.push(g);
            }
        }
        Ok(())
    }

    /// Folds the selected rows of one page into the state. Returns the number of
    /// accumulator updates (rows × aggregates). `same[a]`, where given, names an
    /// earlier aggregate whose input is aggregate `a`'s own (TPC-H Q1's `SUM(x)` and
    /// `AVG(x)`): when both keep a plain sum, `a` adds the per-group sums that one
    /// added instead of summing the rows again.
    pub(crate) fn update(
        &mut self,
        view: &PageView<'_>,
        sel: &[u32],
        inputs: &[AggInput<'_>],
        same: &[Option<usize>],
        scratch: &mut GroupScratch,
    ) -> Result<u64, EvalError> {
        if inputs.len() != self.accs.len() {
            return Err(EvalError::PlanMismatch(
                "aggregate inputs do not match the aggregation".into(),
            ));
        }
        let grouped = !self.group_cols.is_empty();
        if grouped {
            self.group_ids(
                view,
                sel,
                &mut scratch.gids,
                &mut scratch.packed,
                &mut scratch.keybuf,
            )?;
        }
        let GroupScratch { gids, deltas, .. } = scratch;
        let gids = &*gids;
        deltas.clear();
        deltas.resize(self.accs.len(), None);
        let n = sel.len();
        // With few groups (TPC-H Q1's four) consecutive rows keep hitting the same
        // accumulators: a read-modify-write chain through memory per group. Two banks
        // of local accumulators, even rows into one and odd rows into the other, halve
        // the chains; they are added to the state's once per page.
        let few = grouped && self.groups <= LINEAR_GROUPS;
        if few {
            let mut bank = [[0u64; LINEAR_GROUPS]; 2];
            for (k, &g) in gids.iter().enumerate() {
                bank[k & 1][g as usize] += 1;
            }
            for (g, r) in self.rows.iter_mut().enumerate() {
                *r += bank[0][g] + bank[1][g];
            }
        } else if grouped {
            for &g in gids {
                self.rows[g as usize] += 1;
            }
        } else {
            self.rows[0] += n as u64;
        }
        let gid = |k: usize| if grouped { gids[k] as usize } else { 0 };
        let groups = self.groups;
        for (a, (acc, input)) in self.accs.iter_mut().zip(inputs).enumerate() {
            match (acc, input) {
                (Acc::Count { nn: Some(nn) }, AggInput::Valid(ok)) => {
                    for (k, &v) in ok.iter().enumerate() {
                        nn[gid(k)] += u64::from(v);
                    }
                }
                (Acc::Count { nn: None }, _) => {}
                (Acc::Sum { sum, nn: Some(nn) }, AggInput::NumValid(v, ok)) => {
                    // |sum| < rows * 2^63 < 2^127 while rows < 2^64: no overflow
                    for (k, (&x, &valid)) in v.iter().zip(ok.iter()).enumerate() {
                        if valid {
                            let g = gid(k);
                            sum[g] += i128::from(x);
                            nn[g] += 1;
                        }
                    }
                }
                (Acc::MinMax { max, val, seen }, AggInput::NumValid(v, ok)) => {
                    let max = *max;
                    for (k, (&x, &valid)) in v.iter().zip(ok.iter()).enumerate() {
                        if valid {
                            let g = gid(k);
                            fold_extreme(max, &mut val[g], &mut seen[g], x);
                        }
                    }
                }
                (Acc::Sum { sum, nn: None }, AggInput::Num(v)) => {
                    // |sum| < rows * 2^63 < 2^127 while rows < 2^64: no overflow
                    if few || !grouped {
                        let shared = same.get(a).copied().flatten();
                        let d = match shared.and_then(|j| deltas.get(j).copied().flatten()) {
                            Some(d) => d,
                            None if few => few_group_sums(gids, v, groups),
                            None => {
                                let mut d = [0i128; LINEAR_GROUPS];
                                d[0] = v.iter().map(|&x| i128::from(x)).sum::<i128>();
                                d
                            }
                        };
                        for (s, d) in sum.iter_mut().zip(d) {
                            *s += d;
                        }
                        deltas[a] = Some(d);
                    } else {
                        for (&g, &x) in gids.iter().zip(v.iter()) {
                            sum[g as usize] += i128::from(x);
                        }
                    }
                }
                (Acc::MinMax { max, val, seen }, AggInput::Num(v)) => {
                    let max = *max;
                    for (k, &x) in v.iter().enumerate() {
                        let g = if grouped { gids[k] as usize } else { 0 };
                        fold_extreme(max, &mut val[g], &mut seen[g], x);
                    }
                }
                (
                    Acc::MinMaxChar {
                        max,
                        variable,
                        val,
                        seen,
                    },
                    AggInput::Char(cv),
                ) => {
                    let nulls = cv.may_have_nulls();
                    for (k, &i) in sel.iter().enumerate() {
                        if nulls && cv.is_null(i as usize) {
                            continue;
                        }
                        let g = if grouped { gids[k] as usize } else { 0 };
                        // A variable-length value's own bytes; a CHAR's stored bytes.
                        let b = if *variable {
                            cv.bytes(i as usize)
                        } else {
                            cv.raw(i as usize)
                        };
                        fold_extreme_char(*max, &mut val[g], &mut seen[g], b.unwrap_or(&[]));
                    }
                }
                (Acc::Sum { sum, nn }, AggInput::Wide(v, ok)) => {
                    for (k, &x) in v.iter().enumerate() {
                        if ok.is_some_and(|ok| !ok[k]) {
                            continue;
                        }
                        let g = gid(k);
                        sum[g] = sum[g].checked_add(x).ok_or_else(wide_sum_overflow)?;
                        if let Some(nn) = nn.as_mut() {
                            nn[g] += 1;
                        }
                    }
                }
                (Acc::MinMaxWide { max, val, seen }, AggInput::Wide(v, ok)) => {
                    for (k, &x) in v.iter().enumerate() {
                        if ok.is_some_and(|ok| !ok[k]) {
                            continue;
                        }
                        let g = gid(k);
                        fold_extreme_wide(*max, &mut val[g], &mut seen[g], x);
                    }
                }
                _ => {
                    return Err(EvalError::PlanMismatch(
                        "an aggregate's input has the wrong kind".into(),
                    ));
                }
            }
        }
        Ok((n * self.accs.len()) as u64)
    }

    /// Merges another partial state of the same aggregation into this one.
    pub fn merge(&mut self, other: AggState) -> Result<(), EvalError> {
        self.merge_from(&other)
    }

    /// [`AggState::merge`] of a state left as it was (its buffers can be reused).
    pub fn merge_from(&mut self, other: &AggState) -> Result<(), EvalError> {
        if self.funcs != other.funcs
            || self.arg_types != other.arg_types
            || self.group_cols != other.group_cols
        {
            return Err(EvalError::PlanMismatch(
                "the aggregations differ (functions, argument types or grouping columns)".into(),
            ));
        }
        let w = self.key_width;
        let grouped = !self.group_cols.is_empty();
        // Keys of up to 16 bytes: the other state's packed keys, their probes fetched
        // first (`prefetch_probes`).
        let packed = grouped && w <= 16 && other.packed.len() == other.groups;
        if packed {
            self.prefetch_probes(other.packed.iter().copied());
        }
        for g in 0..other.groups {
            let mine = if packed {
                self.lookup_packed(other.packed[g])? as usize
            } else if grouped {
                self.lookup_bytes(&other.keys[g * w..(g + 1) * w])? as usize
            } else {
                0
            };
            self.fold_group(mine, other.rows[g], other.accs.iter().map(|a| a.value(g)))?;
        }
        Ok(())
    }

    /// Folds one group of another state (its rows and accumulator values, in aggregate
    /// order) into group `mine`.
    fn fold_group<'a>(
        &mut self,
        mine: usize,
        rows: u64,
        values: impl ExactSizeIterator<Item = AccValue<'a>>,
    ) -> Result<(), EvalError> {
        if values.len() != self.accs.len() {
            return Err(EvalError::PlanMismatch("accumulator counts differ".into()));
        }
        self.rows[mine] = self.rows[mine]
            .checked_add(rows)
            .ok_or_else(merge_overflow)?;
        for (a, v) in self.accs.iter_mut().zip(values) {
            a.fold(mine, v)?;
        }
        Ok(())
    }

    /// This state as a [`ScalarState`], if it is one: no `GROUP BY`, at most
    /// [`SCALAR_ACCS`] aggregates, none of them a `MIN`/`MAX` of characters.
    pub fn scalar(&self) -> Option<ScalarState> {
        if !self.group_cols.is_empty() || self.groups != 1 || self.accs.len() > SCALAR_ACCS {
            return None;
        }
        let mut st = ScalarState {
            rows: self.rows[0],
            n: self.accs.len() as u8,
            kinds: [ScalarKind::Count; SCALAR_ACCS],
            vals: [0; SCALAR_ACCS],
        };
        for (a, acc) in self.accs.iter().enumerate() {
            (st.kinds[a], st.vals[a]) = match acc.value(0) {
                AccValue::Count(None) => (ScalarKind::Count, 0),
                AccValue::Sum(s, None) => (ScalarKind::Sum, s),
                // An aggregate that counts its own values has no inline form.
                AccValue::Count(Some(_)) | AccValue::Sum(_, Some(_)) => return None,
                AccValue::MinMax(Some(v)) => (ScalarKind::Extreme, i128::from(v)),
                AccValue::MinMax(None) => (ScalarKind::NoExtreme, 0),
                AccValue::MinMaxChar(_) | AccValue::MinMaxWide(_) => return None,
            };
        }
        Some(st)
    }

    /// Back to the state [`AggState::new`] made (no group, or the one global group of
    /// a state without `GROUP BY`, empty), keeping every buffer: a page's state is
    /// reused for a later page instead of allocated anew.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.rows.clear();
        if self.groups > LINEAR_GROUPS {
            // Only a state past its linear search has keys in its index.
            self.packed_index.clear();
        }
        self.groups = 0;
        self.packed.clear();
        self.bytes_index.clear();
        for a in &mut self.accs {
            a.clear();
        }
        if self.group_cols.is_empty() {
            self.append_group(&[]);
        }
    }

    /// Empties the one group of a state without `GROUP BY` (its rows and accumulators
    /// back to their start), keeping every buffer; a grouped state is left alone.
    pub fn reset_scalar(&mut self) {
        if !self.group_cols.is_empty() || self.groups != 1 {
            return;
        }
        self.rows[0] = 0;
        for a in &mut self.accs {
            match a {
                Acc::Count { nn } => nn.iter_mut().for_each(|n| n[0] = 0),
                Acc::Sum { sum, nn } => {
                    sum[0] = 0;
                    nn.iter_mut().for_each(|n| n[0] = 0);
                }
                Acc::MinMax { val, seen, .. } => {
                    val[0] = 0;
                    seen[0] = false;
                }
                Acc::MinMaxChar { val, seen, .. } => {
                    val[0].clear();
                    seen[0] = false;
                }
                Acc::MinMaxWide { val, seen, .. } => {
                    val[0] = 0;
                    seen[0] = false;
                }
            }
        }
    }

    /// Per aggregate, the kind of value a [`PageGroups`] holds for it, if this is a state
    /// whose groups travel as one: grouped, keys of at most 16 bytes, at most
    /// [`SCALAR_ACCS`] aggregates, each a `COUNT(*)`, a `SUM` that does not count its own
    /// values (its argument is never NULL) or a `MIN`/`MAX` of numbers.
    fn group_kinds(&self) -> Option<[ScalarKind; SCALAR_ACCS]> {
        if self.group_cols.is_empty() || self.key_width > 16 || self.accs.len() > SCALAR_ACCS {
            return None;
        }
        let mut kinds = [ScalarKind::Count; SCALAR_ACCS];
        for (k, acc) in kinds.iter_mut().zip(&self.accs) {
            *k = match acc {
                Acc::Count { nn: None } => ScalarKind::Count,
                Acc::Sum { nn: None, .. } => ScalarKind::Sum,
                Acc::MinMax { .. } => ScalarKind::Extreme,
                _ => return None,
            };
        }
        Some(kinds)
    }

    /// Whether this state's groups can travel as a [`PageGroups`] (see
    /// [`AggState::page_groups`]).
    pub fn has_page_groups(&self) -> bool {
        self.group_kinds().is_some()
    }

    /// This state's groups, in its order, written into `buffer` (emptied first), if the
    /// state is one whose groups travel as one ([`AggState::has_page_groups`]); else
    /// `None` (the buffer is dropped).
    pub fn page_groups(&self, mut buffer: Vec<u128>) -> Option<PageGroups> {
        let kinds = self.group_kinds()?;
        debug_assert_eq!(
            self.packed.len(),
            self.groups,
            "keys of 16 bytes are packed"
        );
        let n = self.accs.len();
        buffer.clear();
        buffer.reserve(self.groups * (2 + n));
        for (g, (&key, &rows)) in self.packed.iter().zip(&self.rows).enumerate() {
            buffer.push(key);
            let at = buffer.len();
            buffer.push(u128::from(rows));
            for (a, acc) in self.accs.iter().enumerate() {
                let v = match acc {
                    Acc::Sum { sum, .. } => sum[g] as u128,
                    Acc::MinMax { val, seen, .. } => {
                        buffer[at] |= u128::from(seen[g]) << (64 + a);
                        i128::from(val[g]) as u128
                    }
                    _ => 0,
                };
                buffer.push(v);
            }
        }
        Some(PageGroups {
            key_width: self.key_width as u8,
            n: n as u8,
            kinds,
            data: buffer,
        })
    }

    /// Before a page's packed `keys` are looked up in a state past its linear search:
    /// a page's few groups hit a table of thousands at random, so their home slots are
    /// fetched first (the misses overlap), then the keys those slots name, which the
    /// probes compare.
    fn prefetch_probes(&self, keys: impl Iterator<Item = u128> + Clone) {
        if self.groups <= LINEAR_GROUPS {
            return;
        }
        for p in keys.clone() {
            self.packed_index.prefetch(p);
        }
        for p in keys {
            self.packed_index.prefetch_key(p, &self.packed);
        }
    }

    /// Merges a page's [`PageGroups`] of the same aggregation: exactly what merging
    /// the page's state ([`AggState::merge_from`]) does. Groups of another aggregation
    /// (key width, aggregates) are an error, before anything changes.
    pub fn merge_groups(&mut self, p: &PageGroups) -> Result<(), EvalError> {
        let n = usize::from(p.n);
        let same = self
            .group_kinds()
            .is_some_and(|k| n == self.accs.len() && k[..n] == p.kinds[..n]);
        if !same || usize::from(p.key_width) != self.key_width {
            return Err(EvalError::PlanMismatch(
                "a page's groups and the state of another aggregation".into(),
            ));
        }
        let stride = 2 + n;
        self.prefetch_probes(p.data.chunks_exact(stride).map(|e| e[0]));
        let kinds = p.kinds;
        for e in p.data.chunks_exact(stride) {
            let mine = self.lookup_packed(e[0])? as usize;
            let seen = (e[1] >> 64) as u64;
            let values = (e[2..].iter().enumerate())
                .map(|(a, &v)| kinds[a].value(v as i128, seen >> a & 1 == 1));
            self.fold_group(mine, e[1] as u64, values)?;
        }
        Ok(())
    }

    /// Merges a [`ScalarState`] of the same aggregation (see [`AggState::scalar`]).
    pub fn merge_scalar(&mut self, s: &ScalarState) -> Result<(), EvalError> {
        if !self.group_cols.is_empty() {
            return Err(EvalError::PlanMismatch(
                "a grouped state and the state of an aggregation without GROUP BY".into(),
            ));
        }
        let values = (0..usize::from(s.n)).map(|a| s.value(a));
        self.fold_group(0, s.rows, values)
    }

    /// The grouping columns: schema index and stored type, in `GROUP BY` order.
    pub fn group_columns(&self) -> impl ExactSizeIterator<Item = (usize, ColumnType)> + '_ {
        self.group_cols.iter().map(|&(c, ty, _)| (c, ty))
    }

    /// The stored bytes of grouping column `i` of group `g` (`CHAR` keeps its padding).
    pub fn key_bytes(&self, g: usize, i: usize) -> &[u8] {
        let Some(&(_, ty, off)) = self.group_cols.get(i) else {
            return &[];
        };
        let start = g * self.key_width + off;
        self.keys.get(start..start + ty.width()).unwrap_or(&[])
    }

    /// Rows folded into each group (the count of every `COUNT`, the divisor of `AVG`).
    pub fn group_rows(&self) -> &[u64] {
        &self.rows
    }

    /// The values aggregate `a` folded, per group: the group's rows, or for an argument
    /// that may be NULL the rows where it was not (`COUNT(x)`, `AVG(x)`'s divisor; a
    /// `SUM(x)` of 0 values is NULL).
    pub fn value_rows(&self, a: usize) -> Option<&[u64]> {
        Some(match self.accs.get(a)? {
            Acc::Count { nn: Some(n) } | Acc::Sum { nn: Some(n), .. } => n,
            _ => &self.rows,
        })
    }

    /// Aggregate `a`'s raw accumulator, per group: what a caller that merges states
    /// itself (a SQL engine's final aggregation) needs.
    pub fn accumulator(&self, a: usize) -> Option<AccView<'_>> {
        Some(match self.accs.get(a)? {
            Acc::Count { nn: Some(n) } => AccView::Count(n),
            Acc::Count { nn: None } => AccView::Count(&self.rows),
            Acc::Sum { sum, .. } => AccView::Sum(sum),
            Acc::MinMax { val, seen, .. } => AccView::MinMax { val, seen },
            Acc::MinMaxChar { val, seen, .. } => AccView::MinMaxChar { val, seen },
            Acc::MinMaxWide { val, seen, .. } => AccView::MinMaxWide { val, seen },
        })
    }
}

/// One aggregate's accumulator over every group of an [`AggState`] (see
/// [`AggState::accumulator`]).
#[derive(Debug, Clone, Copy)]
pub enum AccView<'a> {
    /// `COUNT`: the rows (or values, for `COUNT(x)` of an `x` that may be NULL) of each
    /// group.
    Count(&'a [u64]),
    /// `SUM` / `AVG`: the exact sum of each group, in units of the argument's scale (the
    /// count of `AVG` is [`AggState::value_rows`]).
    Sum(&'a [i128]),
    /// `MIN` / `MAX` of a number or date; `seen` is false for a group without values.
    MinMax {
        /// The extreme value per group.
        val: &'a [i64],
        /// Whether the group saw a value.
        seen: &'a [bool],
    },
    /// `MIN` / `MAX` of a `CHAR` column (stored bytes, padding included), or of a
    /// `VARCHAR` / `VARBINARY` column (the values' own bytes, compared byte for byte).
    MinMaxChar {
        /// The extreme value per group.
        val: &'a [Vec<u8>],
        /// Whether the group saw a value.
        seen: &'a [bool],
    },
    /// `MIN` / `MAX` of a `DECIMAL(p, s)` (128-bit) value, in units of its scale.
    MinMaxWide {
        /// The extreme value per group.
        val: &'a [i128],
        /// Whether the group saw a value.
        seen: &'a [bool],
    },
}

/// Most aggregates a [`ScalarState`] holds.
pub const SCALAR_ACCS: usize = 8;

/// The one group of an aggregation without `GROUP BY` whose accumulators are numbers
/// (`COUNT`, `SUM`, `AVG`, `MIN`/`MAX` of numbers and dates), held inline: a page
/// evaluated on one thread reaches the thread that merges it without an allocation or
/// a shared reference count (each page's cloned [`AggState`] cost TPC-H Q6 about 15% of
/// its CPU in allocating, freeing across threads and merging). 160 bytes, moved a few
/// times per page. Made by [`AggState::scalar`], merged by [`AggState::merge_scalar`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalarState {
    rows: u64,
    /// Aggregates held.
    n: u8,
    /// Per aggregate: what its value is ([`ScalarState::value`]).
    kinds: [ScalarKind; SCALAR_ACCS],
    /// Per aggregate: a sum, or a `MIN`/`MAX` value.
    vals: [i128; SCALAR_ACCS],
}

// Kept small: every page's state is moved a few times on its way to the merge.
const _: () = assert!(std::mem::size_of::<ScalarState>() <= 160);

/// What one aggregate's value in a [`ScalarState`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScalarKind {
    Count,
    Sum,
    /// A `MIN`/`MAX` that saw a value.
    Extreme,
    /// A `MIN`/`MAX` that saw none.
    NoExtreme,
}

impl ScalarState {
    /// Aggregate `a`'s value.
    fn value(&self, a: usize) -> AccValue<'static> {
        self.kinds[a].value(self.vals[a], true)
    }
}

impl ScalarKind {
    /// The value of an aggregate of this kind held as the word `v` (an extreme written
    /// from an `i64`), where `seen` says whether a `MIN`/`MAX` saw a value.
    fn value(self, v: i128, seen: bool) -> AccValue<'static> {
        match self {
            ScalarKind::Count => AccValue::Count(None),
            ScalarKind::Sum => AccValue::Sum(v, None),
            ScalarKind::Extreme => AccValue::MinMax(seen.then_some(v as i64)),
            ScalarKind::NoExtreme => AccValue::MinMax(None),
        }
    }
}

/// The groups of one page's aggregation with `GROUP BY`, in one buffer: what a page
/// evaluated on one thread hands to the thread that merges it. A page's whole
/// [`AggState`] (its boxed header, its accumulators and five buffers, each on lines of
/// its own) crossed between cores twice a page: written on the evaluating core, read by
/// the merging one, cleared there and written again on an evaluating core. On TPC-H
/// Q15's pages of about four groups the merging thread (the scan's critical one) spent
/// 27% of its samples merging page states and giving them back (12% with their groups
/// instead), and the fold a third of its own on its first loads from the page's state.
/// Here the evaluator keeps one state of its own, cleared per page, and hands over its
/// groups: `2 + aggregates` words a group.
///
/// For keys of at most 16 bytes and aggregates whose values are [`ScalarState`]'s kinds
/// (at most [`SCALAR_ACCS`]; `COUNT(*)`, `SUM`/`AVG` of an argument that is never NULL,
/// `MIN`/`MAX` of numbers): see [`AggState::page_groups`]; merged by
/// [`AggState::merge_groups`].
#[derive(Debug, Clone, PartialEq)]
pub struct PageGroups {
    /// The packed keys' width in bytes.
    key_width: u8,
    /// Aggregates held.
    n: u8,
    /// Per aggregate: `Count`, `Sum` or `Extreme` (a `MIN`/`MAX`, whose groups say
    /// whether it saw a value).
    kinds: [ScalarKind; SCALAR_ACCS],
    /// Per group, in first-seen order, `2 + n` words: the packed key; the group's rows in
    /// the low 64 bits, with bit `64 + a` set where `MIN`/`MAX` `a` saw a value; each
    /// aggregate's value (a sum, or an extreme as an `i64` widened; 0 for a count).
    data: Vec<u128>,
}

impl PageGroups {
    /// Groups held.
    pub fn len(&self) -> usize {
        self.data.len() / (2 + usize::from(self.n))
    }

    /// Whether no group is held.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Hints the groups' lines into the cache (a page's groups are written on another
    /// core: the thread that merges them hints the next page's while it merges one).
    pub fn prefetch(&self) {
        csd_sim::prefetch::items(&self.data);
    }

    /// The buffer, for a later page's groups ([`AggState::page_groups`]).
    pub fn into_buffer(self) -> Vec<u128> {
        self.data
    }
}

/// Reusable buffers for group-id computation.
#[derive(Debug, Default)]
pub(crate) struct GroupScratch {
    gids: Vec<u32>,
    packed: Vec<u128>,
    keybuf: Vec<u8>,
    /// Per aggregate of the page being folded: the per-group sums a plain `SUM`/`AVG`
    /// added (few groups or none), for an aggregate of the same input to add again.
    deltas: Vec<Option<[i128; LINEAR_GROUPS]>>,
}

fn pack(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    u128::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_table::{Column, Schema, Value};
    use proptest::prelude::*;
    use std::collections::HashMap as Reference;

    /// Two `INT64` columns.
    fn two_ints() -> Schema {
        let cols = vec![
            Column::new("a", ColumnType::Int64),
            Column::new("b", ColumnType::Int64),
        ];
        Schema::new("t", cols).expect("schema")
    }

    /// A state grouping on two `INT64` columns (a 16-byte packed key), `COUNT(*)` only.
    fn state(limit: usize) -> AggState {
        let schema = two_ints();
        let agg = Aggregation {
            group_by: vec![0, 1],
            aggregates: Vec::new(),
        };
        AggState::new(&agg, &schema, limit)
    }

    proptest! {
        /// Sums by few groups equal the plain `i128` sums, on both sides of the bound
        /// that picks `i64` banks (small values, values near `i64`'s ends, `i64::MIN`).
        #[test]
        fn few_group_sums_are_exact(
            groups in 1usize..=LINEAR_GROUPS,
            rows in proptest::collection::vec(
                (0u32..16, prop_oneof![
                    -1_000_000i64..1_000_000,
                    Just(i64::MAX),
                    Just(i64::MIN),
                    any::<i64>(),
                ]),
                0..600,
            ),
            start in proptest::collection::vec(any::<i64>(), LINEAR_GROUPS),
        ) {
            let gids: Vec<u32> = rows.iter().map(|&(g, _)| g % groups as u32).collect();
            let v: Vec<i64> = rows.iter().map(|&(_, x)| x).collect();
            let mut sum: Vec<i128> = start[..groups].iter().map(|&x| i128::from(x)).collect();
            let mut want = sum.clone();
            for (&g, &x) in gids.iter().zip(&v) {
                want[g as usize] += i128::from(x);
            }
            for (s, d) in sum.iter_mut().zip(few_group_sums(&gids, &v, groups)) {
                *s += d;
            }
            prop_assert_eq!(sum, want);
        }

        /// Model-based: the packed index numbers groups in first-seen order, finds every
        /// key it holds, refuses a new key at the limit (changing nothing) and takes one
        /// again once the limit is lifted, whatever the table sizes it went through.
        #[test]
        fn packed_index_numbers_groups_as_a_hash_map(
            keys in proptest::collection::vec((0u64..300, 0u64..3), 1..2_000),
            limit in prop_oneof![Just(usize::MAX), 1usize..400],
            lift_at in 0usize..2_000,
        ) {
            let mut st = state(limit);
            let mut model: Reference<u128, u32> = Reference::new();
            let mut model_limit = limit;
            for (i, &(a, b)) in keys.iter().enumerate() {
                if i == lift_at {
                    st.lift_group_limit();
                    model_limit = usize::MAX;
                }
                let p = u128::from(a) | (u128::from(b) << 64);
                let got = st.lookup_packed(p);
                let want = match model.get(&p) {
                    Some(&g) => Ok(g),
                    None if model.len() >= model_limit => Err(()),
                    None => {
                        let g = model.len() as u32;
                        model.insert(p, g);
                        Ok(g)
                    }
                };
                match (got, want) {
                    (Ok(g), Ok(w)) => prop_assert_eq!(g, w),
                    (Err(EvalError::TooManyGroups { .. }), Err(())) => {}
                    (g, w) => prop_assert!(false, "key {p:#x}: got {g:?}, want {w:?}"),
                }
                prop_assert_eq!(st.group_count(), model.len());
            }
            for (&p, &g) in &model {
                // The index holds every key once the state is past its linear search,
                // and none before.
                let indexed = (st.group_count() > LINEAR_GROUPS).then_some(g);
                prop_assert_eq!(st.packed_index.find(p, &st.packed), indexed);
                prop_assert_eq!(st.packed[g as usize], p);
            }
            if st.group_count() <= LINEAR_GROUPS {
                prop_assert!(st.packed_index.slots.iter().all(|&s| s == 0));
            }
        }
    }

    proptest! {
        /// Model-based: merging pages' grouped states (packed keys, any number of groups
        /// a page, the merged state below and past its linear lookup) gives the groups,
        /// in first-seen order, and the row counts of one state that saw every row.
        #[test]
        fn grouped_pages_merge_as_one_state(
            pages in proptest::collection::vec(
                proptest::collection::vec((0u64..400, 0u64..2), 0..40),
                0..60,
            ),
        ) {
            let mut merged = state(usize::MAX);
            let mut whole = state(usize::MAX);
            for page in &pages {
                let mut st = state(usize::MAX);
                for &(a, b) in page {
                    let p = u128::from(a) | (u128::from(b) << 64);
                    let g = st.lookup_packed(p).expect("group") as usize;
                    st.rows[g] += 1;
                    let g = whole.lookup_packed(p).expect("group") as usize;
                    whole.rows[g] += 1;
                }
                merged.merge_from(&st).expect("merge");
            }
            prop_assert_eq!(&merged.packed, &whole.packed);
            prop_assert_eq!(&merged.keys, &whole.keys);
            prop_assert_eq!(&merged.rows, &whole.rows);
            for (g, &p) in whole.packed.iter().enumerate() {
                prop_assert_eq!(merged.lookup_packed(p).ok(), Some(g as u32));
            }
        }
    }

    /// `SUM(x), MAX(y), MIN(y), COUNT(*)` grouped by `k1, k2` (or `k1` alone) over
    /// `(k1, k2, x, y)` with `y` nullable.
    fn page_groups_state(two_keys: bool, with_count_y: bool) -> AggState {
        let schema = Schema::new(
            "t",
            vec![
                Column::new("k1", ColumnType::Int32),
                Column::new("k2", ColumnType::Int64),
                Column::new("x", ColumnType::Int64),
                Column::new("y", ColumnType::Int64).with_nullable(true),
            ],
        )
        .expect("schema");
        let col = |i| crate::plan::Expr::column(&schema, i).expect("column");
        let agg = |func, arg| crate::plan::Aggregate {
            func,
            arg,
            ty: DataType::Int,
        };
        let mut aggregates = vec![
            agg(AggFunc::Sum, Some(col(2))),
            agg(AggFunc::Max, Some(col(3))),
            agg(AggFunc::Min, Some(col(3))),
            agg(AggFunc::CountStar, None),
        ];
        if with_count_y {
            aggregates.push(agg(AggFunc::Count, Some(col(3))));
        }
        let group_by = if two_keys { vec![0, 1] } else { vec![0] };
        let a = Aggregation {
            group_by,
            aggregates,
        };
        AggState::new(&a, &schema, usize::MAX)
    }

    /// Folds a row `(k1, k2, x, y)` into `st` as evaluating it would.
    fn fold_row(st: &mut AggState, (k1, k2, x, y): (i32, i64, i64, Option<i64>)) {
        let mut key = k1.to_le_bytes().to_vec();
        if st.key_width > 4 {
            key.extend_from_slice(&k2.to_le_bytes());
        }
        let g = st.lookup_bytes(&key).expect("group") as usize;
        let values = [
            AccValue::Sum(i128::from(x), None),
            AccValue::MinMax(y),
            AccValue::MinMax(y),
            AccValue::Count(None),
        ];
        st.fold_group(g, 1, values.into_iter()).expect("fold");
    }

    proptest! {
        /// Model-based: a page's groups handed over as [`PageGroups`] (from a state
        /// reused page after page, as an evaluator does) merge into exactly the state
        /// that merging the pages' own states gives: keys in first-seen order, rows,
        /// sums, and extremes of a nullable column (groups that saw only NULLs), below
        /// and past the merged state's linear lookup.
        #[test]
        fn page_groups_merge_as_the_pages_states(
            pages in proptest::collection::vec(
                proptest::collection::vec(
                    (0i32..300, 0i64..2, any::<i64>(), proptest::option::of(-50i64..50)),
                    0..40,
                ),
                0..40,
            ),
            two_keys in any::<bool>(),
        ) {
            let mut by_states = page_groups_state(two_keys, false);
            let mut by_groups = by_states.clone();
            let mut reused = by_states.clone();
            let mut buffer = Vec::new();
            for page in &pages {
                let mut st = page_groups_state(two_keys, false);
                reused.clear();
                for &row in page {
                    // Sums of at most 40 rows of `i64`s cannot leave `i128`.
                    fold_row(&mut st, row);
                    fold_row(&mut reused, row);
                }
                by_states.merge_from(&st).expect("merge state");
                let g = reused.page_groups(buffer).expect("groups");
                prop_assert_eq!(g.len(), st.group_count());
                by_groups.merge_groups(&g).expect("merge groups");
                buffer = g.into_buffer();
            }
            prop_assert_eq!(&by_groups, &by_states);
        }
    }

    /// States whose groups cannot travel as [`PageGroups`] say so, and groups of
    /// another aggregation are refused before anything changes.
    #[test]
    fn page_groups_refuse_other_shapes() {
        // `COUNT(y)` counts its own values: not held by a `PageGroups`.
        let counting = page_groups_state(true, true);
        assert!(!counting.has_page_groups());
        assert!(counting.page_groups(Vec::new()).is_none());
        // A key of 20 bytes is not packed.
        let schema = Schema::new(
            "t",
            (0..5)
                .map(|i| Column::new(format!("c{i}"), ColumnType::Int32))
                .collect(),
        )
        .expect("schema");
        let wide = AggState::new(
            &Aggregation {
                group_by: (0..5).collect(),
                aggregates: Vec::new(),
            },
            &schema,
            usize::MAX,
        );
        assert!(!wide.has_page_groups());
        // Groups of a one-key aggregation into a two-key state, and the other way.
        let mut one = page_groups_state(false, false);
        fold_row(&mut one, (7, 0, 3, Some(1)));
        let mut two = page_groups_state(true, false);
        fold_row(&mut two, (7, 1, 3, None));
        let before = (one.clone(), two.clone());
        let g1 = one.page_groups(Vec::new()).expect("groups");
        let g2 = two.page_groups(Vec::new()).expect("groups");
        let e = two.merge_groups(&g1).expect_err("another key width");
        assert!(matches!(e, EvalError::PlanMismatch(_)), "{e}");
        assert!(one.merge_groups(&g2).is_err());
        assert!(counting.clone().merge_groups(&g2).is_err());
        assert_eq!((one, two), before, "a refused merge changes nothing");
    }

    proptest! {
        /// Model-based: keys of at most two bytes (two `CHAR(1)` minipages, one `INT16`,
        /// one `CHAR(1)`) get the groups a map of their bytes gives, numbered in
        /// first-seen order over pages, through [`NarrowIndex`]'s slots shared by
        /// colliding keys, states cleared between pages (its slots then name groups of
        /// before), and the group limit (the first new key past it fails the page).
        #[test]
        fn narrow_keys_are_grouped_as_a_map_of_their_bytes(
            pages in proptest::collection::vec(
                (
                    proptest::collection::vec((any::<u8>(), 0u8..4, any::<i16>()), 1..120),
                    any::<bool>(),
                    any::<u64>(),
                ),
                1..12,
            ),
            by in 0usize..3,
            limit in prop_oneof![Just(usize::MAX), 1usize..300],
        ) {
            let schema = Schema::new(
                "t",
                vec![
                    Column::new("a", ColumnType::Char(1)),
                    Column::new("b", ColumnType::Char(1)),
                    Column::new("c", ColumnType::Int16),
                ],
            )
            .expect("schema");
            let group_by = [vec![0, 1], vec![2], vec![1]][by].clone();
            let agg = Aggregation { group_by: group_by.clone(), aggregates: Vec::new() };
            let mut st = AggState::new(&agg, &schema, limit);
            let mut model: Reference<Vec<u8>, u32> = Reference::new();
            let mut scratch = (Vec::new(), Vec::new(), Vec::new());
            for (rows, clear, pick) in &pages {
                if *clear {
                    st.clear();
                    model.clear();
                }
                let mut b = csd_table::PageBuilder::new(schema.clone(), csd_table::Layout::Pax, 4096)
                    .expect("builder");
                let mut put = 0;
                for &(a, bb, c) in rows {
                    let row = [Value::Char(vec![a]), Value::Char(vec![b"AFNOR"[bb as usize]]), Value::Int16(c)];
                    if b.is_full() {
                        break;
                    }
                    b.push_row(&schema.encode_row_vec(&row).expect("row")).expect("row");
                    put += 1;
                }
                let page = b.finish().to_vec();
                let view = PageView::parse(&page, &schema).expect("page");
                // Rows selected by the bits of `pick` (repeating), ascending.
                let sel: Vec<u32> = (0..put as u32).filter(|i| pick >> (i % 64) & 1 == 1).collect();
                let got = st.group_ids(&view, &sel, &mut scratch.0, &mut scratch.1, &mut scratch.2);
                let mut want = Vec::new();
                let mut failed = false;
                for &i in &sel {
                    let (a, bb, c) = rows[i as usize];
                    let bytes: Vec<u8> = group_by
                        .iter()
                        .flat_map(|&g| match g {
                            0 => vec![a],
                            1 => vec![b"AFNOR"[bb as usize]],
                            _ => c.to_le_bytes().to_vec(),
                        })
                        .collect();
                    let n = model.len() as u32;
                    match model.get(&bytes) {
                        Some(&g) => want.push(g),
                        None if model.len() >= limit => {
                            failed = true;
                            break;
                        }
                        None => {
                            model.insert(bytes, n);
                            want.push(n);
                        }
                    }
                }
                match got {
                    Ok(()) => {
                        prop_assert!(!failed);
                        prop_assert_eq!(&scratch.0, &want);
                    }
                    Err(EvalError::TooManyGroups { .. }) => {
                        prop_assert!(failed);
                        prop_assert_eq!(&scratch.0[..], &want[..]);
                    }
                    Err(e) => prop_assert!(false, "{e}"),
                }
                prop_assert_eq!(st.group_count(), model.len());
                if failed {
                    break;
                }
            }
        }
    }

    /// A cleared state is the state `new` made, grouped (past the linear lookup, so its
    /// index is in use) or not, and numbers groups afresh from 0 as a new one does.
    #[test]
    fn a_cleared_state_is_a_new_one() {
        let mut st = state(usize::MAX);
        for k in 0..100u128 {
            st.lookup_packed(k * 7).expect("group");
        }
        st.clear();
        assert_eq!(st, state(usize::MAX));
        assert_eq!(st.group_count(), 0);
        for k in [5u128, 3, 5, 9] {
            let mut fresh = state(usize::MAX);
            for j in [5u128, 3, 5, 9].iter().take_while(|&&j| j != k) {
                fresh.lookup_packed(*j).expect("group");
            }
            assert_eq!(st.lookup_packed(k).ok(), fresh.lookup_packed(k).ok());
        }
        assert_eq!(st.packed_index.find(700, &st.packed), None);
        let mut sc = folded(&[(1, 2), (3, 4)]);
        sc.clear();
        assert_eq!(sc, scalar_state());
    }

    /// `SUM(c1), MIN(c2), MAX(c2), COUNT(*)` without `GROUP BY` over two `INT64` columns.
    fn scalar_state() -> AggState {
        let schema = two_ints();
        let col = |i| crate::plan::Expr::column(&schema, i).expect("column");
        let agg = |func, arg| crate::plan::Aggregate {
            func,
            arg,
            ty: DataType::Int,
        };
        let a = Aggregation {
            group_by: Vec::new(),
            aggregates: vec![
                agg(AggFunc::Sum, Some(col(0))),
                agg(AggFunc::Min, Some(col(1))),
                agg(AggFunc::Max, Some(col(1))),
                agg(AggFunc::CountStar, None),
            ],
        };
        AggState::new(&a, &schema, usize::MAX)
    }

    /// A state folding `rows` (pairs of the two columns) in.
    fn folded(rows: &[(i64, i64)]) -> AggState {
        let mut st = scalar_state();
        for &(a, b) in rows {
            st.rows[0] += 1;
            for acc in &mut st.accs {
                let v = match acc {
                    Acc::Sum { .. } => AccValue::Sum(i128::from(a), None),
                    Acc::MinMax { .. } => AccValue::MinMax(Some(b)),
                    _ => AccValue::Count(None),
                };
                acc.fold(0, v).expect("fold");
            }
        }
        st
    }

    proptest! {
        /// Model-based: pages' scalar states, taken inline and merged in any split, give
        /// exactly the state that merging the pages' full states gives; a reset state
        /// equals a new one.
        #[test]
        fn scalar_states_merge_as_full_states(
            pages in proptest::collection::vec(
                proptest::collection::vec((-1_000i64..1_000, -50i64..50), 0..20),
                1..12,
            ),
        ) {
            let mut by_full = scalar_state();
            let mut by_scalar = scalar_state();
            let mut scratch = scalar_state();
            for rows in &pages {
                let page = folded(rows);
                let inline = page.scalar().expect("scalar");
                by_full.merge(page).expect("merge");
                by_scalar.merge_scalar(&inline).expect("merge scalar");
                scratch.reset_scalar();
                prop_assert_eq!(&scratch, &scalar_state());
            }
            prop_assert_eq!(&by_scalar, &by_full);
            let all: Vec<(i64, i64)> = pages.concat();
            prop_assert_eq!(&by_scalar, &folded(&all));
        }
    }

    /// A grouped state has no inline form and takes none; a state with a character
    /// `MIN` has none either.
    #[test]
    fn only_states_without_group_by_are_scalar() {
        let mut grouped = state(10);
        assert!(grouped.scalar().is_none());
        let inline = scalar_state().scalar().expect("scalar");
        assert!(matches!(
            grouped.merge_scalar(&inline),
            Err(EvalError::PlanMismatch(_))
        ));
        let schema = Schema::new("t", vec![Column::new("s", ColumnType::Char(3))]).expect("schema");
        let min_char = Aggregation {
            group_by: Vec::new(),
            aggregates: vec![crate::plan::Aggregate {
                func: AggFunc::Min,
                arg: Some(crate::plan::Expr::column(&schema, 0).expect("column")),
                ty: DataType::Char(3),
            }],
        };
        assert!(AggState::new(&min_char, &schema, 10).scalar().is_none());
    }
}

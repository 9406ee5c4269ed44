//! Vectorized kernels over a page's columns and a selection vector.
//!
//! A *selection vector* is the ascending list of row indices (within the page) still
//! selected. Kernels either read a column for the selected rows ([`gather`],
//! [`filter_col_const`]) or work on value vectors aligned with the selection (value `j`
//! belongs to row `sel[j]`). Filters write the surviving row indices without branches
//! (`out[k] = i; k += keep`), so their speed does not depend on selectivity.
//!
//! Column sources ([`NumCol`]) are monomorphized: a PAX minipage is read in place as
//! little-endian `i32`/`i64` values; an NSM column is either decoded once per page into
//! a reusable `Vec<i64>` (dense selections) or read strided from the rows (sparse ones).

use std::cmp::Ordering;

use csd_table::ColumnView;

use crate::plan::{ArithOp, CmpOp};

/// Blank-padded string comparison (SQL `PAD SPACE`): the shorter operand is treated as
/// if padded with spaces, so `'A'` equals the stored `CHAR(3)` value `'A  '`.
pub fn cmp_padded(a: &[u8], b: &[u8]) -> Ordering {
    let m = a.len().min(b.len());
    match a[..m].cmp(&b[..m]) {
        Ordering::Equal => {}
        o => return o,
    }
    for &x in &a[m..] {
        if x != b' ' {
            return x.cmp(&b' ');
        }
    }
    for &y in &b[m..] {
        if y != b' ' {
            return b' '.cmp(&y);
        }
    }
    Ordering::Equal
}

/// Where a numeric column's values come from on the current page.
#[derive(Clone, Copy)]
pub(crate) enum NumCol<'a> {
    /// A PAX minipage (or any contiguous run) of 4-byte little-endian `i32`.
    Le4(&'a [u8]),
    /// A PAX minipage of 8-byte little-endian `i64`.
    Le8(&'a [u8]),
    /// Values decoded into a buffer (NSM, dense access).
    Decoded(&'a [i64]),
    /// Strided reads from the page (NSM, sparse access).
    Strided(ColumnView<'a>),
}

trait Src {
    fn at(&self, i: usize) -> i64;
}

/// A minipage's values as fixed-size arrays ([`slice::as_chunks`]): a value is one
/// load, where a `&[u8]` chunk of a length only known at run time took a bounds check and
/// a load per byte.
struct Le4<'a>(&'a [[u8; 4]]);
struct Le8<'a>(&'a [[u8; 8]]);
struct Dec<'a>(&'a [i64]);
struct Strided<'a>(ColumnView<'a>);

impl Src for Le4<'_> {
    #[inline(always)]
    fn at(&self, i: usize) -> i64 {
        rd4(self.0[i])
    }
}

impl Src for Le8<'_> {
    #[inline(always)]
    fn at(&self, i: usize) -> i64 {
        rd8(self.0[i])
    }
}

impl Src for Dec<'_> {
    #[inline(always)]
    fn at(&self, i: usize) -> i64 {
        self.0[i]
    }
}

impl Src for Strided<'_> {
    #[inline(always)]
    fn at(&self, i: usize) -> i64 {
        // Row indices come from the selection of this page, so they are in range.
        self.0.get_i64(i).unwrap_or(0)
    }
}

macro_rules! with_src {
    ($col:expr, |$s:ident| $body:expr) => {
        match $col {
            NumCol::Le4(d) => {
                let $s = Le4(d.as_chunks().0);
                $body
            }
            NumCol::Le8(d) => {
                let $s = Le8(d.as_chunks().0);
                $body
            }
            NumCol::Decoded(d) => {
                let $s = Dec(d);
                $body
            }
            NumCol::Strided(v) => {
                let $s = Strided(v);
                $body
            }
        }
    };
}

trait Pred {
    fn test(a: i64, b: i64) -> bool;
}
struct EqP;
struct NeP;
struct LtP;
struct LeP;
struct GtP;
struct GeP;
impl Pred for EqP {
    #[inline(always)]
    fn test(a: i64, b: i64) -> bool {
        a == b
    }
}
impl Pred for NeP {
    #[inline(always)]
    fn test(a: i64, b: i64) -> bool {
        a != b
    }
}
impl Pred for LtP {
    #[inline(always)]
    fn test(a: i64, b: i64) -> bool {
        a < b
    }
}
impl Pred for LeP {
    #[inline(always)]
    fn test(a: i64, b: i64) -> bool {
        a <= b
    }
}
impl Pred for GtP {
    #[inline(always)]
    fn test(a: i64, b: i64) -> bool {
        a > b
    }
}
impl Pred for GeP {
    #[inline(always)]
    fn test(a: i64, b: i64) -> bool {
        a >= b
    }
}

macro_rules! for_op {
    ($op:expr, $f:ident ( $($arg:expr),* )) => {
        match $op {
            CmpOp::Eq => $f::<EqP, _>($($arg),*),
            CmpOp::Ne => $f::<NeP, _>($($arg),*),
            CmpOp::Lt => $f::<LtP, _>($($arg),*),
            CmpOp::Le => $f::<LeP, _>($($arg),*),
            CmpOp::Gt => $f::<GtP, _>($($arg),*),
            CmpOp::Ge => $f::<GeP, _>($($arg),*),
        }
    };
}

/// Writes `sel[j]` for every `j` with `keep(j, sel[j])` into `out`, branch-free.
#[inline(always)]
pub(crate) fn filter_by(
    sel: &[u32],
    out: &mut Vec<u32>,
    mut keep: impl FnMut(usize, usize) -> bool,
) {
    out.clear();
    out.resize(sel.len(), 0);
    // Written through a slice: stores through `out` itself make the compiler reload
    // the vector's pointer on every row (they might alias its header).
    let o = out.as_mut_slice();
    let mut k = 0usize;
    for (j, &i) in sel.iter().enumerate() {
        o[k] = i;
        k += usize::from(keep(j, i as usize));
    }
    out.truncate(k);
}

/// The `width`-byte value `i` of `data` (values back to back, e.g. a PAX minipage)
/// as a little-endian integer, zero-extended: one masked 16-byte load where the
/// minipage has room after the value. `width` is 1 to 16; a value past the end reads
/// as the bytes there are.
#[inline(always)]
pub(crate) fn value_bits(data: &[u8], i: usize, width: usize) -> u128 {
    let o = i * width;
    match data.get(o..o + 16) {
        Some(b) => {
            let v = u128::from_le_bytes(b.try_into().unwrap_or([0; 16]));
            if width >= 16 {
                v
            } else {
                v & ((1u128 << (8 * width)) - 1)
            }
        }
        None => {
            let mut b = [0u8; 16];
            let v = data.get(o..(o + width).min(data.len())).unwrap_or(&[]);
            b[..v.len().min(16)].copy_from_slice(&v[..v.len().min(16)]);
            u128::from_le_bytes(b)
        }
    }
}

/// Rows of `sel` whose `CHAR(width)` value equals one of `consts` under padded
/// comparison ([`cmp_padded`]), or none of them when `negated`. `data` holds the values
/// back to back (a PAX minipage). Each constant is padded with spaces to `width` once
/// (one longer than `width` with anything but spaces beyond equals no value), so a row
/// is one fixed-width equality: for widths up to 16 bytes one masked load compared with
/// each constant as an integer.
pub(crate) fn filter_char_in(
    data: &[u8],
    width: usize,
    consts: &[&[u8]],
    negated: bool,
    sel: &[u32],
    out: &mut Vec<u32>,
) {
    if width == 0 || width > 16 {
        let padded: Vec<Vec<u8>> = consts.iter().filter_map(|c| padded(c, width)).collect();
        filter_by(sel, out, |_, i| {
            let v = data.get(i * width..(i + 1) * width).unwrap_or(&[]);
            padded.iter().any(|c| c.as_slice() == v) != negated
        });
        return;
    }
    // Up to 8 constants (every TPC-H list) without touching the allocator: this runs
    // once per page and predicate.
    let mut few = [0u128; 8];
    let keys: std::borrow::Cow<'_, [u128]> = if consts.len() <= few.len() {
        let mut n = 0;
        for k in consts.iter().filter_map(|c| padded_bits(c, width)) {
            few[n] = k;
            n += 1;
        }
        std::borrow::Cow::Borrowed(&few[..n])
    } else {
        consts
            .iter()
            .filter_map(|c| padded_bits(c, width))
            .collect()
    };
    filter_by(sel, out, |_, i| {
        keys.contains(&value_bits(data, i, width)) != negated
    });
}

/// [`padded`]'s value as [`value_bits`] reads a stored one (`width` 1 to 16), without
/// allocating.
fn padded_bits(c: &[u8], width: usize) -> Option<u128> {
    debug_assert!((1..=16).contains(&width));
    let n = c.len().min(width);
    if c[n..].iter().any(|&b| b != b' ') {
        return None;
    }
    let mut b = [b' '; 16];
    b[..n].copy_from_slice(&c[..n]);
    Some(value_bits(&b, 0, width))
}

/// `c` blank-padded to `width` bytes, as a `CHAR(width)` value equal to it is stored;
/// `None` if no such value exists (`c` is longer, with more than blanks beyond `width`).
fn padded(c: &[u8], width: usize) -> Option<Vec<u8>> {
    if c.len() > width {
        c[width..]
            .iter()
            .all(|&b| b == b' ')
            .then(|| c[..width].to_vec())
    } else {
        let mut v = c.to_vec();
        v.resize(width, b' ');
        Some(v)
    }
}

/// The rows of `sel` whose `CHAR(width)` value (`width` 1 to 16; a minipage's values
/// back to back in `data`) equals one of `consts`, into `out`; `first[j]` counts the
/// rows whose first equal constant is `consts[j]` (`first` is as long as `consts`). A
/// disjunction `c = k0 OR c = k1 OR …` evaluated term by term tests term `j` on the
/// rows no earlier term took: these counts give each term's rows in one pass.
pub(crate) fn filter_char_first_of(
    data: &[u8],
    width: usize,
    consts: &[&[u8]],
    sel: &[u32],
    out: &mut Vec<u32>,
    first: &mut [u64],
) {
    debug_assert!((1..=16).contains(&width) && first.len() == consts.len());
    debug_assert!(consts.len() <= 8, "the caller fuses at most 8 terms");
    // A constant no value equals gets a key no value has (bits beyond `width` set).
    let none = u128::MAX;
    let mut keys = [none; 8];
    for (k, c) in keys.iter_mut().zip(consts) {
        *k = padded_bits(c, width).unwrap_or(none);
    }
    let keys = &keys[..consts.len().min(8)];
    out.clear();
    for &i in sel {
        let v = value_bits(data, i as usize, width);
        if let Some(j) = keys.iter().position(|&k| k == v) {
            first[j] += 1;
            out.push(i);
        }
    }
}

fn k_col_const<P: Pred, S: Src>(s: S, sel: &[u32], c: i64, out: &mut Vec<u32>) {
    filter_by(sel, out, |_, i| P::test(s.at(i), c));
}

fn k_vec_const<P: Pred, S: Src>(s: S, sel: &[u32], c: i64, out: &mut Vec<u32>) {
    filter_by(sel, out, |j, _| P::test(s.at(j), c));
}

fn k_vec_vec<P: Pred, S: Src>(a: S, b: &[i64], sel: &[u32], out: &mut Vec<u32>) {
    filter_by(sel, out, |j, _| P::test(a.at(j), b[j]));
}

/// True if `sel` (ascending, distinct) is every row `0..n`.
#[inline]
fn is_all(sel: &[u32], n: usize) -> bool {
    sel.len() == n && sel.last().is_none_or(|&l| l as usize + 1 == n)
}

fn k_dense_const<P: Pred, I: Iterator<Item = i64>>(vals: I, n: usize, c: i64, out: &mut Vec<u32>) {
    out.clear();
    out.resize(n, 0);
    // Written through a slice: stores through `out` itself make the compiler reload
    // the vector's pointer on every row (they might alias its header).
    let o = out.as_mut_slice();
    let mut k = 0usize;
    for (i, v) in vals.enumerate() {
        o[k] = i as u32;
        k += usize::from(P::test(v, c));
    }
    out.truncate(k);
}

#[inline(always)]
fn rd4(b: [u8; 4]) -> i64 {
    i64::from(i32::from_le_bytes(b))
}

#[inline(always)]
fn rd8(b: [u8; 8]) -> i64 {
    i64::from_le_bytes(b)
}

#[inline(always)]
fn le4(d: &[u8]) -> impl Iterator<Item = i64> + '_ {
    d.as_chunks().0.iter().map(|&b| rd4(b))
}

#[inline(always)]
fn le8(d: &[u8]) -> impl Iterator<Item = i64> + '_ {
    d.as_chunks().0.iter().map(|&b| rd8(b))
}

/// Keeps the selected rows whose column value satisfies `value op c`. When every row
/// is selected (a filter's first term), a minipage or decoded column is streamed
/// sequentially instead of indexed.
pub(crate) fn filter_col_const(
    col: NumCol<'_>,
    sel: &[u32],
    op: CmpOp,
    c: i64,
    out: &mut Vec<u32>,
) {
    match col {
        NumCol::Le4(d) if is_all(sel, d.len() / 4) => {
            for_op!(op, k_dense_const(le4(d), sel.len(), c, out))
        }
        NumCol::Le8(d) if is_all(sel, d.len() / 8) => {
            for_op!(op, k_dense_const(le8(d), sel.len(), c, out))
        }
        NumCol::Decoded(d) if is_all(sel, d.len()) => {
            for_op!(op, k_dense_const(d.iter().copied(), sel.len(), c, out))
        }
        _ => with_src!(col, |s| for_op!(op, k_col_const(s, sel, c, out))),
    }
}

/// Keeps the selected rows whose column value lies in `lo..=hi`: two comparisons on
/// one column ANDed (a range such as `BETWEEN`), in one pass. Returns how many rows the
/// first of the two comparisons alone keeps (the lower bound `v >= lo` when
/// `first_lower`, else the upper bound `v <= hi`), so a caller can count the work of
/// evaluating the two one after the other.
pub(crate) fn filter_col_range(
    col: NumCol<'_>,
    sel: &[u32],
    lo: i64,
    hi: i64,
    first_lower: bool,
    out: &mut Vec<u32>,
) -> usize {
    if first_lower {
        range_any::<true>(col, sel, lo, hi, out)
    } else {
        range_any::<false>(col, sel, lo, hi, out)
    }
}

#[inline(always)]
fn range_any<const L: bool>(
    col: NumCol<'_>,
    sel: &[u32],
    lo: i64,
    hi: i64,
    out: &mut Vec<u32>,
) -> usize {
    match col {
        NumCol::Le4(d) if is_all(sel, d.len() / 4) => {
            k_dense_range::<L, _>(le4(d), sel.len(), lo, hi, out)
        }
        NumCol::Le8(d) if is_all(sel, d.len() / 8) => {
            k_dense_range::<L, _>(le8(d), sel.len(), lo, hi, out)
        }
        NumCol::Decoded(d) if is_all(sel, d.len()) => {
            k_dense_range::<L, _>(d.iter().copied(), sel.len(), lo, hi, out)
        }
        _ => with_src!(col, |s| k_col_range::<L, _>(s, sel, lo, hi, out)),
    }
}

/// (first comparison holds, both hold) for `lo <= v <= hi`.
#[inline(always)]
fn range_test<const L: bool>(v: i64, lo: i64, hi: i64) -> (usize, usize) {
    let (a, b) = (usize::from(v >= lo), usize::from(v <= hi));
    (if L { a } else { b }, a & b)
}

fn k_dense_range<const L: bool, I: Iterator<Item = i64>>(
    vals: I,
    n: usize,
    lo: i64,
    hi: i64,
    out: &mut Vec<u32>,
) -> usize {
    out.clear();
    out.resize(n, 0);
    // Written through a slice: stores through `out` itself make the compiler reload
    // the vector's pointer on every row (they might alias its header).
    let o = out.as_mut_slice();
    let (mut k, mut first) = (0usize, 0usize);
    for (i, v) in vals.enumerate() {
        let (f, both) = range_test::<L>(v, lo, hi);
        o[k] = i as u32;
        k += both;
        first += f;
    }
    out.truncate(k);
    first
}

fn k_col_range<const L: bool, S: Src>(
    s: S,
    sel: &[u32],
    lo: i64,
    hi: i64,
    out: &mut Vec<u32>,
) -> usize {
    out.clear();
    out.resize(sel.len(), 0);
    // Written through a slice: stores through `out` itself make the compiler reload
    // the vector's pointer on every row (they might alias its header).
    let o = out.as_mut_slice();
    let (mut k, mut first) = (0usize, 0usize);
    for &i in sel {
        let (f, both) = range_test::<L>(s.at(i as usize), lo, hi);
        o[k] = i;
        k += both;
        first += f;
    }
    out.truncate(k);
    first
}

/// Keeps `sel[j]` where `vals[j] op c`.
pub(crate) fn filter_vec_const(vals: &[i64], sel: &[u32], op: CmpOp, c: i64, out: &mut Vec<u32>) {
    let s = Dec(vals);
    for_op!(op, k_vec_const(s, sel, c, out))
}

/// Keeps `sel[j]` where `a[j] op b[j]`.
pub(crate) fn filter_vec_vec(a: &[i64], b: &[i64], sel: &[u32], op: CmpOp, out: &mut Vec<u32>) {
    let s = Dec(a);
    for_op!(op, k_vec_vec(s, b, sel, out))
}

/// The selected rows' values of a column, in selection order.
pub(crate) fn gather(col: NumCol<'_>, sel: &[u32], out: &mut Vec<i64>) {
    out.clear();
    match col {
        NumCol::Le4(d) if is_all(sel, d.len() / 4) => {
            out.extend(le4(d));
        }
        NumCol::Le8(d) if is_all(sel, d.len() / 8) => {
            out.extend(le8(d));
        }
        NumCol::Decoded(d) if is_all(sel, d.len()) => out.extend_from_slice(d),
        _ => with_src!(col, |s| out.extend(sel.iter().map(|&i| s.at(i as usize)))),
    }
}

/// Keeps `sel[j]` where the column's value at row `sel[j]` is (or, with `neg`, is not) in
/// `set`: one pass over the column, without first gathering its values (`IN (...)`
/// lists and the runtime key sets of a join's build side).
///
/// A set searched by bisection is first cut to the keys between the least and the
/// greatest selected value (one pass over them): on a column clustered in the table's
/// order, such as a join's order keys against `l_orderkey`, most pages hold none of a
/// short list's keys and are done after that pass, and the others search a few keys
/// instead of bisecting the whole list on every row. What is kept is the same.
pub(crate) fn filter_col_in(
    col: NumCol<'_>,
    sel: &[u32],
    set: &crate::plan::ConstSet,
    neg: bool,
    out: &mut Vec<u32>,
) {
    if let Some((lo, bits)) = set.bitmap_words() {
        // One load a row, inline: a value below the least wraps past the bitmap's bits,
        // one above the greatest reads a zero bit (or falls past the words).
        let span = bits.len() as u64 * 64;
        with_src!(col, |s| filter_by(sel, out, |_, i| {
            let o = s.at(i).wrapping_sub(lo) as u64;
            let hit = o < span && bits[(o / 64) as usize] >> (o % 64) & 1 == 1;
            hit != neg
        }));
        return;
    }
    if let Some(keys) = set
        .bisected_ints()
        .filter(|k| k.len() > crate::plan::ConstSet::LINEAR_KEYS)
        && let Some((lo, hi)) = with_src!(col, |s| min_max(&s, sel))
    {
        let inner = &keys[keys.partition_point(|&k| k < lo)..keys.partition_point(|&k| k <= hi)];
        if inner.len() <= crate::plan::ConstSet::LINEAR_KEYS {
            with_src!(col, |s| filter_by(sel, out, |_, i| inner
                .contains(&s.at(i))
                != neg));
            return;
        }
    }
    with_src!(col, |s| filter_by(sel, out, |_, i| set
        .contains_int(s.at(i))
        != neg))
}

/// The least and greatest of the selected rows' values (`None` without rows).
#[inline(always)]
fn min_max<S: Src>(s: &S, sel: &[u32]) -> Option<(i64, i64)> {
    let first = s.at(*sel.first()? as usize);
    Some(sel.iter().fold((first, first), |(lo, hi), &i| {
        let v = s.at(i as usize);
        (lo.min(v), hi.max(v))
    }))
}

/// An arithmetic operand: a vector aligned with the selection or a constant.
#[derive(Clone, Copy)]
pub(crate) enum Operand<'a> {
    /// Per-row values.
    Vec(&'a [i64]),
    /// The same value on every row.
    Const(i64),
}

#[inline(always)]
fn zip_map(
    l: Operand<'_>,
    r: Operand<'_>,
    len: usize,
    out: &mut Vec<i64>,
    mut f: impl FnMut(i64, i64) -> i64,
) {
    out.clear();
    match (l, r) {
        (Operand::Vec(a), Operand::Vec(b)) => {
            out.extend(a.iter().zip(b).map(|(&x, &y)| f(x, y)));
        }
        (Operand::Vec(a), Operand::Const(y)) => out.extend(a.iter().map(|&x| f(x, y))),
        (Operand::Const(x), Operand::Vec(b)) => out.extend(b.iter().map(|&y| f(x, y))),
        (Operand::Const(x), Operand::Const(y)) => {
            let v = f(x, y);
            out.resize(len, v);
        }
    }
}

/// `out = l op r` elementwise. `Err(true)`: a divisor was zero; `Err(false)`: overflow.
/// Semantics are exactly [`ArithOp::apply`]'s (the builder folds constants with it).
pub(crate) fn arith(
    op: ArithOp,
    l: Operand<'_>,
    r: Operand<'_>,
    len: usize,
    out: &mut Vec<i64>,
) -> Result<(), bool> {
    let mut overflow = false;
    match op {
        // overflowing_* plus a sticky flag keeps these loops branch-free
        ArithOp::Add => zip_map(l, r, len, out, |x, y| {
            let (v, o) = x.overflowing_add(y);
            overflow |= o;
            v
        }),
        ArithOp::Sub => zip_map(l, r, len, out, |x, y| {
            let (v, o) = x.overflowing_sub(y);
            overflow |= o;
            v
        }),
        ArithOp::Mul => zip_map(l, r, len, out, |x, y| {
            let (v, o) = x.overflowing_mul(y);
            overflow |= o;
            v
        }),
        ArithOp::IntDiv | ArithOp::DecDiv { .. } => {
            let mut err: Option<bool> = None;
            zip_map(l, r, len, out, |x, y| match op.apply(x, y) {
                Ok(v) => v,
                Err(zero) => {
                    // division by zero wins over overflow in the report
                    err = Some(err.unwrap_or(zero) || zero);
                    0
                }
            });
            if let Some(e) = err {
                return Err(e);
            }
        }
    }
    if overflow { Err(false) } else { Ok(()) }
}

/// `v = -v` in place; `Err(())` on overflow (`i64::MIN`).
pub(crate) fn negate(v: &mut [i64]) -> Result<(), ()> {
    let mut overflow = false;
    for x in v.iter_mut() {
        let (n, o) = x.overflowing_neg();
        overflow |= o;
        *x = n;
    }
    if overflow { Err(()) } else { Ok(()) }
}

/// `a ∪ b` of two ascending index lists.
pub(crate) fn union_into(a: &[u32], b: &[u32], out: &mut Vec<u32>) {
    out.clear();
    out.reserve(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

/// `a \ b` of two ascending index lists (`b` a subset of `a` or not).
pub(crate) fn difference_into(a: &[u32], b: &[u32], out: &mut Vec<u32>) {
    out.clear();
    let mut j = 0;
    for &x in a {
        while j < b.len() && b[j] < x {
            j += 1;
        }
        if j < b.len() && b[j] == x {
            j += 1;
        } else {
            out.push(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The allocation-free padded key is the key of the padded constant, and none
        /// for a constant no `CHAR(width)` value equals.
        #[test]
        fn padded_bits_are_the_padded_constants_bits(
            c in proptest::collection::vec(proptest::prop_oneof![proptest::strategy::Just(b' '), b'a'..b'e'], 0..24),
            width in 1usize..=16,
        ) {
            let want = padded(&c, width).map(|v| value_bits(&v, 0, width));
            proptest::prop_assert_eq!(padded_bits(&c, width), want);
        }
    }
    use proptest::prelude::*;

    proptest! {
        /// The fixed-width `CHAR` IN-list kernel keeps exactly the rows the padded
        /// comparison keeps, for any width (the 16-byte load path and the slice path),
        /// constants shorter or longer than the width, and rows at the minipage's end.
        #[test]
        fn char_in_matches_padded_comparison(
            width in 1usize..24,
            rows in proptest::collection::vec(proptest::collection::vec(prop_oneof![Just(b' '), Just(b'A'), Just(b'B')], 24), 1..40),
            consts in proptest::collection::vec(proptest::collection::vec(prop_oneof![Just(b' '), Just(b'A'), Just(b'B')], 0..27), 0..12),
            negated: bool,
        ) {
            let data: Vec<u8> = rows.iter().flat_map(|r| r[..width].iter().copied()).collect();
            let sel: Vec<u32> = (0..rows.len() as u32).collect();
            let refs: Vec<&[u8]> = consts.iter().map(Vec::as_slice).collect();
            let mut got = Vec::new();
            filter_char_in(&data, width, &refs, negated, &sel, &mut got);
            let want: Vec<u32> = sel
                .iter()
                .copied()
                .filter(|&i| {
                    let v = &data[i as usize * width..(i as usize + 1) * width];
                    consts.iter().any(|c| cmp_padded(v, c).is_eq()) != negated
                })
                .collect();
            prop_assert_eq!(got, want);
        }
    }

    /// `filter_col_in` over the rows not skipped, and the rows whose value is (or, negated,
    /// is not) among `keys`: what the two `IN` properties compare.
    fn col_in_against_membership(
        col: NumCol<'_>,
        vals: &[i64],
        skip: &[bool],
        keys: &[i64],
        set: &crate::plan::ConstSet,
        negated: bool,
    ) -> (Vec<u32>, Vec<u32>) {
        let sel: Vec<u32> = (0..vals.len() as u32)
            .filter(|&i| !skip[i as usize])
            .collect();
        let mut got = Vec::new();
        filter_col_in(col, &sel, set, negated, &mut got);
        let want = sel
            .iter()
            .copied()
            .filter(|&i| keys.binary_search(&vals[i as usize]).is_ok() != negated)
            .collect();
        (got, want)
    }

    proptest! {
        /// An integer `IN` over a long, sparse key list (searched by bisection) keeps
        /// exactly the rows whose value is a key, whether the selected values hold none
        /// of the keys, a few (the cut list) or many, for 4- and 8-byte minipages.
        #[test]
        fn col_in_over_a_bisected_list_keeps_the_members(
            keys in proptest::collection::btree_set(0i64..4_000_000_000, 9..80),
            base in 0i64..4_000_000_000,
            offsets in proptest::collection::vec((0usize..100, -3i64..40), 1..120),
            skip in proptest::collection::vec(any::<bool>(), 120),
            negated: bool,
            eight: bool,
        ) {
            let keys: Vec<i64> = keys.into_iter().collect();
            let set = crate::plan::ConstSet::of_sorted_ints(keys.clone().into());
            prop_assert!(set.bisected_ints().is_some(), "a sparse list has no bitmap");
            // Values clustered near `base`, some of them keys (offsets from a key).
            let vals: Vec<i64> = offsets
                .iter()
                .map(|&(k, d)| if k < keys.len() { keys[k] + d.min(0) } else { base + d })
                .map(|v| if eight { v } else { v.clamp(0, i64::from(i32::MAX)) })
                .collect();
            let data: Vec<u8> = vals
                .iter()
                .flat_map(|&v| {
                    if eight {
                        v.to_le_bytes().to_vec()
                    } else {
                        (v as i32).to_le_bytes().to_vec()
                    }
                })
                .collect();
            let col = if eight { NumCol::Le8(&data) } else { NumCol::Le4(&data) };
            let (got, want) = col_in_against_membership(col, &vals, &skip, &keys, &set, negated);
            prop_assert_eq!(got, want);
        }

        /// An integer `IN` over a list dense enough for a bitmap keeps exactly the rows
        /// whose value is a key: values below the least key, in the span, in the last
        /// word's bits past the greatest key, far above it and at the integers' ends.
        #[test]
        fn col_in_over_a_bitmap_keeps_the_members(
            keys in proptest::collection::btree_set(-300i64..300, 5..200),
            vals in proptest::collection::vec(
                prop_oneof![
                    4 => -400i64..400,
                    1 => Just(i64::MIN),
                    1 => Just(i64::MAX),
                    1 => any::<i64>(),
                ],
                1..150,
            ),
            skip in proptest::collection::vec(any::<bool>(), 150),
            negated: bool,
        ) {
            let keys: Vec<i64> = keys.into_iter().collect();
            let set = crate::plan::ConstSet::of_sorted_ints(keys.clone().into());
            prop_assert!(set.bitmap_words().is_some(), "a dense list has a bitmap");
            let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
            let col = NumCol::Le8(&data);
            let (got, want) = col_in_against_membership(col, &vals, &skip, &keys, &set, negated);
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn padded_comparison() {
        assert_eq!(cmp_padded(b"A", b"A  "), Ordering::Equal);
        assert_eq!(cmp_padded(b"A  ", b"A"), Ordering::Equal);
        assert_eq!(cmp_padded(b"A", b"AB"), Ordering::Less);
        assert_eq!(cmp_padded(b"AB", b"A"), Ordering::Greater);
        assert_eq!(cmp_padded(b"A\x01", b"A"), Ordering::Less);
        assert_eq!(cmp_padded(b"", b""), Ordering::Equal);
        assert_eq!(cmp_padded(b"B", b"AZ"), Ordering::Greater);
    }

    #[test]
    fn set_operations() {
        let mut out = Vec::new();
        union_into(&[1, 3, 5], &[2, 3, 9], &mut out);
        assert_eq!(out, [1, 2, 3, 5, 9]);
        difference_into(&[1, 2, 3, 5, 9], &[2, 5, 7], &mut out);
        assert_eq!(out, [1, 3, 9]);
    }

    #[test]
    fn arithmetic_errors() {
        let mut out = Vec::new();
        assert_eq!(
            arith(
                ArithOp::Mul,
                Operand::Vec(&[i64::MAX, 1]),
                Operand::Const(2),
                2,
                &mut out
            ),
            Err(false)
        );
        assert_eq!(
            arith(
                ArithOp::IntDiv,
                Operand::Vec(&[4, 1]),
                Operand::Vec(&[2, 0]),
                2,
                &mut out
            ),
            Err(true)
        );
        assert_eq!(
            arith(
                ArithOp::DecDiv { shift: 2 },
                Operand::Vec(&[1, 2]),
                Operand::Const(3),
                2,
                &mut out
            ),
            Ok(())
        );
        // 0.01 / 0.03 at scale 2 -> 0.33; 0.02/0.03 -> 0.67 (half away from zero)
        assert_eq!(out, [33, 67]);
        assert!(negate(&mut [i64::MIN]).is_err());
    }

    #[test]
    fn filters() {
        let sel: Vec<u32> = (0..6).collect();
        let bytes: Vec<u8> = [5i32, -1, 7, 5, 0, 9]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        filter_col_const(NumCol::Le4(&bytes), &sel, CmpOp::Ge, 5, &mut out);
        assert_eq!(out, [0, 2, 3, 5]);
        let sub = [2u32, 3, 5];
        filter_col_const(NumCol::Le4(&bytes), &sub, CmpOp::Ne, 5, &mut out);
        assert_eq!(out, [2, 5]);
        let mut vals = Vec::new();
        gather(NumCol::Le4(&bytes), &sub, &mut vals);
        assert_eq!(vals, [7, 5, 9]);
        filter_vec_vec(&vals, &[7, 6, 1], &sub, CmpOp::Lt, &mut out);
        assert_eq!(out, [3]);
    }
}

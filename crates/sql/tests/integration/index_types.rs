//! FLIXR per-page indexes on users' tables (issue 34): nullable columns and strings.
//!
//! Model-based property: random tables (a nullable INT64, a nullable VARCHAR of empty,
//! short, unicode, trailing-blank and long strings that share their first 8 bytes and
//! more, a nullable FLOAT64 with -0.0, NaN and infinities), each column NULL at its own
//! density (0 to 100%), rows clustered on the indexed column or not (NULLs clustered
//! too: pages whose key is NULL in every row), NSM or PAX; a range or bitmap index on
//! one of the three columns; random filters on the indexed column (comparisons, IN,
//! LIKE prefixes shorter and longer than the key's 8 bytes, IS NULL, OR, NOT, ANDed
//! with another column) must return on ihp, cpu-isp and hw-isp what the same query
//! returns without the index and what DataFusion returns over the same Arrow data.
//! Clustered cases must skip pages. `CSD_INDEX_TYPES_CASES=N` runs more cases.

use crate::common;

use std::sync::Arc;

use crate::common::client;
use csd_host::Strategy as Scan;
use csd_sql::{Choice, ScanSettings, SqlSession};
use csd_table::Layout;
use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::MemTable;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// A long prefix several strings share: longer than the 8-byte key.
const LONG: &str = "prefix-shared-beyond-the-key-";

/// The strings a table draws from.
fn strings() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        "a",
        "ab",
        "abc",
        "abc  ",
        "b",
        "ba",
        "c",
        "é",
        "日本",
        "🙂x",
        " ",
        "abcdefgh",
        "abcdefghi",
        "abcdefgh\u{1}",
        "zz",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for tail in ["", "a", "b", "bb", "c", "z"] {
        v.push(format!("{LONG}{tail}"));
    }
    v.push("ab".repeat(600));
    v.push(format!("{}{}", "ab".repeat(600), "c"));
    v
}

/// Float values, including the ones Arrow orders specially.
const FLOATS: [f64; 9] = [
    0.0,
    -0.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    1.5,
    -2.25,
    3.0,
    100.125,
];

#[derive(Debug, Clone)]
struct Case {
    rows: usize,
    null_pct: [u8; 3],
    seed: u64,
    /// Indexed column: 0 `k`, 1 `s`, 2 `f`.
    col: usize,
    bitmap: bool,
    pax: bool,
    clustered: bool,
    filters: Vec<String>,
}

use crate::common::Gen;

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A leaf predicate on column `col`.
fn leaf(col: usize) -> BoxedStrategy<String> {
    let ops = prop_oneof![
        Just("="),
        Just("<>"),
        Just("<"),
        Just("<="),
        Just(">"),
        Just(">=")
    ];
    let strs = strings();
    match col {
        0 => prop_oneof![
            (ops, -60i64..60).prop_map(|(op, v)| format!("k {op} {v}")),
            (-60i64..60, 0i64..30).prop_map(|(a, w)| format!("k BETWEEN {a} AND {}", a + w)),
            prop::collection::vec(-60i64..60, 1..5).prop_map(|v| format!(
                "k IN ({})",
                v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
            )),
            Just("k IS NULL".to_string()),
            Just("k IS NOT NULL".to_string()),
        ]
        .boxed(),
        1 => {
            let pick = prop::sample::select(strs.clone());
            let pick2 = prop::sample::select(strs);
            prop_oneof![
                (ops, pick.clone()).prop_map(|(op, v)| format!("s {op} {}", quote(&v))),
                (pick.clone(), 0usize..12).prop_map(|(v, n)| {
                    let p: String = v.chars().take(n).collect();
                    format!("s LIKE {}", quote(&format!("{p}%")))
                }),
                Just(format!("s LIKE '{LONG}b%'")),
                Just(format!("s >= '{LONG}b' AND s < '{LONG}c'")),
                (pick.clone(), pick2).prop_map(|(a, b)| format!(
                    "s IN ({}, {})",
                    quote(&a),
                    quote(&b)
                )),
                Just("s IS NULL".to_string()),
                Just("s = ''".to_string()),
            ]
            .boxed()
        }
        _ => {
            let lit = |x: f64| format!("CAST('{x:?}' AS DOUBLE)");
            (ops, prop::sample::select(FLOATS.to_vec()))
                .prop_map(move |(op, x)| format!("f {op} {}", lit(x)))
                .boxed()
        }
    }
}

/// A filter: leaves on the indexed column combined, sometimes ANDed with one on `id`.
fn filter(col: usize) -> impl Strategy<Value = String> {
    let tree = leaf(col).prop_recursive(2, 4, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} AND {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} OR {b})")),
            inner.prop_map(|a| format!("NOT ({a})")),
        ]
    });
    (tree, prop::option::of(0i32..400)).prop_map(|(t, id)| match id {
        Some(v) => format!("{t} AND id >= {v}"),
        None => t,
    })
}

fn case() -> impl Strategy<Value = Case> {
    (0usize..3).prop_flat_map(|col| {
        (
            300usize..1500,
            [
                prop_oneof![Just(0u8), Just(100u8), 0u8..=100],
                prop_oneof![Just(0u8), Just(100u8), 0u8..=100],
                prop_oneof![Just(0u8), Just(100u8), 0u8..=100],
            ],
            any::<u64>(),
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.7),
            prop::collection::vec(filter(col), 4),
        )
            .prop_map(
                move |(rows, null_pct, seed, bitmap, pax, clustered, filters)| Case {
                    rows,
                    null_pct,
                    seed,
                    col,
                    bitmap,
                    pax,
                    clustered,
                    filters,
                },
            )
    })
}

/// The case's table as Arrow: `id` NOT NULL (row order), `k`, `s`, `f` nullable; when
/// clustered, rows sorted on the indexed column (NULLs first, so they fill pages).
fn arrow_table(c: &Case) -> (SchemaRef, RecordBatch) {
    let mut g = Gen(c.seed);
    let strs = strings();
    type Row = (Option<i64>, Option<String>, Option<f64>);
    let mut rows: Vec<Row> = (0..c.rows)
        .map(|_| {
            let mut null = |i: usize| g.below(100) < u64::from(c.null_pct[i]);
            let (nk, ns, nf) = (null(0), null(1), null(2));
            let k = (!nk).then(|| g.below(120) as i64 - 60);
            // Half the strings share the long prefix: whole pages of one key.
            let s = (!ns).then(|| match g.below(2) {
                0 => strs[g.below(strs.len() as u64) as usize].clone(),
                _ => format!(
                    "{LONG}{}",
                    ["", "a", "b", "bb", "c", "z"][g.below(6) as usize]
                ),
            });
            let f = (!nf).then(|| FLOATS[g.below(FLOATS.len() as u64) as usize]);
            (k, s, f)
        })
        .collect();
    if c.clustered {
        match c.col {
            0 => rows.sort_by_key(|r| r.0),
            1 => rows.sort_by(|a, b| {
                a.1.as_deref()
                    .map(str::as_bytes)
                    .cmp(&b.1.as_deref().map(str::as_bytes))
            }),
            _ => rows.sort_by(|a, b| match (a.2, b.2) {
                (None, None) => std::cmp::Ordering::Equal,
                (None, Some(_)) => std::cmp::Ordering::Less,
                (Some(_), None) => std::cmp::Ordering::Greater,
                (Some(x), Some(y)) => x.total_cmp(&y),
            }),
        }
    }
    let ids = Int32Array::from((0..c.rows as i32).collect::<Vec<_>>());
    let ks: Int64Array = rows.iter().map(|r| r.0).collect();
    let ss: StringArray = rows.iter().map(|r| r.1.clone()).collect();
    let fs: Float64Array = rows.iter().map(|r| r.2).collect();
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(ids)),
        ("k", Arc::new(ks)),
        ("s", Arc::new(ss)),
        ("f", Arc::new(fs)),
    ];
    common::batch_of(cols)
}

fn one_batch(a: &csd_sql::Answer) -> RecordBatch {
    concat_batches(&a.schema, &a.batches).expect("concat")
}

/// Equal values, column by column (`ArrayData` equality: bytes for strings, bits for
/// floats, NULLs where they are).
fn same(got: &RecordBatch, want: &RecordBatch) -> Result<(), String> {
    if got.num_rows() != want.num_rows() {
        return Err(format!("{} rows, want {}", got.num_rows(), want.num_rows()));
    }
    for (k, (g, w)) in got.columns().iter().zip(want.columns()).enumerate() {
        if g.to_data() != w.to_data() {
            return Err(format!("column {k} differs:\n got {g:?}\nwant {w:?}"));
        }
    }
    Ok(())
}

const STRATEGIES: [(&str, Choice); 3] = [
    ("ihp", Choice::Fixed(Scan::Ihp)),
    ("cpu-isp", Choice::Fixed(Scan::CpuIsp)),
    ("hw-isp", Choice::Fixed(Scan::HwIsp)),
];

/// Pages skipped by the case's indexed runs.
fn check(c: &Case) -> Result<u64, TestCaseError> {
    let (schema, batch) = arrow_table(c);
    let (mut cl, cfg) = client("tiny");
    let layout = if c.pax { Layout::Pax } else { Layout::Nsm };
    common::load_arrow(&mut cl, "t", &schema, &batch, layout);
    let mut s =
        SqlSession::new(cl, cfg, ScanSettings::new(Choice::Fixed(Scan::Ihp))).expect("session");
    let column = ["k", "s", "f"][c.col];
    let using = if c.bitmap {
        "bitmap WITH (buckets = 40)"
    } else {
        "range"
    };
    s.run_strategies(
        &format!("CREATE INDEX ix ON t ({column}) USING {using}"),
        &[Choice::Fixed(Scan::Ihp)],
    )
    .map_err(|e| TestCaseError::fail(format!("create index: {e}")))?;
    let mem = MemTable::try_new(schema.clone(), vec![vec![batch.clone()]]).expect("mem");
    s.context()
        .register_table("m", Arc::new(mem))
        .expect("register");
    let mut skipped = 0;
    for f in &c.filters {
        for shape in [
            "SELECT id, k, s, f FROM {t} WHERE {p} ORDER BY id",
            "SELECT count(*) FROM {t} WHERE {p}",
        ] {
            let q = shape.replace("{p}", f);
            let want_sql = q.replace("{t}", "m");
            let want = s
                .run(&want_sql)
                .map_err(|e| TestCaseError::fail(format!("{want_sql}: {e}")))?;
            let want = one_batch(&want);
            let sql = q.replace("{t}", "t");
            for use_index in [true, false] {
                for (name, st) in STRATEGIES {
                    let mut set = ScanSettings::new(st);
                    set.options.use_index = use_index;
                    s.set_settings(set).expect("settings");
                    let got = s
                        .run(&sql)
                        .map_err(|e| TestCaseError::fail(format!("{sql} ({name}): {e}")))?;
                    if use_index {
                        skipped += got
                            .scans
                            .iter()
                            .map(|sc| sc.report.pages_skipped)
                            .sum::<u64>();
                    } else {
                        prop_assert!(got.scans.iter().all(|sc| sc.report.index.is_none()));
                    }
                    same(&one_batch(&got), &want).map_err(|e| {
                        TestCaseError::fail(format!(
                            "{sql} ({name}, index {use_index}, {using} on {column}): {e}"
                        ))
                    })?;
                }
            }
        }
    }
    Ok(skipped)
}

#[test]
fn indexes_on_nullable_and_string_columns_match_no_index_and_datafusion() {
    let mut runner = TestRunner::new(Config {
        cases: std::env::var("CSD_INDEX_TYPES_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&case(), |c| check(&c).map(|_| ()))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Clustered columns with selective filters skip pages on each column type, NULL-only
/// pages included (a filter on the key skips the pages whose key is NULL in every row).
#[test]
fn clustered_nullable_and_string_keys_skip_pages() {
    for (col, filter) in [
        (0, "k = 7"),
        (0, "k IS NOT NULL AND k > 50"),
        (1, "s = 'abc'"),
        (1, "s LIKE 'prefix-shared-beyond-the-key-b%'"),
        (1, "s > 'zz'"),
        (1, "s < 'prefix-shared-beyond-the-key-c'"),
        (1, "s > 'prefix-shared-beyond-the-key-a'"),
        (1, "s IN ('prefix-shared-beyond-the-key-bb', 'b')"),
        (2, "f = CAST('NaN' AS DOUBLE)"),
        (2, "f < CAST('-1.0' AS DOUBLE)"),
    ] {
        for bitmap in [false, true] {
            let c = Case {
                rows: 1500,
                null_pct: [40, 40, 40],
                seed: 11,
                col,
                bitmap,
                pax: col == 1,
                clustered: true,
                filters: vec![filter.to_string()],
            };
            let skipped = check(&c).unwrap_or_else(|e| panic!("{filter}: {e}"));
            assert!(skipped > 0, "{filter} (bitmap {bitmap}): nothing skipped");
        }
    }
}

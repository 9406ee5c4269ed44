//! Semantics of the subset on a small hand-made table, in both layouts: exact decimal
//! comparisons, arithmetic and rounding, dates and intervals, blank-padded strings,
//! boolean logic, ordering, empty inputs, runtime errors, counters and formatting.

mod common;

use csd_query::{EvalError, Evaluator, PartialResult, Value, plan};
use csd_table::{Column, ColumnType, Layout, PageView, Schema, Value as TValue};

const MODES: [&str; 5] = ["MAIL", "SHIP", "AIR", "REG AIR", "TRUCK"];
const FLAGS: [&str; 3] = ["A", "N", "R"];
const N: i64 = 300;
/// 1994-01-01
const D0: i32 = 8766;

fn schema() -> Schema {
    Schema::new(
        "t",
        vec![
            Column::new("id", ColumnType::Int32),
            Column::new("big", ColumnType::Int64),
            Column::new("price", ColumnType::Decimal { scale: 2 }),
            Column::new("disc", ColumnType::Decimal { scale: 2 }),
            Column::new("d", ColumnType::Date),
            Column::new("flag", ColumnType::Char(1)),
            Column::new("mode", ColumnType::Char(10)),
        ],
    )
    .expect("schema")
}

struct Row {
    id: i64,
    big: i64,
    price: i64,
    disc: i64,
    d: i32,
    flag: &'static str,
    mode: &'static str,
}

fn row(i: i64) -> Row {
    Row {
        id: i,
        big: i * 1_000_000_007 - 5_000_000_000,
        price: (i * 12_347) % 100_000 + 1,
        disc: i % 11,
        d: D0 + i as i32,
        flag: FLAGS[(i % 3) as usize],
        mode: MODES[(i % 5) as usize],
    }
}

fn data() -> (Schema, Vec<Vec<TValue>>, Vec<Row>) {
    let rows: Vec<Row> = (0..N).map(row).collect();
    let values = rows
        .iter()
        .map(|r| {
            vec![
                TValue::Int32(r.id as i32),
                TValue::Int64(r.big),
                TValue::Decimal(r.price),
                TValue::Decimal(r.disc),
                TValue::Date(r.d),
                TValue::Char(r.flag.as_bytes().to_vec()),
                TValue::Char(r.mode.as_bytes().to_vec()),
            ]
        })
        .collect();
    (schema(), values, rows)
}

fn count(sql_where: &str) -> i128 {
    let (s, v, _) = data();
    let r =
        common::run(&s, &v, &format!("SELECT COUNT(*) FROM t WHERE {sql_where}")).expect("runs");
    match r.rows[0][0] {
        Value::Int(n) => n,
        ref other => panic!("{other:?}"),
    }
}

fn reference(pred: impl Fn(&Row) -> bool) -> i128 {
    data().2.iter().filter(|r| pred(r)).count() as i128
}

#[test]
fn decimal_literals_compare_exactly_against_scaled_columns() {
    type Check = Box<dyn Fn(&Row) -> bool>;
    let cases: Vec<(&str, Check)> = vec![
        (
            "disc BETWEEN 0.05 AND 0.07",
            Box::new(|r| (5..=7).contains(&r.disc)),
        ),
        (
            "disc BETWEEN 0.050 AND 0.0700",
            Box::new(|r| (5..=7).contains(&r.disc)),
        ),
        (
            "disc BETWEEN 0.06 - 0.01 AND 0.06 + 0.01",
            Box::new(|r| (5..=7).contains(&r.disc)),
        ),
        (
            "disc NOT BETWEEN 0.05 AND 0.07",
            Box::new(|r| !(5..=7).contains(&r.disc)),
        ),
        ("disc < 0.065", Box::new(|r| r.disc <= 6)),
        ("disc <= 0.065", Box::new(|r| r.disc <= 6)),
        ("disc > 0.065", Box::new(|r| r.disc >= 7)),
        ("disc >= 0.065", Box::new(|r| r.disc >= 7)),
        ("disc = 0.065", Box::new(|_| false)),
        ("disc <> 0.065", Box::new(|_| true)),
        ("disc != 0.060", Box::new(|r| r.disc != 6)),
        ("disc = 0.060", Box::new(|r| r.disc == 6)),
        ("disc = 0.06000000000000000", Box::new(|r| r.disc == 6)),
        ("disc < 0.000000000000000001", Box::new(|r| r.disc <= 0)),
        (
            "disc IN (0.05, 0.065, 0.0700)",
            Box::new(|r| r.disc == 5 || r.disc == 7),
        ),
        ("disc NOT IN (0.065)", Box::new(|_| true)),
        (
            "disc NOT IN (0.05, 0.1)",
            Box::new(|r| r.disc != 5 && r.disc != 10),
        ),
        ("-disc < -0.065", Box::new(|r| r.disc >= 7)),
        ("0.065 > disc", Box::new(|r| r.disc <= 6)),
        ("disc * 100 < 6.5", Box::new(|r| r.disc <= 6)),
        ("disc + 0.001 > 0.065", Box::new(|r| r.disc >= 7)),
        ("price > 123.455", Box::new(|r| r.price >= 12_346)),
        ("price <= 123.455", Box::new(|r| r.price <= 12_345)),
        (
            "price * (1 - disc) > 500",
            Box::new(|r| r.price * (100 - r.disc) > 500 * 10_000),
        ),
        (
            "price * disc >= price * 0.05",
            Box::new(|r| r.price * r.disc >= r.price * 5),
        ),
        ("id < 2.5", Box::new(|r| r.id <= 2)),
        ("id = 2.0", Box::new(|r| r.id == 2)),
        ("id = 2.5", Box::new(|_| false)),
        ("id > disc", Box::new(|r| r.id * 100 > r.disc)),
        ("big < 0", Box::new(|r| r.big < 0)),
        ("big > 9223372036854775806.5", Box::new(|_| false)),
        ("big < 92233720368547758.07", Box::new(|_| true)),
        ("big < 99999999999999999999", Box::new(|_| true)),
        ("big >= -99999999999999999999.5", Box::new(|_| true)),
        ("big = 99999999999999999999", Box::new(|_| false)),
        ("disc < 0.0650000000000000000001", Box::new(|r| r.disc <= 6)),
        (
            "disc > 0.0699999999999999999999999999",
            Box::new(|r| r.disc >= 7),
        ),
        (
            "disc >= 0.0700000000000000000000000000",
            Box::new(|r| r.disc >= 7),
        ),
        (
            "disc BETWEEN 0.04999999999999999999999 AND 0.0700000000000000000001",
            Box::new(|r| (5..=7).contains(&r.disc)),
        ),
        (
            "disc IN (0.0500000000000000000000, 0.0650000000000000000001)",
            Box::new(|r| r.disc == 5),
        ),
        ("id / 7 = 3", Box::new(|r| r.id / 7 == 3)),
        (
            "price / 3 > 100.000001",
            Box::new(|r| {
                // price/3 rounded at scale 6, compared with 100.000001
                let q = (r.price * 10_000 * 2 + 3) / 6; // round half up of price*10^4/3 (positive)
                q > 100_000_001
            }),
        ),
    ];
    for (sql, pred) in &cases {
        assert_eq!(count(sql), reference(pred), "{sql}");
    }
}

#[test]
fn normalized_comparisons_show_in_the_plan() {
    let s = schema();
    let p = plan(
        "SELECT COUNT(*) FROM t WHERE disc < 0.065 AND price >= 123.455",
        &s,
    )
    .expect("plan");
    assert_eq!(
        p.filter.expect("filter").to_string(),
        "(disc < 0.07 AND price >= 123.46)"
    );
    let p = plan("SELECT id FROM t WHERE disc = 0.065 OR TRUE AND id < 3", &s).expect("plan");
    assert_eq!(p.filter.expect("filter").to_string(), "id < 3");
    let p = plan("SELECT id FROM t WHERE NOT (id < 3 OR flag LIKE 'A%')", &s).expect("plan");
    assert_eq!(
        p.filter.expect("filter").to_string(),
        "(id >= 3 AND flag NOT LIKE 'A%')"
    );
    let p = plan(
        "SELECT COUNT(*) FROM t WHERE d <= DATE '1998-12-01' - INTERVAL '90' DAY (3)",
        &s,
    )
    .expect("plan");
    assert_eq!(p.referenced_columns(), vec![4]);
    assert_eq!(
        p.filter.expect("filter").to_string(),
        "d <= DATE '1998-09-02'"
    );
}

#[test]
fn aggregates_are_exact() {
    let (s, v, rows) = data();
    let r = common::run(
        &s,
        &v,
        "SELECT SUM(price * (1 - disc)), SUM(price * disc * disc), AVG(price), AVG(id), \
                MIN(d), MAX(d), MIN(mode), MAX(flag), COUNT(mode), SUM(id), MIN(price), MAX(big) \
         FROM t WHERE id >= 10",
    )
    .expect("runs");
    let sel: Vec<&Row> = rows.iter().filter(|r| r.id >= 10).collect();
    let n = sel.len() as i128;
    let sum = |f: &dyn Fn(&Row) -> i128| sel.iter().map(|r| f(r)).sum::<i128>();
    let round = |num: i128, den: i128| (2 * num + den) / (2 * den);
    let dec = |units, scale| Value::Decimal { units, scale };
    let expected = vec![
        dec(sum(&|r| i128::from(r.price) * i128::from(100 - r.disc)), 4),
        dec(sum(&|r| i128::from(r.price * r.disc * r.disc)), 6),
        dec(round(sum(&|r| i128::from(r.price)) * 10_000, n), 6),
        dec(round(sum(&|r| i128::from(r.id)) * 1_000_000, n), 6),
        Value::Date(D0 + 10),
        Value::Date(D0 + N as i32 - 1),
        Value::Char(b"AIR".to_vec()),
        Value::Char(b"R".to_vec()),
        Value::Int(n),
        Value::Int(sum(&|r| i128::from(r.id))),
        dec(
            i128::from(sel.iter().map(|r| r.price).min().unwrap_or(0)),
            2,
        ),
        Value::Int(i128::from(sel.iter().map(|r| r.big).max().unwrap_or(0))),
    ];
    assert_eq!(r.rows, vec![expected]);
}

#[test]
fn empty_inputs_give_count_zero_and_nulls() {
    let (s, v, _) = data();
    let r = common::run(
        &s,
        &v,
        "SELECT COUNT(*), SUM(price), AVG(price), MIN(d), MAX(mode) FROM t WHERE id < 0",
    )
    .expect("runs");
    assert_eq!(
        r.rows,
        vec![vec![
            Value::Int(0),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null
        ]]
    );
    let r = common::run(
        &s,
        &v,
        "SELECT flag, COUNT(*) FROM t WHERE id < 0 GROUP BY flag",
    )
    .expect("runs");
    assert!(r.rows.is_empty());
    let r = common::run(&s, &[], "SELECT COUNT(*) FROM t").expect("runs on an empty table");
    assert_eq!(r.rows, vec![vec![Value::Int(0)]]);
}

#[test]
fn division_rounds_half_away_from_zero() {
    let (s, v, rows) = data();
    let r = common::run(&s, &v, "SELECT id / 4, price / 3, -price / 3, price / disc, id / 0.5 FROM t WHERE disc > 0 ORDER BY 1")
        .expect("runs");
    let round = |num: i128, den: i128| {
        let q = num / den;
        let rem = num % den;
        if 2 * rem.abs() >= den.abs() {
            q + num.signum() * den.signum()
        } else {
            q
        }
    };
    let mut expected: Vec<Vec<Value>> = rows
        .iter()
        .filter(|r| r.disc > 0)
        .map(|r| {
            let p = i128::from(r.price);
            vec![
                Value::Int(i128::from(r.id / 4)),
                // scale max(6, 2, 0) = 6: price(2) * 10^4 / 3
                Value::Decimal {
                    units: round(p * 10_000, 3),
                    scale: 6,
                },
                Value::Decimal {
                    units: round(-p * 10_000, 3),
                    scale: 6,
                },
                // scale 6: price(2) * 10^6 / disc(2)
                Value::Decimal {
                    units: round(p * 1_000_000, i128::from(r.disc)),
                    scale: 6,
                },
                // id(0) / 0.5(1): scale 6, id * 10^7 / 5
                Value::Decimal {
                    units: round(i128::from(r.id) * 10_000_000, 5),
                    scale: 6,
                },
            ]
        })
        .collect();
    expected.sort_by_key(|r| match r[0] {
        Value::Int(v) => v,
        _ => 0,
    });
    assert_eq!(r.rows, expected);
}

#[test]
fn runtime_errors_only_on_selected_rows() {
    let (s, v, _) = data();
    let e = common::run(&s, &v, "SELECT price / disc FROM t").unwrap_err();
    assert!(matches!(e, EvalError::DivisionByZero { .. }), "{e}");
    assert_eq!(e.to_string(), "division by zero in (price / disc)");
    assert!(common::run(&s, &v, "SELECT price / disc FROM t WHERE disc <> 0").is_ok());
    assert!(
        common::run(
            &s,
            &v,
            "SELECT COUNT(*) FROM t WHERE disc = 0 OR price / disc > 1"
        )
        .is_ok()
    );
    let e = common::run(&s, &v, "SELECT big * big FROM t").unwrap_err();
    assert_eq!(e.to_string(), "arithmetic overflow in (big * big)");
    let e = common::run(&s, &v, "SELECT SUM(big * 1000000000) FROM t").unwrap_err();
    assert!(matches!(e, EvalError::Overflow { .. }));
    // the sum itself is i128 and does not overflow
    let r = common::run(&s, &v, "SELECT SUM(big * 10000000) FROM t WHERE big > 0").expect("runs");
    assert!(matches!(r.rows[0][0], Value::Int(x) if x > i128::from(i64::MAX)));
}

#[test]
fn dates_and_intervals() {
    assert_eq!(count("d <= DATE '1994-01-01' + INTERVAL '10' DAY"), 11);
    assert_eq!(count("d - INTERVAL '3' DAY < DATE '1994-01-01'"), 3);
    assert_eq!(count("d + 1 = DATE '1994-01-03'"), 1);
    assert_eq!(count("d - DATE '1994-01-01' = id"), i128::from(N));
    assert_eq!(count("d < DATE '1994-01-01' + INTERVAL '1' MONTH"), 31);
    assert_eq!(count("d < DATE '1994-01-01' + INTERVAL '1 week'"), 7);
    assert_eq!(count("d < DATE '1994-01-01' + INTERVAL '2 weeks'"), 14);
    assert_eq!(
        count("d >= DATE '1995-01-01' - INTERVAL '1' YEAR"),
        i128::from(N)
    );
    let s = schema();
    let show = |cond: &str| {
        plan(&format!("SELECT id FROM t WHERE {cond}"), &s)
            .expect("plan")
            .filter
            .expect("filter")
            .to_string()
    };
    assert_eq!(
        show("d = DATE '1994-01-31' + INTERVAL '1' MONTH"),
        "d = DATE '1994-02-28'"
    );
    assert_eq!(
        show("d = DATE '1996-02-29' + INTERVAL '1' YEAR"),
        "d = DATE '1997-02-28'"
    );
    assert_eq!(
        show("d = DATE '1996-03-31' - INTERVAL '1' MONTH"),
        "d = DATE '1996-02-29'"
    );
    assert_eq!(
        show("d = INTERVAL '2' DAY + DATE '1996-02-28'"),
        "d = DATE '1996-03-01'"
    );
    assert_eq!(
        show("d = DATE '1996-01-15' - INTERVAL '13' MONTH"),
        "d = DATE '1994-12-15'"
    );
    let (s, v, _) = data();
    let r = common::run(
        &s,
        &v,
        "SELECT d, d + INTERVAL '1' DAY AS next, d - DATE '1993-12-31' FROM t WHERE id = 0",
    )
    .expect("runs");
    assert_eq!(
        r.rows,
        vec![vec![Value::Date(D0), Value::Date(D0 + 1), Value::Int(1)]]
    );
    assert_eq!(r.columns[1].name, "next");
    assert_eq!(r.rows[0][1].to_string(), "1994-01-02");
}

#[test]
fn strings_compare_blank_padded() {
    let by_mode = |f: &dyn Fn(&str) -> bool| reference(|r| f(r.mode));
    assert_eq!(count("mode = 'AIR'"), by_mode(&|m| m == "AIR"));
    assert_eq!(count("mode = 'AIR      '"), by_mode(&|m| m == "AIR"));
    assert_eq!(count("'AIR' = mode"), by_mode(&|m| m == "AIR"));
    assert_eq!(count("mode = 'AIR            X'"), 0);
    assert_eq!(count("mode < 'MAIL'"), by_mode(&|m| m < "MAIL"));
    assert_eq!(count("mode >= 'REG'"), by_mode(&|m| m >= "REG"));
    assert_eq!(
        count("mode LIKE 'REG%'"),
        by_mode(&|m| m.starts_with("REG"))
    );
    assert_eq!(
        count("mode LIKE 'REG AIR   %'"),
        by_mode(&|m| m == "REG AIR")
    );
    assert_eq!(
        count("mode NOT LIKE 'S%'"),
        by_mode(&|m| !m.starts_with('S'))
    );
    assert_eq!(count("mode LIKE '%'"), i128::from(N));
    assert_eq!(
        count("mode IN ('MAIL', 'SHIP', 'NONE')"),
        by_mode(&|m| m == "MAIL" || m == "SHIP")
    );
    assert_eq!(count("mode NOT IN ('MAIL')"), by_mode(&|m| m != "MAIL"));
    assert_eq!(count("mode > flag"), reference(|r| r.mode > r.flag));
    assert_eq!(count("flag = 'A'"), reference(|r| r.flag == "A"));
    assert_eq!(count("'b' > 'a'"), i128::from(N));
}

#[test]
fn boolean_logic() {
    assert_eq!(
        count("(flag = 'A' OR disc = 0.1) AND NOT (id < 50)"),
        reference(|r| (r.flag == "A" || r.disc == 10) && r.id >= 50)
    );
    assert_eq!(
        count("flag = 'A' OR flag = 'N' OR id < 10"),
        reference(|r| r.flag == "A" || r.flag == "N" || r.id < 10)
    );
    assert_eq!(
        count("NOT (flag = 'A' AND (id < 100 OR mode LIKE 'T%'))"),
        reference(|r| !(r.flag == "A" && (r.id < 100 || r.mode.starts_with('T'))))
    );
    assert_eq!(count("TRUE"), i128::from(N));
    assert_eq!(count("FALSE OR id = 7"), 1);
    assert_eq!(count("NOT NOT id = 7"), 1);
}

#[test]
fn projection_star_and_order_by() {
    let (s, v, rows) = data();
    let r = common::run(
        &s,
        &v,
        "SELECT id, price AS p FROM t WHERE id < 20 ORDER BY p DESC, id",
    )
    .expect("runs");
    let mut expected: Vec<(i64, i64)> = rows
        .iter()
        .filter(|r| r.id < 20)
        .map(|r| (r.id, r.price))
        .collect();
    expected.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let got: Vec<(i64, i64)> = r
        .rows
        .iter()
        .map(|row| match (&row[0], &row[1]) {
            (Value::Int(i), Value::Decimal { units, scale: 2 }) => (*i as i64, *units as i64),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, expected);
    assert_eq!(r.columns[1].name, "p");

    let r = common::run(&s, &v, "SELECT * FROM t WHERE id = 3").expect("runs");
    let x = row(3);
    assert_eq!(
        r.rows,
        vec![vec![
            Value::Int(3),
            Value::Int(i128::from(x.big)),
            Value::Decimal {
                units: i128::from(x.price),
                scale: 2
            },
            Value::Decimal {
                units: i128::from(x.disc),
                scale: 2
            },
            Value::Date(x.d),
            Value::Char(x.flag.as_bytes().to_vec()),
            Value::Char(x.mode.as_bytes().to_vec()),
        ]]
    );
    // order by position and by select-list text; page order without ORDER BY
    let r = common::run(
        &s,
        &v,
        "SELECT id, price * 2 FROM t WHERE id < 5 ORDER BY price * 2",
    )
    .expect("runs");
    let r2 = common::run(
        &s,
        &v,
        "SELECT id, price * 2 FROM t WHERE id < 5 ORDER BY 2 ASC",
    )
    .expect("runs");
    assert_eq!(r, r2);
    let r = common::run(&s, &v, "SELECT id FROM t WHERE id < 5").expect("runs");
    let ids: Vec<Value> = r.rows.into_iter().map(|mut x| x.remove(0)).collect();
    assert_eq!(ids, (0..5).map(Value::Int).collect::<Vec<_>>());
    let r =
        common::run(&s, &v, "SELECT t.mode, 'k' AS k FROM t AS t WHERE t.id = 2").expect("runs");
    assert_eq!(
        r.rows,
        vec![vec![
            Value::Char(b"AIR".to_vec()),
            Value::Char(b"k".to_vec())
        ]]
    );
}

#[test]
fn groups_come_out_in_key_order() {
    let (s, v, rows) = data();
    let r = common::run(
        &s,
        &v,
        "SELECT mode, flag, COUNT(*), SUM(disc) FROM t GROUP BY mode, flag",
    )
    .expect("runs");
    let mut expected: std::collections::BTreeMap<(&str, &str), (i128, i128)> = Default::default();
    for x in &rows {
        let e = expected.entry((x.mode, x.flag)).or_default();
        e.0 += 1;
        e.1 += i128::from(x.disc);
    }
    let expected: Vec<Vec<Value>> = expected
        .into_iter()
        .map(|((m, f), (c, d))| {
            vec![
                Value::Char(m.as_bytes().to_vec()),
                Value::Char(f.as_bytes().to_vec()),
                Value::Int(c),
                Value::Decimal { units: d, scale: 2 },
            ]
        })
        .collect();
    assert_eq!(r.rows, expected);
    // ORDER BY an aggregate, descending; ties keep key order
    let r = common::run(
        &s,
        &v,
        "SELECT flag, COUNT(*) AS n FROM t GROUP BY flag ORDER BY n DESC, flag",
    )
    .expect("runs");
    assert_eq!(r.rows.len(), 3);
    // grouping on a date and a decimal column
    let r = common::run(
        &s,
        &v,
        "SELECT disc, MIN(d), MAX(id) FROM t WHERE id < 22 GROUP BY disc ORDER BY disc DESC",
    )
    .expect("runs");
    assert_eq!(r.rows.len(), 11);
    assert_eq!(
        r.rows[0],
        vec![
            Value::Decimal {
                units: 10,
                scale: 2
            },
            Value::Date(D0 + 10),
            Value::Int(21)
        ]
    );
}

#[test]
fn counters_follow_the_narrowing_selection() {
    let (s, v, _) = data();
    let p = plan("SELECT COUNT(*) FROM t WHERE id < 10 AND disc = 0.05", &s).expect("plan");
    for layout in [Layout::Nsm, Layout::Pax] {
        let pages = common::pages(&s, &v, layout, 4096);
        let (r, c) = common::eval(&p, &s, &pages).expect("runs");
        assert_eq!(r.rows, vec![vec![Value::Int(1)]]);
        assert_eq!(c.records_examined, N as u64);
        // the second term only sees the 10 rows the first one kept
        assert_eq!(c.predicates_evaluated, N as u64 + 10);
        assert_eq!(c.rows_selected, 1);
        assert_eq!(c.pages, pages.len() as u64);
        assert!(c.bytes_touched >= N as u64 * 4);
    }
    let p = plan("SELECT id, mode FROM t WHERE id < 10", &s).expect("plan");
    let pages = common::pages(&s, &v, Layout::Pax, 4096);
    let (_, c) = common::eval(&p, &s, &pages).expect("runs");
    assert_eq!(c.results_written, 10);
    assert_eq!(c.result_bytes, 10 * (8 + 10));
    // the filter alone (a hardware filter stage): row indices within each page
    let p = plan("SELECT id FROM t WHERE id % 1 = 0 OR id >= 250", &s);
    assert!(p.is_err());
    let p = plan("SELECT id FROM t WHERE id < 3 OR id >= 298", &s).expect("plan");
    let mut e = Evaluator::new(&p);
    let mut got = Vec::new();
    let mut sel = Vec::new();
    let mut base = 0u32;
    for pg in &pages {
        let view = PageView::parse(pg, &s).expect("page");
        let c = e.select(&view, &mut sel).expect("selects");
        assert_eq!(c.rows_selected, sel.len() as u64);
        got.extend(sel.iter().map(|i| base + i));
        base += view.row_count() as u32;
    }
    assert_eq!(got, vec![0, 1, 2, 298, 299]);
    assert_eq!(e.totals().records_examined, N as u64);
}

#[test]
fn pages_of_another_table_are_rejected() {
    let (s, v, _) = data();
    let other = Schema::new("u", vec![Column::new("id", ColumnType::Int32)]).expect("schema");
    let p = plan("SELECT COUNT(*) FROM u", &other).expect("plan");
    let pages = common::pages(&s, &v, Layout::Pax, 4096);
    let view = PageView::parse(&pages[0], &s).expect("page");
    let mut e = Evaluator::new(&p);
    let mut part = PartialResult::new(&p);
    let err = e.eval_page(&view, &mut part).unwrap_err();
    assert!(matches!(err, EvalError::WrongTable { .. }), "{err}");
    assert!(err.to_string().contains("belongs to table 't'"));
    // a partial result of another plan is refused too
    let p2 = plan("SELECT id FROM t", &s).expect("plan");
    let mut wrong = PartialResult::new(&p2);
    let p1 = plan("SELECT COUNT(*) FROM t", &s).expect("plan");
    let mut e = Evaluator::new(&p1);
    assert!(matches!(
        e.eval_page(&view, &mut wrong),
        Err(EvalError::PlanMismatch(_))
    ));
    assert!(PartialResult::new(&p1).merge(wrong).is_err());
}

#[test]
fn results_format_as_a_table() {
    let (s, v, _) = data();
    let r = common::run(
        &s,
        &v,
        "SELECT flag, COUNT(*) AS n, AVG(price) AS avg_price, MIN(d) AS first FROM t GROUP BY flag",
    )
    .expect("runs");
    assert_eq!(
        r.to_string(),
        "flag |   n |  avg_price | first\n\
         -----+-----+------------+-----------\n\
         A    | 100 | 485.305000 | 1994-01-01\n\
         N    | 100 | 498.775000 | 1994-01-02\n\
         R    | 100 | 512.245000 | 1994-01-03\n\
         (3 rows)"
    );
    assert_eq!(
        Value::Decimal {
            units: 1_231_410_782_283,
            scale: 4
        }
        .to_string(),
        "123141078.2283"
    );
}

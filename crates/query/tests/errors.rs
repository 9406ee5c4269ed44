//! Every construct outside the subset, every bad name and every type error is a typed
//! error whose message names the problem.

use csd_query::{QueryError, plan};
use csd_table::datagen::TpchTable;

fn err(sql: &str) -> QueryError {
    let schema = TpchTable::LineItem.schema();
    match plan(sql, &schema) {
        Ok(p) => panic!("{sql}\nplanned unexpectedly: {p}"),
        Err(e) => e,
    }
}

fn msg(sql: &str) -> String {
    err(sql).to_string()
}

#[test]
fn unsupported_constructs_are_named() {
    let cases: &[(&str, &str)] = &[
        (
            "SELECT * FROM lineitem JOIN orders ON l_orderkey = o_orderkey",
            "JOIN is not supported",
        ),
        ("SELECT * FROM lineitem, orders", "JOIN is not supported"),
        (
            "SELECT * FROM lineitem LEFT JOIN orders ON TRUE",
            "JOIN is not supported",
        ),
        (
            "SELECT * FROM (SELECT * FROM lineitem) AS t",
            "a subquery in FROM is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_orderkey IN (SELECT 1)",
            "a subquery is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE EXISTS (SELECT 1)",
            "a subquery is not supported",
        ),
        (
            "SELECT l_returnflag, COUNT(*) FROM lineitem GROUP BY l_returnflag HAVING COUNT(*) > 1",
            "HAVING is not supported",
        ),
        (
            "SELECT DISTINCT l_returnflag FROM lineitem",
            "DISTINCT is not supported",
        ),
        (
            "SELECT * FROM lineitem LIMIT 10",
            "LIMIT/OFFSET is not supported",
        ),
        (
            "SELECT l_orderkey FROM lineitem UNION SELECT l_orderkey FROM lineitem",
            "UNION is not supported",
        ),
        (
            "WITH t AS (SELECT 1) SELECT * FROM lineitem",
            "WITH (common table expressions) is not supported",
        ),
        (
            "INSERT INTO lineitem VALUES (1)",
            "INSERT statement is not supported: only SELECT queries are",
        ),
        ("DELETE FROM lineitem", "DELETE statement is not supported"),
        (
            "SELECT 1 FROM lineitem; SELECT 2 FROM lineitem",
            "more than one statement is not supported",
        ),
        ("SELECT 1", "SELECT without FROM is not supported"),
        (
            "SELECT CASE WHEN l_tax > 0 THEN 1 ELSE 0 END FROM lineitem",
            "CASE is not supported",
        ),
        (
            "SELECT CAST(l_tax AS INT) FROM lineitem",
            "CAST is not supported",
        ),
        (
            "SELECT UPPER(l_comment) FROM lineitem",
            "function UPPER is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_comment IS NULL",
            "IS [NOT] NULL (columns are never NULL) is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax = NULL",
            "NULL is not supported: table columns are never NULL",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_comment ILIKE 'a%'",
            "ILIKE is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_comment LIKE 'a%' ESCAPE '!'",
            "LIKE ... ESCAPE is not supported",
        ),
        (
            "SELECT COUNT(DISTINCT l_orderkey) FROM lineitem",
            "COUNT(DISTINCT ...) is not supported",
        ),
        (
            "SELECT SUM(l_tax) OVER () FROM lineitem",
            "window functions (OVER) is not supported",
        ),
        (
            "SELECT SUM(l_tax) / COUNT(*) FROM lineitem",
            "an expression over aggregates (SUM(l_tax) / COUNT(*)) is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem GROUP BY l_tax + 1",
            "GROUP BY on the expression l_tax + 1 is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_quantity < :3",
            "the query parameter :3 is not supported",
        ),
        (
            "SELECT l_tax % 2 FROM lineitem",
            "operator % is not supported",
        ),
        (
            "SELECT l_comment || 'x' FROM lineitem",
            "operator || is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax IN (l_discount, 1)",
            "the non-constant IN list element l_discount is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate < DATE '1995-01-01' - INTERVAL '1' HOUR",
            "INTERVAL ... HOUR is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate + INTERVAL '1' MONTH < DATE '1995-01-01'",
            "MONTH/YEAR interval arithmetic on a column",
        ),
        (
            "SELECT INTERVAL '1' DAY FROM lineitem",
            "INTERVAL may only be added to or subtracted from a DATE",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate < TIMESTAMP '1995-01-01 00:00:00'",
            "TIMESTAMP literals is not supported",
        ),
        (
            "SELECT l_tax < 1 FROM lineitem",
            "a condition in the select list (l_tax < 1) is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem ORDER BY 1 NULLS FIRST",
            "NULLS FIRST/LAST is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_comment SIMILAR TO 'a%'",
            "SIMILAR TO is not supported",
        ),
        (
            "SELECT SUBSTRING(l_comment FROM 1 FOR 2) FROM lineitem",
            "SUBSTRING is not supported",
        ),
    ];
    for (sql, want) in cases {
        let m = msg(sql);
        assert!(m.contains(want), "{sql}\n  got:  {m}\n  want: {want}");
    }
}

#[test]
fn like_accepts_only_prefix_patterns() {
    for pat in ["%abc", "a%c", "a_c%", "abc", "a%%", "_%"] {
        let e = err(&format!(
            "SELECT COUNT(*) FROM lineitem WHERE l_shipmode LIKE '{pat}'"
        ));
        assert!(matches!(e, QueryError::LikePattern { .. }), "{pat}: {e}");
        assert!(
            e.to_string()
                .contains("only a literal prefix followed by one trailing %")
        );
    }
    let e = err("SELECT COUNT(*) FROM lineitem WHERE l_tax LIKE 'a%'");
    assert_eq!(
        e.to_string(),
        "LIKE needs a string (CHAR), but l_tax is DECIMAL(scale 2)"
    );
    let e = err("SELECT COUNT(*) FROM lineitem WHERE l_shipmode LIKE l_comment");
    assert!(e.to_string().contains("must be a string literal"), "{e}");
}

#[test]
fn names_are_checked() {
    let m = msg("SELECT l_foo FROM lineitem");
    assert_eq!(
        m,
        "unknown column l_foo in table lineitem; columns: l_orderkey, l_partkey, l_suppkey, \
         l_linenumber, l_quantity, l_extendedprice, l_discount, l_tax, l_returnflag, \
         l_linestatus, l_shipdate, l_commitdate, l_receiptdate, l_shipinstruct, l_shipmode, \
         l_comment"
    );
    assert!(matches!(
        err("SELECT COUNT(*) FROM lineitem WHERE x = 1"),
        QueryError::UnknownColumn { .. }
    ));
    assert!(matches!(
        err("SELECT o.l_tax FROM lineitem"),
        QueryError::UnknownColumn { .. }
    ));
    assert_eq!(
        msg("SELECT * FROM nation"),
        "unknown table nation; tables: lineitem"
    );
    let schemas = vec![TpchTable::LineItem.schema(), TpchTable::Orders.schema()];
    let e = plan("SELECT * FROM part", &schemas).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown table part; tables: lineitem, orders"
    );
    // case-insensitive names and qualified columns work
    assert!(plan("select L_TAX from LineItem", &schemas).is_ok());
    assert!(
        plan(
            "SELECT l.l_tax FROM lineitem AS l WHERE lineitem.l_tax > 0",
            &schemas
        )
        .is_ok()
    );
    assert!(plan("SELECT o_totalprice FROM orders", &schemas).is_ok());
}

#[test]
fn type_errors_name_the_types() {
    let cases: &[(&str, &str)] = &[
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate = l_returnflag",
            "cannot compare DATE with CHAR(1)",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate < '1994-01-01'",
            "cannot compare DATE with CHAR(10): write a date literal as DATE 'YYYY-MM-DD'",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax = '0.02'",
            "cannot compare DECIMAL(scale 2) with CHAR(4): write numbers without quotes",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate > 5",
            "cannot compare DATE with INT",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipmode IN ('MAIL', 3)",
            "cannot compare CHAR(10) with INT",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax BETWEEN DATE '1994-01-01' AND 1",
            "cannot compare DECIMAL(scale 2) with DATE",
        ),
        (
            "SELECT l_shipdate * 2 FROM lineitem",
            "cannot apply * to DATE and INT",
        ),
        (
            "SELECT l_returnflag + 1 FROM lineitem",
            "cannot apply + to CHAR(1) and INT",
        ),
        (
            "SELECT l_shipdate + l_commitdate FROM lineitem",
            "cannot apply + to DATE and DATE",
        ),
        (
            "SELECT l_shipdate + 0.5 FROM lineitem",
            "cannot apply + to DATE and DECIMAL(scale 1)",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_quantity",
            "WHERE needs a condition, but l_quantity is DECIMAL(scale 2)",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE NOT l_tax",
            "NOT needs a condition, but l_tax is DECIMAL(scale 2)",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax > 0 AND l_tax",
            "AND needs conditions, but l_tax is DECIMAL(scale 2)",
        ),
        (
            "SELECT -l_shipmode FROM lineitem",
            "unary - needs a number, but l_shipmode is CHAR(10)",
        ),
        (
            "SELECT SUM(l_shipdate) FROM lineitem",
            "SUM needs a number (INT or DECIMAL), but SUM(l_shipdate) is DATE",
        ),
        (
            "SELECT AVG(l_returnflag) FROM lineitem",
            "AVG needs a number (INT or DECIMAL), but AVG(l_returnflag) is CHAR(1)",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate + INTERVAL '1' DAY > 3",
            "cannot compare DATE with INT",
        ),
        (
            "SELECT l_tax + INTERVAL '1' DAY FROM lineitem",
            "INTERVAL arithmetic needs a DATE, but l_tax + INTERVAL '1' DAY is DECIMAL(scale 2)",
        ),
    ];
    for (sql, want) in cases {
        let m = msg(sql);
        assert!(m.contains(want), "{sql}\n  got:  {m}\n  want: {want}");
    }
    assert!(matches!(
        err("SELECT COUNT(*) FROM lineitem WHERE l_shipdate = l_returnflag"),
        QueryError::Compare { .. }
    ));
}

#[test]
fn grouping_errors() {
    let cases: &[(&str, &str)] = &[
        (
            "SELECT l_tax, SUM(l_quantity) FROM lineitem",
            "l_tax must appear in GROUP BY or be used in an aggregate function",
        ),
        (
            "SELECT l_tax FROM lineitem GROUP BY l_returnflag",
            "l_tax must appear in GROUP BY",
        ),
        (
            "SELECT *, COUNT(*) FROM lineitem",
            "SELECT * cannot be combined with aggregates",
        ),
        (
            "SELECT SUM(SUM(l_tax)) FROM lineitem",
            "aggregate functions cannot be nested",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE SUM(l_tax) > 1",
            "aggregate SUM(l_tax) is not allowed in WHERE",
        ),
        (
            "SELECT SUM(l_tax, l_discount) FROM lineitem",
            "SUM takes exactly one argument",
        ),
        ("SELECT SUM(*) FROM lineitem", "only COUNT takes *"),
    ];
    for (sql, want) in cases {
        let m = msg(sql);
        assert!(m.contains(want), "{sql}\n  got:  {m}\n  want: {want}");
    }
}

#[test]
fn order_by_errors() {
    let cases: &[(&str, &str)] = &[
        (
            "SELECT l_tax FROM lineitem ORDER BY l_discount",
            "ORDER BY l_discount: only columns of the select list",
        ),
        (
            "SELECT l_returnflag, COUNT(*) FROM lineitem GROUP BY l_returnflag ORDER BY 3",
            "position 3 is out of range: the select list has 2 columns",
        ),
        (
            "SELECT l_tax FROM lineitem ORDER BY 0",
            "position 0 is out of range",
        ),
    ];
    for (sql, want) in cases {
        let m = msg(sql);
        assert!(m.contains(want), "{sql}\n  got:  {m}\n  want: {want}");
    }
}

#[test]
fn literal_errors() {
    let cases: &[(&str, &str)] = &[
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate < DATE '1994-02-30'",
            "invalid literal DATE '1994-02-30': 1994-02-30 is not a calendar date",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate < DATE '94-1-1'",
            "is not a date: write dates as YYYY-MM-DD",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax < 1e5",
            "exponent notation is not supported",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax < 0.123456789012345678901234567890123456789",
            "more than 38 digits after the point",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax < 999999999999999999999999999999999999999",
            "more than 38 significant digits",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax + 99999999999999999999 > 0",
            "can only be compared with, not computed with",
        ),
        (
            "SELECT 0.1234567890123456789 FROM lineitem",
            "can only be compared with",
        ),
        (
            "SELECT SUM(99999999999999999999) FROM lineitem",
            "can only be compared with",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax < 1 / 0",
            "in constant expression 1 / 0: division by zero",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_tax < 9223372036854775807 + 1",
            "arithmetic overflow",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate < DATE '9999-12-31' + INTERVAL '1' YEAR",
            "outside 0000-01-01 ..= 9999-12-31",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate < DATE '1995-01-01' - INTERVAL 'abc' DAY",
            "whole number",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate < DATE '1995-01-01' - INTERVAL '3'",
            "give the unit",
        ),
        (
            "SELECT COUNT(*) FROM lineitem WHERE l_shipdate < DATE '1995-01-01' - INTERVAL '3 hours'",
            "the interval unit 'hours' is not supported",
        ),
    ];
    for (sql, want) in cases {
        let m = msg(sql);
        assert!(m.contains(want), "{sql}\n  got:  {m}\n  want: {want}");
    }
    let m = msg(
        "SELECT l_tax * l_tax * l_tax * l_tax * l_tax * l_tax * l_tax * l_tax * l_tax * l_tax \
         FROM lineitem",
    );
    assert!(
        m.contains("would have 20 digits after the point; at most 18"),
        "{m}"
    );
}

#[test]
fn syntax_errors_and_hostile_input_do_not_panic() {
    assert!(matches!(
        err("SELEC * FROM lineitem"),
        QueryError::Syntax { .. }
    ));
    assert!(matches!(err(""), QueryError::Syntax { .. }));
    assert!(matches!(err("SELECT * FROM"), QueryError::Syntax { .. }));
    assert!(matches!(
        err("SELECT 'unterminated FROM lineitem"),
        QueryError::Syntax { .. }
    ));
    // deep nesting hits the parser's recursion limit, not the stack
    let deep = format!(
        "SELECT COUNT(*) FROM lineitem WHERE {}l_tax > 0{}",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    assert!(matches!(err(&deep), QueryError::Syntax { .. }));
    let deep_not = format!(
        "SELECT COUNT(*) FROM lineitem WHERE {} l_tax > 0",
        "NOT ".repeat(5000)
    );
    assert!(matches!(err(&deep_not), QueryError::Syntax { .. }));
    for junk in [
        "\u{0}",
        "SELECT \u{feff} FROM lineitem",
        "SELECT é FROM lineitem",
        "))))",
        "'",
    ] {
        let schema = TpchTable::LineItem.schema();
        assert!(plan(junk, &schema).is_err(), "{junk:?}");
    }
}

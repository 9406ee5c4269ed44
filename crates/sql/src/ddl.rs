//! The statements csd runs itself instead of handing them to DataFusion (which does not
//! execute `CREATE INDEX`): FLIXR per-page indexes (flixr §4.2) and the switch that
//! turns their use off for comparison.
//!
//! * `CREATE INDEX name ON table (column) [USING range|bitmap] [WITH (buckets = N,
//!   share = 'other_index')]`: `range` (also `brin`, `minmax`; the default) keeps each
//!   page's min and max, `bitmap` one bit per value bucket; `share` reuses another
//!   bitmap index's split points (what a FLIXR join needs of its two join columns);
//! * `DROP INDEX [IF EXISTS] name`;
//! * `SET csd.use_index = true|false`;
//! * `INSERT`, `UPDATE`, `DELETE` are DataFusion's to plan ([`is_dml`] tells them
//!   apart: the session runs them once, not once per strategy, and reloads its
//!   catalog after; see [`crate::dml`]).
//!
//! Statements are parsed with DataFusion's own parser (sqlparser, PostgreSQL dialect,
//! whose `CREATE INDEX` takes `WITH (...)`, then the generic one); anything else is
//! DataFusion's.

use csd_host::index::{CreateIndex, DEFAULT_BUCKETS, IndexKindSpec};
use datafusion::sql::sqlparser::ast::{
    CreateIndex as SqlCreateIndex, IndexOption, ObjectType, Set, Statement,
};
use datafusion::sql::sqlparser::dialect::{GenericDialect, PostgreSqlDialect};
use datafusion::sql::sqlparser::parser::Parser;

/// A statement csd runs itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ddl {
    /// `CREATE INDEX`.
    CreateIndex(CreateIndex),
    /// `DROP INDEX`.
    DropIndex {
        /// The index name.
        name: String,
        /// `IF EXISTS`: no error when there is none.
        if_exists: bool,
    },
    /// `SET csd.use_index = ...`.
    SetUseIndex(bool),
}

fn unquote(s: &str) -> String {
    s.trim()
        .trim_matches(|c| c == '"' || c == '\'' || c == '`')
        .to_string()
}

/// `CREATE INDEX ... WITH (options)` as the statement without the clause and the
/// options' text; any other SQL unchanged.
fn split_with(sql: &str) -> (String, Option<String>) {
    let t = sql.trim().trim_end_matches(';').trim_end();
    let lower = t.to_ascii_lowercase();
    if !lower.starts_with("create") || !lower.contains("index") || !t.ends_with(')') {
        return (sql.to_string(), None);
    }
    let Some(at) = lower.rfind("with") else {
        return (sql.to_string(), None);
    };
    let rest = t[at + 4..].trim_start();
    match rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        Some(inner) if !inner.contains('(') && !inner.contains(')') => {
            (t[..at].to_string(), Some(inner.to_string()))
        }
        _ => (sql.to_string(), None),
    }
}

/// The csd statement `sql` is, if it is one; `Err` with an actionable message when it
/// is one of them but malformed. SQL that does not parse is left to DataFusion.
pub fn parse(sql: &str) -> Result<Option<Ddl>, String> {
    // A trailing `WITH (...)` of CREATE INDEX is taken apart here: sqlparser accepts it
    // only before a MySQL-style `USING` after the column list.
    let (sql, with) = split_with(sql);
    let Ok(stmts) = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
        .or_else(|_| Parser::parse_sql(&GenericDialect {}, &sql))
    else {
        return Ok(None);
    };
    let [stmt] = stmts.as_slice() else {
        return Ok(None);
    };
    match stmt {
        Statement::CreateIndex(ci) => create_index(ci, with.as_deref()).map(Some),
        Statement::Drop {
            object_type: ObjectType::Index,
            if_exists,
            names,
            ..
        } => {
            let [n] = names.as_slice() else {
                return Err("DROP INDEX drops one index at a time".into());
            };
            Ok(Some(Ddl::DropIndex {
                name: unquote(&n.to_string()),
                if_exists: *if_exists,
            }))
        }
        Statement::Set(Set::SingleAssignment {
            variable, values, ..
        }) if variable.to_string().eq_ignore_ascii_case("csd.use_index") => {
            let v = values
                .first()
                .map(|v| unquote(&v.to_string()).to_ascii_lowercase())
                .unwrap_or_default();
            match v.as_str() {
                "true" | "on" | "1" => Ok(Some(Ddl::SetUseIndex(true))),
                "false" | "off" | "0" => Ok(Some(Ddl::SetUseIndex(false))),
                _ => Err(format!("SET csd.use_index = {v}: use true or false")),
            }
        }
        _ => Ok(None),
    }
}

/// `CREATE INDEX name ON table [USING kind] (column) [WITH (options)]`.
fn create_index(ci: &SqlCreateIndex, with: Option<&str>) -> Result<Ddl, String> {
    let name = ci
        .name
        .as_ref()
        .map(|n| unquote(&n.to_string()))
        .ok_or("CREATE INDEX needs a name: CREATE INDEX name ON table (column)")?;
    let [col] = ci.columns.as_slice() else {
        return Err(format!(
            "CREATE INDEX {name}: a FLIXR per-page index covers exactly one column, not {}",
            ci.columns.len()
        ));
    };
    let column = unquote(&col.column.expr.to_string());
    let (buckets, share) = index_options(ci, with)?;
    let kind = index_kind(ci, buckets, share)?;
    Ok(Ddl::CreateIndex(CreateIndex {
        name,
        table: unquote(&ci.table_name.to_string()),
        column,
        kind,
    }))
}

/// The `buckets` and `share` options of CREATE INDEX, from sqlparser's WITH list and
/// from the trailing `WITH (...)` taken apart by [`split_with`].
fn index_options(
    ci: &SqlCreateIndex,
    with: Option<&str>,
) -> Result<(usize, Option<String>), String> {
    let mut buckets = DEFAULT_BUCKETS;
    let mut share = None;
    let texts: Vec<String> = ci
        .with
        .iter()
        .map(|w| w.to_string())
        .chain(
            with.into_iter()
                .flat_map(|w| w.split(',').map(|x| x.trim().to_string())),
        )
        .filter(|x| !x.is_empty())
        .collect();
    for text in texts {
        let (k, v) = text
            .split_once('=')
            .ok_or_else(|| format!("WITH option `{text}`: use key = value"))?;
        match unquote(k).to_ascii_lowercase().as_str() {
            "buckets" => {
                buckets = unquote(v)
                    .parse()
                    .map_err(|_| format!("WITH buckets = {}: use a whole number", v.trim()))?;
            }
            "share" => share = Some(unquote(v)),
            other => {
                return Err(format!(
                    "unknown WITH option `{other}`: use buckets = N or share = 'index'"
                ));
            }
        }
    }
    Ok((buckets, share))
}

/// The index kind CREATE INDEX asks for (`USING range|brin|minmax|bitmap`).
fn index_kind(
    ci: &SqlCreateIndex,
    buckets: usize,
    share: Option<String>,
) -> Result<IndexKindSpec, String> {
    // `USING x` before the column list (PostgreSQL) or after it (MySQL's index
    // option).
    let after = ci.index_options.iter().find_map(|o| match o {
        IndexOption::Using(t) => Some(t),
        _ => None,
    });
    let using = ci
        .using
        .as_ref()
        .or(after)
        .map(|u| u.to_string().to_ascii_lowercase())
        .unwrap_or_else(|| "range".into());
    match using.as_str() {
        "range" | "brin" | "minmax" => {
            if share.is_some() {
                return Err("share = '...' applies to USING bitmap indexes".into());
            }
            Ok(IndexKindSpec::Range)
        }
        "bitmap" => Ok(IndexKindSpec::Bitmap { buckets, share }),
        other => Err(format!(
            "USING {other}: FLIXR per-page indexes are range (min/max) or bitmap"
        )),
    }
}

/// Whether `sql` is one INSERT, UPDATE or DELETE statement (which changes a device
/// table: see [`crate::dml`]).
pub fn is_dml(sql: &str) -> bool {
    let Ok(stmts) = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .or_else(|_| Parser::parse_sql(&GenericDialect {}, sql))
    else {
        return false;
    };
    matches!(
        stmts.as_slice(),
        [Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)]
    )
}

/// Whether `sql` is one `EXPLAIN [ANALYZE]` statement: its answer is a plan, which
/// differs between strategies by design (each shows its own device program and
/// metrics), so [`crate::SqlSession::run_strategies`] does not compare them.
pub fn is_explain(sql: &str) -> bool {
    let Ok(stmts) = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .or_else(|_| Parser::parse_sql(&GenericDialect {}, sql))
    else {
        return false;
    };
    matches!(stmts.as_slice(), [Statement::Explain { .. }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_is_told_from_queries() {
        assert!(is_explain("EXPLAIN ANALYZE SELECT 1"));
        assert!(is_explain("explain select * from t"));
        assert!(!is_explain("SELECT 'explain'"));
        assert!(!is_explain("EXPLAIN nonsense ((("));
    }

    #[test]
    fn parses_the_csd_statements_and_leaves_the_rest() {
        assert_eq!(
            parse("CREATE INDEX ix ON lineitem (l_shipdate)").unwrap(),
            Some(Ddl::CreateIndex(CreateIndex {
                name: "ix".into(),
                table: "lineitem".into(),
                column: "l_shipdate".into(),
                kind: IndexKindSpec::Range,
            }))
        );
        assert_eq!(
            parse("create index b on orders (o_orderkey) using bitmap with (buckets = 64, share = 'a')")
                .unwrap(),
            Some(Ddl::CreateIndex(CreateIndex {
                name: "b".into(),
                table: "orders".into(),
                column: "o_orderkey".into(),
                kind: IndexKindSpec::Bitmap {
                    buckets: 64,
                    share: Some("a".into())
                },
            }))
        );
        assert_eq!(
            parse("DROP INDEX IF EXISTS ix").unwrap(),
            Some(Ddl::DropIndex {
                name: "ix".into(),
                if_exists: true
            })
        );
        assert_eq!(
            parse("SET csd.use_index = false").unwrap(),
            Some(Ddl::SetUseIndex(false))
        );
        assert_eq!(parse("SELECT 1").unwrap(), None);
        assert_eq!(
            parse("SET datafusion.execution.batch_size = 10").unwrap(),
            None
        );
        assert!(parse("CREATE INDEX ix ON t (a, b)").is_err());
        assert!(parse("CREATE INDEX ix ON t (a) USING hash").is_err());
        assert!(parse("SET csd.use_index = maybe").is_err());
        assert_eq!(
            parse("CREATE INDEX b ON t (k) USING bitmap WITH (buckets = 8);").unwrap(),
            Some(Ddl::CreateIndex(CreateIndex {
                name: "b".into(),
                table: "t".into(),
                column: "k".into(),
                kind: IndexKindSpec::Bitmap {
                    buckets: 8,
                    share: None
                },
            }))
        );
        assert!(parse("CREATE INDEX b ON t (k) WITH (colour = 1)").is_err());
        assert_eq!(parse("INSERT INTO t VALUES (1, 2)").unwrap(), None);
        assert!(is_dml("INSERT INTO t VALUES (1, 2)"));
        assert!(is_dml("delete from t where k = 1;"));
        assert!(is_dml("UPDATE t SET v = v + 1 WHERE k < 3"));
        assert!(!is_dml("SELECT 1") && !is_dml("CREATE INDEX i ON t (k)"));
    }
}

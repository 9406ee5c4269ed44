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
//! * `INSERT`, `UPDATE`, `DELETE` are DataFusion's to plan, but the session runs them
//!   once, not once per strategy, and reloads its catalog after (see [`crate::dml`]);
//! * `EXPLAIN` answers a plan, which differs between strategies by design.
//!
//! [`Statement::parse`] parses a statement once with DataFusion's own parser (sqlparser,
//! PostgreSQL dialect, whose `CREATE INDEX` takes `WITH (...)`, then the generic one) and
//! classifies it ([`StatementKind`]); the session and the CLI dispatch on that kind.
//! Anything that is not csd's own is DataFusion's to plan from the text.

use csd_host::index::{CreateIndex, DEFAULT_BUCKETS, IndexKindSpec};
use datafusion::sql::sqlparser::ast::{
    CreateIndex as SqlCreateIndex, IndexOption, ObjectType, Set, Statement as SqlStatement,
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

/// One SQL statement, parsed once and classified by what runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    sql: String,
    kind: StatementKind,
}

/// What runs a [`Statement`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatementKind {
    /// A statement csd runs itself ([`Ddl`]).
    Csd(Ddl),
    /// One INSERT, UPDATE or DELETE: DataFusion plans it, the session runs it once.
    Dml(Dml),
    /// One `EXPLAIN [ANALYZE]`: its answer is a plan, which differs between strategies.
    Explain,
    /// Anything else, including SQL that does not parse or holds several statements:
    /// DataFusion's to plan (and to refuse with its own message).
    Query,
}

/// An INSERT, UPDATE or DELETE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dml {
    /// Which of the three.
    pub op: DmlOp,
    /// UPDATE's `SET` list as text, `(column, value)` in order (empty for the others):
    /// what names the column of a value that does not fit it.
    pub assignments: Vec<(String, String)>,
}

/// The kind of a [`Dml`] statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmlOp {
    /// `INSERT`.
    Insert,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
}

impl Statement {
    /// Parses `sql` once and classifies it. `Err` with an actionable message when it is
    /// one of csd's own statements but malformed; SQL that does not parse is a
    /// [`StatementKind::Query`], left to DataFusion.
    pub fn parse(sql: &str) -> Result<Statement, String> {
        // A trailing `WITH (...)` of CREATE INDEX is taken apart here: sqlparser accepts
        // it only before a MySQL-style `USING` after the column list.
        let (text, with) = split_with(sql);
        let parsed = Parser::parse_sql(&PostgreSqlDialect {}, &text)
            .or_else(|_| Parser::parse_sql(&GenericDialect {}, &text));
        let kind = match parsed.as_deref() {
            Ok([stmt]) => classify(stmt, with.as_deref())?,
            _ => StatementKind::Query,
        };
        Ok(Statement {
            sql: sql.to_string(),
            kind,
        })
    }

    /// The statement's text, as given.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// What runs it.
    pub fn kind(&self) -> &StatementKind {
        &self.kind
    }

    /// Whether it is one INSERT, UPDATE or DELETE.
    pub fn is_dml(&self) -> bool {
        matches!(self.kind, StatementKind::Dml(_))
    }
}

/// The kind of one parsed statement.
fn classify(stmt: &SqlStatement, with: Option<&str>) -> Result<StatementKind, String> {
    let ddl = match stmt {
        SqlStatement::CreateIndex(ci) => create_index(ci, with)?,
        SqlStatement::Drop {
            object_type: ObjectType::Index,
            if_exists,
            names,
            ..
        } => {
            let [n] = names.as_slice() else {
                return Err("DROP INDEX drops one index at a time".into());
            };
            Ddl::DropIndex {
                name: unquote(&n.to_string()),
                if_exists: *if_exists,
            }
        }
        SqlStatement::Set(Set::SingleAssignment {
            variable, values, ..
        }) if variable.to_string().eq_ignore_ascii_case("csd.use_index") => {
            let v = values
                .first()
                .map(|v| unquote(&v.to_string()).to_ascii_lowercase())
                .unwrap_or_default();
            match v.as_str() {
                "true" | "on" | "1" => Ddl::SetUseIndex(true),
                "false" | "off" | "0" => Ddl::SetUseIndex(false),
                _ => return Err(format!("SET csd.use_index = {v}: use true or false")),
            }
        }
        SqlStatement::Insert(_) => return Ok(dml(DmlOp::Insert, Vec::new())),
        SqlStatement::Delete(_) => return Ok(dml(DmlOp::Delete, Vec::new())),
        SqlStatement::Update(u) => {
            let set = u
                .assignments
                .iter()
                .map(|a| (a.target.to_string(), a.value.to_string()))
                .collect();
            return Ok(dml(DmlOp::Update, set));
        }
        SqlStatement::Explain { .. } => return Ok(StatementKind::Explain),
        _ => return Ok(StatementKind::Query),
    };
    Ok(StatementKind::Csd(ddl))
}

fn dml(op: DmlOp, assignments: Vec<(String, String)>) -> StatementKind {
    StatementKind::Dml(Dml { op, assignments })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(sql: &str) -> StatementKind {
        Statement::parse(sql).expect("parses").kind
    }

    /// The csd statement `sql` is, if it is one.
    fn parse(sql: &str) -> Result<Option<Ddl>, String> {
        Ok(match Statement::parse(sql)?.kind {
            StatementKind::Csd(d) => Some(d),
            _ => None,
        })
    }

    #[test]
    fn explain_is_told_from_queries() {
        assert_eq!(kind("EXPLAIN ANALYZE SELECT 1"), StatementKind::Explain);
        assert_eq!(kind("explain select * from t"), StatementKind::Explain);
        assert_eq!(kind("SELECT 'explain'"), StatementKind::Query);
        assert_eq!(kind("EXPLAIN nonsense ((("), StatementKind::Query);
    }

    #[test]
    fn dml_is_told_apart_with_the_set_list_of_an_update() {
        let insert = Statement::parse("INSERT INTO t VALUES (1, 2)").expect("parses");
        assert!(insert.is_dml());
        assert_eq!(insert.sql(), "INSERT INTO t VALUES (1, 2)");
        assert_eq!(
            kind("delete from t where k = 1;"),
            dml(DmlOp::Delete, Vec::new())
        );
        assert_eq!(
            kind("UPDATE t SET v = v + 1, s = 'x' WHERE k < 3"),
            dml(
                DmlOp::Update,
                vec![("v".into(), "v + 1".into()), ("s".into(), "'x'".into())]
            )
        );
        assert!(!Statement::parse("SELECT 1").expect("parses").is_dml());
        assert!(
            !Statement::parse("CREATE INDEX i ON t (k)")
                .expect("parses")
                .is_dml()
        );
        assert_eq!(
            kind("INSERT INTO t VALUES (1); DELETE FROM t"),
            StatementKind::Query,
            "several statements are DataFusion's to refuse"
        );
        assert_eq!(kind("INSERT INTO"), StatementKind::Query);
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
    }
}

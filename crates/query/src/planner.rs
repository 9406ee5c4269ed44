//! SQL text → [`Plan`]: parsing with `sqlparser` (generic dialect), name resolution,
//! type checking, exact decimal normalization and constant folding.
//!
//! Anything outside the subset documented at the crate root is rejected here with a
//! [`QueryError`] naming the construct, so the evaluator never meets it.

use crate::build::{Normalized, normalize_const};

use csd_table::Schema;
use csd_table::date::{days_from_ymd, days_in_month, parse_date, ymd_from_days};
use csd_table::decimal::{parse_decimal, pow10};
use sqlparser::ast as sql;
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use crate::error::QueryError;
use crate::kernels::cmp_padded;
use crate::plan::{
    AggFunc, AggOutput, Aggregate, Aggregation, ArithOp, CmpOp, Const, Expr, ExprKind, Output,
    OutputColumn, Plan, SortKey, avg_scale,
};
use crate::types::{DataType, MAX_SCALE};

/// Most digits after the point a numeric literal may have (`10^38` fits an `i128`).
const MAX_LITERAL_SCALE: usize = 38;

/// Where table schemas come from: a device's catalog, a list of schemas, or one schema.
///
/// Table names are matched ASCII case-insensitively (SQL folds unquoted names).
pub trait Catalog {
    /// The schema of the table called `name`, if any.
    fn table(&self, name: &str) -> Option<&Schema>;
    /// The names of every table (for error messages).
    fn table_names(&self) -> Vec<String>;
}

impl Catalog for Schema {
    fn table(&self, name: &str) -> Option<&Schema> {
        self.name().eq_ignore_ascii_case(name).then_some(self)
    }
    fn table_names(&self) -> Vec<String> {
        vec![self.name().to_string()]
    }
}

impl Catalog for [Schema] {
    fn table(&self, name: &str) -> Option<&Schema> {
        self.iter().find(|s| s.name().eq_ignore_ascii_case(name))
    }
    fn table_names(&self) -> Vec<String> {
        self.iter().map(|s| s.name().to_string()).collect()
    }
}

impl Catalog for Vec<Schema> {
    fn table(&self, name: &str) -> Option<&Schema> {
        self.as_slice().table(name)
    }
    fn table_names(&self) -> Vec<String> {
        self.as_slice().table_names()
    }
}

impl<C: Catalog + ?Sized> Catalog for &C {
    fn table(&self, name: &str) -> Option<&Schema> {
        (**self).table(name)
    }
    fn table_names(&self) -> Vec<String> {
        (**self).table_names()
    }
}

/// Parses and plans one `SELECT` over a table of `catalog`.
///
/// ```
/// use csd_query::{plan, Output};
/// use csd_table::datagen::TpchTable;
///
/// let lineitem = TpchTable::LineItem.schema();
/// let p = plan("SELECT SUM(l_extendedprice * l_discount) FROM lineitem \
///               WHERE l_discount BETWEEN 0.05 AND 0.07", &lineitem).unwrap();
/// assert!(matches!(p.output, Output::Aggregate(_)));
/// let err = plan("SELECT l_foo FROM lineitem", &lineitem).unwrap_err();
/// assert!(err.to_string().starts_with("unknown column l_foo in table lineitem; columns: l_orderkey"));
/// ```
pub fn plan<C: Catalog + ?Sized>(sql_text: &str, catalog: &C) -> Result<Plan, QueryError> {
    let statements =
        Parser::parse_sql(&GenericDialect {}, sql_text).map_err(|e| QueryError::Syntax {
            message: e.to_string(),
        })?;
    let statement = match statements.as_slice() {
        [] => {
            return Err(QueryError::Syntax {
                message: "the text holds no statement; write SELECT ... FROM table".into(),
            });
        }
        [s] => s,
        _ => {
            return Err(QueryError::unsupported_hint(
                "more than one statement",
                "send one SELECT at a time",
            ));
        }
    };
    match statement {
        sql::Statement::Query(q) => plan_query(q, &catalog),
        other => Err(QueryError::unsupported_hint(
            format!("{} statement", leading_words(&other.to_string(), 1)),
            "only SELECT queries are",
        )),
    }
}

/// The first `n` words of some SQL text, upper-cased (names a statement or clause).
fn leading_words(text: &str, n: usize) -> String {
    text.split_whitespace()
        .take(n)
        .collect::<Vec<_>>()
        .join(" ")
        .to_uppercase()
}

/// Shortened SQL text of an AST node for messages.
fn snippet(node: &impl std::fmt::Display) -> String {
    let text = node.to_string();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() > 80 {
        let cut: String = text.chars().take(77).collect();
        format!("{cut}...")
    } else {
        text
    }
}

fn plan_query(query: &sql::Query, catalog: &dyn Catalog) -> Result<Plan, QueryError> {
    let sql::Query {
        with,
        body,
        order_by,
        limit_clause,
        fetch,
        locks,
        for_clause,
        settings,
        format_clause,
        pipe_operators,
    } = query;
    if with.is_some() {
        return Err(QueryError::unsupported("WITH (common table expressions)"));
    }
    if limit_clause.is_some() {
        return Err(QueryError::unsupported("LIMIT/OFFSET"));
    }
    if fetch.is_some() {
        return Err(QueryError::unsupported("FETCH FIRST"));
    }
    if !locks.is_empty() {
        return Err(QueryError::unsupported("FOR UPDATE/SHARE"));
    }
    if for_clause.is_some() {
        return Err(QueryError::unsupported("FOR XML/JSON"));
    }
    if settings.is_some() {
        return Err(QueryError::unsupported("SETTINGS"));
    }
    if format_clause.is_some() {
        return Err(QueryError::unsupported("FORMAT"));
    }
    if !pipe_operators.is_empty() {
        return Err(QueryError::unsupported("pipe operators (|>)"));
    }
    let select = match body.as_ref() {
        sql::SetExpr::Select(s) => s.as_ref(),
        sql::SetExpr::SetOperation { op, .. } => {
            return Err(QueryError::unsupported_hint(
                op.to_string().to_uppercase(),
                "queries read a single SELECT",
            ));
        }
        sql::SetExpr::Query(_) => {
            return Err(QueryError::unsupported("a parenthesized query"));
        }
        sql::SetExpr::Values(_) => return Err(QueryError::unsupported("VALUES")),
        sql::SetExpr::Table(_) => return Err(QueryError::unsupported("TABLE statement")),
        other => {
            return Err(QueryError::unsupported(format!(
                "{} in a query",
                leading_words(&other.to_string(), 1)
            )));
        }
    };
    plan_select(select, order_by.as_ref(), catalog)
}

/// One output item of the select list, before typing.
struct Item<'q> {
    expr: ItemExpr<'q>,
    alias: Option<String>,
}

enum ItemExpr<'q> {
    Sql(&'q sql::Expr),
    /// Column `i` from a `*`.
    Star(usize),
}

fn plan_select(
    select: &sql::Select,
    order_by: Option<&sql::OrderBy>,
    catalog: &dyn Catalog,
) -> Result<Plan, QueryError> {
    let sql::Select {
        select_token: _,
        optimizer_hints,
        distinct,
        select_modifiers,
        top,
        top_before_distinct: _,
        projection,
        exclude,
        into,
        from,
        lateral_views,
        prewhere,
        selection,
        connect_by,
        group_by,
        cluster_by,
        distribute_by,
        sort_by,
        having,
        named_window,
        qualify,
        window_before_qualify: _,
        value_table_mode,
        flavor: _,
    } = select;
    let checks: [(bool, &str); 16] = [
        (!optimizer_hints.is_empty(), "optimizer hints"),
        (distinct.is_some(), "DISTINCT"),
        (select_modifiers.is_some(), "SELECT modifiers"),
        (top.is_some(), "TOP"),
        (exclude.is_some(), "EXCLUDE"),
        (into.is_some(), "SELECT INTO"),
        (!lateral_views.is_empty(), "LATERAL VIEW"),
        (prewhere.is_some(), "PREWHERE"),
        (!connect_by.is_empty(), "CONNECT BY"),
        (!cluster_by.is_empty(), "CLUSTER BY"),
        (!distribute_by.is_empty(), "DISTRIBUTE BY"),
        (!sort_by.is_empty(), "SORT BY"),
        (having.is_some(), "HAVING"),
        (!named_window.is_empty(), "WINDOW"),
        (qualify.is_some(), "QUALIFY"),
        (value_table_mode.is_some(), "SELECT AS VALUE/STRUCT"),
    ];
    if let Some((_, what)) = checks.iter().find(|(bad, _)| *bad) {
        return Err(QueryError::unsupported(*what));
    }

    // FROM: exactly one plain table.
    let (schema, alias, table_name) = match from.as_slice() {
        [] => {
            return Err(QueryError::unsupported_hint(
                "SELECT without FROM",
                "name the table, e.g. SELECT ... FROM lineitem",
            ));
        }
        [one] => {
            if !one.joins.is_empty() {
                return Err(QueryError::unsupported_hint(
                    "JOIN",
                    "queries read a single table",
                ));
            }
            resolve_table(&one.relation, catalog)?
        }
        _ => {
            return Err(QueryError::unsupported_hint(
                "JOIN",
                "queries read a single table (FROM lists one table)",
            ));
        }
    };
    let binder = Binder { schema, alias };

    // WHERE
    let filter = match selection {
        None => None,
        Some(w) => {
            let e = binder.bind(w, "WHERE")?;
            if e.ty != DataType::Bool {
                return Err(QueryError::WrongType {
                    context: "WHERE".into(),
                    expected: "a condition",
                    expr: snippet(w),
                    found: e.ty,
                });
            }
            match e.kind {
                ExprKind::Const(Const::Bool(true)) => None,
                _ => Some(e),
            }
        }
    };

    // GROUP BY
    let mut group_columns: Vec<usize> = Vec::new();
    for g in group_by_of(group_by)? {
        let col = binder.group_column(g)?;
        if !group_columns.contains(&col) {
            group_columns.push(col);
        }
    }
    let group_by = group_columns;

    // Select list.
    let mut items = Vec::new();
    for item in projection {
        match item {
            sql::SelectItem::UnnamedExpr(e) => items.push(Item {
                expr: ItemExpr::Sql(e),
                alias: None,
            }),
            sql::SelectItem::ExprWithAlias { expr, alias } => items.push(Item {
                expr: ItemExpr::Sql(expr),
                alias: Some(alias.value.clone()),
            }),
            sql::SelectItem::ExprWithAliases { .. } => {
                return Err(QueryError::unsupported(
                    "several aliases for one select item",
                ));
            }
            sql::SelectItem::Wildcard(opts) => {
                check_wildcard(opts)?;
                items.extend((0..schema.len()).map(|i| Item {
                    expr: ItemExpr::Star(i),
                    alias: None,
                }));
            }
            sql::SelectItem::QualifiedWildcard(kind, opts) => {
                check_wildcard(opts)?;
                match kind {
                    sql::SelectItemQualifiedWildcardKind::ObjectName(name)
                        if binder.is_table_name(name) =>
                    {
                        items.extend((0..schema.len()).map(|i| Item {
                            expr: ItemExpr::Star(i),
                            alias: None,
                        }));
                    }
                    other => {
                        return Err(QueryError::Grouping(format!(
                            "{other}.* does not name the query's table {}",
                            schema.name()
                        )));
                    }
                }
            }
        }
    }

    let aggregate_mode = !group_by.is_empty()
        || items
            .iter()
            .any(|i| matches!(i.expr, ItemExpr::Sql(e) if contains_aggregate(e)));

    let mut columns = Vec::with_capacity(items.len());
    // Per output: the SQL text (for ORDER BY matching) and the plain table column it
    // shows, if any.
    let mut texts: Vec<Option<String>> = Vec::with_capacity(items.len());
    let mut plain: Vec<Option<usize>> = Vec::with_capacity(items.len());
    let output = if aggregate_mode {
        let mut aggregates: Vec<Aggregate> = Vec::new();
        let mut outputs = Vec::new();
        for item in &items {
            let (out, name, ty, text, col) = match item.expr {
                ItemExpr::Star(i) => {
                    let c = &schema.columns()[i];
                    return Err(QueryError::Grouping(format!(
                        "column {} must appear in GROUP BY or be used in an aggregate \
                         (SELECT * cannot be combined with aggregates or GROUP BY)",
                        c.name
                    )));
                }
                ItemExpr::Sql(e) => {
                    let text = e.to_string();
                    if let Some(agg) = binder.aggregate_call(e)? {
                        let ty = agg.ty;
                        let k = match aggregates.iter().position(|a| *a == agg) {
                            Some(k) => k,
                            None => {
                                aggregates.push(agg);
                                aggregates.len() - 1
                            }
                        };
                        (AggOutput::Agg(k), text.clone(), ty, text, None)
                    } else if contains_aggregate(e) {
                        return Err(QueryError::unsupported_hint(
                            format!("an expression over aggregates ({})", snippet(e)),
                            "select the aggregates themselves and combine them on the client",
                        ));
                    } else {
                        let bound = binder.bind(e, "the select list")?;
                        let col = match &bound.kind {
                            ExprKind::Column { index, .. } => Some(*index),
                            _ => None,
                        };
                        match col.and_then(|c| group_by.iter().position(|&g| g == c)) {
                            Some(g) => {
                                let c = group_by[g];
                                let name = schema.columns()[c].name.clone();
                                (AggOutput::Group(g), name, bound.ty, text, Some(c))
                            }
                            None => {
                                return Err(QueryError::Grouping(format!(
                                    "{} must appear in GROUP BY or be used in an aggregate \
                                     function",
                                    snippet(e)
                                )));
                            }
                        }
                    }
                }
            };
            outputs.push(out);
            columns.push(OutputColumn {
                name: item.alias.clone().unwrap_or(name),
                ty,
            });
            texts.push(Some(text));
            plain.push(col);
        }
        Output::Aggregate(Aggregation {
            group_by,
            aggregates,
            outputs,
        })
    } else {
        let mut exprs = Vec::with_capacity(items.len());
        for item in &items {
            let (bound, text) = match item.expr {
                ItemExpr::Star(i) => (binder.column_expr(i), None),
                ItemExpr::Sql(e) => (binder.bind(e, "the select list")?, Some(e.to_string())),
            };
            if bound.ty == DataType::Bool {
                return Err(QueryError::unsupported_hint(
                    format!(
                        "a condition in the select list ({})",
                        text.as_deref().unwrap_or("?")
                    ),
                    "conditions belong in WHERE",
                ));
            }
            let col = match &bound.kind {
                ExprKind::Column { index, .. } => Some(*index),
                _ => None,
            };
            let default_name = match col {
                Some(c) => schema.columns()[c].name.clone(),
                None => text.clone().unwrap_or_default(),
            };
            columns.push(OutputColumn {
                name: item.alias.clone().unwrap_or(default_name),
                ty: bound.ty,
            });
            texts.push(text);
            plain.push(col);
            exprs.push(bound);
        }
        Output::Project(exprs)
    };

    let order_by = match order_by {
        None => Vec::new(),
        Some(ob) => resolve_order_by(ob, &binder, &columns, &texts, &plain)?,
    };

    // numeric literals too wide for an i64 may only have been compared with
    if let Some(f) = &filter {
        reject_wide(f)?;
    }
    match &output {
        Output::Project(exprs) => exprs.iter().try_for_each(reject_wide)?,
        Output::Aggregate(a) => a
            .aggregates
            .iter()
            .filter_map(|x| x.arg.as_ref())
            .try_for_each(reject_wide)?,
    }
    Ok(Plan {
        table: table_name,
        schema: schema.clone(),
        filter,
        output,
        order_by,
        columns,
    })
}

fn group_by_of(g: &sql::GroupByExpr) -> Result<&[sql::Expr], QueryError> {
    match g {
        sql::GroupByExpr::All(_) => Err(QueryError::unsupported("GROUP BY ALL")),
        sql::GroupByExpr::Expressions(exprs, modifiers) => {
            if modifiers.is_empty() {
                Ok(exprs)
            } else {
                Err(QueryError::unsupported(
                    "GROUP BY modifiers (ROLLUP, CUBE, TOTALS)",
                ))
            }
        }
    }
}

fn check_wildcard(opts: &sql::WildcardAdditionalOptions) -> Result<(), QueryError> {
    if opts.opt_ilike.is_some()
        || opts.opt_exclude.is_some()
        || opts.opt_except.is_some()
        || opts.opt_replace.is_some()
        || opts.opt_rename.is_some()
        || opts.opt_alias.is_some()
    {
        return Err(QueryError::unsupported(
            "* with ILIKE/EXCLUDE/EXCEPT/REPLACE/RENAME",
        ));
    }
    Ok(())
}

fn resolve_table<'c>(
    relation: &sql::TableFactor,
    catalog: &'c dyn Catalog,
) -> Result<(&'c Schema, Option<String>, String), QueryError> {
    let sql::TableFactor::Table {
        name,
        alias,
        args,
        with_hints,
        version,
        with_ordinality,
        partitions,
        json_path,
        sample,
        index_hints,
    } = relation
    else {
        return Err(QueryError::unsupported_hint(
            format!("{} in FROM", describe_factor(relation)),
            "FROM names one table",
        ));
    };
    if args.is_some() {
        return Err(QueryError::unsupported("a table function in FROM"));
    }
    if !with_hints.is_empty() || !index_hints.is_empty() {
        return Err(QueryError::unsupported("table hints"));
    }
    if version.is_some() {
        return Err(QueryError::unsupported(
            "time travel (FOR SYSTEM_TIME / AT)",
        ));
    }
    if *with_ordinality {
        return Err(QueryError::unsupported("WITH ORDINALITY"));
    }
    if !partitions.is_empty() {
        return Err(QueryError::unsupported("PARTITION selection"));
    }
    if json_path.is_some() {
        return Err(QueryError::unsupported("JSON paths in FROM"));
    }
    if sample.is_some() {
        return Err(QueryError::unsupported("TABLESAMPLE"));
    }
    let table_name = match name.0.as_slice() {
        [sql::ObjectNamePart::Identifier(id)] => id.value.clone(),
        _ => {
            return Err(QueryError::unsupported_hint(
                format!("the qualified table name {name}"),
                "name the table without a schema",
            ));
        }
    };
    let schema = catalog
        .table(&table_name)
        .ok_or_else(|| QueryError::UnknownTable {
            name: table_name.clone(),
            available: {
                let names = catalog.table_names();
                if names.is_empty() {
                    "(none)".to_string()
                } else {
                    names.join(", ")
                }
            },
        })?;
    let alias = match alias {
        None => None,
        Some(a) => {
            if !a.columns.is_empty() {
                return Err(QueryError::unsupported("column aliases on the table"));
            }
            Some(a.name.value.clone())
        }
    };
    // The name as the catalog spells it (the SQL may differ in case).
    let spelled = catalog
        .table_names()
        .into_iter()
        .find(|n| n.eq_ignore_ascii_case(&table_name))
        .unwrap_or(table_name);
    Ok((schema, alias, spelled))
}

fn describe_factor(f: &sql::TableFactor) -> &'static str {
    match f {
        sql::TableFactor::Derived { .. } => "a subquery",
        sql::TableFactor::NestedJoin { .. } => "a JOIN",
        _ => "a table expression",
    }
}

fn resolve_order_by(
    ob: &sql::OrderBy,
    binder: &Binder<'_>,
    columns: &[OutputColumn],
    texts: &[Option<String>],
    plain: &[Option<usize>],
) -> Result<Vec<SortKey>, QueryError> {
    if ob.interpolate.is_some() {
        return Err(QueryError::unsupported("ORDER BY ... INTERPOLATE"));
    }
    let exprs = match &ob.kind {
        sql::OrderByKind::All(_) => return Err(QueryError::unsupported("ORDER BY ALL")),
        sql::OrderByKind::Expressions(e) => e,
    };
    let mut keys = Vec::with_capacity(exprs.len());
    for o in exprs {
        let item = snippet(&o.expr);
        let err = |reason: String| QueryError::OrderBy {
            item: item.clone(),
            reason,
        };
        if o.with_fill.is_some() {
            return Err(QueryError::unsupported("ORDER BY ... WITH FILL"));
        }
        if o.options.nulls_first.is_some() {
            return Err(QueryError::unsupported("NULLS FIRST/LAST"));
        }
        let descending = match &o.options.sort {
            None | Some(sql::OrderBySort::Asc) => false,
            Some(sql::OrderBySort::Desc) => true,
            Some(sql::OrderBySort::Using(_)) => {
                return Err(QueryError::unsupported("ORDER BY ... USING"));
            }
        };
        let output = match &o.expr {
            sql::Expr::Value(sql::ValueWithSpan {
                value: sql::Value::Number(n, _),
                ..
            }) => {
                let k: usize = n.parse().map_err(|_| {
                    err(format!(
                        "a position must be a whole number 1..={}",
                        columns.len()
                    ))
                })?;
                if k == 0 || k > columns.len() {
                    return Err(err(format!(
                        "position {k} is out of range: the select list has {} columns",
                        columns.len()
                    )));
                }
                k - 1
            }
            e => {
                let by_name = match e {
                    sql::Expr::Identifier(id) => columns
                        .iter()
                        .position(|c| c.name.eq_ignore_ascii_case(&id.value)),
                    _ => None,
                };
                let by_column = || {
                    let col = binder.column_of(e)?;
                    plain.iter().position(|p| *p == Some(col))
                };
                let text = e.to_string();
                let by_text = || texts.iter().position(|t| t.as_deref() == Some(&text));
                match by_name.or_else(by_column).or_else(by_text) {
                    Some(k) => k,
                    None => {
                        return Err(err(
                            "only columns of the select list (by name, alias or position) \
                             can be sorted on; add it to the select list"
                                .into(),
                        ));
                    }
                }
            }
        };
        keys.push(SortKey { output, descending });
    }
    Ok(keys)
}

/// True if `e` calls an aggregate function anywhere.
fn contains_aggregate(e: &sql::Expr) -> bool {
    use sql::Expr as E;
    match e {
        E::Function(f) => {
            aggregate_func(f).is_some()
                || match &f.args {
                    sql::FunctionArguments::List(l) => l.args.iter().any(|a| match a {
                        sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(x)) => {
                            contains_aggregate(x)
                        }
                        _ => false,
                    }),
                    _ => false,
                }
        }
        E::BinaryOp { left, right, .. } => contains_aggregate(left) || contains_aggregate(right),
        E::UnaryOp { expr, .. } | E::Nested(expr) => contains_aggregate(expr),
        E::Between {
            expr, low, high, ..
        } => contains_aggregate(expr) || contains_aggregate(low) || contains_aggregate(high),
        E::InList { expr, list, .. } => {
            contains_aggregate(expr) || list.iter().any(contains_aggregate)
        }
        E::Like { expr, pattern, .. } => contains_aggregate(expr) || contains_aggregate(pattern),
        _ => false,
    }
}

fn func_name(f: &sql::Function) -> String {
    match f.name.0.as_slice() {
        [sql::ObjectNamePart::Identifier(id)] => id.value.to_uppercase(),
        _ => f.name.to_string().to_uppercase(),
    }
}

fn aggregate_func(f: &sql::Function) -> Option<AggFunc> {
    match func_name(f).as_str() {
        "COUNT" => Some(AggFunc::Count),
        "SUM" => Some(AggFunc::Sum),
        "AVG" => Some(AggFunc::Avg),
        "MIN" => Some(AggFunc::Min),
        "MAX" => Some(AggFunc::Max),
        _ => None,
    }
}

/// Names an unsupported expression for an error message.
fn describe_expr(e: &sql::Expr) -> String {
    use sql::Expr as E;
    let s = match e {
        E::Case { .. } => "CASE",
        E::Cast { .. } => "CAST",
        E::Convert { .. } => "CONVERT",
        E::Extract { .. } => "EXTRACT",
        E::Substring { .. } => "SUBSTRING",
        E::Trim { .. } => "TRIM",
        E::Position { .. } => "POSITION",
        E::Overlay { .. } => "OVERLAY",
        E::Ceil { .. } => "CEIL",
        E::Floor { .. } => "FLOOR",
        E::Collate { .. } => "COLLATE",
        E::AtTimeZone { .. } => "AT TIME ZONE",
        E::Subquery(_) | E::Exists { .. } | E::InSubquery { .. } => "a subquery",
        E::IsNull(_) | E::IsNotNull(_) => "IS [NOT] NULL (columns are never NULL)",
        E::IsTrue(_) | E::IsNotTrue(_) | E::IsFalse(_) | E::IsNotFalse(_) => "IS [NOT] TRUE/FALSE",
        E::IsUnknown(_) | E::IsNotUnknown(_) => "IS [NOT] UNKNOWN",
        E::IsDistinctFrom(..) | E::IsNotDistinctFrom(..) => "IS [NOT] DISTINCT FROM",
        E::ILike { .. } => "ILIKE",
        E::SimilarTo { .. } => "SIMILAR TO",
        E::RLike { .. } => "RLIKE/REGEXP",
        E::AnyOp { .. } => "ANY",
        E::AllOp { .. } => "ALL",
        E::InUnnest { .. } => "IN UNNEST",
        E::Tuple(_) => "a tuple (row value)",
        E::Array(_) => "an array",
        E::Map(_) | E::Dictionary(_) | E::Struct { .. } => "a composite value",
        E::Wildcard(_) | E::QualifiedWildcard(..) => "* inside an expression",
        E::Lambda(_) => "a lambda",
        E::MatchAgainst { .. } => "MATCH AGAINST",
        E::GroupingSets(_) | E::Cube(_) | E::Rollup(_) => "GROUPING SETS/CUBE/ROLLUP",
        _ => return format!("the expression {}", snippet(e)),
    };
    s.to_string()
}

/// Resolves names and types against one table.
struct Binder<'s> {
    schema: &'s Schema,
    alias: Option<String>,
}

impl<'s> Binder<'s> {
    fn is_table_name(&self, name: &sql::ObjectName) -> bool {
        match name.0.as_slice() {
            [sql::ObjectNamePart::Identifier(id)] => {
                id.value.eq_ignore_ascii_case(self.schema.name())
                    || self
                        .alias
                        .as_deref()
                        .is_some_and(|a| a.eq_ignore_ascii_case(&id.value))
            }
            _ => false,
        }
    }

    fn column_expr(&self, index: usize) -> Expr {
        let c = &self.schema.columns()[index];
        Expr::new(
            ExprKind::Column {
                index,
                name: c.name.clone(),
            },
            DataType::of_column(c.ty),
        )
    }

    fn unknown_column(&self, name: &str) -> QueryError {
        QueryError::UnknownColumn {
            name: name.to_string(),
            table: self.schema.name().to_string(),
            available: self
                .schema
                .columns()
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    fn column_index(&self, name: &str) -> Result<usize, QueryError> {
        self.schema
            .columns()
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| self.unknown_column(name))
    }

    /// The column an identifier (plain or `table.column`) names.
    fn resolve_ident(&self, e: &sql::Expr) -> Option<Result<usize, QueryError>> {
        match e {
            sql::Expr::Identifier(id) => Some(self.column_index(&id.value)),
            sql::Expr::CompoundIdentifier(parts) => Some(match parts.as_slice() {
                [t, c] => {
                    let qualifier_ok = t.value.eq_ignore_ascii_case(self.schema.name())
                        || self
                            .alias
                            .as_deref()
                            .is_some_and(|a| a.eq_ignore_ascii_case(&t.value));
                    if qualifier_ok {
                        self.column_index(&c.value)
                    } else {
                        Err(QueryError::UnknownColumn {
                            name: format!("{}.{}", t.value, c.value),
                            table: self.schema.name().to_string(),
                            available: format!(
                                "qualify columns with {} only",
                                self.alias.as_deref().unwrap_or(self.schema.name())
                            ),
                        })
                    }
                }
                _ => Err(self.unknown_column(&snippet(e))),
            }),
            _ => None,
        }
    }

    /// The column `e` names, if it is a (possibly qualified, parenthesized) column.
    fn column_of(&self, e: &sql::Expr) -> Option<usize> {
        match e {
            sql::Expr::Nested(inner) => self.column_of(inner),
            _ => self.resolve_ident(e)?.ok(),
        }
    }

    fn group_column(&self, e: &sql::Expr) -> Result<usize, QueryError> {
        match e {
            sql::Expr::Nested(inner) => self.group_column(inner),
            sql::Expr::Identifier(_) | sql::Expr::CompoundIdentifier(_) => self
                .resolve_ident(e)
                .unwrap_or_else(|| Err(self.unknown_column(&snippet(e)))),
            _ => Err(QueryError::unsupported_hint(
                format!("GROUP BY on {}", describe_expr(e)),
                "group by column names",
            )),
        }
    }

    /// If `e` is an aggregate call, its typed [`Aggregate`].
    fn aggregate_call(&self, e: &sql::Expr) -> Result<Option<Aggregate>, QueryError> {
        let f = match e {
            sql::Expr::Nested(inner) => return self.aggregate_call(inner),
            sql::Expr::Function(f) => f,
            _ => return Ok(None),
        };
        let Some(mut func) = aggregate_func(f) else {
            return Ok(None);
        };
        let name = func.name();
        if f.over.is_some() {
            return Err(QueryError::unsupported("window functions (OVER)"));
        }
        if f.filter.is_some() {
            return Err(QueryError::unsupported("FILTER (WHERE ...) on aggregates"));
        }
        if !f.within_group.is_empty() {
            return Err(QueryError::unsupported("WITHIN GROUP"));
        }
        if f.null_treatment.is_some() {
            return Err(QueryError::unsupported("IGNORE/RESPECT NULLS"));
        }
        if f.uses_odbc_syntax || !matches!(f.parameters, sql::FunctionArguments::None) {
            return Err(QueryError::unsupported(format!("{name} with parameters")));
        }
        let list = match &f.args {
            sql::FunctionArguments::List(l) => l,
            _ => {
                return Err(QueryError::Grouping(format!(
                    "{name} takes one argument, e.g. {name}(l_quantity)"
                )));
            }
        };
        if matches!(
            list.duplicate_treatment,
            Some(sql::DuplicateTreatment::Distinct)
        ) {
            return Err(QueryError::unsupported(format!("{name}(DISTINCT ...)")));
        }
        if !list.clauses.is_empty() {
            return Err(QueryError::unsupported(format!(
                "clauses inside {name}(...)"
            )));
        }
        let arg = match list.args.as_slice() {
            [sql::FunctionArg::Unnamed(a)] => a,
            _ => {
                return Err(QueryError::Grouping(format!(
                    "{name} takes exactly one argument"
                )));
            }
        };
        let arg = match arg {
            sql::FunctionArgExpr::Wildcard if func == AggFunc::Count => {
                func = AggFunc::CountStar;
                None
            }
            sql::FunctionArgExpr::Expr(x) => {
                if contains_aggregate(x) {
                    return Err(QueryError::Grouping(format!(
                        "aggregate functions cannot be nested: {}",
                        snippet(e)
                    )));
                }
                Some(self.bind(x, "an aggregate's argument")?)
            }
            _ => {
                return Err(QueryError::unsupported(format!(
                    "{name}({}) — only COUNT takes *",
                    snippet(e)
                )));
            }
        };
        let ty = match (&arg, func) {
            (None, _) => DataType::Int,
            (Some(a), AggFunc::Count | AggFunc::CountStar) => {
                if a.ty == DataType::Bool {
                    return Err(self.wrong_type(name, "a value", e, a.ty));
                }
                DataType::Int
            }
            (Some(a), AggFunc::Sum) => match a.ty {
                DataType::Int | DataType::Decimal { .. } => a.ty,
                t => return Err(self.wrong_type(name, "a number (INT or DECIMAL)", e, t)),
            },
            (Some(a), AggFunc::Avg) => match a.ty.scale() {
                Some(s) => DataType::Decimal {
                    scale: avg_scale(s),
                },
                None => {
                    return Err(self.wrong_type(name, "a number (INT or DECIMAL)", e, a.ty));
                }
            },
            (Some(a), AggFunc::Min | AggFunc::Max) => {
                if a.ty == DataType::Bool {
                    return Err(self.wrong_type(name, "a value", e, a.ty));
                }
                a.ty
            }
        };
        Ok(Some(Aggregate { func, arg, ty }))
    }

    fn wrong_type(
        &self,
        context: &str,
        expected: &'static str,
        e: &sql::Expr,
        found: DataType,
    ) -> QueryError {
        QueryError::WrongType {
            context: context.to_string(),
            expected,
            expr: snippet(e),
            found,
        }
    }

    /// Binds a scalar expression; `place` names where it stands (for the error when an
    /// aggregate appears there).
    fn bind(&self, e: &sql::Expr, place: &str) -> Result<Expr, QueryError> {
        use sql::Expr as E;
        match e {
            E::Identifier(_) | E::CompoundIdentifier(_) => {
                let index = self
                    .resolve_ident(e)
                    .unwrap_or_else(|| Err(self.unknown_column(&snippet(e))))?;
                Ok(self.column_expr(index))
            }
            E::Nested(inner) => self.bind(inner, place),
            E::Value(v) => literal(&v.value),
            E::TypedString(ts) => typed_literal(ts),
            E::UnaryOp { op, expr } => {
                let x = self.bind(expr, place)?;
                match op {
                    sql::UnaryOperator::Not => {
                        if x.ty != DataType::Bool {
                            return Err(self.wrong_type("NOT", "a condition", expr, x.ty));
                        }
                        Ok(negate(x))
                    }
                    sql::UnaryOperator::Minus => {
                        if let Some(Const::Wide(v)) = x.as_const() {
                            return Ok(Expr::constant(Const::Wide(-v), x.ty));
                        }
                        if !x.ty.is_number() {
                            return Err(self.wrong_type("unary -", "a number", expr, x.ty));
                        }
                        fold(Expr::new(ExprKind::Neg(Box::new(x.clone())), x.ty), e)
                    }
                    sql::UnaryOperator::Plus => {
                        if !x.ty.is_number() {
                            return Err(self.wrong_type("unary +", "a number", expr, x.ty));
                        }
                        Ok(x)
                    }
                    other => Err(QueryError::unsupported(format!("operator {other}"))),
                }
            }
            E::BinaryOp { left, op, right } => self.bind_binary(e, left, op, right, place),
            E::Between {
                expr,
                negated,
                low,
                high,
            } => {
                let x = self.bind(expr, place)?;
                let lo = self.bind(low, place)?;
                let hi = self.bind(high, place)?;
                if *negated {
                    Ok(or(vec![
                        compare(CmpOp::Lt, x.clone(), lo, e)?,
                        compare(CmpOp::Gt, x, hi, e)?,
                    ]))
                } else {
                    Ok(and(vec![
                        compare(CmpOp::Ge, x.clone(), lo, e)?,
                        compare(CmpOp::Le, x, hi, e)?,
                    ]))
                }
            }
            E::InList {
                expr,
                list,
                negated,
            } => {
                let x = self.bind(expr, place)?;
                let mut items = Vec::with_capacity(list.len());
                for item in list {
                    let c = self.bind(item, place)?;
                    if c.as_const().is_none() {
                        return Err(QueryError::unsupported_hint(
                            format!("the non-constant IN list element {}", snippet(item)),
                            "IN lists hold literals",
                        ));
                    }
                    items.push(c);
                }
                in_list(x, items, *negated, e)
            }
            E::Like {
                negated,
                any,
                expr,
                pattern,
                escape_char,
            } => {
                if *any {
                    return Err(QueryError::unsupported("LIKE ANY"));
                }
                if escape_char.is_some() {
                    return Err(QueryError::unsupported("LIKE ... ESCAPE"));
                }
                let x = self.bind(expr, place)?;
                if !matches!(x.ty, DataType::Char(_)) {
                    return Err(self.wrong_type("LIKE", "a string (CHAR)", expr, x.ty));
                }
                let p = self.bind(pattern, place)?;
                let pat = match p.as_const() {
                    Some(Const::Char(b)) => b.clone(),
                    _ => {
                        return Err(QueryError::unsupported_hint(
                            format!("LIKE with the pattern {}", snippet(pattern)),
                            "the pattern must be a string literal such as 'PROMO%'",
                        ));
                    }
                };
                let prefix = match pat.split_last() {
                    Some((b'%', prefix)) if !prefix.iter().any(|&c| c == b'%' || c == b'_') => {
                        prefix.to_vec()
                    }
                    _ => {
                        return Err(QueryError::LikePattern {
                            pattern: String::from_utf8_lossy(&pat).into_owned(),
                        });
                    }
                };
                like(x, prefix, *negated)
            }
            E::Function(f) => {
                if aggregate_func(f).is_some() {
                    Err(QueryError::Grouping(format!(
                        "aggregate {} is not allowed in {place}",
                        snippet(e)
                    )))
                } else {
                    Err(QueryError::unsupported(format!(
                        "function {}",
                        func_name(f)
                    )))
                }
            }
            E::Interval(_) => Err(QueryError::unsupported_hint(
                format!("{} here", snippet(e)),
                "INTERVAL may only be added to or subtracted from a DATE",
            )),
            other => Err(QueryError::unsupported(describe_expr(other))),
        }
    }

    fn bind_binary(
        &self,
        whole: &sql::Expr,
        left: &sql::Expr,
        op: &sql::BinaryOperator,
        right: &sql::Expr,
        place: &str,
    ) -> Result<Expr, QueryError> {
        use sql::BinaryOperator as B;
        let cmp = match op {
            B::Eq => Some(CmpOp::Eq),
            B::NotEq => Some(CmpOp::Ne),
            B::Lt => Some(CmpOp::Lt),
            B::LtEq => Some(CmpOp::Le),
            B::Gt => Some(CmpOp::Gt),
            B::GtEq => Some(CmpOp::Ge),
            _ => None,
        };
        if let Some(c) = cmp {
            let l = self.bind(left, place)?;
            let r = self.bind(right, place)?;
            return compare(c, l, r, whole);
        }
        match op {
            B::And | B::Or => {
                let l = self.bind(left, place)?;
                let r = self.bind(right, place)?;
                for (x, src) in [(&l, left), (&r, right)] {
                    if x.ty != DataType::Bool {
                        let ctx = if matches!(op, B::And) { "AND" } else { "OR" };
                        return Err(self.wrong_type(ctx, "conditions", src, x.ty));
                    }
                }
                Ok(if matches!(op, B::And) {
                    and(vec![l, r])
                } else {
                    or(vec![l, r])
                })
            }
            B::Plus | B::Minus => {
                let sub = matches!(op, B::Minus);
                // DATE ± INTERVAL
                if let sql::Expr::Interval(iv) = right {
                    let date = self.bind(left, place)?;
                    return add_interval(date, interval(iv)?, sub, whole);
                }
                if let sql::Expr::Interval(iv) = left
                    && !sub
                {
                    let date = self.bind(right, place)?;
                    return add_interval(date, interval(iv)?, false, whole);
                }
                let l = self.bind(left, place)?;
                let r = self.bind(right, place)?;
                arith(if sub { Ar::Sub } else { Ar::Add }, l, r, whole)
            }
            B::Multiply => {
                let l = self.bind(left, place)?;
                let r = self.bind(right, place)?;
                arith(Ar::Mul, l, r, whole)
            }
            B::Divide => {
                let l = self.bind(left, place)?;
                let r = self.bind(right, place)?;
                arith(Ar::Div, l, r, whole)
            }
            other => Err(QueryError::unsupported(format!("operator {other}"))),
        }
    }
}

fn literal(v: &sql::Value) -> Result<Expr, QueryError> {
    match v {
        sql::Value::Number(text, _) => number(text),
        sql::Value::SingleQuotedString(s) => {
            let len = u16::try_from(s.len()).map_err(|_| QueryError::Literal {
                text: format!("'{}...'", s.chars().take(20).collect::<String>()),
                reason: format!("strings are at most {} bytes", u16::MAX),
            })?;
            Ok(Expr::constant(
                Const::Char(s.as_bytes().to_vec()),
                DataType::Char(len),
            ))
        }
        sql::Value::Boolean(b) => Ok(Expr::boolean(*b)),
        sql::Value::Null => Err(QueryError::unsupported_hint(
            "NULL",
            "table columns are never NULL",
        )),
        sql::Value::Placeholder(p) => Err(QueryError::unsupported_hint(
            format!("the query parameter {p}"),
            "substitute a literal value",
        )),
        other => Err(QueryError::unsupported(format!("the literal {other}"))),
    }
}

/// An integer (`24`) or an exact decimal (`0.06` is 6 units at scale 2). Literals
/// beyond an `i64` at their scale, or with 19..=38 fractional digits, become
/// [`Const::Wide`] (comparison operands only).
fn number(text: &str) -> Result<Expr, QueryError> {
    let bad = |reason: &str| QueryError::Literal {
        text: text.to_string(),
        reason: reason.to_string(),
    };
    if text.contains(['e', 'E']) {
        return Err(bad("exponent notation is not supported; write the digits"));
    }
    let (int_part, frac_part) = text.split_once('.').unwrap_or((text, ""));
    if (int_part.is_empty() && frac_part.is_empty())
        || !int_part
            .bytes()
            .chain(frac_part.bytes())
            .all(|c| c.is_ascii_digit())
    {
        return Err(bad("not a number"));
    }
    if frac_part.len() > MAX_LITERAL_SCALE {
        return Err(bad("more than 38 digits after the point"));
    }
    // at most 38, checked above
    let scale = frac_part.len() as u8;
    let ty = if text.contains('.') {
        DataType::Decimal { scale }
    } else {
        DataType::Int
    };
    if scale <= MAX_SCALE
        && let Ok(units) = parse_decimal(text, scale)
    {
        return Ok(Expr::constant(Const::Int(units), ty));
    }
    let mut units: i128 = 0;
    for c in int_part.bytes().chain(frac_part.bytes()) {
        units = units
            .checked_mul(10)
            .and_then(|u| u.checked_add(i128::from(c - b'0')))
            .ok_or_else(|| bad("more than 38 significant digits"))?;
    }
    Ok(Expr::constant(Const::Wide(units), ty))
}

/// The value of a numeric constant (`Int` or `Wide`).
fn num_const(e: &Expr) -> Option<i128> {
    match e.as_const()? {
        Const::Int(v) => Some(i128::from(*v)),
        Const::Wide(v) => Some(*v),
        _ => None,
    }
}

/// Rejects a [`Const::Wide`] left where a value must be computed with.
fn reject_wide(e: &Expr) -> Result<(), QueryError> {
    let mut err = Ok(());
    visit(e, &mut |x| {
        if let ExprKind::Const(Const::Wide(_)) = x.kind
            && err.is_ok()
        {
            err = Err(QueryError::Literal {
                text: x.to_string(),
                reason: "a number this large or this precise can only be compared with, not \
                         computed with or returned (at most 18 digits after the point and 19 \
                         significant digits)"
                    .into(),
            });
        }
    });
    err
}

fn visit(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    match &e.kind {
        ExprKind::Column { .. } | ExprKind::Const(_) => {}
        ExprKind::Neg(x)
        | ExprKind::Not(x)
        | ExprKind::Rescale { expr: x, .. }
        | ExprKind::InList { expr: x, .. }
        | ExprKind::Like { expr: x, .. } => visit(x, f),
        ExprKind::Arith { left, right, .. } | ExprKind::Cmp { left, right, .. } => {
            visit(left, f);
            visit(right, f);
        }
        ExprKind::And(es) | ExprKind::Or(es) => es.iter().for_each(|x| visit(x, f)),
    }
}

fn typed_literal(ts: &sql::TypedString) -> Result<Expr, QueryError> {
    match ts.data_type {
        sql::DataType::Date => {
            let text = match &ts.value.value {
                sql::Value::SingleQuotedString(s) => s,
                other => {
                    return Err(QueryError::Literal {
                        text: format!("DATE {other}"),
                        reason: "write DATE 'YYYY-MM-DD'".into(),
                    });
                }
            };
            let days = parse_date(text).map_err(|e| QueryError::Literal {
                text: format!("DATE '{text}'"),
                reason: e.to_string(),
            })?;
            Ok(Expr::constant(Const::Int(i64::from(days)), DataType::Date))
        }
        ref other => Err(QueryError::unsupported_hint(
            format!("{other} literals"),
            "only DATE 'YYYY-MM-DD' typed literals are",
        )),
    }
}

/// An `INTERVAL 'n' unit` in days or months.
enum Interval {
    Days(i64),
    Months(i64),
}

fn interval(iv: &sql::Interval) -> Result<Interval, QueryError> {
    let text = snippet(iv);
    if iv.last_field.is_some() || iv.fractional_seconds_precision.is_some() {
        return Err(QueryError::unsupported(format!("the interval {text}")));
    }
    let raw = match iv.value.as_ref() {
        sql::Expr::Value(v) => match &v.value {
            sql::Value::SingleQuotedString(s) | sql::Value::Number(s, _) => s.trim().to_string(),
            _ => {
                return Err(QueryError::Literal {
                    text,
                    reason: "write INTERVAL 'n' DAY (or WEEK, MONTH, YEAR)".into(),
                });
            }
        },
        _ => {
            return Err(QueryError::Literal {
                text,
                reason: "the interval's amount must be a literal".into(),
            });
        }
    };
    use sql::DateTimeField as F;
    // The unit: after the quotes (standard), or inside them (PostgreSQL's '3 days').
    let (amount, unit) = match &iv.leading_field {
        Some(F::Day | F::Days) => (raw.as_str(), "day"),
        Some(F::Week(None) | F::Weeks) => (raw.as_str(), "week"),
        Some(F::Month | F::Months) => (raw.as_str(), "month"),
        Some(F::Year | F::Years) => (raw.as_str(), "year"),
        Some(other) => {
            return Err(QueryError::unsupported_hint(
                format!("INTERVAL ... {other}"),
                "use DAY, WEEK, MONTH or YEAR",
            ));
        }
        None => match raw.split_whitespace().collect::<Vec<_>>().as_slice() {
            [n, u] => {
                let u = u.to_ascii_lowercase();
                let unit = match u.trim_end_matches('s') {
                    "day" => "day",
                    "week" => "week",
                    "month" => "month",
                    "year" => "year",
                    _ => {
                        return Err(QueryError::unsupported_hint(
                            format!("the interval unit '{u}'"),
                            "use DAY, WEEK, MONTH or YEAR",
                        ));
                    }
                };
                (*n, unit)
            }
            _ => {
                return Err(QueryError::Literal {
                    text,
                    reason: "give the unit: INTERVAL 'n' DAY, WEEK, MONTH or YEAR".into(),
                });
            }
        },
    };
    let n: i64 = amount.parse().map_err(|_| QueryError::Literal {
        text: text.clone(),
        reason: "write INTERVAL 'n' DAY (or WEEK, MONTH, YEAR) with a whole number n".into(),
    })?;
    let range = || QueryError::Literal {
        text: text.clone(),
        reason: "out of range".into(),
    };
    Ok(match unit {
        "day" => Interval::Days(n),
        "week" => Interval::Days(n.checked_mul(7).ok_or_else(range)?),
        "month" => Interval::Months(n),
        _ => Interval::Months(n.checked_mul(12).ok_or_else(range)?),
    })
}

fn add_interval(
    date: Expr,
    iv: Interval,
    subtract: bool,
    whole: &sql::Expr,
) -> Result<Expr, QueryError> {
    if date.ty != DataType::Date {
        return Err(QueryError::WrongType {
            context: "INTERVAL arithmetic".into(),
            expected: "a DATE",
            expr: snippet(whole),
            found: date.ty,
        });
    }
    let out_of_range = || QueryError::Literal {
        text: snippet(whole),
        reason: "the resulting date is outside 0000-01-01 ..= 9999-12-31".into(),
    };
    match iv {
        Interval::Days(n) => {
            let n = if subtract {
                n.checked_neg().ok_or_else(out_of_range)?
            } else {
                n
            };
            let days = Expr::constant(Const::Int(n), DataType::Int);
            fold(
                Expr::new(
                    ExprKind::Arith {
                        op: ArithOp::Add,
                        left: Box::new(date),
                        right: Box::new(days),
                    },
                    DataType::Date,
                ),
                whole,
            )
        }
        Interval::Months(m) => {
            // Calendar arithmetic (day clamped to the month's end, as PostgreSQL does)
            // is done at plan time, so the date must be a constant.
            let Some(d) = date.as_int_const() else {
                return Err(QueryError::unsupported_hint(
                    format!(
                        "MONTH/YEAR interval arithmetic on a column ({})",
                        snippet(whole)
                    ),
                    "add INTERVAL 'n' DAY to columns; MONTH and YEAR apply to DATE literals",
                ));
            };
            let d = i32::try_from(d).map_err(|_| out_of_range())?;
            let m = if subtract {
                m.checked_neg().ok_or_else(out_of_range)?
            } else {
                m
            };
            let (y, mo, day) = ymd_from_days(d);
            let total = i64::from(y) * 12 + i64::from(mo) - 1 + m;
            let ny = i32::try_from(total.div_euclid(12)).map_err(|_| out_of_range())?;
            // rem_euclid(12) is 0..12
            let nm = total.rem_euclid(12) as u32 + 1;
            let nd = day.min(days_in_month(ny, nm));
            let days = days_from_ymd(ny, nm, nd).map_err(|_| out_of_range())?;
            Ok(Expr::constant(Const::Int(i64::from(days)), DataType::Date))
        }
    }
}

#[derive(Clone, Copy)]
enum Ar {
    Add,
    Sub,
    Mul,
    Div,
}

/// Types `l op r` and inserts the rescaling that makes `+`/`-` operands equal in scale.
fn arith(op: Ar, l: Expr, r: Expr, whole: &sql::Expr) -> Result<Expr, QueryError> {
    reject_wide(&l)?;
    reject_wide(&r)?;
    let sym = match op {
        Ar::Add => "+",
        Ar::Sub => "-",
        Ar::Mul => "*",
        Ar::Div => "/",
    };
    let err = QueryError::Arithmetic {
        op: sym,
        left: l.ty,
        right: r.ty,
    };
    let make = |op: ArithOp, l: Expr, r: Expr, ty: DataType| {
        fold(
            Expr::new(
                ExprKind::Arith {
                    op,
                    left: Box::new(l),
                    right: Box::new(r),
                },
                ty,
            ),
            whole,
        )
    };
    match (l.ty.scale(), r.ty.scale()) {
        (Some(sl), Some(sr)) => {
            let both_int = l.ty == DataType::Int && r.ty == DataType::Int;
            let number = |s: u8| {
                if both_int {
                    DataType::Int
                } else {
                    DataType::Decimal { scale: s }
                }
            };
            match op {
                Ar::Add | Ar::Sub => {
                    let s = sl.max(sr);
                    let l = rescale(l, s - sl, whole)?;
                    let r = rescale(r, s - sr, whole)?;
                    let aop = if matches!(op, Ar::Add) {
                        ArithOp::Add
                    } else {
                        ArithOp::Sub
                    };
                    make(aop, l, r, number(s))
                }
                Ar::Mul => {
                    let s = u32::from(sl) + u32::from(sr);
                    if s > u32::from(MAX_SCALE) {
                        return Err(QueryError::Scale {
                            expr: snippet(whole),
                            scale: s,
                        });
                    }
                    // s <= 18 was just checked
                    make(ArithOp::Mul, l, r, number(s as u8))
                }
                Ar::Div => {
                    if both_int {
                        make(ArithOp::IntDiv, l, r, DataType::Int)
                    } else {
                        let s = sl.max(sr).max(6);
                        let shift = s - sl + sr;
                        make(
                            ArithOp::DecDiv { shift },
                            l,
                            r,
                            DataType::Decimal { scale: s },
                        )
                    }
                }
            }
        }
        _ => match (op, l.ty, r.ty) {
            (Ar::Add, DataType::Date, DataType::Int) | (Ar::Add, DataType::Int, DataType::Date) => {
                make(ArithOp::Add, l, r, DataType::Date)
            }
            (Ar::Sub, DataType::Date, DataType::Int) => make(ArithOp::Sub, l, r, DataType::Date),
            (Ar::Sub, DataType::Date, DataType::Date) => make(ArithOp::Sub, l, r, DataType::Int),
            _ => Err(err),
        },
    }
}

fn rescale(e: Expr, by: u8, whole: &sql::Expr) -> Result<Expr, QueryError> {
    if by == 0 {
        return Ok(e);
    }
    let ty = match e.ty {
        DataType::Int | DataType::Decimal { .. } => DataType::Decimal {
            scale: e.ty.scale().unwrap_or(0) + by,
        },
        other => other,
    };
    fold(
        Expr::new(
            ExprKind::Rescale {
                expr: Box::new(e),
                by,
            },
            ty,
        ),
        whole,
    )
}

/// Replaces a node whose operands are all constants by its value, computed with the
/// evaluator's own operator code ([`ArithOp::apply`]).
fn fold(e: Expr, whole: &sql::Expr) -> Result<Expr, QueryError> {
    let fail = |zero: bool| QueryError::Constant {
        expr: snippet(whole),
        source: if zero {
            crate::error::EvalError::DivisionByZero {
                expr: snippet(whole),
            }
        } else {
            crate::error::EvalError::Overflow {
                expr: snippet(whole),
            }
        },
    };
    let value = match &e.kind {
        ExprKind::Arith { op, left, right } => match (left.as_int_const(), right.as_int_const()) {
            (Some(a), Some(b)) => op.apply(a, b).map_err(fail)?,
            _ => return Ok(e),
        },
        ExprKind::Neg(x) => match x.as_int_const() {
            Some(a) => a.checked_neg().ok_or_else(|| fail(false))?,
            None => return Ok(e),
        },
        ExprKind::Rescale { expr, by } => match expr.as_int_const() {
            Some(a) => pow10(*by)
                .and_then(|p| a.checked_mul(p))
                .ok_or_else(|| fail(false))?,
            None => return Ok(e),
        },
        _ => return Ok(e),
    };
    Ok(Expr::constant(Const::Int(value), e.ty))
}

fn compare_hint(l: &Expr, r: &Expr) -> String {
    let char_const_vs_date =
        |a: &Expr, b: &Expr| a.ty == DataType::Date && matches!(b.as_const(), Some(Const::Char(_)));
    if char_const_vs_date(l, r) || char_const_vs_date(r, l) {
        ": write a date literal as DATE 'YYYY-MM-DD'".into()
    } else if (l.ty.is_number() && matches!(r.as_const(), Some(Const::Char(_))))
        || (r.ty.is_number() && matches!(l.as_const(), Some(Const::Char(_))))
    {
        ": write numbers without quotes".into()
    } else {
        String::new()
    }
}

fn cmp_node(op: CmpOp, l: Expr, r: Expr) -> Expr {
    Expr::new(
        ExprKind::Cmp {
            op,
            left: Box::new(l),
            right: Box::new(r),
        },
        DataType::Bool,
    )
}

fn compare(op: CmpOp, l: Expr, r: Expr, whole: &sql::Expr) -> Result<Expr, QueryError> {
    match (l.ty, r.ty) {
        (a, b) if a.is_number() && b.is_number() => {
            let (sl, sr) = (a.scale().unwrap_or(0), b.scale().unwrap_or(0));
            match (num_const(&l), num_const(&r)) {
                (Some(x), Some(y)) => {
                    let ord = crate::types::Value::Decimal {
                        units: x,
                        scale: sl,
                    }
                    .cmp_sql(&crate::types::Value::Decimal {
                        units: y,
                        scale: sr,
                    });
                    Ok(Expr::boolean(op.holds(ord)))
                }
                (Some(_), None) => compare(op.flip(), r, l, whole),
                (None, Some(c)) => match normalize_const(op, sl, c, sr) {
                    Normalized::Always(b) => Ok(Expr::boolean(b)),
                    Normalized::Cmp(op, c) => {
                        let ty = l.ty;
                        Ok(cmp_node(op, l, Expr::constant(Const::Int(c), ty)))
                    }
                },
                (None, None) => {
                    let s = sl.max(sr);
                    let l = rescale(l, s - sl, whole)?;
                    let r = rescale(r, s - sr, whole)?;
                    Ok(cmp_node(op, l, r))
                }
            }
        }
        (DataType::Date, DataType::Date) => match (l.as_int_const(), r.as_int_const()) {
            (Some(x), Some(y)) => Ok(Expr::boolean(op.test(x, y))),
            (Some(_), None) => Ok(cmp_node(op.flip(), r, l)),
            _ => Ok(cmp_node(op, l, r)),
        },
        (DataType::Char(_), DataType::Char(_)) => match (l.as_const(), r.as_const()) {
            (Some(Const::Char(x)), Some(Const::Char(y))) => {
                Ok(Expr::boolean(op.holds(cmp_padded(x, y))))
            }
            (Some(_), None) => Ok(cmp_node(op.flip(), r, l)),
            _ => Ok(cmp_node(op, l, r)),
        },
        (a, b) => Err(QueryError::Compare {
            left: a,
            right: b,
            hint: compare_hint(&l, &r),
        }),
    }
}

fn in_list(
    x: Expr,
    items: Vec<Expr>,
    negated: bool,
    whole: &sql::Expr,
) -> Result<Expr, QueryError> {
    let mut list: Vec<Const> = Vec::with_capacity(items.len());
    for item in &items {
        let c = match (x.ty, item.ty) {
            (a, b) if a.is_number() && b.is_number() => {
                let (s, t) = (a.scale().unwrap_or(0), b.scale().unwrap_or(0));
                let v = num_const(item).unwrap_or(0);
                match normalize_const(CmpOp::Eq, s, v, t) {
                    Normalized::Cmp(_, v) => Some(Const::Int(v)),
                    // not representable at x's scale: can never be equal
                    Normalized::Always(_) => None,
                }
            }
            (DataType::Date, DataType::Date) | (DataType::Char(_), DataType::Char(_)) => {
                item.as_const().cloned()
            }
            (a, b) => {
                return Err(QueryError::Compare {
                    left: a,
                    right: b,
                    hint: compare_hint(&x, item),
                });
            }
        };
        if let Some(c) = c
            && !list.contains(&c)
        {
            list.push(c);
        }
    }
    if x.as_const().is_some() {
        // constant tested value: fold, comparing like `=` does
        let mut hit = false;
        for item in &items {
            let eq = compare(CmpOp::Eq, x.clone(), item.clone(), whole)?;
            hit |= matches!(eq.as_const(), Some(Const::Bool(true)));
        }
        return Ok(Expr::boolean(hit != negated));
    }
    if list.is_empty() {
        return Ok(Expr::boolean(negated));
    }
    Ok(Expr::new(
        ExprKind::InList {
            expr: Box::new(x),
            list,
            negated,
        },
        DataType::Bool,
    ))
}

fn like(x: Expr, prefix: Vec<u8>, negated: bool) -> Result<Expr, QueryError> {
    if let Some(Const::Char(v)) = x.as_const() {
        return Ok(Expr::boolean(v.starts_with(&prefix) != negated));
    }
    if prefix.is_empty() {
        // 'x LIKE %' holds for every string
        return Ok(Expr::boolean(!negated));
    }
    Ok(Expr::new(
        ExprKind::Like {
            expr: Box::new(x),
            prefix,
            negated,
        },
        DataType::Bool,
    ))
}

/// `NOT e`, pushed into comparisons, `IN`, `LIKE` and (De Morgan) `AND`/`OR`; exact
/// because no value is NULL.
fn negate(e: Expr) -> Expr {
    let ty = e.ty;
    match e.kind {
        ExprKind::Const(Const::Bool(b)) => Expr::boolean(!b),
        ExprKind::Cmp { op, left, right } => Expr::new(
            ExprKind::Cmp {
                op: op.negate(),
                left,
                right,
            },
            ty,
        ),
        ExprKind::InList {
            expr,
            list,
            negated,
        } => Expr::new(
            ExprKind::InList {
                expr,
                list,
                negated: !negated,
            },
            ty,
        ),
        ExprKind::Like {
            expr,
            prefix,
            negated,
        } => Expr::new(
            ExprKind::Like {
                expr,
                prefix,
                negated: !negated,
            },
            ty,
        ),
        ExprKind::Not(inner) => *inner,
        ExprKind::And(es) => or(es.into_iter().map(negate).collect()),
        ExprKind::Or(es) => and(es.into_iter().map(negate).collect()),
        kind => Expr::new(ExprKind::Not(Box::new(Expr::new(kind, ty))), DataType::Bool),
    }
}

/// Flattened conjunction without constant terms.
fn and(terms: Vec<Expr>) -> Expr {
    let mut out = Vec::with_capacity(terms.len());
    for t in terms {
        match t.kind {
            ExprKind::Const(Const::Bool(true)) => {}
            ExprKind::Const(Const::Bool(false)) => return Expr::boolean(false),
            ExprKind::And(inner) => out.extend(inner),
            kind => out.push(Expr::new(kind, t.ty)),
        }
    }
    match out.len() {
        0 => Expr::boolean(true),
        1 => out.pop().unwrap_or_else(|| Expr::boolean(true)),
        _ => Expr::new(ExprKind::And(out), DataType::Bool),
    }
}

/// Flattened disjunction without constant terms.
fn or(terms: Vec<Expr>) -> Expr {
    let mut out = Vec::with_capacity(terms.len());
    for t in terms {
        match t.kind {
            ExprKind::Const(Const::Bool(false)) => {}
            ExprKind::Const(Const::Bool(true)) => return Expr::boolean(true),
            ExprKind::Or(inner) => out.extend(inner),
            kind => out.push(Expr::new(kind, t.ty)),
        }
    }
    match out.len() {
        0 => Expr::boolean(false),
        1 => out.pop().unwrap_or_else(|| Expr::boolean(false)),
        _ => Expr::new(ExprKind::Or(out), DataType::Bool),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_is_exact() {
        use Normalized::*;
        let n = |op, s, c: i64, t| match normalize_const(op, s, i128::from(c), t) {
            Cmp(o, v) => format!("{} {v}", o.symbol()),
            Always(b) => b.to_string(),
        };
        // l_discount (scale 2) vs 0.065 (65 at scale 3)
        assert_eq!(n(CmpOp::Lt, 2, 65, 3), "< 7");
        assert_eq!(n(CmpOp::Le, 2, 65, 3), "<= 6");
        assert_eq!(n(CmpOp::Gt, 2, 65, 3), "> 6");
        assert_eq!(n(CmpOp::Ge, 2, 65, 3), ">= 7");
        assert_eq!(n(CmpOp::Eq, 2, 65, 3), "false");
        assert_eq!(n(CmpOp::Ne, 2, 65, 3), "true");
        assert_eq!(n(CmpOp::Eq, 2, 60, 3), "= 6");
        // negative constants floor/ceil toward the right side
        assert_eq!(n(CmpOp::Lt, 2, -65, 3), "< -6");
        assert_eq!(n(CmpOp::Le, 2, -65, 3), "<= -7");
        // scale the constant up
        assert_eq!(n(CmpOp::Lt, 2, 24, 0), "< 2400");
        // beyond i64 after scaling up
        assert_eq!(n(CmpOp::Lt, 18, i64::MAX, 0), "true");
        assert_eq!(n(CmpOp::Gt, 18, i64::MAX, 0), "false");
        assert_eq!(n(CmpOp::Gt, 18, i64::MIN, 0), "true");
        assert_eq!(n(CmpOp::Eq, 18, i64::MIN, 0), "false");
        // wide constants: 0.0650000000000000000001 (scale 22) against scale 2
        let w = |op, c: i128, t| match normalize_const(op, 2, c, t) {
            Cmp(o, v) => format!("{} {v}", o.symbol()),
            Always(b) => b.to_string(),
        };
        let c = 650_000_000_000_000_000_001i128;
        assert_eq!(w(CmpOp::Lt, c, 22), "< 7");
        assert_eq!(w(CmpOp::Le, c, 22), "<= 6");
        assert_eq!(w(CmpOp::Eq, c, 22), "false");
        // 10^30 at scale 0 is beyond every scale-2 i64
        assert_eq!(w(CmpOp::Lt, 10i128.pow(30), 0), "true");
        assert_eq!(w(CmpOp::Ge, -(10i128.pow(30)), 0), "true");
        assert_eq!(w(CmpOp::Eq, 10i128.pow(37), 38), "= 10");
        assert_eq!(w(CmpOp::Eq, 10i128.pow(37) + 1, 38), "false");
    }
}

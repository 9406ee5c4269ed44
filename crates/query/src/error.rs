//! Typed errors: [`QueryError`] for SQL that cannot be planned (syntax, unsupported
//! constructs, names, types), [`EvalError`] for evaluation (arithmetic overflow,
//! division by zero, a page of another table, partial results of different plans).

use csd_table::PageError;

use crate::types::DataType;

/// Why a SQL text could not be turned into a [`crate::Plan`]. Every message names the
/// construct, the name or the types involved, so the user can fix the query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The text is not valid SQL.
    #[error("SQL syntax error: {message}")]
    Syntax {
        /// The parser's message.
        message: String,
    },
    /// Valid SQL outside the supported subset.
    #[error("{construct} is not supported{hint}")]
    Unsupported {
        /// The construct, e.g. `JOIN`, `HAVING`, `function UPPER`.
        construct: String,
        /// Empty, or `": ..."` with what to do instead.
        hint: String,
    },
    /// The `FROM` table is not in the catalog.
    #[error("unknown table {name}; tables: {available}")]
    UnknownTable {
        /// The name in the query.
        name: String,
        /// The catalog's tables, comma separated.
        available: String,
    },
    /// A column the table does not have.
    #[error("unknown column {name} in table {table}; columns: {available}")]
    UnknownColumn {
        /// The name in the query.
        name: String,
        /// The table.
        table: String,
        /// The table's columns, comma separated.
        available: String,
    },
    /// A comparison (or `IN`, `BETWEEN`) between incompatible types.
    #[error("cannot compare {left} with {right}{hint}")]
    Compare {
        /// Left operand type.
        left: DataType,
        /// Right operand type.
        right: DataType,
        /// Empty, or `": ..."` with a suggestion.
        hint: String,
    },
    /// An arithmetic operator applied to types it does not take.
    #[error("cannot apply {op} to {left} and {right}")]
    Arithmetic {
        /// The operator (`+`, `-`, `*`, `/`).
        op: &'static str,
        /// Left operand type.
        left: DataType,
        /// Right operand type.
        right: DataType,
    },
    /// An expression of the wrong type for its place (e.g. `WHERE l_quantity`,
    /// `NOT l_tax`, `SUM(l_shipdate)`).
    #[error("{context} needs {expected}, but {expr} is {found}")]
    WrongType {
        /// Where the expression is (`WHERE`, `NOT`, `SUM`, ...).
        context: String,
        /// What it needs.
        expected: &'static str,
        /// The expression, as written.
        expr: String,
        /// Its type.
        found: DataType,
    },
    /// A literal that cannot be represented (bad date, number too large, too many
    /// fractional digits).
    #[error("invalid literal {text}: {reason}")]
    Literal {
        /// The literal as written.
        text: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A decimal result whose scale exceeds [`crate::types::MAX_SCALE`].
    #[error(
        "{expr} would have {scale} digits after the point; at most {max} fit a 64-bit value \
         (round an operand, e.g. multiply fewer decimals)",
        max = crate::types::MAX_SCALE
    )]
    Scale {
        /// The expression.
        expr: String,
        /// The scale it would need.
        scale: u32,
    },
    /// A `LIKE` pattern other than `'prefix%'`.
    #[error(
        "LIKE pattern '{pattern}' is not supported: only a literal prefix followed by one \
         trailing % (e.g. 'PROMO%') is"
    )]
    LikePattern {
        /// The pattern.
        pattern: String,
    },
    /// Misuse of aggregates or `GROUP BY` (a column neither grouped nor aggregated, an
    /// aggregate in `WHERE`, nested aggregates, ...).
    #[error("{0}")]
    Grouping(String),
    /// A bad `ORDER BY` item.
    #[error("ORDER BY {item}: {reason}")]
    OrderBy {
        /// The item as written.
        item: String,
        /// What is wrong.
        reason: String,
    },
    /// Folding a constant expression failed (e.g. `1 / 0`, overflow).
    #[error("in constant expression {expr}: {source}")]
    Constant {
        /// The expression.
        expr: String,
        /// The evaluation error.
        source: EvalError,
    },
}

impl QueryError {
    pub(crate) fn unsupported(construct: impl Into<String>) -> Self {
        QueryError::Unsupported {
            construct: construct.into(),
            hint: String::new(),
        }
    }

    pub(crate) fn unsupported_hint(construct: impl Into<String>, hint: &str) -> Self {
        QueryError::Unsupported {
            construct: construct.into(),
            hint: format!(": {hint}"),
        }
    }
}

/// Why evaluating a plan over a page, or combining partial results, failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// An arithmetic result does not fit the 64-bit value (or a 128-bit sum).
    #[error("arithmetic overflow in {expr}")]
    Overflow {
        /// The expression.
        expr: String,
    },
    /// A division whose divisor is zero on a selected row.
    #[error("division by zero in {expr}")]
    DivisionByZero {
        /// The expression.
        expr: String,
    },
    /// A page of a table other than the plan's.
    #[error(
        "the page belongs to table '{found}' (schema fingerprint {found_fingerprint:#010x}), \
         but the query reads '{expected}' ({expected_fingerprint:#010x})"
    )]
    WrongTable {
        /// The plan's table.
        expected: String,
        /// Its schema fingerprint.
        expected_fingerprint: u32,
        /// The page's schema's table.
        found: String,
        /// The page's schema fingerprint.
        found_fingerprint: u32,
    },
    /// A page could not be read.
    #[error(transparent)]
    Page(#[from] PageError),
    /// Two partial results of different plans (or of different kinds) were merged.
    #[error("cannot merge partial results of different queries: {0}")]
    PlanMismatch(String),
    /// More groups than the configured limit (the device's session memory bound).
    #[error(
        "the query produced more than {limit} groups; GROUP BY in this engine is meant for \
         few groups (raise the limit or group on fewer columns)"
    )]
    TooManyGroups {
        /// The limit.
        limit: usize,
    },
}

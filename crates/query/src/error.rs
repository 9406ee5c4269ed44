//! Typed errors: [`BuildError`] for an expression the device program's builder refuses
//! (types, literals, scales), [`EvalError`] for evaluation (arithmetic overflow,
//! division by zero, a page of another table, partial results of different programs).

use csd_table::PageError;

use crate::types::DataType;

/// Why the device program's builder ([`crate::build`]) refused an expression. Every
/// message names the expression or the types involved; the SQL front end (`csd-sql`)
/// then leaves that expression to the host instead of pushing it into the device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
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
    /// A literal that cannot be computed with (a number too large or too precise).
    #[error("invalid literal {text}: {reason}")]
    Literal {
        /// The literal.
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
    /// Folding a constant expression failed (e.g. `1 / 0`, overflow).
    #[error("in constant expression {expr}: {source}")]
    Constant {
        /// The expression.
        expr: String,
        /// The evaluation error.
        source: EvalError,
    },
}

/// Why evaluating a device program over a page, or combining partial results, failed.
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
         but the program reads '{expected}' ({expected_fingerprint:#010x})"
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
    /// Two partial results of different programs (or of different kinds) were merged.
    #[error("cannot merge partial results of different programs: {0}")]
    PlanMismatch(String),
    /// More groups than the configured limit (the device's session memory bound).
    #[error(
        "the aggregation produced more than {limit} groups; the device aggregates few \
         groups (raise the limit or group on fewer columns)"
    )]
    TooManyGroups {
        /// The limit.
        limit: usize,
    },
}

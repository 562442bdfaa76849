//! Run-time evaluation errors. Every one of them surfaces as the
//! `EXPRESSION_ERROR` failure code of the step (or execution) that evaluated
//! the expression.

use super::contract::Violation;

/// The failure code every evaluation error is reported under.
pub const EXPRESSION_ERROR: &str = "EXPRESSION_ERROR";

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// `7 / 0`, `7 % 0`, `1.5 / 0.0`, `10s / 0`.
    #[error("division by zero")]
    DivisionByZero,
    /// `9223372036854775807 + 1`, `seconds(9223372036854775807)`.
    #[error("Int overflow in {operation}")]
    Overflow {
        /// The operation that overflowed, e.g. `9223372036854775807 + 1`.
        operation: String,
    },
    /// `1e308 * 10.0`: JSON cannot carry infinities or NaN.
    #[error("Float result of {operation} is not a finite number")]
    NotFinite {
        /// The operation that produced the non-finite value.
        operation: String,
    },
    /// `[1, 2][5]`, `list[-1]`.
    #[error("index {index} out of range for a list of length {len}")]
    IndexOutOfRange {
        /// The index that was used.
        index: i64,
        /// The length of the list.
        len: usize,
    },
    /// A value (typically a `Json`) of the wrong kind, e.g. `signal.n + 1`
    /// where the signal payload's `n` is a string.
    #[error("{context}: expected {expected}, found {found}")]
    TypeMismatch {
        /// Where the value was used, e.g. `operand of +`.
        context: String,
        /// What was required there.
        expected: String,
        /// What the value was.
        found: String,
    },
    /// An operator applied at run time to values it is not defined for,
    /// e.g. `json_a + json_b` where one holds a string and the other a
    /// number.
    #[error("operator {operator} is not defined for {left} and {right}")]
    UndefinedOperator {
        /// The operator, e.g. `+`.
        operator: &'static str,
        /// What the left operand was.
        left: &'static str,
        /// What the right operand was.
        right: &'static str,
    },
    /// `int("abc")`, `float("x")`, `int(1e300)`.
    #[error("cannot convert {value} to {target}")]
    Conversion {
        /// The offending value, rendered as JSON.
        value: String,
        /// The target type.
        target: &'static str,
    },
    /// A step, loop variable or other name the scope does not provide (a
    /// step that has not produced an output yet).
    #[error("`{name}` is not available when this expression is evaluated")]
    Unbound {
        /// The missing name.
        name: String,
    },
    /// A value that does not match the static type of the expression that
    /// produced it (a `Json` used where a concrete type is required).
    #[error("value does not match its type: {}", describe(.0))]
    Contract(#[from] Violation),
    /// An expression nested deeper than the evaluator accepts.
    #[error("expression is nested more than {limit} levels deep")]
    TooDeep {
        /// The nesting limit.
        limit: usize,
    },
}

/// A violation as part of an evaluation error: without the `value: ` prefix
/// when it concerns the whole value.
fn describe(v: &Violation) -> String {
    if v.path.is_empty() {
        v.kind.to_string()
    } else {
        v.to_string()
    }
}

impl EvalError {
    /// The failure code reported for this error: always `EXPRESSION_ERROR`.
    pub fn code(&self) -> &'static str {
        EXPRESSION_ERROR
    }
}

//! Compiled expressions: typed trees the evaluator runs.

use super::Type;
use serde::{Deserialize, Serialize};

/// A compiled expression with its static type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expr {
    /// The statically checked type of the value this expression produces.
    pub ty: Type,
    /// The expression itself.
    pub kind: ExprKind,
}

/// The shape of an expression.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "expr", rename_all = "snake_case")]
pub enum ExprKind {
    /// A literal value in its JSON form (durations as integer milliseconds).
    Literal {
        /// The value.
        value: serde_json::Value,
    },
    /// `input`.
    Input,
    /// `execution` (`{id, workflow, version}`).
    Execution,
    /// A step's output.
    Step {
        /// Step name.
        name: String,
    },
    /// A loop variable.
    Var {
        /// Variable name.
        name: String,
    },
    /// `base.field` (null-propagating on optionals).
    Member {
        /// The record.
        base: Box<Expr>,
        /// Field name.
        field: String,
    },
    /// `base[index]` (null-propagating on optionals).
    Index {
        /// The list (or `Json`).
        base: Box<Expr>,
        /// The index.
        index: Box<Expr>,
    },
    /// `!x`, `-x`.
    Unary {
        /// Operator.
        op: UnaryOp,
        /// Operand.
        operand: Box<Expr>,
    },
    /// `a op b`.
    Binary {
        /// Operator.
        op: BinaryOp,
        /// Left operand.
        left: Box<Expr>,
        /// Right operand.
        right: Box<Expr>,
    },
    /// `f(args..)`.
    Call {
        /// The built-in function.
        function: Function,
        /// Arguments.
        args: Vec<Expr>,
    },
    /// `[a, b]`.
    List {
        /// Elements.
        items: Vec<Expr>,
    },
    /// `{ f: a, g: b }` (fields in source order).
    Record {
        /// Fields.
        fields: Vec<(String, Expr)>,
    },
}

/// Prefix operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    /// `!`
    Not,
    /// `-`
    Neg,
}

/// Infix operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&&`
    And,
    /// `||`
    Or,
    /// `??`
    Coalesce,
}

/// Built-in functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Function {
    /// `string(x)`
    String,
    /// `int(x)`
    Int,
    /// `float(x)`
    Float,
    /// `len(x)`
    Len,
    /// `keys(r)`
    Keys,
    /// `contains(list_or_string, x)`
    Contains,
    /// `lower(s)`
    Lower,
    /// `upper(s)`
    Upper,
    /// `json(x)`
    Json,
    /// `seconds(n)`
    Seconds,
    /// `millis(n)`
    Millis,
}

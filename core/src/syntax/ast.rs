//! The syntax tree: what the parser produces, with a span on every node.
//! A part that failed to parse is present as an `Error` node (already
//! reported), so later passes can skip it without reporting again.

use crate::diagnostic::Span;
use crate::ir::{BinaryOp, UnaryOp};

/// A name with its span.
#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where it is.
    pub span: Span,
}

/// A string literal with its span (task names, versions, signal names).
#[derive(Debug, Clone, PartialEq)]
pub struct StrLit {
    /// The decoded value.
    pub value: String,
    /// Where it is (quotes included).
    pub span: Span,
}

/// One parsed file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct File {
    /// Top-level declarations in source order.
    pub decls: Vec<Decl>,
}

/// A top-level declaration.
#[derive(Debug, Clone, PartialEq)]
pub enum Decl {
    /// `type Name = TYPE`
    Type(TypeDecl),
    /// `task "name" version "x" { .. }`
    Task(TaskDecl),
    /// `workflow Name version "x" { .. }`
    Workflow(WorkflowDecl),
}

/// `type Name = TYPE`.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeDecl {
    /// The type's name.
    pub name: Ident,
    /// Its definition.
    pub ty: TypeExpr,
}

/// `task "name" version "x" { input T  output T }`.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskDecl {
    /// Dotted task name.
    pub name: StrLit,
    /// Contract version.
    pub version: Option<StrLit>,
    /// `input TYPE` clauses (more than one is an error).
    pub inputs: Vec<(Ident, TypeExpr)>,
    /// `output TYPE` clauses (more than one is an error).
    pub outputs: Vec<(Ident, TypeExpr)>,
    /// The whole declaration.
    pub span: Span,
    /// True when a syntax error was recovered from inside the declaration.
    pub recovered: bool,
}

/// `workflow Name version "x" { .. }`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowDecl {
    /// Workflow name.
    pub name: Ident,
    /// Version string.
    pub version: Option<StrLit>,
    /// `input TYPE` clauses.
    pub inputs: Vec<(Ident, TypeExpr)>,
    /// `output EXPR` clauses.
    pub outputs: Vec<(Ident, Expr)>,
    /// Steps in source order.
    pub steps: Vec<StepDecl>,
    /// Workflow-level properties (`retry: ..`, `max_active: ..`, ..).
    pub props: Vec<Property>,
    /// The whole declaration.
    pub span: Span,
}

/// `name: value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Property {
    /// Property name.
    pub name: Ident,
    /// Its value.
    pub value: Expr,
}

/// `step NAME { CLAUSES }`.
#[derive(Debug, Clone, PartialEq)]
pub struct StepDecl {
    /// Step name.
    pub name: Ident,
    /// Clauses in source order.
    pub clauses: Vec<Clause>,
    /// The whole step.
    pub span: Span,
    /// True when a syntax error was recovered from inside the step: checks
    /// for missing clauses are skipped (the clause may be the broken one).
    pub recovered: bool,
}

/// One clause of a step or a `compensate` block.
#[derive(Debug, Clone, PartialEq)]
pub enum Clause {
    /// `worker "task.name"`
    Worker {
        /// The keyword.
        kw: Ident,
        /// Task name.
        task: StrLit,
    },
    /// `with EXPR`
    With {
        /// The keyword.
        kw: Ident,
        /// The input expression.
        value: Expr,
    },
    /// `workflow Name version "X"`
    Workflow {
        /// The keyword.
        kw: Ident,
        /// Child workflow name.
        name: Ident,
        /// Child version.
        version: StrLit,
    },
    /// `sleep EXPR`
    Sleep {
        /// The keyword.
        kw: Ident,
        /// Duration expression.
        duration: Expr,
    },
    /// `signal "name"`
    Signal {
        /// The keyword.
        kw: Ident,
        /// Signal name.
        name: StrLit,
    },
    /// `for VAR in EXPR`
    For {
        /// The keyword.
        kw: Ident,
        /// Loop variable.
        var: Ident,
        /// The list.
        list: Expr,
    },
    /// `compensate { CLAUSES }`
    Compensate {
        /// The keyword.
        kw: Ident,
        /// Clauses of the block.
        clauses: Vec<Clause>,
        /// The whole block.
        span: Span,
        /// True when a syntax error was recovered from inside the block.
        recovered: bool,
    },
    /// `name: value`
    Property(Property),
}

/// A type as written.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeExpr {
    /// Its shape.
    pub kind: TypeExprKind,
    /// Where it is.
    pub span: Span,
}

/// The shape of a written type.
#[derive(Debug, Clone, PartialEq)]
pub enum TypeExprKind {
    /// A built-in (`String`, `Int`, ..) or declared type name.
    Named(String),
    /// `[T]`
    List(Box<TypeExpr>),
    /// `{ f: T, .. }` in source order.
    Record(Vec<(Ident, TypeExpr)>),
    /// `T?`
    Optional(Box<TypeExpr>),
    /// Failed to parse (already reported).
    Error,
}

/// An expression as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// Its shape.
    pub kind: ExprKind,
    /// Where it is.
    pub span: Span,
}

/// The shape of a written expression.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// `"..."`
    Str(String),
    /// `42`
    Int(i64),
    /// `2.5`
    Float(f64),
    /// `true`, `false`
    Bool(bool),
    /// `null`
    Null,
    /// `10s` (milliseconds)
    Duration(u64),
    /// `input`, `execution`, a step name or a loop variable.
    Name(String),
    /// `base.field`
    Member(Box<Expr>, Ident),
    /// `base[index]`
    Index(Box<Expr>, Box<Expr>),
    /// `!x`, `-x`
    Unary(UnaryOp, Box<Expr>),
    /// `a op b`
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `f(args..)`
    Call(Ident, Vec<Expr>),
    /// `[a, b]`
    List(Vec<Expr>),
    /// `{ f: a, .. }` in source order.
    Record(Vec<(Ident, Expr)>),
    /// Failed to parse (already reported).
    Error,
}

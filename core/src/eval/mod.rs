//! The pure expression evaluator: compiled expressions over JSON values, and
//! checking JSON values against contract types.
//!
//! Values are plain [`serde_json::Value`]s; what a value *means* comes from
//! the static type the compiler attached to each expression ([`Expr::ty`]):
//! `Int`, `Float` and `Duration` are all JSON numbers, and `Duration` is
//! carried as integer milliseconds. A `Json` value is checked when it is used
//! as something more specific, and any failure — division by zero, index out
//! of range, a `Json` of the wrong kind, `Int` overflow — is an [`EvalError`]
//! whose code is `EXPRESSION_ERROR`.
//!
//! Nothing here reads a clock, draws randomness or performs I/O: the result
//! is a function of the expression and the [`Scope`].

mod canonical;
mod contract;
mod error;
mod functions;
mod operators;
mod value;

pub use canonical::{canonical_json, format_float};
pub use contract::{check_value, check_value_at, conforms, Violation, ViolationKind};
pub use error::{EvalError, EXPRESSION_ERROR};
pub use value::{type_name, value_name, values_equal};

use crate::ir::{Expr, ExprKind, Type};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use value::{classify, contains_json, dynamic, Val};

/// How deeply expressions may nest before evaluation gives up with
/// [`EvalError::TooDeep`] (instead of overflowing the stack).
pub const DEPTH_LIMIT: usize = 256;

/// What an expression can read.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The execution's (checked, normalized) input: `input`.
    pub input: &'a Value,
    /// `execution`: `{ id, workflow, version }`.
    pub execution: &'a Value,
    /// Step name -> its output (`null` for a skipped step).
    pub steps: &'a BTreeMap<String, Value>,
    /// Loop variables. A step reference looks here before [`Scope::steps`],
    /// so a compensation binds the compensated unit's output here under the
    /// step's own name (in a `for` step: that element's output).
    pub vars: &'a BTreeMap<String, Value>,
}

/// Evaluates `expr` in `scope`.
///
/// The result is a value of `expr.ty`: where a `Json` flows into an
/// expression with a more specific type, the value is checked (and
/// normalized, e.g. `2.0` read as an `Int` becomes `2`).
pub fn evaluate(expr: &Expr, scope: &Scope) -> Result<Value, EvalError> {
    eval(expr, scope, 0)
}

/// Evaluates `expr` and checks the result against `ty` (a contract type the
/// value must satisfy, e.g. a task's input record). A mismatch is an
/// [`EvalError::Contract`].
pub fn evaluate_as(expr: &Expr, ty: &Type, scope: &Scope) -> Result<Value, EvalError> {
    let value = evaluate(expr, scope)?;
    Ok(check_value(ty, &value)?)
}

pub(crate) fn eval(expr: &Expr, scope: &Scope, depth: usize) -> Result<Value, EvalError> {
    if depth > DEPTH_LIMIT {
        return Err(EvalError::TooDeep { limit: DEPTH_LIMIT });
    }
    let next = depth + 1;
    let value = match &expr.kind {
        ExprKind::Literal { value } => return Ok(value.clone()),
        ExprKind::Input => return Ok(scope.input.clone()),
        ExprKind::Execution => return Ok(scope.execution.clone()),
        ExprKind::Step { name } => {
            return scope
                .vars
                .get(name)
                .or_else(|| scope.steps.get(name))
                .cloned()
                .ok_or_else(|| EvalError::Unbound { name: name.clone() })
        }
        ExprKind::Var { name } => {
            return scope
                .vars
                .get(name)
                .cloned()
                .ok_or_else(|| EvalError::Unbound { name: name.clone() })
        }
        ExprKind::Member { .. } | ExprKind::Index { .. } if resolvable(expr, depth) => {
            // A path into the scope (`input.items[2].sku`): copy only what
            // it designates, not every value along the way.
            return resolve(expr, scope, depth).cloned();
        }
        ExprKind::Member { base, field } => {
            let b = eval(base, scope, next)?;
            member(&b, field)?.clone()
        }
        ExprKind::Index { base, index } => {
            let b = eval(base, scope, next)?;
            if b.is_null() {
                Value::Null
            } else {
                let i = eval(index, scope, next)?;
                index_into(&b, &index.ty, &i)?.clone()
            }
        }
        ExprKind::Unary { op, operand } => {
            let v = eval(operand, scope, next)?;
            operators::unary(*op, operand, &v)?
        }
        ExprKind::Binary { op, left, right } => {
            operators::binary(*op, left, right, &expr.ty, scope, next)?
        }
        ExprKind::Call { function, args } => {
            let values = args
                .iter()
                .map(|a| eval(a, scope, next))
                .collect::<Result<Vec<_>, _>>()?;
            functions::call(*function, args, &values)?
        }
        ExprKind::List { items } => Value::Array(
            items
                .iter()
                .map(|a| eval(a, scope, next))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        ExprKind::Record { fields } => {
            let mut map = Map::new();
            for (name, e) in fields {
                map.insert(name.clone(), eval(e, scope, next)?);
            }
            Value::Object(map)
        }
    };
    conform(expr, value)
}

/// Checks a computed value against its expression's static type when a
/// `Json` fed into it (otherwise the compiler already guarantees the type).
fn conform(expr: &Expr, value: Value) -> Result<Value, EvalError> {
    if needs_check(expr) {
        Ok(check_value(&expr.ty, &value)?)
    } else {
        Ok(value)
    }
}

/// Whether the value of `expr` must be checked against its type: a `Json`
/// fed into it and its type says more than `Json` (or the null type, which
/// `json ?? null` is given).
fn needs_check(expr: &Expr) -> bool {
    !matches!(expr.ty, Type::Json | Type::Null) && reads_json(expr)
}

/// The value `null`, to borrow.
static NULL: Value = Value::Null;

/// Whether `expr` is a path into the scope — a name followed by member
/// accesses and indexing — whose links need no type check (and which is
/// not nested too deeply).
fn resolvable(expr: &Expr, depth: usize) -> bool {
    if depth > DEPTH_LIMIT {
        return false;
    }
    match &expr.kind {
        ExprKind::Input | ExprKind::Execution | ExprKind::Step { .. } | ExprKind::Var { .. } => {
            true
        }
        ExprKind::Member { base, .. } | ExprKind::Index { base, .. } => {
            !needs_check(expr) && resolvable(base, depth + 1)
        }
        _ => false,
    }
}

/// The value a [`resolvable`] path designates, borrowed from the scope.
fn resolve<'s>(expr: &Expr, scope: &Scope<'s>, depth: usize) -> Result<&'s Value, EvalError> {
    if depth > DEPTH_LIMIT {
        return Err(EvalError::TooDeep { limit: DEPTH_LIMIT });
    }
    match &expr.kind {
        ExprKind::Input => Ok(scope.input),
        ExprKind::Execution => Ok(scope.execution),
        ExprKind::Step { name } => scope
            .vars
            .get(name)
            .or_else(|| scope.steps.get(name))
            .ok_or_else(|| EvalError::Unbound { name: name.clone() }),
        ExprKind::Var { name } => scope
            .vars
            .get(name)
            .ok_or_else(|| EvalError::Unbound { name: name.clone() }),
        ExprKind::Member { base, field } => member(resolve(base, scope, depth + 1)?, field),
        ExprKind::Index { base, index } => {
            let b = resolve(base, scope, depth + 1)?;
            if b.is_null() {
                return Ok(&NULL);
            }
            let i = eval(index, scope, depth + 1)?;
            index_into(b, &index.ty, &i)
        }
        _ => Err(EvalError::TypeMismatch {
            context: "path".into(),
            expected: "a name, member access or index".into(),
            found: "another expression".into(),
        }),
    }
}

/// Whether a direct sub-expression of `expr` has a type containing `Json`.
fn reads_json(expr: &Expr) -> bool {
    let json = |e: &Expr| contains_json(&e.ty);
    match &expr.kind {
        ExprKind::Literal { .. }
        | ExprKind::Input
        | ExprKind::Execution
        | ExprKind::Step { .. }
        | ExprKind::Var { .. } => false,
        ExprKind::Member { base, .. } => json(base),
        ExprKind::Index { base, index } => json(base) || json(index),
        ExprKind::Unary { operand, .. } => json(operand),
        ExprKind::Binary { left, right, .. } => json(left) || json(right),
        ExprKind::Call { args, .. } => args.iter().any(json),
        ExprKind::List { items } => items.iter().any(json),
        ExprKind::Record { fields } => fields.iter().any(|(_, e)| json(e)),
    }
}

/// `base.field`: null on a null base (optional chaining) and for a field the
/// object lacks (an omitted optional field, a missing `Json` field).
fn member<'v>(base: &'v Value, field: &str) -> Result<&'v Value, EvalError> {
    match base {
        Value::Null => Ok(&NULL),
        Value::Object(map) => Ok(map.get(field).unwrap_or(&NULL)),
        other => Err(EvalError::TypeMismatch {
            context: format!("reading field `{field}`"),
            expected: "record".into(),
            found: value_name(other),
        }),
    }
}

/// `base[index]`: lists by a non-negative `Int` within range; a `Json` object
/// may also be indexed by a `String` key (missing key reads as null).
fn index_into<'v>(base: &'v Value, index_ty: &Type, index: &Value) -> Result<&'v Value, EvalError> {
    let context = "index";
    // A `Json` number used as an index is read as an `Int` (so `1.0` works).
    let index_ty = match (value::strip_optional(index_ty), index) {
        (Type::Json, Value::Number(_)) => &Type::Int,
        _ => index_ty,
    };
    match (base, classify(index_ty, index, context)?) {
        (_, Val::Null) => Ok(&NULL),
        (Value::Array(items), Val::Int(i)) => usize::try_from(i)
            .ok()
            .and_then(|u| items.get(u))
            .ok_or(EvalError::IndexOutOfRange {
                index: i,
                len: items.len(),
            }),
        (Value::Object(map), Val::Str(key)) => Ok(map.get(key).unwrap_or(&NULL)),
        (Value::Array(_), other) => Err(EvalError::TypeMismatch {
            context: "list index".into(),
            expected: "Int".into(),
            found: other.type_name().into(),
        }),
        (Value::Object(_), other) => Err(EvalError::TypeMismatch {
            context: "record key".into(),
            expected: "String".into(),
            found: other.type_name().into(),
        }),
        (other, _) => Err(EvalError::TypeMismatch {
            context: "indexing".into(),
            expected: "list".into(),
            found: dynamic_name(other),
        }),
    }
}

fn dynamic_name(v: &Value) -> String {
    dynamic(v).type_name().to_string()
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

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
pub use contract::{check_value, check_value_at, Violation, ViolationKind};
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
        ExprKind::Member { base, field } => {
            let b = eval(base, scope, next)?;
            member(&b, field)?
        }
        ExprKind::Index { base, index } => {
            let b = eval(base, scope, next)?;
            if b.is_null() {
                Value::Null
            } else {
                let i = eval(index, scope, next)?;
                index_into(b, &index.ty, &i)?
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
    // `Json` says nothing to check, and neither does the null type (which
    // `json ?? null` is given).
    if matches!(expr.ty, Type::Json | Type::Null) || !reads_json(expr) {
        return Ok(value);
    }
    Ok(check_value(&expr.ty, &value)?)
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
fn member(base: &Value, field: &str) -> Result<Value, EvalError> {
    match base {
        Value::Null => Ok(Value::Null),
        Value::Object(map) => Ok(map.get(field).cloned().unwrap_or(Value::Null)),
        other => Err(EvalError::TypeMismatch {
            context: format!("reading field `{field}`"),
            expected: "record".into(),
            found: value_name(other),
        }),
    }
}

/// `base[index]`: lists by a non-negative `Int` within range; a `Json` object
/// may also be indexed by a `String` key (missing key reads as null).
fn index_into(base: Value, index_ty: &Type, index: &Value) -> Result<Value, EvalError> {
    let context = "index";
    // A `Json` number used as an index is read as an `Int` (so `1.0` works).
    let index_ty = match (value::strip_optional(index_ty), index) {
        (Type::Json, Value::Number(_)) => &Type::Int,
        _ => index_ty,
    };
    match (base, classify(index_ty, index, context)?) {
        (_, Val::Null) => Ok(Value::Null),
        (Value::Array(mut items), Val::Int(i)) => {
            let len = items.len();
            match usize::try_from(i) {
                Ok(u) if u < len => Ok(items.swap_remove(u)),
                _ => Err(EvalError::IndexOutOfRange { index: i, len }),
            }
        }
        (Value::Object(mut map), Val::Str(key)) => Ok(map.remove(key).unwrap_or(Value::Null)),
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
            found: dynamic_name(&other),
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

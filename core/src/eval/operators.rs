//! Prefix and infix operators. Operands are read through their static types
//! (`Int`, `Float` and `Duration` are all JSON numbers); a `Json` operand is
//! read by its value, as an `Int` or `Float` when the other operand says so.

use super::error::EvalError;
use super::value::{classify, strip_optional, values_equal, Val};
use super::{eval, Scope};
use crate::ir::{BinaryOp, Expr, Type, UnaryOp};
use serde_json::Value;
use std::cmp::Ordering;

/// `!x` and `-x`.
pub(crate) fn unary(op: UnaryOp, operand: &Expr, value: &Value) -> Result<Value, EvalError> {
    let symbol = match op {
        UnaryOp::Not => "!",
        UnaryOp::Neg => "-",
    };
    let context = format!("operand of prefix {symbol}");
    match (op, classify(&operand.ty, value, &context)?) {
        (UnaryOp::Not, Val::Bool(b)) => Ok(Value::Bool(!b)),
        (UnaryOp::Neg, Val::Int(i)) => {
            i.checked_neg()
                .map(Value::from)
                .ok_or_else(|| EvalError::Overflow {
                    operation: format!("-({i})"),
                })
        }
        (UnaryOp::Neg, Val::Duration(ms)) => {
            ms.checked_neg()
                .map(Value::from)
                .ok_or_else(|| EvalError::Overflow {
                    operation: format!("-({ms}ms)"),
                })
        }
        (UnaryOp::Neg, Val::Float(f)) => float(-f, || format!("-({f})")),
        (op, other) => Err(EvalError::TypeMismatch {
            context,
            expected: match op {
                UnaryOp::Not => "Bool",
                UnaryOp::Neg => "Int, Float or Duration",
            }
            .into(),
            found: other.type_name().into(),
        }),
    }
}

fn symbol(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        BinaryOp::Rem => "%",
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Eq => "==",
        BinaryOp::Ne => "!=",
        BinaryOp::Lt => "<",
        BinaryOp::Le => "<=",
        BinaryOp::Gt => ">",
        BinaryOp::Ge => ">=",
        BinaryOp::And => "&&",
        BinaryOp::Or => "||",
        BinaryOp::Coalesce => "??",
    }
}

/// `a op b`, with `&&`, `||` and `??` evaluating `b` only when needed.
pub(crate) fn binary(
    op: BinaryOp,
    left: &Expr,
    right: &Expr,
    result: &Type,
    scope: &Scope,
    depth: usize,
) -> Result<Value, EvalError> {
    let l = eval(left, scope, depth)?;
    match op {
        BinaryOp::Coalesce => {
            return if l.is_null() {
                eval(right, scope, depth)
            } else {
                Ok(l)
            };
        }
        BinaryOp::And | BinaryOp::Or => {
            let stop = op == BinaryOp::Or;
            if boolean(op, left, &l)? == stop {
                return Ok(Value::Bool(stop));
            }
            let r = eval(right, scope, depth)?;
            return Ok(Value::Bool(boolean(op, right, &r)?));
        }
        BinaryOp::Eq | BinaryOp::Ne => {
            let r = eval(right, scope, depth)?;
            let equal = values_equal(&l, &r);
            return Ok(Value::Bool(equal == (op == BinaryOp::Eq)));
        }
        _ => {}
    }
    let r = eval(right, scope, depth)?;
    let context = format!("operand of {}", symbol(op));
    let a = classify(read_as(op, &left.ty, &right.ty, result), &l, &context)?;
    let b = classify(read_as(op, &right.ty, &left.ty, result), &r, &context)?;
    match op {
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
            let ordering = compare(op, a, b)?;
            Ok(Value::Bool(match op {
                BinaryOp::Lt => ordering == Ordering::Less,
                BinaryOp::Le => ordering != Ordering::Greater,
                BinaryOp::Gt => ordering == Ordering::Greater,
                _ => ordering != Ordering::Less,
            }))
        }
        _ => arithmetic(op, a, b),
    }
}

/// The type to read an operand as: its own, or for a `Json` operand:
/// - next to a `Duration`, as milliseconds where both sides must be
///   durations (`+ - %` and comparisons);
/// - in arithmetic whose result the compiler typed `Int` or `Float`, as the
///   other operand's type (`1 + json` needs an `Int` in the `Json`, and
///   divides as integers);
/// - otherwise by its value: `json + 1` typed `Json` gives `4.5` for `3.5`,
///   and `json > 3` compares numbers of either kind.
fn read_as<'t>(op: BinaryOp, own: &'t Type, other: &'t Type, result: &Type) -> &'t Type {
    let comparison = matches!(
        op,
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
    );
    match (strip_optional(own), strip_optional(other)) {
        (Type::Json, t @ Type::Duration) if !matches!(op, BinaryOp::Mul | BinaryOp::Div) => t,
        (Type::Json, t @ (Type::Int | Type::Float))
            if !comparison && !matches!(strip_optional(result), Type::Json) =>
        {
            t
        }
        _ => own,
    }
}

fn boolean(op: BinaryOp, operand: &Expr, value: &Value) -> Result<bool, EvalError> {
    let context = format!("operand of {}", symbol(op));
    match classify(&operand.ty, value, &context)? {
        Val::Bool(b) => Ok(b),
        other => Err(EvalError::TypeMismatch {
            context,
            expected: "Bool".into(),
            found: other.type_name().into(),
        }),
    }
}

fn not_defined(op: BinaryOp, a: Val, b: Val) -> EvalError {
    EvalError::UndefinedOperator {
        operator: symbol(op),
        left: a.type_name(),
        right: b.type_name(),
    }
}

fn compare(op: BinaryOp, a: Val, b: Val) -> Result<Ordering, EvalError> {
    let ordering = match (a, b) {
        (Val::Int(x), Val::Int(y)) | (Val::Duration(x), Val::Duration(y)) => Some(x.cmp(&y)),
        (Val::Str(x), Val::Str(y)) => Some(x.cmp(y)),
        (Val::Int(x), Val::Float(y)) => (x as f64).partial_cmp(&y),
        (Val::Float(x), Val::Int(y)) => x.partial_cmp(&(y as f64)),
        (Val::Float(x), Val::Float(y)) => x.partial_cmp(&y),
        _ => return Err(not_defined(op, a, b)),
    };
    ordering.ok_or_else(|| not_defined(op, a, b))
}

fn overflow(op: BinaryOp, x: impl std::fmt::Display, y: impl std::fmt::Display) -> EvalError {
    EvalError::Overflow {
        operation: format!("{x} {} {y}", symbol(op)),
    }
}

/// A float result, refused when it is not finite (JSON cannot carry it).
fn float(f: f64, operation: impl FnOnce() -> String) -> Result<Value, EvalError> {
    serde_json::Number::from_f64(f)
        .filter(|_| f.is_finite())
        .map(Value::Number)
        .ok_or_else(|| EvalError::NotFinite {
            operation: operation(),
        })
}

fn int_op(op: BinaryOp, x: i64, y: i64) -> Result<i64, EvalError> {
    if matches!(op, BinaryOp::Div | BinaryOp::Rem) && y == 0 {
        return Err(EvalError::DivisionByZero);
    }
    let result = match op {
        BinaryOp::Add => x.checked_add(y),
        BinaryOp::Sub => x.checked_sub(y),
        BinaryOp::Mul => x.checked_mul(y),
        BinaryOp::Div => x.checked_div(y),
        BinaryOp::Rem => x.checked_rem(y),
        _ => None,
    };
    result.ok_or_else(|| overflow(op, x, y))
}

fn float_op(op: BinaryOp, x: f64, y: f64) -> Result<Value, EvalError> {
    if matches!(op, BinaryOp::Div | BinaryOp::Rem) && y == 0.0 {
        return Err(EvalError::DivisionByZero);
    }
    let result = match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        _ => x % y,
    };
    float(result, || format!("{x} {} {y}", symbol(op)))
}

/// A duration scaled by a float, rounded to the nearest millisecond.
fn scale(op: BinaryOp, ms: i64, factor: f64) -> Result<Value, EvalError> {
    if op == BinaryOp::Div && factor == 0.0 {
        return Err(EvalError::DivisionByZero);
    }
    let scaled = if op == BinaryOp::Div {
        ms as f64 / factor
    } else {
        ms as f64 * factor
    };
    let rounded = scaled.round();
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if rounded.is_finite() && (-LIMIT..LIMIT).contains(&rounded) {
        Ok(Value::from(rounded as i64))
    } else {
        Err(overflow(op, format!("{ms}ms"), factor))
    }
}

fn arithmetic(op: BinaryOp, a: Val, b: Val) -> Result<Value, EvalError> {
    use BinaryOp::{Add, Div, Mul, Rem, Sub};
    match (op, a, b) {
        (_, Val::Int(x), Val::Int(y)) => int_op(op, x, y).map(Value::from),
        (_, Val::Float(x), Val::Float(y)) => float_op(op, x, y),
        (_, Val::Int(x), Val::Float(y)) => float_op(op, x as f64, y),
        (_, Val::Float(x), Val::Int(y)) => float_op(op, x, y as f64),
        (Add | Sub | Rem, Val::Duration(x), Val::Duration(y)) => int_op(op, x, y)
            .map(Value::from)
            .map_err(|e| duration_error(e, op, x, y)),
        (Div, Val::Duration(x), Val::Duration(y)) => int_op(op, x, y).map(Value::from),
        (Mul | Div, Val::Duration(x), Val::Int(y)) => int_op(op, x, y)
            .map(Value::from)
            .map_err(|e| duration_error(e, op, x, y)),
        (Mul, Val::Int(x), Val::Duration(y)) => int_op(op, x, y)
            .map(Value::from)
            .map_err(|e| duration_error(e, op, x, y)),
        (Mul | Div, Val::Duration(x), Val::Float(y)) => scale(op, x, y),
        (Mul, Val::Float(x), Val::Duration(y)) => scale(op, y, x),
        (Add, Val::Str(x), Val::Str(y)) => {
            let mut s = String::with_capacity(x.len() + y.len());
            s.push_str(x);
            s.push_str(y);
            Ok(Value::String(s))
        }
        (Add, Val::List(x), Val::List(y)) => {
            Ok(Value::Array(x.iter().chain(y.iter()).cloned().collect()))
        }
        _ => Err(not_defined(op, a, b)),
    }
}

fn duration_error(e: EvalError, op: BinaryOp, x: i64, y: i64) -> EvalError {
    match e {
        EvalError::Overflow { .. } => EvalError::Overflow {
            operation: format!("{x} {} {y} (Duration milliseconds)", symbol(op)),
        },
        other => other,
    }
}

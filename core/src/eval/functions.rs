//! The built-in functions: `string int float len keys contains lower upper
//! json seconds millis`.

use super::canonical::{canonical_json, format_float};
use super::error::EvalError;
use super::value::{classify, values_equal, Val};
use crate::ir::{Expr, Function};
use serde_json::Value;

fn name(function: Function) -> &'static str {
    match function {
        Function::String => "string",
        Function::Int => "int",
        Function::Float => "float",
        Function::Len => "len",
        Function::Keys => "keys",
        Function::Contains => "contains",
        Function::Lower => "lower",
        Function::Upper => "upper",
        Function::Json => "json",
        Function::Seconds => "seconds",
        Function::Millis => "millis",
    }
}

fn arity(function: Function) -> usize {
    match function {
        Function::Contains => 2,
        _ => 1,
    }
}

fn wrong(function: Function, expected: &str, found: Val) -> EvalError {
    EvalError::TypeMismatch {
        context: format!("argument of {}()", name(function)),
        expected: expected.into(),
        found: found.type_name().into(),
    }
}

/// Calls `function` on already evaluated `values` (`args` gives their static
/// types).
pub(crate) fn call(
    function: Function,
    args: &[Expr],
    values: &[Value],
) -> Result<Value, EvalError> {
    let n = arity(function);
    if args.len() != n || values.len() != n {
        return Err(EvalError::TypeMismatch {
            context: format!("call of {}()", name(function)),
            expected: format!("{n} argument(s)"),
            found: values.len().to_string(),
        });
    }
    let context = format!("argument of {}()", name(function));
    let x = classify(&args[0].ty, &values[0], &context)?;
    match function {
        Function::String => Ok(Value::String(to_string(x, &values[0]))),
        Function::Int => to_int(x, &values[0]).map(Value::from),
        Function::Float => to_float(x, &values[0]),
        Function::Len => match x {
            Val::Str(s) => Ok(Value::from(s.chars().count())),
            Val::List(items) => Ok(Value::from(items.len())),
            Val::Record(map) => Ok(Value::from(map.len())),
            other => Err(wrong(function, "String, list or record", other)),
        },
        Function::Keys => match x {
            Val::Record(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Ok(Value::Array(
                    keys.into_iter().map(|k| Value::String(k.clone())).collect(),
                ))
            }
            other => Err(wrong(function, "record", other)),
        },
        Function::Contains => match x {
            Val::List(items) => Ok(Value::Bool(
                items.iter().any(|i| values_equal(i, &values[1])),
            )),
            Val::Str(s) => match classify(&args[1].ty, &values[1], &context)? {
                Val::Str(needle) => Ok(Value::Bool(s.contains(needle))),
                other => Err(wrong(function, "String (to search a String)", other)),
            },
            other => Err(wrong(function, "list or String", other)),
        },
        Function::Lower | Function::Upper => match x {
            Val::Str(s) if function == Function::Lower => Ok(Value::String(s.to_lowercase())),
            Val::Str(s) => Ok(Value::String(s.to_uppercase())),
            other => Err(wrong(function, "String", other)),
        },
        Function::Json => Ok(values[0].clone()),
        Function::Seconds | Function::Millis => match x {
            Val::Int(n) => {
                let factor = if function == Function::Seconds {
                    1_000
                } else {
                    1
                };
                n.checked_mul(factor)
                    .map(Value::from)
                    .ok_or_else(|| EvalError::Overflow {
                        operation: format!("{}({n})", name(function)),
                    })
            }
            other => Err(wrong(function, "Int", other)),
        },
    }
}

/// `string(x)`: strings unchanged, numbers in their shortest form, durations
/// with their unit (`1500ms`), `null`, `true`/`false`, lists and records as
/// canonical JSON.
fn to_string(x: Val, raw: &Value) -> String {
    match x {
        Val::Null => "null".into(),
        Val::Bool(b) => b.to_string(),
        Val::Int(i) => i.to_string(),
        Val::Float(f) => format_float(f),
        Val::Duration(ms) => format!("{ms}ms"),
        Val::Str(s) => s.to_string(),
        Val::List(_) | Val::Record(_) => canonical_json(raw),
    }
}

/// `int(x)`: a `Float` truncates toward zero, a `String` must be a decimal
/// integer (optional sign, no spaces), a `Duration` gives its milliseconds.
/// Like the compiler, which refuses `int(true)`, a `Json` holding a `Bool`
/// (or anything else) is not converted.
fn to_int(x: Val, raw: &Value) -> Result<i64, EvalError> {
    let fail = || EvalError::Conversion {
        value: canonical_json(raw),
        target: "Int",
    };
    match x {
        Val::Int(i) | Val::Duration(i) => Ok(i),
        Val::Float(f) => {
            let t = f.trunc();
            const LIMIT: f64 = 9_223_372_036_854_775_808.0;
            if t.is_finite() && (-LIMIT..LIMIT).contains(&t) {
                Ok(t as i64)
            } else {
                Err(fail())
            }
        }
        Val::Str(s) => s.parse::<i64>().map_err(|_| fail()),
        Val::Null | Val::Bool(_) | Val::List(_) | Val::Record(_) => Err(fail()),
    }
}

/// `float(x)`: from `Int`, `Float`, `Duration` (milliseconds) or a `String`
/// holding a finite number (no spaces).
fn to_float(x: Val, raw: &Value) -> Result<Value, EvalError> {
    let fail = || EvalError::Conversion {
        value: canonical_json(raw),
        target: "Float",
    };
    let f = match x {
        Val::Int(i) | Val::Duration(i) => i as f64,
        Val::Float(f) => f,
        Val::Str(s) => s.parse::<f64>().map_err(|_| fail())?,
        Val::Null | Val::Bool(_) | Val::List(_) | Val::Record(_) => return Err(fail()),
    };
    serde_json::Number::from_f64(f)
        .filter(|_| f.is_finite())
        .map(Value::Number)
        .ok_or_else(fail)
}

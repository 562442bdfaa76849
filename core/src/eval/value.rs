//! Reading JSON values through static types: classification into typed
//! run-time values, structural equality, and human-readable names of types
//! and values for error messages.

use super::error::EvalError;
use crate::ir::Type;
use serde_json::{Map, Value};
use std::cmp::Ordering;

/// A JSON value read as a value of the language (what the static type, or
/// for `Json` the value itself, says it is).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Val<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Milliseconds.
    Duration(i64),
    Str(&'a str),
    List(&'a [Value]),
    Record(&'a Map<String, Value>),
}

impl Val<'_> {
    /// The language name of this value's type, for messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Val::Null => "null",
            Val::Bool(_) => "Bool",
            Val::Int(_) => "Int",
            Val::Float(_) => "Float",
            Val::Duration(_) => "Duration",
            Val::Str(_) => "String",
            Val::List(_) => "list",
            Val::Record(_) => "record",
        }
    }
}

/// Strips any number of `?` from a type.
pub(crate) fn strip_optional(ty: &Type) -> &Type {
    match ty {
        Type::Optional(inner) => strip_optional(inner),
        other => other,
    }
}

/// Whether `ty` is `Json` or contains a `Json` anywhere.
pub(crate) fn contains_json(ty: &Type) -> bool {
    match ty {
        Type::Json => true,
        Type::List(inner) | Type::Optional(inner) => contains_json(inner),
        Type::Record(fields) => fields.values().any(contains_json),
        _ => false,
    }
}

/// The integer a JSON number denotes, if it is an integer within `i64`
/// (`3`, `3.0` and `3e0` alike).
pub(crate) fn integer_of(value: &Value) -> Option<i64> {
    let n = value.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    if n.is_u64() {
        return None;
    }
    let f = n.as_f64()?;
    // -2^63 is exactly representable; 2^63 is the first value out of range.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if f.is_finite() && f.fract() == 0.0 && (-LIMIT..LIMIT).contains(&f) {
        // In range and integral: the conversion is exact.
        Some(f as i64)
    } else {
        None
    }
}

/// Reads `value` as a value of static type `ty`. A `Json` (or `Null`) type
/// classifies by the value itself: integers as `Int`, other numbers as
/// `Float`. A value of the wrong kind is a [`EvalError::TypeMismatch`] in
/// `context`.
pub(crate) fn classify<'a>(
    ty: &Type,
    value: &'a Value,
    context: &str,
) -> Result<Val<'a>, EvalError> {
    let ty = strip_optional(ty);
    let val = match (ty, value) {
        (_, Value::Null) => Some(Val::Null),
        (Type::Json | Type::Null, v) => Some(dynamic(v)),
        (Type::Int, v) => integer_of(v).map(Val::Int),
        (Type::Duration, v) => integer_of(v).map(Val::Duration),
        (Type::Float, Value::Number(n)) => n.as_f64().map(Val::Float),
        (Type::String, Value::String(s)) => Some(Val::Str(s)),
        (Type::Bool, Value::Bool(b)) => Some(Val::Bool(*b)),
        (Type::List(_), Value::Array(items)) => Some(Val::List(items)),
        (Type::Record(_), Value::Object(map)) => Some(Val::Record(map)),
        _ => None,
    };
    val.ok_or_else(|| EvalError::TypeMismatch {
        context: context.to_string(),
        expected: type_name(ty),
        found: value_name(value),
    })
}

/// Classifies a value by its JSON shape alone.
pub(crate) fn dynamic(value: &Value) -> Val<'_> {
    match value {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Val::Int(i),
            None => Val::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Val::Str(s),
        Value::Array(items) => Val::List(items),
        Value::Object(map) => Val::Record(map),
    }
}

/// The language spelling of a type: `Int`, `[String]`, `{ a: Int, b: Bool? }`.
pub fn type_name(ty: &Type) -> String {
    match ty {
        Type::String => "String".into(),
        Type::Int => "Int".into(),
        Type::Float => "Float".into(),
        Type::Bool => "Bool".into(),
        Type::Duration => "Duration".into(),
        Type::Json => "Json".into(),
        Type::Null => "null".into(),
        Type::List(inner) => format!("[{}]", type_name(inner)),
        Type::Optional(inner) => format!("{}?", type_name(inner)),
        Type::Record(fields) if fields.is_empty() => "{}".into(),
        Type::Record(fields) => {
            let inner: Vec<String> = fields
                .iter()
                .map(|(name, ty)| format!("{name}: {}", type_name(ty)))
                .collect();
            format!("{{ {} }}", inner.join(", "))
        }
    }
}

/// What a JSON value is, for "found ..." in messages: `String`, `Int`,
/// `Float 1.5`, `null`, `list`, `record`.
pub fn value_name(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) => "Bool".into(),
        Value::Number(n) if n.is_i64() => "Int".into(),
        Value::Number(n) if n.is_u64() => format!("{n} (outside the Int range)"),
        Value::Number(n) => match integer_of(value) {
            Some(_) => "Int".into(),
            None => format!("Float {n}"),
        },
        Value::String(_) => "String".into(),
        Value::Array(_) => "list".into(),
        Value::Object(_) => "record".into(),
    }
}

/// Structural equality: numbers compare by value (`1 == 1.0`), lists
/// element-wise, records field-wise regardless of key order.
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => compare_numbers(a, b) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| values_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| values_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Orders two JSON numbers by value (exactly for integers).
fn compare_numbers(a: &Value, b: &Value) -> Option<Ordering> {
    if let (Some(x), Some(y)) = (integer_of(a), integer_of(b)) {
        return Some(x.cmp(&y));
    }
    a.as_f64()?.partial_cmp(&b.as_f64()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn integers_are_read_from_any_integral_number() {
        assert_eq!(integer_of(&json!(3)), Some(3));
        assert_eq!(integer_of(&json!(3.0)), Some(3));
        assert_eq!(integer_of(&json!(1e3)), Some(1000));
        assert_eq!(integer_of(&json!(-(2f64.powi(63)))), Some(i64::MIN));
        assert_eq!(integer_of(&json!(2f64.powi(63))), None);
        assert_eq!(integer_of(&json!(u64::MAX)), None);
        assert_eq!(integer_of(&json!(1.5)), None);
        assert_eq!(integer_of(&json!("3")), None);
    }

    #[test]
    fn type_names_read_like_source() {
        let mut fields = BTreeMap::new();
        fields.insert("qty".to_string(), Type::Int);
        fields.insert("note".to_string(), Type::Optional(Box::new(Type::String)));
        let ty = Type::List(Box::new(Type::Record(fields)));
        assert_eq!(type_name(&ty), "[{ note: String?, qty: Int }]");
        assert_eq!(type_name(&Type::Record(BTreeMap::new())), "{}");
    }

    #[test]
    fn equality_is_structural_and_numeric() {
        assert!(values_equal(&json!(1), &json!(1.0)));
        assert!(values_equal(
            &json!({"a": [1, 2], "b": null}),
            &json!({"b": null, "a": [1.0, 2]})
        ));
        assert!(!values_equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(!values_equal(&json!([1]), &json!([1, 1])));
        assert!(!values_equal(&json!("1"), &json!(1)));
        assert!(!values_equal(&json!(i64::MAX), &json!(i64::MAX - 1)));
    }
}

//! Checking JSON values against contract types (workflow inputs, task
//! outputs, signal-free typed data) and normalizing them.
//!
//! Rules: `Int` and `Duration` accept any JSON number whose value is an
//! integer within `i64` (`1.0`, `1e3`) and normalize it to an integer;
//! `Float` accepts any number and normalizes it to a float (`1` becomes
//! `1.0`); `Json` accepts anything, unchanged. Records keep extra fields
//! unchanged; a missing or mistyped declared field is a violation, except
//! that a field of optional type (or of type `Json`, which `null` inhabits)
//! may be omitted — it is then added as `null`, so the normalized value
//! always carries every declared field. The compiler applies the same rule
//! to `with` records.

use super::value::{integer_of, type_name, value_name};
use crate::ir::Type;
use serde_json::{Map, Number, Value};
use std::fmt;

/// Where and how a value breaks its contract, e.g.
/// `input.items[2].qty: expected Int, found String`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {kind}", self.display_path())]
pub struct Violation {
    /// Path of the offending value from the checked root: `items[2].qty`
    /// (empty for the root itself; see [`Violation::under`]).
    pub path: String,
    /// What is wrong there.
    pub kind: ViolationKind,
}

/// What is wrong with a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViolationKind {
    /// The value has the wrong type.
    Mismatch {
        /// The contract type, spelled as in source.
        expected: String,
        /// What the value is.
        found: String,
    },
    /// A required record field is absent.
    MissingField {
        /// The field's contract type.
        expected: String,
    },
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ViolationKind::Mismatch { expected, found } => {
                write!(f, "expected {expected}, found {found}")
            }
            ViolationKind::MissingField { expected } => {
                write!(f, "missing required field of type {expected}")
            }
        }
    }
}

impl Violation {
    /// The same violation with `root` prefixed to its path:
    /// `items[2].qty` under `input` is `input.items[2].qty`.
    pub fn under(mut self, root: &str) -> Violation {
        self.path = join(root, &self.path);
        self
    }

    fn display_path(&self) -> &str {
        if self.path.is_empty() {
            "value"
        } else {
            &self.path
        }
    }
}

fn join(root: &str, path: &str) -> String {
    match (root.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => root.to_string(),
        (false, false) if path.starts_with('[') => format!("{root}{path}"),
        (false, false) => format!("{root}.{path}"),
    }
}

/// Checks `value` against the contract type `ty` and returns it normalized
/// (see the module documentation). The normalized value checks again to
/// itself.
pub fn check_value(ty: &Type, value: &Value) -> Result<Value, Violation> {
    let mut path = String::new();
    check(ty, value, &mut path)
}

/// True when [`check_value`] would accept `value`, found without building
/// the normalized copy or a violation.
pub fn conforms(ty: &Type, value: &Value) -> bool {
    match (ty, value) {
        (Type::Json, _)
        | (Type::Optional(_) | Type::Null, Value::Null)
        | (Type::String, Value::String(_))
        | (Type::Bool, Value::Bool(_)) => true,
        (Type::Optional(inner), v) => conforms(inner, v),
        (Type::Int | Type::Duration, v @ Value::Number(_)) => integer_of(v).is_some(),
        (Type::Float, Value::Number(n)) => n.as_f64().and_then(Number::from_f64).is_some(),
        (Type::List(inner), Value::Array(items)) => items.iter().all(|i| conforms(inner, i)),
        (Type::Record(fields), Value::Object(map)) => {
            fields.iter().all(|(name, field_ty)| match map.get(name) {
                None => matches!(field_ty, Type::Optional(_) | Type::Null | Type::Json),
                Some(v) => conforms(field_ty, v),
            })
        }
        _ => false,
    }
}

/// [`check_value`] with the violation's path starting at `root`
/// (`check_value_at("input", ..)` reports `input.items[2].qty`).
pub fn check_value_at(root: &str, ty: &Type, value: &Value) -> Result<Value, Violation> {
    check_value(ty, value).map_err(|v| v.under(root))
}

fn mismatch(ty: &Type, value: &Value, path: &str) -> Violation {
    Violation {
        path: path.to_string(),
        kind: ViolationKind::Mismatch {
            expected: type_name(ty),
            found: value_name(value),
        },
    }
}

fn check(ty: &Type, value: &Value, path: &mut String) -> Result<Value, Violation> {
    match (ty, value) {
        (Type::Json, v) => Ok(v.clone()),
        (Type::Optional(_), Value::Null) | (Type::Null, Value::Null) => Ok(Value::Null),
        (Type::Optional(inner), v) => check(inner, v, path),
        (Type::String, Value::String(_)) | (Type::Bool, Value::Bool(_)) => Ok(value.clone()),
        (Type::Int | Type::Duration, v @ Value::Number(_)) => match integer_of(v) {
            Some(i) => Ok(Value::from(i)),
            None => Err(mismatch(ty, value, path)),
        },
        (Type::Float, Value::Number(n)) => match n.as_f64().and_then(Number::from_f64) {
            Some(f) => Ok(Value::Number(f)),
            None => Err(mismatch(ty, value, path)),
        },
        (Type::List(inner), Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let checked = check(inner, item, path);
                path.truncate(len);
                out.push(checked?);
            }
            Ok(Value::Array(out))
        }
        (Type::Record(fields), Value::Object(map)) => {
            // Extra fields are kept as they are; declared ones are checked
            // below (copying the whole map first would copy those twice).
            let mut out: Map<String, Value> = map
                .iter()
                .filter(|(name, _)| !fields.contains_key(*name))
                .map(|(name, v)| (name.clone(), v.clone()))
                .collect();
            for (name, field_ty) in fields {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
                let result = match map.get(name) {
                    None if matches!(field_ty, Type::Optional(_) | Type::Null | Type::Json) => {
                        Ok(Value::Null)
                    }
                    None => Err(Violation {
                        path: path.clone(),
                        kind: ViolationKind::MissingField {
                            expected: type_name(field_ty),
                        },
                    }),
                    Some(v) => check(field_ty, v, path),
                };
                path.truncate(len);
                out.insert(name.clone(), result?);
            }
            Ok(Value::Object(out))
        }
        _ => Err(mismatch(ty, value, path)),
    }
}

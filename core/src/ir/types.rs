//! Resolved types of the `.orbit` language (named types already expanded).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A resolved type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "of", rename_all = "snake_case")]
pub enum Type {
    /// `String`.
    String,
    /// `Int` (i64).
    Int,
    /// `Float` (f64).
    Float,
    /// `Bool`.
    Bool,
    /// `Duration`, carried in JSON as integer milliseconds.
    Duration,
    /// `Json`: dynamic, checked when used.
    Json,
    /// The type of `null`.
    Null,
    /// `[T]`.
    List(Box<Type>),
    /// `{ f: T, .. }`, fields sorted by name.
    Record(BTreeMap<String, Type>),
    /// `T?`.
    Optional(Box<Type>),
}

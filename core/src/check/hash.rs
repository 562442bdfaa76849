//! Canonical JSON encoding of a definition and its SHA-256 `definition_hash`.
//!
//! The encoding is explicit (object keys sorted recursively, no whitespace)
//! rather than relying on `serde_json`'s map ordering, which a dependency may
//! change by enabling `preserve_order`.

use crate::ir;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Canonical JSON text of `value`: object keys sorted (by their UTF-8
/// bytes), no whitespace, strings and numbers as `serde_json` writes them.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The canonical JSON encoding of a compiled workflow (its semantic content:
/// no spans, no comments; task contracts and pinned child hashes included).
pub fn canonical_workflow(workflow: &ir::Workflow) -> String {
    // Serializing plain IR data cannot fail (all map keys are strings).
    let value = serde_json::to_value(workflow).unwrap_or(Value::Null);
    canonical_json(&value)
}

/// `definition_hash`: lowercase hex SHA-256 of [`canonical_workflow`].
pub fn definition_hash(workflow: &ir::Workflow) -> String {
    let digest = Sha256::digest(canonical_workflow(workflow).as_bytes());
    hex::encode(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_are_sorted_recursively_without_whitespace() {
        let v: Value =
            serde_json::from_str(r#"{"b": [ {"z":1,"a":2} ], "a": "x\n"}"#).unwrap_or(Value::Null);
        assert_eq!(canonical_json(&v), r#"{"a":"x\n","b":[{"a":2,"z":1}]}"#);
    }
}

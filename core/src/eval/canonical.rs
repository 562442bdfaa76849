//! Canonical JSON text: object keys sorted (explicitly, whatever map
//! ordering serde_json was built with), no whitespace, numbers in their
//! shortest round-trip form. `string(x)` of records and lists uses it, so keys
//! built from it are stable.

use serde_json::Value;

/// The canonical JSON text of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// The shortest text that reads back to the same `f64`, in JSON syntax and
/// always recognisable as a float: `1.0`, `0.1`, `1e21`, `-2.5e-7`.
/// Non-finite values, which JSON cannot carry, render as `null`.
pub fn format_float(f: f64) -> String {
    match serde_json::Number::from_f64(f) {
        // serde_json writes the shortest digits (ryu); drop the redundant
        // `+` of a positive exponent.
        Some(n) => n.to_string().replacen("e+", "e", 1),
        None => "null".to_string(),
    }
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_f64().filter(|_| n.is_f64()) {
            Some(f) => out.push_str(&format_float(f)),
            None => out.push_str(&n.to_string()),
        },
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, s: &str) {
    // Serializing a `str` cannot fail; fall back to a debug rendering rather
    // than panicking should that ever change.
    match serde_json::to_string(s) {
        Ok(text) => out.push_str(&text),
        Err(_) => out.push_str(&format!("{s:?}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_and_whitespace_is_dropped() {
        let v = json!({"b": [1, {"z": true, "a": null}], "a": "x\"y"});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":"x\"y","b":[1,{"a":null,"z":true}]}"#
        );
    }

    #[test]
    fn floats_use_the_shortest_round_trip_form() {
        assert_eq!(format_float(1.0), "1.0");
        assert_eq!(format_float(0.1), "0.1");
        assert_eq!(format_float(1e21), "1e21");
        assert_eq!(format_float(-1.5e300), "-1.5e300");
        assert_eq!(canonical_json(&json!([1e21, 2.0, 3])), "[1e21,2.0,3]");
        assert_eq!(format_float(-2.5e-7), "-2.5e-7");
        assert_eq!(format_float(f64::NAN), "null");
        for f in [
            0.1 + 0.2,
            1.0 / 3.0,
            123456.789,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            let back: f64 = format_float(f).parse().unwrap();
            assert_eq!(back, f);
        }
    }
}

//! JSON written straight into a buffer, for the answers sent most: a poll's
//! hand-out and an execution's view ([`super::Body::write_json`]).
//!
//! serde_json looks every byte of every key and string up in its escape
//! table, one at a time; under load that was about a tenth of the runtime
//! thread's instructions, for ids, tokens and names that never need an
//! escape. Here keys are constants written as they are, and a string is
//! copied whole once a look at sixteen bytes at a time finds nothing to
//! escape. Everything else (inputs, outputs, errors, a string that does
//! need an escape) is written by serde_json itself, so an answer's bytes
//! are the ones `serde_json::to_vec` gives for it (the tests compare them).

use serde::Serialize;

/// A JSON object being written: `{`, members separated by commas, and `}`
/// at [`Object::end`].
pub struct Object<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Object<'a> {
    /// Opens an object at the end of `out`.
    pub fn new(out: &'a mut Vec<u8>) -> Object<'a> {
        out.push(b'{');
        Object { out, empty: true }
    }

    /// Starts the member `key`, a constant with nothing to escape; its
    /// value goes into the buffer returned.
    pub fn key(&mut self, key: &'static str) -> &mut Vec<u8> {
        debug_assert!(plain(key.as_bytes()), "{key:?} needs escaping");
        self.comma();
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    /// Starts a member whose name comes from data (escaped where needed).
    pub fn name(&mut self, name: &str) -> serde_json::Result<&mut Vec<u8>> {
        self.comma();
        string(self.out, name)?;
        self.out.push(b':');
        Ok(self.out)
    }

    /// The member `key` with the string `value`.
    pub fn str(&mut self, key: &'static str, value: &str) -> serde_json::Result<()> {
        string(self.key(key), value)
    }

    /// The member `key` with `value` as serde_json writes it.
    pub fn value<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> serde_json::Result<()> {
        serde_json::to_writer(self.key(key), value)
    }

    /// The member `key` with `true` or `false`.
    pub fn bool(&mut self, key: &'static str, value: bool) {
        let text: &[u8] = if value { b"true" } else { b"false" };
        self.key(key).extend_from_slice(text);
    }

    /// Closes the object.
    pub fn end(self) {
        self.out.push(b'}');
    }

    fn comma(&mut self) {
        if !std::mem::take(&mut self.empty) {
            self.out.push(b',');
        }
    }
}

/// `s` as a JSON string at the end of `out`.
pub fn string(out: &mut Vec<u8>, s: &str) -> serde_json::Result<()> {
    if !plain(s.as_bytes()) {
        return serde_json::to_writer(out, s);
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
    Ok(())
}

/// True when no byte of `bytes` needs an escape in a JSON string (a
/// control character, `"` or `\`; serde_json escapes nothing else). Looks
/// at sixteen bytes at a time, without a branch per byte, which the
/// compiler turns into vector compares.
fn plain(bytes: &[u8]) -> bool {
    let escaped = |b: u8| (b < 0x20) | (b == b'"') | (b == b'\\');
    let mut chunks = bytes.chunks_exact(16);
    for chunk in &mut chunks {
        if chunk.iter().fold(false, |any, &b| any | escaped(b)) {
            return false;
        }
    }
    !chunks.remainder().iter().any(|&b| escaped(b))
}

#[cfg(test)]
mod tests {
    use super::{plain, string, Object};
    use proptest::prelude::*;
    use serde_json::json;

    fn written(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        assert!(string(&mut out, s).is_ok());
        out
    }

    #[test]
    fn plain_strings_are_copied_and_others_escaped_as_serde_json_does() {
        for s in [
            "",
            "7b0c3a52-9f1e-4a53-8d1e-2f6c1b9a0d44",
            "payments.charge",
            "a \"quoted\" word",
            "back\\slash",
            "line\nbreak\ttab\u{1}\u{1f}",
            "ünïcødé ✓ \u{2028}",
            "exactly sixteen!",
            "sixteen and \"one",
        ] {
            assert_eq!(
                written(s),
                serde_json::to_vec(s).unwrap_or_default(),
                "{s:?}"
            );
        }
        assert!(plain(b"0123456789abcdef0123456789abcdef/"));
        assert!(!plain(b"0123456789abcdef0123456789abcde\x7f\x00"));
        assert!(!plain(b"0123456789abcde\""));
    }

    #[test]
    fn an_object_writes_its_members_in_order() {
        let mut out = Vec::new();
        let mut o = Object::new(&mut out);
        assert!(o.str("id", "e-1").is_ok());
        assert!(o.value("input", &json!({"b": [1, 2.5], "a": null})).is_ok());
        o.bool("redelivery", false);
        assert!(o
            .name("per\"son")
            .map(|v| v.extend_from_slice(b"1"))
            .is_ok());
        o.end();
        let text = String::from_utf8(out).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"id":"e-1","input":{"a":null,"b":[1,2.5]},"redelivery":false,"per\"son":1}"#
        );
        let mut empty = Vec::new();
        Object::new(&mut empty).end();
        assert_eq!(empty, b"{}");
    }

    proptest! {
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(s in any::<String>()) {
            prop_assert_eq!(written(&s), serde_json::to_vec(&s).unwrap_or_default());
        }

        #[test]
        fn strings_of_ascii_and_controls_too(s in "[\\x00-\\x7f]{0,40}") {
            prop_assert_eq!(written(&s), serde_json::to_vec(&s).unwrap_or_default());
        }
    }
}

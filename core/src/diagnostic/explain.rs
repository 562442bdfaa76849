//! Long explanations of diagnostic codes, printed by `orbit explain CODE`.
//! Each is the markdown page `docs/src/errors/<CODE>.md` of the book,
//! compiled into the binary, so the terminal and the book never disagree.

/// Every explanation, keyed by code, in numeric order.
const EXPLANATIONS: &[(&str, &str)] = &[
    ("E0001", include_str!("../../../docs/src/errors/E0001.md")),
    ("E0002", include_str!("../../../docs/src/errors/E0002.md")),
    ("E0003", include_str!("../../../docs/src/errors/E0003.md")),
    ("E0004", include_str!("../../../docs/src/errors/E0004.md")),
    ("E0010", include_str!("../../../docs/src/errors/E0010.md")),
    ("E0011", include_str!("../../../docs/src/errors/E0011.md")),
    ("E0012", include_str!("../../../docs/src/errors/E0012.md")),
    ("E0100", include_str!("../../../docs/src/errors/E0100.md")),
    ("E0101", include_str!("../../../docs/src/errors/E0101.md")),
    ("E0102", include_str!("../../../docs/src/errors/E0102.md")),
    ("E0103", include_str!("../../../docs/src/errors/E0103.md")),
    ("E0104", include_str!("../../../docs/src/errors/E0104.md")),
    ("E0105", include_str!("../../../docs/src/errors/E0105.md")),
    ("E0106", include_str!("../../../docs/src/errors/E0106.md")),
    ("E0107", include_str!("../../../docs/src/errors/E0107.md")),
    ("E0108", include_str!("../../../docs/src/errors/E0108.md")),
    ("E0109", include_str!("../../../docs/src/errors/E0109.md")),
    ("E0200", include_str!("../../../docs/src/errors/E0200.md")),
    ("E0201", include_str!("../../../docs/src/errors/E0201.md")),
    ("E0300", include_str!("../../../docs/src/errors/E0300.md")),
    ("E0301", include_str!("../../../docs/src/errors/E0301.md")),
    ("E0302", include_str!("../../../docs/src/errors/E0302.md")),
    ("E0303", include_str!("../../../docs/src/errors/E0303.md")),
    ("E0304", include_str!("../../../docs/src/errors/E0304.md")),
    ("E0305", include_str!("../../../docs/src/errors/E0305.md")),
    ("E0306", include_str!("../../../docs/src/errors/E0306.md")),
    ("E0307", include_str!("../../../docs/src/errors/E0307.md")),
    ("E0308", include_str!("../../../docs/src/errors/E0308.md")),
    ("E0400", include_str!("../../../docs/src/errors/E0400.md")),
    ("E0401", include_str!("../../../docs/src/errors/E0401.md")),
    ("E0402", include_str!("../../../docs/src/errors/E0402.md")),
    ("E0403", include_str!("../../../docs/src/errors/E0403.md")),
    ("E0404", include_str!("../../../docs/src/errors/E0404.md")),
    ("E0405", include_str!("../../../docs/src/errors/E0405.md")),
    ("E0406", include_str!("../../../docs/src/errors/E0406.md")),
    ("E0407", include_str!("../../../docs/src/errors/E0407.md")),
    ("E0408", include_str!("../../../docs/src/errors/E0408.md")),
    ("E0409", include_str!("../../../docs/src/errors/E0409.md")),
    ("E0410", include_str!("../../../docs/src/errors/E0410.md")),
];

/// The markdown explanation of `code` (case-insensitive: `e0400` works),
/// or `None` if no such code is registered.
pub fn explanation(code: &str) -> Option<&'static str> {
    EXPLANATIONS
        .iter()
        .find(|(c, _)| c.eq_ignore_ascii_case(code.trim()))
        .map(|(_, text)| *text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::diagnostic::codes::{lookup, CODES};

    #[test]
    fn every_registered_code_has_an_explanation_titled_like_the_registry() {
        for code in CODES {
            let text = explanation(code.code).unwrap_or_else(|| {
                panic!(
                    "{} has no explanation: write docs/src/errors/{}.md and add it to \
                         EXPLANATIONS in core/src/diagnostic/explain.rs",
                    code.code, code.code
                )
            });
            let first = text.lines().next().unwrap_or_default();
            assert_eq!(first, format!("# {}: {}", code.code, code.title));
        }
        assert_eq!(EXPLANATIONS.len(), CODES.len());
    }

    #[test]
    fn every_error_page_is_a_registered_code() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/errors");
        let mut pages = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let Some(code) = name.strip_suffix(".md") else {
                continue;
            };
            if code == "README" {
                continue;
            }
            pages += 1;
            assert!(
                lookup(code).is_some(),
                "{name} documents an unregistered code"
            );
            assert!(explanation(code).is_some(), "{name} is not in EXPLANATIONS");
        }
        assert_eq!(pages, CODES.len());
    }

    #[test]
    fn lookup_is_case_insensitive_and_rejects_unknown_codes() {
        assert_eq!(explanation("e0400"), explanation("E0400"));
        assert!(explanation("E0400")
            .unwrap()
            .contains("```orbit,compile_fail,E0400"));
        assert_eq!(explanation("E9999"), None);
        assert_eq!(explanation(""), None);
    }

    #[test]
    fn every_explanation_has_a_failing_example_and_a_fix() {
        for (code, text) in EXPLANATIONS {
            assert!(
                text.contains(&format!("```orbit,compile_fail,{code}\n")),
                "{code} lacks a failing example"
            );
            assert!(text.contains("```orbit\n"), "{code} lacks a fix");
        }
    }
}

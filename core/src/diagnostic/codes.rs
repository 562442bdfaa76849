//! The registry of diagnostic codes. Every code the compiler can emit is
//! listed here once, with its one-line title; its long explanation lives in
//! `docs/src/errors/<CODE>.md` (printed by `orbit explain`). Codes are
//! stable: never reuse or renumber one.

/// One registered diagnostic code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code {
    /// `E` followed by four digits.
    pub code: &'static str,
    /// One-line summary.
    pub title: &'static str,
}

/// Every diagnostic code, in numeric order. Grouped by hundreds:
/// 00xx lexical and syntax, 01xx names and graphs, 02xx step kinds,
/// 03xx properties, 04xx types.
pub const CODES: &[Code] = &[
    Code {
        code: "E0001",
        title: "unexpected character",
    },
    Code {
        code: "E0002",
        title: "unterminated string literal",
    },
    Code {
        code: "E0003",
        title: "malformed number or duration literal",
    },
    Code {
        code: "E0004",
        title: "invalid escape sequence in a string literal",
    },
    Code {
        code: "E0010",
        title: "unexpected token",
    },
    Code {
        code: "E0011",
        title: "unexpected end of file",
    },
    Code {
        code: "E0012",
        title: "nested too deeply",
    },
    Code {
        code: "E0100",
        title: "unknown name",
    },
    Code {
        code: "E0101",
        title: "unknown field of a record",
    },
    Code {
        code: "E0102",
        title: "unknown task",
    },
    Code {
        code: "E0103",
        title: "unknown workflow or version",
    },
    Code {
        code: "E0104",
        title: "duplicate declaration",
    },
    Code {
        code: "E0105",
        title: "dependency cycle between steps",
    },
    Code {
        code: "E0106",
        title: "unknown step in `after`",
    },
    Code {
        code: "E0107",
        title: "cycle between workflows",
    },
    Code {
        code: "E0108",
        title: "reserved task name",
    },
    Code {
        code: "E0109",
        title: "recursive type definition",
    },
    Code {
        code: "E0200",
        title: "step has no kind clause",
    },
    Code {
        code: "E0201",
        title: "step has more than one kind clause",
    },
    Code {
        code: "E0300",
        title: "unknown property",
    },
    Code {
        code: "E0301",
        title: "duplicate property",
    },
    Code {
        code: "E0302",
        title: "`compensate` on a step that is not a task step",
    },
    Code {
        code: "E0303",
        title: "`for` on a sleep or signal step",
    },
    Code {
        code: "E0304",
        title: "invalid version string",
    },
    Code {
        code: "E0305",
        title: "invalid retry policy",
    },
    Code {
        code: "E0306",
        title: "invalid property value",
    },
    Code {
        code: "E0307",
        title: "property not allowed on this kind of step",
    },
    Code {
        code: "E0308",
        title: "missing required clause",
    },
    Code {
        code: "E0400",
        title: "type mismatch",
    },
    Code {
        code: "E0401",
        title: "unknown function",
    },
    Code {
        code: "E0402",
        title: "wrong number of arguments",
    },
    Code {
        code: "E0403",
        title: "operator not defined for these types",
    },
    Code {
        code: "E0404",
        title: "missing field required by the contract",
    },
    Code {
        code: "E0405",
        title: "optional value where a value is required",
    },
    Code {
        code: "E0406",
        title: "field not in the contract",
    },
    Code {
        code: "E0407",
        title: "`for` expression is not a list",
    },
    Code {
        code: "E0408",
        title: "condition is not `Bool`",
    },
    Code {
        code: "E0409",
        title: "member access or indexing on a value without fields or elements",
    },
    Code {
        code: "E0410",
        title: "task contract input or output is not a record type",
    },
];

/// The registered code `code`, if there is one (case-insensitive).
pub fn lookup(code: &str) -> Option<&'static Code> {
    CODES.iter().find(|c| c.code.eq_ignore_ascii_case(code))
}

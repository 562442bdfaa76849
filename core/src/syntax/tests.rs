//! Parser and lexer behaviour: precedence, literals, layout, recovery and
//! limits.

use super::ast::*;
use super::parse;
use crate::ir::{BinaryOp, UnaryOp};

fn output_expr(src_expr: &str) -> (Option<Expr>, Vec<String>) {
    let text = format!("workflow W version \"1.0.0\" {{\n output {src_expr}\n}}\n");
    let (file, errors) = parse("t.orbit", &text);
    let codes = errors.iter().map(|e| e.code.clone()).collect();
    let expr = file.decls.into_iter().find_map(|d| match d {
        Decl::Workflow(w) => w.outputs.into_iter().next().map(|(_, e)| e),
        _ => None,
    });
    (expr, codes)
}

fn shape(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Name(n) => n.clone(),
        ExprKind::Int(i) => i.to_string(),
        ExprKind::Duration(ms) => format!("{ms}ms"),
        ExprKind::Str(s) => format!("{s:?}"),
        ExprKind::Binary(op, a, b) => format!("({} {op:?} {})", shape(a), shape(b)),
        ExprKind::Unary(UnaryOp::Not, a) => format!("!{}", shape(a)),
        ExprKind::Unary(UnaryOp::Neg, a) => format!("-{}", shape(a)),
        ExprKind::Member(a, f) => format!("{}.{}", shape(a), f.name),
        ExprKind::Index(a, i) => format!("{}[{}]", shape(a), shape(i)),
        other => format!("{other:?}"),
    }
}

#[test]
fn operators_bind_by_precedence() {
    let (e, errors) = output_expr("a ?? b || c && d == e + f * -g.h[0]");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        shape(&e.unwrap()),
        "(a Coalesce (b Or (c And (d Eq (e Add (f Mul -g.h[0]))))))"
    );
    let (e, _) = output_expr("a - b - c");
    assert_eq!(shape(&e.unwrap()), "((a Sub b) Sub c)");
    let (e, _) = output_expr("!(a || b)");
    assert_eq!(shape(&e.unwrap()), "!(a Or b)");
    let _ = BinaryOp::Add;
}

#[test]
fn literals_escapes_and_durations() {
    let (e, errors) = output_expr(r#""q\"b\\n\n\t\u{e9}""#);
    assert!(errors.is_empty());
    assert_eq!(e.unwrap().kind, ExprKind::Str("q\"b\\n\n\t\u{e9}".into()));
    for (lit, ms) in [
        ("250ms", 250),
        ("10s", 10_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
    ] {
        let (e, errors) = output_expr(lit);
        assert!(errors.is_empty());
        assert_eq!(e.unwrap().kind, ExprKind::Duration(ms), "{lit}");
    }
    let (e, _) = output_expr("1e3");
    assert_eq!(e.unwrap().kind, ExprKind::Float(1000.0));
    assert_eq!(output_expr("99999999999999999999").1, ["E0003"]);
    assert_eq!(output_expr(r#""\u{110000}""#).1, ["E0004"]);
}

#[test]
fn record_types_accept_newlines_for_commas_and_optional_suffixes() {
    let text = "type T = {\n  a: Int\n  b: [String?]?,\n  c: { d: Json },\n}\n";
    let (file, errors) = parse("t.orbit", text);
    assert!(errors.is_empty(), "{errors:?}");
    let Decl::Type(t) = &file.decls[0] else {
        panic!()
    };
    let TypeExprKind::Record(fields) = &t.ty.kind else {
        panic!()
    };
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
}

#[test]
fn errors_in_separate_clauses_and_declarations_are_all_reported() {
    let text = "workflow A version \"1.0.0\" {\n  step a { sleep 1s + }\n  step b { sleep ) }\n}\n\
                workflow B version \"1.0.0\" { step c { sleep 1s } }\ntask oops\ntype X = Int\n";
    let (file, errors) = parse("t.orbit", text);
    let lines: Vec<(String, usize)> = errors.iter().map(|e| (e.code.clone(), e.line)).collect();
    assert_eq!(
        lines,
        [
            ("E0010".to_string(), 2),
            ("E0010".to_string(), 3),
            ("E0010".to_string(), 6)
        ]
    );
    assert_eq!(file.decls.len(), 3, "A, B and X survive");
}

#[test]
fn nesting_is_bounded_without_overflowing_the_stack() {
    let deep = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
    let (_, errors) = output_expr(&deep);
    assert_eq!(errors, ["E0012"]);
    let nots = format!("{}true", "!".repeat(100_000));
    assert_eq!(output_expr(&nots).1, ["E0012"]);
    let chain = vec!["a"; 10_000].join(" + ");
    assert_eq!(output_expr(&chain).1, ["E0012"]);
    let members = format!("a{}", ".b".repeat(10_000));
    assert_eq!(output_expr(&members).1, ["E0012"]);
    let lists = format!("{}1{}", "[".repeat(50_000), "]".repeat(50_000));
    assert_eq!(output_expr(&lists).1, ["E0012"]);
    let types = format!("type T = {}Int{}\n", "[".repeat(50_000), "]".repeat(50_000));
    let (_, errors) = parse("t.orbit", &types);
    assert_eq!(
        errors.iter().map(|e| e.code.as_str()).collect::<Vec<_>>(),
        ["E0012"]
    );
    // Reasonable nesting is fine.
    let ok = vec!["a"; 30].join(" + ");
    assert!(output_expr(&ok).1.is_empty());
}

#[test]
fn arbitrary_bytes_never_panic() {
    let samples = [
        "",
        "}",
        "{{{{",
        "workflow",
        "workflow W version",
        "task \"",
        "step",
        "\u{0}\u{1}",
        "é ü 漢字 🚀",
        "workflow W version \"1.0.0\" { step s { for x in } }",
        "type = = =",
        "1..2",
        "\"\\u{",
        "\"\\u{zz}\"",
        "workflow W version \"1.0.0\" { output [1, {a: [}] }",
    ];
    for s in samples {
        let _ = parse("t.orbit", s);
    }
}

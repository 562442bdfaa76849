//! Unit tests of the evaluator over hand-built typed expressions.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::ir::{BinaryOp, Function, UnaryOp};
use serde_json::json;

fn lit(ty: Type, value: Value) -> Expr {
    Expr {
        ty,
        kind: ExprKind::Literal { value },
    }
}
fn int(i: i64) -> Expr {
    lit(Type::Int, json!(i))
}
fn float(f: f64) -> Expr {
    lit(Type::Float, json!(f))
}
fn string(s: &str) -> Expr {
    lit(Type::String, json!(s))
}
fn boolean(b: bool) -> Expr {
    lit(Type::Bool, json!(b))
}
fn dur(ms: i64) -> Expr {
    lit(Type::Duration, json!(ms))
}
fn jsonv(v: Value) -> Expr {
    lit(Type::Json, v)
}
fn null(of: Type) -> Expr {
    lit(Type::Optional(Box::new(of)), Value::Null)
}
fn opt(t: Type) -> Type {
    Type::Optional(Box::new(t))
}
fn list_ty(t: Type) -> Type {
    Type::List(Box::new(t))
}
fn record_ty(fields: &[(&str, Type)]) -> Type {
    Type::Record(
        fields
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect(),
    )
}
fn bin(op: BinaryOp, ty: Type, l: Expr, r: Expr) -> Expr {
    Expr {
        ty,
        kind: ExprKind::Binary {
            op,
            left: Box::new(l),
            right: Box::new(r),
        },
    }
}
fn un(op: UnaryOp, ty: Type, x: Expr) -> Expr {
    Expr {
        ty,
        kind: ExprKind::Unary {
            op,
            operand: Box::new(x),
        },
    }
}
fn call(function: Function, ty: Type, args: Vec<Expr>) -> Expr {
    Expr {
        ty,
        kind: ExprKind::Call { function, args },
    }
}
fn member(ty: Type, base: Expr, field: &str) -> Expr {
    Expr {
        ty,
        kind: ExprKind::Member {
            base: Box::new(base),
            field: field.into(),
        },
    }
}
fn index(ty: Type, base: Expr, i: Expr) -> Expr {
    Expr {
        ty,
        kind: ExprKind::Index {
            base: Box::new(base),
            index: Box::new(i),
        },
    }
}
fn step(ty: Type, name: &str) -> Expr {
    Expr {
        ty,
        kind: ExprKind::Step { name: name.into() },
    }
}
fn var(ty: Type, name: &str) -> Expr {
    Expr {
        ty,
        kind: ExprKind::Var { name: name.into() },
    }
}
fn input(ty: Type) -> Expr {
    Expr {
        ty,
        kind: ExprKind::Input,
    }
}

struct World {
    input: Value,
    execution: Value,
    steps: BTreeMap<String, Value>,
    vars: BTreeMap<String, Value>,
}

impl World {
    fn new() -> World {
        let mut steps = BTreeMap::new();
        steps.insert(
            "charge".to_string(),
            json!({"transaction_id": "t-1", "amount": 250}),
        );
        steps.insert("skipped".to_string(), Value::Null);
        steps.insert(
            "approval".to_string(),
            json!({"ok": true, "n": 2, "s": "x", "f": 2.5, "list": [1, 2]}),
        );
        let mut vars = BTreeMap::new();
        vars.insert("item".to_string(), json!({"sku": "A-1", "qty": 3}));
        World {
            input: json!({"order_id": "o-42", "items": [{"sku": "A-1", "qty": 3}, {"sku": "B-2", "qty": 1}], "note": null}),
            execution: json!({"id": "e-1", "workflow": "Order", "version": "1.0.0"}),
            steps,
            vars,
        }
    }
    fn scope(&self) -> Scope<'_> {
        Scope {
            input: &self.input,
            execution: &self.execution,
            steps: &self.steps,
            vars: &self.vars,
        }
    }
}

fn run(e: &Expr) -> Result<Value, EvalError> {
    let w = World::new();
    evaluate(e, &w.scope())
}
fn ok(e: &Expr) -> Value {
    run(e).unwrap()
}
fn err(e: &Expr) -> EvalError {
    let error = run(e).unwrap_err();
    assert_eq!(error.code(), "EXPRESSION_ERROR");
    error
}

// ---- names and access ----

#[test]
fn names_read_the_scope() {
    assert_eq!(
        ok(&member(Type::String, input(Type::Json), "order_id")),
        json!("o-42")
    );
    let exec = Expr {
        ty: Type::Json,
        kind: ExprKind::Execution,
    };
    assert_eq!(ok(&member(Type::String, exec, "workflow")), json!("Order"));
    assert_eq!(
        ok(&member(
            Type::String,
            step(Type::Json, "charge"),
            "transaction_id"
        )),
        json!("t-1")
    );
    assert_eq!(
        ok(&member(Type::Int, var(Type::Json, "item"), "qty")),
        json!(3)
    );
    assert!(
        matches!(err(&step(Type::Json, "nope")), EvalError::Unbound { name } if name == "nope")
    );
    assert!(matches!(
        err(&var(Type::Json, "x")),
        EvalError::Unbound { .. }
    ));
}

#[test]
fn step_references_prefer_bound_variables_for_compensations() {
    let mut w = World::new();
    w.vars
        .insert("charge".into(), json!({"transaction_id": "t-element"}));
    let e = member(Type::String, step(Type::Json, "charge"), "transaction_id");
    assert_eq!(evaluate(&e, &w.scope()).unwrap(), json!("t-element"));
}

#[test]
fn member_access_propagates_null() {
    let rec = record_ty(&[("transaction_id", Type::String)]);
    let e = member(
        opt(Type::String),
        step(opt(rec), "skipped"),
        "transaction_id",
    );
    assert_eq!(ok(&e), Value::Null);
    // A missing field of a Json object reads as null.
    assert_eq!(
        ok(&member(Type::Json, step(Type::Json, "approval"), "absent")),
        Value::Null
    );
    // An omitted optional field reads as null.
    assert_eq!(
        ok(&member(opt(Type::String), input(Type::Json), "note")),
        Value::Null
    );
}

#[test]
fn member_access_on_a_non_record_json_is_an_error() {
    let e = member(
        Type::Json,
        member(Type::Json, step(Type::Json, "approval"), "s"),
        "x",
    );
    assert!(matches!(err(&e), EvalError::TypeMismatch { .. }));
    assert!(err(&e).to_string().contains("reading field `x`"));
}

#[test]
fn indexing_lists_and_json_objects() {
    let items = member(Type::Json, input(Type::Json), "items");
    let first = index(Type::Json, items.clone(), int(1));
    assert_eq!(ok(&member(Type::String, first, "sku")), json!("B-2"));
    assert!(matches!(
        err(&index(Type::Json, items.clone(), int(2))),
        EvalError::IndexOutOfRange { index: 2, len: 2 }
    ));
    assert!(matches!(
        err(&index(Type::Json, items.clone(), int(-1))),
        EvalError::IndexOutOfRange { index: -1, len: 2 }
    ));
    // A Json object may be indexed by a String key.
    let by_key = index(Type::Json, step(Type::Json, "charge"), string("amount"));
    assert_eq!(ok(&by_key), json!(250));
    assert_eq!(
        ok(&index(Type::Json, step(Type::Json, "charge"), string("zz"))),
        Value::Null
    );
    // Null base propagates; the index is not even evaluated.
    let boom = bin(BinaryOp::Div, Type::Int, int(1), int(0));
    assert_eq!(
        ok(&index(opt(Type::Int), null(list_ty(Type::Int)), boom)),
        Value::Null
    );
    // Indexing a string is not defined.
    assert!(matches!(
        err(&index(Type::Json, string("abc"), int(0))),
        EvalError::TypeMismatch { .. }
    ));
    // A Json index holding a fraction is not an Int; an integral one is.
    let e = index(Type::Json, items.clone(), jsonv(json!(0.5)));
    assert_eq!(err(&e).to_string(), "index: expected Int, found Float 0.5");
    let e = member(
        Type::Json,
        index(Type::Json, items, jsonv(json!(1.0))),
        "sku",
    );
    assert_eq!(ok(&e), json!("B-2"));
}

// ---- arithmetic ----

#[test]
fn int_arithmetic_is_checked() {
    assert_eq!(ok(&bin(BinaryOp::Add, Type::Int, int(2), int(3))), json!(5));
    assert_eq!(
        ok(&bin(BinaryOp::Sub, Type::Int, int(2), int(3))),
        json!(-1)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Mul, Type::Int, int(-4), int(3))),
        json!(-12)
    );
    assert_eq!(ok(&bin(BinaryOp::Div, Type::Int, int(7), int(2))), json!(3));
    assert_eq!(
        ok(&bin(BinaryOp::Div, Type::Int, int(-7), int(2))),
        json!(-3)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Rem, Type::Int, int(-7), int(2))),
        json!(-1)
    );
    assert_eq!(
        err(&bin(BinaryOp::Div, Type::Int, int(7), int(0))),
        EvalError::DivisionByZero
    );
    assert_eq!(
        err(&bin(BinaryOp::Rem, Type::Int, int(7), int(0))),
        EvalError::DivisionByZero
    );
    for e in [
        bin(BinaryOp::Add, Type::Int, int(i64::MAX), int(1)),
        bin(BinaryOp::Sub, Type::Int, int(i64::MIN), int(1)),
        bin(BinaryOp::Mul, Type::Int, int(i64::MAX), int(2)),
        bin(BinaryOp::Div, Type::Int, int(i64::MIN), int(-1)),
        un(UnaryOp::Neg, Type::Int, int(i64::MIN)),
    ] {
        let e = err(&e);
        assert!(matches!(e, EvalError::Overflow { .. }), "{e}");
    }
    assert_eq!(
        err(&bin(BinaryOp::Add, Type::Int, int(i64::MAX), int(1))).to_string(),
        "Int overflow in 9223372036854775807 + 1"
    );
    assert_eq!(ok(&un(UnaryOp::Neg, Type::Int, int(5))), json!(-5));
}

#[test]
fn float_arithmetic_stays_finite() {
    assert_eq!(
        ok(&bin(BinaryOp::Div, Type::Float, float(1.0), float(4.0))),
        json!(0.25)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Add, Type::Float, float(0.5), int(1))),
        json!(1.5)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Rem, Type::Float, float(5.5), float(2.0))),
        json!(1.5)
    );
    assert_eq!(
        err(&bin(BinaryOp::Div, Type::Float, float(1.0), float(0.0))),
        EvalError::DivisionByZero
    );
    assert!(matches!(
        err(&bin(BinaryOp::Mul, Type::Float, float(1e308), float(10.0))),
        EvalError::NotFinite { .. }
    ));
    assert_eq!(ok(&un(UnaryOp::Neg, Type::Float, float(2.5))), json!(-2.5));
}

#[test]
fn durations_are_milliseconds() {
    assert_eq!(
        ok(&bin(BinaryOp::Add, Type::Duration, dur(1_000), dur(500))),
        json!(1_500)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Sub, Type::Duration, dur(1_000), dur(1_500))),
        json!(-500)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Mul, Type::Duration, dur(1_000), int(3))),
        json!(3_000)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Mul, Type::Duration, int(3), dur(1_000))),
        json!(3_000)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Mul, Type::Duration, dur(1_000), float(1.5))),
        json!(1_500)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Div, Type::Duration, dur(1_000), int(3))),
        json!(333)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Div, Type::Int, dur(3_000), dur(1_000))),
        json!(3)
    );
    assert_eq!(
        err(&bin(BinaryOp::Div, Type::Duration, dur(1_000), int(0))),
        EvalError::DivisionByZero
    );
    assert!(matches!(
        err(&bin(BinaryOp::Mul, Type::Duration, dur(i64::MAX), int(2))),
        EvalError::Overflow { .. }
    ));
    assert_eq!(
        err(&bin(BinaryOp::Add, Type::Duration, dur(1), int(2))),
        EvalError::UndefinedOperator {
            operator: "+",
            left: "Duration",
            right: "Int"
        }
    );
}

#[test]
fn plus_concatenates_strings_and_lists() {
    assert_eq!(
        ok(&bin(
            BinaryOp::Add,
            Type::String,
            string("charge-"),
            string("o-42")
        )),
        json!("charge-o-42")
    );
    let l = lit(list_ty(Type::Int), json!([1, 2]));
    let r = lit(list_ty(Type::Int), json!([3]));
    assert_eq!(
        ok(&bin(BinaryOp::Add, list_ty(Type::Int), l, r)),
        json!([1, 2, 3])
    );
    let e = bin(
        BinaryOp::Add,
        Type::Json,
        jsonv(json!("a")),
        jsonv(json!(1)),
    );
    assert_eq!(
        err(&e).to_string(),
        "operator + is not defined for String and Int"
    );
}

#[test]
fn null_operands_are_errors_for_arithmetic() {
    let e = bin(
        BinaryOp::Add,
        Type::Json,
        jsonv(Value::Null),
        jsonv(json!(1)),
    );
    assert_eq!(
        err(&e).to_string(),
        "operator + is not defined for null and Int"
    );
}

// ---- comparisons and logic ----

#[test]
fn comparisons_on_numbers_strings_and_durations() {
    let cases = [
        (bin(BinaryOp::Lt, Type::Bool, int(1), int(2)), true),
        (bin(BinaryOp::Le, Type::Bool, int(2), int(2)), true),
        (bin(BinaryOp::Gt, Type::Bool, float(2.5), int(2)), true),
        (bin(BinaryOp::Ge, Type::Bool, int(2), float(2.5)), false),
        (
            bin(BinaryOp::Lt, Type::Bool, string("apple"), string("banana")),
            true,
        ),
        (
            bin(BinaryOp::Gt, Type::Bool, string("b"), string("abc")),
            true,
        ),
        (bin(BinaryOp::Lt, Type::Bool, dur(999), dur(1_000)), true),
        (
            bin(BinaryOp::Ge, Type::Bool, jsonv(json!(1_500)), dur(1_000)),
            true,
        ),
    ];
    for (e, expected) in cases {
        assert_eq!(ok(&e), json!(expected), "{e:?}");
    }
    assert!(matches!(
        err(&bin(
            BinaryOp::Lt,
            Type::Bool,
            boolean(true),
            boolean(false)
        )),
        EvalError::UndefinedOperator { .. }
    ));
    assert_eq!(
        err(&bin(BinaryOp::Lt, Type::Bool, jsonv(json!("1")), int(2))).to_string(),
        "operator < is not defined for String and Int"
    );
}

#[test]
fn equality_is_structural() {
    let a = lit(Type::Json, json!({"a": [1, {"b": null}], "c": "x"}));
    let b = lit(Type::Json, json!({"c": "x", "a": [1.0, {"b": null}]}));
    assert_eq!(
        ok(&bin(BinaryOp::Eq, Type::Bool, a.clone(), b.clone())),
        json!(true)
    );
    assert_eq!(ok(&bin(BinaryOp::Ne, Type::Bool, a, b)), json!(false));
    assert_eq!(
        ok(&bin(
            BinaryOp::Eq,
            Type::Bool,
            null(Type::Int),
            null(Type::Int)
        )),
        json!(true)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Eq, Type::Bool, null(Type::Int), int(0))),
        json!(false)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Ne, Type::Bool, string("a"), string("b"))),
        json!(true)
    );
}

#[test]
fn and_or_short_circuit() {
    let boom = bin(
        BinaryOp::Eq,
        Type::Bool,
        bin(BinaryOp::Div, Type::Int, int(1), int(0)),
        int(1),
    );
    assert_eq!(
        ok(&bin(
            BinaryOp::And,
            Type::Bool,
            boolean(false),
            boom.clone()
        )),
        json!(false)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Or, Type::Bool, boolean(true), boom.clone())),
        json!(true)
    );
    assert_eq!(
        err(&bin(BinaryOp::And, Type::Bool, boolean(true), boom.clone())),
        EvalError::DivisionByZero
    );
    assert_eq!(
        ok(&bin(
            BinaryOp::And,
            Type::Bool,
            boolean(true),
            boolean(false)
        )),
        json!(false)
    );
    assert_eq!(
        ok(&bin(
            BinaryOp::Or,
            Type::Bool,
            boolean(false),
            boolean(true)
        )),
        json!(true)
    );
    assert_eq!(
        ok(&un(UnaryOp::Not, Type::Bool, boolean(false))),
        json!(true)
    );
    // A Json condition must hold a Bool.
    let e = bin(
        BinaryOp::And,
        Type::Bool,
        jsonv(json!("yes")),
        boolean(true),
    );
    assert!(matches!(err(&e), EvalError::TypeMismatch { .. }));
}

#[test]
fn coalesce_takes_the_right_side_only_for_null() {
    let boom = bin(BinaryOp::Div, Type::Int, int(1), int(0));
    assert_eq!(
        ok(&bin(BinaryOp::Coalesce, Type::Int, int(4), boom)),
        json!(4)
    );
    let e = bin(BinaryOp::Coalesce, Type::Int, null(Type::Int), int(7));
    assert_eq!(ok(&e), json!(7));
    let e = bin(
        BinaryOp::Coalesce,
        Type::String,
        member(
            opt(Type::String),
            step(
                opt(record_ty(&[("transaction_id", Type::String)])),
                "skipped",
            ),
            "transaction_id",
        ),
        string("none"),
    );
    assert_eq!(ok(&e), json!("none"));
}

// ---- Json checked at use ----

#[test]
fn json_used_as_a_concrete_type_is_checked() {
    let n = member(Type::Json, step(Type::Json, "approval"), "n");
    let s = member(Type::Json, step(Type::Json, "approval"), "s");
    let f = member(Type::Json, step(Type::Json, "approval"), "f");
    // Typed Json arithmetic reads by value: 2.5 + 1 is 3.5.
    assert_eq!(
        ok(&bin(BinaryOp::Add, Type::Json, f.clone(), int(1))),
        json!(3.5)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Div, Type::Json, n.clone(), int(4))),
        json!(0)
    );
    // Comparisons read a Json number by value too.
    assert_eq!(
        ok(&bin(BinaryOp::Gt, Type::Bool, f.clone(), int(2))),
        json!(true)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Lt, Type::Bool, int(2), f.clone())),
        json!(true)
    );
    // Json next to an Int where the compiler typed the result Int: integer arithmetic.
    assert_eq!(
        ok(&bin(BinaryOp::Div, Type::Int, int(7), n.clone())),
        json!(3)
    );
    assert_eq!(
        ok(&bin(BinaryOp::Add, Type::Int, n.clone(), int(1))),
        json!(3)
    );
    // A Json string where an Int is required.
    let e = err(&bin(BinaryOp::Add, Type::Int, s.clone(), int(1)));
    assert_eq!(e.to_string(), "operand of +: expected Int, found String");
    // A Json float where an Int is required.
    assert!(matches!(
        err(&bin(BinaryOp::Add, Type::Int, f, int(1))),
        EvalError::TypeMismatch { .. }
    ));
    // Json flowing into a typed member access is checked against its type.
    let typed = member(Type::Int, step(Type::Json, "approval"), "s");
    let e = err(&typed);
    assert!(matches!(e, EvalError::Contract(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "value does not match its type: expected Int, found String"
    );
    // ... and normalized when it fits.
    let typed = member(Type::Int, jsonv(json!({"n": 2.0})), "n");
    assert_eq!(ok(&typed), json!(2));
    // A record built from Json fields is checked field by field.
    let rec = Expr {
        ty: record_ty(&[("amount", Type::Int)]),
        kind: ExprKind::Record {
            fields: vec![("amount".into(), s)],
        },
    };
    assert_eq!(
        err(&rec).to_string(),
        "value does not match its type: amount: expected Int, found String"
    );
    let _ = n;
}

#[test]
fn json_coalesced_with_null_is_not_checked_against_the_null_type() {
    let e = bin(
        BinaryOp::Coalesce,
        Type::Null,
        jsonv(json!("x")),
        lit(Type::Null, Value::Null),
    );
    assert_eq!(ok(&e), json!("x"));
}

#[test]
fn evaluate_as_checks_against_a_contract() {
    let w = World::new();
    let rec = Expr {
        ty: record_ty(&[("amount", Type::Json)]),
        kind: ExprKind::Record {
            fields: vec![("amount".into(), jsonv(json!("ten")))],
        },
    };
    let contract = record_ty(&[("amount", Type::Int)]);
    let e = evaluate_as(&rec, &contract, &w.scope()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "value does not match its type: amount: expected Int, found String"
    );
    let fine = Expr {
        ty: record_ty(&[("amount", Type::Json)]),
        kind: ExprKind::Record {
            fields: vec![("amount".into(), jsonv(json!(1e3)))],
        },
    };
    assert_eq!(
        evaluate_as(&fine, &contract, &w.scope()).unwrap(),
        json!({"amount": 1000})
    );
}

// ---- literals, lists, records ----

#[test]
fn lists_and_records_evaluate_their_parts() {
    let e = Expr {
        ty: record_ty(&[("order_id", Type::String), ("items", list_ty(Type::Json))]),
        kind: ExprKind::Record {
            fields: vec![
                (
                    "order_id".into(),
                    member(Type::String, input(Type::Json), "order_id"),
                ),
                (
                    "items".into(),
                    Expr {
                        ty: list_ty(Type::Json),
                        kind: ExprKind::List {
                            items: vec![var(Type::Json, "item")],
                        },
                    },
                ),
            ],
        },
    };
    assert_eq!(
        ok(&e),
        json!({"order_id": "o-42", "items": [{"sku": "A-1", "qty": 3}]})
    );
}

#[test]
fn deep_paths_fail_cleanly_too() {
    let mut e = input(Type::Json);
    for _ in 0..(DEPTH_LIMIT + 10) {
        e = member(Type::Json, e, "x");
    }
    assert_eq!(err(&e), EvalError::TooDeep { limit: DEPTH_LIMIT });
    let mut e = input(Type::Json);
    for _ in 0..10 {
        e = member(Type::Json, e, "x");
    }
    assert_eq!(ok(&e), Value::Null);
}

#[test]
fn paths_check_typed_links_fed_by_json() {
    // `input` is Json here; a link typed Int is checked (and normalized).
    let w = World {
        input: json!({"n": 2.0, "s": "x"}),
        ..World::new()
    };
    let e = member(Type::Int, input(Type::Json), "n");
    assert_eq!(evaluate(&e, &w.scope()).unwrap(), json!(2));
    assert!(evaluate(&e, &w.scope()).unwrap().is_i64());
    let e = member(Type::Int, input(Type::Json), "s");
    assert!(matches!(
        evaluate(&e, &w.scope()),
        Err(EvalError::Contract(_))
    ));
    // An inner typed link is checked even when the outer one is Json.
    let inner = member(record_ty(&[("a", Type::Int)]), input(Type::Json), "s");
    let e = member(Type::Json, inner, "a");
    assert!(matches!(
        evaluate(&e, &w.scope()),
        Err(EvalError::Contract(_))
    ));
}

#[test]
fn deeply_nested_expressions_fail_cleanly() {
    let mut e = int(1);
    for _ in 0..(DEPTH_LIMIT + 10) {
        e = un(UnaryOp::Neg, Type::Int, e);
    }
    assert_eq!(err(&e), EvalError::TooDeep { limit: DEPTH_LIMIT });
}

// ---- functions ----

#[test]
fn string_formats_every_type() {
    let s = |e: Expr| ok(&call(Function::String, Type::String, vec![e]));
    assert_eq!(s(string("x")), json!("x"));
    assert_eq!(s(int(-12)), json!("-12"));
    assert_eq!(s(float(0.1)), json!("0.1"));
    assert_eq!(s(float(2.0)), json!("2.0"));
    assert_eq!(s(lit(Type::Float, json!(2))), json!("2.0"));
    assert_eq!(s(float(1e21)), json!("1e21"));
    assert_eq!(s(dur(1_500)), json!("1500ms"));
    assert_eq!(s(boolean(true)), json!("true"));
    assert_eq!(s(null(Type::Int)), json!("null"));
    assert_eq!(s(jsonv(json!("raw"))), json!("raw"));
    assert_eq!(s(jsonv(json!(7))), json!("7"));
    assert_eq!(
        s(lit(
            record_ty(&[("b", Type::Int), ("a", Type::String)]),
            json!({"b": 1, "a": "x y"})
        )),
        json!(r#"{"a":"x y","b":1}"#)
    );
    assert_eq!(
        s(lit(list_ty(Type::Json), json!([{"z": 1, "y": [true]}]))),
        json!(r#"[{"y":[true],"z":1}]"#)
    );
}

#[test]
fn int_and_float_conversions() {
    let i = |e: Expr| run(&call(Function::Int, Type::Int, vec![e]));
    assert_eq!(i(float(2.9)).unwrap(), json!(2));
    assert_eq!(i(float(-2.9)).unwrap(), json!(-2));
    assert_eq!(i(string("-17")).unwrap(), json!(-17));
    assert_eq!(i(string("+17")).unwrap(), json!(17));
    assert_eq!(i(dur(1_500)).unwrap(), json!(1_500));
    assert_eq!(
        i(jsonv(json!(true))).unwrap_err().to_string(),
        "cannot convert true to Int"
    );
    assert_eq!(i(int(5)).unwrap(), json!(5));
    assert_eq!(i(jsonv(json!("12"))).unwrap(), json!(12));
    assert!(matches!(
        i(string("1.5")),
        Err(EvalError::Conversion { target: "Int", .. })
    ));
    assert!(matches!(i(string(" 1")), Err(EvalError::Conversion { .. })));
    assert!(matches!(i(float(1e300)), Err(EvalError::Conversion { .. })));
    assert_eq!(
        i(string("abc")).unwrap_err().to_string(),
        "cannot convert \"abc\" to Int"
    );
    let f = |e: Expr| run(&call(Function::Float, Type::Float, vec![e]));
    assert_eq!(f(int(3)).unwrap(), json!(3.0));
    assert_eq!(f(string("2.5")).unwrap(), json!(2.5));
    assert_eq!(f(dur(250)).unwrap(), json!(250.0));
    assert!(matches!(
        f(string("NaN")),
        Err(EvalError::Conversion { .. })
    ));
    assert!(matches!(
        f(string("inf")),
        Err(EvalError::Conversion { .. })
    ));
    assert!(matches!(f(string("x")), Err(EvalError::Conversion { .. })));
    assert!(matches!(
        f(string(" 2.5")),
        Err(EvalError::Conversion { .. })
    ));
    assert!(matches!(
        f(jsonv(json!(false))),
        Err(EvalError::Conversion { .. })
    ));
}

#[test]
fn len_keys_contains_lower_upper() {
    assert_eq!(
        ok(&call(Function::Len, Type::Int, vec![string("héllo")])),
        json!(5)
    );
    assert_eq!(
        ok(&call(
            Function::Len,
            Type::Int,
            vec![lit(list_ty(Type::Int), json!([1, 2, 3]))]
        )),
        json!(3)
    );
    assert_eq!(
        ok(&call(
            Function::Len,
            Type::Int,
            vec![jsonv(json!({"a": 1}))]
        )),
        json!(1)
    );
    assert!(matches!(
        err(&call(Function::Len, Type::Int, vec![int(3)])),
        EvalError::TypeMismatch { .. }
    ));
    let keys = call(
        Function::Keys,
        list_ty(Type::String),
        vec![lit(
            record_ty(&[]),
            json!({"zeta": 1, "alpha": 2, "mid": 3}),
        )],
    );
    assert_eq!(ok(&keys), json!(["alpha", "mid", "zeta"]));
    let c = |a: Expr, b: Expr| ok(&call(Function::Contains, Type::Bool, vec![a, b]));
    assert_eq!(
        c(lit(list_ty(Type::Int), json!([1, 2])), int(2)),
        json!(true)
    );
    assert_eq!(
        c(lit(list_ty(Type::Int), json!([1, 2])), int(3)),
        json!(false)
    );
    assert_eq!(
        c(jsonv(json!([{"a": 1}])), jsonv(json!({"a": 1.0}))),
        json!(true)
    );
    assert_eq!(c(string("order-42"), string("42")), json!(true));
    assert_eq!(c(string("order-42"), string("43")), json!(false));
    assert!(matches!(
        err(&call(Function::Contains, Type::Bool, vec![int(1), int(1)])),
        EvalError::TypeMismatch { .. }
    ));
    assert_eq!(
        ok(&call(Function::Lower, Type::String, vec![string("ÀbC")])),
        json!("àbc")
    );
    assert_eq!(
        ok(&call(Function::Upper, Type::String, vec![string("straße")])),
        json!("STRASSE")
    );
}

#[test]
fn json_seconds_millis() {
    assert_eq!(
        ok(&call(
            Function::Json,
            Type::Json,
            vec![lit(record_ty(&[]), json!({"a": 1}))]
        )),
        json!({"a": 1})
    );
    assert_eq!(
        ok(&call(Function::Seconds, Type::Duration, vec![int(3)])),
        json!(3_000)
    );
    assert_eq!(
        ok(&call(Function::Millis, Type::Duration, vec![int(250)])),
        json!(250)
    );
    assert!(matches!(
        err(&call(
            Function::Seconds,
            Type::Duration,
            vec![int(i64::MAX)]
        )),
        EvalError::Overflow { .. }
    ));
    assert!(matches!(
        err(&call(
            Function::Seconds,
            Type::Duration,
            vec![jsonv(json!(1.5))]
        )),
        EvalError::TypeMismatch { .. }
    ));
    // seconds(n) of a Duration used in string().
    let d = call(Function::Seconds, Type::Duration, vec![int(2)]);
    assert_eq!(
        ok(&call(Function::String, Type::String, vec![d])),
        json!("2000ms")
    );
}

#[test]
fn wrong_arity_is_an_error_not_a_panic() {
    assert!(matches!(
        err(&call(Function::Contains, Type::Bool, vec![int(1)])),
        EvalError::TypeMismatch { .. }
    ));
    assert!(matches!(
        err(&call(Function::String, Type::String, vec![])),
        EvalError::TypeMismatch { .. }
    ));
}

// ---- contracts ----

fn item_ty() -> Type {
    record_ty(&[("sku", Type::String), ("qty", Type::Int)])
}

#[test]
fn check_value_normalizes_numbers() {
    assert_eq!(check_value(&Type::Int, &json!(1.0)).unwrap(), json!(1));
    assert!(check_value(&Type::Int, &json!(1.0)).unwrap().is_i64());
    assert_eq!(check_value(&Type::Int, &json!(1e3)).unwrap(), json!(1000));
    assert_eq!(
        check_value(&Type::Duration, &json!(1500.0)).unwrap(),
        json!(1500)
    );
    let f = check_value(&Type::Float, &json!(2)).unwrap();
    assert!(f.is_f64());
    assert_eq!(f, json!(2.0));
    assert!(check_value(&Type::Int, &json!(1.5)).is_err());
    assert!(check_value(&Type::Int, &json!(u64::MAX)).is_err());
    assert_eq!(
        check_value(&Type::Json, &json!({"x": [1.0]})).unwrap(),
        json!({"x": [1.0]})
    );
}

#[test]
fn violations_name_the_path() {
    let ty = record_ty(&[("order_id", Type::String), ("items", list_ty(item_ty()))]);
    let v = json!({"order_id": "o", "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}, {"sku": "c", "qty": "3"}]});
    let e = check_value_at("input", &ty, &v).unwrap_err();
    assert_eq!(e.path, "input.items[2].qty");
    assert_eq!(
        e.to_string(),
        "input.items[2].qty: expected Int, found String"
    );
    let e = check_value(&ty, &json!({"items": []})).unwrap_err();
    assert_eq!(
        e.to_string(),
        "order_id: missing required field of type String"
    );
    let e = check_value(&ty, &json!([])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "value: expected { items: [{ qty: Int, sku: String }], order_id: String }, found list"
    );
    let e = check_value_at("output", &list_ty(Type::Int), &json!([1, null])).unwrap_err();
    assert_eq!(e.to_string(), "output[1]: expected Int, found null");
    let e = check_value(&Type::Int, &json!(2.5)).unwrap_err();
    assert_eq!(e.to_string(), "value: expected Int, found Float 2.5");
}

#[test]
fn records_keep_extra_fields_and_fill_omitted_optionals() {
    let ty = record_ty(&[
        ("id", Type::String),
        ("note", opt(Type::String)),
        ("raw", Type::Json),
    ]);
    let out = check_value(
        &ty,
        &json!({"id": "x", "extra": {"kept": true}, "raw": null}),
    )
    .unwrap();
    assert_eq!(
        out,
        json!({"id": "x", "extra": {"kept": true}, "note": null, "raw": null})
    );
    // A present optional is checked.
    assert!(check_value(&ty, &json!({"id": "x", "note": 3, "raw": 1})).is_err());
    // A Json field may be null or absent (it then reads as null).
    let out = check_value(&ty, &json!({"id": "x"})).unwrap();
    assert_eq!(out, json!({"id": "x", "note": null, "raw": null}));
    // A required field may not.
    let e = check_value(&ty, &json!({"note": "n"})).unwrap_err();
    assert_eq!(e.path, "id");
    // Null is not a String.
    assert!(check_value(&ty, &json!({"id": null, "raw": 1})).is_err());
    // Empty record accepts any object, and only objects.
    assert!(check_value(&record_ty(&[]), &json!({"anything": 1})).is_ok());
    assert!(check_value(&record_ty(&[]), &json!(1)).is_err());
}

#[test]
fn check_value_handles_nested_optionals_and_lists() {
    let ty = opt(list_ty(opt(Type::Int)));
    assert_eq!(check_value(&ty, &Value::Null).unwrap(), Value::Null);
    assert_eq!(
        check_value(&ty, &json!([1.0, null])).unwrap(),
        json!([1, null])
    );
    assert!(check_value(&ty, &json!([true])).is_err());
    assert!(check_value(&Type::Null, &json!(0)).is_err());
    assert!(check_value(&Type::Bool, &json!("true")).is_err());
}

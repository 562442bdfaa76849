//! Property tests: canonical text is independent of key order, checking a
//! value against its contract is idempotent (and `conforms` agrees with
//! it), and evaluation never panics,
//! whatever (even ill-typed) expression and values it is given.

#![allow(clippy::unwrap_used)]

use super::*;
use proptest::prelude::*;
use serde_json::json;

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        "[a-z\"\\\\ é]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-d]{1,2}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn arb_type() -> impl Strategy<Value = Type> {
    let leaf = prop_oneof![
        Just(Type::String),
        Just(Type::Int),
        Just(Type::Float),
        Just(Type::Bool),
        Just(Type::Duration),
        Just(Type::Json),
    ];
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|t| Type::List(Box::new(t))),
            inner.clone().prop_map(|t| Type::Optional(Box::new(t))),
            prop::collection::btree_map("[a-d]{1,2}", inner, 0..3).prop_map(Type::Record),
        ]
    })
}

/// Reverses the key order of every object (serde_json maps may or may not
/// preserve insertion order; either way the canonical text must not move).
fn reorder(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(reorder).collect()),
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> =
                map.iter().map(|(k, v)| (k.clone(), reorder(v))).collect();
            entries.reverse();
            Value::Object(entries.into_iter().collect())
        }
        other => other.clone(),
    }
}

fn string_of(v: &Value) -> Value {
    let expr = Expr {
        ty: Type::String,
        kind: ExprKind::Call {
            function: crate::ir::Function::String,
            args: vec![Expr {
                ty: Type::Json,
                kind: ExprKind::Literal { value: v.clone() },
            }],
        },
    };
    let steps = BTreeMap::new();
    let scope = Scope {
        input: &Value::Null,
        execution: &Value::Null,
        steps: &steps,
        vars: &steps,
    };
    evaluate(&expr, &scope).unwrap()
}

fn arb_expr() -> impl Strategy<Value = Expr> {
    use crate::ir::{BinaryOp as B, Function as F, UnaryOp as U};
    let leaf = prop_oneof![
        (arb_type(), arb_json()).prop_map(|(ty, value)| Expr {
            ty,
            kind: ExprKind::Literal { value },
        }),
        arb_type().prop_map(|ty| Expr {
            ty,
            kind: ExprKind::Input,
        }),
        (arb_type(), "[a-c]").prop_map(|(ty, name)| Expr {
            ty,
            kind: ExprKind::Step { name },
        }),
        (arb_type(), "[a-c]").prop_map(|(ty, name)| Expr {
            ty,
            kind: ExprKind::Var { name },
        }),
    ];
    let binary = prop::sample::select(vec![
        B::Mul,
        B::Div,
        B::Rem,
        B::Add,
        B::Sub,
        B::Eq,
        B::Ne,
        B::Lt,
        B::Le,
        B::Gt,
        B::Ge,
        B::And,
        B::Or,
        B::Coalesce,
    ]);
    let function = prop::sample::select(vec![
        F::String,
        F::Int,
        F::Float,
        F::Len,
        F::Keys,
        F::Contains,
        F::Lower,
        F::Upper,
        F::Json,
        F::Seconds,
        F::Millis,
    ]);
    leaf.prop_recursive(4, 32, 3, move |inner| {
        prop_oneof![
            (arb_type(), inner.clone(), "[a-d]").prop_map(|(ty, base, field)| Expr {
                ty,
                kind: ExprKind::Member {
                    base: Box::new(base),
                    field
                },
            }),
            (arb_type(), inner.clone(), inner.clone()).prop_map(|(ty, base, index)| Expr {
                ty,
                kind: ExprKind::Index {
                    base: Box::new(base),
                    index: Box::new(index)
                },
            }),
            (arb_type(), any::<bool>(), inner.clone()).prop_map(|(ty, not, operand)| Expr {
                ty,
                kind: ExprKind::Unary {
                    op: if not { U::Not } else { U::Neg },
                    operand: Box::new(operand),
                },
            }),
            (arb_type(), binary.clone(), inner.clone(), inner.clone()).prop_map(
                |(ty, op, left, right)| Expr {
                    ty,
                    kind: ExprKind::Binary {
                        op,
                        left: Box::new(left),
                        right: Box::new(right)
                    },
                }
            ),
            (
                arb_type(),
                function.clone(),
                prop::collection::vec(inner.clone(), 0..3)
            )
                .prop_map(|(ty, function, args)| Expr {
                    ty,
                    kind: ExprKind::Call { function, args }
                }),
            (arb_type(), prop::collection::vec(inner.clone(), 0..3)).prop_map(|(ty, items)| Expr {
                ty,
                kind: ExprKind::List { items }
            }),
            (arb_type(), prop::collection::vec(("[a-d]", inner), 0..3)).prop_map(|(ty, fields)| {
                Expr {
                    ty,
                    kind: ExprKind::Record { fields },
                }
            }),
        ]
    })
}

/// A chain of member accesses and indexing over `root`.
fn path_over(root: Expr, links: &[(bool, String, i64)]) -> Expr {
    links.iter().fold(root, |base, (is_member, field, i)| {
        let kind = if *is_member {
            ExprKind::Member {
                base: Box::new(base),
                field: field.clone(),
            }
        } else {
            ExprKind::Index {
                base: Box::new(base),
                index: Box::new(Expr {
                    ty: Type::Int,
                    kind: ExprKind::Literal { value: json!(i) },
                }),
            }
        };
        Expr {
            ty: Type::Json,
            kind,
        }
    })
}

proptest! {
    #[test]
    fn paths_into_the_scope_evaluate_like_paths_into_a_literal(
        v in arb_json(),
        links in prop::collection::vec((any::<bool>(), "[a-d]{1,2}", -1i64..4), 0..5),
    ) {
        let borrowed = path_over(Expr { ty: Type::Json, kind: ExprKind::Input }, &links);
        let owned = path_over(Expr { ty: Type::Json, kind: ExprKind::Literal { value: v.clone() } }, &links);
        let steps = BTreeMap::new();
        let scope = Scope { input: &v, execution: &Value::Null, steps: &steps, vars: &steps };
        prop_assert_eq!(evaluate(&borrowed, &scope), evaluate(&owned, &scope));
    }

    #[test]
    fn float_text_reads_back_exactly_and_looks_like_a_float(
        f in any::<f64>().prop_filter("finite", |f| f.is_finite())
    ) {
        let text = format_float(f);
        prop_assert_eq!(text.parse::<f64>().unwrap(), f);
        let back: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(back.as_f64(), Some(f));
        prop_assert!(text.contains('.') || text.contains('e'), "{}", text);
        prop_assert!(!text.contains('+'), "{}", text);
    }

    #[test]
    fn evaluation_never_panics(
        expr in arb_expr(),
        input in arb_json(),
        steps in prop::collection::btree_map("[a-c]", arb_json(), 0..3),
        vars in prop::collection::btree_map("[a-c]", arb_json(), 0..3),
    ) {
        let scope = Scope { input: &input, execution: &Value::Null, steps: &steps, vars: &vars };
        if let Err(e) = evaluate(&expr, &scope) {
            prop_assert_eq!(e.code(), EXPRESSION_ERROR);
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn string_of_a_record_is_stable_under_key_order(v in arb_json()) {
        prop_assert_eq!(string_of(&v), string_of(&reorder(&v)));
        prop_assert_eq!(canonical_json(&v), canonical_json(&reorder(&v)));
    }

    #[test]
    fn canonical_json_reads_back_to_an_equal_value(v in arb_json()) {
        let text = canonical_json(&v);
        let back: Value = serde_json::from_str(&text).unwrap();
        prop_assert!(values_equal(&back, &v));
        prop_assert!(!text.contains(": ") && !text.contains(", "));
    }

    #[test]
    fn conforms_agrees_with_check_value(ty in arb_type(), v in arb_json()) {
        prop_assert_eq!(conforms(&ty, &v), check_value(&ty, &v).is_ok());
    }

    #[test]
    fn check_value_is_idempotent(ty in arb_type(), v in arb_json()) {
        if let Ok(once) = check_value(&ty, &v) {
            let twice = check_value(&ty, &once).unwrap();
            prop_assert_eq!(&twice, &once);
            prop_assert_eq!(canonical_json(&twice), canonical_json(&once));
        }
    }

    #[test]
    fn check_value_accepts_what_it_produces_for_matching_shapes(
        items in prop::collection::vec((any::<i32>(), "[a-z]{0,5}"), 0..5)
    ) {
        let ty = Type::List(Box::new(Type::Record(
            [("qty".to_string(), Type::Int), ("sku".to_string(), Type::String)].into_iter().collect(),
        )));
        let v = Value::Array(items.iter().map(|(q, s)| json!({"qty": f64::from(*q), "sku": s})).collect());
        let out = check_value(&ty, &v).unwrap();
        for (got, (q, _)) in out.as_array().unwrap().iter().zip(&items) {
            prop_assert_eq!(got["qty"].as_i64(), Some(i64::from(*q)));
        }
    }

    #[test]
    fn int_arithmetic_matches_checked_i64(a in any::<i64>(), b in any::<i64>()) {
        let lit = |i: i64| Expr { ty: Type::Int, kind: ExprKind::Literal { value: json!(i) } };
        let steps = BTreeMap::new();
        let scope = Scope { input: &Value::Null, execution: &Value::Null, steps: &steps, vars: &steps };
        for (op, expected) in [
            (crate::ir::BinaryOp::Add, a.checked_add(b)),
            (crate::ir::BinaryOp::Sub, a.checked_sub(b)),
            (crate::ir::BinaryOp::Mul, a.checked_mul(b)),
            (crate::ir::BinaryOp::Div, a.checked_div(b)),
        ] {
            let e = Expr { ty: Type::Int, kind: ExprKind::Binary { op, left: Box::new(lit(a)), right: Box::new(lit(b)) } };
            match (evaluate(&e, &scope), expected) {
                (Ok(v), Some(x)) => prop_assert_eq!(v, json!(x)),
                (Err(_), None) => {}
                (got, want) => prop_assert!(false, "{:?} {} {}: got {:?}, want {:?}", op, a, b, got, want),
            }
        }
    }
}

//! The definition hash: a golden value for examples/order.orbit, and what
//! does and does not change it.
#![allow(clippy::unwrap_used)]

use orbit_core::{compile, Compiled, Source};

const ORDER: &str = include_str!("../../examples/order.orbit");

fn build(files: &[(&str, &str)]) -> Compiled {
    let sources: Vec<Source> = files
        .iter()
        .map(|(n, t)| Source {
            name: n.to_string(),
            text: t.to_string(),
        })
        .collect();
    compile(&sources, &|_, _| None)
}

fn hashes(files: &[(&str, &str)]) -> Vec<(String, String)> {
    let compiled = build(files);
    assert!(
        compiled.diagnostics.is_empty(),
        "{:#?}",
        compiled.diagnostics
    );
    let mut out: Vec<(String, String)> = compiled
        .definitions
        .iter()
        .map(|d| (d.workflow.name.clone(), d.hash.clone()))
        .collect();
    out.sort();
    out
}

#[test]
fn order_example_compiles_with_children_first() {
    let compiled = build(&[("order.orbit", ORDER)]);
    assert!(
        compiled.diagnostics.is_empty(),
        "{:#?}",
        compiled.diagnostics
    );
    let names: Vec<&str> = compiled
        .definitions
        .iter()
        .map(|d| d.workflow.name.as_str())
        .collect();
    assert_eq!(names, ["Shipping", "Order"]);
    assert_eq!(compiled.tasks.len(), 6);
}

/// Pinned: a change here means the canonical encoding or the IR changed,
/// which changes the identity of every deployed definition. Update it only
/// on purpose.
#[test]
fn golden_hash_of_order_example() {
    let h = hashes(&[("order.orbit", ORDER)]);
    assert_eq!(
        h,
        [
            (
                "Order".to_string(),
                "55cf8e0325dbc3de175673a0270d53e02f9eccd3b62fc4a53b12d55f04070d75".to_string()
            ),
            (
                "Shipping".to_string(),
                "e83d79f506333e136d7ede84e68a9bdb97c2c486aee536e81c49b68e79decf07".to_string()
            ),
        ]
    );
}

#[test]
fn definition_hash_matches_the_stored_hash() {
    let compiled = build(&[("order.orbit", ORDER)]);
    for d in &compiled.definitions {
        assert_eq!(orbit_core::definition_hash(&d.workflow), d.hash);
        assert_eq!(d.hash.len(), 64);
    }
}

#[test]
fn reformatting_and_comments_do_not_change_the_hash() {
    let reformatted: String = ORDER
        .lines()
        .map(|l| format!("   {}   // a comment\n\n", l.trim()))
        .collect::<String>()
        .replace(
            "{ order_id: input.order_id }",
            "{\n  order_id:\n  input.order_id,\n}",
        );
    assert_ne!(reformatted, ORDER);
    assert_eq!(
        hashes(&[("order.orbit", ORDER)]),
        hashes(&[("x.orbit", &reformatted)])
    );
}

#[test]
fn reordering_top_level_declarations_and_splitting_files_do_not_change_the_hash() {
    let split = ORDER.find("workflow Shipping").unwrap();
    let (decls, workflows) = ORDER.split_at(split);
    let order_at = workflows.find("workflow Order").unwrap();
    let (shipping, order) = workflows.split_at(order_at);
    let reordered = format!("{order}\n{shipping}\n{decls}");
    let original = hashes(&[("order.orbit", ORDER)]);
    assert_eq!(original, hashes(&[("order.orbit", &reordered)]));
    assert_eq!(
        original,
        hashes(&[
            ("wf.orbit", order),
            ("types.orbit", decls),
            ("ship.orbit", shipping)
        ])
    );
}

#[test]
fn changing_an_expression_property_contract_or_child_changes_the_hash() {
    let original = hashes(&[("order.orbit", ORDER)]);
    let order_hash =
        |h: &[(String, String)]| h.iter().find(|(n, _)| n == "Order").unwrap().1.clone();
    let changes = [
        ("\"charge-\" + input.order_id", "\"pay-\" + input.order_id"),
        ("timeout: 30s", "timeout: 31s"),
        (
            "output { refund_id: String }",
            "output { refund_id: String, at: Int? }",
        ),
        (
            "output { tracking: String }",
            "output { tracking: String, carrier: String? }",
        ),
        ("sleep 2s", "sleep 3s"),
    ];
    for (from, to) in changes {
        assert!(ORDER.contains(from), "{from}");
        let changed = ORDER.replacen(from, to, 1);
        let h = hashes(&[("order.orbit", &changed)]);
        assert_ne!(
            order_hash(&original),
            order_hash(&h),
            "changing `{from}` must change the hash"
        );
    }
}

#[test]
fn step_order_is_part_of_the_hash() {
    let a = "workflow W version \"1.0.0\" {\n step a { sleep 1s }\n step b { sleep 2s }\n}\n";
    let b = "workflow W version \"1.0.0\" {\n step b { sleep 2s }\n step a { sleep 1s }\n}\n";
    assert_ne!(hashes(&[("a.orbit", a)]), hashes(&[("b.orbit", b)]));
}

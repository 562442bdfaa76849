//! Checker behaviour, one scenario per test: scoping, optionals, fan-out,
//! conditions, Json, compensate blocks, children and the IR produced.

use super::*;
use crate::ir::{ExprKind, StepKind};

const TASKS: &str = r#"
task "t.get" version "1.0.0" {
    input  { id: String }
    output { v: Int, name: String }
}
task "t.put" version "1.0.0" {
    input  { n: Int }
    output { ok: Bool }
}
task "t.key" version "1.0.0" {
    input  { key: String }
    output { }
}
"#;

fn run(src: &str) -> Compiled {
    let text = format!("{TASKS}\n{src}");
    compile(
        &[Source {
            name: "t.orbit".into(),
            text,
        }],
        &|_, _| None,
    )
}

fn codes(src: &str) -> Vec<String> {
    run(src).diagnostics.into_iter().map(|d| d.code).collect()
}

fn messages(src: &str) -> Vec<String> {
    run(src)
        .diagnostics
        .into_iter()
        .map(|d| format!("{}: {}", d.code, d.message))
        .collect()
}

fn wf(body: &str) -> String {
    format!("workflow W version \"1.0.0\" {{\n input {{ id: String, n: Int, ids: [String], j: Json, flag: Bool, maybe: {{ v: Int }}? }}\n{body}\n}}\n")
}

#[test]
fn conditional_steps_are_optional_to_readers_and_coalesce_recovers() {
    let ok = wf(r#"
        step a { worker "t.get" with { id: input.id }  if: input.flag }
        step b { worker "t.put" with { n: a.v ?? 0 } }
    "#);
    assert_eq!(codes(&ok), Vec::<String>::new());
    let bad = wf(r#"
        step a { worker "t.get" with { id: input.id }  if: input.flag }
        step b { worker "t.put" with { n: a.v } }
    "#);
    assert_eq!(
        messages(&bad),
        ["E0405: optional value where a value is required: expected `Int`, found `Int?`"]
    );
}

#[test]
fn member_access_on_optional_record_propagates_null() {
    assert_eq!(
        codes(&wf(
            r#"step b { worker "t.put" with { n: input.maybe.v ?? 0 } }"#
        )),
        Vec::<String>::new()
    );
    assert_eq!(
        codes(&wf(
            r#"step b { worker "t.put" with { n: input.maybe.v } }"#
        )),
        ["E0405"]
    );
}

#[test]
fn for_step_output_is_a_list_and_its_condition_cannot_see_the_loop_var() {
    let src = wf(r#"
        step each { for id in input.ids  worker "t.get" with { id: id } }
        step first { worker "t.put" with { n: each[0].v } }
        step count { worker "t.put" with { n: len(each) } }
    "#);
    assert_eq!(codes(&src), Vec::<String>::new());
    let compiled = run(&src);
    let w = &compiled.definitions[0].workflow;
    assert_eq!(w.step("first").unwrap().depends_on, ["each"]);
    let bad =
        wf(r#"step each { for id in input.ids  worker "t.get" with { id: id }  if: id == "x" }"#);
    assert_eq!(codes(&bad), ["E0100"]);
}

#[test]
fn string_plus_int_is_a_mismatch_and_bool_times_int_has_no_operator() {
    assert_eq!(
        messages(&wf(
            r#"step k { worker "t.key" with { key: "a" + input.n } }"#
        )),
        ["E0400: type mismatch: expected `String`, found `Int`"]
    );
    assert_eq!(
        codes(&wf(
            r#"step p { worker "t.put" with { n: input.flag * 2 } }"#
        )),
        ["E0403"]
    );
    assert_eq!(
        codes(&wf(
            r#"step k { worker "t.key" with { key: "a" + string(input.n) } }"#
        )),
        Vec::<String>::new()
    );
}

#[test]
fn idempotency_keys_follow_seed_000() {
    let ok =
        wf(r#"step k { worker "t.key" with { key: input.id }  idempotency_key: "k-" + input.id }"#);
    assert_eq!(codes(&ok), Vec::<String>::new());
    assert_eq!(
        codes(&wf(
            r#"step k { worker "t.key" with { key: input.id }  idempotency_key: input.n }"#
        )),
        ["E0400"]
    );
    let opt = wf(r#"
        step a { worker "t.get" with { id: input.id }  if: input.flag }
        step k { worker "t.key" with { key: input.id }  idempotency_key: a.name }
    "#);
    assert_eq!(codes(&opt), ["E0405"]);
    assert_eq!(
        codes(&wf(r#"step s { sleep 1s  idempotency_key: input.id }"#)),
        ["E0307"]
    );
    // A Json key is checked at run time (null falls back to the default key).
    assert_eq!(
        codes(&wf(
            r#"step k { worker "t.key" with { key: input.id }  idempotency_key: input.j.key }"#
        )),
        Vec::<String>::new()
    );
}

#[test]
fn json_is_accepted_anywhere_and_reads_as_json() {
    let src = wf(r#"
        step a { worker "t.put" with { n: input.j.count } }
        step b { worker "t.get" with { id: input.j["id"] } }
        step c { for x in input.j  worker "t.put" with { n: x.n } }
    "#);
    assert_eq!(codes(&src), Vec::<String>::new());
}

#[test]
fn compensate_reads_own_output_loop_var_and_transitive_deps_only() {
    let ok = wf(r#"
        step a { worker "t.get" with { id: input.id } }
        step b { worker "t.put" with { n: a.v } }
        step c {
            for id in input.ids
            worker "t.get"
            with { id: id }
            after: [b]
            if: input.flag
            compensate {
                worker "t.key"
                with { key: c.name + id + a.name + execution.id }
                idempotency_key: "undo-" + c.name
            }
        }
    "#);
    assert_eq!(codes(&ok), Vec::<String>::new());
    let compiled = run(&ok);
    let c = compiled.definitions[0].workflow.step("c").unwrap().clone();
    assert_eq!(
        c.depends_on,
        ["b"],
        "compensate expressions add no dependency"
    );
    let comp = c.compensate.unwrap();
    assert!(comp.call.idempotency_key.is_some());
    let bad = wf(r#"
        step a { worker "t.get" with { id: input.id } }
        step z { worker "t.get" with { id: input.id } }
        step c {
            worker "t.get"
            with { id: a.name }
            compensate { worker "t.key" with { key: z.name } }
        }
    "#);
    assert_eq!(codes(&bad), ["E0100"]);
}

#[test]
fn reading_a_step_is_a_dependency_and_cycles_are_reported_once() {
    let src = wf(r#"
        step a { worker "t.put" with { n: b.v } }
        step b { worker "t.get" with { id: string(a.ok) } }
    "#);
    assert_eq!(codes(&src), ["E0105"]);
    assert_eq!(
        codes(&wf(r#"step a { worker "t.get" with { id: a.name } }"#)),
        ["E0105"]
    );
}

#[test]
fn contract_fields_missing_unknown_and_mistyped() {
    assert_eq!(
        codes(&wf(r#"step a { worker "t.get" with { } }"#)),
        ["E0404"]
    );
    assert_eq!(
        codes(&wf(
            r#"step a { worker "t.get" with { id: input.id, x: 1 } }"#
        )),
        ["E0406"]
    );
    assert_eq!(
        codes(&wf(r#"step a { worker "t.get" with { id: 1 } }"#)),
        ["E0400"]
    );
    assert_eq!(
        codes(&wf(r#"step a { worker "t.get" with input.id }"#)),
        ["E0400"]
    );
}

#[test]
fn an_error_inside_an_expression_does_not_cascade() {
    // Unknown name inside a concatenation inside a contract: one error.
    assert_eq!(
        codes(&wf(
            r#"step a { worker "t.key" with { key: "x" + nope.field + "y" } }"#
        )),
        ["E0100"]
    );
    // Unknown task: the with-expression's own errors only.
    assert_eq!(
        codes(&wf(r#"step a { worker "t.nope" with { key: input.id } }"#)),
        ["E0102"]
    );
    // A step whose task is unknown is silent when read.
    let src = wf(r#"
        step a { worker "t.nope" with { } }
        step b { worker "t.put" with { n: a.whatever } }
    "#);
    assert_eq!(codes(&src), ["E0102"]);
}

#[test]
fn functions_check_arity_and_argument_types() {
    assert_eq!(
        codes(&wf(
            r#"step a { worker "t.put" with { n: len(input.ids, 1) } }"#
        )),
        ["E0402"]
    );
    assert_eq!(
        codes(&wf(r#"step a { worker "t.put" with { n: len(input.n) } }"#)),
        ["E0400"]
    );
    assert_eq!(
        codes(&wf(r#"step a { worker "t.put" with { n: nope(1) } }"#)),
        ["E0401"]
    );
    assert_eq!(
        codes(&wf(r#"step s { sleep seconds(input.n) + millis(5) }"#)),
        Vec::<String>::new()
    );
    assert_eq!(
        codes(&wf(
            r#"step a { worker "t.put" with { n: int(input.id) } }"#
        )),
        Vec::<String>::new()
    );
    assert_eq!(
        codes(&wf(
            r#"step a { worker "t.key" with { key: lower(input.id) } if: contains(input.ids, "x") }"#
        )),
        Vec::<String>::new()
    );
}

#[test]
fn signal_steps_take_a_timeout_and_read_as_json() {
    let src = wf(r#"
        step approval { signal "approved"  timeout: 1h }
        step a { worker "t.put" with { n: approval.amount } }
    "#);
    assert_eq!(codes(&src), Vec::<String>::new());
    let compiled = run(&src);
    match &compiled.definitions[0].workflow.steps[0].kind {
        StepKind::Signal { name, timeout_ms } => {
            assert_eq!(name, "approved");
            assert_eq!(*timeout_ms, Some(3_600_000));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn retry_policies_merge_over_the_workflow_default() {
    let src = r#"workflow W version "1.0.0" {
        retry: { max_attempts: 7 }
        step a { worker "t.put" with { n: 1 }  retry: { backoff: 2s, non_retryable: ["BAD"] }  timeout: 30s  queue_timeout: 5m }
    }"#;
    let compiled = run(src);
    assert!(compiled.is_ok(), "{:?}", compiled.diagnostics);
    let w = &compiled.definitions[0].workflow;
    assert_eq!(w.retry.max_attempts, 7);
    let StepKind::Task(call) = &w.steps[0].kind else {
        panic!()
    };
    assert_eq!(call.retry.max_attempts, 7);
    assert_eq!(call.retry.backoff_ms, 2_000);
    assert_eq!(call.retry.non_retryable, ["BAD"]);
    assert_eq!(call.timeout_ms, Some(30_000));
    assert_eq!(call.queue_timeout_ms, Some(300_000));
    let bad = r#"workflow W version "1.0.0" { retry: { backoff: 10s, max_backoff: 1s } step s { sleep 1s } }"#;
    assert_eq!(codes(bad), ["E0305"]);
}

#[test]
fn children_resolve_from_the_set_or_the_server_and_pin_their_hash() {
    let child = r#"workflow C version "1.0.0" { input { id: String } step g { worker "t.get" with { id: input.id } } output { v: g.v } }"#;
    let parent = r#"workflow P version "1.0.0" {
        step c { workflow C version "1.0.0" with { id: "x" } }
        step p { worker "t.put" with { n: c.v } }
    }"#;
    let both = run(&format!("{parent}\n{child}"));
    assert!(both.is_ok(), "{:?}", both.diagnostics);
    assert_eq!(both.definitions[0].workflow.name, "C");
    let child_hash = both.definitions[0].hash.clone();
    let StepKind::Workflow {
        definition_hash, ..
    } = &both.definitions[1].workflow.steps[0].kind
    else {
        panic!()
    };
    assert_eq!(definition_hash, &child_hash);

    // Only the parent, with the child registered on a "server".
    let child_def = both.definitions[0].clone();
    let registered = move |name: &str, version: &str| {
        (name == "C" && version == "1.0.0").then(|| child_def.clone())
    };
    let text = format!("{TASKS}\n{parent}");
    let alone = compile(
        &[Source {
            name: "p.orbit".into(),
            text,
        }],
        &registered,
    );
    assert!(alone.is_ok(), "{:?}", alone.diagnostics);
    assert_eq!(alone.definitions[0].hash, both.definitions[1].hash);

    assert_eq!(codes(parent), ["E0103"]);
    assert_eq!(
        codes(&format!(
            "{child}\n{}",
            parent.replace("with { id: \"x\" }", "with { }")
        )),
        ["E0404"]
    );
}

#[test]
fn ir_expressions_carry_types_and_literal_values() {
    let compiled = run(
        r#"workflow W version "1.0.0" { step s { sleep 1500ms } output { d: 2.5, s: "a\n\u{1F600}" } }"#,
    );
    assert!(compiled.is_ok(), "{:?}", compiled.diagnostics);
    let w = &compiled.definitions[0].workflow;
    let StepKind::Sleep { duration } = &w.steps[0].kind else {
        panic!()
    };
    assert_eq!(duration.ty, crate::ir::Type::Duration);
    assert_eq!(duration.kind, ExprKind::Literal { value: 1500.into() });
    let out = w.output.as_ref().unwrap();
    let ExprKind::Record { fields } = &out.kind else {
        panic!()
    };
    assert_eq!(
        fields[1].1.kind,
        ExprKind::Literal {
            value: "a\n\u{1F600}".into()
        }
    );
}

#[test]
fn the_spec_example_parses_cool_off_on_one_line() {
    let src = include_str!("../../../examples/order.orbit");
    assert!(src.contains("step cool_off { sleep 2s  after: [process_payment] }"));
    let compiled = compile(
        &[Source {
            name: "order.orbit".into(),
            text: src.into(),
        }],
        &|_, _| None,
    );
    assert!(compiled.is_ok(), "{:?}", compiled.diagnostics);
    let order = compiled
        .definitions
        .iter()
        .find(|d| d.workflow.name == "Order")
        .unwrap();
    let names: Vec<&str> = order
        .workflow
        .steps
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "validate_order",
            "reserve",
            "process_payment",
            "cool_off",
            "ship"
        ]
    );
    assert_eq!(
        order.workflow.step("cool_off").unwrap().depends_on,
        ["process_payment"]
    );
    assert_eq!(
        order.workflow.step("reserve").unwrap().depends_on,
        ["validate_order"]
    );
    assert_eq!(order.workflow.tasks.len(), 5);
}

#[test]
fn deep_types_and_definitions_are_refused_with_e0012() {
    // A chain of 100 named types, each wrapping the next.
    let mut chain = String::new();
    for i in 0..100 {
        chain.push_str(&format!("type T{i} = {{ v: T{} }}\n", i + 1));
    }
    chain.push_str("type T100 = Int\n");
    let found = codes(&chain);
    assert!(
        !found.is_empty() && found.iter().all(|c| c == "E0012"),
        "{found:?}"
    );
    // 30 nested record literals stay under the expression limit but would
    // encode the definition more than 100 JSON levels deep.
    let mut value = "1".to_string();
    for _ in 0..30 {
        value = format!("{{ a: {value} }}");
    }
    let src = format!("workflow W version \"1.0.0\" {{ output {value} }}");
    assert_eq!(messages(&src).len(), 1);
    assert_eq!(codes(&src), ["E0012"]);
    // Moderate nesting is fine.
    let mut value = "1".to_string();
    for _ in 0..10 {
        value = format!("{{ a: {value} }}");
    }
    assert!(codes(&format!(
        "workflow W version \"1.0.0\" {{ output {value} }}"
    ))
    .is_empty());
}

#[test]
fn large_workflows_check_quickly() {
    // 2,000 steps in one chain, each compensated and reading the step before
    // it and the first step, plus 2,000 lexical errors in another file.
    let mut body = String::from(
        "workflow Big version \"1.0.0\" {\n step s0 { worker \"t.get\" with { id: \"x\" } }\n",
    );
    for i in 1..2_000 {
        body.push_str(&format!(
            " step s{i} {{ worker \"t.get\" with {{ id: s{}.name }} compensate {{ worker \"t.key\" with {{ key: s{i}.name + s0.name }} }} }}\n",
            i - 1
        ));
    }
    body.push_str("}\n");
    let compiled = run(&body);
    assert!(compiled.is_ok(), "{:?}", compiled.diagnostics.first());
    assert_eq!(compiled.definitions[0].workflow.steps.len(), 2_000);
    let noise = "#".repeat(2_000);
    let compiled = compile(
        &[Source {
            name: "n.orbit".into(),
            text: noise,
        }],
        &|_, _| None,
    );
    assert_eq!(
        compiled.diagnostics.len(),
        crate::syntax::MAX_LEXICAL_ERRORS
    );
}

mod robustness {
    use super::super::*;
    use proptest::prelude::*;

    const ORDER: &str = include_str!("../../../examples/order.orbit");

    fn compile_text(text: &str) -> Compiled {
        compile(
            &[Source {
                name: "m.orbit".into(),
                text: text.into(),
            }],
            &|_, _| None,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Deleting or replacing any slice of a valid file never panics,
        /// compiles deterministically, and reports only registered codes
        /// with spans inside the file.
        #[test]
        fn mutated_sources_compile_without_panics(start in 0usize..ORDER.len(), len in 0usize..40, insert in "[ -~\n]{0,8}") {
            let mut start = start;
            while !ORDER.is_char_boundary(start) { start -= 1; }
            let mut end = (start + len).min(ORDER.len());
            while !ORDER.is_char_boundary(end) { end -= 1; }
            let text = format!("{}{}{}", &ORDER[..start], insert, &ORDER[end..]);
            let a = compile_text(&text);
            let b = compile_text(&text);
            prop_assert_eq!(&a, &b);
            for d in &a.diagnostics {
                prop_assert!(d.span.start <= d.span.end && d.span.end <= text.len());
                prop_assert!(crate::diagnostic::codes::lookup(&d.code).is_some());
            }
        }
    }
}

#[test]
fn orbit_http_is_typed_without_a_declaration() {
    let ok = wf(r#"
        step call { worker "orbit.http" with { method: "GET", url: "http://api.local/x/" + input.id, timeout: 5s } }
        step b { worker "t.put" with { n: call.status } }
    "#);
    assert_eq!(codes(&ok), Vec::<String>::new());
    let compiled = run(&ok);
    let contract = &compiled.definitions[0].workflow.tasks["orbit.http"];
    assert_eq!(contract.version, crate::builtin::HTTP_CONTRACT_VERSION);
    // `url` is required, unknown fields are refused, types are checked.
    let missing = wf(r#"step call { worker "orbit.http" with { method: "GET" } }"#);
    assert_eq!(codes(&missing), ["E0404"]);
    let unknown =
        wf(r#"step call { worker "orbit.http" with { method: "GET", url: "u", verb: 1 } }"#);
    assert_eq!(codes(&unknown), ["E0406"]);
    let mistyped =
        wf(r#"step call { worker "orbit.http" with { method: "GET", url: "u", timeout: 5 } }"#);
    assert_eq!(codes(&mistyped), ["E0400"]);
    // The output's status is an Int: a String is not.
    let wrong = wf(r#"
        step call { worker "orbit.http" with { method: "GET", url: "u" } }
        step b { worker "t.get" with { id: call.status } }
    "#);
    assert_eq!(codes(&wrong), ["E0400"]);
    // Other `orbit.` names stay reserved.
    let other = wf(r#"step call { worker "orbit.smtp" with { } }"#);
    assert_eq!(codes(&other), ["E0102"]);
}

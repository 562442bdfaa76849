//! The evaluator over expressions the compiler produced: compile `.orbit`
//! source, check an input against the workflow's input type, and evaluate
//! the compiled expressions the way the engine does.

#![allow(clippy::unwrap_used)]

use orbit_core::eval::{check_value_at, evaluate, evaluate_as, EvalError, Scope};
use orbit_core::ir::{Expr, StepKind, Type, Workflow};
use orbit_core::{compile, Source};
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn workflow(text: &str) -> Workflow {
    let compiled = compile(
        &[Source {
            name: "test.orbit".into(),
            text: text.into(),
        }],
        &|_, _| None,
    );
    assert!(
        compiled.diagnostics.is_empty(),
        "{:?}",
        compiled.diagnostics
    );
    compiled.definitions.into_iter().last().unwrap().workflow
}

struct Run {
    input: Value,
    execution: Value,
    steps: BTreeMap<String, Value>,
    vars: BTreeMap<String, Value>,
}

impl Run {
    fn new(wf: &Workflow, raw_input: Value) -> Run {
        Run {
            input: check_value_at("input", &wf.input, &raw_input).unwrap(),
            execution: json!({"id": "e-1", "workflow": wf.name, "version": wf.version}),
            steps: BTreeMap::new(),
            vars: BTreeMap::new(),
        }
    }
    fn step(mut self, name: &str, output: Value) -> Run {
        self.steps.insert(name.into(), output);
        self
    }
    fn eval_as(&self, e: &Expr, ty: &Type) -> Result<Value, EvalError> {
        let scope = Scope {
            input: &self.input,
            execution: &self.execution,
            steps: &self.steps,
            vars: &self.vars,
        };
        evaluate_as(e, ty, &scope)
    }
    fn eval(&self, e: &Expr) -> Result<Value, EvalError> {
        let scope = Scope {
            input: &self.input,
            execution: &self.execution,
            steps: &self.steps,
            vars: &self.vars,
        };
        evaluate(e, &scope)
    }
}

fn task_input<'a>(wf: &'a Workflow, step: &str) -> &'a Expr {
    match &wf.step(step).unwrap().kind {
        StepKind::Task(call) => &call.input,
        other => panic!("{step} is not a task step: {other:?}"),
    }
}

fn task_key<'a>(wf: &'a Workflow, step: &str) -> &'a Expr {
    match &wf.step(step).unwrap().kind {
        StepKind::Task(call) => call.idempotency_key.as_ref().unwrap(),
        other => panic!("{step} is not a task step: {other:?}"),
    }
}

const INVOICE: &str = r#"
type Line = { sku: String, qty: Int, unit_price: Int }

task "billing.invoice" version "1.0.0" {
    input  { customer: String, total: Int, lines: Int, summary: String }
    output { invoice_id: String }
}

workflow Invoice version "1.0.0" {
    input { customer: String, lines: [Line], discount: Int?, express: Bool }

    step invoice {
        worker "billing.invoice"
        with {
            customer: lower(input.customer),
            total: input.lines[0].qty * input.lines[0].unit_price - (input.discount ?? 0),
            lines: len(input.lines),
            summary: "first item " + input.lines[0].sku + ", express: " + string(input.express),
        }
        idempotency_key: "invoice-" + input.customer + "-" + string(len(input.lines))
        if: len(input.lines) > 0 && !input.express
    }

    step settle { sleep seconds(2) + 500ms  after: [invoice] }

    output { invoice_id: invoice.invoice_id ?? "none" }
}
"#;

#[test]
fn a_compiled_workflow_evaluates_end_to_end() {
    let wf = workflow(INVOICE);
    let run = Run::new(
        &wf,
        json!({"customer": "ACME", "lines": [{"sku": "A-1", "qty": 2.0, "unit_price": 150}], "express": false}),
    );
    // The omitted optional reads as null; 2.0 was normalized to 2.
    assert_eq!(run.input["discount"], Value::Null);
    assert_eq!(run.input["lines"][0]["qty"], json!(2));
    assert_eq!(
        run.eval(task_input(&wf, "invoice")).unwrap(),
        json!({"customer": "acme", "total": 300, "lines": 1, "summary": "first item A-1, express: false"})
    );
    assert_eq!(
        run.eval(task_key(&wf, "invoice")).unwrap(),
        json!("invoice-ACME-1")
    );
    let condition = wf.step("invoice").unwrap().condition.as_ref().unwrap();
    assert_eq!(run.eval(condition).unwrap(), json!(true));
    match &wf.step("settle").unwrap().kind {
        StepKind::Sleep { duration } => assert_eq!(run.eval(duration).unwrap(), json!(2_500)),
        other => panic!("{other:?}"),
    }
    let output = wf.output.as_ref().unwrap();
    let done = Run::new(&wf, run.input.clone()).step("invoice", json!({"invoice_id": "inv-1"}));
    assert_eq!(done.eval(output).unwrap(), json!({"invoice_id": "inv-1"}));
    let skipped = Run::new(&wf, run.input.clone()).step("invoice", Value::Null);
    assert_eq!(skipped.eval(output).unwrap(), json!({"invoice_id": "none"}));
}

#[test]
fn runtime_errors_of_compiled_expressions_are_expression_errors() {
    let wf = workflow(INVOICE);
    // An empty list: the condition guards, but the input would index out of range.
    let run = Run::new(
        &wf,
        json!({"customer": "ACME", "lines": [], "express": false}),
    );
    let condition = wf.step("invoice").unwrap().condition.as_ref().unwrap();
    assert_eq!(run.eval(condition).unwrap(), json!(false));
    let e = run.eval(task_input(&wf, "invoice")).unwrap_err();
    assert_eq!(e, EvalError::IndexOutOfRange { index: 0, len: 0 });
    assert_eq!(e.code(), "EXPRESSION_ERROR");
    // Overflow in checked Int arithmetic.
    let run = Run::new(
        &wf,
        json!({"customer": "ACME", "lines": [{"sku": "A", "qty": i64::MAX, "unit_price": 2}], "express": false}),
    );
    let e = run.eval(task_input(&wf, "invoice")).unwrap_err();
    assert!(matches!(e, EvalError::Overflow { .. }), "{e}");
}

#[test]
fn invalid_inputs_are_reported_with_their_path() {
    let wf = workflow(INVOICE);
    let raw = json!({"customer": "ACME", "lines": [{"sku": "A", "qty": "2", "unit_price": 1}], "express": false});
    let v = check_value_at("input", &wf.input, &raw).unwrap_err();
    assert_eq!(
        v.to_string(),
        "input.lines[0].qty: expected Int, found String"
    );
    let v = check_value_at(
        "input",
        &wf.input,
        &json!({"customer": "ACME", "lines": []}),
    )
    .unwrap_err();
    assert_eq!(
        v.to_string(),
        "input.express: missing required field of type Bool"
    );
}

const APPROVE: &str = r#"
task "orders.ship" version "1.0.0" {
    input  { order_id: String, priority: Int }
    output { tracking: String }
}

workflow Approve version "1.0.0" {
    input { order_id: String }

    step approval {
        signal "approved"
        timeout: 1d
    }

    step ship {
        worker "orders.ship"
        with { order_id: input.order_id, priority: approval.priority ?? 1 }
        if: approval.ok ?? false
    }
}
"#;

#[test]
fn json_payloads_are_checked_where_they_are_used() {
    let wf = workflow(APPROVE);
    let condition = wf.step("ship").unwrap().condition.clone().unwrap();
    let input = task_input(&wf, "ship");
    let base = json!({"order_id": "o-1"});

    let run = Run::new(&wf, base.clone()).step("approval", json!({"ok": true, "priority": 3}));
    assert_eq!(run.eval(&condition).unwrap(), json!(true));
    assert_eq!(
        run.eval(input).unwrap(),
        json!({"order_id": "o-1", "priority": 3})
    );

    let run = Run::new(&wf, base.clone()).step("approval", json!({}));
    assert_eq!(run.eval(&condition).unwrap(), json!(false));
    assert_eq!(
        run.eval(input).unwrap(),
        json!({"order_id": "o-1", "priority": 1})
    );

    // `approval.ok ?? false` is a Json (the payload may hold anything), so a
    // caller needing a Bool or a contract checks with evaluate_as.
    let run =
        Run::new(&wf, base.clone()).step("approval", json!({"ok": "yes", "priority": "high"}));
    assert_eq!(run.eval(&condition).unwrap(), json!("yes"));
    let e = run.eval_as(&condition, &Type::Bool).unwrap_err();
    assert_eq!(e.code(), "EXPRESSION_ERROR");
    assert_eq!(
        e.to_string(),
        "value does not match its type: expected Bool, found String"
    );
    let contract = &wf.tasks["orders.ship"].input;
    let e = run.eval_as(input, contract).unwrap_err();
    assert_eq!(
        e.to_string(),
        "value does not match its type: priority: expected Int, found String"
    );
    let fine = Run::new(&wf, base.clone()).step("approval", json!({"priority": 2.0}));
    assert_eq!(
        fine.eval_as(input, contract).unwrap(),
        json!({"order_id": "o-1", "priority": 2})
    );

    // A payload that is not an object at all.
    let run = Run::new(&wf, base).step("approval", json!(7));
    let e = run.eval(&condition).unwrap_err();
    assert!(e.to_string().contains("reading field `ok`"), "{e}");
}

const KEYS: &str = r#"
type Item = { sku: String, qty: Int }

task "inventory.reserve" version "1.0.0" {
    input  { items: [Item], note: String }
    output { reservation_id: String }
}

workflow Reserve version "1.0.0" {
    input { order_id: String, items: [Item], weight: Float, pause: Duration }

    step reserve {
        for item in input.items
        worker "inventory.reserve"
        with { items: [item], note: string(input.weight) + " " + string(input.pause) + " " + string(item.qty / 2) }
        idempotency_key: input.order_id + "/" + string(item)
    }
}
"#;

#[test]
fn keys_built_with_string_are_stable_and_typed() {
    let wf = workflow(KEYS);
    let a =
        json!({"order_id": "o-1", "items": [{"sku": "A", "qty": 5}], "weight": 2, "pause": 1500});
    let b = json!({"pause": 1500.0, "weight": 2.0, "items": [{"qty": 5.0, "sku": "A"}], "order_id": "o-1"});
    let mut keys = Vec::new();
    for raw in [a, b] {
        let mut run = Run::new(&wf, raw);
        let item = run.input["items"][0].clone();
        run.vars.insert("item".into(), item);
        keys.push(run.eval(task_key(&wf, "reserve")).unwrap());
        assert_eq!(
            run.eval(task_input(&wf, "reserve")).unwrap(),
            json!({"items": [{"sku": "A", "qty": 5}], "note": "2.0 1500ms 2"})
        );
    }
    assert_eq!(keys[0], json!(r#"o-1/{"qty":5,"sku":"A"}"#));
    assert_eq!(keys[0], keys[1]);
}

fn order_workflow() -> Workflow {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/order.orbit");
    let text = std::fs::read_to_string(path).unwrap();
    let compiled = compile(
        &[Source {
            name: "order.orbit".into(),
            text,
        }],
        &|_, _| None,
    );
    assert!(
        compiled.diagnostics.is_empty(),
        "{:?}",
        compiled.diagnostics
    );
    compiled
        .definitions
        .into_iter()
        .find(|d| d.workflow.name == "Order")
        .unwrap()
        .workflow
}

#[test]
fn the_reference_order_workflow_evaluates_its_keys_and_compensations() {
    let wf = order_workflow();
    let raw = json!({
        "order_id": "o-42", "amount": 1999, "currency": "EUR",
        "items": [{"sku": "A-1", "qty": 1}, {"sku": "B-2", "qty": 3}]
    });
    let mut run = Run::new(&wf, raw);
    run.steps
        .insert("validate_order".into(), json!({"ok": true}));

    // Fan-out: the list, then one key and input per element.
    let list = &wf.step("reserve").unwrap().for_each.as_ref().unwrap().list;
    let items = run.eval(list).unwrap();
    assert_eq!(items.as_array().unwrap().len(), 2);
    run.vars.insert("item".into(), items[1].clone());
    assert_eq!(
        run.eval(task_key(&wf, "reserve")).unwrap(),
        json!("o-42/B-2")
    );
    assert_eq!(
        run.eval(task_input(&wf, "reserve")).unwrap(),
        json!({"order_id": "o-42", "items": [{"sku": "B-2", "qty": 3}]})
    );

    // The charge.
    run.vars.clear();
    run.steps.insert(
        "reserve".into(),
        json!([{"reservation_id": "r-0"}, {"reservation_id": "r-1"}]),
    );
    assert_eq!(
        run.eval(task_key(&wf, "process_payment")).unwrap(),
        json!("charge-o-42")
    );
    assert_eq!(
        run.eval(task_input(&wf, "process_payment")).unwrap(),
        json!({"order_id": "o-42", "amount": 1999, "currency": "EUR"})
    );

    // Compensations read the compensated unit's own output, bound under the
    // step's name (one element's output for the fan-out).
    let release = &wf
        .step("reserve")
        .unwrap()
        .compensate
        .as_ref()
        .unwrap()
        .call;
    run.vars.insert("item".into(), items[1].clone());
    run.vars
        .insert("reserve".into(), json!({"reservation_id": "r-1"}));
    assert_eq!(
        run.eval(&release.input).unwrap(),
        json!({"reservation_id": "r-1"})
    );

    let refund = &wf
        .step("process_payment")
        .unwrap()
        .compensate
        .as_ref()
        .unwrap()
        .call;
    run.vars.clear();
    run.vars
        .insert("process_payment".into(), json!({"transaction_id": "t-9"}));
    assert_eq!(
        run.eval(&refund.input).unwrap(),
        json!({"transaction_id": "t-9", "amount": 1999})
    );
    assert_eq!(
        run.eval(refund.idempotency_key.as_ref().unwrap()).unwrap(),
        json!("refund-t-9")
    );

    // The workflow's output.
    run.vars.clear();
    run.steps
        .insert("process_payment".into(), json!({"transaction_id": "t-9"}));
    run.steps.insert("cool_off".into(), json!({}));
    run.steps
        .insert("ship".into(), json!({"tracking": "TRK-1"}));
    assert_eq!(
        run.eval(wf.output.as_ref().unwrap()).unwrap(),
        json!({"transaction_id": "t-9", "tracking": "TRK-1"})
    );
}

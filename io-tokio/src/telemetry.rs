//! Trace export (`orbit server --otlp-endpoint URL`): spans built from
//! committed history events and POSTed as OTLP over HTTP/protobuf to
//! `URL/v1/traces`.
//!
//! The follower subscribes to the driver's committed events, so a span is
//! only ever built from events that are durable. One trace per top-level
//! execution (children join their parent's trace): a span per execution
//! (from `WorkflowCreated` to its end), one per step attempt (from
//! `StepScheduled` to its success, failure or uncertainty, with a
//! `dispatched` event, the attempt, redelivery, key, task and worker),
//! compensations as attempts of their `compensate:` units, a span per
//! child step and one per sleep step (`TimerStarted` to `TimerFired`). Ids
//! are derived from the execution id and the event's `seq`
//! ([`orbit_core::trace`]), so a restarted server names the same spans the
//! same way and the engine can hand each task the `traceparent` of its
//! attempt's span. An execution started with a `traceparent` is in the
//! caller's trace, its span a child of the caller's span.
//!
//! Export is best effort: spans wait in a bounded queue; when it is full,
//! when the follower falls behind the committed events, or when the
//! collector does not take a batch, spans are dropped and counted
//! (`orbit_spans_dropped_total`).

use crate::driver::Driver;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use orbit_core::history::{Event, EventKind, Millis};
use orbit_core::trace::{self, TraceParent};
use prost::Message;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// Settings of the trace export.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    /// The collector's base URL; spans go to `endpoint/v1/traces`.
    pub endpoint: String,
    /// Spans waiting for export at most; more are dropped.
    pub queue_max: usize,
    /// Spans per request at most.
    pub batch_max: usize,
    /// How long a span waits for its batch to fill at most.
    pub flush_every: Duration,
}

impl TraceOptions {
    /// Defaults for `endpoint`: 4096 queued spans, batches of 512, 1 s.
    pub fn new(endpoint: impl Into<String>) -> TraceOptions {
        TraceOptions {
            endpoint: endpoint.into(),
            queue_max: 4096,
            batch_max: 512,
            flush_every: Duration::from_secs(1),
        }
    }
}

/// Starts following `driver`'s committed events and exporting their spans.
pub fn spawn(driver: &Driver, options: TraceOptions) -> Result<(), String> {
    let url = format!("{}/v1/traces", options.endpoint.trim_end_matches('/'));
    let parsed = reqwest::Url::parse(&url).map_err(|e| format!("--otlp-endpoint: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("--otlp-endpoint: expected an http:// or https:// URL".into());
    }
    let (tx, rx) = mpsc::channel(options.queue_max.max(1));
    tokio::spawn(export(driver.clone(), rx, url, options.clone()));
    tokio::spawn(follow(driver.clone(), driver.subscribe(), tx));
    Ok(())
}

async fn follow(
    driver: Driver,
    mut committed: broadcast::Receiver<crate::driver::Committed>,
    spans: mpsc::Sender<Span>,
) {
    let mut traces = Traces::default();
    loop {
        match committed.recv().await {
            Ok(c) => {
                let first = c.events.first().map_or(1, |e| e.seq);
                if first > 1 && !traces.knows(&c.execution_id) {
                    // Running before this process started: learn its past
                    // without exporting it again.
                    if let Ok(Some(stored)) = driver.store().load_execution(&c.execution_id).await {
                        let past: Vec<Event> = stored
                            .events
                            .into_iter()
                            .filter(|e| e.seq < first)
                            .collect();
                        traces.follow(&c.execution_id, &past);
                    }
                }
                for s in traces.follow(&c.execution_id, &c.events) {
                    if spans.try_send(s).is_err() {
                        driver
                            .metrics()
                            .spans_dropped
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(
                    missed = n,
                    "trace export fell behind; spans of those events are lost"
                );
                driver
                    .metrics()
                    .spans_dropped
                    .fetch_add(n, Ordering::Relaxed);
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

async fn export(driver: Driver, mut rx: mpsc::Receiver<Span>, url: String, options: TraceOptions) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the OTLP client; traces are not exported");
            return;
        }
    };
    loop {
        let Some(first) = rx.recv().await else { return };
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + options.flush_every;
        while batch.len() < options.batch_max {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(s)) => batch.push(s),
                Ok(None) | Err(_) => break,
            }
        }
        let n = batch.len() as u64;
        let body = request(batch).encode_to_vec();
        let sent = client
            .post(&url)
            .header("content-type", "application/x-protobuf")
            .body(body)
            .send()
            .await;
        let metrics = driver.metrics();
        match sent {
            Ok(r) if r.status().is_success() => {
                metrics.spans_exported.fetch_add(n, Ordering::Relaxed);
            }
            Ok(r) => {
                tracing::warn!(status = %r.status(), spans = n, "the collector refused spans; dropped");
                metrics.spans_dropped.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(error = %e, spans = n, "cannot reach the collector; spans dropped");
                metrics.spans_dropped.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "orbit")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "orbit".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn kv(key: &str, value: impl Into<Attr>) -> KeyValue {
    let value = match value.into() {
        Attr::S(s) => any_value::Value::StringValue(s),
        Attr::I(i) => any_value::Value::IntValue(i),
        Attr::B(b) => any_value::Value::BoolValue(b),
    };
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

enum Attr {
    S(String),
    I(i64),
    B(bool),
}

impl From<&str> for Attr {
    fn from(s: &str) -> Attr {
        Attr::S(s.to_owned())
    }
}

impl From<String> for Attr {
    fn from(s: String) -> Attr {
        Attr::S(s)
    }
}

impl From<u32> for Attr {
    fn from(i: u32) -> Attr {
        Attr::I(i64::from(i))
    }
}

impl From<bool> for Attr {
    fn from(b: bool) -> Attr {
        Attr::B(b)
    }
}

fn execution_span_id(execution_id: &str) -> Vec<u8> {
    trace::execution_span_id(execution_id).to_vec()
}

fn span_id(execution_id: &str, kind: &str, seq: u64) -> Vec<u8> {
    trace::event_span_id(execution_id, kind, seq).to_vec()
}

fn nanos(ms: Millis) -> u64 {
    ms.saturating_mul(1_000_000)
}

fn error_status(message: String) -> Option<Status> {
    Some(Status {
        message,
        code: status::StatusCode::Error as i32,
    })
}

#[derive(Debug, Clone)]
struct Attempt {
    seq: u64,
    at: Millis,
    attempt: u32,
    redelivery: bool,
    key: String,
    task: String,
    dispatched: Option<(Millis, String)>,
}

#[derive(Debug, Default)]
struct Exec {
    created_at: Millis,
    workflow: String,
    version: String,
    parent: Option<String>,
    traceparent: Option<String>,
    attempts: HashMap<String, Attempt>,
    children: HashMap<String, (u64, Millis, String)>,
    timers: HashMap<String, (u64, Millis)>,
    marks: Vec<span::Event>,
}

/// The spans the committed events of each execution close.
#[derive(Debug, Default)]
pub struct Traces {
    executions: HashMap<String, Exec>,
}

impl Traces {
    fn knows(&self, id: &str) -> bool {
        self.executions.contains_key(id)
    }

    /// Follows newly committed `events` of `id`; returns the spans they end.
    pub fn follow(&mut self, id: &str, events: &[Event]) -> Vec<Span> {
        let mut out = Vec::new();
        for e in events {
            if let EventKind::WorkflowCreated {
                workflow,
                version,
                parent,
                traceparent,
                ..
            } = &e.kind
            {
                self.executions.insert(
                    id.to_owned(),
                    Exec {
                        created_at: e.at,
                        workflow: workflow.clone(),
                        version: version.clone(),
                        parent: parent.clone(),
                        traceparent: traceparent.clone(),
                        ..Exec::default()
                    },
                );
                continue;
            }
            let x = self
                .executions
                .entry(id.to_owned())
                .or_insert_with(|| Exec {
                    created_at: e.at,
                    ..Exec::default()
                });
            let parent_span = execution_span_id(id);
            let trace_id = trace::trace_id(id, x.traceparent.as_deref()).to_vec();
            let attempt_span =
                |a: &Attempt, end: Millis, outcome: &str, status: Option<Status>, unit: &str| {
                    let mut attributes = vec![
                        kv("orbit.execution_id", id),
                        kv("orbit.step", unit),
                        kv("orbit.task", a.task.clone()),
                        kv("orbit.attempt", a.attempt),
                        kv("orbit.redelivery", a.redelivery),
                        kv("orbit.idempotency_key", a.key.clone()),
                        kv("orbit.outcome", outcome),
                        kv("orbit.compensation", unit.starts_with("compensate:")),
                    ];
                    let mut events = Vec::new();
                    if let Some((at, worker)) = &a.dispatched {
                        attributes.push(kv("orbit.worker_id", worker.clone()));
                        events.push(span::Event {
                            time_unix_nano: nanos(*at),
                            name: "dispatched".into(),
                            attributes: vec![kv("orbit.worker_id", worker.clone())],
                            ..Default::default()
                        });
                    }
                    Span {
                        trace_id: trace_id.clone(),
                        span_id: span_id(id, "attempt", a.seq),
                        parent_span_id: parent_span.clone(),
                        name: unit.to_owned(),
                        kind: span::SpanKind::Internal as i32,
                        start_time_unix_nano: nanos(a.at),
                        end_time_unix_nano: nanos(end.max(a.at)),
                        attributes,
                        events,
                        status,
                        ..Default::default()
                    }
                };
            match &e.kind {
                EventKind::StepScheduled {
                    step,
                    attempt,
                    redelivery,
                    idempotency_key,
                    task,
                    ..
                } => {
                    x.attempts.insert(
                        step.clone(),
                        Attempt {
                            seq: e.seq,
                            at: e.at,
                            attempt: *attempt,
                            redelivery: *redelivery,
                            key: idempotency_key.clone(),
                            task: task.clone(),
                            dispatched: None,
                        },
                    );
                }
                EventKind::StepDispatched {
                    step, worker_id, ..
                } => {
                    if let Some(a) = x.attempts.get_mut(step) {
                        a.dispatched = Some((e.at, worker_id.clone()));
                    }
                }
                EventKind::StepSucceeded { step, .. } => {
                    if let Some(a) = x.attempts.remove(step) {
                        out.push(attempt_span(&a, e.at, "succeeded", None, step));
                    }
                }
                EventKind::StepAttemptFailed { step, error, .. } => {
                    if let Some(a) = x.attempts.remove(step) {
                        let status = error_status(format!("{}: {}", error.code, error.message));
                        out.push(attempt_span(&a, e.at, "failed", status, step));
                    }
                }
                EventKind::StepAttemptUncertain { step, reason, .. } => {
                    if let Some(a) = x.attempts.remove(step) {
                        let mut s = attempt_span(&a, e.at, "uncertain", None, step);
                        s.attributes.push(kv("orbit.reason", reason.clone()));
                        out.push(s);
                    }
                }
                EventKind::StepFailed { step, error } => {
                    if let Some(a) = x.attempts.remove(step) {
                        let status = error_status(format!("{}: {}", error.code, error.message));
                        out.push(attempt_span(&a, e.at, "failed", status, step));
                    }
                }
                EventKind::ChildStarted { step, child_id } => {
                    x.children
                        .insert(step.clone(), (e.seq, e.at, child_id.clone()));
                }
                EventKind::ChildCompleted { step, .. } | EventKind::ChildFailed { step, .. } => {
                    if let Some((seq, at, child)) = x.children.remove(step) {
                        let status = match &e.kind {
                            EventKind::ChildFailed { error, .. } => {
                                error_status(format!("{}: {}", error.code, error.message))
                            }
                            _ => None,
                        };
                        out.push(Span {
                            trace_id: trace_id.clone(),
                            span_id: span_id(id, "child", seq),
                            parent_span_id: parent_span.clone(),
                            name: format!("child {step}"),
                            kind: span::SpanKind::Internal as i32,
                            start_time_unix_nano: nanos(at),
                            end_time_unix_nano: nanos(e.at.max(at)),
                            attributes: vec![
                                kv("orbit.execution_id", id),
                                kv("orbit.step", step.clone()),
                                kv("orbit.child_id", child),
                            ],
                            status,
                            ..Default::default()
                        });
                    }
                }
                EventKind::TimerStarted { step, .. } => {
                    x.timers.insert(step.clone(), (e.seq, e.at));
                }
                EventKind::TimerFired { step, .. } => {
                    if let Some((seq, at)) = x.timers.remove(step) {
                        out.push(Span {
                            trace_id: trace_id.clone(),
                            span_id: span_id(id, "timer", seq),
                            parent_span_id: parent_span.clone(),
                            name: step.clone(),
                            kind: span::SpanKind::Internal as i32,
                            start_time_unix_nano: nanos(at),
                            end_time_unix_nano: nanos(e.at.max(at)),
                            attributes: vec![
                                kv("orbit.execution_id", id),
                                kv("orbit.step", step.clone()),
                                kv("orbit.sleep", true),
                            ],
                            ..Default::default()
                        });
                    }
                }
                EventKind::CompensationStarted { units, .. } => x.marks.push(span::Event {
                    time_unix_nano: nanos(e.at),
                    name: "compensation started".into(),
                    attributes: vec![kv("orbit.units", units.join(", "))],
                    ..Default::default()
                }),
                EventKind::WorkflowCancelRequested { .. } => x.marks.push(span::Event {
                    time_unix_nano: nanos(e.at),
                    name: "cancel requested".into(),
                    ..Default::default()
                }),
                EventKind::WorkflowCompleted { .. }
                | EventKind::WorkflowFailed { .. }
                | EventKind::WorkflowCancelled { .. } => {
                    let (outcome, status) = match &e.kind {
                        EventKind::WorkflowCompleted { .. } => ("completed", None),
                        EventKind::WorkflowFailed { error } => (
                            "failed",
                            error_status(format!("{}: {}", error.code, error.message)),
                        ),
                        _ => ("cancelled", None),
                    };
                    if let Some(x) = self.executions.remove(id) {
                        // A child's parent is its parent's execution span;
                        // a top-level execution's, the caller's span.
                        let parent_span_id = match &x.parent {
                            Some(p) => execution_span_id(p),
                            None => x
                                .traceparent
                                .as_deref()
                                .and_then(TraceParent::parse)
                                .map(|t| t.parent_id.to_vec())
                                .unwrap_or_default(),
                        };
                        out.push(Span {
                            trace_id: trace_id.clone(),
                            span_id: execution_span_id(id),
                            parent_span_id,
                            name: format!("execution {}", x.workflow),
                            kind: span::SpanKind::Internal as i32,
                            start_time_unix_nano: nanos(x.created_at),
                            end_time_unix_nano: nanos(e.at.max(x.created_at)),
                            attributes: vec![
                                kv("orbit.execution_id", id),
                                kv("orbit.workflow", x.workflow),
                                kv("orbit.version", x.version),
                                kv("orbit.status", outcome),
                            ],
                            events: x.marks,
                            status,
                            ..Default::default()
                        });
                    }
                    break;
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: u64, at: Millis, kind: serde_json::Value) -> Event {
        let mut v = kind;
        v["seq"] = json!(seq);
        v["at"] = json!(at);
        serde_json::from_value(v).unwrap()
    }

    fn created(parent: Option<&str>) -> serde_json::Value {
        json!({"type": "WorkflowCreated", "workflow": "W", "version": "1.0.0",
               "definition_hash": "h", "input": {}, "parent": parent})
    }

    #[test]
    fn children_join_the_parent_trace_and_compensations_are_attempts() {
        let mut t = Traces::default();
        assert!(t.follow("p", &[ev(1, 0, created(None))]).is_empty());
        t.follow("p.kid", &[ev(1, 5, created(Some("p")))]);
        let kid = t.follow(
            "p.kid",
            &[ev(2, 9, json!({"type": "WorkflowCompleted", "output": {}}))],
        );
        assert_eq!(kid.len(), 1);
        assert_eq!(kid[0].trace_id, trace::trace_id("p", None).to_vec());
        assert_eq!(kid[0].parent_span_id, execution_span_id("p"));
        let spans = t.follow(
            "p",
            &[
                ev(
                    2,
                    10,
                    json!({"type": "StepScheduled", "step": "compensate:charge", "attempt": 1,
                    "redelivery": true, "input": {}, "idempotency_key": "k", "task": "pay.refund",
                    "contract_version": "1.0.0"}),
                ),
                ev(
                    3,
                    12,
                    json!({"type": "StepDispatched", "step": "compensate:charge", "attempt": 1,
                    "worker_id": "w1", "token": "t"}),
                ),
                ev(
                    4,
                    20,
                    json!({"type": "StepAttemptUncertain", "step": "compensate:charge",
                    "attempt": 1, "reason": "worker unregistered"}),
                ),
                ev(5, 30, json!({"type": "WorkflowCancelled"})),
            ],
        );
        assert_eq!(spans.len(), 2);
        let a = &spans[0];
        assert_eq!(a.name, "compensate:charge");
        assert_eq!(
            (a.start_time_unix_nano, a.end_time_unix_nano),
            (10_000_000, 20_000_000)
        );
        assert_eq!(a.events[0].time_unix_nano, 12_000_000);
        let has = |k: &str, v: any_value::Value| {
            a.attributes.iter().any(|kv| {
                kv.key == k && kv.value.as_ref().and_then(|x| x.value.clone()) == Some(v.clone())
            })
        };
        assert!(has("orbit.compensation", any_value::Value::BoolValue(true)));
        assert!(has("orbit.redelivery", any_value::Value::BoolValue(true)));
        assert!(has(
            "orbit.outcome",
            any_value::Value::StringValue("uncertain".into())
        ));
        assert_eq!(spans[1].name, "execution W");
        assert!(spans[1].parent_span_id.is_empty());
        assert!(!t.knows("p"));
    }

    #[test]
    fn a_caller_traceparent_roots_the_execution_and_its_children() {
        const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let caller = TraceParent::parse(CALLER).unwrap();
        let with = |v: serde_json::Value| {
            let mut v = v;
            v["traceparent"] = json!(CALLER);
            v
        };
        let mut t = Traces::default();
        t.follow("p", &[ev(1, 0, with(created(None)))]);
        t.follow("p.kid", &[ev(1, 5, with(created(Some("p"))))]);
        let kid = t.follow("p.kid", &[ev(2, 9, json!({"type": "WorkflowCancelled"}))]);
        assert_eq!(kid[0].trace_id, caller.trace_id.to_vec());
        assert_eq!(kid[0].parent_span_id, execution_span_id("p"));
        let spans = t.follow(
            "p",
            &[
                ev(
                    2,
                    10,
                    json!({"type": "StepScheduled", "step": "charge", "attempt": 1,
                    "redelivery": false, "input": {}, "idempotency_key": "k", "task": "pay",
                    "contract_version": "1.0.0"}),
                ),
                ev(
                    3,
                    20,
                    json!({"type": "StepSucceeded", "step": "charge", "attempt": 1, "output": {}}),
                ),
                ev(4, 30, json!({"type": "WorkflowCompleted", "output": {}})),
            ],
        );
        assert_eq!(spans.len(), 2);
        // The attempt's span is the parent the engine names in its task.
        let task = TraceParent::parse(&trace::task_traceparent(
            trace::trace_id("p", Some(CALLER)),
            "p",
            2,
        ))
        .unwrap();
        assert_eq!(spans[0].span_id, task.parent_id.to_vec());
        assert_eq!(spans[0].trace_id, caller.trace_id.to_vec());
        assert_eq!(spans[1].trace_id, caller.trace_id.to_vec());
        assert_eq!(spans[1].parent_span_id, caller.parent_id.to_vec());
    }
}

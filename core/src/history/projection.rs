//! The fold of a history into an execution's state. [`Projection::apply`]
//! is the only way state changes, so replaying a history from scratch and
//! applying events one by one as they commit give the same value (a
//! property test holds them equal).
//!
//! The large collections are persistent (structurally shared) maps, so the
//! engine can clone a projection into a batch draft in constant time
//! whatever the history length or fan-out width. Their keys are shared
//! names ([`Name`]): a change copies the tree node it touches, and copying
//! a node of shared names copies pointers, not text.

use super::event::{CompensationReason, ErrorInfo, Event, EventKind, Millis, WorkflowError};
use super::status::Status;
use super::unit::{Dispatch, DispatchState, Unit, UnitName, UnitState};
use imbl::{OrdMap, OrdSet, Vector};
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

/// A step or unit name, or a token, as the projection's collections hold
/// it: one allocation per name, shared by every collection and every copy.
pub type Name = Arc<str>;

/// A requested cancellation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// When it was requested.
    pub at: Millis,
    /// The caller's reason.
    pub reason: Option<String>,
}

/// The first permanent failure, which starts the wind-down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// When it happened.
    pub at: Millis,
    /// The error the workflow fails with (its `step` is the failed unit).
    pub error: WorkflowError,
}

/// Compensation in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compensation {
    /// Why.
    pub reason: CompensationReason,
    /// Units to compensate, in order.
    pub units: Vec<String>,
    /// The first compensation unit that failed permanently, with its error.
    pub failed: Option<(String, ErrorInfo)>,
}

/// The folded state of one step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepState {
    /// `StepFanOut` items (shared: cloning a projection must not copy
    /// a wide fan-out's list).
    pub items: Option<Arc<Vec<serde_json::Value>>>,
    /// `StepSkipped`.
    pub skipped: bool,
    /// `TimerStarted` fire time.
    pub timer: Option<Millis>,
    /// `TimerFired` recorded.
    pub timer_fired: bool,
    /// The consumed signal's payload.
    pub signal: Option<serde_json::Value>,
    /// Units of this step ever started (scheduled or child started).
    pub units_started: usize,
    /// Units of this step that succeeded.
    pub units_succeeded: usize,
    /// Units of this step that are resolved (succeeded or failed).
    pub units_resolved: usize,
    /// The first failure of the step or one of its units.
    pub failed: Option<ErrorInfo>,
    /// Latest time the step made progress towards success (its resolution
    /// time once resolved).
    pub progress_at: Millis,
}

/// Everything the engine knows about one execution, folded from its history.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Projection {
    /// Execution id.
    pub execution_id: Arc<str>,
    /// Workflow name (shared, like the other names that never change: a
    /// draft and every stored summary copy them).
    pub workflow: Arc<str>,
    /// Workflow version.
    pub version: Arc<str>,
    /// Pinned definition hash.
    pub definition_hash: Arc<str>,
    /// The input (shared: cloning a projection must not copy it).
    pub input: Arc<serde_json::Value>,
    /// Parent execution id.
    pub parent: Option<String>,
    /// The caller's W3C `traceparent` (`WorkflowCreated`), if any.
    pub traceparent: Option<String>,
    /// The execution's trace id, derived once at `WorkflowCreated` (see
    /// [`crate::trace::trace_id`]): every task handed out names it.
    pub trace_id: [u8; 16],
    /// Current status (`Pending` before `WorkflowCreated` too).
    pub status: Status,
    /// Time of the first event.
    pub created_at: Millis,
    /// Time of the last event.
    pub updated_at: Millis,
    /// Time of `WorkflowStarted`.
    pub started_at: Option<Millis>,
    /// Seq of the last event (0: no event).
    pub last_seq: u64,
    /// A requested cancellation.
    pub cancel: Option<Cancel>,
    /// The first permanent failure (not recorded after a cancellation).
    pub failure: Option<Failure>,
    /// Per step, by name.
    pub steps: OrdMap<Name, StepState>,
    /// Per unit, by unit name (each unit shared too: a draft copies only
    /// the units its events change).
    pub units: OrdMap<Name, Arc<Unit>>,
    /// Non-compensation units in the order they succeeded.
    pub successes: Vector<Name>,
    /// Unconsumed signals by name: seq -> payload.
    pub signals: BTreeMap<String, BTreeMap<u64, serde_json::Value>>,
    /// Compensation, once started.
    pub compensation: Option<Compensation>,
    /// The output, once completed.
    pub output: Option<serde_json::Value>,
    /// The error, once failed.
    pub error: Option<WorkflowError>,
    /// Every token ever issued: token -> unit.
    pub tokens: OrdMap<Name, Name>,
    /// Units not yet resolved.
    pub open_units: OrdSet<Name>,
    /// Unresolved units by state, ordered by the time their state's clock
    /// started, so the decider visits only what can be due.
    pub index: UnitIndex,
}

/// Unresolved units grouped by state (time-ordered where time matters).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UnitIndex {
    /// `(retry_at, unit)` of units waiting for a retry.
    pub retrying: OrdSet<(Millis, Name)>,
    /// `(dispatched at, unit)` of units with a delivery in flight.
    pub in_flight: OrdSet<(Millis, Name)>,
    /// `(first scheduled at, unit)` of queued units never dispatched (first
    /// deliveries: what `queue_timeout` applies to).
    pub undelivered: OrdSet<(Millis, Name)>,
    /// Units with a running child execution.
    pub children: OrdSet<Name>,
    /// Units between an outcome and their next event.
    pub idle: OrdSet<Name>,
}

impl UnitIndex {
    fn entry(&mut self, name: &Name, u: &Unit, add: bool) {
        let name = name.clone();
        macro_rules! put {
            ($set:expr, $key:expr) => {
                if add {
                    $set.insert($key);
                } else {
                    $set.remove(&$key);
                }
            };
        }
        match &u.state {
            UnitState::Retrying { retry_at } => put!(self.retrying, (*retry_at, name)),
            UnitState::InFlight { .. } => {
                let at = u.current_dispatch().map_or(0, |(_, d)| d.at);
                put!(self.in_flight, (at, name))
            }
            UnitState::Queued { .. } if !u.dispatched && !u.redelivery => {
                put!(self.undelivered, (u.first_scheduled_at, name))
            }
            UnitState::Child { .. } => put!(self.children, name),
            UnitState::Idle => put!(self.idle, name),
            _ => {}
        }
    }
}

/// The unit an event changes, if any.
fn unit_of(kind: &EventKind) -> Option<&str> {
    match kind {
        EventKind::StepScheduled { step, .. }
        | EventKind::StepDispatched { step, .. }
        | EventKind::StepAttemptUncertain { step, .. }
        | EventKind::StepSucceeded { step, .. }
        | EventKind::StepAttemptFailed { step, .. }
        | EventKind::StepFailed { step, .. }
        | EventKind::ChildStarted { step, .. }
        | EventKind::ChildCompleted { step, .. }
        | EventKind::ChildFailed { step, .. } => Some(step),
        _ => None,
    }
}

impl Projection {
    /// An empty projection for `execution_id`.
    pub fn new(execution_id: &str) -> Projection {
        Projection {
            execution_id: execution_id.into(),
            ..Projection::default()
        }
    }

    /// Folds a whole history.
    pub fn fold<'a>(execution_id: &str, events: impl IntoIterator<Item = &'a Event>) -> Projection {
        let mut p = Projection::new(execution_id);
        for e in events {
            p.apply(e);
        }
        p
    }

    /// True once cancellation was requested, a step failed permanently or
    /// compensation started: nothing new is scheduled.
    pub fn winding_down(&self) -> bool {
        self.cancel.is_some() || self.failure.is_some() || self.compensation.is_some()
    }

    fn step_mut(&mut self, step: &str) -> &mut StepState {
        let key = match self.steps.get_key_value(step) {
            Some((k, _)) => k.clone(),
            None => step.into(),
        };
        self.steps.entry(key).or_default()
    }

    /// The unit named `unit` (a new, idle one if it has none yet), to
    /// change, with its shared name.
    fn unit_entry(&mut self, unit: &str, at: Millis) -> (Name, &mut Unit) {
        let key: Name = match self.units.get_key_value(unit) {
            Some((k, _)) => k.clone(),
            None => unit.into(),
        };
        let u = self.units.entry(key.clone()).or_insert_with(|| {
            Arc::new(Unit {
                name: UnitName::of(&key),
                task: unnamed(),
                contract_version: unnamed(),
                attempt: 0,
                redelivery: false,
                input: Arc::new(serde_json::Value::Null),
                idempotency_key: unnamed(),
                first_scheduled_at: at,
                scheduled_seq: 0,
                dispatched: false,
                state: UnitState::Idle,
                dispatches: BTreeMap::new(),
                resolved_at: None,
            })
        });
        // Copied here only if a clone of this projection shares it.
        (key, Arc::make_mut(u))
    }

    fn close_current(&mut self, unit: &str, state: DispatchState) {
        if let Some(u) = self.units.get_mut(unit) {
            // The unit changes next in any case (its event resolves or
            // reschedules it): copying it now costs nothing more.
            let u = Arc::make_mut(u);
            if let UnitState::InFlight { token } = &u.state {
                if let Some(d) = u.dispatches.get_mut(token) {
                    d.state = state;
                }
            }
        }
    }

    fn record_failure(&mut self, at: Millis, unit: &str, error: &ErrorInfo) {
        let name = UnitName::parse(unit);
        if name.compensation {
            if let Some(c) = &mut self.compensation {
                if c.failed.is_none() {
                    c.failed = Some((unit.to_string(), error.clone()));
                }
            }
            return;
        }
        let s = self.step_mut(&name.step);
        if s.failed.is_none() {
            s.failed = Some(error.clone());
        }
        if !self.winding_down() {
            self.failure = Some(Failure {
                at,
                error: WorkflowError {
                    code: error.code.clone(),
                    message: error.message.clone(),
                    step: Some(unit.to_string()),
                },
            });
        }
    }

    fn resolve(&mut self, unit: &str, at: Millis, state: UnitState) {
        let succeeded = matches!(state, UnitState::Succeeded { .. });
        let (key, u) = self.unit_entry(unit, at);
        let was_open = !u.is_resolved();
        u.state = state;
        u.resolved_at = Some(at);
        let name = u.name.clone();
        self.open_units.remove(unit);
        if !was_open || name.compensation {
            return;
        }
        let s = self.step_mut(&name.step);
        s.units_resolved += 1;
        if succeeded {
            s.units_succeeded += 1;
            s.progress_at = s.progress_at.max(at);
            self.successes.push_back(key);
        }
    }

    /// Applies one event (the next in seq order).
    pub fn apply(&mut self, event: &Event) {
        let at = event.at;
        if self.last_seq == 0 {
            self.created_at = at;
        }
        self.last_seq = event.seq;
        self.updated_at = at;
        let unit = unit_of(&event.kind);
        if let Some(name) = unit {
            if let Some((key, u)) = self.units.get_key_value(name) {
                self.index.entry(key, u, false);
            }
        }
        self.apply_kind(event);
        if let Some(name) = unit {
            if let Some((key, u)) = self.units.get_key_value(name) {
                if !u.is_resolved() {
                    self.index.entry(key, u, true);
                }
            }
        }
    }

    fn apply_kind(&mut self, event: &Event) {
        let at = event.at;
        match &event.kind {
            EventKind::WorkflowCreated {
                workflow,
                version,
                definition_hash,
                input,
                parent,
                traceparent,
            } => {
                self.workflow = workflow.as_str().into();
                self.version = version.as_str().into();
                self.definition_hash = definition_hash.as_str().into();
                self.input = Arc::new(input.clone());
                self.parent = parent.clone();
                self.traceparent = traceparent.clone();
                self.trace_id = crate::trace::trace_id(&self.execution_id, traceparent.as_deref());
                self.status = Status::Pending;
            }
            EventKind::WorkflowStarted {} => {
                self.status = Status::Running;
                self.started_at = Some(at);
            }
            EventKind::StepFanOut { step, items } => {
                let s = self.step_mut(step);
                s.items = Some(Arc::new(items.clone()));
                s.progress_at = s.progress_at.max(at);
            }
            EventKind::StepScheduled {
                step,
                attempt,
                redelivery,
                input,
                idempotency_key,
                task,
                contract_version,
            } => {
                let (key, u) = self.unit_entry(step, at);
                let first = u.attempt == 0;
                if first {
                    u.first_scheduled_at = at;
                }
                u.attempt = *attempt;
                u.scheduled_seq = event.seq;
                u.redelivery = *redelivery;
                u.input = input.clone();
                // A retry schedules the same task again: its names stay.
                renew(&mut u.idempotency_key, idempotency_key);
                renew(&mut u.task, task);
                renew(&mut u.contract_version, contract_version);
                u.state = UnitState::Queued { since: at };
                let started = (first && !u.name.compensation).then(|| u.name.step.clone());
                self.open_units.insert(key);
                if let Some(step) = started {
                    self.step_mut(&step).units_started += 1;
                }
            }
            EventKind::StepDispatched {
                step,
                attempt,
                worker_id,
                token,
            } => {
                let (key, u) = self.unit_entry(step, at);
                // One copy of the token, shared by the three places
                // that name it.
                let token: Name = token.as_str().into();
                u.dispatches.insert(
                    token.clone(),
                    Dispatch {
                        attempt: *attempt,
                        worker_id: worker_id.as_str().into(),
                        at,
                        redelivery: u.redelivery,
                        state: DispatchState::Current,
                    },
                );
                u.dispatched = true;
                u.state = UnitState::InFlight {
                    token: token.clone(),
                };
                self.tokens.insert(token, key);
            }
            EventKind::StepAttemptUncertain { step, .. } => {
                self.close_current(step, DispatchState::Uncertain);
                let (_, u) = self.unit_entry(step, at);
                u.redelivery = true;
                u.state = UnitState::Idle;
            }
            EventKind::StepSucceeded { step, output, .. } => {
                self.close_current(step, DispatchState::Failed);
                self.resolve(
                    step,
                    at,
                    UnitState::Succeeded {
                        output: output.clone(),
                    },
                );
            }
            EventKind::StepAttemptFailed { step, retry_at, .. } => {
                self.close_current(step, DispatchState::Failed);
                let (_, u) = self.unit_entry(step, at);
                u.redelivery = false;
                u.state = match retry_at {
                    Some(t) => UnitState::Retrying { retry_at: *t },
                    None => UnitState::Idle,
                };
            }
            EventKind::StepFailed { step, error } => {
                self.close_current(step, DispatchState::Failed);
                let name = UnitName::parse(step);
                let is_unit = self.units.contains_key(step.as_str())
                    || name.index.is_some()
                    || name.compensation;
                self.record_failure(at, step, error);
                if is_unit {
                    self.resolve(
                        step,
                        at,
                        UnitState::Failed {
                            error: error.clone(),
                        },
                    );
                }
            }
            EventKind::StepSkipped { step } => {
                let s = self.step_mut(step);
                s.skipped = true;
                s.progress_at = s.progress_at.max(at);
            }
            EventKind::StaleResultIgnored { .. } => {}
            EventKind::TimerStarted { step, fire_at } => {
                self.step_mut(step).timer = Some(*fire_at);
            }
            EventKind::TimerFired { step, .. } => {
                let s = self.step_mut(step);
                s.timer_fired = true;
                s.progress_at = s.progress_at.max(at);
            }
            EventKind::SignalReceived { name, payload } => {
                self.signals
                    .entry(name.clone())
                    .or_default()
                    .insert(event.seq, payload.clone());
            }
            EventKind::SignalConsumed { step, signal_seq } => {
                let mut payload = serde_json::Value::Null;
                for buffer in self.signals.values_mut() {
                    if let Some(p) = buffer.remove(signal_seq) {
                        payload = p;
                        break;
                    }
                }
                let s = self.step_mut(step);
                s.signal = Some(payload);
                s.progress_at = s.progress_at.max(at);
            }
            EventKind::ChildStarted { step, child_id } => {
                let (key, u) = self.unit_entry(step, at);
                let first = u.attempt == 0;
                u.attempt = 1;
                u.first_scheduled_at = at;
                u.state = UnitState::Child {
                    child_id: child_id.clone(),
                };
                let name = u.name.clone();
                self.open_units.insert(key);
                if first {
                    self.step_mut(&name.step).units_started += 1;
                }
            }
            EventKind::ChildCompleted { step, output, .. } => {
                self.resolve(
                    step,
                    at,
                    UnitState::Succeeded {
                        output: Arc::new(output.clone()),
                    },
                );
            }
            EventKind::ChildFailed { step, error, .. } => {
                self.record_failure(at, step, error);
                self.resolve(
                    step,
                    at,
                    UnitState::Failed {
                        error: error.clone(),
                    },
                );
            }
            EventKind::CompensationStarted { reason, units } => {
                self.status = Status::Compensating;
                self.compensation = Some(Compensation {
                    reason: *reason,
                    units: units.clone(),
                    failed: None,
                });
            }
            EventKind::WorkflowCancelRequested { reason } => {
                if self.cancel.is_none() {
                    self.cancel = Some(Cancel {
                        at,
                        reason: reason.clone(),
                    });
                }
            }
            EventKind::WorkflowCompleted { output } => {
                self.status = Status::Completed;
                self.output = Some(output.clone());
            }
            EventKind::WorkflowFailed { error } => {
                self.status = Status::Failed;
                self.error = Some(error.clone());
            }
            EventKind::WorkflowCancelled {} => {
                self.status = Status::Cancelled;
            }
        }
    }
}

/// The empty name (of a unit not scheduled yet, of a session's worker
/// once the session is gone): one allocation for the whole process, shared.
pub(crate) fn unnamed() -> Name {
    static EMPTY: LazyLock<Name> = LazyLock::new(|| Name::from(""));
    EMPTY.clone()
}

/// Sets `name` to `to` unless it already reads so (shared names are
/// copied only when they change).
fn renew(name: &mut Name, to: &str) {
    if **name != *to {
        *name = to.into();
    }
}

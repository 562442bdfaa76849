//! An execution as `GET /v1/executions/{id}` and `wait` show it, kept
//! typed until the edge serializes it: taking it from a projection clones
//! shared pointers, not the execution's input or its units.

use super::batch::Summary;
use super::json::Object;
use super::rfc3339;
use super::time::write_rfc3339;
use super::txn::summary;
use crate::history::{Name, Projection, Unit, UnitState};
use imbl::OrdMap;
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::sync::Arc;

/// The execution's view: `{"execution_id", "workflow", "version",
/// "definition_hash", "parent", "status", "input", "output", "error",
/// "created_at", "updated_at", "units"}`. Keys are written in sorted
/// order, as a JSON tree of the same answer would hold them.
#[derive(Debug, Clone)]
pub struct ExecutionView {
    /// What the stored summary holds (the same pointers).
    summary: Summary,
    units: OrdMap<Name, Arc<Unit>>,
}

impl ExecutionView {
    /// The view of `p` as it stands.
    pub fn of(p: &Projection) -> ExecutionView {
        ExecutionView {
            summary: summary(p),
            units: p.units.clone(),
        }
    }

    /// The same JSON as its `Serialize` gives, written by hand (see
    /// [`super::json`]).
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let s = &self.summary;
        let mut o = Object::new(out);
        write_rfc3339(o.key("created_at"), s.created_at);
        o.str("definition_hash", &s.definition_hash)?;
        o.value("error", &s.error)?;
        o.str("execution_id", &s.execution_id)?;
        o.value("input", &*s.input)?;
        o.value("output", &s.output)?;
        o.value("parent", &s.parent)?;
        o.str("status", s.status.as_str())?;
        let mut units = Object::new(o.key("units"));
        for (name, unit) in &self.units {
            UnitView(unit).write_json(units.name(name)?)?;
        }
        units.end();
        write_rfc3339(o.key("updated_at"), s.updated_at);
        o.str("version", &s.version)?;
        o.str("workflow", &s.workflow)?;
        o.end();
        Ok(())
    }

    /// The same answer as a JSON tree.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

impl Serialize for ExecutionView {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let s = &self.summary;
        let mut m = serializer.serialize_map(Some(12))?;
        m.serialize_entry("created_at", &rfc3339(s.created_at))?;
        m.serialize_entry("definition_hash", &*s.definition_hash)?;
        m.serialize_entry("error", &s.error)?;
        m.serialize_entry("execution_id", &*s.execution_id)?;
        m.serialize_entry("input", &*s.input)?;
        m.serialize_entry("output", &s.output)?;
        m.serialize_entry("parent", &s.parent)?;
        m.serialize_entry("status", s.status.as_str())?;
        m.serialize_entry("units", &Units(&self.units))?;
        m.serialize_entry("updated_at", &rfc3339(s.updated_at))?;
        m.serialize_entry("version", &*s.version)?;
        m.serialize_entry("workflow", &*s.workflow)?;
        m.end()
    }
}

/// The units, by name.
struct Units<'a>(&'a OrdMap<Name, Arc<Unit>>);

impl Serialize for Units<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(name, u)| (name, UnitView(u))))
    }
}

/// One unit: `{"attempt", "child_id"?, "error"?: {"code", "message"},
/// "idempotency_key"?, "output"?, "status", "task"?}`.
struct UnitView<'a>(&'a Unit);

impl Serialize for UnitView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let u = self.0;
        let mut m = serializer.serialize_map(None)?;
        m.serialize_entry("attempt", &u.attempt)?;
        if let UnitState::Child { child_id } = &u.state {
            m.serialize_entry("child_id", child_id)?;
        }
        if let UnitState::Failed { error } = &u.state {
            m.serialize_entry(
                "error",
                &ErrorView {
                    code: &error.code,
                    message: &error.message,
                },
            )?;
        }
        let task = !u.task.is_empty();
        if task {
            m.serialize_entry("idempotency_key", &u.idempotency_key)?;
        }
        if let UnitState::Succeeded { output } = &u.state {
            m.serialize_entry("output", &**output)?;
        }
        m.serialize_entry("status", status(&u.state))?;
        if task {
            m.serialize_entry("task", &u.task)?;
        }
        m.end()
    }
}

impl UnitView<'_> {
    /// The same JSON as its `Serialize` gives, written by hand.
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let u = self.0;
        let mut o = Object::new(out);
        o.value("attempt", &u.attempt)?;
        if let UnitState::Child { child_id } = &u.state {
            o.str("child_id", child_id)?;
        }
        if let UnitState::Failed { error } = &u.state {
            let mut e = Object::new(o.key("error"));
            e.str("code", &error.code)?;
            e.str("message", &error.message)?;
            e.end();
        }
        let task = !u.task.is_empty();
        if task {
            o.str("idempotency_key", &u.idempotency_key)?;
        }
        if let UnitState::Succeeded { output } = &u.state {
            o.value("output", &**output)?;
        }
        o.str("status", status(&u.state))?;
        if task {
            o.str("task", &u.task)?;
        }
        o.end();
        Ok(())
    }
}

/// A unit's status as the view shows it.
fn status(state: &UnitState) -> &'static str {
    match state {
        UnitState::Queued { .. } | UnitState::Idle => "queued",
        UnitState::InFlight { .. } | UnitState::Child { .. } => "running",
        UnitState::Retrying { .. } => "retrying",
        UnitState::Succeeded { .. } => "succeeded",
        UnitState::Failed { .. } => "failed",
    }
}

/// A unit's error as the view shows it (without `retryable`).
#[derive(serde::Serialize)]
struct ErrorView<'a> {
    code: &'a str,
    message: &'a str,
}

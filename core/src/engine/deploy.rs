//! Registering definitions: identical content is a no-op, other content
//! under an existing name and version is `DEFINITION_CONFLICT`, a child whose
//! pinned hash is unknown is `CHILD_NOT_REGISTERED`.

use super::batch::DefinitionRecord;
use super::effect::Response;
use super::idempotency::Gate;
use super::input::{IdempotencyScope, Request, RequestId};
use super::txn::Txn;
use super::Engine;
use crate::ir::{StepKind, TaskContract};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

impl Engine {
    pub(super) fn deploy(
        &mut self,
        id: RequestId,
        definitions: Vec<DefinitionRecord>,
        idempotency: Option<IdempotencyScope>,
    ) {
        let request = Request::Deploy {
            definitions: definitions.clone(),
            idempotency: idempotency.clone(),
        };
        // One deploy at a time: a deploy is checked against committed
        // definitions only, so it waits while another one is being written
        // (deploys are rare; this keeps "registered" true once said).
        if !self.registry.deploying.is_empty() {
            self.registry.waiting.push_back((id, request));
            return;
        }
        if let Gate::Done = self.gate(id, &idempotency, &request) {
            return;
        }
        match self.check_deploy(&definitions) {
            Err(response) => self.reply(id, response),
            Ok((new, body)) => {
                let response = Response::ok(200, body);
                let mut txn = Txn {
                    definitions: new,
                    ..Txn::default()
                };
                self.record(&mut txn, &idempotency, &response);
                txn.reply(id, response, None);
                self.submit(txn);
            }
        }
    }

    /// Runs deploys that waited for the one in flight, until one of them
    /// writes again.
    pub(super) fn deploy_next(&mut self) {
        while self.registry.deploying.is_empty() {
            let Some((id, request)) = self.registry.waiting.pop_front() else {
                return;
            };
            self.request(id, request);
        }
    }

    fn check_deploy(
        &self,
        definitions: &[DefinitionRecord],
    ) -> Result<(Vec<DefinitionRecord>, serde_json::Value), Response> {
        let mut tasks: BTreeMap<(String, String), TaskContract> = BTreeMap::new();
        for def in self.registry.by_name.values() {
            for t in def.workflow.tasks.values() {
                tasks.insert((t.name.clone(), t.version.clone()), t.clone());
            }
        }
        let mut known_hashes: BTreeSet<String> = self.registry.by_hash.keys().cloned().collect();
        known_hashes.extend(definitions.iter().map(|d| d.definition_hash.clone()));
        let mut new = Vec::new();
        let mut workflows = Vec::new();
        let mut task_rows: BTreeMap<(String, String), bool> = BTreeMap::new();
        let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
        for def in definitions {
            let wf = &def.workflow;
            let key = (wf.name.clone(), wf.version.clone());
            let existing = self
                .registry
                .by_name
                .get(&key)
                .map(|d| d.definition_hash.clone())
                .or_else(|| seen.get(&key).cloned());
            let created = match existing {
                Some(h) if h == def.definition_hash => false,
                Some(_) => {
                    return Err(Response::error(
                        409,
                        "DEFINITION_CONFLICT",
                        format!(
                            "workflow {} version {} is already registered with different content; bump the version",
                            wf.name, wf.version
                        ),
                    ))
                }
                None => true,
            };
            for step in &wf.steps {
                if let StepKind::Workflow {
                    workflow,
                    version,
                    definition_hash,
                    ..
                } = &step.kind
                {
                    if !known_hashes.contains(definition_hash) {
                        return Err(Response::error(
                            409,
                            "CHILD_NOT_REGISTERED",
                            format!(
                                "child workflow {workflow} version {version} (hash {definition_hash}) used by step `{}` of {} is not registered",
                                step.name, wf.name
                            ),
                        ));
                    }
                }
            }
            for t in wf.tasks.values() {
                let tkey = (t.name.clone(), t.version.clone());
                match tasks.get(&tkey) {
                    Some(known) if known != t => {
                        return Err(Response::error(
                            409,
                            "DEFINITION_CONFLICT",
                            format!(
                            "task {} version {} is already registered with a different contract",
                            t.name, t.version
                        ),
                        ))
                    }
                    Some(_) => {
                        task_rows.entry(tkey).or_insert(false);
                    }
                    None => {
                        tasks.insert(tkey.clone(), t.clone());
                        task_rows.insert(tkey, true);
                    }
                }
            }
            seen.insert(key, def.definition_hash.clone());
            workflows.push(json!({
                "name": wf.name,
                "version": wf.version,
                "definition_hash": def.definition_hash,
                "created": created,
            }));
            if created {
                let mut record = def.clone();
                record.registered_at = self.now;
                new.push(record);
            }
        }
        let tasks: Vec<serde_json::Value> = task_rows
            .into_iter()
            .map(|((name, version), created)| json!({"name": name, "version": version, "created": created}))
            .collect();
        Ok((new, json!({"workflows": workflows, "tasks": tasks})))
    }

    pub(super) fn list_definitions(&mut self, id: RequestId) {
        let rows: Vec<serde_json::Value> = self
            .registry
            .by_name
            .values()
            .map(|d| {
                json!({
                    "name": d.workflow.name,
                    "version": d.workflow.version,
                    "definition_hash": d.definition_hash,
                    "registered_at": super::rfc3339(d.registered_at),
                })
            })
            .collect();
        self.reply(id, Response::ok(200, json!({"definitions": rows})));
    }

    pub(super) fn get_definition(&mut self, id: RequestId, name: &str, version: &str) {
        let response = match self
            .registry
            .by_name
            .get(&(name.to_string(), version.to_string()))
        {
            Some(d) => Response::ok(
                200,
                json!({
                    "name": d.workflow.name,
                    "version": d.workflow.version,
                    "definition_hash": d.definition_hash,
                    "registered_at": super::rfc3339(d.registered_at),
                    "source": d.source,
                    "definition": d.workflow,
                }),
            ),
            None => Response::error(
                404,
                "UNKNOWN_WORKFLOW",
                format!("no workflow {name} version {version} is registered"),
            ),
        };
        self.reply(id, response);
    }
}

//! Startup: definitions, executions replayed from their histories, tokens
//! of in-flight dispatches re-indexed (held by no session until a worker
//! lists or reports them), then one session timeout of grace before
//! unreported dispatches become uncertain. Only work in progress is
//! needed: finished children of live parents are loaded on demand, and
//! finished executions passed anyway join the recent ones.

use super::batch::{DefinitionRecord, IdempotencyRecord, StoredExecution};
use super::Engine;
use std::sync::Arc;

impl Engine {
    pub(super) fn recover(
        &mut self,
        definitions: Vec<DefinitionRecord>,
        executions: Vec<StoredExecution>,
        idempotency: Vec<IdempotencyRecord>,
    ) {
        for d in definitions {
            self.register(d);
        }
        // Committed records live in the store; a request's key is loaded
        // when it comes.
        drop(idempotency);
        let mut ids = Vec::new();
        for stored in executions {
            ids.push(stored.execution_id.clone());
            self.install(stored);
        }
        self.builtin_restarted();
        let in_flight = self
            .work
            .tokens
            .values()
            .any(|t| t.session.is_none() && !t.confirmed);
        if in_flight {
            self.recovery_until = Some(self.now + self.config.session_timeout_ms);
        }
        for id in &ids {
            self.refresh(id);
        }
        for id in &ids {
            self.retire(id);
        }
        self.load_missing_children();
        self.admission.needed = true;
    }

    /// Registers a definition read from the store (one already known
    /// stays as it is).
    pub(super) fn register(&mut self, d: DefinitionRecord) {
        if self.registry.by_hash.contains_key(&d.definition_hash) {
            return;
        }
        let d = Arc::new(d);
        self.registry
            .by_hash
            .insert(d.definition_hash.clone(), d.clone());
        self.registry
            .by_name
            .insert((d.workflow.name.clone(), d.workflow.version.clone()), d);
    }
}

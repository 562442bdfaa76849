//! Startup: definitions, executions replayed from their histories, tokens
//! of in-flight dispatches re-indexed (held by no session until a worker
//! lists or reports them), then one session timeout of grace before
//! unreported dispatches become uncertain.

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
            let d = Arc::new(d);
            self.by_hash.insert(d.definition_hash.clone(), d.clone());
            self.definitions
                .insert((d.workflow.name.clone(), d.workflow.version.clone()), d);
        }
        for r in idempotency {
            if r.expires_at > self.now {
                self.idempotency.insert(r.key.clone(), r);
            }
        }
        let mut ids = Vec::new();
        for stored in executions {
            ids.push(stored.execution_id.clone());
            self.install(stored);
        }
        self.builtin_restarted();
        let in_flight = self
            .tokens
            .values()
            .any(|t| t.session.is_none() && !t.confirmed);
        if in_flight {
            self.recovery_until = Some(self.now + self.config.session_timeout_ms);
        }
        for id in ids {
            self.refresh(&id);
        }
        self.admit_needed = true;
    }
}

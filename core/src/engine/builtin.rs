//! The engine's side of built-in tasks (`orbit.http`): the runtime's own
//! executor registers a *built-in session* that takes `orbit.*` units and
//! nothing else (worker sessions never take them), polls and heartbeats
//! like any worker, and reports results with the delivery's token. Two
//! things only it may do: register as built-in, and declare a delivery
//! uncertain (a timeout or a lost connection after the request was sent).
//! On recovery, built-in deliveries that were in flight become uncertain at
//! once with the seed's reason: the executor that ran them died with the
//! process.

use super::effect::Response;
use super::input::RequestId;
use super::state::Session;
use super::Engine;
use crate::builtin::{is_reserved, RESTART_REASON, WORKER_ID};
use crate::history::Name;
use serde_json::json;
use std::collections::BTreeSet;

impl Engine {
    /// `Request::RegisterBuiltin`: a session of the runtime's own executor.
    pub(super) fn register_builtin(&mut self, id: RequestId, max_tasks: Option<u32>) {
        let session_id = self.ids.next_id();
        self.work.sessions.insert(
            session_id.as_str().into(),
            Session {
                worker_id: WORKER_ID.into(),
                patterns: vec![format!("{}*", crate::builtin::PREFIX)],
                max_tasks: max_tasks.unwrap_or(1).max(1),
                last_seen: self.now,
                tokens: BTreeSet::new(),
                builtin: true,
            },
        );
        self.reply(
            id,
            Response::ok(
                200,
                json!({"session_id": session_id, "session_timeout_ms": self.config.session_timeout_ms}),
            ),
        );
    }

    /// `Request::BuiltinUncertain`: the built-in session cannot know whether
    /// the delivery with `token` took effect; the attempt becomes uncertain
    /// with `reason` and is redelivered with the same key.
    pub(super) fn builtin_uncertain(
        &mut self,
        id: RequestId,
        session_id: &str,
        token: &str,
        reason: String,
    ) {
        let builtin = self
            .work
            .sessions
            .get(session_id)
            .is_some_and(|s| s.builtin);
        if !builtin {
            return self.reply(
                id,
                Response::error(
                    404,
                    "UNKNOWN_SESSION",
                    format!("no built-in session `{session_id}`"),
                ),
            );
        }
        let known = self.work.tokens.get(token).is_some_and(|t| {
            t.session.as_deref() == Some(session_id) || &*t.worker_id == WORKER_ID
        });
        if !known {
            return self.reply(
                id,
                Response::ok(
                    200,
                    json!({"accepted": false, "reason": super::results::UNKNOWN_TOKEN}),
                ),
            );
        }
        if let Some(s) = self.work.sessions.get_mut(session_id) {
            s.last_seen = self.now;
            s.tokens.remove(token);
        }
        if let Some(t) = self.work.tokens.get_mut(token) {
            t.confirmed = true;
            t.session = None;
            let key = (t.dispatched_at, Name::from(token));
            self.work.unconfirmed.remove(&key);
        }
        self.work.orphans.insert(token.to_string(), reason);
        self.process_orphans();
        self.reply(id, Response::ok(200, json!({"accepted": true})));
    }

    /// At startup: every built-in delivery still in flight was running in
    /// the process that died; it becomes uncertain with the seed's reason
    /// (no grace period: nobody can re-attach it).
    pub(super) fn builtin_restarted(&mut self) {
        let mut lost = Vec::new();
        for (token, t) in &self.work.tokens {
            let Some(u) = self
                .executions
                .get(&t.execution_id)
                .and_then(|e| e.proj.units.get(&*t.unit))
            else {
                continue;
            };
            if is_reserved(&u.task) {
                lost.push(token.clone());
            }
        }
        for token in lost {
            if let Some(t) = self.work.tokens.get_mut(&token) {
                t.confirmed = true;
            }
            self.work
                .orphans
                .insert(token.to_string(), RESTART_REASON.to_string());
        }
    }
}

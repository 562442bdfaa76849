//! Loads: reading executions back from the store after `Ambiguous` or a
//! stale `Conflict`, and trying again with a doubling delay when the read
//! fails, until the store answers.

use super::{Io, LoadId, Node};
use crate::engine::{Input, StoredExecution};
use crate::history::Millis;
use crate::store::StorageError;
use std::collections::BTreeMap;

/// A load being read, or waiting to be tried again.
#[derive(Debug, Clone)]
struct Load {
    executions: Vec<String>,
    /// The delay before the next try, after a failure.
    backoff: Millis,
    /// When it is tried again (`None` while it is being read).
    retry_at: Option<Millis>,
}

/// The loads of a node.
#[derive(Debug, Default)]
pub(super) struct Loads {
    next: LoadId,
    open: BTreeMap<LoadId, Load>,
}

impl Loads {
    /// The earliest retry due.
    pub(super) fn next_retry(&self) -> Option<Millis> {
        self.open.values().filter_map(|l| l.retry_at).min()
    }
}

impl Node {
    /// Asks the driver to read `executions`.
    pub(super) fn load(&mut self, executions: Vec<String>) {
        self.loads.next += 1;
        let id = self.loads.next;
        self.stats.loads += 1;
        self.loads.open.insert(
            id,
            Load {
                executions: executions.clone(),
                backoff: self.config.reload_backoff_ms,
                retry_at: None,
            },
        );
        self.out.push(Io::Load { id, executions });
    }

    /// A load came back: the engine learns what the store holds, or the
    /// load waits for its next try.
    pub(super) fn loaded(
        &mut self,
        now: Millis,
        id: LoadId,
        result: Result<Vec<StoredExecution>, StorageError>,
    ) {
        let Some(load) = self.loads.open.get_mut(&id) else {
            return;
        };
        if load.retry_at.is_some() {
            return; // not being read: a duplicate completion
        }
        match result {
            Ok(executions) => {
                self.loads.open.remove(&id);
                self.engine_input(now, Input::Reloaded { executions });
            }
            Err(_) => {
                load.retry_at = Some(now.saturating_add(load.backoff));
                load.backoff = load
                    .backoff
                    .saturating_mul(2)
                    .min(self.config.reload_backoff_max_ms);
            }
        }
    }

    /// Tries again every load whose delay has passed.
    pub(super) fn retry_loads(&mut self, now: Millis) {
        let due: Vec<LoadId> = self
            .loads
            .open
            .iter()
            .filter(|(_, l)| l.retry_at.is_some_and(|t| now >= t))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(load) = self.loads.open.get_mut(&id) {
                load.retry_at = None;
                self.stats.load_retries += 1;
                self.out.push(Io::Load {
                    id,
                    executions: load.executions.clone(),
                });
            }
        }
    }
}

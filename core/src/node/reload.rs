//! Loads: reading executions back from the store after `Ambiguous` or a
//! stale `Conflict` (reloads), or reading what a parked request needs of
//! executions and idempotency records the engine does not hold (fetches),
//! and trying again with a doubling delay when the read fails, until the
//! store answers.

use super::{Fetched, Io, LoadId, Node};
use crate::engine::{self, Input, StoredExecution};
use crate::history::Millis;
use crate::store::StorageError;
use std::collections::BTreeMap;

/// A load being read, or waiting to be tried again.
/// Why a load reads.
#[derive(Debug, Clone)]
enum Purpose {
    /// After `Ambiguous` or a stale `Conflict`: answered with `Reloaded`.
    Reload,
    /// The engine's `Effect::Load`: answered with `Loaded`.
    Fetch {
        /// The engine's id of the load.
        engine_load: engine::LoadId,
        /// The scoped idempotency keys to read.
        idempotency: Vec<String>,
    },
    /// Shared mode: executions this node now owns, at these epochs:
    /// answered with `Adopt`.
    Adopt {
        /// The epoch of each.
        epochs: BTreeMap<String, u64>,
        /// The member's generation when they moved here.
        generation: u64,
    },
}

#[derive(Debug, Clone)]
struct Load {
    executions: Vec<String>,
    purpose: Purpose,
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
    /// Loads being read or waiting to be tried again.
    pub(super) fn open_count(&self) -> usize {
        self.open.len()
    }

    /// The engine's reads (fetches) being read or waiting to be tried
    /// again.
    pub(super) fn fetches_open(&self) -> usize {
        self.open
            .values()
            .filter(|l| matches!(l.purpose, Purpose::Fetch { .. }))
            .count()
    }

    /// Whether a read of executions to adopt is open (shared mode).
    pub(super) fn adopting(&self) -> bool {
        self.open
            .values()
            .any(|l| matches!(l.purpose, Purpose::Adopt { .. }))
    }

    /// The earliest retry due.
    pub(super) fn next_retry(&self) -> Option<Millis> {
        self.open.values().filter_map(|l| l.retry_at).min()
    }
}

impl Node {
    /// Asks the driver to read `executions`.
    pub(super) fn load(&mut self, executions: Vec<String>) {
        self.open_load(executions, Purpose::Reload);
    }

    /// Reads executions this node now owns (shared mode), to adopt them.
    pub(super) fn read_owned(&mut self, taken: Vec<crate::store::shared::Taken>, generation: u64) {
        if taken.is_empty() {
            return;
        }
        let executions = taken.iter().map(|t| t.execution_id.clone()).collect();
        let epochs = taken
            .into_iter()
            .map(|t| (t.execution_id, t.epoch))
            .collect();
        self.open_load(executions, Purpose::Adopt { epochs, generation });
    }

    /// Reads what the engine asked for with `Effect::Load`.
    pub(super) fn fetch(
        &mut self,
        engine_load: engine::LoadId,
        executions: Vec<String>,
        idempotency: Vec<String>,
    ) {
        self.open_load(
            executions,
            Purpose::Fetch {
                engine_load,
                idempotency,
            },
        );
    }

    fn open_load(&mut self, executions: Vec<String>, purpose: Purpose) {
        self.loads.next += 1;
        let id = self.loads.next;
        self.stats.loads += 1;
        let load = Load {
            executions,
            purpose,
            backoff: self.config.reload_backoff_ms,
            retry_at: None,
        };
        self.out.push(io_of(id, &load));
        self.loads.open.insert(id, load);
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
            Ok(executions) if matches!(load.purpose, Purpose::Reload) => {
                self.loads.open.remove(&id);
                self.engine_input(now, Input::Reloaded { executions });
            }
            Ok(executions) if matches!(load.purpose, Purpose::Adopt { .. }) => {
                if let Some(Load {
                    purpose: Purpose::Adopt { epochs, generation },
                    ..
                }) = self.loads.open.remove(&id)
                {
                    if !self.adoptable(generation) {
                        return self.reclaim_over(now);
                    }
                    let executions = executions
                        .into_iter()
                        .filter_map(|e| {
                            let epoch = *epochs.get(&e.execution_id)?;
                            Some((e, epoch))
                        })
                        .collect();
                    self.engine_input(now, Input::Adopt { executions });
                    self.reclaim_over(now);
                }
            }
            Ok(_) => {}
            Err(_) => {
                load.retry_at = Some(now.saturating_add(load.backoff));
                load.backoff = load
                    .backoff
                    .saturating_mul(2)
                    .min(self.config.reload_backoff_max_ms);
            }
        }
    }

    /// A fetch came back: the engine gets what the store holds, or the read
    /// is tried again later.
    pub(super) fn fetched(
        &mut self,
        now: Millis,
        id: LoadId,
        result: Result<Fetched, StorageError>,
    ) {
        let Some(load) = self.loads.open.get_mut(&id) else {
            return;
        };
        if load.retry_at.is_some() {
            return; // not being read: a duplicate completion
        }
        let Purpose::Fetch { engine_load, .. } = &load.purpose else {
            return;
        };
        let engine_load = *engine_load;
        match result {
            Ok(fetched) => {
                self.loads.open.remove(&id);
                self.engine_input(
                    now,
                    Input::Loaded {
                        load: engine_load,
                        executions: fetched.executions,
                        idempotency: fetched.idempotency,
                    },
                );
            }
            Err(e) => {
                load.retry_at = Some(now.saturating_add(load.backoff));
                load.backoff = load
                    .backoff
                    .saturating_mul(2)
                    .min(self.config.reload_backoff_max_ms);
                let message = e.to_string();
                self.engine_input(
                    now,
                    Input::LoadFailed {
                        load: engine_load,
                        message,
                    },
                );
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
                let io = io_of(id, load);
                self.out.push(io);
            }
        }
    }
}

/// The read a load asks the driver for.
fn io_of(id: LoadId, load: &Load) -> Io {
    match &load.purpose {
        Purpose::Reload | Purpose::Adopt { .. } => Io::Load {
            id,
            executions: load.executions.clone(),
        },
        Purpose::Fetch { idempotency, .. } => Io::Fetch {
            id,
            executions: load.executions.clone(),
            idempotency: idempotency.clone(),
        },
    }
}

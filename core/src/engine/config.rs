//! Engine settings chosen by the operator (`orbit server` flags).

use crate::history::Millis;

/// Settings of one [`super::Engine`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `--session-timeout`: a worker session silent for longer is lost, and a
    /// dispatch neither listed nor reported for this long never arrived.
    pub session_timeout_ms: Millis,
    /// `--max-active-executions`: cap on running or compensating top-level
    /// executions (children are not counted and never wait).
    pub max_active_executions: Option<u64>,
    /// `--idempotency-ttl`: how long an API idempotency record is kept.
    pub idempotency_ttl_ms: Millis,
    /// Leader mode: the fencing epoch of this leader's term; every
    /// [`super::ExecutionAppend`] carries it.
    pub epoch: Option<u64>,
    /// `--node-id` in shared cluster mode (`None`: one server, or the
    /// leader of leader mode). The engine then holds only the executions
    /// this node owns, each with its epoch, and reaches the others through
    /// their owners' inboxes (see `shared`).
    pub node_id: Option<String>,
    /// How many finished executions stay in memory after their final
    /// batch (the most recent ones); older ones are read back from the
    /// store when a command names them.
    pub finished_cache: usize,
    /// `--idle-evict`: a running execution that has waited this long for
    /// nothing but time or a command leaves memory (see `idle`); `None`
    /// keeps every live execution in memory.
    pub idle_evict_ms: Option<Millis>,
    /// `--max-in-memory-executions`: once more executions than this are in
    /// memory, idle ones leave before their `idle_evict_ms` has passed,
    /// least recently active first (busy ones never do); `None`: no cap.
    /// Only with eviction on.
    pub max_in_memory: Option<usize>,
    /// Seed of the tables keyed by ids clients choose (see `keyed`). The
    /// tokio driver puts its `Sources`' seed here, drawn from the
    /// operating system unless a simulation passes its own; the default,
    /// 0, suits tests.
    pub hash_seed: u64,
}

/// Default [`Config::idle_evict_ms`]: one minute.
pub const IDLE_EVICT_MS: Millis = 60_000;

/// Default [`Config::max_in_memory`]: the size of a worker's workflow
/// cache in Temporal's SDKs, and a few tens of MiB of executions.
pub const MAX_IN_MEMORY: usize = 10_000;

/// Default [`Config::finished_cache`].
pub const FINISHED_CACHE: usize = 1000;

impl Default for Config {
    fn default() -> Config {
        Config {
            session_timeout_ms: 30_000,
            max_active_executions: None,
            idempotency_ttl_ms: 24 * 60 * 60 * 1000,
            epoch: None,
            node_id: None,
            finished_cache: FINISHED_CACHE,
            idle_evict_ms: Some(IDLE_EVICT_MS),
            max_in_memory: Some(MAX_IN_MEMORY),
            hash_seed: 0,
        }
    }
}

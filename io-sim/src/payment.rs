//! The external "payment provider": records every side effect workers apply
//! by idempotency key, so checks can count real-world effects. Most workers
//! deduplicate by key here, as the idempotency chapter tells users to: the
//! first call with a key applies the effect and stores its result; later
//! calls with the same key return the stored result. Some workers do not
//! (`undeduplicated_workers`): their calls apply the effect every time, so
//! the checks see delivery as it is — at least once, never lost.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone)]
struct Effect {
    applied: u32,
    result: Value,
    /// True when a worker that does not deduplicate applied it.
    undeduplicated: bool,
}

/// Effects by idempotency key.
#[derive(Debug, Clone, Default)]
pub struct Payments {
    by_key: BTreeMap<String, Effect>,
    keys_of_unit: BTreeMap<(String, String), BTreeSet<String>>,
    calls: u64,
}

impl Payments {
    /// Performs the effect of `(execution, unit)` under `key`, deduplicated
    /// by key; `make` computes the result the first time.
    pub fn perform(
        &mut self,
        execution: &str,
        unit: &str,
        key: &str,
        make: impl FnOnce() -> Value,
    ) -> Value {
        self.calls += 1;
        self.keys_of_unit
            .entry((execution.to_owned(), unit.to_owned()))
            .or_default()
            .insert(key.to_owned());
        let e = self.by_key.entry(key.to_owned()).or_insert_with(|| Effect {
            applied: 0,
            result: Value::Null,
            undeduplicated: false,
        });
        if e.applied == 0 {
            e.applied = 1;
            e.result = make();
        }
        e.result.clone()
    }

    /// Performs the effect of `(execution, unit)` under `key` without
    /// deduplicating: applied again on every call.
    pub fn perform_each(&mut self, execution: &str, unit: &str, key: &str, result: Value) -> Value {
        self.calls += 1;
        self.keys_of_unit
            .entry((execution.to_owned(), unit.to_owned()))
            .or_default()
            .insert(key.to_owned());
        let e = self.by_key.entry(key.to_owned()).or_insert_with(|| Effect {
            applied: 0,
            result: Value::Null,
            undeduplicated: true,
        });
        e.applied += 1;
        e.undeduplicated = true;
        e.result = result.clone();
        result
    }

    /// How many times each key's effect was applied, and whether a worker
    /// that does not deduplicate applied it.
    pub fn effects_by_key(&self) -> impl Iterator<Item = (&str, u32, bool)> {
        self.by_key
            .iter()
            .map(|(k, e)| (k.as_str(), e.applied, e.undeduplicated))
    }

    /// How many times the effect of `key` was applied.
    pub fn applied(&self, key: &str) -> u32 {
        self.by_key.get(key).map_or(0, |e| e.applied)
    }

    /// The keys each unit's deliveries carried.
    pub fn keys_by_unit(&self) -> impl Iterator<Item = ((&str, &str), &BTreeSet<String>)> {
        self.keys_of_unit
            .iter()
            .map(|((e, u), k)| ((e.as_str(), u.as_str()), k))
    }

    /// Total calls (deduplicated or not).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Distinct effects applied.
    pub fn effects(&self) -> usize {
        self.by_key.len()
    }
}

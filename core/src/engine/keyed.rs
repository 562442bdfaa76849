//! [`IdMap`]: the engine's hash tables keyed by ids, seeded per engine.
//!
//! Clients choose execution ids. With a hasher anyone can run offline,
//! ids can be prepared offline that all fall on one probe sequence, and
//! every look-up of an execution, by any workflow's step, then walks past
//! all of them (up to `--max-in-memory-executions` of them). The
//! engine's id-keyed tables hash with foldhash seeded from
//! [`super::Config::hash_seed`] instead: the server draws the seed from the
//! operating system at start, the simulation derives it from its own seed,
//! so no list of colliding ids works against every server, and the core
//! stays deterministic. Nothing the engine does depends on the tables'
//! order (callers that act on several entries in turn sort them first).
//!
//! The one place the core names `HashMap` (the lint against it guards
//! the order of everything else): the seed is an input, so a run is
//! reproduced by its inputs as before.
#![allow(clippy::disallowed_types)]

use crate::history::Name;
use foldhash::fast::FixedState;
use std::collections::HashMap;

/// A hash table keyed by an id, hashed with the engine's seed. Keys are
/// shared names: most are the projection's own id or a token it holds.
pub(crate) type IdMap<V> = HashMap<Name, V, FixedState>;

/// An empty [`IdMap`] hashing with `seed`.
pub(crate) fn id_map<V>(seed: u64) -> IdMap<V> {
    HashMap::with_hasher(FixedState::with_seed(seed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn the_seed_decides_where_an_id_falls() {
        let id = "0b6f6c1e-8c5b-4a57-9c4e-2f8d3e1a7b90";
        let hash = |seed| id_map::<()>(seed).hasher().hash_one(id);
        assert_eq!(hash(7), hash(7));
        assert_ne!(hash(7), hash(8));
    }
}

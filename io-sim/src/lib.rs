//! `orbit-io-sim`: the simulation driver.
//!
//! It will hold a seeded single-threaded world (rand_chacha) driving the
//! unchanged core `Engine` under virtual time, a crash-consistent simulated
//! store, simulated workers and clients, fault schedules and invariant
//! checkers, plus the turmoil-based networked layer. Nothing is implemented
//! here yet.

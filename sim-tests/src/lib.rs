//! `orbit-sim-tests`: named simulation scenarios run over fixed seeds in CI,
//! and the `orbit-sim` explorer binary that runs many seeds and prints a
//! one-line repro for each failure. Nothing is implemented here yet.

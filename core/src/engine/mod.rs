//! The sans-I/O Engine: `handle(now, input) -> effects`.

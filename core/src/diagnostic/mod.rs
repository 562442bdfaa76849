//! Diagnostics: plain data (code, message, labelled spans, help) produced by
//! the front end, the code registry, and rendering (terminal and JSON).

pub mod codes;

//! The `.orbit` lexer, parser and syntax tree (with spans).
//!
//! [`parse`] never fails: it returns the tree of everything that parsed and
//! the lexical/syntax diagnostics (E0001..E0011), recovering at clause and
//! declaration boundaries so that independent errors are all reported.

pub mod ast;
mod lexer;
mod parser;
pub mod token;

pub use lexer::{lex, MAX_LEXICAL_ERRORS};
pub use parser::parse;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests;

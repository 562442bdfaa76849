//! The `.orbit` lexer, parser and syntax tree (with spans).

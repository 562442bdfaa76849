//! ORBIT's Rust SDK crate. Today it holds [`wire`], the request and response
//! bodies of the HTTP API defined once: the server parses requests into
//! them, its OpenAPI document is generated from them (feature `utoipa`),
//! and clients send and read them.

pub mod wire;

//! Crescent's wire API, version 1 (the `/v1/` in every path): the bodies crescentd and its
//! clients exchange, as msgpack (clients) or JSON (tooling), and the stable error codes.
//!
//! This crate is serde-only so that clients do not pull in the server's stack.

pub mod admin;
pub mod auth;
pub mod cold;
pub mod cold_owner;
pub mod error;
pub mod health;
pub mod mesh_quota;
pub mod rebuild;
pub mod rpc;
pub mod rpc_compact;
pub mod rpc_handshake;
pub mod scan;
pub mod segments;
pub mod store;
pub mod tenants;
pub mod weights;

pub use error::{ApiError, ErrorCode, Redirect};

/// The wire API version this build speaks.
pub const WIRE_VERSION: u32 = 1;

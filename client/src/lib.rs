//! Crescent's Rust client library.
//!
//! Today it speaks the control-plane admin API (segments and owners); the store issue adds the
//! object operations and the storage-owner role.

pub mod error;
pub mod http;

pub use error::ClientError;
pub use http::CrescentClient;

//! Crescent's data plane. The store issue fills this crate: the `Transport` trait, the TCP
//! transport and the dlopen binding to a transfer-engine C API. The core only needs the crate to
//! exist in the workspace layout.

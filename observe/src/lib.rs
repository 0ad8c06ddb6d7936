//! What every Crescent process exports about itself (docs/operations.md, "Health, readiness
//! and metrics"): `process_*` metrics and `crescent_build_info`, the one log setup of the
//! three binaries (`CRESCENT_LOG`, falling back to `RUST_LOG`; text or JSON lines), and the
//! minimal `/metrics` listener of processes without an HTTP API (`crescent owner`).

pub mod logging;
pub mod metrics_http;
pub mod process_metrics;

pub use process_metrics::ProcessMetrics;

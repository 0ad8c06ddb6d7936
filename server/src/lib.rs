//! crescentd: Crescent's control-plane daemon.
//!
//! `node` starts everything (data dir, journal, recovery, actors, snapshotter, HTTP) and stops it
//! cleanly; `api` holds the HTTP handlers; `config` and `cli` the configuration.

pub mod api;
pub mod auth;
pub mod cli;
pub mod cold;
pub mod config;
pub mod datadir;
pub mod embedded;
pub mod error;
pub mod ha;
pub mod housekeeping;
mod http_bounds;
pub mod journal_health;
pub mod journal_open;
pub mod liveness;
pub mod mesh;
pub mod metrics;
pub mod node;
pub use crescent_observe::process_metrics;
pub mod quota_usage;
pub mod quotas;
pub mod rebuild;
pub mod removals;
pub mod rpc;
pub mod sched;
pub mod segment_mirror;
pub mod tenant_metrics;
pub mod tls_metrics;
pub mod weights;

pub use config::Config;
pub use error::ServerError;
pub use node::Node;

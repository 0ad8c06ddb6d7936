//! Crescent's Rust client library (the `crescent` CLI is the crescent-cli package).
//!
//! - [`CrescentClient`]: admin calls, and the object API users of KV-cache stores know:
//!   `put`, `get`, `put_batch`, `get_batch`, `is_exist`, `batch_is_exist`, `remove`,
//!   `remove_batch`, `remove_prefix`, `get_size`, `list`/`list_all`, and the zero-copy
//!   `register_buffer` + `put_from` / `get_into`.
//! - The storage-owner role (a segment of this process's memory, served over TCP, mounted,
//!   heartbeated) is the crescent-owner package; this one keeps what a client in the same
//!   process shares with it: the [`OwnershipTable`] its puts record their own replicas in, and
//!   the calls and hooks of [`owner_calls`].
//! - Leader following: with [`ClientOptions`] (a static server list, the etcd leader key) a
//!   client finds the active of an HA pair and follows failovers (docs/ha.md, "Clients").
//!   Following etcd needs the `etcd` feature (off by default: it brings in the etcd client).
//!
//! # Examples
//!
//! Store and read one object, then a batch, against a crescentd on the default port (the
//! calls are async; any tokio runtime runs them):
//!
//! ```no_run
//! use crescent_client::{ClientError, ClientOptions, CrescentClient};
//!
//! # async fn run() -> Result<(), ClientError> {
//! // Two addresses: the second is tried when the first is unreachable (an HA pair).
//! let client = CrescentClient::connect(ClientOptions::servers("10.0.0.1:7480,10.0.0.2:7480"))
//!     .await?;
//! client.put("greeting", b"hello").await?;
//! assert_eq!(client.get("greeting").await?, b"hello");
//!
//! // One round trip per phase for the whole batch; each item succeeds or fails on its own.
//! let keys = ["a", "b", "c"];
//! let values = [b"1".to_vec(), b"2".to_vec(), b"3".to_vec()];
//! for outcome in client.put_batch(&keys, &values).await? {
//!     outcome?;
//! }
//! let read = client.get_batch(&keys).await?;
//! assert_eq!(read[1].as_deref().ok(), Some(&b"2"[..]));
//! # Ok(())
//! # }
//! ```
//!
//! Errors carry a stable code for scripts and a class for retry decisions:
//!
//! ```
//! use crescent_client::{ClientError, ErrorClass};
//!
//! let e = ClientError::InvalidArgument("empty key".into());
//! assert_eq!(e.code_str(), "INVALID_ARGUMENT");
//! assert_eq!(e.class(), ErrorClass::User);
//! assert!(!e.retryable());
//! ```

pub mod admin;
pub mod batch;
pub mod buffer;
pub mod client;
pub mod client_options;
pub mod cold;
pub mod cold_restore;
pub mod cold_restore_target;
mod dataplane;
pub mod error;
pub mod failover;
pub mod failover_metrics;
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod fake_server;
mod http;
mod leader;
mod leader_etcd;
mod lease;
#[cfg(feature = "etcd")]
pub mod mesh;
pub mod metrics;
pub mod options;
pub mod owner_calls;
pub mod owner_staging_metrics;
pub mod ownership;
pub mod rebuild;
mod rpc;
mod rpc_connect;
mod rpc_io;
mod rpc_release;
mod rpc_wire;
mod script_code;
mod server_conn;
pub mod size;
pub mod store;
pub mod tenant;
pub mod weights;

pub use buffer::RegisteredBuffer;
pub use client::CrescentClient;
pub use client_options::{BearerToken, ClientOptions};
pub use dataplane::LocalSegment;
pub use error::{ClientError, ErrorClass};
pub use failover::{FailoverConfig, Retry};
pub use failover_metrics::{FailoverMetrics, LeaderSource, RetryReason};
#[cfg(feature = "etcd")]
pub use mesh::MeshClient;
pub use metrics::{ClientMetrics, RebuildMetrics};
pub use options::{PutOptions, Scope};
pub use ownership::{OwnedReplica, OwnershipTable, ReleaseReport};
pub use script_code::ScriptCode;
pub use store::PutOutcome;
pub use weights::{LoadedWeights, WeightStore, WeightWriter};

pub use crescent_wire::store::{DataType, ListEntry, ListReply, Placement, RemovePrefixReply};

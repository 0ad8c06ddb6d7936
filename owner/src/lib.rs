//! Crescent's storage-owner role (`crescent owner`, or any process embedding it): this process
//! lends a segment of its memory to the store.
//!
//! - [`Owner`]: allocates the segment, serves it on its own TCP transfer listener (or through a
//!   transfer engine, [`OwnerConfig::transport`]), registers and mounts it with crescentd and
//!   heartbeats; the [`CrescentClient`] that started it then places its puts there first and
//!   reads its replicas there first.
//! - Its [`OwnershipTable`] (kept by the client library, which records this process's own
//!   committed replicas in it) takes the notices of other writers (NOTIFY on the listener) and is
//!   replayed to crescentd after a new leader term ([`replayer`]), once the replicas whose
//!   bytes were overwritten are dropped ([`overwrite_check`]); docs/rebuild.md.
//! - Cold devices served by the owner ([`cold_device`]) and the remote-restore staging region
//!   beside its segment ([`owner_staging`]); docs/cold-tier.md.
//!
//! Errors are the client library's [`ClientError`]: every failure of the role is one of a
//! client call, a transport or a local argument, with the same stable codes.
//!
//! ```no_run
//! use crescent_client::CrescentClient;
//! use crescent_owner::{Owner, OwnerConfig};
//!
//! # async fn run() -> Result<(), crescent_client::ClientError> {
//! let client = CrescentClient::new("127.0.0.1:7480")?;
//! let owner = Owner::start(
//!     &client,
//!     OwnerConfig {
//!         owner_id: Some("node-a".into()),
//!         size: 1 << 30,
//!         ..OwnerConfig::default()
//!     },
//! )
//! .await?;
//! // Puts of this client now land in node-a's segment first.
//! client.put("greeting", b"hello").await?;
//! assert_eq!(owner.ownership().len(), 1);
//! owner.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`CrescentClient`]: crescent_client::CrescentClient

pub mod cold_device;
pub mod overwrite_check;
pub mod owner;
mod owner_cold;
mod owner_engine;
mod owner_notice;
pub mod owner_staging;
pub mod replayer;

pub use crescent_client::{ClientError, OwnedReplica, OwnershipTable, ReleaseReport};
pub use owner::{Owner, OwnerConfig};
pub use replayer::{replay_table, RebuildSink, ReplayConfig, ReplayReport};

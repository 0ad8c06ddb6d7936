//! The HA pair: leader election with terms, the in-sync marker, leader discovery, on etcd or
//! on one Redis server ([`Coordination`]; docs/ha.md, "Coordination backends").
//!
//! - [`Elector`]: runs this node as a candidate; the leader key `/crescent/<cluster>/leader` is
//!   bound to an etcd lease and its create_revision is the **term**, monotonic across the
//!   cluster's life. The leader keeps a local deadline shorter than the lease and stops
//!   serving ([`LeaderFence`]) before etcd can have expired it. The term is the fence: the
//!   journal refuses appends below the highest term it has seen, and the standby refuses
//!   replication from a lower term, so a deposed leader cannot commit even if it has not yet
//!   noticed its deposition.
//! - The replication marker `/crescent/<cluster>/replication` ([`ReplicationMarker`]): written
//!   only by the leader of the current term; decides which node may campaign
//!   ([`campaign_eligibility`]).
//! - [`LeaderWatch`]: for clients and standbys, the current leader's address and term.
//! - [`MembershipStore`]: a mesh's membership record (`crescent-mesh`), read and replaced by
//!   compare-and-set, in etcd or Redis; [`MembershipWatch`] follows it.
//!
//! See docs/ha.md for the rules and the failure modes they cover.

mod config;
mod coordination;
mod elector;
mod elector_task;
mod eligibility;
mod error;
mod etcd;
mod etcd_backend;
mod fence;
mod leader_watch;
mod marker_store;
mod mesh_store;
mod mesh_watch;
mod metrics;
mod records;
mod redis_backend;
mod role;

pub use config::{
    validate_lease_ttl, CampaignHold, ClusterKeys, ElectorConfig, TermFloor, DEFAULT_LEASE_TTL,
    MAX_LEASE_TTL, MAX_NAME_LEN, MIN_LEASE_TTL,
};
pub use coordination::{
    Bid, ClusterView, Coordination, CoordinationEndpoint, LeaderSlot, Renewal, Won,
};
pub use elector::Elector;
pub use eligibility::{campaign_eligibility, CampaignBlock, Eligible};
pub use error::{ErrorClass, HaError};
pub use etcd::connect;
pub use etcd_backend::{EtcdCoordination, EtcdLease};
pub use fence::LeaderFence;
pub use leader_watch::{leader_from_kv, LeaderWatch};
pub use marker_store::{ReplicationMarkerStore, StoredMarker};
pub use mesh_store::{membership_key, MembershipStore, RecordVersion, StoredMembership};
pub use mesh_watch::MembershipWatch;
pub use metrics::HaMetrics;
pub use records::{
    LeaderRecord, ReplicationMarker, StandbyState, LEADER_RECORD_VERSION,
    REPLICATION_MARKER_VERSION,
};
pub use redis_backend::{connect_redis, RawRecords, RedisCoordination, RedisLease, POLL_INTERVAL};
pub use role::{LeaderInfo, Role, StepDownReason};

/// Re-exported so callers can pass an existing client without naming the crate themselves.
pub use etcd_client;
pub use redis;

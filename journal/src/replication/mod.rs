//! Journal replication between the two nodes of an HA pair (docs/ha.md): the active serves
//! its durable records ([`ReplicationSource`]), the standby appends them to its own journal
//! with every seq, term and chain digest checked ([`Follower`]), and the active's commit
//! watermark waits for the standby's acknowledgements in sync mode ([`CommitTracker`]).

mod acks;
pub mod commit;
pub mod follower;
mod handshake;
pub mod protocol;
mod reseed_client;
mod reseed_source;
pub mod round_timing;
mod sender;
pub mod source;
mod stream;
pub mod window;

pub use acks::SourceMetrics;
pub use commit::{CommitMode, CommitTracker, StandbySession};
pub use follower::{Follower, FollowerConfig, FollowerStatus, LeaderAddress, OnDurable};
pub use handshake::{PeerCheck, PeerRefusal};
pub use protocol::{
    refusal, Credential, Message, PeerToken, ProtocolError, RewindPoint, MAX_SNAPSHOT_CHUNK,
    PROTOCOL_VERSION,
};
pub use reseed_client::{SnapshotOfferInfo, SnapshotReceiver};
pub use reseed_source::{OfferedSnapshot, SnapshotSource};
pub use source::{
    CapabilityCheck, FollowHook, ReplicationSource, SourceConfig, SourceStatus, TermSource,
};
pub use window::SendWindow;

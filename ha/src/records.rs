//! The versioned JSON values Crescent keeps in etcd (or Redis): the leader record and the
//! replication (in-sync) marker. JSON so that `etcdctl get` (`redis-cli get`) shows them to an
//! operator as they are.

use serde::{Deserialize, Serialize};

use crate::error::HaError;

/// Format version of [`LeaderRecord`].
pub const LEADER_RECORD_VERSION: u32 = 1;
/// Format version of [`ReplicationMarker`].
pub const REPLICATION_MARKER_VERSION: u32 = 1;

/// The value of `/crescent/<cluster>/leader`.
///
/// In etcd the authoritative term is the key's create_revision; `term` repeats it for readers
/// once the winner has finished taking office. In Redis `term` is the term itself (the campaign
/// script writes it). It is `None` between winning and taking office (the node does not serve
/// yet), so watchers treat such a record as "no leader yet". Fields this build does not know
/// (Redis's `pending_term`) are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderRecord {
    pub format_version: u32,
    pub node: String,
    pub address: String,
    pub term: Option<u64>,
}

/// The standby the marker speaks about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandbyState {
    /// The standby's node name.
    pub node: String,
    /// `true`: the standby holds every record the leader has committed, and the leader commits
    /// nothing more without it until it writes `false` here first.
    pub in_sync: bool,
    /// The leader's journal seq when this was written (commit watermark for `in_sync`, the
    /// first seq the standby may lack for out-of-sync).
    pub seq: u64,
}

/// The value of `/crescent/<cluster>/replication`: who may take over from the leader.
///
/// Only the current leader writes it (the write compares the leader key's create_revision with
/// `term`). `standby: None` means the leader `leader` may have committed records that no other
/// node holds: nobody but `leader` may campaign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationMarker {
    pub format_version: u32,
    /// The node that wrote the marker: the leader of `term`.
    pub leader: String,
    /// The writer's term.
    pub term: u64,
    pub standby: Option<StandbyState>,
}

impl LeaderRecord {
    pub fn new(node: &str, address: &str, term: Option<u64>) -> Self {
        LeaderRecord {
            format_version: LEADER_RECORD_VERSION,
            node: node.to_string(),
            address: address.to_string(),
            term,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a leader record always serializes")
    }

    pub fn decode(key: &str, bytes: &[u8]) -> Result<Self, HaError> {
        decode_versioned("leader record", key, bytes, LEADER_RECORD_VERSION)
    }
}

impl ReplicationMarker {
    /// The marker a new leader writes on taking office: no standby is known to be in sync yet.
    pub fn claim(leader: &str, term: u64) -> Self {
        ReplicationMarker {
            format_version: REPLICATION_MARKER_VERSION,
            leader: leader.to_string(),
            term,
            standby: None,
        }
    }

    pub fn with_standby(leader: &str, term: u64, standby: &str, in_sync: bool, seq: u64) -> Self {
        ReplicationMarker {
            standby: Some(StandbyState {
                node: standby.to_string(),
                in_sync,
                seq,
            }),
            ..Self::claim(leader, term)
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a replication marker always serializes")
    }

    pub fn decode(key: &str, bytes: &[u8]) -> Result<Self, HaError> {
        decode_versioned("replication marker", key, bytes, REPLICATION_MARKER_VERSION)
    }
}

/// Reads `format_version` first, so that a record from a newer build is reported as such
/// rather than as a parse error of whatever field changed.
fn decode_versioned<T: for<'de> Deserialize<'de>>(
    record: &'static str,
    key: &str,
    bytes: &[u8],
    supported: u32,
) -> Result<T, HaError> {
    #[derive(Deserialize)]
    struct VersionProbe {
        format_version: u32,
    }
    let malformed = |reason: String| HaError::Malformed {
        record,
        key: key.to_string(),
        reason,
    };
    let probe: VersionProbe =
        serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))?;
    if probe.format_version != supported {
        return Err(HaError::UnsupportedVersion {
            record,
            key: key.to_string(),
            found: probe.format_version,
            supported,
        });
    }
    serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_carry_their_version() {
        let leader = LeaderRecord::new("a", "10.0.0.1:7000", Some(42));
        let bytes = leader.encode();
        assert!(String::from_utf8_lossy(&bytes).contains("\"format_version\":1"));
        assert_eq!(LeaderRecord::decode("k", &bytes).unwrap(), leader);

        let marker = ReplicationMarker::with_standby("a", 42, "b", true, 9);
        assert_eq!(
            ReplicationMarker::decode("k", &marker.encode()).unwrap(),
            marker
        );
        let claim = ReplicationMarker::claim("a", 43);
        assert_eq!(
            ReplicationMarker::decode("k", &claim.encode()).unwrap(),
            claim
        );
    }

    #[test]
    fn unknown_versions_and_garbage_are_refused() {
        let newer = br#"{"format_version":2,"node":"a","address":"x","term":1,"extra":[]}"#;
        assert!(matches!(
            LeaderRecord::decode("k", newer),
            Err(HaError::UnsupportedVersion { found: 2, .. })
        ));
        assert!(matches!(
            ReplicationMarker::decode("k", b"not json"),
            Err(HaError::Malformed { .. })
        ));
        assert!(matches!(
            ReplicationMarker::decode("k", br#"{"format_version":1,"leader":"a"}"#),
            Err(HaError::Malformed { .. })
        ));
    }
}

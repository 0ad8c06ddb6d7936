//! The campaign rule: which node may try to become leader when there is none.
//!
//! The invariant it protects: every record a leader has committed is durable on every node
//! the rule lets campaign. A leader commits only (a) with its in-sync standby's durable ack, or
//! (b) after a marker write saying that no standby is in sync; the marker write succeeds only
//! while its term holds the leader key. See docs/ha.md for the failure modes this covers.

use crate::records::ReplicationMarker;

/// Why a node may campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eligible {
    /// No marker at all: nothing was ever committed in this cluster (or an operator deleted the
    /// marker to force a takeover, accepting the loss of what only the last leader held).
    FreshCluster,
    /// This node wrote the marker: it was the last leader and holds all it committed.
    LastLeader,
    /// The marker names this node as the in-sync standby.
    InSyncStandby,
}

/// Why a node may not campaign now. Shown in the candidate role and in status output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CampaignBlock {
    /// The last leader recorded this node as out of sync from `seq` on.
    OutOfSync { leader: String, term: u64, seq: u64 },
    /// The last leader recorded no in-sync standby, or another standby than this node.
    NotInSync {
        leader: String,
        term: u64,
        standby: Option<String>,
    },
    /// The stored marker cannot be read by this build; campaigning blind could lose data.
    UnreadableMarker(String),
    /// The node itself holds back (its [`crate::CampaignHold`]), e.g. its journal lacks a
    /// record it quarantined that a peer may hold.
    LocalHold(String),
}

/// Applies the rule to the marker read from the backend (`None`: no marker).
pub fn campaign_eligibility(
    node: &str,
    marker: Option<&ReplicationMarker>,
) -> Result<Eligible, CampaignBlock> {
    let Some(marker) = marker else {
        return Ok(Eligible::FreshCluster);
    };
    if marker.leader == node {
        return Ok(Eligible::LastLeader);
    }
    match &marker.standby {
        Some(s) if s.node == node && s.in_sync => Ok(Eligible::InSyncStandby),
        Some(s) if s.node == node => Err(CampaignBlock::OutOfSync {
            leader: marker.leader.clone(),
            term: marker.term,
            seq: s.seq,
        }),
        other => Err(CampaignBlock::NotInSync {
            leader: marker.leader.clone(),
            term: marker.term,
            standby: other.as_ref().map(|s| s.node.clone()),
        }),
    }
}

impl std::fmt::Display for CampaignBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CampaignBlock::OutOfSync { leader, term, seq } => write!(
                f,
                "leader {leader} (term {term}) marked this node out of sync at seq {seq}"
            ),
            CampaignBlock::NotInSync {
                leader,
                term,
                standby: Some(other),
            } => write!(
                f,
                "leader {leader} (term {term}) names {other} as its standby, not this node"
            ),
            CampaignBlock::NotInSync {
                leader,
                term,
                standby: None,
            } => write!(
                f,
                "leader {leader} (term {term}) has no in-sync standby; only it may take over"
            ),
            CampaignBlock::UnreadableMarker(e) => write!(f, "replication marker unreadable: {e}"),
            CampaignBlock::LocalHold(reason) => write!(f, "held back by this node: {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule() {
        assert_eq!(campaign_eligibility("b", None), Ok(Eligible::FreshCluster));

        let claim = ReplicationMarker::claim("a", 7);
        assert_eq!(
            campaign_eligibility("a", Some(&claim)),
            Ok(Eligible::LastLeader)
        );
        assert!(matches!(
            campaign_eligibility("b", Some(&claim)),
            Err(CampaignBlock::NotInSync { standby: None, .. })
        ));

        let in_sync = ReplicationMarker::with_standby("a", 7, "b", true, 10);
        assert_eq!(
            campaign_eligibility("b", Some(&in_sync)),
            Ok(Eligible::InSyncStandby)
        );
        assert_eq!(
            campaign_eligibility("a", Some(&in_sync)),
            Ok(Eligible::LastLeader)
        );
        // A third node named nowhere never qualifies once a marker exists.
        assert!(matches!(
            campaign_eligibility("c", Some(&in_sync)),
            Err(CampaignBlock::NotInSync { standby: Some(ref s), .. }) if s == "b"
        ));

        let lagging = ReplicationMarker::with_standby("a", 7, "b", false, 12);
        assert_eq!(
            campaign_eligibility("b", Some(&lagging)),
            Err(CampaignBlock::OutOfSync {
                leader: "a".into(),
                term: 7,
                seq: 12
            })
        );
        assert_eq!(
            campaign_eligibility("a", Some(&lagging)),
            Ok(Eligible::LastLeader)
        );
    }
}

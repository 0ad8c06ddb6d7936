//! What an elector publishes about itself, and what clients learn about the leader.

use crate::eligibility::CampaignBlock;

/// The current leader as seen in the coordination backend (etcd or Redis).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    pub node: String,
    /// The address to send requests to.
    pub address: String,
    /// The leader's term: the create_revision of its leader key.
    pub term: u64,
}

/// Why a leader gave up its term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepDownReason {
    /// No renewal was acknowledged in time: the local deadline (TTL minus a margin after the
    /// last acknowledged keep-alive was sent) passed.
    DeadlinePassed,
    /// The backend answered that the lease no longer exists (etcd lease gone, Redis record
    /// expired).
    LeaseLost,
    /// The leader key is gone or belongs to another term (deleted by hand, lease revoked).
    KeyLost,
    /// The node resigned (shutdown).
    Resigned,
}

impl StepDownReason {
    /// Metric label (a fixed set).
    pub fn as_str(self) -> &'static str {
        match self {
            StepDownReason::DeadlinePassed => "deadline_passed",
            StepDownReason::LeaseLost => "lease_lost",
            StepDownReason::KeyLost => "key_lost",
            StepDownReason::Resigned => "resigned",
        }
    }
}

/// The role an elector publishes through its `tokio::sync::watch` channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// No leader is serving. `blocked` says why this node does not campaign (the campaign
    /// rule), `None` while it campaigns or is about to.
    Candidate { blocked: Option<CampaignBlock> },
    /// Another node (or an older incarnation of this one) leads.
    Follower { leader: LeaderInfo },
    /// This node leads in `term` and may serve until its local deadline; check
    /// [`crate::LeaderFence::current_term`] right before acting on it.
    Leader { term: u64 },
    /// This node led in `term` and has stopped. It never leads under `term` again; after a
    /// step-down other than `Resigned` it becomes a candidate again (a new win is a new,
    /// greater term).
    SteppedDown { term: u64, reason: StepDownReason },
}

impl Role {
    /// Metric label and status text (a fixed set).
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Candidate { .. } => "candidate",
            Role::Follower { .. } => "follower",
            Role::Leader { .. } => "leader",
            Role::SteppedDown { .. } => "stepped_down",
        }
    }

    /// Every label [`Role::as_str`] can return.
    pub const ALL: [&'static str; 4] = ["candidate", "follower", "leader", "stepped_down"];

    pub fn leader_term(&self) -> Option<u64> {
        match self {
            Role::Leader { term } => Some(*term),
            _ => None,
        }
    }
}

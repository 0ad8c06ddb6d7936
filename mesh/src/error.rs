//! The one error type of crescent-mesh, with stable codes.

use crescent_error_class::ErrorClass;

use crate::membership::ClusterState;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MeshError {
    /// A mesh or cluster name breaks the naming rule (docs/scale-out.md, "Membership record").
    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        what: &'static str,
        name: String,
        reason: String,
    },

    /// Two entries of one membership record share a cluster name.
    #[error("cluster {0:?} appears twice in the membership")]
    DuplicateCluster(String),

    /// A weight is not finite, not positive, or above [`crate::MAX_WEIGHT`].
    #[error("cluster {cluster:?} has weight {weight}; weights are finite, > 0 and <= {max}")]
    InvalidWeight {
        cluster: String,
        weight: f64,
        max: f64,
    },

    /// A leader address is empty, too long or holds whitespace or control characters.
    #[error("cluster {cluster:?} has an invalid leader address: {reason}")]
    InvalidLeader { cluster: String, reason: String },

    /// The record lists more clusters than a mesh may hold.
    #[error("the membership lists {count} clusters; at most {max}")]
    TooManyClusters { count: usize, max: usize },

    /// A record carries a format version this build cannot read.
    #[error("membership record has format version {found}; this build reads version {supported}")]
    UnsupportedVersion { found: u32, supported: u32 },

    /// A record is not what any Crescent version writes.
    #[error("malformed membership record: {0}")]
    Malformed(String),

    /// An update names another mesh than the record it replaces.
    #[error("the update is for mesh {proposed:?}, the record is mesh {current:?}")]
    MeshMismatch { current: String, proposed: String },

    /// An update's generation is not the current generation plus one (built from a stale
    /// read).
    #[error("membership generation {proposed} does not follow {current}")]
    StaleGeneration { current: u64, proposed: u64 },

    /// An update moves a cluster between states in a way that could strand its keys.
    #[error("cluster {cluster:?} cannot go from {} to {}", state_name(*.from), state_name(*.to))]
    IllegalTransition {
        cluster: String,
        from: Option<ClusterState>,
        to: Option<ClusterState>,
    },

    /// An update would leave the mesh without a serving cluster.
    #[error("the update leaves no cluster serving")]
    LastServingCluster,

    /// A change names a cluster the record does not list.
    #[error("mesh generation {generation} lists no cluster {cluster:?}")]
    UnknownCluster { cluster: String, generation: u64 },

    /// Routing found no serving cluster in the membership.
    #[error("no cluster of mesh generation {generation} is serving")]
    NoServingCluster { generation: u64 },
}

fn state_name(state: Option<ClusterState>) -> &'static str {
    state.map_or("absent", ClusterState::as_str)
}

impl MeshError {
    /// The stable code of this error (logs, wire answers, status output; a fixed set).
    pub fn code(&self) -> &'static str {
        match self {
            MeshError::InvalidName { .. } => "INVALID_NAME",
            MeshError::DuplicateCluster(_) => "DUPLICATE_CLUSTER",
            MeshError::InvalidWeight { .. } => "INVALID_WEIGHT",
            MeshError::InvalidLeader { .. } => "INVALID_LEADER",
            MeshError::TooManyClusters { .. } => "TOO_MANY_CLUSTERS",
            MeshError::UnsupportedVersion { .. } => "UNSUPPORTED_VERSION",
            MeshError::Malformed(_) => "MALFORMED",
            MeshError::MeshMismatch { .. } => "MESH_MISMATCH",
            MeshError::StaleGeneration { .. } => "STALE_GENERATION",
            MeshError::IllegalTransition { .. } => "ILLEGAL_TRANSITION",
            MeshError::LastServingCluster => "LAST_SERVING_CLUSTER",
            MeshError::UnknownCluster { .. } => "UNKNOWN_CLUSTER",
            MeshError::NoServingCluster { .. } => "NO_SERVING_CLUSTER",
        }
    }

    /// How a caller should treat it: a refused update is the caller's to fix (a stale
    /// generation after re-reading); an unreadable record stops the reader; a mesh with no
    /// serving cluster may gain one.
    pub fn class(&self) -> ErrorClass {
        match self {
            MeshError::UnsupportedVersion { .. } | MeshError::Malformed(_) => ErrorClass::Fatal,
            MeshError::StaleGeneration { .. } | MeshError::NoServingCluster { .. } => {
                ErrorClass::Retryable
            }
            _ => ErrorClass::User,
        }
    }
}

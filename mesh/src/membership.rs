//! The mesh membership record: which clusters form the mesh, with their weight and state, under
//! a membership generation (docs/scale-out.md, "Membership record").
//!
//! JSON, like the HA records (docs/ha.md, "Keys in etcd"), so an operator reads it with
//! `etcdctl get` or `redis-cli get` as it is. Every change is a new record with the next
//! generation, checked by the pure [`apply_update`] before it is compare-and-set.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::MeshError;

/// Format version of [`Membership`].
pub const MEMBERSHIP_FORMAT_VERSION: u32 = 1;
/// Longest mesh or cluster name, in bytes (the HA rule for cluster names, docs/ha.md).
pub const MAX_NAME_LEN: usize = 128;
/// Longest leader address, in bytes.
pub const MAX_ADDRESS_LEN: usize = 256;
/// Most clusters one mesh lists (bounds the record at a few hundred KiB).
pub const MAX_CLUSTERS: usize = 4096;
/// Largest weight. Weights are relative; the bound keeps every score finite.
pub const MAX_WEIGHT: f64 = 1e9;

/// Where a cluster stands in the mesh. Only `Serving` clusters are rendezvous candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClusterState {
    /// Published, not yet a candidate: owns no key.
    Joining,
    /// A candidate: owns the keys it wins.
    Serving,
    /// No longer a candidate; hands its keys to their new winners.
    Draining,
    /// Holds no key any more; may be removed from the record.
    Leaving,
}

impl ClusterState {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterState::Joining => "joining",
            ClusterState::Serving => "serving",
            ClusterState::Draining => "draining",
            ClusterState::Leaving => "leaving",
        }
    }

    /// Whether a cluster in this state may hold objects: serving (the authority of its keys)
    /// or draining (its objects not all moved yet). Joining and leaving ones hold none.
    pub fn holds_objects(self) -> bool {
        matches!(self, ClusterState::Serving | ClusterState::Draining)
    }
}

/// One cluster of the mesh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterEntry {
    /// The cluster's name (`--cluster`), unique in the mesh.
    pub name: String,
    /// The address its leader serves on (`ha.advertise`); `None` while it has no leader.
    pub leader: Option<String>,
    /// Relative share of keys: a serving cluster wins a key with probability
    /// `weight / sum of serving weights`.
    pub weight: f64,
    pub state: ClusterState,
}

/// The value of `/crescent/mesh/<mesh>/membership`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Membership {
    pub format_version: u32,
    pub mesh: String,
    /// 1 for a new mesh's first record, + 1 per change. Redirects and stale-route answers
    /// name it.
    pub generation: u64,
    pub clusters: Vec<ClusterEntry>,
}

/// Only the version, read first so that a record of a newer format is reported as such rather
/// than as malformed.
#[derive(Deserialize)]
struct VersionProbe {
    format_version: u32,
}

impl Membership {
    /// The first record of a mesh (generation 1).
    pub fn new(mesh: &str, clusters: Vec<ClusterEntry>) -> Membership {
        Membership {
            format_version: MEMBERSHIP_FORMAT_VERSION,
            mesh: mesh.to_string(),
            generation: 1,
            clusters,
        }
    }

    /// The entry of `name`, if listed.
    pub fn cluster(&self, name: &str) -> Option<&ClusterEntry> {
        self.clusters.iter().find(|c| c.name == name)
    }

    /// Checks the record on its own: version, names, weights, addresses, no duplicates.
    pub fn validate(&self) -> Result<(), MeshError> {
        if self.format_version != MEMBERSHIP_FORMAT_VERSION {
            return Err(MeshError::UnsupportedVersion {
                found: self.format_version,
                supported: MEMBERSHIP_FORMAT_VERSION,
            });
        }
        validate_name("mesh", &self.mesh)?;
        if self.generation == 0 {
            return Err(MeshError::Malformed("generation 0".into()));
        }
        if self.clusters.len() > MAX_CLUSTERS {
            return Err(MeshError::TooManyClusters {
                count: self.clusters.len(),
                max: MAX_CLUSTERS,
            });
        }
        let mut seen = BTreeSet::new();
        for c in &self.clusters {
            validate_name("cluster", &c.name)?;
            if !seen.insert(c.name.as_str()) {
                return Err(MeshError::DuplicateCluster(c.name.clone()));
            }
            if !(c.weight.is_finite() && c.weight > 0.0 && c.weight <= MAX_WEIGHT) {
                return Err(MeshError::InvalidWeight {
                    cluster: c.name.clone(),
                    weight: c.weight,
                    max: MAX_WEIGHT,
                });
            }
            if let Some(addr) = &c.leader {
                validate_address(&c.name, addr)?;
            }
        }
        Ok(())
    }

    /// Reads a stored record: its version first, then the whole, then [`Membership::validate`].
    pub fn decode(bytes: &[u8]) -> Result<Membership, MeshError> {
        let probe: VersionProbe =
            serde_json::from_slice(bytes).map_err(|e| MeshError::Malformed(e.to_string()))?;
        if probe.format_version != MEMBERSHIP_FORMAT_VERSION {
            return Err(MeshError::UnsupportedVersion {
                found: probe.format_version,
                supported: MEMBERSHIP_FORMAT_VERSION,
            });
        }
        let record: Membership =
            serde_json::from_slice(bytes).map_err(|e| MeshError::Malformed(e.to_string()))?;
        record.validate()?;
        Ok(record)
    }

    /// The stored form (JSON).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a membership record always serializes")
    }
}

/// Checks `proposed` as the successor of `current` (`None`: the mesh has no record yet) and
/// returns it. Pure: the caller compare-and-sets the result against the version it read.
///
/// - the record is valid on its own and names the same mesh;
/// - its generation is `current + 1`, so an update built from a stale read is refused. A
///   first record may carry any generation: 1 for a new mesh, and above the last generation
///   any member holds when a backend that lost the record (a Redis without persistence) is
///   given it again, so that generations never go backwards for anyone;
/// - every cluster moves along joining -> serving <-> draining -> leaving -> removed (a
///   joining cluster may also be removed or sent to leaving): a cluster that may own keys is
///   never dropped or sent back to joining, so no key is stranded (docs/scale-out.md, "Join
///   and drain"); the first record may list clusters in any state;
/// - at least one cluster is serving.
pub fn apply_update(
    current: Option<&Membership>,
    proposed: Membership,
) -> Result<Membership, MeshError> {
    proposed.validate()?;
    let Some(current) = current else {
        return require_serving(proposed);
    };
    if proposed.mesh != current.mesh {
        return Err(MeshError::MeshMismatch {
            current: current.mesh.clone(),
            proposed: proposed.mesh,
        });
    }
    if Some(proposed.generation) != current.generation.checked_add(1) {
        return Err(MeshError::StaleGeneration {
            current: current.generation,
            proposed: proposed.generation,
        });
    }
    let before: BTreeMap<&str, ClusterState> = states(current);
    let after: BTreeMap<&str, ClusterState> = states(&proposed);
    let names: BTreeSet<&str> = before.keys().chain(after.keys()).copied().collect();
    for name in names {
        let (from, to) = (before.get(name).copied(), after.get(name).copied());
        if !transition_allowed(from, to) {
            return Err(MeshError::IllegalTransition {
                cluster: name.to_string(),
                from,
                to,
            });
        }
    }
    require_serving(proposed)
}

fn states(m: &Membership) -> BTreeMap<&str, ClusterState> {
    m.clusters
        .iter()
        .map(|c| (c.name.as_str(), c.state))
        .collect()
}

/// The state machine of docs/scale-out.md, "Join and drain" (`None`: not listed).
fn transition_allowed(from: Option<ClusterState>, to: Option<ClusterState>) -> bool {
    use ClusterState::*;
    matches!(
        (from, to),
        (None, None | Some(Joining))
            | (Some(Joining), None | Some(Joining | Serving | Leaving))
            | (Some(Serving), Some(Serving | Draining))
            | (Some(Draining), Some(Draining | Serving | Leaving))
            | (Some(Leaving), None | Some(Leaving))
    )
}

fn require_serving(m: Membership) -> Result<Membership, MeshError> {
    if m.clusters.iter().any(|c| c.state == ClusterState::Serving) {
        Ok(m)
    } else {
        Err(MeshError::LastServingCluster)
    }
}

/// The HA naming rule (docs/ha.md, "Keys in etcd"): 1..=128 bytes of letters, digits, `-`,
/// `_` and `.`, so no name reaches into another mesh's or cluster's keys.
pub fn validate_name(what: &'static str, name: &str) -> Result<(), MeshError> {
    let bad = |reason: String| MeshError::InvalidName {
        what,
        name: name.to_string(),
        reason,
    };
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(bad(format!("must be 1..={MAX_NAME_LEN} bytes")));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(bad(format!(
            "contains {c:?}; use letters, digits, '-', '_' and '.'"
        )));
    }
    Ok(())
}

fn validate_address(cluster: &str, addr: &str) -> Result<(), MeshError> {
    let reason = if addr.is_empty() {
        "empty"
    } else if addr.len() > MAX_ADDRESS_LEN {
        "longer than 256 bytes"
    } else if addr.chars().any(|c| c.is_whitespace() || c.is_control()) {
        "holds whitespace or control characters"
    } else {
        return Ok(());
    };
    Err(MeshError::InvalidLeader {
        cluster: cluster.to_string(),
        reason: reason.to_string(),
    })
}

//! Weighted rendezvous routing over a membership's serving clusters (docs/scale-out.md,
//! "Authority by rendezvous").
//!
//! A [`RouteKey`] is hashed once per request; [`RouteTable::route`] then scores it against
//! every serving cluster (one 8-byte XXH3 with the cluster's part precomputed) and the
//! highest score wins. Pure: no IO, clock or randomness, so clients and clusters holding the
//! same membership generation agree on every authority.

use crate::error::MeshError;
use crate::hash::{self, TAG_OBJECT, TAG_REVISION, TAG_TENANT};
use crate::membership::{ClusterState, Membership};

/// A hashed route key: what [`RouteTable::route`] ranks clusters for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteKey(u64);

impl RouteKey {
    /// An object, by its full identity. `tenant` is the resolved tenant (`default` when a
    /// request names none); an absent domain is encoded as the empty string, which no named
    /// domain can be (docs/api.md, "Objects").
    pub fn object(tenant: &str, domain: Option<&str>, key: &[u8]) -> RouteKey {
        let domain = domain.unwrap_or("").as_bytes();
        RouteKey(hash::key_hash(
            TAG_OBJECT,
            &[tenant.as_bytes(), domain, key],
        ))
    }

    /// A weight revision's lineage: every generation of one revision, its manifest and
    /// payloads, and its `LineageClaim` (docs/weights.md, "Identity") share one authority, so
    /// a replacement of one generation by the next stays inside one cluster.
    pub fn revision(lineage: &Lineage<'_>) -> RouteKey {
        RouteKey(hash::key_hash(
            TAG_REVISION,
            &[
                lineage.tenant.as_bytes(),
                lineage.namespace.as_bytes(),
                lineage.resource_id.as_bytes(),
                lineage.revision.as_bytes(),
            ],
        ))
    }

    /// A tenant's quota home: the cluster that holds its quota root (docs/tenants.md).
    pub fn quota_home(tenant: &str) -> RouteKey {
        RouteKey(hash::key_hash(TAG_TENANT, &[tenant.as_bytes()]))
    }

    /// The 64-bit key hash (for tests and simulations that stream raw hashes).
    pub fn from_hash(h: u64) -> RouteKey {
        RouteKey(h)
    }

    pub fn hash(self) -> u64 {
        self.0
    }
}

/// A weight revision's lineage `(tenant_id, namespace, resource_id, revision)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lineage<'a> {
    pub tenant: &'a str,
    pub namespace: &'a str,
    pub resource_id: &'a str,
    pub revision: &'a str,
}

#[derive(Debug, Clone)]
struct Candidate {
    name: String,
    /// [`hash::cluster_key`] of the cluster's seed.
    key: u64,
    weight: f64,
    /// [`hash::bound_weight`] of `weight`.
    bound_weight: f64,
}

/// The serving clusters of one membership generation, ready to route.
#[derive(Debug, Clone)]
pub struct RouteTable {
    generation: u64,
    /// Serving clusters in name order.
    candidates: Vec<Candidate>,
}

impl RouteTable {
    /// The candidates of `membership`: its serving clusters only. `membership` is a valid
    /// record ([`Membership::decode`], [`crate::apply_update`]): unique names, weights finite
    /// and > 0, which the scores rely on.
    pub fn new(membership: &Membership) -> RouteTable {
        let mut candidates: Vec<Candidate> = membership
            .clusters
            .iter()
            .filter(|c| c.state == ClusterState::Serving)
            .map(|c| Candidate {
                name: c.name.clone(),
                key: hash::cluster_key(hash::cluster_seed(&c.name)),
                weight: c.weight,
                bound_weight: hash::bound_weight(c.weight),
            })
            .collect();
        candidates.sort_by(|a, b| a.name.cmp(&b.name));
        RouteTable {
            generation: membership.generation,
            candidates,
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of serving clusters.
    pub fn len(&self) -> usize {
        self.candidates.len()
    }

    pub fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }

    /// The authority of `key`: the name of the serving cluster with the highest score.
    pub fn route(&self, key: RouteKey) -> Result<&str, MeshError> {
        self.route_index(key)
            .map(|i| self.candidates[i].name.as_str())
    }

    /// As [`RouteTable::route`], as an index into the name-ordered serving clusters.
    ///
    /// Most clusters are ruled out by [`hash::beaten`] without a logarithm or a division; the answer is
    /// the same as scoring every cluster. Equal scores go to the smaller name.
    pub fn route_index(&self, key: RouteKey) -> Result<usize, MeshError> {
        let mut best: Option<(usize, f64)> = None;
        for (i, c) in self.candidates.iter().enumerate() {
            let h = hash::pair_hash_keyed(c.key, key.0);
            if let Some((_, top)) = best {
                if hash::beaten(c.bound_weight, h, top) {
                    continue;
                }
            }
            let s = hash::score(c.weight, h);
            // Candidates come in name order, so a later equal score never displaces.
            if best.is_none_or(|(_, top)| s > top) {
                best = Some((i, s));
            }
        }
        best.map(|(i, _)| i).ok_or(MeshError::NoServingCluster {
            generation: self.generation,
        })
    }

    /// Every serving cluster scored, without the bound: the definition [`RouteTable::route`]
    /// must agree with (tests and the simulation compare them).
    pub fn route_exhaustive(&self, key: RouteKey) -> Result<&str, MeshError> {
        let mut best: Option<(&str, f64)> = None;
        for c in &self.candidates {
            let s = hash::score(c.weight, hash::pair_hash_keyed(c.key, key.0));
            if best.is_none_or(|(_, top)| s > top) {
                best = Some((&c.name, s));
            }
        }
        best.map(|(n, _)| n).ok_or(MeshError::NoServingCluster {
            generation: self.generation,
        })
    }

    /// The name of the serving cluster at `index` (name order).
    pub fn name(&self, index: usize) -> &str {
        &self.candidates[index].name
    }

    /// The weight of the serving cluster at `index`.
    pub fn weight(&self, index: usize) -> f64 {
        self.candidates[index].weight
    }
}

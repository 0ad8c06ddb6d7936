//! A mesh of Crescent clusters (docs/scale-out.md): the versioned membership record and the
//! weighted rendezvous routing that names each object's, weight revision's and tenant quota
//! root's authority cluster.
//!
//! - [`Membership`]: the record under `/crescent/mesh/<mesh>/membership` (clusters with name,
//!   leader address, weight, state; membership generation), checked by [`apply_update`].
//! - [`RouteTable`]: the serving clusters of one generation; [`RouteTable::route`] picks the
//!   authority of a [`RouteKey`] by weighted rendezvous hashing (score `weight / -ln(u)`,
//!   `u` from XXH3-64 of the cluster and key; the arithmetic is fixed in [`hash`] so every
//!   platform and release agrees).
//!
//! Pure: no IO, clock or randomness. Publishing the record in etcd or Redis lives with the
//! coordination backends (crescent-ha).

mod drain;
mod error;
pub mod hash;
mod membership;
mod publish;
mod route;

pub use crescent_error_class::ErrorClass;
pub use drain::{cancel_drain_step, drain_step, drained_step, previous_authority};
pub use error::MeshError;
pub use membership::{
    apply_update, validate_name, ClusterEntry, ClusterState, Membership, MAX_ADDRESS_LEN,
    MAX_CLUSTERS, MAX_NAME_LEN, MAX_WEIGHT, MEMBERSHIP_FORMAT_VERSION,
};
pub use publish::{next_publish, SelfEntry};
pub use route::{Lineage, RouteKey, RouteTable};

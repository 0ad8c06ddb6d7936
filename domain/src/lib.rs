//! Every aggregate kind of this build, registered in one [`World`].
//!
//! The aggregates live in their own crates (segment registry and tenant quota roots in
//! `crescent-actors`, token revocations in `crescent-auth`, weight revisions and lineage claims
//! in `crescent-weights`, cold devices in `crescent-cold`), which depend on the actors crate,
//! so the list of all of them lives here, above them: crescentd's recovery, snapshotter and
//! standby replay, the replication handshake (which event versions a node writes) and
//! crescent-replay all take their world from [`standard_world`].

use crescent_actors::incarnation::NodeIncarnation;
use crescent_actors::quota_root::QuotaRoot;
use crescent_actors::removed_puts::RemovedPuts;
use crescent_actors::segment_registry::SegmentRegistry;
use crescent_actors::World;
use crescent_auth::RevocationList;
use crescent_cold::ColdDevice;
use crescent_weights::{LineageClaim, WeightRevision, WeightUnits};

/// A world with every aggregate kind of this build registered (empty tables).
pub fn standard_world() -> World {
    let mut world = World::empty();
    world
        .register::<SegmentRegistry>()
        .expect("aggregate kinds are distinct");
    world
        .register::<NodeIncarnation>()
        .expect("aggregate kinds are distinct");
    world
        .register::<RemovedPuts>()
        .expect("aggregate kinds are distinct");
    world
        .register::<WeightRevision>()
        .expect("aggregate kinds are distinct");
    world
        .register::<LineageClaim>()
        .expect("aggregate kinds are distinct");
    world
        .register::<WeightUnits>()
        .expect("aggregate kinds are distinct");
    world
        .register::<ColdDevice>()
        .expect("aggregate kinds are distinct");
    world
        .register::<RevocationList>()
        .expect("aggregate kinds are distinct");
    world
        .register::<QuotaRoot>()
        .expect("aggregate kinds are distinct");
    world
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_registered_once() {
        let kinds: Vec<_> = standard_world().kinds().collect();
        for kind in [
            "segment_registry",
            "weight_revision",
            "lineage_claim",
            "weight_units",
            "removed_puts",
        ] {
            assert!(kinds.contains(&kind), "{kinds:?}");
        }
        assert!(kinds.contains(&"segment_registry"), "{kinds:?}");
        assert!(kinds.contains(&"cold_device"), "{kinds:?}");
        assert!(kinds.contains(&"token_revocation"), "{kinds:?}");
        assert!(kinds.contains(&"quota_root"), "{kinds:?}");
        let mut sorted = kinds.clone();
        sorted.dedup();
        assert_eq!(sorted, kinds);
    }
}

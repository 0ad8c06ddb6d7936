//! What a route compare-and-set may change (the cold backing and the hot replicas, never the
//! content), and how the entry's replicas split between the current and the new route.

use crescent_cold::route::ObjectRoute;
use crescent_cold::ColdError;

use crate::cold::conflict;
use crate::entry::Replica;
use crate::segments::SegmentTable;

/// The replicas of a route change: those of the entry the new route keeps and removes, and
/// those it adds (resolved in the segment table).
pub(crate) struct ReplicaChange {
    pub kept: Vec<Replica>,
    pub removed: Vec<Replica>,
    pub added: Vec<Replica>,
}

/// `new` keeps the content (put id, length, checksum) of `current`, and its version follows.
pub(crate) fn check_route_change(
    object_key: &str,
    current: &ObjectRoute,
    new: &ObjectRoute,
) -> Result<(), ColdError> {
    if new.content_op != current.content_op
        || new.length != current.length
        || new.checksum != current.checksum
    {
        return Err(conflict(
            object_key,
            "a route CAS cannot change the content",
        ));
    }
    if new.version <= current.version || new.version > u32::MAX as u64 {
        return Err(conflict(
            object_key,
            format!(
                "new version {} must follow {}",
                new.version, current.version
            ),
        ));
    }
    Ok(())
}

/// Splits the entry's `replicas` (in the order of `current.replicas`) into kept and removed,
/// and resolves the replicas `new` adds; an added replica on an unmounted segment is a
/// conflict.
pub(crate) fn replica_change(
    object_key: &str,
    replicas: &[Replica],
    current: &ObjectRoute,
    new: &ObjectRoute,
    table: &SegmentTable,
) -> Result<ReplicaChange, ColdError> {
    let mut kept = Vec::new();
    let mut removed = Vec::new();
    for (r, hot) in replicas.iter().zip(current.replicas.iter()) {
        if new.replicas.contains(hot) {
            kept.push(*r);
        } else {
            removed.push(*r);
        }
    }
    let mut added = Vec::new();
    for hot in new
        .replicas
        .iter()
        .filter(|h| !current.replicas.contains(h))
    {
        let seg = table.find(&hot.segment_id).ok_or_else(|| {
            conflict(
                object_key,
                format!("segment {} is not mounted", hot.segment_id),
            )
        })?;
        added.push(Replica {
            offset: hot.offset,
            segment: seg,
        });
    }
    Ok(ReplicaChange {
        kept,
        removed,
        added,
    })
}

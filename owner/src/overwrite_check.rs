//! Before an owner replays its table, it checks each replica's bytes against the replica's
//! checksum, in its own memory, and drops the ones that no longer match.
//!
//! Why: crescentd can reuse an address in our segment without our table hearing of it in
//! time. A release travels on the next heartbeat and lives only in crescentd's memory, and a
//! cold restore's background promotion writes into a freed range and sends no notice. If
//! crescentd dies in between, the table still holds the old object at an address that now
//! holds other bytes, and a replay would hand the new master a replica whose reads fail their
//! checksum: the object would be unreadable although its cold copy (or another replica) is
//! intact. The owner is the one process that can look at the bytes, so it looks, before
//! anything is sent. A replica without a checksum, or one a writer holds right now, cannot be
//! judged here and is replayed as before (crescentd's own fences still apply).

use crescent_transport::SegmentMemory;

use crescent_client::ownership::{OwnedReplica, OwnershipTable};

/// What the check found, over one table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OverwriteCheck {
    /// The bytes match the checksum: replayed.
    pub intact: u64,
    /// The bytes do not match: dropped from the table, never replayed.
    pub overwritten: u64,
    /// No checksum, or a writer holds the range now: replayed unchecked.
    pub unverifiable: u64,
}

/// The verdict on one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaBytes {
    Intact,
    Overwritten,
    Unverifiable,
}

/// Compares the replica's bytes in `memory` (the segment it lies in) with its checksum.
pub fn check_replica(memory: &SegmentMemory, replica: &OwnedReplica) -> ReplicaBytes {
    let Some(expected) = replica.checksum else {
        return ReplicaBytes::Unverifiable;
    };
    match memory.try_with_read(replica.offset, replica.length, |bytes| {
        crescent_checksum::crc32c(bytes) == expected
    }) {
        Ok(Some(true)) => ReplicaBytes::Intact,
        Ok(Some(false)) => ReplicaBytes::Overwritten,
        // A writer holds the range (it is being written again: crescentd's fences decide),
        // or the range lies outside the region (crescentd rejects that entry itself).
        Ok(None) | Err(_) => ReplicaBytes::Unverifiable,
    }
}

/// Drops from `table` the replicas in `segment_id` whose bytes in `memory` no longer match
/// their checksum. An entry that changed meanwhile (a newer put recorded) is left alone.
pub fn forget_overwritten(
    table: &OwnershipTable,
    segment_id: &str,
    memory: &SegmentMemory,
) -> OverwriteCheck {
    let _span = tracing::debug_span!("owner.overwrite_check", segment_id).entered();
    let mut report = OverwriteCheck::default();
    for replica in table.snapshot() {
        if *replica.segment_id != *segment_id {
            continue;
        }
        match check_replica(memory, &replica) {
            ReplicaBytes::Intact => report.intact += 1,
            ReplicaBytes::Unverifiable => report.unverifiable += 1,
            ReplicaBytes::Overwritten => {
                if table.forget_if_unchanged(&replica) {
                    tracing::warn!(key = %replica.id.key, put_id = replica.put_id,
                        offset = replica.offset, "replica overwritten since it was recorded; not replayed");
                    report.overwritten += 1;
                }
            }
        }
    }
    report
}

#[cfg(test)]
#[path = "overwrite_check_tests.rs"]
mod tests;

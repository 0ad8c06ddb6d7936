//! Decoding one journal event into JSON with the aggregates' own decoders (upcasting included).
//!
//! The actors crate decodes events only inside `World::apply`, and its event enums are not
//! `Serialize`, so each aggregate kind this build knows gets a small adapter here. A kind the
//! standard [`World`] registers but this module lacks is reported as undecodable, and
//! [`tests::every_world_kind_has_a_decoder`] keeps the two lists in step.

use crescent_actors::incarnation::{IncarnationEvent, STREAM_KIND as NODE_INCARNATION};
use crescent_actors::quota_root::{QuotaEvent, STREAM_KIND as QUOTA_ROOT};
use crescent_actors::removed_puts::{RemovedPutsEvent, STREAM_KIND as REMOVED_PUTS};
use crescent_actors::segment_registry::STREAM_KIND as SEGMENT_REGISTRY;
use crescent_actors::{DecodeError, DomainEvent, SegmentRegistryEvent};
use crescent_auth::revocation::STREAM_KIND as TOKEN_REVOCATION;
use crescent_auth::RevocationEvent;
use crescent_cold::device::STREAM_KIND as COLD_DEVICE;
use crescent_cold::ColdDeviceEvent;
use crescent_journal::Record;
use crescent_weights::lineage::STREAM_KIND as LINEAGE_CLAIM;
use crescent_weights::revision::STREAM_KIND as WEIGHT_REVISION;
use crescent_weights::units::STREAM_KIND as WEIGHT_UNITS;
use crescent_weights::{LineageClaimEvent, WeightRevisionEvent, WeightUnitsEvent};
use serde::Serialize;
use serde_json::Value;

/// Why an event could not be shown decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventDecodeError {
    #[error("stream kind {0:?} is not an aggregate this build knows")]
    UnknownStream(String),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("event cannot be rendered as JSON: {0}")]
    Json(String),
}

/// The stream kinds [`decode_event`] understands.
pub const DECODABLE_KINDS: &[&str] = &[
    SEGMENT_REGISTRY,
    NODE_INCARNATION,
    WEIGHT_REVISION,
    LINEAGE_CLAIM,
    WEIGHT_UNITS,
    COLD_DEVICE,
    REMOVED_PUTS,
    TOKEN_REVOCATION,
    QUOTA_ROOT,
];

/// The record's event, decoded and upcast to the current version, as JSON:
/// `{"kind": ..., "version": <current version>, "data": {...fields...}}`.
pub fn decode_event(rec: &Record) -> Result<Value, EventDecodeError> {
    match rec.stream.kind.as_str() {
        SEGMENT_REGISTRY => render(rec, segment_registry_json),
        NODE_INCARNATION => render(rec, incarnation_json),
        WEIGHT_REVISION => render(rec, weight_revision_json),
        LINEAGE_CLAIM => render(rec, lineage_claim_json),
        WEIGHT_UNITS => render(rec, weight_units_json),
        COLD_DEVICE => render(rec, cold_device_json),
        REMOVED_PUTS => render(rec, removed_puts_json),
        TOKEN_REVOCATION => render(rec, token_revocation_json),
        QUOTA_ROOT => render(rec, quota_root_json),
        other => Err(EventDecodeError::UnknownStream(other.to_string())),
    }
}

/// Decodes the record's event as `E` (upcasting older versions) and renders it with its
/// kind, current version and `data` (the variant's fields as JSON): the one shape every
/// aggregate kind shares.
fn render<E: DomainEvent>(
    rec: &Record,
    data: impl FnOnce(&E) -> Result<Value, EventDecodeError>,
) -> Result<Value, EventDecodeError> {
    let event = E::decode(&rec.event.kind, rec.event.version, &rec.event.payload)?;
    Ok(serde_json::json!({
        "kind": event.kind(),
        "version": event.version(),
        "data": data(&event)?,
    }))
}

fn incarnation_json(event: &IncarnationEvent) -> Result<Value, EventDecodeError> {
    let IncarnationEvent::Begun(e) = event;
    to_json(e)
}

fn removed_puts_json(event: &RemovedPutsEvent) -> Result<Value, EventDecodeError> {
    use RemovedPutsEvent as E;
    match event {
        E::Removed(e) | E::Settled(e) => to_json(e),
        E::SettledBelow(e) => to_json(e),
        E::OwnerDropped(e) => to_json(e),
    }
}

fn token_revocation_json(event: &RevocationEvent) -> Result<Value, EventDecodeError> {
    match event {
        RevocationEvent::Revoked(e) => to_json(e),
        RevocationEvent::Pruned(e) => to_json(e),
    }
}

fn quota_root_json(event: &QuotaEvent) -> Result<Value, EventDecodeError> {
    match event {
        QuotaEvent::PolicySet(e) => to_json(e),
        QuotaEvent::Reserved(e) => to_json(e),
        QuotaEvent::Publishing(e) => to_json(e),
        QuotaEvent::Finalized(e) => to_json(e),
        QuotaEvent::Aborted(e) => to_json(e),
        QuotaEvent::TerminalPruned(e) => to_json(e),
    }
}

fn segment_registry_json(event: &SegmentRegistryEvent) -> Result<Value, EventDecodeError> {
    use SegmentRegistryEvent as E;
    match event {
        E::OwnerRegistered(e) => to_json(e),
        E::SegmentMounted(e) => to_json(e),
        E::SegmentUnmounted(e) => to_json(e),
        E::OwnerRemoved(e) => to_json(e),
    }
}

fn lineage_claim_json(event: &LineageClaimEvent) -> Result<Value, EventDecodeError> {
    use LineageClaimEvent as E;
    match event {
        E::ClaimStarted(e) => to_json(e),
        E::ClaimAdvanced(e) => to_json(e),
        E::ClaimFailed(e) => to_json(e),
    }
}

fn weight_units_json(event: &WeightUnitsEvent) -> Result<Value, EventDecodeError> {
    use WeightUnitsEvent as E;
    match event {
        E::UnitsRecorded(e) => to_json(e),
        E::UnitsForgotten(e) => to_json(e),
    }
}

fn weight_revision_json(event: &WeightRevisionEvent) -> Result<Value, EventDecodeError> {
    use WeightRevisionEvent as E;
    match event {
        E::ImportBegun(e) => to_json(e),
        E::ImportCommitted(e) => to_json(e),
        E::OperationStarted(e) => to_json(e),
        E::OperationPlanned(e) => to_json(e),
        E::PolicyUpdated(e) => to_json(e),
        E::LeaseGranted(e) => to_json(e),
        E::LeaseRenewed(e) => to_json(e),
        E::LeaseReleased(e) | E::LeaseExpired(e) => to_json(e),
        E::RoundCopied(e) => to_json(e),
        E::RoundReleased(e) => to_json(e),
        E::OperationAttemptFailed(e) => to_json(e),
        E::OperationFinished(e) => to_json(e),
        E::DeletionBatchDeleted(e) => to_json(e),
        E::ManifestDeleted(e) => to_json(e),
        E::RevisionDeleted(e) => to_json(e),
        E::MembersLost(e) => to_json(e),
        E::RevisionRetired(e) => to_json(e),
    }
}

fn cold_device_json(event: &ColdDeviceEvent) -> Result<Value, EventDecodeError> {
    use ColdDeviceEvent as E;
    match event {
        E::DeviceConfigured(e) => to_json(e),
        E::DeviceOwnerAssigned(e) => to_json(e),
        E::DeviceHealthChanged(e) => to_json(e),
        E::DeviceSchedulableChanged(e) => to_json(e),
        E::OperationPlanned(e) => to_json(e),
        E::CapacityReserved(e) => to_json(e),
        E::PayloadWritten(e) => to_json(e),
        E::RouteCommitted(e) => to_json(e),
        E::UsageCommitted(e) => to_json(e),
        E::OperationCancelled(e) => to_json(e),
        E::ReclaimPlanned(e) => to_json(e),
        E::ReclaimCancelled(e) => to_json(e),
        E::BackendDeleted(e) => to_json(e),
        E::UsageReleased(e) => to_json(e),
        E::TerminalPruned(e) => to_json(e),
    }
}

fn to_json<T: Serialize>(value: &T) -> Result<Value, EventDecodeError> {
    serde_json::to_value(value).map_err(|e| EventDecodeError::Json(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_world_kind_has_a_decoder() {
        for kind in crescent_domain::standard_world().kinds() {
            assert!(
                DECODABLE_KINDS.contains(&kind),
                "aggregate kind {kind} has no event decoder in crescent-replay"
            );
        }
    }
}

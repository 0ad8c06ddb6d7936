//! Decoding one journal event into JSON with the aggregates' own decoders (upcasting included).
//!
//! The actors crate decodes events only inside `World::apply`, and its event enums are not
//! `Serialize`, so each aggregate kind this build knows gets a small adapter here. A kind the
//! standard [`World`] registers but this module lacks is reported as undecodable, and
//! [`tests::every_world_kind_has_a_decoder`] keeps the two lists in step.

use crescent_actors::incarnation::{IncarnationEvent, STREAM_KIND as NODE_INCARNATION};
use crescent_actors::segment_registry::STREAM_KIND as SEGMENT_REGISTRY;
use crescent_actors::{DecodeError, DomainEvent, SegmentRegistryEvent};
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
];

/// The record's event, decoded and upcast to the current version, as JSON:
/// `{"kind": ..., "version": <current version>, "data": {...fields...}}`.
pub fn decode_event(rec: &Record) -> Result<Value, EventDecodeError> {
    match rec.stream.kind.as_str() {
        SEGMENT_REGISTRY => {
            let event = SegmentRegistryEvent::decode(
                &rec.event.kind,
                rec.event.version,
                &rec.event.payload,
            )?;
            let data = match &event {
                SegmentRegistryEvent::OwnerRegistered(e) => to_json(e),
                SegmentRegistryEvent::SegmentMounted(e) => to_json(e),
                SegmentRegistryEvent::SegmentUnmounted(e) => to_json(e),
                SegmentRegistryEvent::OwnerRemoved(e) => to_json(e),
            }?;
            Ok(serde_json::json!({
                "kind": event.kind(),
                "version": event.version(),
                "data": data,
            }))
        }
        NODE_INCARNATION => {
            let event =
                IncarnationEvent::decode(&rec.event.kind, rec.event.version, &rec.event.payload)?;
            let IncarnationEvent::Begun(data) = &event;
            Ok(serde_json::json!({
                "kind": event.kind(),
                "version": event.version(),
                "data": to_json(data)?,
            }))
        }
        WEIGHT_REVISION => {
            let event = WeightRevisionEvent::decode(
                &rec.event.kind,
                rec.event.version,
                &rec.event.payload,
            )?;
            let data = weight_revision_json(&event)?;
            Ok(serde_json::json!({
                "kind": event.kind(),
                "version": event.version(),
                "data": data,
            }))
        }
        LINEAGE_CLAIM => {
            let event =
                LineageClaimEvent::decode(&rec.event.kind, rec.event.version, &rec.event.payload)?;
            let data = match &event {
                LineageClaimEvent::ClaimStarted(e) => to_json(e),
                LineageClaimEvent::ClaimAdvanced(e) => to_json(e),
                LineageClaimEvent::ClaimFailed(e) => to_json(e),
            }?;
            Ok(serde_json::json!({
                "kind": event.kind(),
                "version": event.version(),
                "data": data,
            }))
        }
        WEIGHT_UNITS => {
            let event =
                WeightUnitsEvent::decode(&rec.event.kind, rec.event.version, &rec.event.payload)?;
            let data = match &event {
                WeightUnitsEvent::UnitsRecorded(e) => to_json(e),
                WeightUnitsEvent::UnitsForgotten(e) => to_json(e),
            }?;
            Ok(serde_json::json!({
                "kind": event.kind(),
                "version": event.version(),
                "data": data,
            }))
        }
        COLD_DEVICE => {
            let event =
                ColdDeviceEvent::decode(&rec.event.kind, rec.event.version, &rec.event.payload)?;
            let data = cold_device_json(&event)?;
            Ok(serde_json::json!({
                "kind": event.kind(),
                "version": event.version(),
                "data": data,
            }))
        }
        other => Err(EventDecodeError::UnknownStream(other.to_string())),
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
    match event {
        ColdDeviceEvent::DeviceConfigured(e) => to_json(e),
        ColdDeviceEvent::DeviceOwnerAssigned(e) => to_json(e),
        ColdDeviceEvent::DeviceHealthChanged(e) => to_json(e),
        ColdDeviceEvent::DeviceSchedulableChanged(e) => to_json(e),
        ColdDeviceEvent::OperationPlanned(e) => to_json(e),
        ColdDeviceEvent::CapacityReserved(e) => to_json(e),
        ColdDeviceEvent::PayloadWritten(e) => to_json(e),
        ColdDeviceEvent::RouteCommitted(e) => to_json(e),
        ColdDeviceEvent::UsageCommitted(e) => to_json(e),
        ColdDeviceEvent::OperationCancelled(e) => to_json(e),
        ColdDeviceEvent::ReclaimPlanned(e) => to_json(e),
        ColdDeviceEvent::ReclaimCancelled(e) => to_json(e),
        ColdDeviceEvent::BackendDeleted(e) => to_json(e),
        ColdDeviceEvent::UsageReleased(e) => to_json(e),
        ColdDeviceEvent::TerminalPruned(e) => to_json(e),
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

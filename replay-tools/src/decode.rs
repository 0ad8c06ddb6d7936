//! Decoding one journal event into JSON with the aggregates' own decoders (upcasting included).
//!
//! The events are rendered by the world that registers the aggregates
//! ([`crescent_domain::standard_world`], through [`World::event_json`]), so every aggregate kind
//! and event version this build replays is shown decoded without a table here.

use crescent_actors::{DecodeError, World, WorldError};
use crescent_journal::Record;
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

/// Renders events with every aggregate kind of this build.
pub struct EventDecoder {
    world: World,
}

impl Default for EventDecoder {
    fn default() -> Self {
        Self {
            world: crescent_domain::standard_world(),
        }
    }
}

impl EventDecoder {
    /// The record's event, decoded and upcast to the current version, as JSON:
    /// `{"kind": ..., "version": <current version>, "data": {...fields...}}`.
    pub fn decode(&self, rec: &Record) -> Result<Value, EventDecodeError> {
        self.world.event_json(rec.as_ref()).map_err(|e| match e {
            WorldError::UnknownStream { kind, .. } => EventDecodeError::UnknownStream(kind),
            WorldError::Decode { source, .. } => EventDecodeError::Decode(source),
            other => EventDecodeError::Json(other.to_string()),
        })
    }
}

/// [`EventDecoder::decode`] with a decoder of its own (one per call: use an [`EventDecoder`]
/// for many records).
pub fn decode_event(rec: &Record) -> Result<Value, EventDecodeError> {
    EventDecoder::default().decode(rec)
}

#[cfg(test)]
mod tests {
    use crescent_actors::event_codec::{new_record, RecordChain};
    use crescent_actors::removed_puts::{OwnerPutIds, RemovedPuts, RemovedPutsEvent, INSTANCE_ID};
    use crescent_journal::StreamId;

    use super::*;

    fn removed() -> Record {
        let event = RemovedPutsEvent::Removed(OwnerPutIds {
            owner: "o1".into(),
            put_ids: vec![3, 4],
        });
        RecordChain::default().push(1, new_record::<RemovedPuts>(INSTANCE_ID, &event, 100))
    }

    #[test]
    fn every_standard_kind_renders_as_its_kind_version_and_payload_fields() {
        let json = EventDecoder::default().decode(&removed()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "kind": "puts_removed",
                "version": 1,
                "data": {"owner": "o1", "put_ids": [3, 4]},
            })
        );
    }

    #[test]
    fn unknown_streams_and_unreadable_versions_are_errors() {
        let mut rec = removed();
        rec.event.version = 9;
        let err = decode_event(&rec).unwrap_err();
        assert!(
            matches!(
                err,
                EventDecodeError::Decode(DecodeError::UnsupportedVersion { .. })
            ),
            "{err}"
        );
        rec.stream = StreamId::new("no_such_aggregate", "x");
        assert_eq!(
            decode_event(&rec).unwrap_err().to_string(),
            "stream kind \"no_such_aggregate\" is not an aggregate this build knows"
        );
    }
}

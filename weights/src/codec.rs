//! Msgpack payloads of weight events: the shared event payload helpers of the actor crate, plus
//! the version lookup both weight aggregates use when encoding.

pub(crate) use crescent_actors::event_payload::{check_version, from_msgpack, to_msgpack};

/// The version this build writes for `kind` (every kind an event can have is in its schema).
pub(crate) fn current_version(schema: &[(&'static str, u16)], kind: &str) -> u16 {
    crescent_actors::event_payload::schema_version(schema, kind)
        .expect("every kind is in the schema")
}

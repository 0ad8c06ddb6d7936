//! Msgpack payloads of weight events, shared by both aggregates.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crescent_actors::DecodeError;

/// Compact (array) form, as the segment registry writes: within a version fields are only
/// appended (with `#[serde(default)]`); any other change is a new version with an upcaster.
/// The decoder also accepts the named (map) form.
pub(crate) fn to_msgpack<T: Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec(value).expect("event structs always serialize")
}

pub(crate) fn from_msgpack<T: DeserializeOwned>(
    kind: &str,
    version: u16,
    payload: &[u8],
) -> Result<T, DecodeError> {
    rmp_serde::from_slice(payload).map_err(|e| DecodeError::Malformed {
        kind: kind.to_string(),
        version,
        reason: e.to_string(),
    })
}

/// The supported version of `kind`, or the decode error for an unknown kind or version.
pub(crate) fn check_version(
    aggregate: &'static str,
    schema: &[(&'static str, u16)],
    kind: &str,
    version: u16,
) -> Result<(), DecodeError> {
    let Some(supported) = schema.iter().find(|(k, _)| *k == kind).map(|(_, v)| *v) else {
        return Err(DecodeError::UnknownKind {
            aggregate,
            kind: kind.to_string(),
        });
    };
    if version > supported || version == 0 {
        return Err(DecodeError::UnsupportedVersion {
            kind: kind.to_string(),
            version,
            supported,
        });
    }
    Ok(())
}

pub(crate) fn current_version(schema: &[(&'static str, u16)], kind: &str) -> u16 {
    schema
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, v)| *v)
        .expect("every kind is in the schema")
}

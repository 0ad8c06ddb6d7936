//! The msgpack payload of a domain event, shared by every aggregate's `DomainEvent` impl: one
//! encoding, one decode error shape, one version check against the aggregate's schema table.

use serde::{Deserialize, Serialize};

use crate::aggregate::DecodeError;

/// Compact (array) form: replay decodes every event ever written, and matching field names
/// costs as much as the rest of an event's replay. Within a version fields are only appended
/// (with `#[serde(default)]`); any other change is a new version with an upcaster. The decoder
/// also accepts the named (map) form. Plain structs of strings, integers and unit enums always
/// serialize into a Vec.
pub fn to_msgpack<T: Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec(value).expect("event structs always serialize")
}

/// Decodes one payload; a payload that does not fit the struct is `Malformed` for that kind
/// and version.
pub fn from_msgpack<'a, T: Deserialize<'a>>(
    kind: &str,
    version: u16,
    payload: &'a [u8],
) -> Result<T, DecodeError> {
    rmp_serde::from_slice(payload).map_err(|e| DecodeError::Malformed {
        kind: kind.to_string(),
        version,
        reason: e.to_string(),
    })
}

/// The version of `kind` this build writes, if `kind` is in `schema`.
pub fn schema_version(schema: &[(&'static str, u16)], kind: &str) -> Option<u16> {
    schema.iter().find(|(k, _)| *k == kind).map(|(_, v)| *v)
}

/// Refuses a kind that is not in `schema` (`UnknownKind`) and a version this build cannot read
/// (`UnsupportedVersion`: 0, or newer than the one it writes).
pub fn check_version(
    aggregate: &'static str,
    schema: &[(&'static str, u16)],
    kind: &str,
    version: u16,
) -> Result<(), DecodeError> {
    let Some(supported) = schema_version(schema, kind) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &[(&str, u16)] = &[("a", 1), ("b", 3)];

    #[test]
    fn check_version_accepts_known_kinds_up_to_their_version() {
        assert!(check_version("agg", SCHEMA, "a", 1).is_ok());
        assert!(check_version("agg", SCHEMA, "b", 2).is_ok());
        assert!(check_version("agg", SCHEMA, "b", 3).is_ok());
    }

    #[test]
    fn check_version_refuses_unknown_kinds_and_unreadable_versions() {
        assert!(matches!(
            check_version("agg", SCHEMA, "c", 1),
            Err(DecodeError::UnknownKind { aggregate: "agg", ref kind }) if kind == "c"
        ));
        for version in [0, 4] {
            assert!(matches!(
                check_version("agg", SCHEMA, "b", version),
                Err(DecodeError::UnsupportedVersion { supported: 3, .. })
            ));
        }
    }

    #[test]
    fn payloads_round_trip_and_malformed_ones_name_kind_and_version() {
        let bytes = to_msgpack(&(7u32, "x".to_string()));
        let back: (u32, String) = from_msgpack("a", 1, &bytes).unwrap();
        assert_eq!(back, (7, "x".to_string()));
        let err = from_msgpack::<(u32, String)>("a", 1, &[0xc1]).unwrap_err();
        assert!(matches!(err, DecodeError::Malformed { version: 1, ref kind, .. } if kind == "a"));
    }
}

//! Segment registry events and their codec (`domain_events!`): compact msgpack (the named form
//! of older writers still decodes), one schema version per kind.
//!
//! Version history:
//! - `owner_registered` v1: current.
//! - `segment_mounted` v1 had no `transport` (every segment was TCP); v2 added it. v1 payloads
//!   are upcast to v2 with `transport = tcp`.
//! - `segment_unmounted` v1, `owner_removed` v1: current.
//! - With the test feature `upgrade-test-schema` only: `segment_mounted` v3 (event_v3.rs), and
//!   v2 as its write floor.

use serde::{Deserialize, Serialize};

use crate::aggregate::{DecodeError, DomainEvent};
use crate::event_payload::{from_msgpack, to_msgpack};

use super::{TransportKind, STREAM_KIND};

/// Why a segment was unmounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnmountReason {
    /// An explicit UnmountSegment command.
    Requested,
    /// Its owner re-registered with a higher incarnation: the old process's memory is gone.
    OwnerRestarted,
    /// Its owner was removed.
    OwnerRemoved,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRegistered {
    pub owner_id: String,
    /// `None` for an owner registered implicitly by a mount.
    pub endpoint: Option<String>,
    pub incarnation: u64,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMounted {
    pub segment_id: String,
    pub owner_id: String,
    pub base: u64,
    pub size: u64,
    pub transport: TransportKind,
    pub at_ms: i64,
}

/// `segment_mounted` as version 1 wrote it (before transports other than TCP existed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMountedV1 {
    pub segment_id: String,
    pub owner_id: String,
    pub base: u64,
    pub size: u64,
    pub at_ms: i64,
}

impl From<SegmentMountedV1> for SegmentMounted {
    fn from(v1: SegmentMountedV1) -> Self {
        SegmentMounted {
            segment_id: v1.segment_id,
            owner_id: v1.owner_id,
            base: v1.base,
            size: v1.size,
            transport: TransportKind::Tcp,
            at_ms: v1.at_ms,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentUnmounted {
    pub segment_id: String,
    pub owner_id: String,
    pub reason: UnmountReason,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRemoved {
    pub owner_id: String,
    pub reason: String,
    pub at_ms: i64,
}

/// `segment_unmounted` as replay reads it: the ids borrowed from the payload, since folding it
/// only looks the segment up. Same fields and checks as [`SegmentUnmounted`].
#[derive(Debug, Deserialize)]
struct SegmentUnmountedView<'a> {
    segment_id: &'a str,
    #[serde(rename = "owner_id")]
    _owner_id: &'a str,
    #[serde(rename = "reason")]
    _reason: UnmountReason,
    #[serde(rename = "at_ms")]
    _at_ms: i64,
}

/// `owner_removed` as replay reads it (see [`SegmentUnmountedView`]).
#[derive(Debug, Deserialize)]
struct OwnerRemovedView<'a> {
    owner_id: &'a str,
    #[serde(rename = "reason")]
    _reason: &'a str,
    #[serde(rename = "at_ms")]
    _at_ms: i64,
}

/// An event decoded for replay: the removals borrow their ids from the payload, everything
/// else is the owned event.
#[derive(Debug)]
pub(super) enum ReplayEvent<'a> {
    SegmentUnmounted { segment_id: &'a str },
    OwnerRemoved { owner_id: &'a str },
    Owned(SegmentRegistryEvent),
}

/// Decodes for replay: accepts and refuses exactly what [`DomainEvent::decode`] does.
pub(super) fn decode_for_replay<'a>(
    kind: &str,
    version: u16,
    payload: &'a [u8],
) -> Result<ReplayEvent<'a>, DecodeError> {
    Ok(match (kind, version) {
        (SEGMENT_UNMOUNTED, 1) => {
            let view: SegmentUnmountedView<'a> = from_msgpack(kind, version, payload)?;
            ReplayEvent::SegmentUnmounted {
                segment_id: view.segment_id,
            }
        }
        (OWNER_REMOVED, 1) => {
            let view: OwnerRemovedView<'a> = from_msgpack(kind, version, payload)?;
            ReplayEvent::OwnerRemoved {
                owner_id: view.owner_id,
            }
        }
        _ => ReplayEvent::Owned(SegmentRegistryEvent::decode(kind, version, payload)?),
    })
}

/// `segment_mounted`'s current version: 3 only in the rolling-upgrade test's "new" build.
const SEGMENT_MOUNTED_VERSION: u16 = if cfg!(feature = "upgrade-test-schema") {
    3
} else {
    2
};

/// v1 had no transport, so only v2 can stand for a current `segment_mounted`.
const WRITE_FLOOR: &[(&str, u16)] = if cfg!(feature = "upgrade-test-schema") {
    &[(SEGMENT_MOUNTED, 2)]
} else {
    &[]
};

crate::domain_events! {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum SegmentRegistryEvent for STREAM_KIND, write_floor WRITE_FLOOR {
        OwnerRegistered(OwnerRegistered): OWNER_REGISTERED = "owner_registered", version 1;
        SegmentMounted(SegmentMounted): SEGMENT_MOUNTED = "segment_mounted",
            version SEGMENT_MOUNTED_VERSION, written_by encode_mounted,
            upcast {
                1 => SegmentMountedV1,
                #[cfg(feature = "upgrade-test-schema")]
                3 => super::event_v3::SegmentMountedV3,
            };
        SegmentUnmounted(SegmentUnmounted): SEGMENT_UNMOUNTED = "segment_unmounted", version 1;
        OwnerRemoved(OwnerRemoved): OWNER_REMOVED = "owner_removed", version 1;
    }
}

/// `segment_mounted` at `version`: v2 always, v3 in the test feature's build; `None` for v1
/// (it cannot say the transport) and anything newer than this build writes.
fn encode_mounted(e: &SegmentMounted, version: u16) -> Option<Vec<u8>> {
    match version {
        2 => Some(to_msgpack(e)),
        #[cfg(feature = "upgrade-test-schema")]
        3 => Some(to_msgpack(&super::event_v3::SegmentMountedV3::from(e))),
        _ => None,
    }
}

#[cfg(test)]
mod write_version_tests {
    use super::*;
    use crate::event_payload::schema_version;

    fn mounted() -> SegmentRegistryEvent {
        SegmentRegistryEvent::SegmentMounted(SegmentMounted {
            segment_id: "seg-1".into(),
            owner_id: "node-a".into(),
            base: 4096,
            size: 1 << 20,
            transport: TransportKind::Tcp,
            at_ms: 7,
        })
    }

    #[test]
    fn every_writable_version_decodes_to_the_same_event() {
        let e = mounted();
        let floor = schema_version(WRITE_FLOOR, SEGMENT_MOUNTED).unwrap_or(e.version());
        for version in floor..=e.version() {
            let bytes = e.encode_at(version).expect("writable");
            let back = SegmentRegistryEvent::decode(SEGMENT_MOUNTED, version, &bytes).unwrap();
            assert_eq!(back, e, "v{version}");
        }
        assert_eq!(e.encode_at(e.version()), Some(e.encode()));
    }

    #[test]
    fn versions_outside_the_write_range_are_never_written() {
        let e = mounted();
        assert_eq!(e.encode_at(1), None, "v1 cannot say the transport");
        assert_eq!(e.encode_at(e.version() + 1), None);
        let removed = SegmentRegistryEvent::OwnerRemoved(OwnerRemoved {
            owner_id: "node-a".into(),
            reason: "gone".into(),
            at_ms: 1,
        });
        assert_eq!(removed.encode_at(1), Some(removed.encode()));
        assert_eq!(removed.encode_at(2), None);
    }

    #[cfg(feature = "upgrade-test-schema")]
    #[test]
    fn v3_is_a_different_payload_that_v2_cannot_decode() {
        let e = mounted();
        assert_eq!(e.version(), 3);
        let v3 = e.encode_at(3).unwrap();
        assert_ne!(v3, e.encode_at(2).unwrap());
        assert!(matches!(
            SegmentRegistryEvent::decode(SEGMENT_MOUNTED, 2, &v3),
            Err(DecodeError::Malformed { .. })
        ));
    }
}

//! The segment registry: storage owners and the memory segments they mount.
//!
//! One singleton instance (id [`INSTANCE_ID`]) per cluster. Owners register with an endpoint
//! and an incarnation (bumped by every restart of the owner process); segments are ranges of an
//! owner's memory reachable over a transport. A restarted owner's memory is gone, so
//! re-registering with a higher incarnation unmounts every segment of the old incarnation.

mod command;
mod error;
mod event;
#[cfg(feature = "upgrade-test-schema")]
mod event_v3;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, DefaultHasher};

use serde::{Deserialize, Serialize};

use crate::aggregate::{Aggregate, Ctx, DecodeError};

pub use command::{SegmentRegistryCommand, MAX_ID_BYTES, MAX_REASON_BYTES};
pub use error::SegmentRegistryError;
use event::{decode_for_replay, ReplayEvent};
pub use event::{
    OwnerRegistered, OwnerRemoved, SegmentMounted, SegmentMountedV1, SegmentRegistryEvent,
    SegmentUnmounted, UnmountReason,
};

/// Stream kind in the journal and section name in snapshots.
pub const STREAM_KIND: &str = "segment_registry";
/// The registry is a singleton: its one instance id.
pub const INSTANCE_ID: &str = "cluster";

/// How a segment's memory is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    Tcp,
    TransferEngine,
    Embedded,
}

/// A registered storage owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// `None` when registered implicitly by a mount and not yet announced.
    pub endpoint: Option<String>,
    pub incarnation: u64,
    pub registered_at_ms: i64,
}

/// A mounted segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub owner_id: String,
    pub base: u64,
    pub size: u64,
    pub transport: TransportKind,
    pub mounted_at_ms: i64,
}

/// The segment map's hasher: SipHash with fixed keys. Fixed, because nothing about the state
/// may depend on a random seed (decide is pure); what is ordered (listings, the events of
/// `unmount_all_of`, snapshots) is sorted by id explicitly.
type SegmentHasher = BuildHasherDefault<DefaultHasher>;

/// Invariant (kept by `decide`): every segment's owner is registered.
///
/// Segments are hashed rather than kept in a BTreeMap: replay inserts or removes one per
/// mount/unmount event, and the ordered map's string comparisons were a quarter of replay time
/// (the replay target, docs/performance.md). Owners change rarely and stay ordered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentRegistry {
    owners: BTreeMap<String, Owner>,
    #[serde(serialize_with = "serialize_sorted")]
    segments: HashMap<String, Segment, SegmentHasher>,
}

/// Serializes the segment map in id order, so snapshots and JSON dumps of equal states are
/// equal byte for byte.
fn serialize_sorted<S: serde::Serializer>(
    segments: &HashMap<String, Segment, SegmentHasher>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(sorted(segments.iter()))
}

fn sorted<'a>(
    segments: impl Iterator<Item = (&'a String, &'a Segment)>,
) -> std::vec::IntoIter<(&'a String, &'a Segment)> {
    let mut v: Vec<_> = segments.collect();
    v.sort_unstable_by(|a, b| a.0.cmp(b.0));
    v.into_iter()
}

impl SegmentRegistry {
    pub fn owners(&self) -> &BTreeMap<String, Owner> {
        &self.owners
    }

    /// Every mounted segment, in id order.
    pub fn segments(&self) -> impl ExactSizeIterator<Item = (&String, &Segment)> {
        sorted(self.segments.iter())
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn owner(&self, owner_id: &str) -> Option<&Owner> {
        self.owners.get(owner_id)
    }

    pub fn segment(&self, segment_id: &str) -> Option<&Segment> {
        self.segments.get(segment_id)
    }

    /// The owner's segments, in segment id order.
    pub fn segments_of<'a>(
        &'a self,
        owner_id: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Segment)> + 'a {
        sorted(
            self.segments
                .iter()
                .filter(move |(_, s)| s.owner_id == owner_id),
        )
    }

    fn unmount_all_of(
        &self,
        owner_id: &str,
        reason: UnmountReason,
        at_ms: i64,
    ) -> Vec<SegmentRegistryEvent> {
        self.segments_of(owner_id)
            .map(|(id, _)| {
                SegmentRegistryEvent::SegmentUnmounted(SegmentUnmounted {
                    segment_id: id.clone(),
                    owner_id: owner_id.to_string(),
                    reason,
                    at_ms,
                })
            })
            .collect()
    }

    fn decide_register(
        &self,
        owner_id: &str,
        endpoint: &str,
        incarnation: u64,
        at_ms: i64,
    ) -> Result<Vec<SegmentRegistryEvent>, SegmentRegistryError> {
        let registered = SegmentRegistryEvent::OwnerRegistered(OwnerRegistered {
            owner_id: owner_id.to_string(),
            endpoint: Some(endpoint.to_string()),
            incarnation,
            at_ms,
        });
        let Some(current) = self.owners.get(owner_id) else {
            return Ok(vec![registered]);
        };
        if incarnation < current.incarnation {
            return Err(SegmentRegistryError::StaleIncarnation {
                owner_id: owner_id.to_string(),
                current: current.incarnation,
                offered: incarnation,
            });
        }
        if incarnation == current.incarnation {
            return match current.endpoint.as_deref() {
                Some(e) if e == endpoint => Ok(Vec::new()),
                // Registered implicitly by a mount: the owner now tells us where it is.
                None => Ok(vec![registered]),
                Some(e) => Err(SegmentRegistryError::Conflict {
                    what: "owner",
                    id: owner_id.to_string(),
                    reason: format!(
                        "incarnation {incarnation} is registered at endpoint {e:?}, not {endpoint:?}"
                    ),
                }),
            };
        }
        let mut events = self.unmount_all_of(owner_id, UnmountReason::OwnerRestarted, at_ms);
        events.push(registered);
        Ok(events)
    }

    fn decide_mount(
        &self,
        segment_id: &str,
        owner_id: &str,
        base: u64,
        size: u64,
        transport: TransportKind,
        at_ms: i64,
    ) -> Result<Vec<SegmentRegistryEvent>, SegmentRegistryError> {
        if let Some(existing) = self.segments.get(segment_id) {
            let same = existing.owner_id == owner_id
                && existing.base == base
                && existing.size == size
                && existing.transport == transport;
            return if same {
                Ok(Vec::new())
            } else {
                Err(SegmentRegistryError::Conflict {
                    what: "segment",
                    id: segment_id.to_string(),
                    reason: format!(
                        "already mounted by owner {:?} at base {} size {} over {:?}",
                        existing.owner_id, existing.base, existing.size, existing.transport
                    ),
                })
            };
        }
        let mut events = Vec::with_capacity(2);
        if !self.owners.contains_key(owner_id) {
            events.push(SegmentRegistryEvent::OwnerRegistered(OwnerRegistered {
                owner_id: owner_id.to_string(),
                endpoint: None,
                incarnation: 1,
                at_ms,
            }));
        }
        events.push(SegmentRegistryEvent::SegmentMounted(SegmentMounted {
            segment_id: segment_id.to_string(),
            owner_id: owner_id.to_string(),
            base,
            size,
            transport,
            at_ms,
        }));
        Ok(events)
    }
}

impl Aggregate for SegmentRegistry {
    const KIND: &'static str = STREAM_KIND;
    const SNAPSHOT_SCHEMA: u32 = 1;

    type Command = SegmentRegistryCommand;
    type Event = SegmentRegistryEvent;
    type Error = SegmentRegistryError;

    fn decide(
        &self,
        cmd: &SegmentRegistryCommand,
        ctx: &Ctx,
    ) -> Result<Vec<SegmentRegistryEvent>, SegmentRegistryError> {
        cmd.validate()?;
        let at_ms = ctx.now_ms;
        match cmd {
            SegmentRegistryCommand::RegisterOwner {
                owner_id,
                endpoint,
                incarnation,
            } => self.decide_register(owner_id, endpoint, *incarnation, at_ms),
            SegmentRegistryCommand::MountSegment {
                segment_id,
                owner_id,
                base,
                size,
                transport,
            } => self.decide_mount(segment_id, owner_id, *base, *size, *transport, at_ms),
            SegmentRegistryCommand::UnmountSegment { segment_id } => {
                let segment = self.segments.get(segment_id).ok_or_else(|| {
                    SegmentRegistryError::NotFound {
                        what: "segment",
                        id: segment_id.clone(),
                    }
                })?;
                Ok(vec![SegmentRegistryEvent::SegmentUnmounted(
                    SegmentUnmounted {
                        segment_id: segment_id.clone(),
                        owner_id: segment.owner_id.clone(),
                        reason: UnmountReason::Requested,
                        at_ms,
                    },
                )])
            }
            SegmentRegistryCommand::RemoveOwner { owner_id, reason } => {
                if !self.owners.contains_key(owner_id) {
                    return Err(SegmentRegistryError::NotFound {
                        what: "owner",
                        id: owner_id.clone(),
                    });
                }
                let mut events = self.unmount_all_of(owner_id, UnmountReason::OwnerRemoved, at_ms);
                events.push(SegmentRegistryEvent::OwnerRemoved(OwnerRemoved {
                    owner_id: owner_id.clone(),
                    reason: reason.clone(),
                    at_ms,
                }));
                Ok(events)
            }
        }
    }

    fn apply(&mut self, event: &SegmentRegistryEvent) {
        self.apply_owned(event.clone());
    }

    fn apply_owned(&mut self, event: SegmentRegistryEvent) {
        match event {
            SegmentRegistryEvent::OwnerRegistered(e) => {
                self.owners.insert(
                    e.owner_id,
                    Owner {
                        endpoint: e.endpoint,
                        incarnation: e.incarnation,
                        registered_at_ms: e.at_ms,
                    },
                );
            }
            SegmentRegistryEvent::SegmentMounted(e) => {
                self.segments.insert(
                    e.segment_id,
                    Segment {
                        owner_id: e.owner_id,
                        base: e.base,
                        size: e.size,
                        transport: e.transport,
                        mounted_at_ms: e.at_ms,
                    },
                );
            }
            SegmentRegistryEvent::SegmentUnmounted(e) => {
                self.segments.remove(&e.segment_id);
            }
            SegmentRegistryEvent::OwnerRemoved(e) => {
                self.owners.remove(&e.owner_id);
            }
        }
    }

    fn apply_encoded(
        &mut self,
        kind: &str,
        version: u16,
        payload: &[u8],
    ) -> Result<(), DecodeError> {
        // Removals only look their id up: folding them from a borrowed view saves replay two
        // string allocations per event. Everything else is the owned path.
        match decode_for_replay(kind, version, payload)? {
            ReplayEvent::SegmentUnmounted { segment_id } => {
                self.segments.remove(segment_id);
            }
            ReplayEvent::OwnerRemoved { owner_id } => {
                self.owners.remove(owner_id);
            }
            ReplayEvent::Owned(event) => self.apply_owned(event),
        }
        Ok(())
    }
}

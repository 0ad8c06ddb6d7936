//! Mounted segments: a table indexed by a compact [`SegmentIdx`] (what replicas store instead
//! of the segment's id string), each with its offset allocator, and placement order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crescent_wire::segments::TransportKind;
use crescent_wire::store::{Placement, ReplicaDesc, ReplicaState};
use rand::seq::SliceRandom;
use rand::Rng;

use crate::allocator::FreeRangeAllocator;
use crate::error::StoreError;

/// A slot in the segment table. Slots are reused only after every replica and deferred free of
/// the previous segment in that slot is gone (unmount holds every shard lock).
pub type SegmentIdx = u32;

const MAX_ID_BYTES: usize = 256;

/// What the server passes when a segment is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    pub segment_id: String,
    pub owner_id: String,
    /// The owner's transfer endpoint (`HOST:PORT`), absent for the embedded segment.
    pub endpoint: Option<String>,
    pub transport: TransportKind,
    pub size: u64,
}

impl MountSpec {
    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        for (field, v) in [
            ("segment_id", &self.segment_id),
            ("owner_id", &self.owner_id),
        ] {
            if v.is_empty() || v.len() > MAX_ID_BYTES || v.chars().any(char::is_control) {
                return Err(StoreError::invalid(
                    field,
                    format!("must be 1..={MAX_ID_BYTES} bytes without control characters"),
                ));
            }
        }
        if self.size < crate::allocator::SMALL_ALIGN {
            return Err(StoreError::invalid(
                "size",
                "a segment holds at least 64 bytes",
            ));
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct Segment {
    pub spec: MountSpec,
    pub(crate) alloc: Mutex<FreeRangeAllocator>,
}

impl Segment {
    pub(crate) fn allocator(&self) -> std::sync::MutexGuard<'_, FreeRangeAllocator> {
        self.alloc.lock().expect("allocator lock")
    }

    pub fn capacity(&self) -> u64 {
        self.allocator().capacity()
    }

    pub(crate) fn describe(&self, offset: u64, length: u64, state: ReplicaState) -> ReplicaDesc {
        ReplicaDesc {
            segment_id: self.spec.segment_id.clone(),
            owner_id: self.spec.owner_id.clone(),
            endpoint: self.spec.endpoint.clone(),
            transport: self.spec.transport,
            offset,
            length,
            state,
            grant: None,
        }
    }
}

/// A segment's usage, for `/stats` and `crescent segments`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentUsage {
    pub segment_id: String,
    pub owner_id: String,
    pub capacity: u64,
    pub used: u64,
    pub free_ranges: usize,
    pub largest_free: u64,
}

#[derive(Debug, Default)]
pub(crate) struct SegmentTable {
    slots: Vec<Option<Arc<Segment>>>,
    by_id: HashMap<String, SegmentIdx>,
    free_slots: Vec<SegmentIdx>,
}

impl SegmentTable {
    /// Mounts; a repeat with the same parameters is a no-op (`Ok((idx, false))`).
    pub(crate) fn mount(&mut self, spec: MountSpec) -> Result<(SegmentIdx, bool), StoreError> {
        spec.validate()?;
        if let Some(&idx) = self.by_id.get(&spec.segment_id) {
            let seg = self.get(idx).expect("indexed segment is mounted");
            if seg.spec == spec {
                return Ok((idx, false));
            }
            return Err(StoreError::conflict(format!(
                "segment {:?} is mounted with other parameters (owner {:?}, size {})",
                spec.segment_id, seg.spec.owner_id, seg.spec.size
            )));
        }
        let seg = Arc::new(Segment {
            alloc: Mutex::new(FreeRangeAllocator::new(spec.size)),
            spec,
        });
        let idx = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(seg.clone());
                i
            }
            None => {
                if self.slots.len() >= u32::MAX as usize {
                    return Err(StoreError::LimitReached {
                        reason: "segment table full".into(),
                    });
                }
                self.slots.push(Some(seg.clone()));
                (self.slots.len() - 1) as SegmentIdx
            }
        };
        self.by_id.insert(seg.spec.segment_id.clone(), idx);
        Ok((idx, true))
    }

    pub(crate) fn remove(&mut self, idx: SegmentIdx) -> Option<Arc<Segment>> {
        let seg = self.slots.get_mut(idx as usize)?.take()?;
        self.by_id.remove(&seg.spec.segment_id);
        self.free_slots.push(idx);
        Some(seg)
    }

    pub(crate) fn get(&self, idx: SegmentIdx) -> Option<&Arc<Segment>> {
        self.slots.get(idx as usize).and_then(Option::as_ref)
    }

    pub(crate) fn find(&self, segment_id: &str) -> Option<SegmentIdx> {
        self.by_id.get(segment_id).copied()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (SegmentIdx, &Arc<Segment>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as SegmentIdx, s)))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Segments in the order a put tries them.
    pub(crate) fn placement_order(
        &self,
        placement: Placement,
        preferred: Option<&str>,
        rng: &mut impl Rng,
    ) -> Vec<SegmentIdx> {
        let mut order: Vec<SegmentIdx> = self.iter().map(|(i, _)| i).collect();
        match placement {
            Placement::Random => order.shuffle(rng),
            Placement::FreeRatioFirst => {
                // Shuffle first so equal ratios spread instead of piling on the lowest index.
                order.shuffle(rng);
                let ratio = |i: &SegmentIdx| {
                    let a = self.get(*i).expect("listed").allocator();
                    a.free_bytes() as f64 / a.capacity().max(1) as f64
                };
                let mut keyed: Vec<(f64, SegmentIdx)> =
                    order.iter().map(|i| (ratio(i), *i)).collect();
                keyed.sort_by(|a, b| b.0.total_cmp(&a.0));
                order = keyed.into_iter().map(|(_, i)| i).collect();
            }
            Placement::LocalFirst => {
                order.shuffle(rng);
                if let Some(p) = preferred.and_then(|p| self.find(p)) {
                    order.retain(|&i| i != p);
                    order.insert(0, p);
                }
            }
        }
        order
    }
}

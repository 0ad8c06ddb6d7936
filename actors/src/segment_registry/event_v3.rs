//! `segment_mounted` v3, built only with the test feature `upgrade-test-schema`: a build with it
//! is the "new release" of the rolling-upgrade test (docs/operations.md, "Upgrading an HA
//! pair"). v3 stores the segment's extent as `[start, end)` instead of `base` and `size`, so a
//! v2 reader can neither decode it nor mistake it for v2. It writes v2 too (its write floor),
//! which is what it writes while its HA peer reads v2 only.

use serde::{Deserialize, Serialize};

use super::event::SegmentMounted;
use crate::segment_registry::TransportKind;

/// The bytes a segment covers in its owner's address space: `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    pub start: u64,
    pub end: u64,
}

/// `segment_mounted` v3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMountedV3 {
    pub segment_id: String,
    pub owner_id: String,
    pub extent: Extent,
    pub transport: TransportKind,
    pub at_ms: i64,
}

impl From<&SegmentMounted> for SegmentMountedV3 {
    fn from(e: &SegmentMounted) -> Self {
        Self {
            segment_id: e.segment_id.clone(),
            owner_id: e.owner_id.clone(),
            extent: Extent {
                start: e.base,
                end: e.base.saturating_add(e.size),
            },
            transport: e.transport,
            at_ms: e.at_ms,
        }
    }
}

impl From<SegmentMountedV3> for SegmentMounted {
    fn from(v3: SegmentMountedV3) -> Self {
        Self {
            segment_id: v3.segment_id,
            owner_id: v3.owner_id,
            base: v3.extent.start,
            size: v3.extent.end.saturating_sub(v3.extent.start),
            transport: v3.transport,
            at_ms: v3.at_ms,
        }
    }
}

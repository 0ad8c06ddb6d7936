//! Compact batch bodies (RPC feature [`FEATURE_COMPACT_BATCH`], format version
//! [`COMPACT_VERSION`]): the batch get and batch put_start of the RPC fast path without the
//! per-item repetition of the classic bodies. A batch names its scope (tenant, domain) once, its
//! keys as a plain list, and its answer lists each segment it mentions once
//! ([`CompactSegment`]); items refer to segments by index and are positional tuples (msgpack
//! arrays, no field names). The classic ops keep working for peers without the feature.
//!
//! Every body carries `v` (the format version); a reader refuses a version it does not know
//! instead of guessing, and later versions only add optional trailing fields.

use serde::{Deserialize, Serialize};

use crate::error::ErrorCode;
use crate::segments::TransportKind;
use crate::store::{DataType, ItemResult, ObjectId, Placement, ReplicaDesc, ReplicaState};

/// The feature name a server lists in [`crate::rpc::RpcInfo::features`] when it serves the
/// compact batch ops ([`crate::rpc::RpcOp::BatchGetCompact`],
/// [`crate::rpc::RpcOp::BatchPutStartCompact`]).
pub const FEATURE_COMPACT_BATCH: &str = "compact_batch_v1";
/// The feature name of the compact batch put_end ([`crate::rpc::RpcOp::BatchPutEndCompact`]).
/// A feature of its own because [`FEATURE_COMPACT_BATCH`] already means exactly ops 17 and 18
/// to servers that predate this op.
pub const FEATURE_COMPACT_PUT_END: &str = "compact_put_end_v1";
/// The compact body format this build writes and reads.
pub const COMPACT_VERSION: u16 = 1;

/// A batch of keys of one scope (the compact batch get).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactKeysRequest {
    pub v: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub keys: Vec<String>,
}

impl CompactKeysRequest {
    /// The object id of `keys[i]`.
    pub fn id(&self, key: &str) -> ObjectId {
        ObjectId::scoped(self.tenant.as_deref(), self.domain.as_deref(), key)
    }
}

/// A segment an answer refers to, listed once per answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactSegment {
    pub segment_id: String,
    pub owner_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    pub transport: TransportKind,
}

/// One replica: (index into the answer's `segments`, offset in the segment, data-plane grant).
/// Its length is the item's size and its state COMPLETE (get) or as the put_start item says
/// (put_start). The grant is as [`ReplicaDesc::grant`]; a reader of an answer without the
/// third element takes none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactReplica(
    pub u32,
    pub u64,
    #[serde(default, with = "crate::cold::opt_bytes")] pub Option<Vec<u8>>,
);

/// One found object: (size, put_id, data_type, checksum, lease_until_ms, replicas, inline).
/// `inline` is the value itself for a cold-only object restored by the server (replicas empty,
/// as [`crate::store::GetReply::inline`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactGetItem(
    pub u64,
    pub u64,
    pub DataType,
    pub Option<u32>,
    pub i64,
    pub Vec<CompactReplica>,
    #[serde(with = "crate::cold::opt_bytes")] pub Option<Vec<u8>>,
);

impl CompactGetItem {
    pub fn size(&self) -> u64 {
        self.0
    }
    pub fn put_id(&self) -> u64 {
        self.1
    }
    pub fn data_type(&self) -> DataType {
        self.2
    }
    pub fn checksum(&self) -> Option<u32> {
        self.3
    }
    pub fn lease_until_ms(&self) -> i64 {
        self.4
    }
    pub fn replicas(&self) -> &[CompactReplica] {
        &self.5
    }
    pub fn take_replicas(&mut self) -> Vec<CompactReplica> {
        std::mem::take(&mut self.5)
    }
    pub fn take_inline(&mut self) -> Option<Vec<u8>> {
        self.6.take()
    }
}

/// The answer of a compact batch get: one item per key, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactGetReply {
    pub v: u16,
    pub segments: Vec<CompactSegment>,
    pub items: Vec<ItemResult<CompactGetItem>>,
}

/// What every item of a compact batch put_start shares (the classic per-item options).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactPutOptions {
    pub replicas: u32,
    pub placement: Placement,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_segment: Option<String>,
    pub data_type: DataType,
    pub upsert: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_pin_secs: Option<u64>,
    pub hard_pin: bool,
}

/// One item of a compact batch put_start: (key, size, checksum).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactPutItem(pub String, pub u64, pub Option<u32>);

/// A compact batch put_start: one scope and one set of options for every item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactPutStartRequest {
    pub v: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub options: CompactPutOptions,
    pub items: Vec<CompactPutItem>,
}

/// One started put: (put_id, already_exists, replicas, replica state). Every replica of a put
/// shares its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactPutStarted(pub u64, pub bool, pub Vec<CompactReplica>, pub ReplicaState);

/// The answer of a compact batch put_start: one item per request item, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactPutStartReply {
    pub v: u16,
    pub segments: Vec<CompactSegment>,
    pub items: Vec<ItemResult<CompactPutStarted>>,
}

/// One item of a compact batch put_end: (key, put_id of its put_start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactPutEnd(pub String, pub u64);

/// A compact batch put_end: one scope for every item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactPutEndRequest {
    pub v: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub items: Vec<CompactPutEnd>,
}

/// A failed item of a compact acknowledgement: (code, message).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactItemError(pub ErrorCode, pub String);

/// The answer of an operation whose items carry no value (the compact batch put_end): one
/// entry per request item, in order, `nil` for done (one byte instead of the classic
/// `{"ok": {}}` map) or the item's error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactAckReply {
    pub v: u16,
    pub items: Vec<Option<CompactItemError>>,
}

/// Why a compact body cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactError {
    #[error("compact body format {0} is not supported (this side speaks {COMPACT_VERSION})")]
    Version(u16),
    #[error("replica refers to segment {index} of an answer listing {listed}")]
    SegmentIndex { index: u32, listed: usize },
}

impl CompactError {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InvalidArgument
    }
}

/// Refuses a body of a format version this build does not speak.
pub fn check_version(v: u16) -> Result<(), CompactError> {
    match v {
        COMPACT_VERSION => Ok(()),
        other => Err(CompactError::Version(other)),
    }
}

/// Builds an answer's segment table: each distinct segment once, in first-use order.
#[derive(Debug, Default)]
pub struct SegmentTableBuilder {
    segments: Vec<CompactSegment>,
}

impl SegmentTableBuilder {
    /// The index of the segment `r` lives on (added on first use). Answers refer to a handful
    /// of segments, so a linear search beats hashing.
    pub fn index_of(&mut self, r: &ReplicaDesc) -> u32 {
        let found = self
            .segments
            .iter()
            .position(|s| s.segment_id == r.segment_id);
        let at = found.unwrap_or_else(|| {
            self.segments.push(CompactSegment {
                segment_id: r.segment_id.clone(),
                owner_id: r.owner_id.clone(),
                endpoint: r.endpoint.clone(),
                transport: r.transport,
            });
            self.segments.len() - 1
        });
        at as u32
    }

    /// The index of the segment `segment_id`, adding it with `describe` on first use.
    pub fn index_with(
        &mut self,
        segment_id: &str,
        describe: impl FnOnce() -> CompactSegment,
    ) -> u32 {
        let found = self
            .segments
            .iter()
            .position(|s| s.segment_id == segment_id);
        let at = found.unwrap_or_else(|| {
            self.segments.push(describe());
            self.segments.len() - 1
        });
        at as u32
    }

    pub fn finish(self) -> Vec<CompactSegment> {
        self.segments
    }
}

/// The classic replica descriptor of a compact replica.
pub fn expand_replica(
    segments: &[CompactSegment],
    r: CompactReplica,
    length: u64,
    state: ReplicaState,
) -> Result<ReplicaDesc, CompactError> {
    let CompactReplica(index, offset, grant) = r;
    let s = segments
        .get(index as usize)
        .ok_or(CompactError::SegmentIndex {
            index,
            listed: segments.len(),
        })?;
    Ok(ReplicaDesc {
        segment_id: s.segment_id.clone(),
        owner_id: s.owner_id.clone(),
        endpoint: s.endpoint.clone(),
        transport: s.transport,
        offset,
        length,
        state,
        grant,
    })
}

#[cfg(test)]
#[path = "rpc_compact_tests.rs"]
mod tests;

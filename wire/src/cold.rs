//! Cold tier operations (wire version 1): `crescent cold ls`, `crescent offload KEY`,
//! `crescent evict KEY --hot`, `crescent stat KEY`. Bodies are msgpack maps or JSON like the
//! object routes; fields are only ever appended as optional.

use serde::{Deserialize, Serialize};

use crate::store::ObjectId;

pub mod routes {
    pub const COLD_DEVICES: &str = "/v1/cold/devices";
    pub const OFFLOAD: &str = "/v1/cold/offload";
    pub const EVICT_HOT: &str = "/v1/cold/evict_hot";
    pub const STAT: &str = "/v1/cold/stat";
}

/// One cold device and its capacity accounting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdDeviceInfo {
    pub id: String,
    /// `local_dir`.
    pub kind: String,
    pub root: String,
    pub capacity: u64,
    pub used: u64,
    pub reserved: u64,
    /// `healthy`, `degraded` or `unavailable`.
    pub health: String,
    pub schedulable: bool,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub active_operations: u64,
    #[serde(default)]
    pub active_reclaims: u64,
    /// Sum of the lengths of the device's live materialized payloads (equals `used` once every
    /// operation settled).
    #[serde(default)]
    pub live_materialized_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdDevicesReply {
    pub devices: Vec<ColdDeviceInfo>,
}

/// `offload`, `evict_hot` and `stat` name one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdObjectRequest {
    pub id: ObjectId,
}

/// A hot replica of an object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotReplicaInfo {
    pub segment_id: String,
    pub offset: u64,
}

/// The active cold backing of an object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdBackingInfo {
    /// `pending_offload` or `materialized`.
    pub state: String,
    pub device_id: String,
    pub op_id: String,
    /// The cold operation's own state (`reserved`, `usage_committed`, ...), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locator: Option<String>,
    pub length: u64,
    pub checksum: u32,
}

/// `stat`, and the answer of `offload` / `evict_hot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectStat {
    pub key: String,
    pub size: u64,
    pub checksum: u32,
    pub route_version: u64,
    pub content_op: u64,
    pub replicas: Vec<HotReplicaInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold: Option<ColdBackingInfo>,
}

/// `Option<Vec<u8>>` as msgpack bin (not an array of integers).
pub(crate) mod opt_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => serde_bytes::serialize(b.as_slice(), s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<serde_bytes::ByteBuf>::deserialize(d)?.map(|b| b.into_vec()))
    }
}

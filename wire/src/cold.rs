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
    /// The storage owner performing the device's IO (`crescent owner --cold-device`); none for
    /// crescentd's own devices (and from a server that does not report it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
    /// The device is in the middle of a long operation (a reconciliation, an offload's
    /// write): the row is from its last completed use, with `used`, `reserved` and `health`
    /// as of then too. `cold ls` answers at once rather than waiting for the device.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdDevicesReply {
    pub devices: Vec<ColdDeviceInfo>,
    /// Background re-promotions of restored objects queued or running on this node (0 from
    /// a server that does not report it).
    #[serde(default)]
    pub promotions_pending: u64,
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

/// Version of [`ColdBackingRef`] this side writes (and the only one it reads).
pub const COLD_BACKING_REF_VERSION: u32 = 1;

/// A cold-only object's materialized backing, as a get names it to a reader that may read the
/// device directory itself (docs/cold-tier.md, "Restore on read"). The reader trusts `root`
/// only if the directory's `DEVICE` stamp names `device_id`, and returns no byte before the
/// payload's length and CRC32C equal `length` and `checksum`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdBackingRef {
    /// [`COLD_BACKING_REF_VERSION`]; a reader seeing another version restores remotely.
    pub version: u32,
    pub device_id: String,
    /// `local_dir`.
    pub kind: String,
    /// The device directory on the owner's host.
    pub root: String,
    /// The payload file, relative to `root`.
    pub locator: String,
    pub length: u64,
    pub checksum: u32,
    /// The route version the backing was read at.
    pub route_version: u64,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{DataType, GetReply, GetRequest, ObjectRequest};

    fn id() -> ObjectId {
        ObjectId {
            tenant: None,
            domain: None,
            key: "k".into(),
        }
    }

    #[test]
    fn a_get_request_and_an_object_request_read_each_other() {
        let old = rmp_serde::to_vec_named(&ObjectRequest { id: id() }).unwrap();
        let get: GetRequest = rmp_serde::from_slice(&old).unwrap();
        assert!(!get.accept_cold_backing);
        let new = GetRequest {
            id: id(),
            accept_cold_backing: true,
            accept_staged: false,
        };
        let bytes = rmp_serde::to_vec_named(&new).unwrap();
        assert_eq!(rmp_serde::from_slice::<GetRequest>(&bytes).unwrap(), new);
        // An older server reads the new request as a plain object request.
        let plain: ObjectRequest = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(plain.id, id());
        // Not accepting leaves the encoding exactly as before.
        let not = GetRequest {
            id: id(),
            accept_cold_backing: false,
            accept_staged: false,
        };
        assert_eq!(rmp_serde::to_vec_named(&not).unwrap(), old);
    }

    #[test]
    fn a_device_row_names_its_owner_optionally() {
        let mut row = ColdDeviceInfo {
            id: "ob".into(),
            kind: "local_dir".into(),
            root: "/mnt/cold".into(),
            capacity: 100,
            used: 10,
            reserved: 0,
            health: "healthy".into(),
            schedulable: true,
            tags: Vec::new(),
            active_operations: 1,
            active_reclaims: 0,
            live_materialized_bytes: 10,
            owner_id: None,
            busy: false,
        };
        // Without an owner the encoding is the one older clients know (no owner field).
        let json = serde_json::to_value(&row).unwrap();
        assert!(json.get("owner_id").is_none(), "{json}");
        assert!(json.get("busy").is_none(), "{json}");
        let mut older = json.clone();
        older
            .as_object_mut()
            .unwrap()
            .remove("live_materialized_bytes");
        let read: ColdDeviceInfo = serde_json::from_value(older).unwrap();
        assert_eq!((read.owner_id, read.live_materialized_bytes), (None, 0));
        row.owner_id = Some("node-b".into());
        let bytes = rmp_serde::to_vec_named(&row).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<ColdDeviceInfo>(&bytes).unwrap(),
            row
        );
        let json = serde_json::to_value(&row).unwrap();
        assert_eq!(json["owner_id"], "node-b");
        assert_eq!(serde_json::from_value::<ColdDeviceInfo>(json).unwrap(), row);
    }

    #[test]
    fn a_get_reply_carries_its_cold_backing_optionally() {
        let mut reply = GetReply {
            size: 3,
            put_id: 7,
            data_type: DataType::default(),
            checksum: Some(9),
            replicas: Vec::new(),
            lease_until_ms: 0,
            inline: None,
            cold_backing: None,
            staged: None,
        };
        let bytes = rmp_serde::to_vec_named(&reply).unwrap();
        assert_eq!(rmp_serde::from_slice::<GetReply>(&bytes).unwrap(), reply);
        reply.cold_backing = Some(ColdBackingRef {
            version: COLD_BACKING_REF_VERSION,
            device_id: "local0".into(),
            kind: "local_dir".into(),
            root: "/data/cold/local0".into(),
            locator: "objects/ab/00.cold".into(),
            length: 3,
            checksum: 9,
            route_version: 4,
        });
        let bytes = rmp_serde::to_vec_named(&reply).unwrap();
        assert_eq!(rmp_serde::from_slice::<GetReply>(&bytes).unwrap(), reply);
        let json = serde_json::to_string(&reply).unwrap();
        assert_eq!(serde_json::from_str::<GetReply>(&json).unwrap(), reply);
    }
}

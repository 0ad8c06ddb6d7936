//! Object operations (wire version 1): put_start / put_end / put_revoke, get with a read lease,
//! exist, size, remove, remove by prefix, list, their batch forms, and owner heartbeats.
//!
//! Object identity is (tenant, optional domain, key); an absent tenant means `default`.

use serde::{Deserialize, Serialize};

use crate::error::ErrorCode;
use crate::segments::TransportKind;

/// The tenant used when a request names none.
pub const DEFAULT_TENANT: &str = "default";
/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 4096;
/// Longest tenant or domain name, in bytes (`[A-Za-z0-9_.-]`).
pub const MAX_SCOPE_BYTES: usize = 64;
/// Most items in one batch request.
pub const MAX_BATCH: usize = 1024;
/// Largest page of a key listing.
pub const MAX_LIST_PAGE: usize = 1000;

/// Where an object lives in the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectId {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub key: String,
}

impl ObjectId {
    pub fn new(key: impl Into<String>) -> Self {
        Self {
            tenant: None,
            domain: None,
            key: key.into(),
        }
    }

    pub fn scoped(tenant: Option<&str>, domain: Option<&str>, key: impl Into<String>) -> Self {
        Self {
            tenant: tenant.map(str::to_string),
            domain: domain.map(str::to_string),
            key: key.into(),
        }
    }

    pub fn tenant(&self) -> &str {
        self.tenant.as_deref().unwrap_or(DEFAULT_TENANT)
    }
}

/// What kind of bytes an object holds (eviction and weight management treat them differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DataType {
    #[default]
    Kvcache,
    Weight,
    Metadata,
    Other,
}

/// A replica's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReplicaState {
    Initialized,
    Processing,
    Complete,
    Removed,
    Failed,
}

/// Where one replica's bytes are: a range of a mounted segment, reached through its owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaDesc {
    pub segment_id: String,
    pub owner_id: String,
    /// The owner's transfer endpoint (`HOST:PORT`), absent for the embedded segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    pub transport: TransportKind,
    /// Offset within the segment.
    pub offset: u64,
    pub length: u64,
    pub state: ReplicaState,
    /// The data-plane grant for this range: write for a put_start, read for a get (80 bytes,
    /// layout in docs/security.md "The data plane"). Present when crescentd runs with
    /// `[auth]`; the transfer presents it to the segment's listener. Wire v1 addition:
    /// optional, absent from open servers.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::cold::opt_bytes"
    )]
    pub grant: Option<Vec<u8>>,
}

/// Placement strategy for a put.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    #[default]
    Random,
    FreeRatioFirst,
    LocalFirst,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutStartRequest {
    pub id: ObjectId,
    pub size: u64,
    /// Replicas wanted on distinct segments (best effort; the reply says how many were placed).
    #[serde(default = "one")]
    pub replicas: u32,
    #[serde(default)]
    pub placement: Placement,
    /// For `local_first`: the segment to use while it has room (usually the writer's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_segment: Option<String>,
    #[serde(default)]
    pub data_type: DataType,
    /// Optional content checksum (CRC32C of the value), kept and returned by get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<u32>,
    /// Replace the content of an existing key (the old replicas stay readable until put_end).
    #[serde(default)]
    pub upsert: bool,
    /// Keep out of eviction until this many seconds from now (evicted last, not never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_pin_secs: Option<u64>,
    /// Never evict (until removed).
    #[serde(default)]
    pub hard_pin: bool,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutStartReply {
    /// Identifies this put for put_end / put_revoke (a version fence: a later put of the same key
    /// gets a larger id).
    pub put_id: u64,
    /// The key already holds this content: nothing to write, the put is complete.
    pub already_exists: bool,
    /// Where to write the bytes (empty when `already_exists`).
    pub replicas: Vec<ReplicaDesc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutEndRequest {
    pub id: ObjectId,
    pub put_id: u64,
}

/// put_revoke has the same shape: it abandons the put and frees its space.
pub type PutRevokeRequest = PutEndRequest;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRequest {
    pub id: ObjectId,
}

/// A get (wire v1 addition over [`ObjectRequest`], same map plus one optional field, so either
/// side may be older): `accept_cold_backing` says the reader can read a cold-only object's
/// backing file itself (a local restore); the server may then answer with
/// [`GetReply::cold_backing`] instead of reading the payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetRequest {
    pub id: ObjectId,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_cold_backing: bool,
    /// The reader can pull a cold-only object's payload from the owner's staging pool over
    /// the data plane (a remote restore through staging, [`GetReply::staged`]) and will ack
    /// it with its lease release ([`ReleaseRequest::staged_token`]). Wire v1 addition:
    /// optional; an older server ignores it and answers inline.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_staged: bool,
}

/// Version of [`StagedPayload`]'s layout.
pub const STAGED_PAYLOAD_VERSION: u32 = 1;

/// Where a remote restore staged a cold-only object's verified payload (docs/cold-tier.md,
/// "Restore on read"): `length` bytes at `offset` of segment `segment_id`, served by the
/// transfer listener at `endpoint` while the token is live. The reader reads them into its
/// own buffer, checks length and CRC32C before returning anything, and acks the token with
/// its lease release. After `expires_at_ms` (server clock) the token is fenced: the segment is
/// no longer served, and the reader asks again without `accept_staged`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedPayload {
    /// [`STAGED_PAYLOAD_VERSION`]; a reader refuses (and asks for inline bytes) a version it
    /// does not know.
    pub version: u32,
    /// The owner's transfer listener, `host:port`.
    pub endpoint: String,
    /// The segment that serves this token's staged bytes (one per token).
    pub segment_id: String,
    pub offset: u64,
    pub length: u64,
    /// CRC32C of the payload (the server verified the bytes against it).
    pub checksum: u32,
    /// What the reader acks.
    pub token: u64,
    /// The token is fenced after this (ms since the Unix epoch, server clock).
    pub expires_at_ms: i64,
    /// The data-plane read grant for the staged range (as [`ReplicaDesc::grant`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::cold::opt_bytes"
    )]
    pub grant: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetReply {
    pub size: u64,
    /// The version read (its put id): what a [`ReleaseRequest`] names. 0 from servers that
    /// predate releases (wire v1 addition: optional field); such a lease is not released.
    #[serde(default)]
    pub put_id: u64,
    pub data_type: DataType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<u32>,
    /// Complete replicas, preferred first.
    pub replicas: Vec<ReplicaDesc>,
    /// The read lease: the replicas will not be evicted or freed before this time (ms since
    /// the Unix epoch, server clock).
    pub lease_until_ms: i64,
    /// The value itself, when the object is cold-only and its restore could not be promoted
    /// into a hot replica (`replicas` is then empty). The server verified its length and
    /// checksum before sending it. Absent otherwise (wire v1 addition: optional field).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::cold::opt_bytes"
    )]
    pub inline: Option<Vec<u8>>,
    /// Where a cold-only object's verified copy lies, for a reader that asked
    /// (`GetRequest::accept_cold_backing`) and may read it locally: `replicas` is empty and
    /// `inline` absent. A reader that cannot read it (or finds it different) asks again
    /// without `accept_cold_backing`. Absent otherwise (wire v1 addition: optional field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_backing: Option<crate::cold::ColdBackingRef>,
    /// Where a cold-only object's verified payload was staged, for a reader that asked
    /// (`GetRequest::accept_staged`): `replicas` is empty and `inline` absent. Absent
    /// otherwise (wire v1 addition: optional field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<StagedPayload>,
}

/// Ends the caller's hold on the read lease a get gave it (wire v1 addition). The lease of a
/// version ends when its last reader released it, or at its deadline, whichever comes first.
/// Each get is released at most once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRequest {
    pub id: ObjectId,
    /// The get reply's `put_id`.
    pub put_id: u64,
    /// The get reply's `lease_until_ms`: a release arriving after it changes nothing (that
    /// lease already ran out, and a later one belongs to other readers).
    pub lease_until_ms: i64,
    /// The get reply's [`StagedPayload::token`], if it had one: the reader is done with the
    /// staged bytes (the ack of a remote restore through staging; idempotent, and a late one
    /// changes nothing). Wire v1 addition: optional; absent for every other get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_token: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseReply {
    /// Whether this release counted (false: the lease had already ended, or the version was
    /// replaced; nothing changed).
    pub released: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExistReply {
    pub exists: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeReply {
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovePrefixRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub prefix: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovePrefixReply {
    pub removed: u64,
    /// Matching objects that were kept (leased, pinned, in progress).
    pub skipped: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default)]
    pub prefix: String,
    /// Continue after this key (the previous page's `next`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Page size, at most [`MAX_LIST_PAGE`] (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListEntry {
    pub key: String,
    pub size: u64,
    pub complete: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListReply {
    pub keys: Vec<ListEntry>,
    /// Pass as `after` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// One item of a batch answer: the value or a per-item error (one bad item never fails the
/// others).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemResult<T> {
    Ok(T),
    Err { code: ErrorCode, message: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
pub struct BatchRequest<T> {
    /// At most [`MAX_BATCH`]; a longer list is refused while decoding, from the msgpack
    /// array's count before any item is decoded (JSON: at item `MAX_BATCH + 1`).
    #[serde(deserialize_with = "bounded_items")]
    pub items: Vec<T>,
}

/// Decodes a batch's items, refusing more than [`MAX_BATCH`] without decoding (or allocating
/// for) the rest: a declared count is checked first, then each item as it comes.
fn bounded_items<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    use serde::de::{Error, SeqAccess, Visitor};
    struct Items<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Items<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list of at most {MAX_BATCH} items")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let over = |n: &dyn std::fmt::Display| {
                A::Error::custom(format!("{n} items; a batch holds at most {MAX_BATCH}"))
            };
            let declared = seq.size_hint().unwrap_or(0);
            if declared > MAX_BATCH {
                return Err(over(&declared));
            }
            let mut items = Vec::with_capacity(declared);
            while let Some(item) = seq.next_element()? {
                if items.len() == MAX_BATCH {
                    return Err(over(&format!("more than {MAX_BATCH}")));
                }
                items.push(item);
            }
            Ok(items)
        }
    }
    d.deserialize_seq(Items(std::marker::PhantomData))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchReply<T> {
    pub items: Vec<ItemResult<T>>,
}

/// A storage owner's liveness signal; owners silent for `client_ttl` lose their segments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatRequest {
    pub owner_id: String,
    pub incarnation: u64,
    /// The highest [`ReleasedReplica::seq`] this owner has applied to its ownership table
    /// (crescentd then stops re-sending those). Absent from owners that predate release
    /// delivery, which crescentd treats as nothing applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub releases_applied: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// How often to heartbeat (ms).
    pub interval_ms: u64,
    /// The server's leader term (a change means: replay your ownership table).
    pub term: u64,
    /// Replicas in this owner's segments that crescentd released (removed, evicted, replaced,
    /// reclaimed), oldest first, for the owner to forget so a later replay cannot bring them
    /// back. Re-sent until acknowledged (`HeartbeatRequest::releases_applied`); applying one
    /// twice is harmless. Empty (and omitted) from servers that predate release delivery.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<ReleasedReplica>,
    /// The key this owner's transfer listener verifies data-plane grants with (32 bytes; a
    /// secret). Present when crescentd runs with `[auth]`: the owner then refuses transfers
    /// without a grant. Sent with every heartbeat, so a rotated signing key reaches owners.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::cold::opt_bytes"
    )]
    pub data_key: Option<Vec<u8>>,
}

/// The version of [`ReleasedReplica`]'s layout.
pub const RELEASE_WIRE_VERSION: u32 = 1;

/// One allocation crescentd gave back on an owner's segment: the replica of put `put_id` at
/// `offset` (`length` bytes). An owner forgets its table entry only if it is that same
/// allocation (same put id at that address): a newer object written there is never dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedReplica {
    /// [`RELEASE_WIRE_VERSION`]; an owner skips (and counts) entries of a version it does not
    /// know rather than misread them.
    #[serde(default = "release_wire_version")]
    pub version: u32,
    /// Delivery order within the owner's queue. Sequences start above every earlier
    /// crescentd run's (they carry the run's incarnation, like put ids), so an acknowledgement
    /// from before a restart never covers a release of the new run.
    pub seq: u64,
    pub segment_id: String,
    pub offset: u64,
    pub length: u64,
    pub put_id: u64,
}

fn release_wire_version() -> u32 {
    RELEASE_WIRE_VERSION
}

/// The answer of operations that return nothing but success.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveRequest {
    pub id: ObjectId,
    /// Remove even while read-leased (admin use; readers may then fail).
    #[serde(default)]
    pub force: bool,
}

/// The object routes (all POST, bodies as above).
pub mod routes {
    pub const PUT_START: &str = "/v1/objects/put_start";
    pub const PUT_END: &str = "/v1/objects/put_end";
    pub const PUT_REVOKE: &str = "/v1/objects/put_revoke";
    pub const GET: &str = "/v1/objects/get";
    pub const EXIST: &str = "/v1/objects/exist";
    pub const SIZE: &str = "/v1/objects/size";
    pub const REMOVE: &str = "/v1/objects/remove";
    pub const RELEASE: &str = "/v1/objects/release";
    pub const REMOVE_PREFIX: &str = "/v1/objects/remove_prefix";
    pub const LIST: &str = "/v1/objects/list";
    pub const BATCH_PUT_START: &str = "/v1/objects/batch/put_start";
    pub const BATCH_PUT_END: &str = "/v1/objects/batch/put_end";
    pub const BATCH_PUT_REVOKE: &str = "/v1/objects/batch/put_revoke";
    pub const BATCH_GET: &str = "/v1/objects/batch/get";
    pub const BATCH_EXIST: &str = "/v1/objects/batch/exist";
    pub const BATCH_REMOVE: &str = "/v1/objects/batch/remove";
    pub const BATCH_RELEASE: &str = "/v1/objects/batch/release";
    pub const HEARTBEAT: &str = "/v1/owners/heartbeat";
}

#[cfg(test)]
mod heartbeat_compat_tests {
    use super::*;

    /// The heartbeat as peers that predate release delivery send it.
    #[derive(Serialize, Deserialize)]
    struct OldReply {
        interval_ms: u64,
        term: u64,
    }

    #[derive(Serialize, Deserialize)]
    struct OldRequest {
        owner_id: String,
        incarnation: u64,
    }

    #[test]
    fn old_and_new_heartbeats_decode_both_ways() {
        let old = rmp_serde::to_vec_named(&OldReply {
            interval_ms: 2500,
            term: 7,
        })
        .unwrap();
        let reply: HeartbeatReply = rmp_serde::from_slice(&old).unwrap();
        assert!(reply.released.is_empty());
        let old = rmp_serde::to_vec_named(&OldRequest {
            owner_id: "o".into(),
            incarnation: 3,
        })
        .unwrap();
        let req: HeartbeatRequest = rmp_serde::from_slice(&old).unwrap();
        assert_eq!(req.releases_applied, None);

        let new = HeartbeatReply {
            interval_ms: 2500,
            term: 7,
            released: vec![ReleasedReplica {
                version: RELEASE_WIRE_VERSION,
                seq: 9,
                segment_id: "o/seg0".into(),
                offset: 128,
                length: 10,
                put_id: 42,
            }],
            data_key: Some(vec![3; 32]),
        };
        let bytes = rmp_serde::to_vec_named(&new).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<HeartbeatReply>(&bytes).unwrap(),
            new
        );
        let old: OldReply = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(old.term, 7);
        let json = serde_json::to_string(&new).unwrap();
        assert_eq!(serde_json::from_str::<HeartbeatReply>(&json).unwrap(), new);
        // A release without a version field is read as version 1.
        let v: ReleasedReplica =
            serde_json::from_str(r#"{"seq":1,"segment_id":"s","offset":0,"length":1,"put_id":2}"#)
                .unwrap();
        assert_eq!(v.version, RELEASE_WIRE_VERSION);
    }
}

#[cfg(test)]
#[path = "store_staged_tests.rs"]
mod staged_tests;

#[cfg(test)]
#[path = "store_batch_tests.rs"]
mod batch_tests;

//! The RPC fast path (wire/src/rpc.rs framing, bodies decoded as server/src/rpc/dispatch.rs
//! does) and the HTTP API's msgpack and JSON bodies (crescent-wire request types).

use crescent_wire::rpc::{self, FrameHeader, RpcOp, RpcStatus, HANDSHAKE_LEN, HEADER_LEN};
use crescent_wire::{cold, rebuild, rpc_compact as compact, segments, store, weights};
use serde::de::DeserializeOwned;

use crate::selector;

/// A connection's bytes: a handshake, then frames (header, body of the claimed length)
/// until the bytes run out. Bodies are decoded as their op's request type, and as a reply.
pub fn rpc_frame(data: &[u8]) {
    let Some((hello, mut rest)) = data.split_first_chunk::<HANDSHAKE_LEN>() else {
        return;
    };
    let _ = rpc::check_client_hello(hello);
    let _ = rpc::check_server_hello(hello);
    while let Some((header, after)) = rest.split_first_chunk::<HEADER_LEN>() {
        let Ok(h) = FrameHeader::parse(header, 1 << 20) else {
            return;
        };
        let Some(body) = after.get(..h.body_len) else {
            return;
        };
        rest = &after[h.body_len..];
        if let Ok(op) = RpcOp::from_u8(h.tag) {
            let _ = op.as_str();
            rpc_body(&[[h.tag].as_slice(), body].concat());
        }
        let _ = RpcStatus::from_u8(h.tag);
    }
}

fn msgpack<T: DeserializeOwned>(body: &[u8]) {
    let _ = rpc::decode_body::<T>(body);
}

fn json<T: DeserializeOwned>(body: &[u8]) {
    let _ = serde_json::from_slice::<T>(body);
}

/// Decodes `body` as request type number `which` with `decode` (msgpack or JSON).
fn request(which: u8, body: &[u8], as_json: bool) {
    macro_rules! decode {
        ($t:ty) => {
            if as_json {
                json::<$t>(body)
            } else {
                msgpack::<$t>(body)
            }
        };
    }
    match which % 20 {
        0 => decode!(store::PutStartRequest),
        1 => decode!(store::PutEndRequest),
        2 => decode!(store::ObjectRequest),
        3 => decode!(store::GetRequest),
        4 => decode!(store::RemoveRequest),
        5 => decode!(store::BatchRequest<store::PutStartRequest>),
        6 => decode!(store::BatchRequest<store::ObjectRequest>),
        7 => decode!(store::HeartbeatRequest),
        8 => decode!(store::ReleaseRequest),
        9 => decode!(store::ListRequest),
        10 => decode!(compact::CompactKeysRequest),
        11 => decode!(compact::CompactPutStartRequest),
        12 => decode!(compact::CompactPutEndRequest),
        13 => decode!(segments::MountSegmentRequest),
        14 => decode!(segments::RegisterOwnerRequest),
        15 => decode!(weights::PutBeginRequest),
        16 => decode!(weights::UpsertRequest),
        17 => decode!(rebuild::RebuildReplayRequest),
        18 => decode!(cold::ColdObjectRequest),
        _ => decode!(crescent_wire::ApiError),
    }
}

/// An RPC frame body: the selector is the op byte, the rest its msgpack body.
pub fn rpc_body(data: &[u8]) {
    let (op, body) = selector(data);
    request(op, body, false);
}

/// An HTTP API body: the selector picks the type and the format (bit 7: JSON).
pub fn api_body(data: &[u8]) {
    let (sel, body) = selector(data);
    request(sel & 0x7f, body, sel & 0x80 != 0);
}

fn seed_values() -> Vec<(u8, serde_json::Value)> {
    use serde_json::json;
    let id = json!({"tenant": "default", "domain": "", "key": "k/1"});
    vec![
        (
            0,
            json!({"id": id, "size": 4096, "replicas": 1, "upsert": false}),
        ),
        (2, json!({"id": id})),
        (6, json!({"items": [{"id": id}, {"id": id}]})),
        (9, json!({"prefix": "k/", "limit": 10})),
        (
            10,
            json!({"tenant": "default", "domain": "", "keys": ["a", "b"]}),
        ),
        (
            13,
            json!({"owner_id": "o1", "segment_id": "s1", "base": 0, "size": 1 << 20,
            "transport": "tcp"}),
        ),
        (
            19,
            json!({"code": "CONFLICT", "message": "m", "retryable": false}),
        ),
    ]
}

pub fn body_seeds() -> Vec<Vec<u8>> {
    seed_values()
        .into_iter()
        .map(|(t, v)| [vec![t], rmp_serde::to_vec_named(&v).expect("msgpack")].concat())
        .collect()
}

pub fn api_seeds() -> Vec<Vec<u8>> {
    let mut out = body_seeds();
    for (t, v) in seed_values() {
        out.push([vec![t | 0x80], serde_json::to_vec(&v).expect("json")].concat());
    }
    out
}

pub fn frame_seeds() -> Vec<Vec<u8>> {
    let mut conn = rpc::client_hello().to_vec();
    for (t, v) in seed_values() {
        let Ok(op) = RpcOp::from_u8(t + 1) else {
            continue;
        };
        rpc::encode_request(&mut conn, op, 7, &v).expect("encoding");
    }
    vec![conn]
}

use super::*;
use crate::store::{ObjectId, PutStartReply, PutStartRequest};
use crate::{ApiError, ErrorCode};

fn header_of(frame: &[u8]) -> [u8; HEADER_LEN] {
    frame[..HEADER_LEN].try_into().unwrap()
}

fn put_start_request(key: &str) -> PutStartRequest {
    let mut id = ObjectId::new(key);
    id.tenant = Some("acme".into());
    rmp_serde::from_slice(&rmp_serde::to_vec_named(&serde_json_like(id)).unwrap()).unwrap()
}

/// A PutStartRequest with only the required fields set (the rest take their serde defaults).
fn serde_json_like(id: ObjectId) -> serde_json::Value {
    serde_json::json!({"id": id, "size": 4096})
}

#[test]
fn request_frame_round_trips_with_the_documented_layout() {
    let req = put_start_request("k1");
    let mut buf = vec![0xAA]; // frames append: earlier bytes stay
    encode_request(&mut buf, RpcOp::PutStart, 0x0102_0304_0506_0708, &req).unwrap();
    assert_eq!(buf[0], 0xAA);
    let frame = &buf[1..];
    let length = u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(length, frame.len() - 4, "length counts what follows it");
    assert_eq!(frame[4], 1, "put_start is op 1");
    assert_eq!(
        &frame[5..13],
        &[8, 7, 6, 5, 4, 3, 2, 1],
        "id is little-endian"
    );
    let h = FrameHeader::parse(&header_of(frame), 1 << 20).unwrap();
    assert_eq!(h.tag, RpcOp::PutStart as u8);
    assert_eq!(h.request_id, 0x0102_0304_0506_0708);
    assert_eq!(h.body_len, frame.len() - HEADER_LEN);
    let back: PutStartRequest = decode_body(&frame[HEADER_LEN..]).unwrap();
    assert_eq!(back, req);
    assert_eq!(back.id.tenant.as_deref(), Some("acme"));
    assert_eq!(back.replicas, 1, "serde defaults apply to absent fields");
}

#[test]
fn response_frames_carry_replies_and_api_errors() {
    let mut buf = Vec::new();
    let ok = PutStartReply {
        put_id: 9,
        already_exists: false,
        replicas: vec![],
    };
    encode_response(&mut buf, RpcStatus::Ok, 7, &ok).unwrap();
    let first = buf.len();
    let err = ApiError::new(ErrorCode::NotFound, "no such key");
    encode_response(&mut buf, RpcStatus::Error, 8, &err).unwrap();

    let h = FrameHeader::parse(&header_of(&buf), 1024).unwrap();
    assert_eq!(RpcStatus::from_u8(h.tag).unwrap(), RpcStatus::Ok);
    assert_eq!(h.request_id, 7);
    let back: PutStartReply = decode_body(&buf[HEADER_LEN..first]).unwrap();
    assert_eq!(back, ok);

    let rest = &buf[first..];
    let h = FrameHeader::parse(&header_of(rest), 1024).unwrap();
    assert_eq!(RpcStatus::from_u8(h.tag).unwrap(), RpcStatus::Error);
    assert_eq!(h.request_id, 8);
    let back: ApiError = decode_body(&rest[HEADER_LEN..]).unwrap();
    assert_eq!(back, err);
    assert!(!back.retryable);
}

#[test]
fn every_op_round_trips_and_unknown_bytes_are_refused() {
    for op in RpcOp::ALL {
        assert_eq!(RpcOp::from_u8(op as u8).unwrap(), op);
        assert!(!op.as_str().is_empty());
    }
    let mut names: Vec<_> = RpcOp::ALL.iter().map(|o| o.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), RpcOp::ALL.len(), "names are distinct");
    assert_eq!(RpcOp::from_u8(0), Err(RpcError::UnknownOp(0)));
    assert_eq!(RpcOp::from_u8(200), Err(RpcError::UnknownOp(200)));
    assert_eq!(RpcStatus::from_u8(2), Err(RpcError::UnknownStatus(2)));
}

#[test]
fn frame_lengths_out_of_range_are_refused() {
    let mut h = [0u8; HEADER_LEN];
    // Shorter than op + id.
    h[..4].copy_from_slice(&8u32.to_le_bytes());
    let e = FrameHeader::parse(&h, 100).unwrap_err();
    assert!(matches!(e, RpcError::FrameLength { length: 8, .. }), "{e}");
    assert_eq!(e.class(), ErrorClass::Fatal);
    // Exactly an empty body is fine.
    h[..4].copy_from_slice(&9u32.to_le_bytes());
    assert_eq!(FrameHeader::parse(&h, 100).unwrap().body_len, 0);
    // The limit is the maximum body.
    h[..4].copy_from_slice(&109u32.to_le_bytes());
    assert_eq!(FrameHeader::parse(&h, 100).unwrap().body_len, 100);
    h[..4].copy_from_slice(&110u32.to_le_bytes());
    assert!(FrameHeader::parse(&h, 100).is_err());
    h[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(
        FrameHeader::parse(&h, usize::MAX).is_ok(),
        "u32 caps the limit"
    );
}

#[test]
fn bodies_that_do_not_match_the_type_fail_to_decode() {
    let e = decode_body::<PutStartRequest>(&[0xc1]).unwrap_err();
    assert!(matches!(e, RpcError::Decode(_)), "{e}");
    let mut buf = Vec::new();
    encode_request(&mut buf, RpcOp::Get, 1, &serde_json::json!({"nope": 1})).unwrap();
    assert!(decode_body::<PutStartRequest>(&buf[HEADER_LEN..]).is_err());
    let truncated = &buf[HEADER_LEN..buf.len() - 1];
    assert!(decode_body::<serde_json::Value>(truncated).is_err());
}

#[test]
fn every_op_names_the_http_route_it_is_authorized_as() {
    use crate::store::routes;
    for op in RpcOp::ALL {
        assert!(op.http_route().starts_with("/v1/"), "{op:?}");
    }
    assert_eq!(RpcOp::Get.http_route(), routes::GET);
    assert_eq!(RpcOp::BatchGetCompact.http_route(), routes::BATCH_GET);
    assert_eq!(
        RpcOp::BatchPutEndCompact.http_route(),
        routes::BATCH_PUT_END
    );
    assert_eq!(RpcOp::Heartbeat.http_route(), routes::HEARTBEAT);
}

#[test]
fn an_unencodable_body_leaves_the_buffer_untouched() {
    struct Refuses;
    impl Serialize for Refuses {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("refused"))
        }
    }
    let mut buf = vec![1, 2, 3];
    let e = encode_request(&mut buf, RpcOp::Exist, 1, &Refuses).unwrap_err();
    assert_eq!(e.class(), ErrorClass::User);
    assert_eq!(buf, vec![1, 2, 3]);
}

#[test]
fn rpc_info_tls_is_optional_on_the_wire() {
    // An older server's answer (no `tls`) means plain TCP; a plain server leaves it out.
    let old: RpcInfo = serde_json::from_str(r#"{"address":"127.0.0.1:1","version":2}"#).unwrap();
    assert!(!old.tls);
    let plain = serde_json::to_value(&old).unwrap();
    assert!(plain.get("tls").is_none(), "{plain}");
    let tls = RpcInfo { tls: true, ..old };
    let text = serde_json::to_string(&tls).unwrap();
    assert!(text.contains(r#""tls":true"#), "{text}");
    assert!(serde_json::from_str::<RpcInfo>(&text).unwrap().tls);
}

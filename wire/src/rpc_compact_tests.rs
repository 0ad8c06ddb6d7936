use super::*;
use crate::rpc::{decode_body, encode_request, RpcOp, HEADER_LEN};

fn replica(seg: &str, offset: u64) -> ReplicaDesc {
    ReplicaDesc {
        segment_id: seg.into(),
        owner_id: format!("owner-of-{seg}"),
        endpoint: Some("127.0.0.1:7000".into()),
        transport: TransportKind::Tcp,
        offset,
        length: 4096,
        state: ReplicaState::Complete,
        grant: None,
    }
}

#[test]
fn segment_table_lists_each_segment_once_in_first_use_order() {
    let mut table = SegmentTableBuilder::default();
    assert_eq!(table.index_of(&replica("b", 0)), 0);
    assert_eq!(table.index_of(&replica("a", 8)), 1);
    assert_eq!(table.index_of(&replica("b", 16)), 0);
    let segments = table.finish();
    assert_eq!(segments.len(), 2);
    assert_eq!(segments[0].segment_id, "b");
    assert_eq!(segments[1].owner_id, "owner-of-a");
}

#[test]
fn expanded_replica_is_the_classic_descriptor_and_bad_indexes_are_refused() {
    let mut table = SegmentTableBuilder::default();
    let original = replica("s1", 12288);
    let index = table.index_of(&original);
    let segments = table.finish();
    let back = expand_replica(
        &segments,
        CompactReplica(index, 12288, None),
        4096,
        ReplicaState::Complete,
    )
    .unwrap();
    assert_eq!(back, original);
    let err = expand_replica(
        &segments,
        CompactReplica(5, 0, None),
        1,
        ReplicaState::Complete,
    )
    .unwrap_err();
    assert_eq!(
        err,
        CompactError::SegmentIndex {
            index: 5,
            listed: 1
        }
    );
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
}

#[test]
fn unknown_versions_are_refused() {
    assert!(check_version(COMPACT_VERSION).is_ok());
    assert_eq!(check_version(2), Err(CompactError::Version(2)));
}

#[test]
fn get_reply_round_trips_and_items_are_positional() {
    let reply = CompactGetReply {
        v: COMPACT_VERSION,
        segments: vec![CompactSegment {
            segment_id: "seg".into(),
            owner_id: "own".into(),
            endpoint: None,
            transport: TransportKind::Embedded,
        }],
        items: vec![
            ItemResult::Ok(CompactGetItem(
                4096,
                7,
                DataType::Kvcache,
                Some(0xdead_beef),
                1_700_000_000_000,
                vec![CompactReplica(0, 8192, Some(vec![7; 80]))],
                None,
            )),
            ItemResult::Err {
                code: ErrorCode::NotFound,
                message: "no such key".into(),
            },
            ItemResult::Ok(CompactGetItem(
                3,
                9,
                DataType::Weight,
                None,
                5,
                vec![],
                Some(vec![1, 2, 3]),
            )),
        ],
    };
    let mut frame = Vec::new();
    encode_request(&mut frame, RpcOp::BatchGetCompact, 1, &reply).unwrap();
    let back: CompactGetReply = decode_body(&frame[HEADER_LEN..]).unwrap();
    assert_eq!(back, reply);
    // No per-item field names: the key "lease_until_ms" of the classic body never appears.
    let body = &frame[HEADER_LEN..];
    assert!(!body.windows(5).any(|w| w == b"lease"));
    let named_segments = body.windows(10).filter(|w| *w == b"segment_id").count();
    assert_eq!(
        named_segments, 1,
        "the segment table is the only named part"
    );
}

#[test]
fn put_start_bodies_round_trip() {
    let req = CompactPutStartRequest {
        v: COMPACT_VERSION,
        tenant: Some("acme".into()),
        domain: None,
        options: CompactPutOptions {
            replicas: 1,
            placement: Placement::LocalFirst,
            preferred_segment: Some("mine".into()),
            data_type: DataType::Kvcache,
            upsert: false,
            soft_pin_secs: None,
            hard_pin: false,
        },
        items: vec![
            CompactPutItem("k0".into(), 4096, None),
            CompactPutItem("k1".into(), 1, Some(3)),
        ],
    };
    let bytes = rmp_serde::to_vec_named(&req).unwrap();
    let back: CompactPutStartRequest = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(back, req);
    let reply = CompactPutStartReply {
        v: COMPACT_VERSION,
        segments: vec![],
        items: vec![ItemResult::Ok(CompactPutStarted(
            3,
            false,
            vec![CompactReplica(0, 0, None)],
            ReplicaState::Initialized,
        ))],
    };
    let bytes = rmp_serde::to_vec_named(&reply).unwrap();
    assert_eq!(
        rmp_serde::from_slice::<CompactPutStartReply>(&bytes).unwrap(),
        reply
    );
}

#[test]
fn keys_request_scopes_every_key() {
    let req = CompactKeysRequest {
        v: COMPACT_VERSION,
        tenant: Some("t".into()),
        domain: Some("d".into()),
        keys: vec!["a".into()],
    };
    assert_eq!(req.id("a"), ObjectId::scoped(Some("t"), Some("d"), "a"));
}

#[test]
fn compact_put_end_round_trips_and_acks_done_items_in_one_byte() {
    let req = CompactPutEndRequest {
        v: COMPACT_VERSION,
        tenant: Some("acme".into()),
        domain: None,
        items: vec![CompactPutEnd("k0".into(), 7), CompactPutEnd("k1".into(), 8)],
    };
    let mut frame = Vec::new();
    encode_request(&mut frame, RpcOp::BatchPutEndCompact, 1, &req).unwrap();
    let back: CompactPutEndRequest = decode_body(&frame[HEADER_LEN..]).unwrap();
    assert_eq!(back, req);
    assert_eq!(RpcOp::from_u8(19).unwrap(), RpcOp::BatchPutEndCompact);

    let done = CompactAckReply {
        v: COMPACT_VERSION,
        items: vec![None; 128],
    };
    let bytes = rmp_serde::to_vec_named(&done).unwrap();
    // {v: 1, items: [nil x 128]}: map header, "v", 1, "items", array16 header, 128 nils.
    assert_eq!(bytes.len(), 1 + 2 + 1 + 6 + 3 + 128);
    let failed = CompactAckReply {
        v: COMPACT_VERSION,
        items: vec![
            None,
            Some(CompactItemError(ErrorCode::NotFound, "gone".into())),
        ],
    };
    let back: CompactAckReply =
        rmp_serde::from_slice(&rmp_serde::to_vec_named(&failed).unwrap()).unwrap();
    assert_eq!(back, failed);
}

/// An answer from a server that predates grants has two-element replicas; a reader takes
/// them as carrying none.
#[test]
fn replicas_without_a_grant_element_decode() {
    #[derive(serde::Serialize)]
    struct Old(u32, u64);
    let bytes = rmp_serde::to_vec(&vec![Old(3, 4096)]).unwrap();
    let back: Vec<CompactReplica> = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(back, vec![CompactReplica(3, 4096, None)]);
    let with = CompactReplica(1, 2, Some(vec![5; 80]));
    let bytes = rmp_serde::to_vec(&with).unwrap();
    assert_eq!(
        rmp_serde::from_slice::<CompactReplica>(&bytes).unwrap(),
        with
    );
}

//! Codec edge cases: round trips, every decode error, and version handling.

use super::*;
use crate::record::{chain_digest, GENESIS_DIGEST};
use serde::Deserialize;

fn record(seq: u64, payload: Vec<u8>) -> Record {
    let stream = StreamId::new("segment_registry", "r1");
    let event = EventData {
        kind: "segment_mounted".into(),
        version: 3,
        payload,
    };
    let digest = chain_digest(&GENESIS_DIGEST, seq, 7, 1_700_000_000_000, &stream, &event);
    Record {
        seq,
        term: 7,
        timestamp_ms: 1_700_000_000_000,
        stream,
        event,
        digest,
    }
}

/// Re-encodes a body with a different shape, fixing up the prefix so only the body is judged.
fn frame_with_body(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crescent_checksum::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

#[test]
fn round_trip_preserves_every_field() {
    for payload in [vec![], vec![1, 2, 3], vec![0xAB; 70_000]] {
        let r = record(42, payload);
        let bytes = encode_record(&r);
        let (back, len) = decode_frame(&bytes).unwrap().unwrap();
        assert_eq!(len, bytes.len());
        assert_eq!(back, r);
        assert_eq!(decode_exact(&bytes).unwrap(), r);
    }
}

#[test]
fn prefix_holds_length_and_crc_of_body() {
    let r = record(1, b"hello".to_vec());
    let bytes = encode_record(&r);
    let len = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    assert_eq!(len, bytes.len() - FRAME_PREFIX_LEN);
    let crc = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    assert_eq!(crc, crescent_checksum::crc32c(&bytes[8..]));
    // compact array form: fixarray of 10 elements, then version 1
    assert_eq!(bytes[8], 0x9a);
    assert_eq!(bytes[9], FRAME_FORMAT_VERSION);
}

#[test]
fn batch_tracks_frames_and_truncates() {
    let mut batch = EncodedBatch::new();
    for seq in 1..=3 {
        batch.push(&record(seq, vec![seq as u8; 10]));
    }
    assert_eq!(batch.len(), 3);
    assert_eq!((batch.first_seq(), batch.last_seq()), (Some(1), Some(3)));
    let mut pos = 0;
    for (i, (seq, range)) in batch.frames.iter().enumerate() {
        assert_eq!(range.start, pos);
        let (r, len) = decode_frame(&batch.bytes[pos..]).unwrap().unwrap();
        assert_eq!(r.seq, *seq);
        assert_eq!(r.digest, batch.digests[i]);
        pos += len;
    }
    assert_eq!(pos, batch.bytes.len());
    batch.truncate(1);
    assert_eq!(batch.len(), 1);
    assert_eq!(batch.bytes.len(), batch.frames[0].1.end);
    assert_eq!(batch.digests.len(), 1);
    batch.clear();
    assert!(batch.is_empty() && batch.bytes.is_empty());
}

#[test]
fn peek_seq_matches_decoded_seq() {
    for seq in [
        0,
        1,
        127,
        128,
        255,
        256,
        65_535,
        65_536,
        u32::MAX as u64,
        u32::MAX as u64 + 1,
        u64::MAX,
    ] {
        let bytes = encode_record(&record(seq, vec![1]));
        assert_eq!(peek_seq(&bytes[FRAME_PREFIX_LEN..]), Some(seq), "seq {seq}");
    }
    assert_eq!(peek_seq(&[]), None);
    assert_eq!(peek_seq(&[0x9a]), None);
    assert_eq!(peek_seq(&[0x9a, 1, 0xcf, 1]), None);
}

#[test]
fn zero_length_word_and_short_buffer_are_end() {
    assert_eq!(decode_frame(&[]).unwrap(), None);
    assert_eq!(decode_frame(&[1, 0, 0]).unwrap(), None);
    assert_eq!(decode_frame(&[0; 64]).unwrap(), None);
    assert!(matches!(
        decode_exact(&[0; 8]),
        Err(FrameError::BadLength(0))
    ));
}

#[test]
fn torn_frame_is_reported() {
    let bytes = encode_record(&record(1, vec![9; 100]));
    for cut in [5, 8, 20, bytes.len() - 1] {
        match decode_frame(&bytes[..cut]) {
            Err(FrameError::Torn { needed, available }) => {
                assert_eq!(needed, bytes.len());
                assert_eq!(available, cut);
            }
            other => panic!("cut {cut}: {other:?}"),
        }
    }
}

#[test]
fn huge_length_is_bad_length() {
    let mut bytes = encode_record(&record(1, vec![]));
    bytes[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(decode_frame(&bytes), Err(FrameError::BadLength(u32::MAX)));
}

#[test]
fn any_flipped_body_byte_fails_crc() {
    let bytes = encode_record(&record(5, b"payload".to_vec()));
    for i in FRAME_PREFIX_LEN..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x01;
        assert!(
            matches!(decode_frame(&b), Err(FrameError::CrcMismatch { .. })),
            "byte {i}"
        );
    }
    let mut b = bytes.clone();
    b[5] ^= 0x80; // the CRC word itself
    assert!(matches!(
        decode_frame(&b),
        Err(FrameError::CrcMismatch { .. })
    ));
}

#[test]
fn trailing_bytes_rejected_by_decode_exact() {
    let mut bytes = encode_record(&record(1, vec![]));
    bytes.push(0);
    assert!(matches!(decode_exact(&bytes), Err(FrameError::BadBody(_))));
}

#[test]
fn newer_format_version_is_unsupported_not_garbage() {
    // A version-2 body with a different shape must still be reported as a version problem.
    let body = rmp_serde::to_vec(&(2u8, "some", "future", "layout")).unwrap();
    let frame = frame_with_body(&body);
    assert_eq!(decode_frame(&frame), Err(FrameError::UnsupportedVersion(2)));
    let body = rmp_serde::to_vec(&(200u8, 1u64)).unwrap(); // uint8 encoding of the version
    assert_eq!(
        decode_frame(&frame_with_body(&body)),
        Err(FrameError::UnsupportedVersion(200))
    );
}

#[test]
fn version_zero_and_non_array_bodies_are_bad_body() {
    let body = rmp_serde::to_vec(&(0u8, 1u64)).unwrap();
    assert!(matches!(
        decode_frame(&frame_with_body(&body)),
        Err(FrameError::BadBody(_))
    ));
    let body = rmp_serde::to_vec(&"just a string").unwrap();
    assert!(matches!(
        decode_frame(&frame_with_body(&body)),
        Err(FrameError::BadBody(_))
    ));
    // right version, wrong shape
    let body = rmp_serde::to_vec(&(1u8, "not a seq")).unwrap();
    assert!(matches!(
        decode_frame(&frame_with_body(&body)),
        Err(FrameError::BadBody(_))
    ));
}

#[test]
fn short_digest_is_rejected() {
    let body = rmp_serde::to_vec(&(
        1u8,
        1u64,
        1u64,
        0i64,
        "k",
        "i",
        "e",
        1u16,
        serde_bytes::Bytes::new(b"p"),
        serde_bytes::Bytes::new(&[0u8; 31]),
    ))
    .unwrap();
    assert_eq!(
        decode_frame(&frame_with_body(&body)),
        Err(FrameError::BadDigest(31))
    );
}

#[test]
fn frames_decode_back_to_back() {
    let mut buf = Vec::new();
    for seq in 1..=100 {
        buf.extend_from_slice(&encode_record(&record(seq, vec![seq as u8; seq as usize])));
    }
    buf.extend_from_slice(&[0; 16]);
    let mut pos = 0;
    let mut expect = 1;
    while let Some((r, len)) = decode_frame(&buf[pos..]).unwrap() {
        assert_eq!(r.seq, expect);
        expect += 1;
        pos += len;
    }
    assert_eq!(expect, 101);
}

proptest::proptest! {
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
        let _ = decode_frame(&data);
        let _ = decode_body(&data);
        let _ = decode_body_ref(&data);
    }

    #[test]
    fn round_trip_any_record(seq in 0u64.., term in 0u64.., ts in proptest::num::i64::ANY,
                             kind in ".{0,20}", id in ".{0,20}", ver in 0u16..,
                             payload in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let r = Record {
            seq, term, timestamp_ms: ts,
            stream: StreamId::new(kind.clone(), id),
            event: EventData { kind, version: ver, payload },
            digest: [seq as u8; 32],
        };
        let bytes = encode_record(&r);
        proptest::prop_assert_eq!(decode_exact(&bytes).unwrap(), r);
    }
}

/// The body read through serde, as the decoder did before the marker-level parser: kept to
/// cross-check the parser.
#[derive(Deserialize, Debug)]
struct FrameBodyView<'a> {
    format_version: u8,
    seq: u64,
    term: u64,
    timestamp_ms: i64,
    stream_kind: &'a str,
    stream_id: &'a str,
    event_kind: &'a str,
    event_version: u16,
    #[serde(borrow)]
    payload: &'a serde_bytes::Bytes,
    #[serde(borrow)]
    digest: &'a serde_bytes::Bytes,
}

proptest::proptest! {
    #[test]
    fn marker_parser_agrees_with_serde(seq in 0u64.., term in 0u64.., ts in proptest::num::i64::ANY,
                                      id in "[a-z0-9/%é]{0,40}", version in 0u16..,
                                      payload in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        let mut r = record(seq, payload);
        r.term = term;
        r.timestamp_ms = ts;
        r.stream.id = id;
        r.event.version = version;
        let frame = encode_record(&r);
        let body = &frame[FRAME_PREFIX_LEN..];
        let serde_view: FrameBodyView<'_> = rmp_serde::from_slice(body).unwrap();
        let parsed = decode_body_ref(body).unwrap();
        proptest::prop_assert_eq!(parsed.seq, serde_view.seq);
        proptest::prop_assert_eq!(parsed.term, serde_view.term);
        proptest::prop_assert_eq!(parsed.timestamp_ms, serde_view.timestamp_ms);
        proptest::prop_assert_eq!(parsed.stream_kind, serde_view.stream_kind);
        proptest::prop_assert_eq!(parsed.stream_id, serde_view.stream_id);
        proptest::prop_assert_eq!(parsed.event_kind, serde_view.event_kind);
        proptest::prop_assert_eq!(parsed.event_version, serde_view.event_version);
        proptest::prop_assert_eq!(parsed.payload, serde_view.payload.as_ref());
        proptest::prop_assert_eq!(&parsed.digest[..], serde_view.digest.as_ref());
        proptest::prop_assert_eq!(serde_view.format_version, FRAME_FORMAT_VERSION);
    }
}

#[test]
fn wrong_field_count_type_and_trailing_bytes_are_bad_body() {
    let r = record(7, vec![1, 2, 3]);
    let frame = encode_record(&r);
    let body = frame[FRAME_PREFIX_LEN..].to_vec();
    // 9 fields
    let mut short = body.clone();
    short[0] = 0x99;
    assert!(matches!(decode_body(&short), Err(FrameError::BadBody(_))));
    // seq as a string
    let mut typed = body.clone();
    typed[2] = 0xa1;
    assert!(matches!(decode_body(&typed), Err(FrameError::BadBody(_))));
    // trailing byte inside the body
    let mut trailing = body.clone();
    trailing.push(0);
    match decode_body(&trailing) {
        Err(FrameError::BadBody(m)) => assert!(m.contains("trailing"), "{m}"),
        other => panic!("expected BadBody, got {other:?}"),
    }
    // a u64 seq above i64::MAX survives
    let big = record(u64::MAX - 1, vec![]);
    assert_eq!(
        decode_exact(&encode_record(&big)).unwrap().seq,
        u64::MAX - 1
    );
}

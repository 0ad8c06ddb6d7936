//! Journal frames (journal/src/codec.rs), whole segment files as recovery scans them
//! (journal/src/file/scan.rs), and the replication stream (journal/src/replication/protocol.rs).

use std::path::PathBuf;
use std::sync::OnceLock;

use crescent_journal::codec;
use crescent_journal::file::scan::{JournalScan, ScanOptions};
use crescent_journal::file::segment::{segment_file_name, SegmentHeader};
use crescent_journal::record::{EventData, Record, StreamId, GENESIS_DIGEST};
use crescent_journal::replication::protocol::{self, Message};

use crate::selector;

fn record(seq: u64, payload: &[u8], prev: &[u8; 32]) -> Record {
    let mut r = Record {
        seq,
        term: 1,
        timestamp_ms: 1_700_000_000_000,
        stream: StreamId::new("segment_registry", "default"),
        event: EventData {
            kind: "segment_mounted".into(),
            version: 1,
            payload: payload.to_vec(),
        },
        digest: [0; 32],
    };
    r.digest = r.expected_digest(prev);
    r
}

/// Three chained records, encoded as frames.
fn frames() -> Vec<u8> {
    let mut out = Vec::new();
    let mut prev = GENESIS_DIGEST;
    for seq in 1..=3 {
        let r = record(seq, &[seq as u8; 5], &prev);
        prev = r.digest;
        out.extend_from_slice(&codec::encode_record(&r));
    }
    out
}

/// Selector bit 0: the rest is frames, decoded in sequence until the end or an error. Bit 1:
/// the rest is one frame body given a valid length and CRC first, so mutations reach the body
/// decoder past the checksum. Otherwise the rest is a bare body.
pub fn journal_frames(data: &[u8]) {
    let (sel, rest) = selector(data);
    if sel & 1 == 1 {
        let mut at = 0;
        while let Ok(Some((_, len))) = codec::decode_frame(&rest[at..]) {
            assert!(len > 0, "a frame of no bytes would loop forever");
            at += len;
        }
        let _ = codec::decode_exact(rest);
    } else if sel & 2 == 2 {
        let mut frame = Vec::with_capacity(rest.len() + 8);
        frame.extend_from_slice(&(rest.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crescent_checksum::crc32c(rest).to_le_bytes());
        frame.extend_from_slice(rest);
        let _ = codec::decode_frame(&frame);
    } else {
        let _ = codec::peek_seq(rest);
        if let Ok(r) = codec::decode_body_ref(rest) {
            let _ = r.to_record();
        }
    }
}

pub fn frame_seeds() -> Vec<Vec<u8>> {
    let all = frames();
    let one = codec::encode_record(&record(9, b"payload", &GENESIS_DIGEST));
    let mut body = vec![2u8];
    body.extend_from_slice(&one[8..]);
    vec![
        [&[1u8][..], &all].concat(),
        body,
        [&[0u8][..], &one[8..]].concat(),
    ]
}

/// A scratch directory holding one segment file, reused across runs of one process.
fn scan_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::var_os("CRESCENT_FUZZ_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix("crescent-fuzz-scan")
            .tempdir_in(base)
            .expect("scratch dir")
            .keep();
        dir
    })
}

/// The bytes are a segment file (`00000000000000000001.log`-style name for first seq 1);
/// the scan recovery runs lists its entries and summarises it.
pub fn journal_segment_scan(data: &[u8]) {
    let dir = scan_dir();
    let path = dir.join(segment_file_name(1));
    std::fs::write(&path, data).expect("writing the scratch segment");
    let Ok(scan) = JournalScan::open(dir) else {
        return;
    };
    let _ = scan.first_header();
    for entry in scan.entries(ScanOptions { verify_chain: true }) {
        if entry.is_err() {
            break;
        }
    }
    let _ = scan.summary();
}

pub fn segment_seeds() -> Vec<Vec<u8>> {
    let mut file = SegmentHeader::new(1, GENESIS_DIGEST, 0).encode().to_vec();
    file.extend_from_slice(&frames());
    let header_only = SegmentHeader::new(1, GENESIS_DIGEST, 0).encode().to_vec();
    vec![file, header_only]
}

/// The bytes are what a standby reads from the active: messages until the end or an error;
/// the frames of a Records message go through the frame decoder, as the follower does.
pub fn replication_message(data: &[u8]) {
    // The active reads a Hello first, within its own limit.
    let _ = protocol::read_message_within(&mut &data[..], protocol::MAX_HELLO);
    let mut input = data;
    while let Ok(msg) = protocol::read_message(&mut input) {
        match msg {
            Message::Records { frames, .. } => {
                journal_frames(&[[1u8].as_slice(), &frames].concat())
            }
            Message::Hello { last_digest, .. } => {
                let _ = protocol::digest_from(&last_digest);
            }
            _ => {}
        }
    }
}

pub fn replication_seeds() -> Vec<Vec<u8>> {
    let hello = Message::Hello {
        version: protocol::PROTOCOL_VERSION,
        node: "b".into(),
        last_seq: 7,
        last_term: 2,
        last_digest: vec![1; 32],
        capabilities: vec![("segment_mounted".into(), 2)],
        token: Some(protocol::Credential("a.peer.token".into())),
        reseed: false,
    };
    let mut stream = Vec::new();
    protocol::write_message(&mut stream, &hello).expect("encoding");
    protocol::encode_records_into(&mut stream, 1, 3, &frames());
    vec![stream]
}

//! The file format: round trip and every corruption case, each named by file and section.

use std::path::Path;

use crescent_snapshot::format::{decode, encode, FORMAT_VERSION};
use crescent_snapshot::{Position, Section, SectionSet, SectionSpec, SnapshotError};

fn pos() -> Position {
    Position {
        seq: 42,
        term: 3,
        digest: [7u8; 32],
    }
}

fn sections() -> Vec<Section> {
    vec![
        Section {
            name: "meta".into(),
            optional: false,
            schema: 1,
            body: b"meta-body".to_vec(),
        },
        Section {
            name: "segment_registry".into(),
            optional: true,
            schema: 2,
            body: (0..=255u8).cycle().take(5000).collect(),
        },
        Section {
            name: "empty".into(),
            optional: true,
            schema: 1,
            body: Vec::new(),
        },
    ]
}

fn specs() -> Vec<SectionSpec> {
    vec![
        SectionSpec {
            name: "meta".into(),
            schema: 1,
            optional: false,
        },
        SectionSpec {
            name: "segment_registry".into(),
            schema: 2,
            optional: true,
        },
        SectionSpec {
            name: "empty".into(),
            schema: 1,
            optional: true,
        },
    ]
}

const FILE: &str = "/data/snap-00000000000000000042.crsnap";

fn file() -> &'static Path {
    Path::new(FILE)
}

#[test]
fn round_trip() {
    let bytes = encode(&pos(), 1234, &sections()).unwrap();
    let (header, decoded) = decode(file(), &bytes).unwrap();
    assert_eq!(header.position, pos());
    assert_eq!(header.created_ms, 1234);
    assert_eq!(header.format_version, FORMAT_VERSION);
    assert_eq!(header.section_count, 3);
    assert_eq!(decoded, sections());
}

#[test]
fn flipped_byte_in_a_section_body_names_the_section() {
    let mut bytes = encode(&pos(), 1, &sections()).unwrap();
    let needle: Vec<u8> = (0..=255u8).cycle().skip(10).take(64).collect();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .unwrap();
    bytes[at] ^= 0x01;
    let err = decode(file(), &bytes).unwrap_err();
    match &err {
        SnapshotError::Corrupt {
            file: f,
            section,
            reason,
        } => {
            assert_eq!(f, file());
            assert_eq!(section, "segment_registry");
            assert!(reason.contains("SHA-256"), "{reason}");
        }
        other => panic!("unexpected {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(FILE) && msg.contains("segment_registry"),
        "{msg}"
    );
    assert!(err.is_damage());
}

#[test]
fn every_single_byte_flip_is_detected() {
    let bytes = encode(&pos(), 1, &sections()).unwrap();
    for i in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[i] ^= 0x10;
        let result = decode(file(), &damaged);
        assert!(result.is_err(), "flip at byte {i} went unnoticed");
    }
}

#[test]
fn truncation_anywhere_is_detected() {
    let bytes = encode(&pos(), 1, &sections()).unwrap();
    for len in 0..bytes.len() {
        let err = decode(file(), &bytes[..len]).unwrap_err();
        assert!(
            matches!(err, SnapshotError::Truncated { .. }),
            "cut at {len}: {err}"
        );
        assert!(err.to_string().contains(FILE));
    }
}

#[test]
fn newer_format_fails_closed_before_anything_else() {
    let mut bytes = encode(&pos(), 1, &sections()).unwrap();
    bytes[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let err = decode(file(), &bytes).unwrap_err();
    assert!(
        matches!(err, SnapshotError::UnsupportedFormat { found, supported, .. } if found == FORMAT_VERSION + 1 && supported == FORMAT_VERSION),
        "{err}"
    );
    assert!(!err.is_damage(), "a newer format must never be skipped");
    // Even a file too short for a v1 header is reported as the newer format.
    let err = decode(file(), &bytes[..12]).unwrap_err();
    assert!(
        matches!(err, SnapshotError::UnsupportedFormat { .. }),
        "{err}"
    );
}

#[test]
fn not_a_snapshot_file() {
    let err = decode(file(), b"hello world, this is not a snapshot at all").unwrap_err();
    assert!(
        matches!(err, SnapshotError::Corrupt { ref section, .. } if section == "header"),
        "{err}"
    );
}

#[test]
fn appended_garbage_is_detected() {
    let mut bytes = encode(&pos(), 1, &sections()).unwrap();
    bytes.extend_from_slice(b"junk");
    assert!(decode(file(), &bytes).is_err());
}

#[test]
fn bad_section_names_are_refused_on_write() {
    let mut dup = sections();
    dup.push(dup[0].clone());
    assert!(matches!(
        encode(&pos(), 1, &dup),
        Err(SnapshotError::InvalidSection(_, "duplicate"))
    ));
    let long = vec![Section {
        name: "x".repeat(256),
        optional: true,
        schema: 1,
        body: vec![],
    }];
    assert!(encode(&pos(), 1, &long).is_err());
    let empty = vec![Section {
        name: String::new(),
        optional: true,
        schema: 1,
        body: vec![],
    }];
    assert!(encode(&pos(), 1, &empty).is_err());
}

#[test]
fn unknown_optional_section_is_ignored() {
    let mut s = sections();
    s.push(Section {
        name: "from_the_future".into(),
        optional: true,
        schema: 9,
        body: b"?".to_vec(),
    });
    let set = SectionSet::validate(file(), s, &specs()).unwrap();
    assert!(set.get("from_the_future").is_none());
    assert_eq!(set.names().count(), 3);
}

#[test]
fn unknown_required_section_fails_closed() {
    let mut s = sections();
    s.push(Section {
        name: "quota_root".into(),
        optional: false,
        schema: 1,
        body: vec![],
    });
    let err = SectionSet::validate(file(), s, &specs()).unwrap_err();
    assert!(
        matches!(err, SnapshotError::UnknownRequiredSection { ref section, .. } if section == "quota_root"),
        "{err}"
    );
    assert!(err.to_string().contains(FILE));
}

#[test]
fn newer_section_schema_fails_closed() {
    let mut s = sections();
    s[1].schema = 3;
    let err = SectionSet::validate(file(), s, &specs()).unwrap_err();
    assert!(
        matches!(err, SnapshotError::UnsupportedSchema { ref section, found: 3, supported: 2, .. } if section == "segment_registry"),
        "{err}"
    );
    assert!(!err.is_damage());
}

#[test]
fn missing_sections() {
    // Missing optional: fine, the consumer starts that part empty.
    let s: Vec<Section> = sections()
        .into_iter()
        .filter(|s| s.name == "meta")
        .collect();
    let mut set = SectionSet::validate(file(), s, &specs()).unwrap();
    assert!(set.take("segment_registry").is_none());
    // Missing required: fail closed.
    let s: Vec<Section> = sections()
        .into_iter()
        .filter(|s| s.name != "meta")
        .collect();
    let err = SectionSet::validate(file(), s, &specs()).unwrap_err();
    assert!(
        matches!(err, SnapshotError::MissingRequiredSection { ref section, .. } if section == "meta"),
        "{err}"
    );
}

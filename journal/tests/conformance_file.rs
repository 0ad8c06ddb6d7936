//! The conformance suite against the file backend (64 KiB segments, so rotation and
//! whole-segment truncation are exercised).

use crescent_journal::file::{FileBackendFactory, FileOptions};

fn factory() -> FileBackendFactory {
    FileBackendFactory::in_tempdir(FileOptions {
        segment_bytes: 64 << 10,
        ..FileOptions::default()
    })
    .expect("tempdir")
}

crescent_journal::conformance_tests!(factory());

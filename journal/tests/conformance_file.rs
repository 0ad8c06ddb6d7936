//! The conformance suite against the file backend (64 KiB segments, so rotation and whole-segment truncation are exercised).

use crescent_journal::conformance;
use crescent_journal::file::{FileBackendFactory, FileOptions};

fn factory() -> FileBackendFactory {
    FileBackendFactory::in_tempdir(FileOptions {
        segment_bytes: 64 << 10,
        ..FileOptions::default()
    })
    .expect("tempdir")
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            conformance::$name(&factory());
        }
    )*};
}

cases!(
    ordering,
    chain_verifies,
    durability_across_reopen,
    torn_tail_tolerated,
    torn_tail_absolute,
    corrupt_middle_record,
    fencing,
    prefix_truncation,
    empty_journal,
    large_record,
    concurrent_appenders,
    fatal_write_failure,
);

#[test]
fn run_all_covers_every_case() {
    assert_eq!(conformance::CASES.len(), 12);
    conformance::run_all(&|| Box::new(factory()));
}

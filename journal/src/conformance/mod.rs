//! The backend conformance suite, shipped in the crate so that every backend (and any backend
//! written elsewhere) is held to the same contract through the [`crate::Journal`] front-end.
//!
//! Each case is a `pub fn(&dyn BackendFactory)` that panics on a violation, so a backend's test
//! file can run each as its own `#[test]`; [`run_all`] runs every case, each on a fresh factory.
//! Cases reopen the backend through the factory to simulate restarts and use the factory's
//! damage hooks ([`BackendFactory::tear_tail`], [`BackendFactory::corrupt_record`],
//! [`BackendFactory::inject_append_failure`]).
//!
//! File-backend factories should use small segments (e.g. 64 KiB) so that rotation and prefix
//! truncation of whole segments are exercised.

mod cases;
mod replicate;
mod visit;

pub use cases::*;
pub use replicate::*;
pub use visit::*;

use crate::backend::BackendFactory;
use crate::error::JournalError;
use crate::journal::{Journal, JournalOptions};
use crate::record::{Digest, EventData, NewRecord, Record, StreamId};
use crate::recovery::RecoveryMode;

/// Every case, in order, each on a fresh factory from `make`.
pub fn run_all(make: &dyn Fn() -> Box<dyn BackendFactory>) {
    for (name, case) in CASES {
        let factory = make();
        tracing::info!(case = name, backend = factory.name(), "conformance case");
        case(factory.as_ref());
    }
}

/// One conformance case: panics when the backend violates the contract.
pub type Case = fn(&dyn BackendFactory);

/// (name, case) of every conformance case.
pub const CASES: &[(&str, Case)] = &[
    ("ordering", ordering),
    ("chain_verifies", chain_verifies),
    ("durability_across_reopen", durability_across_reopen),
    ("torn_tail_tolerated", torn_tail_tolerated),
    ("torn_tail_absolute", torn_tail_absolute),
    ("corrupt_middle_record", corrupt_middle_record),
    ("fencing", fencing),
    ("prefix_truncation", prefix_truncation),
    ("empty_journal", empty_journal),
    ("large_record", large_record),
    ("concurrent_appenders", concurrent_appenders),
    ("fatal_write_failure", fatal_write_failure),
    ("visit_matches_read", visit_matches_read),
    ("replicated_append", replicated_append),
];

/// Options used by the cases (room for the 8 MiB record).
pub(crate) fn options(mode: RecoveryMode) -> JournalOptions {
    JournalOptions {
        recovery_mode: mode,
        max_record_bytes: 9 << 20,
        ..JournalOptions::default()
    }
}

pub(crate) fn open(f: &dyn BackendFactory, mode: RecoveryMode) -> Result<Journal, JournalError> {
    Journal::open(f.open()?, options(mode))
}

pub(crate) fn open_ok(f: &dyn BackendFactory) -> Journal {
    open(f, RecoveryMode::TolerateTailCorruption)
        .unwrap_or_else(|e| panic!("[{}] open failed: {e}", f.name()))
}

/// Shuts down and drops every handle, so the backend's files and locks are released.
pub(crate) fn close(j: Journal) {
    j.shutdown().expect("clean shutdown");
    drop(j);
}

pub(crate) fn record(stream: &str, n: u64, payload_len: usize) -> NewRecord {
    let mut payload = n.to_le_bytes().to_vec();
    payload.resize(payload_len.max(8), (n % 251) as u8);
    NewRecord {
        stream: StreamId::new("conformance", stream),
        event: EventData {
            kind: "tick".into(),
            version: 1,
            payload,
        },
        timestamp_ms: 1_700_000_000_000 + n as i64,
    }
}

/// Appends `count` records one submission each; returns the acknowledged seqs.
pub(crate) fn append_n(j: &Journal, term: u64, start: u64, count: u64) -> Vec<u64> {
    (start..start + count)
        .map(|n| {
            let ack = j
                .append_blocking(term, vec![record("s", n, 32)])
                .expect("append");
            assert_eq!(ack.first_seq, ack.last_seq);
            ack.last_seq
        })
        .collect()
}

pub(crate) fn read_all(j: &Journal, from: u64) -> Vec<Record> {
    j.read_from(from)
        .expect("read_from")
        .collect::<Result<Vec<_>, _>>()
        .expect("read records")
}

/// Asserts contiguous seqs and a verifying chain starting from `prev`.
pub(crate) fn assert_chain(records: &[Record], mut prev: Digest) {
    for w in records.windows(2) {
        assert_eq!(w[1].seq, w[0].seq + 1, "seqs must be contiguous");
    }
    for r in records {
        assert_eq!(
            r.expected_digest(&prev),
            r.digest,
            "chain digest of seq {} does not verify",
            r.seq
        );
        prev = r.digest;
    }
}

/// Expands to one `#[test]` per conformance case against the backend factory `$factory`
/// (an expression evaluated afresh for each case), plus a test that fails when [`CASES`] gains
/// a case this macro does not run. Use it in a backend's test file:
///
/// ```ignore
/// crescent_journal::conformance_tests!(crescent_journal::memory::MemoryFactory::new());
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_tests!(@cases $factory;
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
            visit_matches_read,
            replicated_append,
        );
    };
    (@cases $factory:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::$name(&$factory);
            }
        )*

        #[test]
        fn every_conformance_case_runs() {
            let ran: &[&str] = &[$(stringify!($name)),*];
            let all: Vec<&str> = $crate::conformance::CASES.iter().map(|(n, _)| *n).collect();
            assert_eq!(ran, all.as_slice(), "conformance_tests! must list every case in CASES");
        }
    };
}

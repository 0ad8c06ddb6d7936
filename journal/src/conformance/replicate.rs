//! A standby's journal: [`crate::Journal::submit_replicated`] against records from another.

use super::{close, open_ok, options, read_all, record};
use crate::backend::BackendFactory;
use crate::error::JournalError;
use crate::journal::Journal;
use crate::memory::MemoryFactory;
use crate::record::{Record, RecordRef};
use crate::recovery::RecoveryMode;

fn refs(records: &[Record]) -> Vec<RecordRef<'_>> {
    records.iter().map(Record::as_ref).collect()
}

/// Records copied from a source journal land with their own seq, term and digest (the two
/// journals become byte-for-byte the same history, also after a reopen); a gap, a lower term
/// or a record that does not extend the chain is refused and changes nothing; afterwards the
/// follower can append under a newer term and its chain continues.
pub fn replicated_append(f: &dyn BackendFactory) {
    let source_factory = MemoryFactory::new();
    let source = Journal::open(
        source_factory.open().unwrap(),
        options(RecoveryMode::default()),
    )
    .unwrap();
    for (term, n) in [(1, 20u64), (3, 30)] {
        source
            .append_blocking(
                term,
                (0..n).map(|i| record("r", i, 64 + i as usize)).collect(),
            )
            .unwrap();
    }
    let all = read_all(&source, 1);
    assert_eq!(all.len(), 50);

    let j = open_ok(f);
    j.submit_replicated(&refs(&all[..15]))
        .unwrap()
        .wait_blocking()
        .unwrap();
    // a gap
    assert!(matches!(
        j.submit_replicated(&refs(&all[16..20])),
        Err(JournalError::Gap {
            expected: 16,
            found: 17
        })
    ));
    // a record whose content was altered under its original digest
    let mut forged = all[15].clone();
    forged.event.payload[0] ^= 1;
    assert!(matches!(
        j.submit_replicated(&[forged.as_ref()]),
        Err(JournalError::Diverged { seq: 16, .. })
    ));
    // nothing above changed the journal
    assert_eq!(j.last_seq(), 15);
    j.submit_replicated(&refs(&all[15..]))
        .unwrap()
        .wait_blocking()
        .unwrap();
    assert_eq!(j.head(), source.head());
    assert_eq!(j.term(), 3);
    // a term lower than the previous record's is refused; the fencing floor does not apply
    // to replicated records (a standby catches up on older terms after learning a newer one)
    j.fence(5);
    let mut next_source = all[49].clone();
    next_source.seq = 52;
    assert!(matches!(
        j.submit_replicated(&[next_source.as_ref()]),
        Err(JournalError::Gap { .. })
    ));
    let mut lower = all[49].clone();
    lower.seq = 51;
    lower.term = 2;
    lower.digest = lower.expected_digest(&all[49].digest);
    assert!(matches!(
        j.submit_replicated(&[lower.as_ref()]),
        Err(JournalError::Fenced {
            term: 2,
            current: 3
        })
    ));
    assert_eq!(j.last_seq(), 50);
    close(j);

    let j = open_ok(f);
    assert_eq!(
        read_all(&j, 1),
        all,
        "[{}] same history after reopen",
        f.name()
    );
    let ack = j.append_blocking(6, vec![record("own", 1, 8)]).unwrap();
    assert_eq!(ack.first_seq, 51);
    let own = read_all(&j, 51);
    assert_eq!(own[0].expected_digest(&all[49].digest), own[0].digest);
    close(j);
    close(source);
}

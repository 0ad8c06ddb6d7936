//! The conformance cases (see the parent module).

use std::collections::HashMap;
use std::sync::Arc;

use super::{append_n, assert_chain, close, open, open_ok, options, read_all, record};
use crate::backend::BackendFactory;
use crate::error::JournalError;
use crate::journal::{Journal, JournalOptions};
use crate::record::GENESIS_DIGEST;
use crate::recovery::RecoveryMode;

/// Seqs are assigned contiguously from 1 in submission order, multi-record submissions get a
/// contiguous range, and reads return exactly what was appended, in order.
pub fn ordering(f: &dyn BackendFactory) {
    let j = open_ok(f);
    let mut expected = Vec::new();
    let mut next = 1;
    for batch in 1..=20u64 {
        let recs: Vec<_> = (0..batch)
            .map(|i| record("o", batch * 100 + i, i as usize * 7))
            .collect();
        let ticket = j.submit(1, recs.clone()).expect("submit");
        assert_eq!(
            (ticket.first_seq, ticket.last_seq),
            (next, next + batch - 1)
        );
        next += batch;
        expected.extend(recs);
        ticket.wait_blocking().expect("durable");
    }
    assert_eq!(j.last_seq(), next - 1);
    assert_eq!(j.durable().get(), next - 1);
    let got = read_all(&j, 1);
    assert_eq!(got.len(), expected.len());
    for (i, (r, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(r.seq, i as u64 + 1);
        assert_eq!(r.term, 1);
        assert_eq!(
            (&r.stream, &r.event, r.timestamp_ms),
            (&e.stream, &e.event, e.timestamp_ms)
        );
    }
    // ranges
    let mid: Vec<_> = j
        .read_range(50, 60)
        .unwrap()
        .map(|r| r.unwrap().seq)
        .collect();
    assert_eq!(mid, (50..=60).collect::<Vec<_>>());
    assert_eq!(
        j.read_from(next).unwrap().count(),
        0,
        "nothing past the end"
    );
    close(j);
}

/// Every record's digest chains from the previous one, starting at genesis, and `head()`
/// reports the last digest.
pub fn chain_verifies(f: &dyn BackendFactory) {
    let j = open_ok(f);
    append_n(&j, 2, 0, 50);
    j.append_blocking(2, (0..10).map(|i| record("c", i, 100)).collect())
        .unwrap();
    let all = read_all(&j, 1);
    assert_eq!(all.len(), 60);
    assert_chain(&all, GENESIS_DIGEST);
    let (seq, term, digest) = j.head();
    assert_eq!((seq, term, digest), (60, 2, all[59].digest));
    close(j);
}

/// After a restart the journal continues: same last seq, term and digest, new appends follow
/// on and the whole chain verifies.
pub fn durability_across_reopen(f: &dyn BackendFactory) {
    let j = open_ok(f);
    append_n(&j, 3, 0, 40);
    let head = j.head();
    close(j);
    let j = open_ok(f);
    assert_eq!(j.head(), head);
    assert_eq!(j.term(), 3);
    assert_eq!(j.durable().get(), 40);
    assert!(j.truncation().is_none());
    let seqs = append_n(&j, 3, 40, 10);
    assert_eq!(seqs, (41..=50).collect::<Vec<_>>());
    close(j);
    let j = open_ok(f);
    let all = read_all(&j, 1);
    assert_eq!(all.len(), 50);
    assert_chain(&all, GENESIS_DIGEST);
    close(j);
}

/// A torn last record is truncated under `TolerateTailCorruption`, reported, and appends carry
/// on from the last intact record.
pub fn torn_tail_tolerated(f: &dyn BackendFactory) {
    let j = open_ok(f);
    append_n(&j, 1, 0, 10);
    let digest9 = read_all(&j, 9)[0].digest;
    close(j);
    f.tear_tail();
    let j = open(f, RecoveryMode::TolerateTailCorruption).expect("tolerant open");
    let report = j.truncation().expect("a truncation report");
    assert_eq!(report.last_good_seq, 9);
    assert!(report.dropped_bytes > 0);
    assert_eq!(j.head(), (9, 1, digest9));
    assert_eq!(read_all(&j, 1).len(), 9);
    assert_eq!(append_n(&j, 1, 100, 3), vec![10, 11, 12]);
    close(j);
    let j = open_ok(f);
    assert!(j.truncation().is_none(), "the truncation is durable");
    let all = read_all(&j, 1);
    assert_eq!(all.len(), 12);
    assert_chain(&all, GENESIS_DIGEST);
    close(j);
}

/// A torn last record makes `AbsoluteConsistency` refuse to open, changing nothing.
pub fn torn_tail_absolute(f: &dyn BackendFactory) {
    let j = open_ok(f);
    append_n(&j, 1, 0, 10);
    close(j);
    f.tear_tail();
    for _ in 0..2 {
        match open(f, RecoveryMode::AbsoluteConsistency) {
            Err(JournalError::TailCorruption { last_good_seq, .. }) => assert_eq!(last_good_seq, 9),
            Err(e) => panic!("[{}] expected TailCorruption, got {e}", f.name()),
            Ok(_) => panic!("[{}] absolute consistency opened a torn journal", f.name()),
        }
    }
    // nothing was modified: a tolerant open still finds (and cuts) the same tail
    let j = open(f, RecoveryMode::TolerateTailCorruption).unwrap();
    assert_eq!(j.truncation().expect("report").last_good_seq, 9);
    close(j);
}

/// A damaged record followed by intact ones is corruption of acknowledged data: refused in
/// every mode, naming its seq, and nothing is modified.
pub fn corrupt_middle_record(f: &dyn BackendFactory) {
    let j = open_ok(f);
    append_n(&j, 1, 0, 20);
    close(j);
    f.corrupt_record(10);
    for mode in [
        RecoveryMode::TolerateTailCorruption,
        RecoveryMode::AbsoluteConsistency,
        RecoveryMode::TolerateTailCorruption,
    ] {
        match open(f, mode) {
            Err(JournalError::Corrupt { seq, .. }) => {
                assert_eq!(seq, 10, "[{}] {mode:?}", f.name())
            }
            Err(e) => panic!("[{}] {mode:?}: expected Corrupt at 10, got {e}", f.name()),
            Ok(_) => panic!(
                "[{}] {mode:?}: opened a journal with a corrupt middle record",
                f.name()
            ),
        }
    }
}

/// Lower terms are refused; a higher term raises the floor, also across a restart.
pub fn fencing(f: &dyn BackendFactory) {
    let j = open_ok(f);
    append_n(&j, 5, 0, 3);
    match j.submit(4, vec![record("f", 0, 8)]) {
        Err(JournalError::Fenced {
            term: 4,
            current: 5,
        }) => {}
        other => panic!("[{}] expected Fenced, got {other:?}", f.name()),
    }
    assert_eq!(j.last_seq(), 3, "a fenced submit assigns no seq");
    append_n(&j, 7, 10, 1);
    assert_eq!(j.term(), 7);
    assert!(matches!(
        j.submit(5, vec![record("f", 1, 8)]),
        Err(JournalError::Fenced { .. })
    ));
    j.fence(9);
    assert_eq!(j.term(), 9);
    assert!(matches!(
        j.submit(8, vec![record("f", 2, 8)]),
        Err(JournalError::Fenced { current: 9, .. })
    ));
    let err = j.submit(8, vec![record("f", 2, 8)]).unwrap_err();
    assert_eq!(err.class(), crate::error::ErrorClass::User);
    close(j);
    let j = open_ok(f);
    assert_eq!(
        j.term(),
        7,
        "the floor after restart is the highest stored term"
    );
    assert!(matches!(
        j.submit(6, vec![record("f", 3, 8)]),
        Err(JournalError::Fenced { .. })
    ));
    let all = read_all(&j, 1);
    assert_eq!(
        all.iter().map(|r| r.term).collect::<Vec<_>>(),
        vec![5, 5, 5, 7]
    );
    close(j);
}

/// Prefix truncation: reads below the cut fail with `OutOfRange`, the rest stays readable and
/// chained, and a reopen keeps the head and continues the chain.
pub fn prefix_truncation(f: &dyn BackendFactory) {
    let j = open_ok(f);
    for chunk in 0..30 {
        j.append_blocking(
            1,
            (0..20).map(|i| record("t", chunk * 20 + i, 400)).collect(),
        )
        .unwrap();
    }
    assert_eq!(j.last_seq(), 600);
    assert!(matches!(
        j.truncate_prefix(700),
        Err(JournalError::OutOfRange { .. })
    ));
    j.truncate_prefix(300).expect("truncate");
    assert_eq!(j.first_seq(), 300);
    assert!(matches!(
        j.read_from(299),
        Err(JournalError::OutOfRange { seq: 299, .. })
    ));
    assert!(matches!(
        j.read_from(1),
        Err(JournalError::OutOfRange { .. })
    ));
    let tail = read_all(&j, 300);
    assert_eq!(tail.len(), 301);
    assert_chain(&tail[1..], tail[0].digest);
    j.truncate_prefix(100).expect("a lower cut is a no-op");
    assert_eq!(j.first_seq(), 300);
    let head = j.head();
    close(j);

    let j = open_ok(f);
    assert_eq!(j.head(), head);
    assert!(j.first_seq() <= 300, "records >= keep_from always stay");
    assert!(matches!(
        j.read_from(j.first_seq() - 1),
        Err(JournalError::OutOfRange { .. })
    ));
    let again = read_all(&j, 300);
    assert_eq!(again, tail);
    append_n(&j, 1, 1000, 5);
    // cut everything: the head (seq, term, digest) must survive for the chain to continue
    j.truncate_prefix(606).expect("truncate all");
    let head = j.head();
    close(j);
    let j = open_ok(f);
    assert_eq!(j.head(), head);
    let seqs = append_n(&j, 1, 2000, 2);
    assert_eq!(seqs, vec![606, 607]);
    let last = read_all(&j, 606);
    assert_eq!(last[0].expected_digest(&head.2), last[0].digest);
    close(j);
}

/// A journal that never held a record opens, reads nothing, reopens the same.
pub fn empty_journal(f: &dyn BackendFactory) {
    for _ in 0..2 {
        let j = open_ok(f);
        assert_eq!(j.head(), (0, 0, GENESIS_DIGEST));
        assert_eq!(j.first_seq(), 1);
        assert_eq!(j.durable().get(), 0);
        assert_eq!(j.read_from(1).unwrap().count(), 0);
        let t = j.submit(1, vec![]).expect("empty submit");
        assert_eq!(t.last_seq, 0);
        t.wait_blocking()
            .expect("an empty submit is durable at once");
        assert!(j.truncation().is_none());
        close(j);
    }
}

/// An 8 MiB record round-trips; one over the maximum is refused without consuming a seq.
pub fn large_record(f: &dyn BackendFactory) {
    let j = open_ok(f);
    append_n(&j, 1, 0, 2);
    let big = record("big", 7, 8 << 20);
    j.append_blocking(1, vec![big.clone()])
        .expect("8 MiB record");
    append_n(&j, 1, 10, 2);
    match j.submit(1, vec![record("big", 8, 10 << 20)]) {
        Err(JournalError::RecordTooLarge { max, .. }) => {
            assert_eq!(max, options(RecoveryMode::default()).max_record_bytes)
        }
        other => panic!("[{}] expected RecordTooLarge, got {other:?}", f.name()),
    }
    // just over the limit once encoded (payload under it, frame over it)
    let edge = record("big", 9, (9 << 20) - 8);
    assert!(matches!(
        j.submit(1, vec![edge]),
        Err(JournalError::RecordTooLarge { .. })
    ));
    assert_eq!(j.last_seq(), 5);
    append_n(&j, 1, 20, 1);
    close(j);
    let j = open_ok(f);
    let all = read_all(&j, 1);
    assert_eq!(all.len(), 6);
    assert_eq!(all[2].event, big.event);
    assert_chain(&all, GENESIS_DIGEST);
    close(j);
    // the default limit also applies
    let j = Journal::open(
        f.open().unwrap(),
        JournalOptions {
            max_record_bytes: 1 << 20,
            ..JournalOptions::default()
        },
    )
    .unwrap();
    assert!(matches!(
        j.submit(1, vec![record("big", 1, 2 << 20)]),
        Err(JournalError::RecordTooLarge { .. })
    ));
    close(j);
}

/// 8 threads x 500 submit+wait: seqs unique and contiguous, every ack durable when it
/// resolves, each thread's order preserved, and everything there after a restart.
pub fn concurrent_appenders(f: &dyn BackendFactory) {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 500;
    let j = Arc::new(open_ok(f));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let j = j.clone();
            std::thread::spawn(move || {
                let stream = format!("thread-{t}");
                (0..PER_THREAD)
                    .map(|i| {
                        let ack = j
                            .append_blocking(1, vec![record(&stream, i, 64)])
                            .expect("append");
                        assert!(
                            j.durable().get() >= ack.last_seq,
                            "acknowledged before durable"
                        );
                        ack.last_seq
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut seqs: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("appender"))
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=THREADS * PER_THREAD).collect::<Vec<_>>());
    let j = Arc::into_inner(j).expect("sole owner");
    close(j);
    let j = open_ok(f);
    let all = read_all(&j, 1);
    assert_eq!(all.len() as u64, THREADS * PER_THREAD);
    assert_chain(&all, GENESIS_DIGEST);
    let mut next: HashMap<String, u64> = HashMap::new();
    for r in &all {
        let n = u64::from_le_bytes(r.event.payload[..8].try_into().unwrap());
        let want = next.entry(r.stream.id.clone()).or_insert(0);
        assert_eq!(n, *want, "per-thread order broken in {}", r.stream.id);
        *want += 1;
    }
    close(j);
}

/// A failed durable write poisons the journal: the waiting append and every later one fail
/// with `Fatal`, nothing after the failure is acknowledged, and a restart recovers what was
/// durable. Skipped for backends without fault injection.
pub fn fatal_write_failure(f: &dyn BackendFactory) {
    let j = open_ok(f);
    append_n(&j, 1, 0, 5);
    if !f.inject_append_failure() {
        close(j);
        return;
    }
    let err = j.append_blocking(1, vec![record("x", 1, 8)]).unwrap_err();
    assert!(matches!(err, JournalError::Fatal(_)), "got {err}");
    assert_eq!(err.class(), crate::error::ErrorClass::Fatal);
    assert!(j.fault().is_some());
    assert!(matches!(
        j.submit(1, vec![record("x", 2, 8)]),
        Err(JournalError::Fatal(_))
    ));
    assert!(matches!(
        j.durable().wait_for_blocking(6),
        Err(JournalError::Fatal(_))
    ));
    assert_eq!(
        j.durable().get(),
        5,
        "nothing acknowledged after the failure"
    );
    assert_eq!(
        read_all(&j, 1).len(),
        5,
        "reads of durable records still work"
    );
    assert!(matches!(j.truncate_prefix(2), Err(JournalError::Fatal(_))));
    assert!(matches!(j.shutdown(), Err(JournalError::Fatal(_))));
    drop(j);
    let j = open_ok(f);
    assert_eq!(j.last_seq(), 5);
    assert_eq!(append_n(&j, 1, 10, 1), vec![6]);
    assert_chain(&read_all(&j, 1), GENESIS_DIGEST);
    close(j);
}

//! The borrowed replay path ([`crate::Journal::visit_range`]) against the owned one.

use super::{append_n, assert_chain, close, open_ok, read_all, record};
use crate::backend::BackendFactory;
use crate::error::JournalError;
use crate::record::{Record, GENESIS_DIGEST};

fn visit_all(j: &crate::Journal, from: u64, upto: u64) -> Vec<Record> {
    let mut out = Vec::new();
    j.visit_range(from, upto, |r| {
        out.push(r.to_record());
        Ok::<_, JournalError>(())
    })
    .expect("visit_range");
    out
}

/// `visit_range` hands over exactly what `read_range` yields, for every start and end, across
/// frames bigger than any read buffer and (with small file segments) across segment rotation;
/// a visitor's error stops the visit and comes back unchanged; truncated starts are refused.
pub fn visit_matches_read(f: &dyn BackendFactory) {
    let j = open_ok(f);
    append_n(&j, 1, 0, 150);
    // 3 MiB frames straddle the file reader's 1 MiB buffer.
    j.append_blocking(
        1,
        vec![record("big", 1, 3 << 20), record("big", 2, 3 << 20)],
    )
    .expect("big records");
    j.append_blocking(2, (0..200).map(|i| record("m", i, 700)).collect())
        .expect("batch");
    let last = j.last_seq();
    assert_eq!(last, 352);
    let all = read_all(&j, 1);
    assert_chain(&all, GENESIS_DIGEST);
    for from in [1, 2, 150, 151, 152, 153, 352] {
        for upto in [from, 151, 300, last, u64::MAX] {
            if upto < from {
                continue;
            }
            let owned: Vec<Record> = j
                .read_range(from, upto)
                .expect("read_range")
                .collect::<Result<_, _>>()
                .expect("records");
            assert_eq!(
                visit_all(&j, from, upto),
                owned,
                "[{}] visit {from}..={upto}",
                f.name()
            );
        }
    }
    assert!(visit_all(&j, last + 1, u64::MAX).is_empty());

    #[derive(Debug, PartialEq)]
    enum Stop {
        At(u64),
        Journal(String),
    }
    impl From<JournalError> for Stop {
        fn from(e: JournalError) -> Self {
            Stop::Journal(e.to_string())
        }
    }
    let mut seen = 0;
    let stopped = j.visit_range(1, u64::MAX, |r| {
        seen += 1;
        if r.seq == 152 {
            Err(Stop::At(r.seq))
        } else {
            Ok(())
        }
    });
    assert_eq!(stopped, Err(Stop::At(152)));
    assert_eq!(
        seen,
        152,
        "[{}] the visit stops at the first error",
        f.name()
    );

    j.truncate_prefix(200).expect("truncate");
    let below = j.first_seq() - 1;
    assert!(matches!(
        j.visit_range(below, u64::MAX, |_| Ok::<_, JournalError>(())),
        Err(JournalError::OutOfRange { .. })
    ));
    assert_eq!(visit_all(&j, 200, u64::MAX), all[199..].to_vec());
    close(j);
}

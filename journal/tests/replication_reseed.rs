//! The reseed exchange on the replication listener (docs/ha.md, "Reseeding"): a proven
//! standby gets the offered file in bounded chunks at the position the active's journal
//! vouches for, also at the record just before a truncated journal's first one; a file whose
//! position the journal does not hold is refused `NO_SNAPSHOT`, and so is an unproven peer.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{journal, records};
use crescent_journal::replication::{
    refusal, CommitTracker, FollowerConfig, OfferedSnapshot, PeerCheck, PeerRefusal, PeerToken,
    ProtocolError, ReplicationSource, SnapshotReceiver, SnapshotSource, SourceConfig,
};
use crescent_journal::Journal;

/// What the source offers next (`None`: nothing).
type Offer = Arc<Mutex<Option<OfferedSnapshot>>>;

fn source(journal: &Journal, offer: Offer) -> ReplicationSource {
    ReplicationSource::start(
        journal.clone(),
        "127.0.0.1:0".parse().unwrap(),
        CommitTracker::start(journal.durable()),
        Arc::new(|| Some(3)),
        Arc::new(|_: &[(String, u16)]| Ok(())),
        SourceConfig {
            node: "a".into(),
            reseed_chunk_bytes: 1000,
            peer_check: Some(PeerCheck::new(|token, _| match token {
                Some("good") => Ok(()),
                _ => Err(PeerRefusal {
                    code: refusal::UNAUTHENTICATED,
                    message: "no valid peer credential".into(),
                }),
            })),
            snapshots: Some(SnapshotSource::new(move |_| {
                Ok(offer.lock().unwrap().clone())
            })),
            ..SourceConfig::default()
        },
    )
    .unwrap()
}

fn standby(token: &'static str) -> FollowerConfig {
    FollowerConfig {
        node: "b".into(),
        io_timeout: Duration::from_secs(3),
        token: Some(PeerToken::new(move || Some(token.to_string()))),
        ..FollowerConfig::default()
    }
}

/// The journal's (term, digest) at `seq`.
fn position(j: &Journal, seq: u64) -> (u64, [u8; 32]) {
    let mut out = None;
    j.visit_range(seq, seq, |r| {
        out = Some((r.term, *r.digest));
        Ok::<_, crescent_journal::JournalError>(())
    })
    .unwrap();
    out.unwrap()
}

fn receive_all(rx: &mut SnapshotReceiver) -> Vec<u8> {
    let mut got = Vec::new();
    while let Some(chunk) = rx.next_chunk().unwrap() {
        assert!(chunk.len() <= 1000, "a chunk of {}", chunk.len());
        got.extend_from_slice(&chunk);
    }
    got
}

#[test]
fn a_proven_standby_gets_the_file_in_chunks_at_the_position_the_journal_vouches_for() {
    let (d, files) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let j = journal(d.path());
    j.append_blocking(3, records(40, "r")).unwrap();
    let bytes: Vec<u8> = (0..12_345u32).map(|i| (i % 251) as u8).collect();
    let path = files.path().join("snap");
    std::fs::write(&path, &bytes).unwrap();
    let (term, digest) = position(&j, 30);
    let offer: Offer = Arc::new(Mutex::new(Some(OfferedSnapshot {
        path: path.clone(),
        seq: 30,
        term,
        digest,
    })));
    let src = source(&j, offer.clone());
    let addr = src.local_addr();

    let mut rx = SnapshotReceiver::request(addr, &standby("good")).unwrap();
    let o = rx.offer().clone();
    assert_eq!(
        (o.seq, o.snap_term, o.digest, o.bytes),
        (30, term, digest, 12_345)
    );
    assert_eq!(receive_all(&mut rx), bytes);

    // Not an unproven peer.
    let err = SnapshotReceiver::request(addr, &standby("forged")).unwrap_err();
    assert!(
        matches!(&err, ProtocolError::Refused { code, .. } if code == refusal::UNAUTHENTICATED),
        "{err}"
    );
    // Not a file whose position this journal does not hold.
    offer.lock().unwrap().as_mut().unwrap().digest = [0xAB; 32];
    let err = SnapshotReceiver::request(addr, &standby("good")).unwrap_err();
    assert!(
        matches!(&err, ProtocolError::Refused { code, .. } if code == refusal::NO_SNAPSHOT),
        "{err}"
    );
    *offer.lock().unwrap() = None;
    let err = SnapshotReceiver::request(addr, &standby("good")).unwrap_err();
    assert!(
        matches!(&err, ProtocolError::Refused { code, .. } if code == refusal::NO_SNAPSHOT),
        "{err}"
    );

    // Truncated right behind seq 30: the journal still vouches for it (its base).
    j.truncate_prefix(31).unwrap();
    assert_eq!(j.first_seq(), 31);
    assert_eq!(j.base(), Some((30, term, digest)));
    *offer.lock().unwrap() = Some(OfferedSnapshot {
        path,
        seq: 30,
        term,
        digest,
    });
    let mut rx = SnapshotReceiver::request(addr, &standby("good")).unwrap();
    assert_eq!(rx.offer().seq, 30);
    assert_eq!(receive_all(&mut rx), bytes);
    src.stop();
}

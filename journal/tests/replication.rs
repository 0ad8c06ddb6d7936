//! The replication protocol end to end on loopback: an active journal served to a standby's.

mod common;

use common::{journal, records};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crescent_journal::replication::{
    refusal, CapabilityCheck, CommitTracker, Follower, FollowerConfig, ReplicationSource,
    SourceConfig, SourceMetrics, TermSource,
};
use crescent_journal::{Journal, Record};

fn all(j: &Journal) -> Vec<Record> {
    j.read_from(1).unwrap().collect::<Result<_, _>>().unwrap()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Active {
    journal: Journal,
    tracker: CommitTracker,
    source: ReplicationSource,
    term: Arc<AtomicU64>,
}

fn active(dir: &std::path::Path, term: u64, check: CapabilityCheck) -> Active {
    let journal = journal(dir);
    let tracker = CommitTracker::start(journal.durable());
    let term_cell = Arc::new(AtomicU64::new(term));
    let t = term_cell.clone();
    let term_source: TermSource = Arc::new(move || match t.load(Ordering::Acquire) {
        0 => None,
        v => Some(v),
    });
    let source = ReplicationSource::start(
        journal.clone(),
        "127.0.0.1:0".parse().unwrap(),
        tracker.clone(),
        term_source,
        check,
        SourceConfig {
            node: "a".into(),
            heartbeat: Duration::from_millis(50),
            ..SourceConfig::default()
        },
    )
    .unwrap();
    Active {
        journal,
        tracker,
        source,
        term: term_cell,
    }
}

fn any_capabilities() -> CapabilityCheck {
    Arc::new(|_: &[(String, u16)]| Ok(()))
}

fn follower(j: &Journal, addr: SocketAddr, applied: Arc<AtomicU64>) -> Follower {
    Follower::start(
        j.clone(),
        Arc::new(move || Some(addr)),
        Arc::new(move |seq| {
            applied.fetch_max(seq, Ordering::AcqRel);
        }),
        FollowerConfig {
            node: "b".into(),
            capabilities: vec![("tick".into(), 1)],
            retry_max: Duration::from_millis(200),
            ..FollowerConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn sync_commit_waits_for_the_standby_which_ends_with_the_same_history() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = active(da.path(), 3, any_capabilities());
    a.journal.append_blocking(3, records(20, "early")).unwrap();
    a.tracker.name_standby(Some("b"));
    a.tracker.require_standby();
    let b_journal = journal(db.path());
    let applied = Arc::new(AtomicU64::new(0));
    let b = follower(&b_journal, a.source.local_addr(), applied.clone());
    // the catch-up of what was there before the standby connected
    wait_until("catch-up", || a.tracker.standby_caught_up());
    for round in 0..20 {
        let ack = a
            .journal
            .append_blocking(3, records(25, &format!("r{round}")))
            .unwrap();
        let commit = a.tracker.commit();
        assert!(commit.wait_for_blocking(ack.last_seq).unwrap() >= ack.last_seq);
        // committed means the standby has it durable
        assert!(b_journal.durable().get() >= ack.last_seq);
    }
    let last = a.journal.last_seq();
    wait_until("applied", || applied.load(Ordering::Acquire) == last);
    assert_eq!(all(&b_journal), all(&a.journal));
    assert_eq!(b_journal.head(), a.journal.head());
    let st = b.status();
    assert!(st.connected && st.caught_up(), "{st:?}");
    assert_eq!(st.term, 3);
    // The standby applies before its ack reaches the source: wait for the ack, not assume it.
    wait_until("acked", || a.source.status().acked_seq == last);

    // the standby goes away: commit is held until the HA layer releases it
    b.stop();
    let ack = a.journal.append_blocking(3, records(5, "alone")).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(a.tracker.commit().get() < ack.last_seq);
    assert!(a.tracker.held_for().is_some());
    a.tracker.release_standby();
    assert_eq!(a.tracker.commit().get(), ack.last_seq);

    // it comes back and catches up from where it was
    let b = follower(&b_journal, a.source.local_addr(), applied);
    a.tracker.require_standby();
    wait_until("catch-up again", || a.tracker.standby_caught_up());
    assert_eq!(all(&b_journal), all(&a.journal));

    // the active's term ends: the standby is told and stops following
    a.term.store(0, Ordering::Release);
    wait_until("not leader", || {
        b.status()
            .refused
            .is_some_and(|(code, _)| code == refusal::NOT_LEADER)
    });
    b.stop();
    a.source.stop();
}

#[test]
fn a_diverged_standby_is_refused_with_a_rewind_point_and_left_untouched() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = active(da.path(), 5, any_capabilities());
    a.journal.append_blocking(2, records(10, "shared")).unwrap();
    // the standby holds the same first 10 records, then 3 of its own (an old active's
    // uncommitted tail)
    let b_journal = journal(db.path());
    let shared: Vec<Record> = all(&a.journal);
    let refs: Vec<_> = shared.iter().map(Record::as_ref).collect();
    b_journal
        .submit_replicated(&refs)
        .unwrap()
        .wait_blocking()
        .unwrap();
    b_journal.append_blocking(2, records(3, "stray")).unwrap();
    a.journal.append_blocking(5, records(4, "new")).unwrap();
    let before = all(&b_journal);
    let b = follower(
        &b_journal,
        a.source.local_addr(),
        Arc::new(AtomicU64::new(0)),
    );
    wait_until("refused", || b.status().refused.is_some());
    let st = b.status();
    assert_eq!(st.refused.as_ref().unwrap().0, refusal::DIVERGED, "{st:?}");
    let rewind = st.rewind_to.expect("a rewind point");
    assert_eq!(rewind.seq, 10);
    assert_eq!(rewind.digest, shared[9].digest.to_vec());
    b.stop();
    assert_eq!(
        all(&b_journal),
        before,
        "a diverged standby's journal is not touched"
    );
    a.source.stop();
}

#[test]
fn incompatible_standbys_are_refused() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let check: CapabilityCheck = Arc::new(|caps: &[(String, u16)]| {
        if caps.iter().any(|(k, v)| k == "tick" && *v >= 2) {
            Ok(())
        } else {
            Err("the active writes tick v2".into())
        }
    });
    let a = active(da.path(), 1, check);
    let b_journal = journal(db.path());
    let b = follower(
        &b_journal,
        a.source.local_addr(),
        Arc::new(AtomicU64::new(0)),
    );
    wait_until("refused", || b.status().refused.is_some());
    let (code, message) = b.status().refused.unwrap();
    assert_eq!(code, refusal::INCOMPATIBLE);
    assert!(message.contains("tick v2"), "{message}");
    b.stop();
    a.source.stop();
}

/// A standby that stops reading must never stall the active: the journal writer's tap sends
/// only what the socket takes without waiting (docs/ha.md, "The sync commit path") and leaves
/// the rest to the session thread. Once the standby reads again it gets every record once, in
/// order, in whole messages.
#[test]
fn a_standby_that_stops_reading_never_stalls_the_active_and_then_gets_every_record_in_order() {
    use crescent_journal::codec::decode_frame;
    use crescent_journal::replication::protocol::{read_message, write_message};
    use crescent_journal::replication::{Message, PROTOCOL_VERSION};

    let dir = tempfile::tempdir().unwrap();
    let journal = journal(dir.path());
    let tracker = CommitTracker::start(journal.durable());
    let source = ReplicationSource::start(
        journal.clone(),
        "127.0.0.1:0".parse().unwrap(),
        tracker.clone(),
        Arc::new(|| Some(3)),
        any_capabilities(),
        SourceConfig {
            node: "a".into(),
            heartbeat: Duration::from_millis(50),
            // The silent standby sends no acks either: keep the session alive meanwhile.
            io_timeout: Duration::from_secs(60),
            ..SourceConfig::default()
        },
    )
    .unwrap();
    let mut standby = std::net::TcpStream::connect(source.local_addr()).unwrap();
    write_message(
        &mut standby,
        &Message::Hello {
            version: PROTOCOL_VERSION,
            node: "slow".into(),
            last_seq: 0,
            last_term: 0,
            last_digest: crescent_journal::GENESIS_DIGEST.to_vec(),
            capabilities: Vec::new(),
            token: None,
            reseed: false,
        },
    )
    .unwrap();
    assert!(matches!(
        read_message(&mut standby).unwrap(),
        Message::Welcome { from_seq: 1, .. }
    ));
    wait_until("the session is up", || source.status().connected);

    // 32 MiB of records, far more than the socket buffers hold, committed locally while the
    // standby reads nothing (commit is in Local mode: it does not wait for acks).
    let count = 128u64;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let appender = {
        let journal = journal.clone();
        std::thread::spawn(move || {
            for i in 0..count {
                let mut r = records(1, "big").remove(0);
                r.event.payload = vec![(i % 251) as u8; 256 << 10];
                journal.append_blocking(3, vec![r]).unwrap();
            }
            done_tx.send(()).unwrap();
        })
    };
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the active's writer stalled behind a standby that does not read");
    appender.join().unwrap();
    assert_eq!(journal.durable().get(), count);
    assert_eq!(
        tracker.acked(),
        0,
        "the silent standby acknowledged nothing"
    );

    let mut next = 1;
    standby
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    while next <= count {
        match read_message(&mut standby).unwrap() {
            Message::Records { term, frames, .. } => {
                assert_eq!(term, 3);
                let mut at = 0;
                while at < frames.len() {
                    let (record, len) = decode_frame(&frames[at..]).unwrap().expect("a frame");
                    assert_eq!(record.seq, next, "every record once, in order");
                    assert_eq!(record.event.payload.len(), 256 << 10);
                    next += 1;
                    at += len;
                }
            }
            Message::Heartbeat { .. } => {}
            other => panic!("unexpected message {other:?}"),
        }
    }
    source.stop();
}

/// A scripted standby: speaks the protocol by hand, so it can ack what it never received.
struct ScriptedStandby {
    stream: std::net::TcpStream,
}

impl ScriptedStandby {
    /// Connects as `node` with an empty journal and reads the Welcome.
    fn connect(addr: SocketAddr, node: &str) -> Self {
        use crescent_journal::replication::protocol::{read_message, write_message};
        use crescent_journal::replication::{Message, PROTOCOL_VERSION};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write_message(
            &mut stream,
            &Message::Hello {
                version: PROTOCOL_VERSION,
                node: node.into(),
                last_seq: 0,
                last_term: 0,
                last_digest: crescent_journal::GENESIS_DIGEST.to_vec(),
                capabilities: vec![("tick".into(), 1)],
                token: None,
                reseed: false,
            },
        )
        .unwrap();
        let welcome = read_message(&mut stream).unwrap();
        assert!(
            matches!(welcome, Message::Welcome { from_seq: 1, .. }),
            "{welcome:?}"
        );
        Self { stream }
    }

    /// Reads messages until records through `seq` arrived; returns the last seq received.
    fn receive_through(&mut self, seq: u64) -> u64 {
        use crescent_journal::codec::decode_frame;
        use crescent_journal::replication::protocol::read_message;
        use crescent_journal::replication::Message;
        let mut last = 0;
        while last < seq {
            if let Message::Records { frames, .. } = read_message(&mut self.stream).unwrap() {
                let mut at = 0;
                while at < frames.len() {
                    let (record, len) = decode_frame(&frames[at..]).unwrap().expect("a frame");
                    last = record.seq;
                    at += len;
                }
            }
        }
        last
    }

    fn ack(&mut self, seq: u64) {
        use crescent_journal::replication::protocol::write_message;
        use crescent_journal::replication::Message;
        write_message(&mut self.stream, &Message::Ack { durable_seq: seq }).unwrap();
    }

    /// Whether the active dropped the connection (reads reach its end within the timeout).
    fn dropped(&mut self) -> bool {
        use crescent_journal::replication::protocol::read_message;
        loop {
            match read_message(&mut self.stream) {
                Ok(_) => continue,
                Err(crescent_journal::replication::ProtocolError::Io(e)) => {
                    return !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    )
                }
                Err(_) => return true,
            }
        }
    }
}

/// An active whose source counts protocol errors in `registry`.
fn active_with_metrics(dir: &std::path::Path, registry: &prometheus::Registry) -> Active {
    let journal = journal(dir);
    let tracker = CommitTracker::start(journal.durable());
    let source = ReplicationSource::start(
        journal.clone(),
        "127.0.0.1:0".parse().unwrap(),
        tracker.clone(),
        Arc::new(|| Some(3)),
        any_capabilities(),
        SourceConfig {
            node: "a".into(),
            heartbeat: Duration::from_millis(50),
            metrics: Some(SourceMetrics::register(registry).unwrap()),
            ..SourceConfig::default()
        },
    )
    .unwrap();
    Active {
        journal,
        tracker,
        source,
        term: Arc::new(AtomicU64::new(3)),
    }
}

fn protocol_errors(registry: &prometheus::Registry, code: &str) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == "crescent_replication_protocol_errors_total")
        .flat_map(|f| f.get_metric())
        .filter(|m| m.get_label().iter().any(|l| l.value() == code))
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

#[test]
fn a_standby_acking_beyond_what_it_was_sent_is_dropped_and_moves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let registry = prometheus::Registry::new();
    let a = active_with_metrics(dir.path(), &registry);
    a.journal.append_blocking(3, records(10, "sent")).unwrap();
    let mut liar = ScriptedStandby::connect(a.source.local_addr(), "liar");
    a.tracker.name_standby(Some("liar"));
    a.tracker.require_standby();
    assert_eq!(liar.receive_through(10), 10);
    liar.ack(10);
    wait_until("the honest ack counts", || a.tracker.commit().get() == 10);
    // 20 more records are written; the liar acks 20 beyond what reached it.
    a.journal.append_blocking(3, records(20, "unsent")).unwrap();
    let sent = a.source.status().sent_seq;
    liar.ack(sent + 20);
    assert!(liar.dropped(), "the connection is dropped");
    wait_until("the session ends", || !a.source.status().connected);
    let st = a.source.status();
    assert_eq!(
        st.last_protocol_error.as_ref().map(|(c, _)| c.as_str()),
        Some("ACK_BEYOND_SENT"),
        "{st:?}"
    );
    assert_eq!(protocol_errors(&registry, "ACK_BEYOND_SENT"), 1);
    assert!(a.tracker.commit().get() <= sent, "the lie moved nothing");
    assert_eq!(a.tracker.acked(), 0, "no connection, nothing counted");
    assert!(a.tracker.held_for().is_some(), "sync commit still waits");
    a.source.stop();
}

#[test]
fn a_second_standby_counts_only_once_the_backend_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let registry = prometheus::Registry::new();
    let a = active_with_metrics(dir.path(), &registry);
    a.journal.append_blocking(3, records(5, "first")).unwrap();
    let mut first = ScriptedStandby::connect(a.source.local_addr(), "b");
    a.tracker.name_standby(Some("b"));
    a.tracker.require_standby();
    first.receive_through(5);
    first.ack(5);
    wait_until("b in sync", || a.tracker.standby_caught_up());
    // A different standby connects while "b" is the named one: it replaces b's session, is
    // sent everything and acks it honestly, yet commit does not move on its word.
    let mut second = ScriptedStandby::connect(a.source.local_addr(), "c");
    a.journal.append_blocking(3, records(15, "second")).unwrap();
    assert_eq!(second.receive_through(20), 20);
    second.ack(20);
    wait_until("c's ack arrived", || a.source.status().acked_seq == 20);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        a.tracker.commit().get(),
        5,
        "c is not named: held at b's ack"
    );
    assert!(!a.tracker.standby_caught_up());
    assert!(a.tracker.held_for().is_some());
    // The backend names c (the HA layer does this first, docs/ha.md): now its acks count.
    a.tracker.name_standby(Some("c"));
    assert_eq!(a.tracker.commit().get(), 20);
    assert!(a.tracker.standby_caught_up());
    assert_eq!(protocol_errors(&registry, "ACK_BEYOND_SENT"), 0);
    a.source.stop();
}

//! The replication listener against unproven peers (docs/ha.md "Which acks count",
//! docs/security.md "Replication peers"): credentials checked before a byte of journal goes
//! out, an old protocol version refused, garbage and half-sent Hellos closed at the handshake
//! timeout, the connection cap, and none of them ever displacing the standby that follows.

mod common;

use common::{journal, records};
use crescent_journal::Journal;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crescent_journal::replication::protocol::{read_message, write_message};
use crescent_journal::replication::{
    refusal, CommitTracker, Credential, Follower, FollowerConfig, Message, PeerCheck, PeerRefusal,
    PeerToken, ReplicationSource, SourceConfig, SourceMetrics, PROTOCOL_VERSION,
};
use prometheus::{IntCounterVec, Opts, Registry};

const GOOD: &str = "good-peer-token";

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Accepts only [`GOOD`]; a client token is denied, anything else unauthenticated.
fn token_check() -> PeerCheck {
    PeerCheck::new(|token, _peer| match token {
        Some(GOOD) => Ok(()),
        Some("client-token") => Err(PeerRefusal {
            code: refusal::PERMISSION_DENIED,
            message: "role client may not call replication".into(),
        }),
        _ => Err(PeerRefusal {
            code: refusal::UNAUTHENTICATED,
            message: "no valid peer credential".into(),
        }),
    })
}

struct Active {
    journal: Journal,
    tracker: CommitTracker,
    source: ReplicationSource,
    closed: IntCounterVec,
}

fn active(dir: &std::path::Path, max_connections: usize, check: Option<PeerCheck>) -> Active {
    let journal = journal(dir);
    let tracker = CommitTracker::start(journal.durable());
    let registry = Registry::new();
    let closed =
        IntCounterVec::new(Opts::new("closed", "closed"), &["listener", "reason"]).unwrap();
    let failures = IntCounterVec::new(Opts::new("failures", "failures"), &["listener"]).unwrap();
    let metrics = SourceMetrics::register(&registry)
        .unwrap()
        .with_listener_counters(closed.clone(), failures);
    let source = ReplicationSource::start(
        journal.clone(),
        "127.0.0.1:0".parse().unwrap(),
        tracker.clone(),
        Arc::new(|| Some(3)),
        Arc::new(|_: &[(String, u16)]| Ok(())),
        SourceConfig {
            node: "a".into(),
            heartbeat: Duration::from_millis(50),
            handshake_timeout: Duration::from_millis(400),
            max_connections,
            peer_check: check,
            metrics: Some(metrics),
            ..SourceConfig::default()
        },
    )
    .unwrap();
    Active {
        journal,
        tracker,
        source,
        closed,
    }
}

impl Active {
    fn closed(&self, reason: &str) -> u64 {
        self.closed
            .with_label_values(&["replication", reason])
            .get()
    }
}

fn follower(j: &Journal, addr: SocketAddr, token: Option<&'static str>) -> Follower {
    Follower::start(
        j.clone(),
        Arc::new(move || Some(addr)),
        Arc::new(|_| {}),
        FollowerConfig {
            node: "b".into(),
            capabilities: vec![("tick".into(), 1)],
            retry_max: Duration::from_millis(200),
            token: token.map(|t| PeerToken::new(move || Some(t.to_string()))),
            ..FollowerConfig::default()
        },
    )
    .unwrap()
}

fn hello(version: u16, token: Option<&str>) -> Message {
    Message::Hello {
        version,
        node: "intruder".into(),
        last_seq: 0,
        last_term: 0,
        last_digest: crescent_journal::GENESIS_DIGEST.to_vec(),
        capabilities: vec![("tick".into(), 1)],
        token: token.map(|t| Credential(t.into())),
        reseed: false,
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Everything the peer sent until it closed.
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

/// Says Hello and returns the one answer, after which the active has closed.
fn refused(addr: SocketAddr, hello: &Message) -> (String, String) {
    let mut s = connect(addr);
    write_message(&mut s, hello).unwrap();
    let answer = read_message(&mut s).unwrap();
    assert!(
        read_to_close(&mut s).is_empty(),
        "nothing after the refusal"
    );
    match answer {
        Message::Refused { code, message, .. } => (code, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn unproven_standbys_get_no_journal_and_never_displace_the_following_one() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = active(da.path(), 8, Some(token_check()));
    a.journal.append_blocking(3, records(10, "before")).unwrap();
    a.tracker.name_standby(Some("b"));
    a.tracker.require_standby();
    let addr = a.source.local_addr();

    // A standby without the credential is refused and follows nothing.
    let b_journal = journal(db.path());
    let unproven = follower(&b_journal, addr, None);
    wait_until("refused", || unproven.status().refused.is_some());
    let st = unproven.status();
    assert_eq!(
        st.refused.as_ref().unwrap().0,
        refusal::UNAUTHENTICATED,
        "{st:?}"
    );
    assert_eq!(b_journal.last_seq(), 0);
    unproven.stop();

    let b = follower(&b_journal, addr, Some(GOOD));
    wait_until("caught up", || a.tracker.standby_caught_up());
    let session = a.tracker.session().expect("b follows").id;

    let cases = [
        (hello(PROTOCOL_VERSION, None), refusal::UNAUTHENTICATED),
        (
            hello(PROTOCOL_VERSION, Some("forged")),
            refusal::UNAUTHENTICATED,
        ),
        (
            hello(PROTOCOL_VERSION, Some("client-token")),
            refusal::PERMISSION_DENIED,
        ),
        (hello(1, Some(GOOD)), refusal::INCOMPATIBLE),
        (
            hello(PROTOCOL_VERSION + 1, Some(GOOD)),
            refusal::INCOMPATIBLE,
        ),
    ];
    for (i, (h, code)) in cases.iter().enumerate() {
        let (got, message) = refused(addr, h);
        assert_eq!(&got, code, "case {i}: {message}");
        if *code == refusal::INCOMPATIBLE {
            assert!(message.contains("protocol version"), "{message}");
        }
        // Writes keep committing on b's acks, on b's session.
        let ack = a
            .journal
            .append_blocking(3, records(5, &format!("r{i}")))
            .unwrap();
        assert!(a.tracker.commit().wait_for_blocking(ack.last_seq).unwrap() >= ack.last_seq);
        assert_eq!(a.tracker.session().unwrap().id, session, "case {i}");
    }
    assert_eq!(a.closed("handshake"), 2, "the two wrong versions");
    assert!(b.status().connected);
    b.stop();
    a.source.stop();
}

#[test]
fn garbage_and_half_sent_hellos_are_closed_at_the_timeout_without_displacing_the_session() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = active(da.path(), 8, None);
    a.tracker.name_standby(Some("b"));
    a.tracker.require_standby();
    let addr = a.source.local_addr();
    let b_journal = journal(db.path());
    let b = follower(&b_journal, addr, None);
    wait_until("connected", || a.tracker.session().is_some());
    let session = a.tracker.session().unwrap().id;

    // Garbage: closed at once (it is no message); nothing comes back.
    let mut garbage = connect(addr);
    garbage.write_all(&[0xc1; 64]).unwrap();
    // A length claim past the Hello's limit: closed from the 4 bytes.
    let mut claim = connect(addr);
    claim.write_all(&(1u32 << 30).to_le_bytes()).unwrap();
    // A Hello cut in the middle, and a silent connection: closed at the handshake timeout.
    let mut bytes = Vec::new();
    write_message(&mut bytes, &hello(PROTOCOL_VERSION, None)).unwrap();
    let mut half = connect(addr);
    half.write_all(&bytes[..bytes.len() / 2]).unwrap();
    let started = Instant::now();
    let mut silent = connect(addr);
    for s in [&mut garbage, &mut claim] {
        assert!(read_to_close(s).is_empty());
    }
    for s in [&mut half, &mut silent] {
        assert!(read_to_close(s).is_empty());
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_secs(3),
        "closed after {took:?}"
    );
    for i in 0..5 {
        let ack = a
            .journal
            .append_blocking(3, records(5, &format!("r{i}")))
            .unwrap();
        assert!(a.tracker.commit().wait_for_blocking(ack.last_seq).unwrap() >= ack.last_seq);
    }
    assert_eq!(a.tracker.session().unwrap().id, session);
    wait_until("counted", || a.closed("handshake") == 4);
    b.stop();
    a.source.stop();
}

#[test]
fn connections_past_the_cap_are_closed_at_once_and_the_session_keeps_its_slot() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = active(da.path(), 3, None);
    let addr = a.source.local_addr();
    let b_journal = journal(db.path());
    let b = follower(&b_journal, addr, None);
    wait_until("connected", || a.tracker.session().is_some());
    let session = a.tracker.session().unwrap().id;
    // Two idle connections fill the cap of 3 with the session.
    let idle: Vec<TcpStream> = (0..2).map(|_| connect(addr)).collect();
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    let mut over = connect(addr);
    let _ = over.write_all(&[0]);
    assert!(read_to_close(&mut over).is_empty());
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "closed at once, not at the handshake timeout: {:?}",
        started.elapsed()
    );
    wait_until("counted", || a.closed("over_limit") == 1);
    // Once the idle ones time out, a new standby connection gets a slot and replaces b's.
    drop(idle);
    wait_until("slots free", || a.closed("handshake") == 2);
    b.stop();
    let again = follower(&b_journal, addr, None);
    wait_until("reconnected", || {
        a.tracker.session().is_some_and(|s| s.id != session)
    });
    let ack = a.journal.append_blocking(3, records(3, "after")).unwrap();
    wait_until("replicated", || b_journal.durable().get() >= ack.last_seq);
    again.stop();
    a.source.stop();
}

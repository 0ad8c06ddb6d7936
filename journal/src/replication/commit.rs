//! The commit watermark of an active with a standby: what actors wait on before replying.
//!
//! In `Local` mode commit follows the local durable watermark. In `Sync` mode it is
//! min(local durable, the named standby's acknowledged durable seq), so an acknowledged command
//! is on both disks and an in-sync standby that takes over has it. Switching modes is the HA
//! layer's decision, in a safe order (docs/ha.md): before dropping to `Local` it records in etcd
//! that the standby is out of sync; after switching back to `Sync` it waits until the standby
//! holds everything committed so far ([`CommitTracker::standby_caught_up`]) before recording it
//! in sync.
//!
//! Acks are never trusted as sent (docs/ha.md, "Which acks count"): each connection is a
//! [`StandbySession`] with its own sent and acked seqs, an ack above what was sent on that
//! connection is a protocol error, and only the session of the standby that the coordination
//! backend names ([`CommitTracker::name_standby`]) moves commit. A new connection starts from
//! its own verified position: nothing acknowledged on another connection carries over.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::protocol::ProtocolError;
use super::round_timing::{self, Stage};
use crate::watermark::Watermark;

/// How commit follows durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitMode {
    /// Commit = local durable (standalone, async replication, or a standby marked out of sync).
    Local,
    /// Commit = min(local durable, the named standby's acknowledged seq).
    Sync,
}

/// One standby connection, as the tracker counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandbySession {
    /// Unique per connection over the tracker's life.
    pub id: u64,
    /// The node name the standby gave in its Hello.
    pub node: String,
    /// Highest seq handed to this connection (its verified starting position at first).
    pub sent: u64,
    /// Highest seq this connection acknowledged as durable (its starting position at first).
    pub acked: u64,
}

#[derive(Debug)]
struct TrackerState {
    mode: CommitMode,
    /// The connected standby (a newer connection replaces it).
    session: Option<StandbySession>,
    next_session: u64,
    /// The standby the coordination backend names: only its session's acks count.
    named: Option<String>,
    /// Since when commit has been held back by the standby (Sync mode only).
    held_since: Option<Instant>,
}

impl TrackerState {
    /// The acked seq that counts toward commit: the named standby's, on its current connection.
    fn counted_acked(&self) -> u64 {
        match (&self.session, &self.named) {
            (Some(s), Some(named)) if &s.node == named => s.acked,
            _ => 0,
        }
    }
}
#[derive(Debug)]
struct Inner {
    durable: Watermark,
    commit: Watermark,
    state: Mutex<TrackerState>,
}

/// Cheap to clone; every clone drives the same commit watermark.
#[derive(Debug, Clone)]
pub struct CommitTracker {
    inner: Arc<Inner>,
}

impl CommitTracker {
    /// A tracker over a journal's durable watermark, starting in `Local` mode. A thread follows
    /// `durable` until it closes or fails (the commit watermark then closes or fails too).
    pub fn start(durable: Watermark) -> Self {
        let initial = durable.get();
        let commit = Watermark::new(initial);
        let inner = Arc::new(Inner {
            durable: durable.clone(),
            commit,
            state: Mutex::new(TrackerState {
                mode: CommitMode::Local,
                session: None,
                next_session: 1,
                named: None,
                held_since: None,
            }),
        });
        let follower = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("commit-tracker".into())
            .spawn(move || {
                // From the value the commit watermark started at, not a fresh read: an advance
                // between construction and this thread starting must not be skipped.
                let mut next = initial + 1;
                loop {
                    match durable.wait_for_blocking(next) {
                        Ok(d) => {
                            let Some(inner) = follower.upgrade() else {
                                return;
                            };
                            Self::recompute(&inner);
                            next = d + 1;
                        }
                        Err(e) => {
                            if let Some(inner) = follower.upgrade() {
                                match durable.fault() {
                                    Some(reason) => inner.commit.fail(reason),
                                    None => inner.commit.close(),
                                }
                                tracing::debug!(error = %e, "commit tracker stops");
                            }
                            return;
                        }
                    }
                }
            })
            .expect("spawn the commit tracker thread");
        Self { inner }
    }

    /// The watermark actors wait on.
    pub fn commit(&self) -> Watermark {
        self.inner.commit.clone()
    }

    pub fn mode(&self) -> CommitMode {
        self.lock().mode
    }

    /// The acknowledged durable seq that counts toward commit: the named standby's on its
    /// current connection (0 when no named standby is connected).
    pub fn acked(&self) -> u64 {
        self.lock().counted_acked()
    }

    /// How long commit has been held back waiting for the standby (`None` when it is not).
    pub fn held_for(&self) -> Option<Duration> {
        self.lock().held_since.map(|t| t.elapsed())
    }

    /// The connected standby's session, if any.
    pub fn session(&self) -> Option<StandbySession> {
        self.lock().session.clone()
    }

    /// The standby whose acks count (as named by the coordination backend).
    pub fn named(&self) -> Option<String> {
        self.lock().named.clone()
    }

    /// A standby `node` connected, verified to hold everything up to `position`. It replaces
    /// any earlier connection; its acks start from `position`, never from what another
    /// connection acknowledged. Returns the session id its sends and acks are counted under.
    pub fn connect(&self, node: &str, position: u64) -> u64 {
        let id = {
            let mut st = self.lock();
            let id = st.next_session;
            st.next_session += 1;
            st.session = Some(StandbySession {
                id,
                node: node.to_string(),
                sent: position,
                acked: position,
            });
            id
        };
        Self::recompute(&self.inner);
        id
    }

    /// Session `id` ended (a newer session is left alone).
    pub fn disconnect(&self, id: u64) {
        {
            let mut st = self.lock();
            if st.session.as_ref().is_some_and(|s| s.id == id) {
                st.session = None;
            }
        }
        Self::recompute(&self.inner);
    }

    /// Everything up to `seq` is handed to session `id`'s connection. Call it before the bytes
    /// go out, so an ack can never race ahead of it.
    pub fn on_sent(&self, id: u64, seq: u64) {
        let mut st = self.lock();
        if let Some(s) = st.session.as_mut().filter(|s| s.id == id) {
            s.sent = s.sent.max(seq);
        }
    }

    /// Session `id`'s standby acknowledged everything up to `seq` as durable on its side. An
    /// ack above what this connection was sent is a lie or a bug: refused with
    /// [`ProtocolError::AckBeyondSent`] (the caller drops the connection), nothing counted.
    /// Acks of a replaced session are ignored: `Ok(false)`.
    pub fn on_ack(&self, id: u64, seq: u64) -> Result<bool, ProtocolError> {
        {
            let mut st = self.lock();
            let Some(s) = st.session.as_mut().filter(|s| s.id == id) else {
                return Ok(false);
            };
            if seq > s.sent {
                return Err(ProtocolError::AckBeyondSent {
                    acked: seq,
                    sent: s.sent,
                });
            }
            s.acked = s.acked.max(seq);
        }
        Self::recompute(&self.inner);
        Ok(true)
    }

    /// The coordination backend now names `node` as the standby (in sync or not): from now on
    /// its acks, and only its, count toward commit. Call only after the marker write succeeded.
    pub fn name_standby(&self, node: Option<&str>) {
        self.lock().named = node.map(str::to_string);
        Self::recompute(&self.inner);
    }

    /// Commit waits for the named standby from now on (its acks on its current connection
    /// count).
    pub fn require_standby(&self) {
        self.lock().mode = CommitMode::Sync;
        Self::recompute(&self.inner);
    }

    /// Commit follows local durability alone from now on. Call only after etcd records that
    /// the standby is out of sync.
    pub fn release_standby(&self) {
        {
            let mut st = self.lock();
            st.mode = CommitMode::Local;
            st.held_since = None;
        }
        Self::recompute(&self.inner);
    }

    /// Ends this tracker's commit (a deposed active): waiters for seqs not yet committed get
    /// `Closed`, and nothing commits any more.
    pub fn close(&self) {
        self.inner.commit.close();
    }

    /// In `Sync` mode: whether the named standby, connected, holds everything durable here
    /// (so everything committed is on both sides).
    pub fn standby_caught_up(&self) -> bool {
        let st = self.lock();
        let named_connected =
            matches!((&st.session, &st.named), (Some(s), Some(n)) if &s.node == n);
        st.mode == CommitMode::Sync
            && named_connected
            && st.counted_acked() >= self.inner.durable.get()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TrackerState> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recompute(inner: &Inner) {
        let mut st = inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let durable = inner.durable.get();
        let target = match st.mode {
            CommitMode::Local => durable,
            CommitMode::Sync => durable.min(st.counted_acked()),
        };
        if st.mode == CommitMode::Sync && target < durable {
            st.held_since.get_or_insert_with(Instant::now);
        } else {
            st.held_since = None;
        }
        let sync = st.mode == CommitMode::Sync;
        drop(st);
        inner.commit.advance(target);
        if sync {
            round_timing::mark(Stage::Committed, target);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle() {
        std::thread::sleep(Duration::from_millis(30));
    }

    /// A tracker in Sync mode with standby `node` connected at 0, named, and sent `sent`.
    fn synced(durable: &Watermark, node: &str, sent: u64) -> (CommitTracker, u64) {
        let t = CommitTracker::start(durable.clone());
        let id = t.connect(node, 0);
        t.name_standby(Some(node));
        t.require_standby();
        t.on_sent(id, sent);
        (t, id)
    }

    #[test]
    fn local_mode_follows_durable() {
        let durable = Watermark::new(0);
        let t = CommitTracker::start(durable.clone());
        durable.advance(5);
        assert_eq!(t.commit().wait_for_blocking(5).unwrap(), 5);
        assert_eq!(t.held_for(), None);
    }

    #[test]
    fn sync_mode_waits_for_the_standby_and_release_lets_go() {
        let durable = Watermark::new(0);
        let (t, id) = synced(&durable, "b", 12);
        durable.advance(10);
        settle();
        assert_eq!(t.commit().get(), 0, "not acked by the standby yet");
        assert!(t.held_for().is_some());
        assert!(!t.standby_caught_up());
        t.on_ack(id, 4).unwrap();
        assert_eq!(t.commit().get(), 4);
        t.on_ack(id, 12).unwrap(); // the standby may be ahead of local durability
        assert_eq!(t.commit().get(), 10);
        assert!(t.standby_caught_up());
        assert_eq!(t.held_for(), None);
        durable.advance(20);
        let reached = t
            .commit()
            .wait_for_timeout(12, Duration::from_secs(10))
            .unwrap();
        assert_eq!(reached, Some(12));
        settle();
        assert_eq!(t.commit().get(), 12, "held at the standby's ack");
        t.release_standby();
        assert_eq!(t.commit().get(), 20);
        assert_eq!(t.mode(), CommitMode::Local);
        t.on_ack(id, 3).unwrap();
        assert_eq!(t.acked(), 12, "acks never go back");
    }

    #[test]
    fn an_ack_beyond_what_was_sent_is_refused_and_counts_for_nothing() {
        let durable = Watermark::new(0);
        let (t, id) = synced(&durable, "b", 5);
        durable.advance(30);
        t.on_ack(id, 5).unwrap();
        let err = t.on_ack(id, 25).unwrap_err();
        assert!(
            matches!(err, ProtocolError::AckBeyondSent { acked: 25, sent: 5 }),
            "{err}"
        );
        assert_eq!(err.code(), "ACK_BEYOND_SENT");
        settle();
        assert_eq!(t.commit().get(), 5, "commit stays at what was really sent");
        assert_eq!(t.acked(), 5);
        t.on_sent(id, 25);
        t.on_ack(id, 25).unwrap();
        assert_eq!(t.commit().get(), 25);
    }

    #[test]
    fn only_the_named_standby_moves_commit() {
        let durable = Watermark::new(0);
        let (t, a) = synced(&durable, "a", 10);
        durable.advance(20);
        t.on_ack(a, 10).unwrap();
        assert_eq!(t.commit().get(), 10);
        // A second standby connects while "a" is named (in sync): it replaces a's session,
        // but none of its acks count until the backend names it.
        let b = t.connect("b", 3);
        t.on_sent(b, 20);
        t.on_ack(b, 20).unwrap();
        settle();
        assert_eq!(
            t.commit().get(),
            10,
            "b is not named: its acks do not count"
        );
        assert_eq!(t.acked(), 0, "nothing counted from b");
        assert!(!t.standby_caught_up());
        assert!(t.held_for().is_some(), "sync commit waits meanwhile");
        assert!(
            !t.on_ack(a, 20).unwrap(),
            "the replaced connection's late ack: ignored"
        );
        assert_eq!(t.commit().get(), 10);
        // The marker now names b: its acks count, from what it acked on its own connection.
        t.name_standby(Some("b"));
        assert_eq!(t.commit().get(), 20);
        assert!(t.standby_caught_up());
    }

    #[test]
    fn acks_never_carry_over_to_another_connection() {
        let durable = Watermark::new(0);
        let (t, a) = synced(&durable, "a", 50);
        t.on_ack(a, 50).unwrap();
        durable.advance(60);
        settle();
        assert_eq!(t.commit().get(), 50);
        // "a" reconnects from a verified position below its old ack: it starts there.
        let a2 = t.connect("a", 40);
        assert_eq!(t.acked(), 40, "the old connection's 50 does not carry over");
        assert_eq!(t.session().unwrap().sent, 40);
        assert!(
            t.on_ack(a2, 45).is_err(),
            "nothing past 40 was sent on this connection"
        );
        t.disconnect(a2);
        assert_eq!(t.session(), None);
        assert_eq!(t.acked(), 0);
        assert!(!t.standby_caught_up());
        settle();
        assert_eq!(t.commit().get(), 50, "commit never goes back");
        // a disconnect of a replaced session leaves the new one alone
        let a3 = t.connect("a", 60);
        t.disconnect(a2);
        assert_eq!(t.session().map(|s| s.id), Some(a3));
        assert_eq!(t.commit().get(), 60);
    }

    #[test]
    fn a_failed_journal_fails_commit() {
        let durable = Watermark::new(0);
        let t = CommitTracker::start(durable.clone());
        durable.fail("disk gone");
        assert!(t.commit().wait_for_blocking(1).is_err());
    }
}

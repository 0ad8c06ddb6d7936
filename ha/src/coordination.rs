//! The coordination backend behind the elector: what etcd and Redis each provide so that one
//! election loop ([`crate::Elector`]) runs on either (docs/ha.md, "Coordination backends").
//!
//! A backend stores two records per cluster, the leader record (bound to a lease that expires
//! unless renewed) and the replication marker (persistent), and gives every win a **term**
//! strictly greater than every earlier one. Everything else (the local deadline, the renewal
//! schedule, the campaign rule, marker ordering) lives in the backend-independent elector.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::HaError;
use crate::records::ReplicationMarker;
use crate::role::LeaderInfo;

/// Where the coordination records live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinationEndpoint {
    /// etcd client URLs (`http://HOST:PORT`); the client balances over them.
    Etcd(Vec<String>),
    /// One Redis server, `redis://HOST:PORT[/DB]` (docs/ha.md, "Redis": a single point of
    /// failure with weaker promises than etcd).
    Redis(String),
}

impl CoordinationEndpoint {
    /// The backend's metric label: `etcd` or `redis` (a fixed set).
    pub fn backend(&self) -> &'static str {
        match self {
            CoordinationEndpoint::Etcd(_) => crate::etcd_backend::EtcdCoordination::NAME,
            CoordinationEndpoint::Redis(_) => crate::redis_backend::RedisCoordination::NAME,
        }
    }
}

/// The leader slot as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderSlot {
    /// No leader record: the slot is free.
    Free,
    /// A winner holds the slot but has not finished taking office (etcd's two-step campaign):
    /// not serving yet.
    TakingOffice,
    /// A leader serves under `info.term`.
    Serving(LeaderInfo),
}

/// Leader slot and marker, read together.
#[derive(Debug)]
pub struct ClusterView<M, C> {
    /// The leader slot, or why its record cannot be read.
    pub leader: Result<LeaderSlot, HaError>,
    /// The marker (`None`: no marker) with the version a campaign compares, so that a marker
    /// written between this read and the campaign voids the campaign.
    pub marker: Option<(M, Result<ReplicationMarker, HaError>)>,
    /// Where [`Coordination::wait_for_change`] starts looking for changes.
    pub cursor: C,
}

/// A won campaign: the new term and the lease that holds the leader record.
#[derive(Debug)]
pub struct Won<L> {
    pub term: u64,
    pub lease: L,
    /// When the request that granted the lease was sent: the backend expires the lease no
    /// earlier than `sent_at + ttl`.
    pub sent_at: Instant,
    pub ttl: Duration,
    /// How long after `sent_at` the winner must wait (renewing) before it takes office and
    /// serves: zero, unless the backend cannot rule out that a leader of its earlier state
    /// still holds a fence (a Redis that lost its data). Meanwhile readers see the slot as
    /// taken but not serving.
    pub serve_after: Duration,
}

/// The answer to one renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Renewed by a request sent at `sent_at`: the lease lives at least until `sent_at + ttl`.
    Renewed { sent_at: Instant, ttl: Duration },
    /// The lease (and with it the leader record) is gone.
    LeaseGone,
    /// The leader record is missing or belongs to another term.
    KeyLost,
}

/// What a candidate brings to a campaign.
#[derive(Debug, Clone)]
pub struct Bid<'a> {
    pub node: &'a str,
    pub advertise: &'a str,
    pub ttl: Duration,
    /// The highest term this node knows of (its own terms, leaders and markers it read, its
    /// journal's term). A backend that can lose its counter (Redis without persistence) starts
    /// the next term above it; etcd's revisions need no help.
    pub term_floor: u64,
}

/// The operations the elector needs from a coordination store. Each request is bounded by the
/// backend's request timeout; errors are [`HaError`]s (`Etcd`, `Redis`, `Timeout`).
pub trait Coordination: Send + Sync + 'static {
    /// The metric label (`etcd`, `redis`).
    const NAME: &'static str;
    /// What a leader holds its record with (an etcd lease, the Redis record's value).
    type Lease: Send;
    /// What a campaign compares the marker with (etcd mod_revision, the Redis value).
    type MarkerVersion: Send + Sync;
    /// Where a watch for changes starts (etcd revision, the Redis values read).
    type Cursor: Send + Sync;

    /// Reads the leader slot and the marker at one point in time.
    fn read_state(
        &self,
    ) -> impl Future<Output = Result<ClusterView<Self::MarkerVersion, Self::Cursor>, HaError>> + Send;

    /// Returns once a record of the cluster may have changed after `cursor`, or after
    /// `at_most`. Never fails: a broken watch just ends the wait early or late.
    fn wait_for_change(
        &self,
        cursor: &Self::Cursor,
        at_most: Duration,
    ) -> impl Future<Output = ()> + Send;

    /// Takes the leader slot if it is free and the marker is still `marker` (`None`: still
    /// absent), under a term
    /// greater than every earlier term and than `bid.term_floor`; writes the claim marker
    /// (`standby: null`) under that term. `Ok(None)`: lost the race or the marker changed.
    fn campaign(
        &self,
        bid: &Bid<'_>,
        marker: Option<&Self::MarkerVersion>,
    ) -> impl Future<Output = Result<Option<Won<Self::Lease>>, HaError>> + Send;

    /// Renews the lease of `term` and checks that the leader record is still ours.
    fn renew(
        &self,
        term: u64,
        lease: &mut Self::Lease,
    ) -> impl Future<Output = Result<Renewal, HaError>> + Send;

    /// After a win with a non-zero [`Won::serve_after`], once that time has passed: publishes
    /// the record as serving (until then readers see [`LeaderSlot::TakingOffice`]).
    /// `Ok(false)`: the record is no longer ours.
    fn take_office(
        &self,
        _term: u64,
        _lease: &mut Self::Lease,
    ) -> impl Future<Output = Result<bool, HaError>> + Send {
        async { Ok(true) }
    }

    /// Called after a renewal failed or was abandoned: drop whatever connection state the
    /// backend keeps for renewals so the next attempt starts fresh.
    fn renewal_failed(&self, _lease: &mut Self::Lease) {}

    /// Best effort: gives the leader slot up at once (only if still ours) so a peer need not
    /// wait for the lease to expire.
    fn release(&self, term: u64, lease: Self::Lease) -> impl Future<Output = ()> + Send;

    /// The marker as stored (`None`: no marker).
    fn read_marker(
        &self,
    ) -> impl Future<Output = Result<Option<ReplicationMarker>, HaError>> + Send;

    /// Writes `marker` as the leader of `term`; [`HaError::Fenced`] (nothing written) unless
    /// the leader record still carries `term`.
    fn write_marker(
        &self,
        term: u64,
        marker: &ReplicationMarker,
    ) -> impl Future<Output = Result<(), HaError>> + Send;
}

/// The terms a view shows (leader and marker), for a candidate's term floor.
pub(crate) fn terms_seen<M, C>(view: &ClusterView<M, C>) -> u64 {
    let leader = match &view.leader {
        Ok(LeaderSlot::Serving(info)) => info.term,
        _ => 0,
    };
    let marker = match &view.marker {
        Some((_, Ok(m))) => m.term,
        _ => 0,
    };
    leader.max(marker)
}

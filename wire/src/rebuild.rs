//! Client-driven metadata rebuild (rebuild wire version 1; docs/rebuild.md).
//!
//! After a restart or failover crescentd's object directory is empty: per-object metadata is
//! not journaled. Every storage owner replays the committed replicas of its own segments
//! ([`RebuildReplayRequest`], in bounded batches) and then signals completion
//! ([`RebuildCompleteRequest`]). Until every expected owner has completed, or the degraded
//! timeout has passed, crescentd answers object operations with UNAVAILABLE and gate state
//! REBUILDING ([`GateStatus`], also in `/healthz` and `crescent status`).
//!
//! # Put ids carry the incarnation
//!
//! A put id is `incarnation << 40 | seq` ([`compose_put_id`]). crescentd starts every run
//! (restart, promotion) under a strictly greater incarnation, so every put id it issues is above
//! every put id of an earlier run, whatever order replays arrive in: that is the version fence
//! that keeps a reordered or retried replay from resurrecting a key whose address was reused.

use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ErrorCode};
use crate::store::{DataType, ObjectId};

/// The rebuild wire version this build speaks (the `version` field of every body here).
pub const REBUILD_WIRE_VERSION: u32 = 1;
/// Most entries in one replay or notification batch.
pub const MAX_REPLAY_BATCH: usize = 4096;
/// Bits of a put id that count puts within one incarnation.
pub const PUT_SEQ_BITS: u32 = 40;
/// Largest incarnation a put id can carry (24 bits).
pub const MAX_PUT_INCARNATION: u32 = (1 << (64 - PUT_SEQ_BITS)) - 1;
/// Mask of the per-incarnation sequence.
pub const PUT_SEQ_MASK: u64 = (1 << PUT_SEQ_BITS) - 1;

/// The put id of the `seq`-th put of `incarnation`; `None` when either is out of range.
pub fn compose_put_id(incarnation: u32, seq: u64) -> Option<u64> {
    (incarnation <= MAX_PUT_INCARNATION && seq <= PUT_SEQ_MASK)
        .then(|| (u64::from(incarnation) << PUT_SEQ_BITS) | seq)
}

/// The incarnation a put id was issued under.
pub fn put_id_incarnation(put_id: u64) -> u32 {
    (put_id >> PUT_SEQ_BITS) as u32
}

fn version() -> u32 {
    REBUILD_WIRE_VERSION
}

/// Checks a body's rebuild wire version.
pub fn check_version(got: u32) -> Result<(), ApiError> {
    if got == REBUILD_WIRE_VERSION {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "rebuild wire version {got} is not spoken here (this side speaks {REBUILD_WIRE_VERSION})"
        )))
    }
}

/// One committed replica, as its owner reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReplayEntry {
    pub id: ObjectId,
    /// The put that wrote it: the version fence (carries the writer's incarnation).
    pub put_id: u64,
    pub segment_id: String,
    pub offset: u64,
    /// The object's size in bytes.
    pub length: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<u32>,
    #[serde(default)]
    pub data_type: DataType,
    /// In an owner notice: the write grant crescentd issued for this range with the put
    /// (docs/security.md, "The data plane"), which an owner that requires grants checks
    /// before recording the entry. Absent in replays and from open servers.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::cold::opt_bytes"
    )]
    pub grant: Option<Vec<u8>>,
}

/// What the directory did with one replayed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayOutcome {
    /// Merged: the object (or this replica of it) is served again.
    Replayed,
    /// Already known exactly so (a retried or repeated entry): nothing changed.
    Duplicate,
    /// Fenced: the directory holds a newer version of the key, or a newer put holds the
    /// address. Dropping the entry on the owner's side is safe.
    Stale,
    /// Not eligible (a segment that is not the owner's or not mounted, a range outside it, a
    /// malformed entry, a put of the current incarnation). Other entries are unaffected.
    Rejected,
}

impl ReplayOutcome {
    pub const ALL: [ReplayOutcome; 4] = [
        ReplayOutcome::Replayed,
        ReplayOutcome::Duplicate,
        ReplayOutcome::Stale,
        ReplayOutcome::Rejected,
    ];

    /// A bounded metric label.
    pub fn label(self) -> &'static str {
        match self {
            ReplayOutcome::Replayed => "replayed",
            ReplayOutcome::Duplicate => "duplicate",
            ReplayOutcome::Stale => "stale",
            ReplayOutcome::Rejected => "rejected",
        }
    }
}

/// The outcome of one entry, at the entry's index in the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryOutcome {
    pub outcome: ReplayOutcome,
    /// Why, for stale and rejected entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl EntryOutcome {
    pub fn of(outcome: ReplayOutcome) -> Self {
        Self {
            outcome,
            reason: None,
        }
    }

    pub fn because(outcome: ReplayOutcome, reason: impl Into<String>) -> Self {
        Self {
            outcome,
            reason: Some(reason.into()),
        }
    }
}

/// Entries by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayCounts {
    pub replayed: u64,
    pub duplicate: u64,
    pub stale: u64,
    pub rejected: u64,
}

impl ReplayCounts {
    pub fn add(&mut self, outcome: ReplayOutcome, n: u64) {
        let slot = match outcome {
            ReplayOutcome::Replayed => &mut self.replayed,
            ReplayOutcome::Duplicate => &mut self.duplicate,
            ReplayOutcome::Stale => &mut self.stale,
            ReplayOutcome::Rejected => &mut self.rejected,
        };
        *slot = slot.saturating_add(n);
    }

    pub fn merge(&mut self, other: &ReplayCounts) {
        for o in ReplayOutcome::ALL {
            self.add(o, other.get(o));
        }
    }

    pub fn get(&self, outcome: ReplayOutcome) -> u64 {
        match outcome {
            ReplayOutcome::Replayed => self.replayed,
            ReplayOutcome::Duplicate => self.duplicate,
            ReplayOutcome::Stale => self.stale,
            ReplayOutcome::Rejected => self.rejected,
        }
    }

    pub fn total(&self) -> u64 {
        ReplayOutcome::ALL.iter().map(|&o| self.get(o)).sum()
    }

    pub fn of_outcomes<'a>(outcomes: impl IntoIterator<Item = &'a EntryOutcome>) -> Self {
        let mut c = ReplayCounts::default();
        for o in outcomes {
            c.add(o.outcome, 1);
        }
        c
    }
}

/// `POST /v1/rebuild/replay`: a batch of an owner's committed replicas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildReplayRequest {
    #[serde(default = "version")]
    pub version: u32,
    pub owner_id: String,
    /// The leader term the owner observed (a replay for another term is refused as a whole
    /// with STALE_GENERATION: re-read the term and start over).
    pub term: u64,
    pub entries: Vec<ReplayEntry>,
}

/// One outcome per request entry, in order, and the gate after the batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildReplayReply {
    #[serde(default = "version")]
    pub version: u32,
    pub outcomes: Vec<EntryOutcome>,
    pub gate: GateStatus,
}

/// `POST /v1/rebuild/complete`: the owner replayed every eligible entry of its own table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildCompleteRequest {
    #[serde(default = "version")]
    pub version: u32,
    pub owner_id: String,
    pub term: u64,
    /// What the owner's replay got, by outcome (for `crescent status` and logs).
    pub counts: ReplayCounts,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildCompleteReply {
    #[serde(default = "version")]
    pub version: u32,
    pub gate: GateStatus,
}

/// The rebuild gate's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GateState {
    /// Every expected owner replayed: object operations are served.
    Serving,
    /// Waiting for expected owners: object operations answer UNAVAILABLE.
    Rebuilding,
    /// Served although some expected owner never completed (timeout) or was lost.
    Degraded,
}

impl GateState {
    pub fn as_str(self) -> &'static str {
        match self {
            GateState::Serving => "SERVING",
            GateState::Rebuilding => "REBUILDING",
            GateState::Degraded => "DEGRADED",
        }
    }

    /// The value of the gate state gauge (0 serving, 1 rebuilding, 2 degraded).
    pub fn gauge_value(self) -> i64 {
        match self {
            GateState::Serving => 0,
            GateState::Rebuilding => 1,
            GateState::Degraded => 2,
        }
    }
}

impl std::fmt::Display for GateState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The gate and rebuild progress (`/healthz`, `/v1/rebuild/status`, `crescent status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateStatus {
    #[serde(default = "version")]
    pub version: u32,
    pub state: GateState,
    /// The term this rebuild belongs to.
    pub term: u64,
    pub owners_expected: u64,
    pub owners_completed: u64,
    /// Expected owners that went away (expired or unmounted) before completing.
    #[serde(default)]
    pub owners_lost: u64,
    /// Up to [`MAX_LISTED_OWNERS`] expected owners that have not completed, sorted.
    #[serde(default)]
    pub waiting_for: Vec<String>,
    /// Entries replayed so far, by outcome (as the directory judged them).
    pub entries: ReplayCounts,
    /// When the rebuild started (ms since the Unix epoch, server clock).
    pub started_at_ms: i64,
    /// When the gate opened (SERVING or DEGRADED), if it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at_ms: Option<i64>,
}

/// How many waiting owners a [`GateStatus`] names.
pub const MAX_LISTED_OWNERS: usize = 32;

impl GateStatus {
    /// Whether object operations are served.
    pub fn is_open(&self) -> bool {
        self.state != GateState::Rebuilding
    }
}

/// The gate's state name in refusals (`ApiError::state`) and at the start of their message.
pub const REBUILDING_STATE: &str = "REBUILDING";

/// The error of an object operation refused while REBUILDING: UNAVAILABLE (retryable), marked
/// as run-nothing with state `REBUILDING`, whose message also starts with the state (for
/// scripts, and for clients of servers that predate the `state` field).
pub fn rebuilding_error(status: &GateStatus) -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        format!(
            "{REBUILDING_STATE}: object metadata is being rebuilt for term {} ({}/{} owners completed)",
            status.term, status.owners_completed, status.owners_expected
        ),
    )
    .refused_before_running(Some(REBUILDING_STATE))
}

/// Whether an error is the gate's refusal (see [`rebuilding_error`]).
pub fn is_rebuilding(e: &ApiError) -> bool {
    e.code == ErrorCode::Unavailable
        && (e.state.as_deref() == Some(REBUILDING_STATE) || e.message.starts_with(REBUILDING_STATE))
}

/// A writer's notice to a storage owner: replicas the writer committed in the owner's segments
/// (sent over the TCP transport's NOTIFY message, docs/transport.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerNotice {
    #[serde(default = "version")]
    pub version: u32,
    /// The owner the notice is for (a listener serving another owner refuses it).
    pub owner_id: String,
    pub entries: Vec<ReplayEntry>,
}

/// What the owner did with each noticed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeOutcome {
    /// Recorded in the owner's table (or already there).
    Recorded,
    /// The owner holds a newer put for the key or the address.
    Stale,
    /// Not in a segment this owner serves (unmounted, another owner's): never retried.
    Rejected,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerNoticeReply {
    #[serde(default = "version")]
    pub version: u32,
    /// One per notice entry, in order.
    pub outcomes: Vec<NoticeOutcome>,
}

/// The rebuild routes (all POST but status, which is GET).
pub mod routes {
    pub const REPLAY: &str = "/v1/rebuild/replay";
    pub const COMPLETE: &str = "/v1/rebuild/complete";
    pub const STATUS: &str = "/v1/rebuild/status";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_ids_order_by_incarnation_first() {
        let old_last = compose_put_id(7, PUT_SEQ_MASK).unwrap();
        let new_first = compose_put_id(8, 1).unwrap();
        assert!(new_first > old_last);
        assert_eq!(put_id_incarnation(old_last), 7);
        assert_eq!(put_id_incarnation(new_first), 8);
        assert_eq!(compose_put_id(0, 5), Some(5));
        assert_eq!(compose_put_id(MAX_PUT_INCARNATION + 1, 1), None);
        assert_eq!(compose_put_id(1, PUT_SEQ_MASK + 1), None);
    }

    #[test]
    fn replay_bodies_round_trip_and_default_their_version() {
        let req: RebuildReplayRequest = serde_json::from_str(
            r#"{"owner_id":"o","term":3,"entries":[{"id":{"key":"k"},"put_id":9,
                "segment_id":"o/seg0","offset":64,"length":10}]}"#,
        )
        .unwrap();
        assert_eq!(req.version, REBUILD_WIRE_VERSION);
        assert_eq!(req.entries[0].checksum, None);
        assert_eq!(req.entries[0].data_type, DataType::Kvcache);
        let bytes = rmp_serde::to_vec_named(&req).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<RebuildReplayRequest>(&bytes).unwrap(),
            req
        );
        assert!(check_version(req.version).is_ok());
        assert_eq!(
            check_version(2).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn gate_status_names_its_state_and_the_refusal_is_recognisable() {
        let status = GateStatus {
            version: REBUILD_WIRE_VERSION,
            state: GateState::Rebuilding,
            term: 4,
            owners_expected: 2,
            owners_completed: 1,
            owners_lost: 0,
            waiting_for: vec!["b".into()],
            entries: ReplayCounts::default(),
            started_at_ms: 1,
            opened_at_ms: None,
        };
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["state"], "REBUILDING");
        assert!(!status.is_open());
        let e = rebuilding_error(&status);
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(e.retryable);
        assert!(is_rebuilding(&e));
        assert!(!is_rebuilding(&ApiError::new(
            ErrorCode::Unavailable,
            "no segment"
        )));
    }

    #[test]
    fn counts_add_up_by_outcome() {
        let outcomes = [
            EntryOutcome::of(ReplayOutcome::Replayed),
            EntryOutcome::of(ReplayOutcome::Replayed),
            EntryOutcome::because(ReplayOutcome::Rejected, "x"),
        ];
        let mut c = ReplayCounts::of_outcomes(&outcomes);
        assert_eq!((c.replayed, c.rejected, c.total()), (2, 1, 3));
        c.merge(&ReplayCounts {
            stale: 4,
            ..Default::default()
        });
        assert_eq!(c.total(), 7);
    }
}

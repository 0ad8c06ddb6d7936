//! Given/when/then tests of import, policy, leases, retirement and the event codec, with the
//! exact events. Shared fixtures for `tests_lifecycle.rs` live here.

use super::*;
use crate::identity::payload_keys_sha256;
use crate::planner::{affinity_digest, AffinityUnit};
use crate::policy::{MigrationLimits, MigrationMode, PreferredResidency, ResidencyTarget};
use crescent_actors::{DecodeError, DomainEvent};

pub(super) use crescent_actors::testing::{given, Given, When, NOW};
pub(super) const NIL: &str = "00000000000000000000000000000000";

/// The weights tests' additions to the given/when/then kit (`crescent_actors::testing`).
pub(super) trait GivenExt<A: Aggregate> {
    /// Starts from a state reached earlier in the test instead of the events.
    fn then_state(self, state: A) -> Given<A>;
}

impl<A: Aggregate> GivenExt<A> for Given<A> {
    fn then_state(self, state: A) -> Given<A> {
        Given::state(state)
    }
}

pub(super) trait ThenCode {
    /// Asserts only the wire code of the refusal (where the message is incidental).
    fn then_code(self, code: &str);
}

impl<A: Aggregate<Error = WeightError>> ThenCode for When<A> {
    fn then_code(self, code: &str) {
        let e = self.refusal();
        assert_eq!(e.code().as_str(), code, "{e}");
    }
}

pub(super) fn ident() -> RevisionIdentity {
    RevisionIdentity::new("llm", "llama-3-8b", "main", 1)
}

pub(super) fn op_id(seq: u64) -> String {
    format!("op-{NIL}-{seq}")
}

pub(super) fn lease_id(seq: u64) -> String {
    format!("lease-{NIL}-{seq}")
}

pub(super) fn hot_policy() -> WeightStoragePolicy {
    WeightStoragePolicy {
        preferred_residency: PreferredResidency::Hot,
        mixed_hot_ratio: 0.5,
        migration_mode: MigrationMode::Auto,
    }
}

pub(super) fn limits() -> MigrationLimits {
    MigrationLimits {
        cooldown_ms: 1_000,
        max_members_per_round: 4,
        max_bytes_per_round: 1_000,
    }
}

/// A group of units, each `(members, bytes per member)`, as the store reports it.
pub(super) struct Fixture {
    pub summary: PayloadSummary,
    pub members: Vec<GroupMember>,
    pub units: Vec<AffinityUnit>,
}

pub(super) fn manifest_sha() -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"manifest body"))
}

pub(super) fn fixture(shape: &[(u64, u64)]) -> Fixture {
    let id = ident();
    let mut members = vec![GroupMember {
        key: id.manifest_key(),
        group_id: id.group_id(),
        object_type: ObjectType::Metadata,
        logical_bytes: 77,
        complete: true,
        memory_readable: true,
        hard_pinned: true,
        content_sha256: Some(manifest_sha()),
    }];
    let mut units = Vec::new();
    for (u, (count, each)) in shape.iter().enumerate() {
        let keys: Vec<String> = (0..*count).map(|m| format!("payload/t{u}/{m}")).collect();
        for key in &keys {
            members.push(GroupMember {
                key: key.clone(),
                group_id: id.group_id(),
                object_type: ObjectType::Weight,
                logical_bytes: *each,
                complete: true,
                memory_readable: true,
                hard_pinned: false,
                content_sha256: None,
            });
        }
        units.push(AffinityUnit {
            unit_id: format!("t{u}"),
            member_keys: keys,
            bytes: count * each,
        });
    }
    let keys: Vec<&str> = members[1..].iter().map(|m| m.key.as_str()).collect();
    let summary = PayloadSummary {
        manifest_sha256: manifest_sha(),
        payload_keys_sha256: payload_keys_sha256(&keys),
        payload_count: keys.len() as u64,
        logical_bytes: members[1..].iter().map(|m| m.logical_bytes).sum(),
        affinity_count: units.len() as u64,
        affinity_digest: affinity_digest(&units),
    };
    Fixture {
        summary,
        members,
        units,
    }
}

/// Two units of 2 x 100 bytes and one of 1 x 200: 5 payloads, 600 bytes.
pub(super) fn standard() -> Fixture {
    fixture(&[(2, 100), (2, 100), (1, 200)])
}

pub(super) fn begun(policy: WeightStoragePolicy) -> WeightRevisionEvent {
    let id = ident();
    WeightRevisionEvent::ImportBegun(ImportBegun {
        group_id: id.group_id(),
        manifest_key: id.manifest_key(),
        identity: id,
        policy,
        metadata_generation: 1,
        at_ms: NOW,
    })
}

pub(super) fn committed(summary: &PayloadSummary, generation: u64) -> WeightRevisionEvent {
    WeightRevisionEvent::ImportCommitted(ImportCommitted {
        summary: summary.clone(),
        metadata_generation: generation,
        at_ms: NOW,
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn started(
    seq: u64,
    kind: OperationKind,
    target: Option<ResidencyTarget>,
    trigger: OperationTrigger,
    members_total: Option<u64>,
    bytes_total: Option<u64>,
    generation: u64,
    at_ms: i64,
) -> WeightRevisionEvent {
    WeightRevisionEvent::OperationStarted(OperationStarted {
        operation_id: op_id(seq),
        kind,
        target,
        trigger,
        members_total,
        bytes_total,
        metadata_generation: generation,
        at_ms,
    })
}

pub(super) fn granted(seq: u64, expires_at_ms: i64, at_ms: i64) -> WeightRevisionEvent {
    WeightRevisionEvent::LeaseGranted(LeaseGranted {
        lease_id: lease_id(seq),
        holder: "worker-0".into(),
        expires_at_ms,
        at_ms,
    })
}

/// A READY + HOT revision of [`standard`] with a HOT preference (no initial migration):
/// metadata generation 2.
pub(super) fn ready_hot() -> Vec<WeightRevisionEvent> {
    vec![begun(hot_policy()), committed(&standard().summary, 2)]
}

pub(super) fn acquire(ttl_ms: u64) -> WeightRevisionCommand {
    WeightRevisionCommand::AcquireLease {
        holder: "worker-0".into(),
        ttl_ms,
        expected_metadata_generation: None,
        limits: limits(),
    }
}

pub(super) fn commit(f: &Fixture, expected: u64) -> WeightRevisionCommand {
    WeightRevisionCommand::CommitImport {
        expected_metadata_generation: expected,
        summary: f.summary.clone(),
        members: f.members.clone(),
        affinity_units: f.units.clone(),
    }
}

fn begin(policy: WeightStoragePolicy) -> WeightRevisionCommand {
    WeightRevisionCommand::BeginImport {
        identity: ident(),
        policy,
    }
}

fn mismatch(reason: &str) -> WeightError {
    WeightError::GroupMismatch {
        group_id: ident().group_id(),
        reason: reason.into(),
    }
}

fn commit_with(f: Fixture, edit: impl FnOnce(&mut Fixture)) -> WeightRevisionCommand {
    let mut f = f;
    edit(&mut f);
    commit(&f, 1)
}

// ---- import ------------------------------------------------------------------------------

#[test]
fn begin_import_creates_an_importing_unknown_revision() {
    let state = given::<WeightRevision>(vec![])
        .when(begin(hot_policy()))
        .then(vec![begun(hot_policy())]);
    let view = state.view(NOW).unwrap();
    assert_eq!(view.availability, Availability::Importing);
    assert_eq!(view.residency, Residency::Unknown);
    assert_eq!(view.metadata_generation, 1);
    assert_eq!(
        view.manifest_key,
        "weights/default/llm/llama-3-8b/main/1/manifest"
    );
    assert!(!state.is_exist(), "IMPORTING is invisible to discovery");
}

#[test]
fn begin_import_retry_is_the_same_group_and_conflicting_retries_are_refused() {
    given::<WeightRevision>(vec![begun(hot_policy())])
        .when(begin(hot_policy()))
        .then(vec![]);
    given::<WeightRevision>(ready_hot())
        .when(begin(hot_policy()))
        .then(vec![]);
    let other = WeightStoragePolicy::default();
    given::<WeightRevision>(vec![begun(hot_policy())])
        .when(begin(other))
        .then_error(WeightError::Conflict {
            what: "revision",
            id: ident().to_string(),
            reason: format!(
                "the revision exists with policy {:?}; use weight_update_policy",
                hot_policy()
            ),
        });
    let mut deleted = ready_hot();
    deleted.push(started(
        1,
        OperationKind::Deleting,
        None,
        OperationTrigger::Removal,
        Some(5),
        Some(600),
        3,
        NOW,
    ));
    given::<WeightRevision>(deleted)
        .when(begin(hot_policy()))
        .then_error(WeightError::Conflict {
            what: "revision",
            id: ident().to_string(),
            reason: "the identity is deleted (tombstoned); publish a new weight_generation".into(),
        });
    given::<WeightRevision>(vec![begun(hot_policy())])
        .when(WeightRevisionCommand::BeginImport {
            identity: RevisionIdentity::new("llm", "llama-3-8b", "main", 2),
            policy: hot_policy(),
        })
        .then_code("CONFLICT");
}

#[test]
fn begin_import_refuses_bad_identity_and_policy() {
    let bad = |identity: RevisionIdentity, field: &'static str, reason: &str| {
        given::<WeightRevision>(vec![])
            .when(WeightRevisionCommand::BeginImport {
                identity,
                policy: hot_policy(),
            })
            .then_error(WeightError::invalid(field, reason));
    };
    bad(
        RevisionIdentity::new("", "r", "v", 1),
        "namespace",
        "must not be empty",
    );
    bad(
        RevisionIdentity::new("n", "r\u{0}", "v", 1),
        "resource_id",
        "must not contain control characters",
    );
    bad(
        RevisionIdentity::new("n", "r", "v".repeat(257), 1),
        "revision",
        "257 bytes, at most 256 allowed",
    );
    bad(
        RevisionIdentity::new("n", "r", "v", 1).with_tenant(""),
        "tenant_id",
        "must not be empty",
    );
    given::<WeightRevision>(vec![])
        .when(begin(WeightStoragePolicy {
            mixed_hot_ratio: 1.0,
            ..hot_policy()
        }))
        .then_error(WeightError::invalid(
            "mixed_hot_ratio",
            "1 is not strictly between 0 and 1",
        ));
}

#[test]
fn commit_publishes_ready_hot_with_the_immutable_summary() {
    let f = standard();
    let state = given::<WeightRevision>(vec![begun(hot_policy())])
        .when(commit(&f, 1))
        .then(vec![committed(&f.summary, 2)]);
    let view = state.view(NOW).unwrap();
    assert_eq!(view.availability, Availability::Ready);
    assert_eq!(view.residency, Residency::Hot);
    assert_eq!(view.observed_hot_ratio, 1.0);
    assert_eq!(view.active_operation_id, None);
    assert!(state.is_exist());
    assert_eq!(state.size(), Ok(600));
    assert!(state.manifest_memory_pinned());
    assert!(state.record().unwrap().initially_converged);
}

#[test]
fn commit_with_a_colder_preference_adds_the_initial_migration_in_the_same_batch() {
    let f = standard();
    let policy = WeightStoragePolicy::default();
    let state = given::<WeightRevision>(vec![begun(policy)])
        .when(commit(&f, 1))
        .then(vec![
            committed(&f.summary, 2),
            started(
                1,
                OperationKind::Migrating,
                Some(ResidencyTarget::Mixed { hot_ratio: 0.5 }),
                OperationTrigger::Initial,
                None,
                None,
                2,
                NOW,
            ),
        ]);
    let view = state.view(NOW).unwrap();
    assert_eq!(
        (view.availability, view.residency),
        (Availability::Ready, Residency::Hot)
    );
    assert_eq!(view.active_operation_id, Some(op_id(1)));
    assert!(state.is_exist(), "readable while MIGRATING");
    assert!(!state.record().unwrap().initially_converged);
    for (preferred, target) in [
        (PreferredResidency::Cold, ResidencyTarget::Cold),
        (
            PreferredResidency::Mixed,
            ResidencyTarget::Mixed { hot_ratio: 0.25 },
        ),
    ] {
        let policy = WeightStoragePolicy {
            preferred_residency: preferred,
            mixed_hot_ratio: 0.25,
            migration_mode: MigrationMode::Pinned,
        };
        given::<WeightRevision>(vec![begun(policy)])
            .when(commit(&f, 1))
            .then(vec![
                committed(&f.summary, 2),
                started(
                    1,
                    OperationKind::Migrating,
                    Some(target),
                    OperationTrigger::Initial,
                    None,
                    None,
                    2,
                    NOW,
                ),
            ]);
    }
}

#[test]
fn commit_retry_is_idempotent_and_a_different_summary_is_refused() {
    let f = standard();
    given::<WeightRevision>(ready_hot())
        .when(commit(&f, 1))
        .then(vec![]);
    let other = fixture(&[(1, 600)]);
    given::<WeightRevision>(ready_hot())
        .when(commit(&other, 2))
        .then_error(WeightError::Conflict {
            what: "revision",
            id: ident().to_string(),
            reason: "the published manifest reference and payload summary are immutable".into(),
        });
}

#[test]
fn commit_with_a_stale_generation_publishes_nothing() {
    given::<WeightRevision>(vec![begun(hot_policy())])
        .when(commit(&standard(), 7))
        .then_error(WeightError::StaleGeneration {
            what: "metadata_generation",
            expected: 7,
            current: 1,
        });
    given::<WeightRevision>(vec![])
        .when(commit(&standard(), 1))
        .then_error(WeightError::NotFound {
            what: "revision",
            id: String::new(),
        });
}

#[test]
fn commit_validates_the_whole_group() {
    let id = ident();
    let g = || given::<WeightRevision>(vec![begun(hot_policy())]);
    g().when(commit_with(standard(), |f| {
        f.members[2].group_id = "wgrp-other".into()
    }))
    .then_error(mismatch(
        "member \"payload/t0/1\" belongs to group \"wgrp-other\"",
    ));
    g().when(commit_with(standard(), |f| f.members[1].complete = false))
        .then_error(WeightError::GroupIncomplete {
            group_id: id.group_id(),
            reason: "put of \"payload/t0/0\" has not ended".into(),
        });
    g().when(commit_with(standard(), |f| {
        f.members.remove(0);
    }))
    .then_error(WeightError::GroupIncomplete {
        group_id: id.group_id(),
        reason: format!("the manifest {:?} is not committed", id.manifest_key()),
    });
    g().when(commit_with(standard(), |f| {
        f.members[3].object_type = ObjectType::Other
    }))
    .then_error(mismatch(
        "member \"payload/t1/0\" is neither the manifest nor a WEIGHT payload",
    ));
    g().when(commit_with(standard(), |f| {
        f.members[3].object_type = ObjectType::Metadata
    }))
    .then_error(mismatch(&format!(
        "METADATA object \"payload/t1/0\" is not the manifest {:?}",
        id.manifest_key()
    )));
    g().when(commit_with(standard(), |f| {
        f.members[0].hard_pinned = false
    }))
    .then_error(mismatch(
        "the manifest must have a hard-pinned, readable memory replica",
    ));
    g().when(commit_with(standard(), |f| {
        f.members[0].content_sha256 = Some("ab".repeat(32))
    }))
    .then_error(mismatch(&format!(
        "manifest SHA-256 is {}, the commit declares {}",
        "ab".repeat(32),
        manifest_sha()
    )));
    g().when(commit_with(standard(), |f| {
        f.members[4].memory_readable = false
    }))
    .then_error(WeightError::GroupIncomplete {
        group_id: id.group_id(),
        reason: "payload \"payload/t1/1\" has no readable memory replica".into(),
    });
    g().when(commit_with(standard(), |f| f.summary.payload_count = 6))
        .then_error(mismatch("5 payloads in the group, 6 declared"));
    g().when(commit_with(standard(), |f| f.summary.logical_bytes = 601))
        .then_error(mismatch(
            "600 logical payload bytes in the group, 601 declared",
        ));
    g().when(commit_with(standard(), |f| {
        f.members[5].key = "payload/other".into()
    }))
    .then_code("CONFLICT");
    g().when(commit_with(standard(), |f| {
        let dup = f.members[1].clone();
        f.members.push(dup);
    }))
    .then_error(mismatch("payload \"payload/t0/0\" is listed twice"));
    g().when(commit_with(standard(), |f| f.summary.affinity_count = 2))
        .then_error(mismatch("3 affinity units, 2 declared"));
    g().when(commit_with(standard(), |f| {
        f.summary.affinity_digest = "0".repeat(64)
    }))
    .then_code("CONFLICT");
    // A tensor split across units, or a unit whose bytes are wrong, never validates.
    g().when(commit_with(standard(), |f| {
        f.units[0].bytes = 150;
        f.summary.affinity_digest = affinity_digest(&f.units);
    }))
    .then_error(mismatch(
        "affinity unit \"t0\" declares 150 bytes, its payloads hold 200",
    ));
    g().when(commit_with(standard(), |f| {
        let moved = f.units[0].member_keys.pop().unwrap();
        f.units[1].member_keys.push(moved);
        f.units[0].bytes = 100;
        f.units[1].bytes = 300;
        f.units[2].member_keys.push("payload/t0/0".into());
        f.units[2].bytes = 300;
        f.summary.affinity_digest = affinity_digest(&f.units);
    }))
    .then_error(mismatch(
        "payload \"payload/t0/0\" is in more than one affinity unit",
    ));
    g().when(commit_with(standard(), |f| {
        f.units[2].member_keys.clear();
        f.units[2].bytes = 0;
        f.summary.affinity_digest = affinity_digest(&f.units);
    }))
    .then_error(mismatch("affinity unit \"t2\" has no members"));
}

#[test]
fn commit_refuses_malformed_summaries() {
    let g = || given::<WeightRevision>(vec![begun(hot_policy())]);
    g().when(commit_with(standard(), |f| {
        f.summary.manifest_sha256 = "XYZ".into()
    }))
    .then_error(WeightError::invalid(
        "manifest_sha256",
        "must be a lowercase hex SHA-256 digest (64 characters)",
    ));
    g().when(commit_with(standard(), |f| f.summary.payload_count = 0))
        .then_error(WeightError::invalid("payload_count", "must be at least 1"));
    g().when(commit_with(standard(), |f| f.summary.affinity_count = 9))
        .then_error(WeightError::invalid(
            "affinity_count",
            "9 affinity units cannot cover 5 payloads",
        ));
}

// ---- policy ------------------------------------------------------------------------------

#[test]
fn update_policy_bumps_the_generation_and_same_value_retry_is_a_no_op() {
    let policy = WeightStoragePolicy::default();
    let state = given::<WeightRevision>(ready_hot())
        .when(WeightRevisionCommand::UpdatePolicy {
            policy,
            expected_metadata_generation: 2,
        })
        .then(vec![WeightRevisionEvent::PolicyUpdated(PolicyUpdated {
            policy,
            metadata_generation: 3,
            at_ms: NOW,
        })]);
    assert_eq!(state.record().unwrap().policy, policy);
    // The same policy again (even with the old generation) returns the current state.
    given::<WeightRevision>(vec![
        begun(hot_policy()),
        committed(&standard().summary, 2),
        WeightRevisionEvent::PolicyUpdated(PolicyUpdated {
            policy,
            metadata_generation: 3,
            at_ms: NOW,
        }),
    ])
    .when(WeightRevisionCommand::UpdatePolicy {
        policy,
        expected_metadata_generation: 2,
    })
    .then(vec![]);
    given::<WeightRevision>(ready_hot())
        .when(WeightRevisionCommand::UpdatePolicy {
            policy,
            expected_metadata_generation: 1,
        })
        .then_error(WeightError::StaleGeneration {
            what: "metadata_generation",
            expected: 1,
            current: 2,
        });
}

// ---- leases ------------------------------------------------------------------------------

#[test]
fn lease_grant_renew_release_and_expiry() {
    let state = given::<WeightRevision>(ready_hot())
        .when(acquire(5_000))
        .then(vec![granted(1, NOW + 5_000, NOW)]);
    assert_eq!(state.active_lease_count(NOW), 1);
    assert_eq!(
        state.record().unwrap().metadata_generation,
        2,
        "leases are separate records"
    );
    let mut history = ready_hot();
    history.push(granted(1, NOW + 5_000, NOW));
    given::<WeightRevision>(history.clone())
        .when_at(
            NOW + 4_000,
            WeightRevisionCommand::RenewLease {
                lease_id: lease_id(1),
                ttl_ms: 5_000,
            },
        )
        .then(vec![WeightRevisionEvent::LeaseRenewed(LeaseRenewed {
            lease_id: lease_id(1),
            expires_at_ms: NOW + 9_000,
            at_ms: NOW + 4_000,
        })]);
    given::<WeightRevision>(history.clone())
        .when_at(
            NOW + 5_000,
            WeightRevisionCommand::RenewLease {
                lease_id: lease_id(1),
                ttl_ms: 5_000,
            },
        )
        .then_error(WeightError::LeaseExpired {
            lease_id: lease_id(1),
        });
    given::<WeightRevision>(history.clone())
        .when(WeightRevisionCommand::RenewLease {
            lease_id: "nope".into(),
            ttl_ms: 5_000,
        })
        .then_error(WeightError::NotFound {
            what: "lease",
            id: "nope".into(),
        });
    let released = given::<WeightRevision>(history.clone())
        .when(WeightRevisionCommand::ReleaseLease {
            lease_id: lease_id(1),
        })
        .then(vec![WeightRevisionEvent::LeaseReleased(LeaseEnded {
            lease_id: lease_id(1),
            at_ms: NOW,
        })]);
    assert!(released.leases().is_empty());
    // Release on an error or cancellation path after the lease is gone: a no-op.
    given::<WeightRevision>(ready_hot())
        .when(WeightRevisionCommand::ReleaseLease {
            lease_id: lease_id(1),
        })
        .then(vec![]);
    given::<WeightRevision>(history.clone())
        .when_at(NOW + 4_999, WeightRevisionCommand::ExpireLeases)
        .then(vec![]);
    let expired = given::<WeightRevision>(history)
        .when_at(NOW + 5_000, WeightRevisionCommand::ExpireLeases)
        .then(vec![WeightRevisionEvent::LeaseExpired(LeaseEnded {
            lease_id: lease_id(1),
            at_ms: NOW + 5_000,
        })]);
    assert!(expired.leases().is_empty());
}

#[test]
fn lease_ids_are_unique_within_the_revision() {
    let mut history = ready_hot();
    history.push(granted(1, NOW + 5_000, NOW));
    given::<WeightRevision>(history)
        .when(acquire(5_000))
        .then(vec![granted(2, NOW + 5_000, NOW)]);
}

#[test]
fn lease_is_refused_unless_ready() {
    given::<WeightRevision>(vec![begun(hot_policy())])
        .when(acquire(5_000))
        .then_error(WeightError::NotReady {
            id: ident().to_string(),
            availability: "IMPORTING",
            reason: "the revision must be READY".into(),
        });
    let mut degraded = ready_hot();
    degraded.push(WeightRevisionEvent::MembersLost(MembersLost {
        lost_members: 1,
        metadata_generation: 3,
        at_ms: NOW,
        hot_bytes: None,
    }));
    given::<WeightRevision>(degraded)
        .when(acquire(5_000))
        .then_code("NOT_READY");
    given::<WeightRevision>(vec![])
        .when(acquire(5_000))
        .then_code("NOT_FOUND");
    given::<WeightRevision>(ready_hot())
        .when(WeightRevisionCommand::AcquireLease {
            holder: "w".into(),
            ttl_ms: 5_000,
            expected_metadata_generation: Some(1),
            limits: limits(),
        })
        .then_error(WeightError::StaleGeneration {
            what: "metadata_generation",
            expected: 1,
            current: 2,
        });
    given::<WeightRevision>(ready_hot())
        .when(acquire(0))
        .then_error(WeightError::invalid(
            "ttl_ms",
            "0 is not within 1..=3600000",
        ));
    given::<WeightRevision>(ready_hot())
        .when(acquire(MAX_LEASE_TTL_MS + 1))
        .then_error(WeightError::invalid(
            "ttl_ms",
            "3600001 is not within 1..=3600000",
        ));
}

// ---- retirement (weight_upsert on the base) ---------------------------------------------

fn retire(expected: u64, require_idle: bool) -> WeightRevisionCommand {
    WeightRevisionCommand::Retire {
        request_id: "req-1".into(),
        successor_generation: 2,
        expected_metadata_generation: expected,
        require_idle,
    }
}

fn retired_event(generation: u64) -> WeightRevisionEvent {
    WeightRevisionEvent::RevisionRetired(RevisionRetired {
        request_id: "req-1".into(),
        successor_generation: 2,
        metadata_generation: generation,
        at_ms: NOW,
    })
}

#[test]
fn retire_fences_new_leases_and_renewals_but_existing_leases_drain() {
    let mut history = ready_hot();
    history.push(granted(1, NOW + 5_000, NOW));
    let state = given::<WeightRevision>(history.clone())
        .when(retire(2, false))
        .then(vec![retired_event(3)]);
    assert!(!state.is_exist());
    assert_eq!(state.active_lease_count(NOW), 1, "existing leases drain");
    history.push(retired_event(3));
    let fenced = WeightError::Conflict {
        what: "revision",
        id: ident().to_string(),
        reason: "retired by upsert \"req-1\" for generation 2".into(),
    };
    given::<WeightRevision>(history.clone())
        .when(acquire(1_000))
        .then_error(fenced.clone());
    given::<WeightRevision>(history.clone())
        .when(WeightRevisionCommand::RenewLease {
            lease_id: lease_id(1),
            ttl_ms: 1_000,
        })
        .then_error(fenced.clone());
    given::<WeightRevision>(history.clone())
        .when(WeightRevisionCommand::ReleaseLease {
            lease_id: lease_id(1),
        })
        .then(vec![WeightRevisionEvent::LeaseReleased(LeaseEnded {
            lease_id: lease_id(1),
            at_ms: NOW,
        })]);
    // The same upsert resuming is a no-op; another one conflicts.
    given::<WeightRevision>(history.clone())
        .when(retire(2, false))
        .then(vec![]);
    given::<WeightRevision>(history)
        .when(WeightRevisionCommand::Retire {
            request_id: "req-2".into(),
            successor_generation: 3,
            expected_metadata_generation: 3,
            require_idle: false,
        })
        .then_error(fenced);
}

#[test]
fn delete_first_retire_requires_an_idle_base() {
    let mut leased = ready_hot();
    leased.push(granted(1, NOW + 5_000, NOW));
    given::<WeightRevision>(leased.clone())
        .when(retire(2, true))
        .then_error(WeightError::busy(
            "1 active lease(s) block a DELETE_FIRST replacement",
        ));
    // An expired lease no longer protects the base: it is expired in the same batch.
    given::<WeightRevision>(leased)
        .when_at(NOW + 5_000, retire(2, true))
        .then(vec![
            WeightRevisionEvent::LeaseExpired(LeaseEnded {
                lease_id: lease_id(1),
                at_ms: NOW + 5_000,
            }),
            WeightRevisionEvent::RevisionRetired(RevisionRetired {
                request_id: "req-1".into(),
                successor_generation: 2,
                metadata_generation: 3,
                at_ms: NOW + 5_000,
            }),
        ]);
    let mut migrating = ready_hot();
    migrating.push(started(
        1,
        OperationKind::Migrating,
        Some(ResidencyTarget::Cold),
        OperationTrigger::Explicit,
        None,
        None,
        3,
        NOW,
    ));
    given::<WeightRevision>(migrating)
        .when(retire(3, true))
        .then_error(WeightError::busy(format!(
            "MIGRATING operation {} is active",
            op_id(1)
        )));
    given::<WeightRevision>(ready_hot())
        .when(retire(1, true))
        .then_code("STALE_GENERATION");
    given::<WeightRevision>(vec![begun(hot_policy())])
        .when(retire(1, true))
        .then_code("NOT_READY");
    given::<WeightRevision>(ready_hot())
        .when(WeightRevisionCommand::Retire {
            request_id: "req-1".into(),
            successor_generation: 1,
            expected_metadata_generation: 2,
            require_idle: false,
        })
        .then_error(WeightError::invalid(
            "successor_generation",
            "1 is not above the base generation 1",
        ));
}

// ---- errors and codec --------------------------------------------------------------------

#[test]
fn error_codes_and_classes_are_stable() {
    use crescent_journal::error::ErrorClass;
    let cases: Vec<(WeightError, &str, ErrorClass)> = vec![
        (
            WeightError::invalid("x", "y"),
            "INVALID_ARGUMENT",
            ErrorClass::User,
        ),
        (
            WeightError::NotFound {
                what: "revision",
                id: "r".into(),
            },
            "NOT_FOUND",
            ErrorClass::User,
        ),
        (
            WeightError::NotReady {
                id: "r".into(),
                availability: "IMPORTING",
                reason: String::new(),
            },
            "NOT_READY",
            ErrorClass::Retryable,
        ),
        (
            WeightError::GroupIncomplete {
                group_id: "g".into(),
                reason: String::new(),
            },
            "NOT_READY",
            ErrorClass::Retryable,
        ),
        (
            WeightError::Conflict {
                what: "claim",
                id: "c".into(),
                reason: String::new(),
            },
            "CONFLICT",
            ErrorClass::User,
        ),
        (
            WeightError::GroupMismatch {
                group_id: "g".into(),
                reason: String::new(),
            },
            "CONFLICT",
            ErrorClass::User,
        ),
        (
            WeightError::StaleGeneration {
                what: "metadata_generation",
                expected: 1,
                current: 2,
            },
            "STALE_GENERATION",
            ErrorClass::User,
        ),
        (WeightError::busy("b"), "BUSY", ErrorClass::Retryable),
        (
            WeightError::LeaseExpired {
                lease_id: "l".into(),
            },
            "LEASE_EXPIRED",
            ErrorClass::User,
        ),
        (
            WeightError::PolicyUnsatisfiable {
                reason: String::new(),
            },
            "POLICY_UNSATISFIABLE",
            ErrorClass::User,
        ),
        (
            WeightError::Config {
                key: "k",
                reason: String::new(),
            },
            "INVALID_ARGUMENT",
            ErrorClass::Fatal,
        ),
        (
            WeightError::CapabilityDisabled { flag: "f" },
            "UNAVAILABLE",
            ErrorClass::Retryable,
        ),
    ];
    for (error, code, class) in cases {
        assert_eq!(error.code().as_str(), code, "{error}");
        assert_eq!(crescent_actors::WireCoded::wire_code(&error), error.code());
        assert_eq!(error.class(), class, "{error}");
    }
}

pub(super) fn every_event() -> Vec<WeightRevisionEvent> {
    let f = standard();
    vec![
        begun(WeightStoragePolicy::default()),
        committed(&f.summary, 2),
        started(
            1,
            OperationKind::Migrating,
            Some(ResidencyTarget::Mixed { hot_ratio: 0.3 }),
            OperationTrigger::Initial,
            None,
            None,
            2,
            NOW,
        ),
        WeightRevisionEvent::OperationPlanned(OperationPlanned {
            operation_id: op_id(1),
            members_total: 3,
            bytes_total: 400,
            at_ms: NOW,
        }),
        WeightRevisionEvent::PolicyUpdated(PolicyUpdated {
            policy: hot_policy(),
            metadata_generation: 3,
            at_ms: NOW,
        }),
        granted(1, NOW + 1, NOW),
        WeightRevisionEvent::LeaseRenewed(LeaseRenewed {
            lease_id: lease_id(1),
            expires_at_ms: NOW + 2,
            at_ms: NOW,
        }),
        WeightRevisionEvent::LeaseReleased(LeaseEnded {
            lease_id: lease_id(1),
            at_ms: NOW,
        }),
        WeightRevisionEvent::LeaseExpired(LeaseEnded {
            lease_id: lease_id(2),
            at_ms: NOW,
        }),
        WeightRevisionEvent::RoundCopied(RoundCopied {
            operation_id: op_id(1),
            round: 1,
            direction: crate::planner::MoveDirection::Demote,
            units: 1,
            members: 2,
            bytes: 200,
            hot_bytes: 600,
            metadata_generation: 3,
            at_ms: NOW,
        }),
        WeightRevisionEvent::RoundReleased(RoundReleased {
            operation_id: op_id(1),
            round: 1,
            hot_bytes: 400,
            metadata_generation: 4,
            at_ms: NOW,
        }),
        WeightRevisionEvent::OperationAttemptFailed(OperationAttemptFailed {
            operation_id: op_id(1),
            error: "cold tier down".into(),
            at_ms: NOW,
        }),
        WeightRevisionEvent::OperationFinished(OperationFinished {
            operation_id: op_id(1),
            status: OperationStatus::Succeeded,
            error: None,
            hot_bytes: Some(400),
            metadata_generation: 5,
            at_ms: NOW,
        }),
        WeightRevisionEvent::MembersLost(MembersLost {
            lost_members: 1,
            metadata_generation: 6,
            at_ms: NOW,
            hot_bytes: None,
        }),
        WeightRevisionEvent::RevisionRetired(RevisionRetired {
            request_id: "r".into(),
            successor_generation: 2,
            metadata_generation: 7,
            at_ms: NOW,
        }),
        started(
            2,
            OperationKind::Deleting,
            None,
            OperationTrigger::Removal,
            Some(5),
            Some(600),
            8,
            NOW,
        ),
        WeightRevisionEvent::DeletionBatchDeleted(DeletionBatchDeleted {
            operation_id: op_id(2),
            batch: 1,
            members: 5,
            bytes: 600,
            at_ms: NOW,
        }),
        WeightRevisionEvent::ManifestDeleted(ManifestDeleted {
            operation_id: op_id(2),
            at_ms: NOW,
        }),
        WeightRevisionEvent::RevisionDeleted(RevisionDeleted {
            operation_id: op_id(2),
            metadata_generation: 9,
            at_ms: NOW,
        }),
    ]
}

#[test]
fn every_event_kind_round_trips_and_is_in_the_schema() {
    let events = every_event();
    let kinds: std::collections::BTreeSet<&str> = events.iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds.len(),
        WeightRevisionEvent::schema().len(),
        "every kind is exercised"
    );
    for e in events {
        assert!(WeightRevisionEvent::schema().contains(&(e.kind(), e.version())));
        let payload = e.encode();
        let value: serde_json::Value = rmp_serde::from_slice(&payload).unwrap();
        assert!(value.is_array(), "compact form: {value}");
        assert_eq!(
            WeightRevisionEvent::decode(e.kind(), e.version(), &payload),
            Ok(e)
        );
    }
}

/// The journal form is pinned: journals of earlier builds must replay (docs/architecture.md,
/// "Aggregates"), and the schema is what the HA handshake compares (docs/ha.md, "Event versions
/// in a mixed pair").
#[test]
fn the_schema_and_the_journal_form_of_every_kind_are_pinned() {
    let kinds: Vec<&str> = WeightRevisionEvent::schema()
        .iter()
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(
        kinds,
        [
            "import_begun",
            "import_committed",
            "operation_started",
            "operation_planned",
            "policy_updated",
            "lease_granted",
            "lease_renewed",
            "lease_released",
            "lease_expired",
            "round_copied",
            "round_released",
            "operation_attempt_failed",
            "operation_finished",
            "deletion_batch_deleted",
            "manifest_deleted",
            "revision_deleted",
            "members_lost",
            "revision_retired",
        ]
    );
    assert!(WeightRevisionEvent::schema().iter().all(|(_, v)| *v == 1));
    let mut events = every_event();
    // The field appended to `members_lost` v1, present.
    events.push(WeightRevisionEvent::MembersLost(MembersLost {
        lost_members: 2,
        metadata_generation: 7,
        at_ms: NOW,
        hot_bytes: Some(100),
    }));
    crescent_actors::testing::assert_journal_form(
        &events,
        &[
            ("import_begun", 1, "9695a764656661756c74a36c6c6daa6c6c616d612d332d3862a46d61696e01d925776772702d6237313234376538376561623635353765313161356136643933623237646131d92e776569676874732f64656661756c742f6c6c6d2f6c6c616d612d332d38622f6d61696e2f312f6d616e696665737493a56d69786564cb3fe0000000000000a46175746f01cf0000018bcfe56800"),
            ("import_committed", 1, "9396d94031333961653138643066653734633132336261636435643165656532623138343137343237386434323934313033353338376336343666323361626166653232d9406361623535623239363663653166633065313230303866353165356162323132626562313835656533633836343836633861633662306332373564366134393105cd025803d9403432393031636639636563663361306466646333313334333061393234666137636464306465353639633533306335613162613435653533646130613139346402cf0000018bcfe56800"),
            ("operation_started", 1, "98d9256f702d30303030303030303030303030303030303030303030303030303030303030302d31a94d4947524154494e4781a56d6978656491cb3fd3333333333333a7696e697469616cc0c002cf0000018bcfe56800"),
            ("operation_planned", 1, "94d9256f702d30303030303030303030303030303030303030303030303030303030303030302d3103cd0190cf0000018bcfe56800"),
            ("policy_updated", 1, "9393a3686f74cb3fe0000000000000a46175746f03cf0000018bcfe56800"),
            ("lease_granted", 1, "94d9286c656173652d30303030303030303030303030303030303030303030303030303030303030302d31a8776f726b65722d30cf0000018bcfe56801cf0000018bcfe56800"),
            ("lease_renewed", 1, "93d9286c656173652d30303030303030303030303030303030303030303030303030303030303030302d31cf0000018bcfe56802cf0000018bcfe56800"),
            ("lease_released", 1, "92d9286c656173652d30303030303030303030303030303030303030303030303030303030303030302d31cf0000018bcfe56800"),
            ("lease_expired", 1, "92d9286c656173652d30303030303030303030303030303030303030303030303030303030303030302d32cf0000018bcfe56800"),
            ("round_copied", 1, "99d9256f702d30303030303030303030303030303030303030303030303030303030303030302d3101a664656d6f74650102ccc8cd025803cf0000018bcfe56800"),
            ("round_released", 1, "95d9256f702d30303030303030303030303030303030303030303030303030303030303030302d3101cd019004cf0000018bcfe56800"),
            ("operation_attempt_failed", 1, "93d9256f702d30303030303030303030303030303030303030303030303030303030303030302d31ae636f6c64207469657220646f776ecf0000018bcfe56800"),
            ("operation_finished", 1, "96d9256f702d30303030303030303030303030303030303030303030303030303030303030302d31a9535543434545444544c0cd019005cf0000018bcfe56800"),
            ("members_lost", 1, "930106cf0000018bcfe56800"),
            ("revision_retired", 1, "94a1720207cf0000018bcfe56800"),
            ("operation_started", 1, "98d9256f702d30303030303030303030303030303030303030303030303030303030303030302d32a844454c4554494e47c0a772656d6f76616c05cd025808cf0000018bcfe56800"),
            ("deletion_batch_deleted", 1, "95d9256f702d30303030303030303030303030303030303030303030303030303030303030302d320105cd0258cf0000018bcfe56800"),
            ("manifest_deleted", 1, "92d9256f702d30303030303030303030303030303030303030303030303030303030303030302d32cf0000018bcfe56800"),
            ("revision_deleted", 1, "93d9256f702d30303030303030303030303030303030303030303030303030303030303030302d3209cf0000018bcfe56800"),
            ("members_lost", 1, "940207cf0000018bcfe5680064"),
        ],
    );
}

#[test]
fn the_named_form_decodes_and_unknown_kinds_versions_and_garbage_are_refused() {
    let WeightRevisionEvent::ImportBegun(inner) = begun(hot_policy()) else {
        unreachable!()
    };
    let named = rmp_serde::to_vec_named(&inner).unwrap();
    assert_eq!(
        WeightRevisionEvent::decode("import_begun", 1, &named),
        Ok(begun(hot_policy()))
    );
    let payload = begun(hot_policy()).encode();
    assert_eq!(
        WeightRevisionEvent::decode("import_exploded", 1, &payload),
        Err(DecodeError::UnknownKind {
            aggregate: "weight_revision",
            kind: "import_exploded".into()
        })
    );
    assert_eq!(
        WeightRevisionEvent::decode("import_begun", 2, &payload),
        Err(DecodeError::UnsupportedVersion {
            kind: "import_begun".into(),
            version: 2,
            supported: 1
        })
    );
    assert!(matches!(
        WeightRevisionEvent::decode("import_begun", 0, &payload),
        Err(DecodeError::UnsupportedVersion { version: 0, .. })
    ));
    assert!(matches!(
        WeightRevisionEvent::decode("import_begun", 1, b"\xc1garbage"),
        Err(DecodeError::Malformed { .. })
    ));
    assert!(matches!(
        WeightRevisionEvent::decode("lease_granted", 1, &payload),
        Err(DecodeError::Malformed { .. })
    ));
}

#[test]
fn state_survives_a_snapshot_round_trip() {
    let mut state = WeightRevision::default();
    for e in every_event() {
        state.apply(&e);
    }
    let bytes = rmp_serde::to_vec_named(&state).unwrap();
    let back: WeightRevision = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(back, state);
    assert_eq!(back.record().unwrap().availability, Availability::Deleted);
    assert_eq!(back.record().unwrap().residency, Residency::Absent);
}

#[test]
fn commands_round_trip_through_json_for_the_wire() {
    let f = standard();
    for cmd in [
        commit(&f, 1),
        WeightRevisionCommand::Migrate {
            target: ResidencyTarget::Mixed { hot_ratio: 0.25 },
            expected_metadata_generation: 3,
        },
        WeightRevisionCommand::ExpireLeases,
        acquire(10),
    ] {
        let json = serde_json::to_string(&cmd).unwrap();
        let back: WeightRevisionCommand = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cmd, "{json}");
    }
    let view = given::<WeightRevision>(ready_hot())
        .into_state()
        .view(NOW)
        .unwrap();
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["availability"], "READY");
    assert_eq!(json["residency"], "HOT");
    assert_eq!(json["metadata_generation"], 2);
    assert_eq!(json["observed_hot_ratio"], 1.0);
}

//! Wire <-> domain conversions of the weight API (the wire crate does not depend on the
//! domain crate: clients need only the wire types).

use crescent_weights::policy::PolicyOverride;
use crescent_weights::revision::{Operation, OperationKind, OperationTrigger};
use crescent_weights::{
    MigrationMode, PreferredResidency, ResidencyTarget, RevisionIdentity, RevisionView, UpsertMode,
    WeightStoragePolicy, DEFAULT_TENANT,
};
use crescent_wire::weights as w;
use crescent_wire::{ApiError, ErrorCode};

pub fn identity(id: &w::WeightId) -> Result<RevisionIdentity, ApiError> {
    let identity = RevisionIdentity {
        tenant_id: id.tenant.clone().unwrap_or_else(|| DEFAULT_TENANT.into()),
        namespace: id.namespace.clone(),
        resource_id: id.resource_id.clone(),
        revision: id.revision.clone(),
        weight_generation: id.generation,
    };
    identity
        .validate()
        .map_err(|e| ApiError::new(ErrorCode::InvalidArgument, e.to_string()))?;
    Ok(identity)
}

pub fn wire_id(identity: &RevisionIdentity) -> w::WeightId {
    w::WeightId {
        tenant: Some(identity.tenant_id.clone()),
        namespace: identity.namespace.clone(),
        resource_id: identity.resource_id.clone(),
        revision: identity.revision.clone(),
        generation: identity.weight_generation,
    }
}

pub fn preferred(p: w::PreferredResidency) -> PreferredResidency {
    match p {
        w::PreferredResidency::Hot => PreferredResidency::Hot,
        w::PreferredResidency::Cold => PreferredResidency::Cold,
        w::PreferredResidency::Mixed => PreferredResidency::Mixed,
    }
}

fn mode(m: w::MigrationMode) -> MigrationMode {
    match m {
        w::MigrationMode::Pinned => MigrationMode::Pinned,
        w::MigrationMode::Manual => MigrationMode::Manual,
        w::MigrationMode::Auto => MigrationMode::Auto,
    }
}

pub fn upsert_mode(m: w::UpsertMode) -> UpsertMode {
    match m {
        w::UpsertMode::PutFirst => UpsertMode::PutFirst,
        w::UpsertMode::DeleteFirst => UpsertMode::DeleteFirst,
    }
}

pub fn wire_upsert_mode(m: UpsertMode) -> w::UpsertMode {
    match m {
        UpsertMode::PutFirst => w::UpsertMode::PutFirst,
        UpsertMode::DeleteFirst => w::UpsertMode::DeleteFirst,
    }
}

pub fn policy_override(p: &w::WeightPolicy) -> PolicyOverride {
    PolicyOverride {
        preferred_residency: p.preferred_residency.map(preferred),
        mixed_hot_ratio: p.mixed_hot_ratio,
        migration_mode: p.migration_mode.map(mode),
    }
}

pub fn target(
    to: w::PreferredResidency,
    hot_ratio: Option<f64>,
    current: &WeightStoragePolicy,
) -> ResidencyTarget {
    match to {
        w::PreferredResidency::Hot => ResidencyTarget::Hot,
        w::PreferredResidency::Cold => ResidencyTarget::Cold,
        w::PreferredResidency::Mixed => ResidencyTarget::Mixed {
            hot_ratio: hot_ratio.unwrap_or(current.mixed_hot_ratio),
        },
    }
}

fn upper<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s.to_ascii_uppercase(),
        other => format!("{other:?}"),
    }
}

pub fn resolved_policy(p: &WeightStoragePolicy) -> w::ResolvedPolicy {
    w::ResolvedPolicy {
        preferred_residency: upper(&p.preferred_residency),
        mixed_hot_ratio: p.mixed_hot_ratio,
        migration_mode: upper(&p.migration_mode),
    }
}

pub fn metadata(v: &RevisionView) -> w::WeightMetadata {
    w::WeightMetadata {
        id: wire_id(&v.identity),
        group_id: v.group_id.clone(),
        manifest_key: v.manifest_key.clone(),
        availability: v.availability.as_str().to_string(),
        residency: v.residency.as_str().to_string(),
        observed_hot_ratio: v.observed_hot_ratio,
        metadata_generation: v.metadata_generation,
        policy: resolved_policy(&v.policy),
        manifest_sha256: v.summary.as_ref().map(|s| s.manifest_sha256.clone()),
        payload_count: v.summary.as_ref().map(|s| s.payload_count),
        logical_bytes: v.summary.as_ref().map(|s| s.logical_bytes),
        affinity_count: v.summary.as_ref().map(|s| s.affinity_count),
        active_operation_id: v.active_operation_id.clone(),
        active_lease_count: v.active_lease_count,
        retired_by_generation: v.retired.as_ref().map(|r| r.successor_generation),
        created_at_ms: v.created_at_ms,
        updated_at_ms: v.updated_at_ms,
    }
}

fn target_label(t: &ResidencyTarget) -> String {
    match t {
        ResidencyTarget::Hot => "HOT".into(),
        ResidencyTarget::Cold => "COLD".into(),
        ResidencyTarget::Mixed { hot_ratio } => format!("MIXED:{hot_ratio}"),
    }
}

pub fn operation(identity: &RevisionIdentity, op: &Operation) -> w::OperationReply {
    let kind = match op.kind {
        OperationKind::Migrating => "MIGRATING",
        OperationKind::Repairing => "REPAIRING",
        OperationKind::Deleting => "DELETING",
    };
    let trigger = match op.trigger {
        OperationTrigger::Initial => "initial",
        OperationTrigger::Explicit => "explicit",
        OperationTrigger::MemoryPressure => "memory_pressure",
        OperationTrigger::Access => "access",
        OperationTrigger::Repair => "repair",
        OperationTrigger::Removal => "removal",
    };
    w::OperationReply {
        operation_id: op.operation_id.clone(),
        id: wire_id(identity),
        kind: kind.into(),
        trigger: trigger.into(),
        status: upper(&op.status),
        target: op.target.as_ref().map(target_label),
        rounds_completed: op.progress.rounds_completed,
        members_done: op.progress.members_done,
        bytes_done: op.progress.bytes_done,
        members_total: op.progress.members_total,
        bytes_total: op.progress.bytes_total,
        attempts: op.attempts,
        last_error: op.last_error.clone(),
        started_at_ms: op.started_at_ms,
        finished_at_ms: op.finished_at_ms,
    }
}

//! Every refusal of every aggregate maps to a deliberate wire code: none of them is INTERNAL
//! (an aggregate's refusals are about the command, never a failure of the node).

use crescent_error_class::coverage::assert_wire_coded;
use crescent_error_class::every_variant;

use crate::incarnation::IncarnationError;
use crate::quota_root::{QuotaError, QuotaLimit, QuotaLimits};
use crate::removed_puts::RemovedPutsError;
use crate::segment_registry::SegmentRegistryError;

#[test]
fn segment_registry_refusals_have_codes() {
    let all = every_variant!(SegmentRegistryError {
        InvalidArgument => SegmentRegistryError::InvalidArgument { field: "f", reason: "r".into() },
        NotFound => SegmentRegistryError::NotFound { what: "segment", id: "s".into() },
        Conflict => SegmentRegistryError::Conflict {
            what: "segment",
            id: "s".into(),
            reason: "r".into(),
        },
        StaleIncarnation => SegmentRegistryError::StaleIncarnation {
            owner_id: "o".into(),
            current: 2,
            offered: 1,
        },
    });
    assert_wire_coded(&all, &[]);
}

#[test]
fn quota_refusals_have_codes() {
    let limits = QuotaLimits {
        max_bytes: Some(1),
        max_objects: None,
    };
    let all = every_variant!(QuotaError {
        InvalidArgument => QuotaError::InvalidArgument { field: "f", reason: "r".into() },
        NotFound => QuotaError::NotFound { op_id: "p".into() },
        QuotaExceeded => QuotaError::QuotaExceeded {
            limit: QuotaLimit::MaxBytes,
            key: "k".into(),
            max: 1,
            used: 1,
            pending: 0,
            requested: 1,
        },
        ObjectTooLarge => QuotaError::ObjectTooLarge { key: "k".into(), size: 2, max_bytes: 1 },
        ObjectBusy => QuotaError::ObjectBusy { key: "k".into(), holder: "p".into() },
        OperationConflict => QuotaError::OperationConflict { op_id: "p".into(), reason: "r".into() },
        InvalidTransition => QuotaError::InvalidTransition {
            op_id: "p".into(),
            state: "ABORTED",
            action: "finalize",
        },
        PolicyMismatch => QuotaError::PolicyMismatch {
            policy_version: 1,
            stored: limits,
            stored_fingerprint: "a".into(),
            offered: limits,
            offered_fingerprint: "b".into(),
        },
    });
    assert_wire_coded(&all, &[]);
}

#[test]
fn removed_puts_and_incarnation_refusals_have_codes() {
    let removed = every_variant!(RemovedPutsError {
        ZeroPutId => RemovedPutsError::ZeroPutId,
        EmptyOwner => RemovedPutsError::EmptyOwner,
    });
    assert_wire_coded(&removed, &[]);
    let incarnation = every_variant!(IncarnationError {
        Exhausted => IncarnationError::Exhausted(1),
        StaleTerm => IncarnationError::StaleTerm { term: 1, current: 2 },
    });
    assert_wire_coded(&incarnation, &[]);
}

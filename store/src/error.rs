//! Why the object directory refuses an operation.

use crescent_wire::error::{ApiError, ErrorCode};

/// How a caller should treat an error: the one classification of every Crescent crate.
pub use crescent_error_class::ErrorClass;

/// In the message of every [`StoreError::AllowanceShort`] (and of a batch item refused so,
/// whose result keeps only the code and the message).
pub const ALLOWANCE_SHORT: &str = "ALLOWANCE_SHORT";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Malformed input: bad key, tenant or domain syntax, size over the maximum, batch or
    /// page over its limit, bad configuration.
    #[error("invalid {field}: {reason}")]
    InvalidArgument { field: &'static str, reason: String },

    /// No such object, put, segment or owner.
    #[error("{what} not found: {id}")]
    NotFound { what: &'static str, id: String },

    /// The object exists but has no complete version yet (a put is in progress).
    #[error("not ready: {reason}")]
    NotReady { reason: String },

    /// The request contradicts what is stored (different content without upsert, a put that
    /// already ended, a segment id re-mounted with other parameters).
    #[error("conflict: {reason}")]
    Conflict { reason: String },

    /// Temporarily refused: leased replicas, a put in progress.
    #[error("busy: {reason}")]
    Busy { reason: String },

    /// No mounted segment could hold the value, even after eviction.
    #[error("no space for {requested} bytes: {reason}")]
    NoSpace { requested: u64, reason: String },

    /// The tenant's hard quota (docs/tenants.md) has no room for the value.
    #[error("QUOTA_EXCEEDED: tenant {tenant}: {reason}")]
    QuotaExceeded { tenant: String, reason: String },

    /// In a mesh, this cluster's allowance of the tenant's quota has no room for the value
    /// while the mesh as a whole may (docs/tenants.md, "Quota across a mesh"): the server
    /// asks the tenant's home for more and the client sends the put again.
    #[error("unavailable: ALLOWANCE_SHORT: tenant {tenant}: {reason}")]
    AllowanceShort { tenant: String, reason: String },

    /// Nothing to place the value on: no segment is mounted.
    #[error("unavailable: {reason}")]
    Unavailable { reason: String },

    /// A bounded table is full (interned tenant/domain scopes).
    #[error("limit reached: {reason}")]
    LimitReached { reason: String },

    /// A rebuild request for another leader term than the one being rebuilt.
    #[error("stale term: {reason}")]
    StaleTerm { reason: String },

    /// Object operations wait for the owners' metadata replay (the rebuild gate).
    #[error("REBUILDING: object metadata is being rebuilt for term {term} ({completed}/{expected} owners completed)")]
    Rebuilding {
        term: u64,
        completed: u64,
        expected: u64,
    },

    /// An overwrite or delete would drop a materialized cold copy whose reclaim was not
    /// planned first (the server plans it and retries: see `ObjectDirectory::allow_cold_drop`).
    #[error("busy: {key:?} has a materialized cold copy whose reclaim must be planned first")]
    ColdBacked { key: String },

    /// A plain put, upsert or remove of an object of a managed weight group: those change
    /// only through their weight revision (docs/weights.md, docs/api.md "Managed objects").
    #[error("conflict: MANAGED_OBJECT: {key:?} belongs to managed weight group {group}; plain writes and removes are refused (publish or delete the weight revision instead)")]
    Managed { key: String, group: String },

    /// An internal invariant broke (for example a free of space that was not allocated).
    #[error("internal: {reason}")]
    Internal { reason: String },
}

impl StoreError {
    /// Whether a batch item's refusal is an [`StoreError::AllowanceShort`].
    pub fn is_allowance_short_item(code: ErrorCode, message: &str) -> bool {
        code == ErrorCode::Unavailable && message.contains(ALLOWANCE_SHORT)
    }

    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        StoreError::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    pub(crate) fn not_found(what: &'static str, id: impl Into<String>) -> Self {
        StoreError::NotFound {
            what,
            id: id.into(),
        }
    }

    pub(crate) fn busy(reason: impl Into<String>) -> Self {
        StoreError::Busy {
            reason: reason.into(),
        }
    }

    pub(crate) fn conflict(reason: impl Into<String>) -> Self {
        StoreError::Conflict {
            reason: reason.into(),
        }
    }

    /// The stable wire code (docs/design.md, "Wire API").
    pub fn wire_code(&self) -> ErrorCode {
        match self {
            StoreError::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            StoreError::NotFound { .. } => ErrorCode::NotFound,
            StoreError::NotReady { .. } => ErrorCode::NotReady,
            StoreError::Conflict { .. } | StoreError::Managed { .. } => ErrorCode::Conflict,
            StoreError::Busy { .. } | StoreError::ColdBacked { .. } => ErrorCode::Busy,
            // 507 Insufficient Storage: the store is full, not the request malformed (and not
            // the tenant's quota: QUOTA_EXCEEDED, docs/tenants.md).
            StoreError::NoSpace { .. } | StoreError::LimitReached { .. } => ErrorCode::OutOfSpace,
            StoreError::QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
            StoreError::Unavailable { .. } | StoreError::AllowanceShort { .. } => {
                ErrorCode::Unavailable
            }
            StoreError::StaleTerm { .. } => ErrorCode::StaleGeneration,
            StoreError::Rebuilding { .. } => ErrorCode::Unavailable,
            StoreError::Internal { .. } => ErrorCode::Internal,
        }
    }

    /// The stable wire code as a string (`INVALID_ARGUMENT`, `NOT_FOUND`, ...).
    pub fn code(&self) -> &'static str {
        self.wire_code().as_str()
    }

    /// A short label for metrics (bounded: one per variant).
    pub fn outcome_label(&self) -> &'static str {
        match self {
            StoreError::InvalidArgument { .. } => "invalid_argument",
            StoreError::NotFound { .. } => "not_found",
            StoreError::NotReady { .. } => "not_ready",
            StoreError::Conflict { .. } => "conflict",
            StoreError::Managed { .. } => "managed",
            StoreError::Busy { .. } => "busy",
            StoreError::ColdBacked { .. } => "cold_backed",
            StoreError::NoSpace { .. } => "no_space",
            StoreError::QuotaExceeded { .. } => "quota_exceeded",
            StoreError::Unavailable { .. } => "unavailable",
            StoreError::AllowanceShort { .. } => "allowance_short",
            StoreError::LimitReached { .. } => "limit_reached",
            StoreError::StaleTerm { .. } => "stale_term",
            StoreError::Rebuilding { .. } => "rebuilding",
            StoreError::Internal { .. } => "internal",
        }
    }

    pub fn class(&self) -> ErrorClass {
        match self {
            StoreError::InvalidArgument { .. }
            | StoreError::NotFound { .. }
            | StoreError::Conflict { .. }
            | StoreError::Managed { .. }
            | StoreError::LimitReached { .. }
            // Room comes back only through the tenant's own removals or a raised limit.
            | StoreError::QuotaExceeded { .. }
            | StoreError::StaleTerm { .. } => ErrorClass::User,
            // Space frees up through eviction, removals and owners joining.
            StoreError::NotReady { .. }
            | StoreError::Busy { .. }
            | StoreError::ColdBacked { .. }
            | StoreError::NoSpace { .. }
            | StoreError::Unavailable { .. }
            | StoreError::AllowanceShort { .. }
            | StoreError::Rebuilding { .. } => ErrorClass::Retryable,
            StoreError::Internal { .. } => ErrorClass::Fatal,
        }
    }
}

impl From<&StoreError> for ApiError {
    fn from(e: &StoreError) -> Self {
        let api = ApiError::new(e.wire_code(), e.to_string());
        match e {
            // The rebuild gate refuses before anything runs: a client may send it again.
            StoreError::Rebuilding { .. } => {
                api.refused_before_running(Some(crescent_wire::rebuild::REBUILDING_STATE))
            }
            // Refused before the put took anything: sent again once the allowance grew.
            StoreError::AllowanceShort { .. } => api.refused_before_running(None),
            _ => api,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::from(&e)
    }
}

impl<T> From<StoreError> for crescent_wire::store::ItemResult<T> {
    fn from(e: StoreError) -> Self {
        crescent_wire::store::ItemResult::Err {
            code: e.wire_code(),
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_error_class::coverage::assert_wire_map;
    use crescent_error_class::every_variant;

    /// Only a broken invariant of the directory itself is INTERNAL.
    #[test]
    fn every_refusal_but_a_broken_invariant_has_a_code_other_than_internal() {
        let reason = || "r".to_string();
        let all = every_variant!(StoreError {
            InvalidArgument => StoreError::invalid("key", "r"),
            NotFound => StoreError::not_found("object", "k"),
            NotReady => StoreError::NotReady { reason: reason() },
            Conflict => StoreError::conflict("r"),
            Busy => StoreError::busy("r"),
            NoSpace => StoreError::NoSpace { requested: 1, reason: reason() },
            QuotaExceeded => StoreError::QuotaExceeded { tenant: "t".into(), reason: reason() },
            Unavailable => StoreError::Unavailable { reason: reason() },
            AllowanceShort => StoreError::AllowanceShort { tenant: "t".into(), reason: reason() },
            LimitReached => StoreError::LimitReached { reason: reason() },
            StaleTerm => StoreError::StaleTerm { reason: reason() },
            Rebuilding => StoreError::Rebuilding { term: 1, completed: 0, expected: 1 },
            ColdBacked => StoreError::ColdBacked { key: "k".into() },
            Managed => StoreError::Managed { key: "k".into(), group: "g".into() },
            Internal => StoreError::Internal { reason: reason() },
        });
        assert_wire_map(&all, StoreError::wire_code, &["Internal"]);
    }
}

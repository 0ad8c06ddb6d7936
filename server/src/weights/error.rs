//! Why a weight service request or workflow step was refused. The API layer maps it to the
//! wire (`api::error`), with the code [`WeightServiceError::code`] names.

use crescent_weights::WeightError;
use crescent_wire::{ApiError, ErrorCode};

use crate::error::CommandFailed;

#[derive(Debug, thiserror::Error)]
pub enum WeightServiceError {
    /// A command or read of a weight aggregate that did not run.
    #[error(transparent)]
    Command(#[from] CommandFailed),
    /// The planner's or a validation's refusal.
    #[error("{code}: {source}", code = .0.code(), source = .0)]
    Domain(#[from] WeightError),
    /// A refusal of the service itself (not found, not ready, no cold tier, a bad identity).
    #[error(transparent)]
    Refused(#[from] ApiError),
}

impl WeightServiceError {
    pub fn code(&self) -> ErrorCode {
        match self {
            WeightServiceError::Command(e) => e.code,
            WeightServiceError::Domain(e) => e.code(),
            WeightServiceError::Refused(e) => e.code,
        }
    }

    /// The message without its code.
    pub fn message(&self) -> String {
        match self {
            WeightServiceError::Command(e) => e.message.clone(),
            WeightServiceError::Domain(e) => e.to_string(),
            WeightServiceError::Refused(e) => e.message.clone(),
        }
    }

    /// A refusal with `code` and `message`.
    pub fn refused(code: ErrorCode, message: impl Into<String>) -> Self {
        WeightServiceError::Refused(ApiError::new(code, message))
    }
}

/// A directory refusal, with the store's own code (as the API layer maps it).
impl From<crescent_store::StoreError> for WeightServiceError {
    fn from(e: crescent_store::StoreError) -> Self {
        WeightServiceError::Refused(ApiError::from(e))
    }
}

/// A runtime failure of a weight aggregate.
pub(crate) fn command<E>(e: crescent_actors::runtime::RuntimeError<E>) -> WeightServiceError
where
    E: std::error::Error + crescent_actors::WireCoded,
{
    WeightServiceError::Command(CommandFailed::from(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_error_class::coverage::assert_wire_map;
    use crescent_error_class::every_variant;

    #[test]
    fn every_refusal_has_a_code_other_than_internal() {
        let all = every_variant!(WeightServiceError {
            Command => WeightServiceError::Command(CommandFailed {
                code: ErrorCode::Fenced,
                message: "m".into(),
            }),
            Domain => WeightError::LeaseExpired { lease_id: "l".into() }.into(),
            Refused => WeightServiceError::refused(ErrorCode::NotFound, "m"),
        });
        assert_wire_map(&all, WeightServiceError::code, &[]);
    }

    #[test]
    fn messages_keep_the_wire_form() {
        let e: WeightServiceError = WeightError::LeaseExpired {
            lease_id: "l".into(),
        }
        .into();
        assert_eq!(e.to_string(), format!("{}: {}", e.code(), e.message()));
        let e = WeightServiceError::refused(ErrorCode::NotFound, "gone");
        assert_eq!(
            e.to_string(),
            ApiError::new(ErrorCode::NotFound, "gone").to_string()
        );
    }
}

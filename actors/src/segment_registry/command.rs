//! Segment registry commands and their argument checks.

use serde::{Deserialize, Serialize};

use super::error::SegmentRegistryError;
use super::TransportKind;

/// Longest owner id, segment id or endpoint, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Longest free-text reason, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum SegmentRegistryCommand {
    /// A storage owner announces itself. The same incarnation and endpoint again is a no-op;
    /// a higher incarnation replaces the owner and unmounts its old segments; a lower one is
    /// refused.
    RegisterOwner {
        owner_id: String,
        endpoint: String,
        incarnation: u64,
    },
    /// Mounts a segment (an owner's memory range). An unknown owner is registered implicitly
    /// (incarnation 1, no endpoint).
    MountSegment {
        segment_id: String,
        owner_id: String,
        base: u64,
        size: u64,
        transport: TransportKind,
    },
    UnmountSegment {
        segment_id: String,
    },
    /// Unmounts all of the owner's segments, then removes it.
    RemoveOwner {
        owner_id: String,
        reason: String,
    },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> SegmentRegistryError {
    SegmentRegistryError::InvalidArgument {
        field,
        reason: reason.into(),
    }
}

/// An id or endpoint: non-empty, at most [`MAX_ID_BYTES`], no control characters.
pub(crate) fn check_id(field: &'static str, value: &str) -> Result<(), SegmentRegistryError> {
    if value.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    if value.len() > MAX_ID_BYTES {
        return Err(invalid(
            field,
            format!("{} bytes, at most {MAX_ID_BYTES} allowed", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid(field, "must not contain control characters"));
    }
    Ok(())
}

impl SegmentRegistryCommand {
    /// Checks that do not depend on state.
    pub fn validate(&self) -> Result<(), SegmentRegistryError> {
        match self {
            SegmentRegistryCommand::RegisterOwner {
                owner_id,
                endpoint,
                incarnation,
            } => {
                check_id("owner_id", owner_id)?;
                check_id("endpoint", endpoint)?;
                if *incarnation == 0 {
                    return Err(invalid("incarnation", "must be at least 1"));
                }
            }
            SegmentRegistryCommand::MountSegment {
                segment_id,
                owner_id,
                base,
                size,
                transport: _,
            } => {
                check_id("segment_id", segment_id)?;
                check_id("owner_id", owner_id)?;
                if *size == 0 {
                    return Err(invalid("size", "must be greater than 0"));
                }
                if base.checked_add(*size).is_none() {
                    return Err(invalid(
                        "size",
                        format!("base {base} + size {size} overflows the address space"),
                    ));
                }
            }
            SegmentRegistryCommand::UnmountSegment { segment_id } => {
                check_id("segment_id", segment_id)?;
            }
            SegmentRegistryCommand::RemoveOwner { owner_id, reason } => {
                check_id("owner_id", owner_id)?;
                if reason.len() > MAX_REASON_BYTES {
                    return Err(invalid(
                        "reason",
                        format!("{} bytes, at most {MAX_REASON_BYTES} allowed", reason.len()),
                    ));
                }
            }
        }
        Ok(())
    }
}

//! The node's incarnation: a counter journaled once per start (standalone) or promotion (HA).
//!
//! Object metadata is not journaled; it is rebuilt from the storage owners after a restart
//! (docs/rebuild.md). Put ids carry the incarnation so every put of this run orders after every
//! replayed one, and owners see a new term in heartbeat answers and replay their tables. The
//! counter lives in the journal (no separate file that could be lost or rolled back): a start
//! appends `incarnation_begun` with the previous value + 1 and serves only once it is durable.

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::aggregate::{Aggregate, Ctx, ErrorCode, WireCoded};

/// Stream kind and the one instance id.
pub const STREAM_KIND: &str = "node_incarnation";
pub const INSTANCE_ID: &str = "node";
/// Largest incarnation: put ids keep 24 bits for it.
pub const MAX_INCARNATION: u32 = (1 << 24) - 1;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIncarnation {
    /// The current incarnation (0: never started).
    pub incarnation: u32,
    /// The term it began under.
    pub term: u64,
    pub began_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IncarnationCommand {
    /// A start or promotion under `ctx.term`.
    Begin,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncarnationBegun {
    pub incarnation: u32,
    pub term: u64,
    pub at_ms: i64,
}

crate::domain_events! {
    /// Version history: `incarnation_begun` is at v1.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum IncarnationEvent for STREAM_KIND {
        Begun(IncarnationBegun): pub INCARNATION_BEGUN = "incarnation_begun", version 1;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IncarnationError {
    #[error("incarnation counter exhausted at {0}: the store's put ids cannot order a new run")]
    Exhausted(u32),
    #[error("term {term} is not above the current incarnation's term {current}")]
    StaleTerm { term: u64, current: u64 },
}

impl WireCoded for IncarnationError {
    fn wire_code(&self) -> ErrorCode {
        match self {
            IncarnationError::Exhausted(_) => ErrorCode::Unavailable,
            IncarnationError::StaleTerm { .. } => ErrorCode::Fenced,
        }
    }
}

impl Aggregate for NodeIncarnation {
    const KIND: &'static str = STREAM_KIND;
    const SNAPSHOT_SCHEMA: u32 = 1;

    type Command = IncarnationCommand;
    type Event = IncarnationEvent;
    type Error = IncarnationError;

    fn decide(
        &self,
        cmd: &IncarnationCommand,
        ctx: &Ctx,
    ) -> Result<Vec<IncarnationEvent>, IncarnationError> {
        match cmd {
            IncarnationCommand::Begin => {
                if self.incarnation >= MAX_INCARNATION {
                    return Err(IncarnationError::Exhausted(self.incarnation));
                }
                // Equal terms are allowed: a standalone node that restarts before writing
                // anything else begins under the same journal term.
                if ctx.term < self.term {
                    return Err(IncarnationError::StaleTerm {
                        term: ctx.term,
                        current: self.term,
                    });
                }
                Ok(vec![IncarnationEvent::Begun(IncarnationBegun {
                    incarnation: self.incarnation + 1,
                    term: ctx.term,
                    at_ms: ctx.now_ms,
                })])
            }
        }
    }

    fn apply(&mut self, event: &IncarnationEvent) {
        let IncarnationEvent::Begun(e) = event;
        self.incarnation = e.incarnation;
        self.term = e.term;
        self.began_at_ms = e.at_ms;
    }
}

//! The aggregate contract: pure `decide` and `apply`, versioned events.
//!
//! An aggregate is a consistency boundary (one segment registry, one weight revision, one
//! lineage, ...). All business rules live in `decide`; `apply` only folds an event into state and
//! cannot fail. Neither does IO, reads a clock or draws randomness: time and fresh ids arrive in
//! [`Ctx`] and whatever `decide` needs of them is recorded in the events it emits.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Everything non-deterministic a command may depend on, supplied by the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctx {
    /// Wall-clock milliseconds since the Unix epoch when the command was decided.
    pub now_ms: i64,
    /// A fresh random id for this command (operation ids and the like are derived from it).
    pub fresh_id: uuid::Uuid,
    /// The term of the writer deciding the command.
    pub term: u64,
}

impl Ctx {
    /// A fixed context for tests.
    pub fn at(now_ms: i64) -> Self {
        Self {
            now_ms,
            fresh_id: uuid::Uuid::nil(),
            term: 1,
        }
    }
}

/// Why stored event bytes could not be turned back into an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown event kind {kind:?} for aggregate {aggregate}")]
    UnknownKind {
        aggregate: &'static str,
        kind: String,
    },
    #[error("event {kind} version {version} is newer than this binary's {supported}")]
    UnsupportedVersion {
        kind: String,
        version: u16,
        supported: u16,
    },
    #[error("event {kind} v{version} payload is malformed: {reason}")]
    Malformed {
        kind: String,
        version: u16,
        reason: String,
    },
}

/// An event with a stable kind name and a schema version per kind.
///
/// `encode` always writes the current version. `decode` accepts every version this binary has
/// ever written and upcasts older ones to the current shape; stored bytes are never rewritten.
///
/// `Serialize` renders the event's data for tools (`World::event_json`, which
/// `crescent-replay dump --decode` prints): an enum of one payload struct per kind derives it
/// with `#[serde(untagged)]`, so the data is the payload's fields.
pub trait DomainEvent:
    Clone + std::fmt::Debug + PartialEq + Serialize + Send + Sync + 'static
{
    /// The event's kind name as stored in the journal (snake_case, stable forever).
    fn kind(&self) -> &'static str;

    /// The current schema version of this event's kind.
    fn version(&self) -> u16;

    /// The payload bytes (msgpack; SegmentRegistry uses the compact array form).
    fn encode(&self) -> Vec<u8>;

    /// Decodes (and upcasts) a stored event.
    fn decode(kind: &str, version: u16, payload: &[u8]) -> Result<Self, DecodeError>;

    /// Every (kind, highest version) this binary can replay: what a standby announces in the
    /// replication handshake.
    fn schema() -> &'static [(&'static str, u16)];

    /// (kind, oldest version this build can still write) for each kind it can also write at an
    /// older version than its current one, so an HA active can write what a standby of the
    /// previous release reads (docs/ha.md, "Event versions in a mixed pair"). A kind not listed
    /// is written at its current version only.
    fn write_floor() -> &'static [(&'static str, u16)] {
        &[]
    }

    /// The payload at `version`: every version from the kind's write floor (see
    /// [`DomainEvent::write_floor`]) to its current one; `None` for any other. Writing an older
    /// version never loses what the event means (an event that needs the newer form has no
    /// older one to fall back to, and its kind is not in the write floor).
    fn encode_at(&self, version: u16) -> Option<Vec<u8>> {
        (version == self.version()).then(|| self.encode())
    }
}

/// A consistency boundary whose state is rebuilt by folding its events.
pub trait Aggregate:
    Default
    + Clone
    + std::fmt::Debug
    + PartialEq
    + Serialize
    + DeserializeOwned
    + Send
    + Unpin
    + 'static
{
    /// Stream kind in the journal and section name in snapshots (snake_case, stable forever).
    const KIND: &'static str;

    /// Schema version of this aggregate's snapshot section.
    const SNAPSHOT_SCHEMA: u32;

    type Command: std::fmt::Debug + Send + 'static;
    type Event: DomainEvent;
    type Error: std::error::Error + Send + Sync + 'static;

    /// All business rules: the events a command produces, or why it is refused. Pure.
    fn decide(&self, cmd: &Self::Command, ctx: &Ctx) -> Result<Vec<Self::Event>, Self::Error>;

    /// Folds one event into the state. Pure, infallible.
    fn apply(&mut self, event: &Self::Event);

    /// Folds an event the caller no longer needs (replay decodes each event just to apply it),
    /// so its strings can move into the state instead of being copied. Must have exactly the
    /// effect of [`Aggregate::apply`]; an aggregate overriding it should implement `apply` by
    /// cloning into this one, so the logic exists once.
    fn apply_owned(&mut self, event: Self::Event) {
        self.apply(&event);
    }

    /// Folds an event still in its journal form (kind, version, payload): what replay runs for
    /// every record. The default decodes (upcasting) and applies the owned event. An aggregate
    /// whose replay cost matters may override it to decode borrowed views of events whose
    /// strings it only looks up; the override must fold exactly as `decode` + `apply_owned`
    /// do and refuse exactly what `decode` refuses (its tests check both).
    fn apply_encoded(
        &mut self,
        kind: &str,
        version: u16,
        payload: &[u8],
    ) -> Result<(), DecodeError> {
        self.apply_owned(Self::Event::decode(kind, version, payload)?);
        Ok(())
    }
}

/// A domain error's stable wire code, typed (`ErrorCode::InvalidArgument`, ...). The server
/// maps codes to its wire error in one place; aggregates never know about HTTP.
pub use crescent_error_class::{ErrorCode, WireCoded};

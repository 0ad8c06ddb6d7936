//! Between domain events and journal records: encoding an aggregate's events for an append,
//! decoding them back (with upcasting), and chaining records offline (tests, tools, benches).

use crescent_journal::{chain_digest, EventData, NewRecord, Record, StreamId};
use crescent_snapshot::Position;

use crate::aggregate::{Aggregate, DecodeError, DomainEvent};

/// The journal form of an event: kind, current version, msgpack payload.
pub fn to_event_data<E: DomainEvent>(event: &E) -> EventData {
    EventData {
        kind: event.kind().to_string(),
        version: event.version(),
        payload: event.encode(),
    }
}

/// Decodes (and upcasts) a stored event.
pub fn from_event_data<E: DomainEvent>(data: &EventData) -> Result<E, DecodeError> {
    E::decode(&data.kind, data.version, &data.payload)
}

/// A record to append for one event of aggregate `A`'s instance `id`.
pub fn new_record<A: Aggregate>(id: &str, event: &A::Event, timestamp_ms: i64) -> NewRecord {
    NewRecord {
        stream: StreamId::new(A::KIND, id),
        event: to_event_data(event),
        timestamp_ms,
    }
}

/// Turns [`NewRecord`]s into chained [`Record`]s the way the journal does (contiguous seqs,
/// SHA-256 chain), without a journal: for tests, benchmarks and tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordChain {
    head: Position,
}

impl Default for RecordChain {
    fn default() -> Self {
        Self::new(Position::GENESIS)
    }
}

impl RecordChain {
    /// A chain continuing after `head`.
    pub fn new(head: Position) -> Self {
        Self { head }
    }

    /// The last record's position.
    pub fn head(&self) -> Position {
        self.head
    }

    /// The next record, with the next seq and the chained digest.
    pub fn push(&mut self, term: u64, rec: NewRecord) -> Record {
        let seq = self.head.seq + 1;
        let digest = chain_digest(
            &self.head.digest,
            seq,
            term,
            rec.timestamp_ms,
            &rec.stream,
            &rec.event,
        );
        self.head = Position { seq, term, digest };
        Record {
            seq,
            term,
            timestamp_ms: rec.timestamp_ms,
            stream: rec.stream,
            event: rec.event,
            digest,
        }
    }
}

//! The replay state of every aggregate kind this build knows: what recovery rebuilds, what the
//! snapshotter shadows, and what `crescent-replay replay --to SEQ` prints.

mod error;
mod table;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crescent_journal::{Journal, Record, RecordRef};
use crescent_snapshot::{Position, ReplayState, Section, SectionSet, SectionSpec};
use serde::{Deserialize, Serialize};

pub use error::WorldError;
use table::AnyTable;
pub use table::Table;

use crate::aggregate::Aggregate;
use crate::event_versions::{EventVersionPolicy, StartAt};
use crate::segment_registry::SegmentRegistry;

/// Name of the required section holding the world's own position.
pub const META_SECTION: &str = "meta";
/// Schema of the `meta` section.
pub const META_SCHEMA: u32 = 1;

/// Body of the `meta` section: the position again (cross-checked against the file header) and
/// the kinds the writer knew, for tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Meta {
    seq: u64,
    term: u64,
    digest: [u8; 32],
    kinds: Vec<String>,
}

/// One [`Table`] per registered aggregate kind, plus the journal position they are at.
pub struct World {
    tables: BTreeMap<&'static str, Box<dyn AnyTable>>,
    position: Position,
}

impl World {
    /// A world that knows no aggregate kinds (see [`World::register`]).
    pub fn empty() -> Self {
        Self {
            tables: BTreeMap::new(),
            position: Position::GENESIS,
        }
    }

    /// This crate's own aggregate kind (`SegmentRegistry`) only: the world of this crate's
    /// tests and benches. crescentd recovers and snapshots `crescent_domain::standard_world`,
    /// which registers every aggregate of the build.
    pub fn standard() -> Self {
        let mut world = Self::empty();
        world
            .register::<SegmentRegistry>()
            .expect("standard aggregate kinds are distinct");
        world
    }

    /// Adds aggregate kind `A` (with an empty table).
    pub fn register<A: Aggregate>(&mut self) -> Result<(), WorldError> {
        if self.tables.contains_key(A::KIND) || A::KIND == META_SECTION {
            return Err(WorldError::DuplicateKind(A::KIND));
        }
        self.tables.insert(A::KIND, Box::new(Table::<A>::default()));
        Ok(())
    }

    /// The registered kinds, sorted.
    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.tables.keys().copied()
    }

    /// The last record applied (or the snapshot position loaded).
    pub fn position(&self) -> Position {
        self.position
    }

    pub fn last_seq(&self) -> u64 {
        self.position.seq
    }

    /// Routes a record to its aggregate kind's table, decoding (and upcasting) its event.
    /// Records must come in seq order without gaps. Fails closed on an unknown stream kind or
    /// an undecodable event, leaving the world unchanged.
    pub fn apply(&mut self, rec: &Record) -> Result<(), WorldError> {
        self.apply_ref(rec.as_ref())
    }

    /// [`World::apply`] on a borrowed record (the replay path: nothing is copied but what the
    /// aggregate keeps).
    pub fn apply_ref(&mut self, rec: RecordRef<'_>) -> Result<(), WorldError> {
        let expected = self.position.seq + 1;
        if rec.seq != expected {
            return Err(WorldError::OutOfOrder {
                expected,
                found: rec.seq,
            });
        }
        let table =
            self.tables
                .get_mut(rec.stream_kind)
                .ok_or_else(|| WorldError::UnknownStream {
                    seq: rec.seq,
                    kind: rec.stream_kind.to_string(),
                })?;
        table.apply(&rec)?;
        self.position = Position {
            seq: rec.seq,
            term: rec.term,
            digest: *rec.digest,
        };
        Ok(())
    }

    /// Applies the journal's durable records after this world's position, up to `upto`; returns
    /// how many were applied.
    pub fn catch_up(&mut self, journal: &Journal, upto: u64) -> Result<u64, WorldError> {
        let from = self.position.seq + 1;
        journal.visit_range(from, upto, |rec| self.apply_ref(rec))?;
        Ok(self.position.seq + 1 - from)
    }

    /// The table of kind `A` (`None` if `A` is not registered).
    pub fn table<A: Aggregate>(&self) -> Option<&Table<A>> {
        self.tables
            .get(A::KIND)
            .and_then(|t| t.as_any().downcast_ref::<Table<A>>())
    }

    /// Instance `id` of aggregate `A`, if it has had any event.
    pub fn get<A: Aggregate>(&self, id: &str) -> Option<&A> {
        self.table::<A>().and_then(|t| t.get(id))
    }

    /// Every instance of aggregate `A`, in id order.
    pub fn iter<A: Aggregate>(&self) -> impl Iterator<Item = (&String, &A)> {
        self.table::<A>().into_iter().flat_map(|t| t.iter())
    }

    /// (event kind, current version) of every event the registered aggregates write: what a
    /// standby must be able to replay to follow this node (the replication handshake).
    pub fn event_schemas(&self) -> Vec<(String, u16)> {
        self.tables
            .values()
            .flat_map(|t| t.event_schema().iter())
            .map(|(k, v)| (k.to_string(), *v))
            .collect()
    }

    /// The event version policy of this world's aggregates, starting at `start`
    /// ([`crate::event_versions`]).
    pub fn event_version_policy(&self, start: StartAt) -> EventVersionPolicy {
        let floors: Vec<(String, u16)> = self
            .tables
            .values()
            .flat_map(|t| t.event_write_floor().iter())
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        EventVersionPolicy::new(&self.event_schemas(), &floors, start)
    }

    /// Whether a replayer with `capabilities` (event kind, newest version it decodes) can replay
    /// everything in `written`; the error names the first event it cannot.
    pub fn can_replay(
        written: &[(String, u16)],
        capabilities: &[(String, u16)],
    ) -> Result<(), String> {
        for (kind, version) in written {
            match capabilities.iter().find(|(k, _)| k == kind) {
                Some((_, theirs)) if theirs >= version => {}
                Some((_, theirs)) => {
                    return Err(format!(
                        "event {kind} is written at v{version}, the standby replays up to v{theirs}: upgrade the standby first"
                    ))
                }
                None => {
                    return Err(format!(
                        "event {kind} v{version} is unknown to the standby: upgrade the standby first"
                    ))
                }
            }
        }
        Ok(())
    }

    /// Instances per kind (for stats).
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        self.tables.iter().map(|(k, t)| (*k, t.len())).collect()
    }

    /// The event of `rec` decoded (and upcast) by its registered aggregate kind, as
    /// `{"kind": ..., "version": <current version>, "data": {...fields...}}`: how tools show
    /// an event, for every kind this world registers and every version it reads.
    pub fn event_json(&self, rec: RecordRef<'_>) -> Result<serde_json::Value, WorldError> {
        let table = self
            .tables
            .get(rec.stream_kind)
            .ok_or_else(|| WorldError::UnknownStream {
                seq: rec.seq,
                kind: rec.stream_kind.to_string(),
            })?;
        table.event_json(&rec)
    }

    /// `{"position": {"seq", "term", "digest"}, "aggregates": {kind: {id: state}}}`.
    pub fn to_json(&self) -> Result<serde_json::Value, WorldError> {
        let mut aggregates = serde_json::Map::new();
        for (kind, table) in &self.tables {
            aggregates.insert(kind.to_string(), table.to_json()?);
        }
        Ok(serde_json::json!({
            "position": {
                "seq": self.position.seq,
                "term": self.position.term,
                "digest": hex::encode(self.position.digest),
            },
            "aggregates": aggregates,
        }))
    }
}

impl Default for World {
    fn default() -> Self {
        Self::standard()
    }
}

impl Clone for World {
    fn clone(&self) -> Self {
        Self {
            tables: self
                .tables
                .iter()
                .map(|(k, t)| (*k, t.clone_box()))
                .collect(),
            position: self.position,
        }
    }
}

impl PartialEq for World {
    fn eq(&self, other: &Self) -> bool {
        self.position == other.position
            && self.tables.len() == other.tables.len()
            && self
                .tables
                .iter()
                .zip(other.tables.iter())
                .all(|((ka, a), (kb, b))| ka == kb && a.eq_dyn(b.as_ref()))
    }
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Dyn<'a>(&'a dyn AnyTable);
        impl std::fmt::Debug for Dyn<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.debug(f)
            }
        }
        f.debug_struct("World")
            .field("position", &self.position)
            .field(
                "tables",
                &self
                    .tables
                    .iter()
                    .map(|(k, t)| (k, Dyn(t.as_ref())))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl ReplayState for World {
    type Error = WorldError;

    fn section_specs(&self) -> Vec<SectionSpec> {
        let mut specs = vec![SectionSpec {
            name: META_SECTION.to_string(),
            schema: META_SCHEMA,
            optional: false,
        }];
        specs.extend(self.tables.values().map(|t| SectionSpec {
            name: t.kind().to_string(),
            schema: t.schema(),
            optional: true,
        }));
        specs
    }

    fn position(&self) -> Position {
        self.position
    }

    fn apply(&mut self, rec: RecordRef<'_>) -> Result<(), WorldError> {
        World::apply_ref(self, rec)
    }

    fn to_sections(&self) -> Result<Vec<Section>, WorldError> {
        let meta = Meta {
            seq: self.position.seq,
            term: self.position.term,
            digest: self.position.digest,
            kinds: self.kinds().map(str::to_string).collect(),
        };
        let meta_body = rmp_serde::to_vec_named(&meta).map_err(|e| WorldError::SectionEncode {
            section: META_SECTION.to_string(),
            reason: e.to_string(),
        })?;
        let mut sections = vec![Section {
            name: META_SECTION.to_string(),
            optional: false,
            schema: META_SCHEMA,
            body: meta_body,
        }];
        for table in self.tables.values() {
            sections.push(Section {
                name: table.kind().to_string(),
                // An older binary that lacks this aggregate may skip it: it has no actors that
                // could use the state anyway.
                optional: true,
                schema: table.schema(),
                body: table.encode()?,
            });
        }
        Ok(sections)
    }

    fn load_sections(&mut self, at: &Position, mut sections: SectionSet) -> Result<(), WorldError> {
        let file = sections.file().to_path_buf();
        let meta_err = |reason: String| WorldError::SectionDecode {
            file: file.clone(),
            section: META_SECTION.to_string(),
            reason,
        };
        let meta = sections
            .take(META_SECTION)
            .ok_or_else(|| meta_err("missing".into()))?;
        if meta.schema != META_SCHEMA {
            return Err(meta_err(format!("unreadable schema {}", meta.schema)));
        }
        let meta: Meta = rmp_serde::from_slice(&meta.body).map_err(|e| meta_err(e.to_string()))?;
        if (meta.seq, meta.term, meta.digest) != (at.seq, at.term, at.digest) {
            return Err(meta_err(format!(
                "meta says seq {} term {}, the file header seq {} term {} (or the digests differ)",
                meta.seq, meta.term, at.seq, at.term
            )));
        }
        for table in self.tables.values_mut() {
            let kind = table.kind();
            table.load(&file, sections.take(kind))?;
        }
        self.position = *at;
        Ok(())
    }
}

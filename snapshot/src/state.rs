//! What a snapshottable, replayable state implements, and the section rules every consumer
//! gets for free (missing optional: empty; unknown optional: ignored; newer schema, unknown
//! required, missing required: fail closed).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crescent_journal::RecordRef;

use crate::error::{Result, SnapshotError};
use crate::format::{Position, Section};

/// A section a state knows how to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionSpec {
    pub name: String,
    /// The newest schema version this binary reads (and the one it writes).
    pub schema: u32,
    /// Whether a snapshot without this section is still usable (the state starts empty).
    pub optional: bool,
}

/// A state rebuilt by folding journal records, which can be written to and read from snapshot
/// sections. The snapshotter keeps one of these (its shadow copy) and restore fills one.
pub trait ReplayState: Send + 'static {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Every section this state reads, with its current schema.
    fn section_specs(&self) -> Vec<SectionSpec>;

    /// The last record applied (or loaded from a snapshot).
    fn position(&self) -> Position;

    /// Folds one record in and advances [`ReplayState::position`] to it. A record this state
    /// cannot interpret is an error (replaying past it would build state the journal does not
    /// describe).
    fn apply(&mut self, rec: RecordRef<'_>) -> Result<(), Self::Error>;

    /// The state as sections (at [`ReplayState::position`]).
    fn to_sections(&self) -> Result<Vec<Section>, Self::Error>;

    /// Replaces this (empty) state with a snapshot's content; afterwards `position()` must be
    /// `at`. Sections have been checked against [`ReplayState::section_specs`].
    fn load_sections(&mut self, at: &Position, sections: SectionSet) -> Result<(), Self::Error>;
}

/// The sections of a snapshot that passed the spec check, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionSet {
    file: PathBuf,
    sections: BTreeMap<String, Section>,
}

impl SectionSet {
    /// Checks `sections` (from `file`) against what this binary knows:
    /// - a section with a schema newer than its spec: [`SnapshotError::UnsupportedSchema`];
    /// - an unknown section marked required: [`SnapshotError::UnknownRequiredSection`];
    /// - an unknown optional section: dropped (logged);
    /// - a required spec with no section: [`SnapshotError::MissingRequiredSection`].
    pub fn validate(file: &Path, sections: Vec<Section>, specs: &[SectionSpec]) -> Result<Self> {
        let mut kept = BTreeMap::new();
        for section in sections {
            match specs.iter().find(|s| s.name == section.name) {
                Some(spec) if section.schema > spec.schema => {
                    return Err(SnapshotError::UnsupportedSchema {
                        file: file.to_path_buf(),
                        section: section.name,
                        found: section.schema,
                        supported: spec.schema,
                    });
                }
                Some(_) => {
                    kept.insert(section.name.clone(), section);
                }
                None if section.optional => {
                    tracing::warn!(
                        file = %file.display(),
                        section = %section.name,
                        "ignoring unknown optional snapshot section"
                    );
                }
                None => {
                    return Err(SnapshotError::UnknownRequiredSection {
                        file: file.to_path_buf(),
                        section: section.name,
                    })
                }
            }
        }
        for spec in specs.iter().filter(|s| !s.optional) {
            if !kept.contains_key(&spec.name) {
                return Err(SnapshotError::MissingRequiredSection {
                    file: file.to_path_buf(),
                    section: spec.name.clone(),
                });
            }
        }
        Ok(Self {
            file: file.to_path_buf(),
            sections: kept,
        })
    }

    /// A set built in memory (tests, tools), validated the same way.
    pub fn from_sections(sections: Vec<Section>, specs: &[SectionSpec]) -> Result<Self> {
        Self::validate(Path::new("<memory>"), sections, specs)
    }

    /// The file the sections came from (for error messages).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Removes and returns a section; `None` when the snapshot lacks it (an optional section:
    /// the consumer starts that part empty).
    pub fn take(&mut self, name: &str) -> Option<Section> {
        self.sections.remove(name)
    }

    pub fn get(&self, name: &str) -> Option<&Section> {
        self.sections.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sections.keys().map(String::as_str)
    }
}

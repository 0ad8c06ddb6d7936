//! One aggregate kind's instances, and the type-erased face the [`super::World`] holds them by.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::Path;

use crescent_journal::{RecordRef, StreamId};
use crescent_snapshot::Section;

use super::error::WorldError;
use crate::aggregate::{Aggregate, DomainEvent};

/// Every instance of aggregate `A`, by instance id.
#[derive(Debug, Clone, PartialEq)]
pub struct Table<A: Aggregate> {
    instances: BTreeMap<String, A>,
}

impl<A: Aggregate> Default for Table<A> {
    fn default() -> Self {
        Self {
            instances: BTreeMap::new(),
        }
    }
}

impl<A: Aggregate> Table<A> {
    pub fn get(&self, id: &str) -> Option<&A> {
        self.instances.get(id)
    }

    /// Instances in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &A)> {
        self.instances.iter()
    }

    pub fn len(&self) -> usize {
        self.instances.len()
    }

    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// Like [`Table::apply_event`], moving the event into the state.
    pub fn apply_owned_event(&mut self, id: &str, event: A::Event) {
        match self.instances.get_mut(id) {
            Some(instance) => instance.apply_owned(event),
            None => {
                let mut instance = A::default();
                instance.apply_owned(event);
                self.instances.insert(id.to_string(), instance);
            }
        }
    }

    /// Folds a decoded event into instance `id` (created empty on its first event).
    pub fn apply_event(&mut self, id: &str, event: &A::Event) {
        match self.instances.get_mut(id) {
            Some(instance) => instance.apply(event),
            None => {
                let mut instance = A::default();
                instance.apply(event);
                self.instances.insert(id.to_string(), instance);
            }
        }
    }
}

/// What the world needs of a table without knowing its aggregate type.
pub(crate) trait AnyTable: Send {
    fn kind(&self) -> &'static str;
    fn schema(&self) -> u32;
    /// (event kind, current version) of every event this aggregate writes.
    fn event_schema(&self) -> &'static [(&'static str, u16)];
    /// (event kind, oldest version it can still write) of the kinds it can write at more than
    /// one version.
    fn event_write_floor(&self) -> &'static [(&'static str, u16)];
    fn apply(&mut self, rec: &RecordRef<'_>) -> Result<(), WorldError>;
    fn encode(&self) -> Result<Vec<u8>, WorldError>;
    /// Replaces the content with a section body (`None`: the section was absent, start empty).
    fn load(&mut self, file: &Path, section: Option<Section>) -> Result<(), WorldError>;
    fn to_json(&self) -> Result<serde_json::Value, WorldError>;
    /// The record's event decoded as this aggregate's event, rendered as JSON.
    fn event_json(&self, rec: &RecordRef<'_>) -> Result<serde_json::Value, WorldError>;
    fn len(&self) -> usize;
    fn as_any(&self) -> &dyn Any;
    fn clone_box(&self) -> Box<dyn AnyTable>;
    fn eq_dyn(&self, other: &dyn AnyTable) -> bool;
    fn debug(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result;
}

impl<A: Aggregate> AnyTable for Table<A> {
    fn kind(&self) -> &'static str {
        A::KIND
    }

    fn schema(&self) -> u32 {
        A::SNAPSHOT_SCHEMA
    }

    fn event_schema(&self) -> &'static [(&'static str, u16)] {
        A::Event::schema()
    }

    fn event_write_floor(&self) -> &'static [(&'static str, u16)] {
        A::Event::write_floor()
    }

    fn apply(&mut self, rec: &RecordRef<'_>) -> Result<(), WorldError> {
        let fold = |instance: &mut A| {
            instance
                .apply_encoded(rec.event_kind, rec.event_version, rec.payload)
                .map_err(|source| WorldError::Decode {
                    seq: rec.seq,
                    stream: StreamId::new(rec.stream_kind, rec.stream_id),
                    source,
                })
        };
        match self.instances.get_mut(rec.stream_id) {
            Some(instance) => fold(instance),
            None => {
                // A new instance exists only once its first event folded.
                let mut instance = A::default();
                fold(&mut instance)?;
                self.instances.insert(rec.stream_id.to_string(), instance);
                Ok(())
            }
        }
    }

    fn encode(&self) -> Result<Vec<u8>, WorldError> {
        rmp_serde::to_vec_named(&self.instances).map_err(|e| WorldError::SectionEncode {
            section: A::KIND.to_string(),
            reason: e.to_string(),
        })
    }

    fn load(&mut self, file: &Path, section: Option<Section>) -> Result<(), WorldError> {
        let Some(section) = section else {
            self.instances.clear();
            return Ok(());
        };
        let fail = |reason: String| WorldError::SectionDecode {
            file: file.to_path_buf(),
            section: A::KIND.to_string(),
            reason,
        };
        // Newer schemas were refused by the snapshot reader. An older one would need a
        // snapshot upcaster, which no aggregate has yet: refuse rather than misread it.
        if section.schema != A::SNAPSHOT_SCHEMA {
            return Err(fail(format!(
                "schema {} cannot be read by this binary (it reads schema {})",
                section.schema,
                A::SNAPSHOT_SCHEMA
            )));
        }
        self.instances = rmp_serde::from_slice(&section.body).map_err(|e| fail(e.to_string()))?;
        Ok(())
    }

    fn to_json(&self) -> Result<serde_json::Value, WorldError> {
        serde_json::to_value(&self.instances).map_err(|e| WorldError::Json {
            kind: A::KIND.to_string(),
            reason: e.to_string(),
        })
    }

    fn event_json(&self, rec: &RecordRef<'_>) -> Result<serde_json::Value, WorldError> {
        let event =
            A::Event::decode(rec.event_kind, rec.event_version, rec.payload).map_err(|source| {
                WorldError::Decode {
                    seq: rec.seq,
                    stream: StreamId::new(rec.stream_kind, rec.stream_id),
                    source,
                }
            })?;
        let data = serde_json::to_value(&event).map_err(|e| WorldError::Json {
            kind: event.kind().to_string(),
            reason: e.to_string(),
        })?;
        Ok(serde_json::json!({
            "kind": event.kind(),
            "version": event.version(),
            "data": data,
        }))
    }

    fn len(&self) -> usize {
        self.instances.len()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn clone_box(&self) -> Box<dyn AnyTable> {
        Box::new(self.clone())
    }

    fn eq_dyn(&self, other: &dyn AnyTable) -> bool {
        other
            .as_any()
            .downcast_ref::<Table<A>>()
            .is_some_and(|o| o == self)
    }

    fn debug(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

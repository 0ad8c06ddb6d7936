//! The `WeightUnits` aggregate: the affinity units of one committed revision (unit ids, member
//! keys, bytes), journaled beside its `WeightRevision` and never inside it.
//!
//! Revision metadata keeps only the affinity count and digest (metadata stores no tensors or
//! payload keys: docs/weights.md, "WeightUnits"), but every migration round plans whole units, and
//! after a restart or failover the driver must plan from the same units without reading the
//! manifest. So the units are a separate record, one per revision (instance id = the revision's
//! stream id), recorded once before the import commit publishes READY and forgotten when the
//! revision is deleted. Recording checks the units against the digest the commit carries, so the
//! record is exactly what the immutable summary describes.

use serde::{Deserialize, Serialize};

use crescent_actors::{Aggregate, Ctx};

use crate::error::WeightError;
use crate::planner::{affinity_digest, AffinityUnit};

/// Stream kind in the journal and section name in snapshots.
pub const STREAM_KIND: &str = "weight_units";

/// Most units one revision may record (a bound on one journal record's size).
pub const MAX_UNITS: usize = 1_000_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WeightUnitsCommand {
    /// Records the units of a revision about to be committed. The same units again are a
    /// no-op (a retried commit); other units are CONFLICT (the summary is immutable).
    Record {
        units: Vec<AffinityUnit>,
        /// The affinity digest the commit declares; the units must hash to it.
        affinity_digest: String,
    },
    /// Drops the record (the revision was deleted). A no-op when there is none.
    Forget,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitsRecorded {
    pub units: Vec<AffinityUnit>,
    pub affinity_digest: String,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitsForgotten {
    pub at_ms: i64,
}

crescent_actors::domain_events! {
    /// Version history: every kind is at v1.
    #[derive(Debug, Clone, PartialEq)]
    pub enum WeightUnitsEvent for STREAM_KIND {
        UnitsRecorded(UnitsRecorded): UNITS_RECORDED = "weight_units_recorded", version 1;
        UnitsForgotten(UnitsForgotten): UNITS_FORGOTTEN = "weight_units_forgotten", version 1;
    }
}

/// The units of one revision, or nothing (never recorded, or forgotten at deletion).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WeightUnits {
    units: Option<Vec<AffinityUnit>>,
    affinity_digest: Option<String>,
}

impl WeightUnits {
    pub fn units(&self) -> Option<&[AffinityUnit]> {
        self.units.as_deref()
    }

    pub fn affinity_digest(&self) -> Option<&str> {
        self.affinity_digest.as_deref()
    }

    fn decide_record(
        &self,
        units: &[AffinityUnit],
        digest: &str,
        now: i64,
    ) -> Result<Vec<WeightUnitsEvent>, WeightError> {
        if units.len() > MAX_UNITS {
            return Err(WeightError::InvalidArgument {
                field: "affinity_units",
                reason: format!("{} units; at most {MAX_UNITS}", units.len()),
            });
        }
        let actual = affinity_digest(units);
        if actual != digest {
            return Err(WeightError::InvalidArgument {
                field: "affinity_units",
                reason: format!("the units hash to {actual}, the commit declares {digest}"),
            });
        }
        if let Some(recorded) = &self.affinity_digest {
            if recorded == digest {
                return Ok(Vec::new());
            }
            return Err(WeightError::Conflict {
                what: "affinity units",
                id: recorded.clone(),
                reason: format!("already recorded with digest {recorded}, not {digest}"),
            });
        }
        Ok(vec![WeightUnitsEvent::UnitsRecorded(UnitsRecorded {
            units: units.to_vec(),
            affinity_digest: digest.to_string(),
            at_ms: now,
        })])
    }
}

impl Aggregate for WeightUnits {
    const KIND: &'static str = STREAM_KIND;
    const SNAPSHOT_SCHEMA: u32 = 1;

    type Command = WeightUnitsCommand;
    type Event = WeightUnitsEvent;
    type Error = WeightError;

    fn decide(
        &self,
        cmd: &WeightUnitsCommand,
        ctx: &Ctx,
    ) -> Result<Vec<WeightUnitsEvent>, WeightError> {
        match cmd {
            WeightUnitsCommand::Record {
                units,
                affinity_digest,
            } => self.decide_record(units, affinity_digest, ctx.now_ms),
            WeightUnitsCommand::Forget => Ok(if self.units.is_some() {
                vec![WeightUnitsEvent::UnitsForgotten(UnitsForgotten {
                    at_ms: ctx.now_ms,
                })]
            } else {
                Vec::new()
            }),
        }
    }

    fn apply(&mut self, event: &WeightUnitsEvent) {
        match event {
            WeightUnitsEvent::UnitsRecorded(e) => {
                self.units = Some(e.units.clone());
                self.affinity_digest = Some(e.affinity_digest.clone());
            }
            WeightUnitsEvent::UnitsForgotten(_) => {
                self.units = None;
                self.affinity_digest = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_actors::{DecodeError, DomainEvent, ErrorCode};

    fn ctx() -> Ctx {
        Ctx::at(1_000)
    }

    fn unit(id: &str, keys: &[&str], bytes: u64) -> AffinityUnit {
        AffinityUnit {
            unit_id: id.into(),
            member_keys: keys.iter().map(|k| k.to_string()).collect(),
            bytes,
        }
    }

    fn record(units: &[AffinityUnit]) -> WeightUnitsCommand {
        WeightUnitsCommand::Record {
            units: units.to_vec(),
            affinity_digest: affinity_digest(units),
        }
    }

    fn run(state: &mut WeightUnits, cmd: &WeightUnitsCommand) -> Vec<WeightUnitsEvent> {
        let events = state.decide(cmd, &ctx()).expect("accepted");
        for e in &events {
            // Every event survives its own encoding (what replay applies).
            let back = WeightUnitsEvent::decode(e.kind(), e.version(), &e.encode()).unwrap();
            assert_eq!(&back, e);
            state.apply(&back);
        }
        events
    }

    #[test]
    fn records_once_and_repeats_as_no_op() {
        let units = vec![unit("a", &["k/0"], 10), unit("b", &["k/1", "k/2"], 30)];
        let mut s = WeightUnits::default();
        assert_eq!(run(&mut s, &record(&units)).len(), 1);
        assert_eq!(s.units(), Some(units.as_slice()));
        assert!(run(&mut s, &record(&units)).is_empty());
    }

    #[test]
    fn other_units_conflict_and_a_wrong_digest_is_refused() {
        let units = vec![unit("a", &["k/0"], 10)];
        let mut s = WeightUnits::default();
        let wrong = WeightUnitsCommand::Record {
            units: units.clone(),
            affinity_digest: "00".repeat(32),
        };
        let e = s.decide(&wrong, &ctx()).unwrap_err();
        assert_eq!(e.code().as_str(), "INVALID_ARGUMENT");
        run(&mut s, &record(&units));
        let other = vec![unit("a", &["k/0"], 11)];
        assert_eq!(
            s.decide(&record(&other), &ctx()).unwrap_err().code(),
            ErrorCode::Conflict
        );
    }

    #[test]
    fn forget_clears_and_repeats_as_no_op() {
        let units = vec![unit("a", &["k/0"], 10)];
        let mut s = WeightUnits::default();
        assert!(run(&mut s, &WeightUnitsCommand::Forget).is_empty());
        run(&mut s, &record(&units));
        assert_eq!(run(&mut s, &WeightUnitsCommand::Forget).len(), 1);
        assert_eq!(s, WeightUnits::default());
        assert!(run(&mut s, &WeightUnitsCommand::Forget).is_empty());
    }

    /// The journal form is pinned: journals of earlier builds must replay
    /// (docs/architecture.md, "Aggregates"), and the schema is what the HA handshake compares
    /// (docs/ha.md, "Event versions in a mixed pair").
    #[test]
    fn the_schema_and_the_journal_form_of_every_kind_are_pinned() {
        assert_eq!(
            WeightUnitsEvent::schema(),
            &[("weight_units_recorded", 1), ("weight_units_forgotten", 1)]
        );
        let units = [unit("u1", &["a", "b"], 7)];
        let events = [
            WeightUnitsEvent::UnitsRecorded(UnitsRecorded {
                units: units.to_vec(),
                affinity_digest: affinity_digest(&units),
                at_ms: 3,
            }),
            WeightUnitsEvent::UnitsForgotten(UnitsForgotten { at_ms: 4 }),
        ];
        crescent_actors::testing::assert_journal_form(
            &events,
            &[
                ("weight_units_recorded", 1, "939193a2753192a161a16207d9406461393833313238323964323563376332613564333062353934343434613932313832356634353861323565353238656264383432373939633062633037663603"),
                ("weight_units_forgotten", 1, "9104"),
            ],
        );
    }

    #[test]
    fn unknown_versions_fail_closed() {
        let e = WeightUnitsEvent::decode(UNITS_RECORDED, 2, &[]).unwrap_err();
        assert!(matches!(e, DecodeError::UnsupportedVersion { .. }), "{e:?}");
    }
}

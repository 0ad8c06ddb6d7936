//! What a crescentd crash test knows about segments, from the answers it got.
//!
//! An acknowledged (200) mount must survive every crash until an acknowledged unmount; an
//! acknowledged unmount must never be undone. A request without a usable answer may or may not
//! have taken effect: its segment is *uncertain* until the next recovered listing settles it,
//! after which it is held to that outcome like any acknowledged one (recovery has decided it
//! for good). Segment ids are never reused, so every segment's history is unambiguous.

use std::collections::BTreeMap;

use crate::crescentd::{ListedSegment, Outcome, SegmentListing};

/// What a mount asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountRequest {
    pub owner_id: String,
    pub size: u64,
    /// The round in which it was sent.
    pub round: u32,
}

/// Why a segment must be absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absence {
    /// Its unmount was acknowledged in this round.
    UnmountAcked(u32),
    /// It was uncertain and the recovered listing of this round did not hold it.
    SettledAbsent(u32),
}

/// Counters for the test's summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelStats {
    pub acked_mounts: u64,
    pub acked_unmounts: u64,
    pub unanswered: u64,
    pub settled_present: u64,
    pub settled_absent: u64,
}

/// The expected state of every segment the test ever asked about.
#[derive(Debug, Default)]
pub struct SegmentModel {
    present: BTreeMap<String, MountRequest>,
    absent: BTreeMap<String, Absence>,
    uncertain: BTreeMap<String, MountRequest>,
    unmounting: BTreeMap<String, MountRequest>,
    violations: Vec<String>,
    pub stats: ModelStats,
}

impl SegmentModel {
    /// Records how a mount of the fresh segment `segment_id` ended.
    pub fn record_mount(&mut self, segment_id: &str, request: MountRequest, outcome: &Outcome) {
        match outcome {
            Outcome::Acked => {
                self.stats.acked_mounts += 1;
                self.present.insert(segment_id.to_string(), request);
            }
            Outcome::Rejected { status, error } if !error.retryable => {
                self.violations.push(format!(
                    "round {}: mount of fresh segment {segment_id} was rejected with {status} \
                     {} ({})",
                    request.round, error.code, error.message
                ));
            }
            Outcome::Rejected { .. } | Outcome::Unknown(_) => {
                self.stats.unanswered += 1;
                self.uncertain.insert(segment_id.to_string(), request);
            }
        }
    }

    /// Picks a segment that must be mounted for an unmount, and marks it as being unmounted.
    /// `pick` chooses an index below the number of candidates.
    pub fn take_unmount_candidate(&mut self, pick: impl FnOnce(usize) -> usize) -> Option<String> {
        if self.present.is_empty() {
            return None;
        }
        let at = pick(self.present.len()).min(self.present.len() - 1);
        let id = self.present.keys().nth(at).cloned()?;
        let request = self.present.remove(&id).expect("key just listed");
        self.unmounting.insert(id.clone(), request);
        Some(id)
    }

    /// Records how the unmount of a segment from [`SegmentModel::take_unmount_candidate`]
    /// ended.
    pub fn record_unmount(&mut self, segment_id: &str, round: u32, outcome: &Outcome) {
        let Some(request) = self.unmounting.remove(segment_id) else {
            self.violations.push(format!(
                "test bug: unmount of {segment_id} was not taken from the model"
            ));
            return;
        };
        match outcome {
            Outcome::Acked => {
                self.stats.acked_unmounts += 1;
                self.absent
                    .insert(segment_id.to_string(), Absence::UnmountAcked(round));
            }
            Outcome::Rejected { status, error } if !error.retryable => {
                self.violations.push(format!(
                    "round {round}: unmount of segment {segment_id} (mount acknowledged or \
                     settled in round {}, owner {}) was rejected with {status} {} ({}): the \
                     acknowledged mount was lost",
                    request.round, request.owner_id, error.code, error.message
                ));
            }
            Outcome::Rejected { .. } | Outcome::Unknown(_) => {
                self.stats.unanswered += 1;
                self.uncertain.insert(segment_id.to_string(), request);
            }
        }
    }

    /// Violations seen while recording answers (unexpected rejections).
    pub fn take_violations(&mut self) -> Vec<String> {
        std::mem::take(&mut self.violations)
    }

    /// Segments expected to be listed.
    pub fn expected_present(&self) -> usize {
        self.present.len()
    }

    /// Checks a recovered server's listing (taken in `round`) against everything acknowledged,
    /// then settles every uncertain segment to what the listing shows. Returns every violation,
    /// each naming its segment.
    pub fn check_recovered(&mut self, listing: &SegmentListing, round: u32) -> Result<(), String> {
        let mut violations = self.take_violations();
        if !self.unmounting.is_empty() {
            violations.push(format!(
                "test bug: {} unmounts still in flight while checking",
                self.unmounting.len()
            ));
        }
        let mut listed: BTreeMap<&str, &ListedSegment> = BTreeMap::new();
        for s in &listing.segments {
            if listed.insert(s.segment_id.as_str(), s).is_some() {
                violations.push(format!("segment {} is listed twice", s.segment_id));
            }
        }
        for (id, req) in &self.present {
            match listed.get(id.as_str()) {
                None => violations.push(format!(
                    "acknowledged mount of segment {id} (owner {}, size {}, round {}) is missing \
                     after the restart of round {round}",
                    req.owner_id, req.size, req.round
                )),
                Some(s) => check_attributes(id, req, s, &mut violations),
            }
        }
        for (id, why) in &self.absent {
            if listed.contains_key(id.as_str()) {
                violations.push(format!(
                    "segment {id} must be absent ({why:?}) but is listed after the restart of \
                     round {round}"
                ));
            }
        }
        for id in listed.keys() {
            let known = self.present.contains_key(*id)
                || self.absent.contains_key(*id)
                || self.uncertain.contains_key(*id);
            if !known {
                violations.push(format!(
                    "segment {id} is listed after the restart of round {round} but was never \
                     mounted by this test"
                ));
            }
        }
        for (id, req) in std::mem::take(&mut self.uncertain) {
            match listed.get(id.as_str()) {
                Some(s) => {
                    check_attributes(&id, &req, s, &mut violations);
                    self.stats.settled_present += 1;
                    self.present.insert(id, req);
                }
                None => {
                    self.stats.settled_absent += 1;
                    self.absent.insert(id, Absence::SettledAbsent(round));
                }
            }
        }
        if violations.is_empty() {
            return Ok(());
        }
        let total = violations.len();
        violations.truncate(25);
        Err(format!(
            "{total} violation(s) after the restart of round {round}:\n  {}",
            violations.join("\n  ")
        ))
    }
}

fn check_attributes(
    id: &str,
    req: &MountRequest,
    listed: &ListedSegment,
    violations: &mut Vec<String>,
) {
    if listed.owner_id != req.owner_id || listed.size != req.size {
        violations.push(format!(
            "segment {id} is listed with owner {} size {}, but was mounted (round {}) with owner \
             {} size {}",
            listed.owner_id, listed.size, req.round, req.owner_id, req.size
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crescentd::ApiError;

    fn req(round: u32) -> MountRequest {
        MountRequest {
            owner_id: "o".into(),
            size: 10,
            round,
        }
    }

    fn listed(ids: &[&str]) -> SegmentListing {
        SegmentListing {
            segments: ids
                .iter()
                .map(|id| ListedSegment {
                    segment_id: id.to_string(),
                    owner_id: "o".into(),
                    base: 0,
                    size: 10,
                })
                .collect(),
        }
    }

    #[test]
    fn a_lost_acknowledged_mount_is_named() {
        let mut m = SegmentModel::default();
        m.record_mount("a", req(1), &Outcome::Acked);
        m.record_mount("b", req(1), &Outcome::Acked);
        let err = m.check_recovered(&listed(&["a"]), 2).unwrap_err();
        assert!(err.contains("segment b"), "{err}");
    }

    #[test]
    fn an_undone_unmount_and_a_phantom_are_named() {
        let mut m = SegmentModel::default();
        m.record_mount("a", req(1), &Outcome::Acked);
        let id = m.take_unmount_candidate(|_| 0).unwrap();
        m.record_unmount(&id, 1, &Outcome::Acked);
        let err = m.check_recovered(&listed(&["a", "zz"]), 2).unwrap_err();
        assert!(err.contains("segment a must be absent"), "{err}");
        assert!(err.contains("segment zz"), "{err}");
    }

    #[test]
    fn uncertain_segments_settle_and_are_then_held_to_it() {
        let mut m = SegmentModel::default();
        m.record_mount("u1", req(1), &Outcome::Unknown("reset".into()));
        m.record_mount("u2", req(1), &Outcome::Unknown("reset".into()));
        m.check_recovered(&listed(&["u1"]), 2).unwrap();
        assert_eq!(m.stats.settled_present, 1);
        assert_eq!(m.stats.settled_absent, 1);
        let err = m.check_recovered(&listed(&["u2"]), 3).unwrap_err();
        assert!(err.contains("segment u1"), "{err}");
        assert!(err.contains("segment u2"), "{err}");
    }

    #[test]
    fn a_not_found_unmount_of_an_acknowledged_mount_is_a_violation() {
        let mut m = SegmentModel::default();
        m.record_mount("a", req(1), &Outcome::Acked);
        let id = m.take_unmount_candidate(|_| 0).unwrap();
        let not_found = Outcome::Rejected {
            status: 404,
            error: ApiError {
                code: "NOT_FOUND".into(),
                message: "segment \"a\" not found".into(),
                retryable: false,
            },
        };
        m.record_unmount(&id, 2, &not_found);
        let err = m.check_recovered(&listed(&[]), 3).unwrap_err();
        assert!(err.contains("segment a"), "{err}");
    }
}

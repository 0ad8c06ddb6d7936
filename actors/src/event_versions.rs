//! Which version of each event kind a node writes: the event version policy.
//!
//! A build reads every version of a kind up to its newest, and may be able to write a kind at
//! older versions too (its write floor, [`DomainEvent::write_floor`]). An HA active writes, for
//! each such kind, the newest version its standby has said it reads (docs/ha.md, "Event
//! versions in a mixed pair"): it starts at the write floor, because a standby of the previous
//! release may be the next to join or to take over, and raises a kind when a standby that reads
//! the newer version follows. It never lowers one: records already written keep their version,
//! so a standby that cannot read what was written is refused instead. A standalone node writes
//! the newest versions.
//!
//! [`EventVersionPolicy`] is the pure decision; [`EventVersions`] the handle the runtime's
//! writers and the replication listener share.
//!
//! [`DomainEvent::write_floor`]: crate::aggregate::DomainEvent::write_floor

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// The versions of one event kind: what this node writes now, and the range it can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindVersions {
    pub writes: u16,
    pub oldest: u16,
    pub newest: u16,
}

/// Where a policy starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// Every kind at its newest version (a standalone node).
    Newest,
    /// Every kind at its write floor (an HA active before a standby said what it reads).
    Floor,
}

/// One kind raised by [`EventVersionPolicy::raised_for`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    pub kind: String,
    pub from: u16,
    pub to: u16,
}

/// The version written for every event kind of a build. Pure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventVersionPolicy {
    kinds: BTreeMap<String, KindVersions>,
}

impl EventVersionPolicy {
    /// A policy over `schema` (kind, newest version) with `floors` (kind, oldest writable
    /// version; a kind not listed has only its newest). A floor above the newest is ignored.
    pub fn new(schema: &[(String, u16)], floors: &[(String, u16)], start: StartAt) -> Self {
        let kinds = schema
            .iter()
            .map(|(kind, newest)| {
                let oldest = floors
                    .iter()
                    .find(|(k, _)| k == kind)
                    .map_or(*newest, |(_, v)| (*v).min(*newest));
                let writes = match start {
                    StartAt::Newest => *newest,
                    StartAt::Floor => oldest,
                };
                let versions = KindVersions {
                    writes,
                    oldest,
                    newest: *newest,
                };
                (kind.clone(), versions)
            })
            .collect();
        Self { kinds }
    }

    /// The version written for `kind` (`None`: not a kind of this build).
    pub fn writes(&self, kind: &str) -> Option<u16> {
        self.kinds.get(kind).map(|v| v.writes)
    }

    /// The kinds this build can write at more than one version, with what it writes now.
    pub fn negotiable(&self) -> impl Iterator<Item = (&str, KindVersions)> + '_ {
        self.kinds
            .iter()
            .filter(|(_, v)| v.oldest < v.newest)
            .map(|(k, v)| (k.as_str(), *v))
    }

    /// Whether every kind is written at one version only (nothing to negotiate).
    pub fn is_fixed(&self) -> bool {
        self.negotiable().next().is_none()
    }

    /// Whether a reader that decodes `reader` (kind, newest version it reads) can read what this
    /// policy writes now; the error names the first kind it cannot.
    pub fn check_reader(&self, reader: &[(String, u16)]) -> Result<(), String> {
        for (kind, v) in &self.kinds {
            match reader.iter().find(|(k, _)| k == kind) {
                Some((_, theirs)) if *theirs >= v.writes => {}
                Some((_, theirs)) => {
                    return Err(format!(
                        "event {kind} is written at v{}, the standby replays up to v{theirs}: \
                         upgrade the standby first",
                        v.writes
                    ))
                }
                None => {
                    return Err(format!(
                        "event {kind} v{} is unknown to the standby: upgrade the standby first",
                        v.writes
                    ))
                }
            }
        }
        Ok(())
    }

    /// The policy once a reader of `reader` follows: each kind at the newest version both this
    /// build writes and the reader reads, never below what it writes now. The caller checked
    /// the reader first ([`EventVersionPolicy::check_reader`]).
    pub fn raised_for(&self, reader: &[(String, u16)]) -> (Self, Vec<Raised>) {
        let mut next = self.clone();
        let mut raised = Vec::new();
        for (kind, v) in &mut next.kinds {
            let Some((_, theirs)) = reader.iter().find(|(k, _)| k == kind) else {
                continue;
            };
            let to = (*theirs).min(v.newest).max(v.writes);
            if to != v.writes {
                raised.push(Raised {
                    kind: kind.clone(),
                    from: v.writes,
                    to,
                });
                v.writes = to;
            }
        }
        (next, raised)
    }
}

/// The policy shared by a node's writers (the actor runtime) and its replication listener.
/// Cheap to clone; a policy with nothing to negotiate is never locked.
#[derive(Debug, Clone)]
pub struct EventVersions {
    fixed: bool,
    policy: Arc<RwLock<EventVersionPolicy>>,
}

impl EventVersions {
    pub fn new(policy: EventVersionPolicy) -> Self {
        Self {
            fixed: policy.is_fixed(),
            policy: Arc::new(RwLock::new(policy)),
        }
    }

    /// The version to write `kind` at; `None`: its current version (nothing to negotiate).
    pub fn writes(&self, kind: &str) -> Option<u16> {
        if self.fixed {
            return None;
        }
        self.read().writes(kind)
    }

    /// A copy of the policy now (status and metrics).
    pub fn policy(&self) -> EventVersionPolicy {
        self.read().clone()
    }

    /// See [`EventVersionPolicy::check_reader`].
    pub fn check_reader(&self, reader: &[(String, u16)]) -> Result<(), String> {
        self.read().check_reader(reader)
    }

    /// A reader of `reader` now follows: checks it against the policy and raises the policy for
    /// it in one step, so no other follower's raise can come between (see
    /// [`EventVersionPolicy::raised_for`]). Returns the kinds raised.
    pub fn follow(&self, reader: &[(String, u16)]) -> Result<Vec<Raised>, String> {
        let mut policy = self.policy.write().unwrap_or_else(|p| p.into_inner());
        policy.check_reader(reader)?;
        let (next, raised) = policy.raised_for(reader);
        *policy = next;
        Ok(raised)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, EventVersionPolicy> {
        self.policy.read().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[(&str, u16)]) -> Vec<(String, u16)> {
        items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// `a` only at v1; `b` written at v2 or v3; `c` at v1 through v4.
    fn policy(start: StartAt) -> EventVersionPolicy {
        let schema = list(&[("a", 1), ("b", 3), ("c", 4)]);
        EventVersionPolicy::new(&schema, &list(&[("b", 2), ("c", 1)]), start)
    }

    #[test]
    fn a_policy_starts_at_the_newest_or_at_the_floor() {
        let newest = policy(StartAt::Newest);
        assert_eq!(
            [newest.writes("a"), newest.writes("b"), newest.writes("c")],
            [Some(1), Some(3), Some(4)]
        );
        let floor = policy(StartAt::Floor);
        assert_eq!(
            [floor.writes("a"), floor.writes("b"), floor.writes("c")],
            [Some(1), Some(2), Some(1)]
        );
        assert_eq!(floor.writes("d"), None);
        let kinds: Vec<_> = floor.negotiable().map(|(k, _)| k).collect();
        assert_eq!(kinds, ["b", "c"]);
        assert!(!floor.is_fixed());
        let fixed = EventVersionPolicy::new(&list(&[("a", 2)]), &[], StartAt::Floor);
        assert!(fixed.is_fixed());
        assert_eq!(fixed.writes("a"), Some(2));
    }

    #[test]
    fn a_reader_of_the_previous_release_is_accepted_and_keeps_the_floor() {
        let floor = policy(StartAt::Floor);
        let old = list(&[("a", 1), ("b", 2), ("c", 1)]);
        assert_eq!(floor.check_reader(&old), Ok(()));
        let (next, raised) = floor.raised_for(&old);
        assert_eq!(next, floor);
        assert!(raised.is_empty());
    }

    #[test]
    fn a_reader_of_newer_versions_raises_each_kind_to_what_both_know() {
        let floor = policy(StartAt::Floor);
        // reads c up to v3 only, b beyond what this build writes
        let reader = list(&[("a", 1), ("b", 9), ("c", 3)]);
        let (next, raised) = floor.raised_for(&reader);
        assert_eq!(
            [next.writes("a"), next.writes("b"), next.writes("c")],
            [Some(1), Some(3), Some(3)]
        );
        assert_eq!(
            raised,
            [
                Raised {
                    kind: "b".into(),
                    from: 2,
                    to: 3
                },
                Raised {
                    kind: "c".into(),
                    from: 1,
                    to: 3
                }
            ]
        );
    }

    #[test]
    fn a_raised_kind_is_never_lowered_and_an_older_reader_is_then_refused() {
        let (raised, _) = policy(StartAt::Floor).raised_for(&list(&[("b", 3), ("c", 4)]));
        let old = list(&[("a", 1), ("b", 2), ("c", 4)]);
        let err = raised.check_reader(&old).unwrap_err();
        assert!(err.contains("event b is written at v3"), "{err}");
        assert!(err.contains("up to v2"), "{err}");
        let (same, changes) = raised.raised_for(&old);
        assert_eq!(same, raised);
        assert!(changes.is_empty());
    }

    #[test]
    fn a_reader_missing_a_kind_or_below_the_floor_is_refused() {
        let floor = policy(StartAt::Floor);
        let err = floor
            .check_reader(&list(&[("b", 2), ("c", 1)]))
            .unwrap_err();
        assert!(err.contains("event a v1 is unknown"), "{err}");
        let err = floor
            .check_reader(&list(&[("a", 1), ("b", 1), ("c", 1)]))
            .unwrap_err();
        assert!(err.contains("event b is written at v2"), "{err}");
    }

    #[test]
    fn the_shared_handle_checks_and_raises_in_one_step() {
        let versions = EventVersions::new(policy(StartAt::Floor));
        assert_eq!(versions.writes("b"), Some(2));
        assert!(versions
            .follow(&list(&[("a", 1), ("b", 1), ("c", 1)]))
            .is_err());
        assert_eq!(
            versions.writes("b"),
            Some(2),
            "a refused reader changes nothing"
        );
        let raised = versions
            .follow(&list(&[("a", 1), ("b", 3), ("c", 1)]))
            .unwrap();
        assert_eq!(raised.len(), 1);
        assert_eq!(versions.writes("b"), Some(3));
        assert!(versions
            .check_reader(&list(&[("a", 1), ("b", 2), ("c", 1)]))
            .is_err());
        let fixed = EventVersions::new(EventVersionPolicy::new(
            &list(&[("a", 1)]),
            &[],
            StartAt::Floor,
        ));
        assert_eq!(
            fixed.writes("a"),
            None,
            "nothing to negotiate: never locked"
        );
    }
}

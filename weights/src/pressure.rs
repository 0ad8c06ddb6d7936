//! The AUTO demotion decision under memory pressure (docs/weights.md, "Run-time checks"):
//! how many memory bytes must be released and which candidates one reconciliation round
//! demotes.
//! Pure: crescentd passes the store's usage and the candidates it collected.

use crate::planner::{select_auto_candidates, AutoCandidate};

/// The store's memory usage as the eviction sees it (docs/weights.md, "Run-time checks").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryUsage {
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    /// The store's high watermark, a fraction of the capacity in (0, 1].
    pub high_watermark: f64,
}

impl MemoryUsage {
    /// The bytes above the high watermark, plus one so that releasing them brings usage
    /// strictly below it; `None` below the watermark or without capacity (no pressure).
    pub fn bytes_over_watermark(&self) -> Option<u64> {
        if self.capacity_bytes == 0 {
            return None;
        }
        let limit = (self.high_watermark * self.capacity_bytes as f64).floor() as u64;
        (self.used_bytes >= limit).then(|| self.used_bytes - limit + 1)
    }
}

/// The revisions one round demotes one step colder: none without pressure; otherwise the
/// AUTO order (least recent access, most releasable HOT bytes, identity) until the bytes
/// over the watermark are releasable or `max_per_round` are picked.
pub fn plan_auto_demotions(
    usage: MemoryUsage,
    candidates: Vec<AutoCandidate>,
    max_per_round: usize,
) -> Vec<AutoCandidate> {
    match usage.bytes_over_watermark() {
        Some(needed) => select_auto_candidates(candidates, needed, max_per_round),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::RevisionIdentity;

    fn usage(used: u64) -> MemoryUsage {
        MemoryUsage {
            used_bytes: used,
            capacity_bytes: 1000,
            high_watermark: 0.9,
        }
    }

    fn candidate(resource: &str, last_access_ms: i64, hot: u64) -> AutoCandidate {
        AutoCandidate {
            identity: RevisionIdentity::new("ns", resource, "main", 1),
            last_access_ms,
            releasable_hot_bytes: hot,
        }
    }

    fn names(picked: &[AutoCandidate]) -> Vec<&str> {
        picked
            .iter()
            .map(|c| c.identity.resource_id.as_str())
            .collect()
    }

    #[test]
    fn pressure_starts_at_the_high_watermark() {
        assert_eq!(usage(899).bytes_over_watermark(), None);
        assert_eq!(usage(900).bytes_over_watermark(), Some(1));
        assert_eq!(usage(1000).bytes_over_watermark(), Some(101));
        let empty = MemoryUsage {
            capacity_bytes: 0,
            ..usage(10)
        };
        assert_eq!(empty.bytes_over_watermark(), None);
    }

    #[test]
    fn nothing_is_demoted_below_the_watermark() {
        let all = vec![candidate("a", 1, 500), candidate("b", 2, 500)];
        assert!(plan_auto_demotions(usage(899), all, 8).is_empty());
    }

    #[test]
    fn the_least_recently_used_go_first_until_enough_is_releasable() {
        let all = vec![
            candidate("recent", 30, 400),
            candidate("old", 10, 50),
            candidate("older-small", 5, 20),
            candidate("old-big", 10, 300),
        ];
        // 950 used: 51 bytes over; the two oldest release 20 + 300 (ties: more bytes first).
        let picked = plan_auto_demotions(usage(950), all.clone(), 8);
        assert_eq!(names(&picked), ["older-small", "old-big"]);
        // The same input in another order decides the same.
        let mut reversed = all;
        reversed.reverse();
        assert_eq!(plan_auto_demotions(usage(950), reversed, 8), picked);
    }

    #[test]
    fn a_round_is_bounded_and_skips_revisions_with_nothing_to_release() {
        let all = vec![
            candidate("cold", 1, 0),
            candidate("a", 2, 10),
            candidate("b", 3, 10),
            candidate("c", 4, 10),
        ];
        let picked = plan_auto_demotions(usage(1000), all, 2);
        assert_eq!(names(&picked), ["a", "b"]);
    }
}

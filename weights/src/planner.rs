//! The side-effect-free residency planner: which whole affinity units are HOT for a target,
//! which moves a migration makes, how they are cut into bounded rounds, and the AUTO candidate
//! order. Everything here is a pure, deterministic function of its arguments.

use std::cmp::Ordering;
use std::ops::Range;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::WeightError;
use crate::identity::RevisionIdentity;
use crate::policy::{MigrationLimits, ResidencyTarget};

/// A tensor or alias group: the payload objects that move together and are never split.
/// The summary is derived from the manifest; metadata keeps only its count and digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AffinityUnit {
    pub unit_id: String,
    /// The payload object keys of the unit.
    pub member_keys: Vec<String>,
    /// Logical payload bytes of the unit.
    pub bytes: u64,
}

impl AffinityUnit {
    pub fn members(&self) -> u64 {
        self.member_keys.len() as u64
    }
}

fn length_prefixed(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

/// SHA-256 over the units in the given (canonical, manifest) order: each unit id
/// length-prefixed, its member count and length-prefixed keys, then its bytes (integers u64
/// big-endian). Lowercase hex.
pub fn affinity_digest(units: &[AffinityUnit]) -> String {
    let mut hasher = Sha256::new();
    for unit in units {
        length_prefixed(&mut hasher, unit.unit_id.as_bytes());
        hasher.update(unit.members().to_be_bytes());
        for key in &unit.member_keys {
            length_prefixed(&mut hasher, key.as_bytes());
        }
        hasher.update(unit.bytes.to_be_bytes());
    }
    let digest: [u8; 32] = hasher.finalize().into();
    hex::encode(digest)
}

/// Which units are HOT under a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResidencyPlan {
    /// `hot[i]` for `units[i]`.
    pub hot: Vec<bool>,
    pub hot_bytes: u64,
    pub total_bytes: u64,
    /// `hot_bytes / total_bytes` (0 for an empty summary).
    pub observed_hot_ratio: f64,
}

impl ResidencyPlan {
    fn from_hot(units: &[AffinityUnit], hot: Vec<bool>) -> Self {
        let total_bytes: u64 = units.iter().map(|u| u.bytes).sum();
        let hot_bytes: u64 = units
            .iter()
            .zip(&hot)
            .filter(|(_, h)| **h)
            .map(|(u, _)| u.bytes)
            .sum();
        Self {
            hot,
            hot_bytes,
            total_bytes,
            observed_hot_ratio: hot_ratio(hot_bytes, total_bytes),
        }
    }
}

pub fn hot_ratio(hot_bytes: u64, total_bytes: u64) -> f64 {
    if total_bytes == 0 {
        0.0
    } else {
        hot_bytes as f64 / total_bytes as f64
    }
}

/// Summaries of at most this many units are planned exhaustively (optimal); larger ones with
/// largest-first greedy plus single add/remove/swap refinement.
pub const EXHAUSTIVE_UNITS: usize = 16;

/// The HOT set for a target: all units, none, or the MIXED selection.
pub fn plan_target(
    units: &[AffinityUnit],
    target: ResidencyTarget,
) -> Result<ResidencyPlan, WeightError> {
    target.validate()?;
    Ok(match target {
        ResidencyTarget::Hot => ResidencyPlan::from_hot(units, vec![true; units.len()]),
        ResidencyTarget::Cold => ResidencyPlan::from_hot(units, vec![false; units.len()]),
        ResidencyTarget::Mixed { hot_ratio } => plan_mixed(units, hot_ratio)?,
    })
}

/// The MIXED planner: whole units whose bytes are as close as possible to
/// `hot_ratio * total`. Ties prefer fewer hot bytes, then the lexicographically smallest set of
/// unit indexes, so the result is deterministic.
pub fn plan_mixed(units: &[AffinityUnit], hot_ratio: f64) -> Result<ResidencyPlan, WeightError> {
    crate::policy::check_ratio("mixed_hot_ratio", hot_ratio)?;
    let total: u64 = units.iter().map(|u| u.bytes).sum();
    // Twice the target, so distances stay integral: |2*hot - target2|.
    let target2 = (2.0 * hot_ratio * total as f64).round() as u128;
    let distance = |hot: u64| (2 * hot as u128).abs_diff(target2);
    let hot = if units.len() <= EXHAUSTIVE_UNITS {
        exhaustive(units, &distance)
    } else {
        greedy_refined(units, &distance)
    };
    Ok(ResidencyPlan::from_hot(units, hot))
}

/// Better by (distance, hot bytes, then index set): `Less` means `a` wins.
fn compare(a: (u128, u64, &[bool]), b: (u128, u64, &[bool])) -> Ordering {
    a.0.cmp(&b.0)
        .then(a.1.cmp(&b.1))
        // A set containing the lower index sorts first.
        .then_with(|| b.2.cmp(a.2))
}

fn exhaustive(units: &[AffinityUnit], distance: &dyn Fn(u64) -> u128) -> Vec<bool> {
    let n = units.len();
    let mut best: Vec<bool> = vec![false; n];
    let mut best_key = (distance(0), 0u64);
    let mut hot = vec![false; n];
    for mask in 1u32..(1u32 << n) {
        let mut bytes = 0u64;
        for (i, h) in hot.iter_mut().enumerate() {
            *h = mask & (1 << i) != 0;
            if *h {
                bytes += units[i].bytes;
            }
        }
        let key = (distance(bytes), bytes);
        if compare((key.0, key.1, &hot), (best_key.0, best_key.1, &best)) == Ordering::Less {
            best.clone_from(&hot);
            best_key = key;
        }
    }
    best
}

fn greedy_refined(units: &[AffinityUnit], distance: &dyn Fn(u64) -> u128) -> Vec<bool> {
    let n = units.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| units[b].bytes.cmp(&units[a].bytes).then(a.cmp(&b)));
    let mut hot = vec![false; n];
    let mut bytes = 0u64;
    for &i in &order {
        if distance(bytes + units[i].bytes) < distance(bytes) {
            hot[i] = true;
            bytes += units[i].bytes;
        }
    }
    // Refinement: the best single add, remove or swap, repeated while it strictly improves.
    // Each step strictly lowers the distance, so this terminates; n^2 per step bounds the cost.
    loop {
        let current = distance(bytes);
        let mut best: Option<(u128, u64, Option<usize>, Option<usize>)> = None;
        let mut consider = |cand: u64, add: Option<usize>, remove: Option<usize>| {
            let d = distance(cand);
            if d < current && best.is_none_or(|b| (d, cand) < (b.0, b.1)) {
                best = Some((d, cand, add, remove));
            }
        };
        for i in 0..n {
            if hot[i] {
                consider(bytes - units[i].bytes, None, Some(i));
            } else {
                consider(bytes + units[i].bytes, Some(i), None);
            }
        }
        for i in (0..n).filter(|&i| !hot[i]) {
            for j in (0..n).filter(|&j| hot[j]) {
                consider(bytes + units[i].bytes - units[j].bytes, Some(i), Some(j));
            }
        }
        let Some((_, cand, add, remove)) = best else {
            break;
        };
        if let Some(i) = add {
            hot[i] = true;
        }
        if let Some(j) = remove {
            hot[j] = false;
        }
        bytes = cand;
    }
    hot
}

/// Which way a unit moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveDirection {
    /// Create and validate memory replicas.
    Promote,
    /// Create and validate cold replicas, then release memory replicas.
    Demote,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitMove {
    pub unit: usize,
    pub direction: MoveDirection,
    pub members: u64,
    pub bytes: u64,
}

/// The moves from the actual HOT set (observed replicas, not persisted progress) to the plan:
/// promotions first (readable bytes only grow), then demotions, each in unit order.
pub fn migration_moves(
    units: &[AffinityUnit],
    actual_hot: &[bool],
    plan: &ResidencyPlan,
) -> Result<Vec<UnitMove>, WeightError> {
    if actual_hot.len() != units.len() || plan.hot.len() != units.len() {
        return Err(WeightError::invalid(
            "actual_hot",
            format!(
                "{} actual and {} planned flags for {} units",
                actual_hot.len(),
                plan.hot.len(),
                units.len()
            ),
        ));
    }
    let mv = |unit: usize, direction| UnitMove {
        unit,
        direction,
        members: units[unit].members(),
        bytes: units[unit].bytes,
    };
    let promote = (0..units.len())
        .filter(|&i| plan.hot[i] && !actual_hot[i])
        .map(|i| mv(i, MoveDirection::Promote));
    let demote = (0..units.len())
        .filter(|&i| !plan.hot[i] && actual_hot[i])
        .map(|i| mv(i, MoveDirection::Demote));
    Ok(promote.chain(demote).collect())
}

/// The next round: moves from `cursor` while the members and bytes stay within the limits, and
/// always at least one whole unit (even one larger than a limit), so a round always progresses.
/// A round never mixes promotions and demotions, so it either releases memory or it does not.
pub fn next_round(moves: &[UnitMove], cursor: usize, limits: &MigrationLimits) -> Range<usize> {
    if cursor >= moves.len() {
        return moves.len()..moves.len();
    }
    let direction = moves[cursor].direction;
    let (mut members, mut bytes) = (moves[cursor].members, moves[cursor].bytes);
    let mut end = cursor + 1;
    while end < moves.len() && moves[end].direction == direction {
        let m = members.saturating_add(moves[end].members);
        let b = bytes.saturating_add(moves[end].bytes);
        if m > limits.max_members_per_round || b > limits.max_bytes_per_round {
            break;
        }
        (members, bytes) = (m, b);
        end += 1;
    }
    cursor..end
}

/// A revision eligible for AUTO demotion (see `WeightRevision::auto_candidate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoCandidate {
    pub identity: RevisionIdentity,
    pub last_access_ms: i64,
    pub releasable_hot_bytes: u64,
}

/// Deterministic AUTO order under memory pressure: least recently accessed first, then most
/// releasable HOT bytes, then identity.
pub fn order_auto_candidates(candidates: &mut [AutoCandidate]) {
    candidates.sort_by(|a, b| {
        a.last_access_ms
            .cmp(&b.last_access_ms)
            .then(b.releasable_hot_bytes.cmp(&a.releasable_hot_bytes))
            .then_with(|| a.identity.cmp(&b.identity))
    });
}

/// The candidates one reconciliation round demotes: in AUTO order until `bytes_needed` are
/// releasable or `max_candidates` are picked (the round stays bounded).
pub fn select_auto_candidates(
    mut candidates: Vec<AutoCandidate>,
    bytes_needed: u64,
    max_candidates: usize,
) -> Vec<AutoCandidate> {
    order_auto_candidates(&mut candidates);
    let mut picked = Vec::new();
    let mut freed = 0u64;
    for c in candidates {
        if freed >= bytes_needed || picked.len() >= max_candidates {
            break;
        }
        if c.releasable_hot_bytes == 0 {
            continue;
        }
        freed = freed.saturating_add(c.releasable_hot_bytes);
        picked.push(c);
    }
    picked
}

//! Removed puts: the journaled half of the object promise for removes (docs/rebuild.md,
//! "Removes are journaled").
//!
//! Object metadata is not journaled; after a restart or failover crescentd rebuilds it from what
//! the storage owners replay. An owner learns of a remove made by another process only when the
//! release reaches it on a heartbeat answer; a crescentd that dies before then would be handed
//! the removed object back. So a remove is acknowledged only once the put ids it removed from
//! each owner's segments are journaled here; a replay entry of a remembered put id is answered
//! `Stale`, and the owner drops it. An entry is forgotten once its owner has forgotten the
//! replica: it acknowledged the release, or it completed a replay after a later start (which
//! dropped every remembered put of an earlier run), or its segments are gone.
//!
//! One instance, id [`INSTANCE_ID`]. Put ids are unique across runs (they carry the
//! incarnation), so a put id alone names what was removed.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::aggregate::{Aggregate, Ctx, ErrorCode, WireCoded};

/// Stream kind and the one instance id.
pub const STREAM_KIND: &str = "removed_puts";
pub const INSTANCE_ID: &str = "cluster";

/// Put ids removed from each owner's segments whose owner may still hold them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedPuts {
    pub by_owner: BTreeMap<String, BTreeSet<u64>>,
}

impl RemovedPuts {
    /// Every remembered put id (any owner).
    pub fn all_put_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_owner.values().flat_map(|s| s.iter().copied())
    }

    pub fn len(&self) -> usize {
        self.by_owner.values().map(BTreeSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_owner.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemovedPutsCommand {
    /// Remember put ids removed from owners' segments (owner id -> put ids).
    Remember(BTreeMap<String, Vec<u64>>),
    /// `owner` acknowledged the releases of these put ids: it forgot them.
    Settle { owner: String, put_ids: Vec<u64> },
    /// `owner` completed a replay to a run whose put ids start at `below`: it dropped every
    /// remembered put of earlier runs (they were answered `Stale`).
    SettleBelow { owner: String, below: u64 },
    /// `owner` has no segment left (expired, unmounted): it forgets its table anyway.
    DropOwner { owner: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerPutIds {
    pub owner: String,
    pub put_ids: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettledBelow {
    pub owner: String,
    pub below: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerDropped {
    pub owner: String,
}

crate::domain_events! {
    /// Version history: every kind is at v1.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum RemovedPutsEvent for STREAM_KIND {
        Removed(OwnerPutIds): pub PUTS_REMOVED = "puts_removed", version 1;
        Settled(OwnerPutIds): pub REMOVALS_SETTLED = "removals_settled", version 1;
        SettledBelow(SettledBelow): pub REMOVALS_SETTLED_BELOW = "removals_settled_below", version 1;
        OwnerDropped(OwnerDropped): pub OWNER_REMOVALS_DROPPED = "owner_removals_dropped", version 1;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemovedPutsError {
    #[error("put id 0 names no put")]
    ZeroPutId,
    #[error("an owner id must not be empty")]
    EmptyOwner,
}

impl WireCoded for RemovedPutsError {
    fn wire_code(&self) -> ErrorCode {
        match self {
            RemovedPutsError::ZeroPutId | RemovedPutsError::EmptyOwner => {
                ErrorCode::InvalidArgument
            }
        }
    }
}

impl Aggregate for RemovedPuts {
    const KIND: &'static str = STREAM_KIND;
    const SNAPSHOT_SCHEMA: u32 = 1;

    type Command = RemovedPutsCommand;
    type Event = RemovedPutsEvent;
    type Error = RemovedPutsError;

    /// Only changes are journaled: put ids already remembered, or not remembered when settled,
    /// decide to nothing (a repeat is an idempotent success).
    fn decide(
        &self,
        cmd: &RemovedPutsCommand,
        _ctx: &Ctx,
    ) -> Result<Vec<RemovedPutsEvent>, RemovedPutsError> {
        match cmd {
            RemovedPutsCommand::Remember(by_owner) => {
                let mut events = Vec::new();
                for (owner, ids) in by_owner {
                    check_owner(owner)?;
                    if ids.contains(&0) {
                        return Err(RemovedPutsError::ZeroPutId);
                    }
                    let known = self.by_owner.get(owner);
                    let new: BTreeSet<u64> = ids
                        .iter()
                        .copied()
                        .filter(|id| !known.is_some_and(|k| k.contains(id)))
                        .collect();
                    if !new.is_empty() {
                        events.push(RemovedPutsEvent::Removed(OwnerPutIds {
                            owner: owner.clone(),
                            put_ids: new.into_iter().collect(),
                        }));
                    }
                }
                Ok(events)
            }
            RemovedPutsCommand::Settle { owner, put_ids } => {
                let Some(known) = self.by_owner.get(owner) else {
                    return Ok(Vec::new());
                };
                let gone: BTreeSet<u64> = put_ids
                    .iter()
                    .copied()
                    .filter(|id| known.contains(id))
                    .collect();
                Ok(match gone.is_empty() {
                    true => Vec::new(),
                    false => vec![RemovedPutsEvent::Settled(OwnerPutIds {
                        owner: owner.clone(),
                        put_ids: gone.into_iter().collect(),
                    })],
                })
            }
            RemovedPutsCommand::SettleBelow { owner, below } => {
                let any = self
                    .by_owner
                    .get(owner)
                    .is_some_and(|k| k.range(..*below).next().is_some());
                Ok(match any {
                    true => vec![RemovedPutsEvent::SettledBelow(SettledBelow {
                        owner: owner.clone(),
                        below: *below,
                    })],
                    false => Vec::new(),
                })
            }
            RemovedPutsCommand::DropOwner { owner } => {
                Ok(match self.by_owner.contains_key(owner) {
                    true => vec![RemovedPutsEvent::OwnerDropped(OwnerDropped {
                        owner: owner.clone(),
                    })],
                    false => Vec::new(),
                })
            }
        }
    }

    fn apply(&mut self, event: &RemovedPutsEvent) {
        match event {
            RemovedPutsEvent::Removed(e) => {
                self.by_owner
                    .entry(e.owner.clone())
                    .or_default()
                    .extend(e.put_ids.iter().copied());
            }
            RemovedPutsEvent::Settled(e) => {
                if let Some(known) = self.by_owner.get_mut(&e.owner) {
                    for id in &e.put_ids {
                        known.remove(id);
                    }
                }
                self.drop_if_empty(&e.owner);
            }
            RemovedPutsEvent::SettledBelow(e) => {
                if let Some(known) = self.by_owner.get_mut(&e.owner) {
                    *known = known.split_off(&e.below);
                }
                self.drop_if_empty(&e.owner);
            }
            RemovedPutsEvent::OwnerDropped(e) => {
                self.by_owner.remove(&e.owner);
            }
        }
    }
}

impl RemovedPuts {
    fn drop_if_empty(&mut self, owner: &str) {
        if self.by_owner.get(owner).is_some_and(BTreeSet::is_empty) {
            self.by_owner.remove(owner);
        }
    }
}

fn check_owner(owner: &str) -> Result<(), RemovedPutsError> {
    match owner.is_empty() {
        true => Err(RemovedPutsError::EmptyOwner),
        false => Ok(()),
    }
}

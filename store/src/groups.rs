//! Managed groups (weight revisions): listing a group's members for the import commit and the
//! deletion workflow, and the one removal path allowed to touch them.
//!
//! Ordinary eviction, quota eviction, single-key remove and prefix remove skip every member
//! of a managed group (see `set_group_guard`); each skip is reported to the hook installed
//! with [`ObjectDirectory::set_managed_skip_hook`] so the server can count it.

use std::sync::Arc;

use crescent_wire::store::{DataType, ObjectId};

use crate::directory::ObjectDirectory;
use crate::entry::{Entry, GroupId};
use crate::error::StoreError;
use crate::identity::ObjectName;

/// Called with the guarded operation (`evict`, `quota_evict`, `remove`, `prefix_remove`) and
/// how many managed members it skipped.
pub type ManagedSkipHook = Arc<dyn Fn(&'static str, u64) + Send + Sync>;

/// Names a managed group for errors (the weights layer's group id, e.g. `wgrp-...`).
pub type GroupNamer = Arc<dyn Fn(GroupId) -> Option<String> + Send + Sync>;

/// One member of a managed group, as the directory knows it (metadata, never bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupObject {
    pub tenant: String,
    pub domain: Option<String>,
    pub key: String,
    /// Size of the complete version (of the put in progress when there is none).
    pub size: u64,
    pub data_type: DataType,
    /// A complete version exists and no put of it is in progress.
    pub complete: bool,
    /// At least one complete replica (all replicas here are memory replicas).
    pub memory_readable: bool,
    pub hard_pinned: bool,
}

fn group_of(e: &Entry) -> Option<GroupId> {
    e.group.or_else(|| e.pending.as_ref().and_then(|p| p.group))
}

impl ObjectDirectory {
    /// Installs (or clears) the counter of managed-group skips.
    pub fn set_managed_skip_hook(&self, hook: Option<ManagedSkipHook>) {
        *self.managed_skips.write().expect("skip hook lock") = hook;
    }

    pub(crate) fn managed_skipped(&self, operation: &'static str, members: u64) {
        if members == 0 {
            return;
        }
        if let Some(hook) = self.managed_skips.read().expect("skip hook lock").as_ref() {
            hook(operation, members);
        }
    }

    /// Installs (or clears) what names a managed group in a refusal.
    pub fn set_group_namer(&self, namer: Option<GroupNamer>) {
        *self.group_namer.write().expect("group namer lock") = namer;
    }

    /// The refusal of a plain write or remove of `key`, when `e` belongs to a managed group:
    /// its objects change only through their weight revision (docs/weights.md).
    pub(crate) fn managed_refusal(&self, e: &Entry, key: &str) -> Option<StoreError> {
        if !self.is_managed(e) {
            return None;
        }
        let g = group_of(e)?;
        let named = self
            .group_namer
            .read()
            .expect("group namer lock")
            .as_ref()
            .and_then(|f| f(g));
        Some(StoreError::Managed {
            key: key.to_string(),
            group: named.unwrap_or_else(|| format!("#{g}")),
        })
    }

    /// The refusal a plain write or remove of `id` gets when it names an object of a managed
    /// group (put_start and remove refuse it themselves; the server asks first where it would
    /// otherwise plan a cold reclaim only to cancel it).
    pub fn refuse_if_managed(&self, id: &ObjectId) -> Result<(), StoreError> {
        let name = ObjectName::parse(id)?;
        let Some(scope) = self.scopes.lookup(name.scope) else {
            return Ok(());
        };
        let key = name.key.as_bytes();
        let shard = self.lock_shard(self.shard_of(scope, key));
        match shard.lookup(scope, key) {
            Some(slot) => match self.managed_refusal(shard.entry(slot), &id.key) {
                Some(refusal) => Err(refusal),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }

    /// Whether `e` belongs to a group the installed guard calls managed.
    pub(crate) fn is_managed(&self, e: &Entry) -> bool {
        let Some(g) = group_of(e) else {
            return false;
        };
        self.group_guard
            .read()
            .expect("guard lock")
            .as_ref()
            .is_some_and(|f| f(g))
    }

    /// Every object of `group`, sorted by key. Walks every shard (the commit and the deletion
    /// of a revision are rare; the walk holds one shard lock at a time).
    pub fn group_members(&self, group: GroupId) -> Vec<GroupObject> {
        let _span = tracing::debug_span!("store.group_members").entered();
        let mut out = Vec::new();
        for i in 0..self.shards.len() {
            let shard = self.lock_shard(i);
            for (scope, index) in &shard.scopes {
                for (key, &slot) in index {
                    let e = shard.entry(slot);
                    if group_of(e) != Some(group) {
                        continue;
                    }
                    let Some((tenant, domain)) = self.scopes.name(*scope) else {
                        continue;
                    };
                    let complete = e.is_complete() && e.group == Some(group);
                    out.push(GroupObject {
                        tenant: tenant.to_string(),
                        domain: domain.map(|d| d.to_string()),
                        key: String::from_utf8_lossy(key).into_owned(),
                        size: match (&e.pending, complete) {
                            (_, true) => e.size,
                            (Some(p), false) => p.size,
                            (None, false) => e.size,
                        },
                        data_type: if complete {
                            e.data_type
                        } else {
                            e.pending.as_ref().map_or(e.data_type, |p| p.data_type)
                        },
                        complete: complete && e.pending.is_none(),
                        memory_readable: complete && !e.replicas.is_empty(),
                        hard_pinned: complete && e.hard_pinned(),
                    });
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// Tags the complete version of `id` as a member of `group` when it belongs to none: a
    /// cold-only route rebuilt from the journal after a restart carries no group, and its
    /// revision re-adopts it so the group guard and the deletion workflow see it again.
    /// Returns false when the key is absent; CONFLICT when it belongs to another group.
    pub fn adopt_group_member(&self, id: &ObjectId, group: GroupId) -> Result<bool, StoreError> {
        let name = ObjectName::parse(id)?;
        let Some(scope) = self.scopes.lookup(name.scope) else {
            return Ok(false);
        };
        let key = name.key.as_bytes();
        let mut shard = self.lock_shard(self.shard_of(scope, key));
        let Some(slot) = shard.lookup(scope, key) else {
            return Ok(false);
        };
        let e = shard.entry_mut(slot);
        match group_of(e) {
            Some(g) if g == group => Ok(true),
            Some(_) => Err(StoreError::conflict(format!(
                "{:?} belongs to another group",
                id.key
            ))),
            None if !e.is_complete() => Ok(false),
            None => {
                e.group = Some(group);
                Ok(true)
            }
        }
    }

    /// Removes one member of `group` (the deletion workflow of its weight revision, the only
    /// caller allowed to). Pins do not protect it; read-leased slots are freed when their lease
    /// ends, in-progress ones after the release timeout. Returns false when the key is absent.
    /// CONFLICT when the key belongs to another group or none.
    pub fn remove_group_member(
        &self,
        id: &ObjectId,
        group: GroupId,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let _span = tracing::debug_span!("store.remove_group_member").entered();
        let name = ObjectName::parse(id)?;
        let Some(scope) = self.scopes.lookup(name.scope) else {
            return Ok(false);
        };
        let key = name.key.as_bytes();
        let mut shard = self.lock_shard(self.shard_of(scope, key));
        let Some(slot) = shard.lookup(scope, key) else {
            return Ok(false);
        };
        if group_of(shard.entry(slot)) != Some(group) {
            return Err(StoreError::conflict(format!(
                "{:?} is not a member of the group being deleted",
                id.key
            )));
        }
        let now = self.now(now_ms);
        self.remove_entry(&mut shard, scope, key, now);
        Ok(true)
    }
}

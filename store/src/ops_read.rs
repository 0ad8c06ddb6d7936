//! get (with a read lease), exist, get_size and list.

use std::cmp::Reverse;
use std::ops::Bound;

use crescent_wire::store::{
    GetReply, ListEntry, ListReply, ListRequest, ObjectId, ReplicaState, MAX_LIST_PAGE,
};

use crate::directory::ObjectDirectory;
use crate::entry::{Entry, LEASE_TRACKED};
use crate::error::StoreError;
use crate::identity::{validate_key, ObjectName, ScopeName};
use crate::lease::grant_lease;
use crate::time::Clock;

const DEFAULT_LIST_PAGE: usize = 100;

impl ObjectDirectory {
    /// The complete replicas of an object and a read lease on them (default 10 s): they are
    /// neither evicted nor freed before `lease_until_ms`. NOT_READY while only a put is in
    /// progress; NOT_FOUND when the key does not exist in this scope.
    pub fn get(&self, id: &ObjectId, now_ms: i64) -> Result<GetReply, StoreError> {
        let _span = tracing::debug_span!("store.get").entered();
        let r = self.get_inner(id, now_ms);
        self.metrics.op("get", &r);
        r
    }

    fn get_inner(&self, id: &ObjectId, now_ms: i64) -> Result<GetReply, StoreError> {
        let name = ObjectName::parse(id)?;
        let missing = || StoreError::not_found("object", id.key.clone());
        let scope = self.scopes.lookup(name.scope).ok_or_else(missing)?;
        let key = name.key.as_bytes();
        let mut shard = self.lock_shard(self.shard_of(scope, key));
        let slot = shard.lookup(scope, key).ok_or_else(missing)?;
        let now = self.now(now_ms);
        let deadline = self.clock.deadline(now_ms, self.config.lease_ttl_ms);
        let ttl = Clock::span(self.config.lease_ttl_ms);
        let max = Clock::span(self.config.max_lease_ms);
        let e = shard.entry_mut(slot);
        if !e.is_complete() {
            return Err(StoreError::NotReady {
                reason: format!("a put of {:?} is in progress", id.key),
            });
        }
        let outcome = grant_lease(e, now, deadline, ttl, max);
        e.last_access = now;
        let track =
            (e.flags & LEASE_TRACKED == 0 && e.leased(now)).then_some((e.lease_until, e.put_id));
        if track.is_some() {
            e.flags |= LEASE_TRACKED;
        }
        let table = self.table();
        let reply = GetReply {
            size: e.size,
            put_id: e.put_id,
            data_type: e.data_type,
            checksum: e.checksum(),
            replicas: e
                .replicas
                .as_slice()
                .iter()
                .filter_map(|r| {
                    let seg = table.get(r.segment)?;
                    Some(seg.describe(r.offset, e.size, ReplicaState::Complete))
                })
                .collect(),
            lease_until_ms: self.clock.to_ms(e.lease_until),
            inline: None,
            staged: None,
            cold_backing: None,
        };
        drop(table);
        if let Some((until, put_id)) = track {
            shard.leases.push(Reverse((until, slot, put_id)));
        }
        self.metrics.lease(outcome.label(), 1);
        Ok(reply)
    }

    /// Whether the key has a complete version in this scope (a put in progress does not count).
    pub fn exist(&self, id: &ObjectId, _now_ms: i64) -> Result<bool, StoreError> {
        let _span = tracing::debug_span!("store.exist").entered();
        let r = self
            .with_entry(id, |e| e.is_some_and(Entry::is_complete))
            .map(|v| v.unwrap_or(false));
        self.metrics.op("exist", &r);
        r
    }

    /// The size of the complete version. NOT_READY while only a put is in progress.
    pub fn get_size(&self, id: &ObjectId) -> Result<u64, StoreError> {
        let _span = tracing::debug_span!("store.get_size").entered();
        let r = self
            .with_entry(id, |e| match e {
                Some(e) if e.is_complete() => Ok(e.size),
                Some(_) => Err(StoreError::NotReady {
                    reason: format!("a put of {:?} is in progress", id.key),
                }),
                None => Err(StoreError::not_found("object", id.key.clone())),
            })
            .and_then(|v| {
                v.unwrap_or_else(|| Err(StoreError::not_found("object", id.key.clone())))
            });
        self.metrics.op("get_size", &r);
        r
    }

    /// Runs `f` on the entry (None if absent) under its shard lock; `Ok(None)` when the scope
    /// was never used.
    fn with_entry<T>(
        &self,
        id: &ObjectId,
        f: impl FnOnce(Option<&Entry>) -> T,
    ) -> Result<Option<T>, StoreError> {
        let name = ObjectName::parse(id)?;
        let Some(scope) = self.scopes.lookup(name.scope) else {
            return Ok(None);
        };
        let key = name.key.as_bytes();
        let shard = self.lock_shard(self.shard_of(scope, key));
        let e = shard.lookup(scope, key).map(|s| shard.entry(s));
        Ok(Some(f(e)))
    }

    /// A page of keys of one scope in key order, starting after `after`, limited to `prefix`.
    /// Objects with only a put in progress are listed with `complete: false`.
    pub fn list(&self, req: &ListRequest) -> Result<ListReply, StoreError> {
        let _span = tracing::debug_span!("store.list").entered();
        let r = self.list_inner(req);
        self.metrics.op("list", &r);
        r
    }

    fn list_inner(&self, req: &ListRequest) -> Result<ListReply, StoreError> {
        let scope_name = ScopeName::parse(req.tenant.as_deref(), req.domain.as_deref())?;
        let limit = match req.limit {
            None => DEFAULT_LIST_PAGE,
            Some(l) if l >= 1 && l as usize <= MAX_LIST_PAGE => l as usize,
            Some(l) => {
                return Err(StoreError::invalid(
                    "limit",
                    format!("{l}; a page holds 1..={MAX_LIST_PAGE} keys"),
                ))
            }
        };
        if req.prefix.len() > crescent_wire::store::MAX_KEY_BYTES {
            validate_key("prefix", &req.prefix)?;
        }
        let Some(scope) = self.scopes.lookup(scope_name) else {
            return Ok(ListReply {
                keys: Vec::new(),
                next: None,
            });
        };
        let prefix = req.prefix.as_bytes();
        let lower = match &req.after {
            Some(a) if a.as_bytes() >= prefix => Bound::Excluded(a.as_bytes()),
            _ => Bound::Included(prefix),
        };
        // Each shard contributes at most limit + 1 keys; the merge keeps the smallest.
        let mut found: Vec<(Box<[u8]>, u64, bool)> = Vec::new();
        for i in 0..self.shards.len() {
            let shard = self.lock_shard(i);
            let Some(index) = shard.scopes.get(&scope) else {
                continue;
            };
            for (k, &slot) in index
                .range::<[u8], _>((lower, Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(prefix))
                .take(limit + 1)
            {
                let e = shard.entry(slot);
                let (size, complete) = if e.is_complete() {
                    (e.size, true)
                } else {
                    (e.pending.as_ref().map_or(0, |p| p.size), false)
                };
                found.push((k.clone(), size, complete));
            }
        }
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let more = found.len() > limit;
        found.truncate(limit);
        let keys: Vec<ListEntry> = found
            .into_iter()
            .map(|(k, size, complete)| ListEntry {
                key: String::from_utf8_lossy(&k).into_owned(),
                size,
                complete,
            })
            .collect();
        let next = more.then(|| keys.last().map(|k| k.key.clone())).flatten();
        Ok(ListReply { keys, next })
    }
}

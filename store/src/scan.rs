//! scan: every object of every scope, page by page, for moving a cluster's objects elsewhere
//! (docs/api.md, "Scanning every object"; docs/scale-out.md, "Draining a cluster").
//!
//! The order is the directory's own: shard by shard, within a shard scope by scope (by scope
//! number), within a scope by key. One page locks one shard at a time and walks at most
//! `limit` keys of it, so a scan never holds a lock for longer than a list page does. The
//! cursor names a key, not a position: objects removed or added between pages neither repeat
//! nor shift the ones after them.

use std::ops::Bound;

use crescent_wire::scan::{
    ScanCursor, ScanEntry, ScanReply, ScanRequest, DEFAULT_SCAN_PAGE, MAX_SCAN_PAGE,
    SCAN_WIRE_VERSION,
};

use crate::directory::ObjectDirectory;
use crate::error::StoreError;
use crate::identity::ScopeId;
use crate::shard::Shard;

impl ObjectDirectory {
    /// The page of objects after `req.cursor` (from the start without one).
    pub fn scan(&self, req: &ScanRequest) -> Result<ScanReply, StoreError> {
        let _span = tracing::debug_span!("store.scan").entered();
        let r = self.scan_inner(req);
        self.metrics.op("scan", &r);
        r
    }

    fn scan_inner(&self, req: &ScanRequest) -> Result<ScanReply, StoreError> {
        if req.version != SCAN_WIRE_VERSION {
            return Err(StoreError::invalid(
                "version",
                format!(
                    "{}; this server scans version {SCAN_WIRE_VERSION}",
                    req.version
                ),
            ));
        }
        let limit = match req.limit {
            None => DEFAULT_SCAN_PAGE,
            Some(l) if (1..=MAX_SCAN_PAGE).contains(&l) => l,
            Some(l) => {
                return Err(StoreError::invalid(
                    "limit",
                    format!("{l}; a page holds 1..={MAX_SCAN_PAGE} objects"),
                ))
            }
        } as usize;
        let mut objects = Vec::new();
        let mut at = req.cursor.clone();
        let first = at.as_ref().map_or(0, |c| c.shard as usize);
        for i in first..self.shards.len() {
            let from = at.take().filter(|c| c.shard as usize == i);
            let shard = self.lock_shard(i);
            if let Some(next) = self.scan_shard(&shard, i, from.as_ref(), limit, &mut objects) {
                return Ok(reply(objects, Some(next)));
            }
        }
        Ok(reply(objects, None))
    }

    /// Appends shard `i`'s objects after `from` to `out` until it holds `limit`; the cursor
    /// of the last one taken when the page filled up.
    fn scan_shard(
        &self,
        shard: &Shard,
        i: usize,
        from: Option<&ScanCursor>,
        limit: usize,
        out: &mut Vec<ScanEntry>,
    ) -> Option<ScanCursor> {
        let mut scopes: Vec<ScopeId> = shard
            .scopes
            .keys()
            .copied()
            .filter(|s| from.is_none_or(|c| *s >= c.scope))
            .collect();
        scopes.sort_unstable();
        for scope in scopes {
            let Some((tenant, domain)) = self.scopes.name(scope) else {
                continue;
            };
            let lower = match from {
                Some(c) if c.scope == scope => Bound::Excluded(c.after.as_bytes()),
                _ => Bound::Unbounded,
            };
            let index = &shard.scopes[&scope];
            for (k, &slot) in index.range::<[u8], _>((lower, Bound::Unbounded)) {
                let e = shard.entry(slot);
                let (size, complete) = if e.is_complete() {
                    (e.size, true)
                } else {
                    (e.pending.as_ref().map_or(0, |p| p.size), false)
                };
                out.push(ScanEntry {
                    tenant: tenant.to_string(),
                    domain: domain.as_deref().map(str::to_string),
                    key: String::from_utf8_lossy(k).into_owned(),
                    size,
                    complete,
                    replicas: e.replicas.as_slice().len() as u32,
                    data_type: e.data_type,
                    hard_pin: e.hard_pinned(),
                });
                if out.len() >= limit {
                    return Some(ScanCursor {
                        shard: i as u32,
                        scope,
                        after: String::from_utf8_lossy(k).into_owned(),
                    });
                }
            }
        }
        None
    }
}

fn reply(objects: Vec<ScanEntry>, next: Option<ScanCursor>) -> ScanReply {
    ScanReply {
        version: SCAN_WIRE_VERSION,
        objects,
        next,
    }
}

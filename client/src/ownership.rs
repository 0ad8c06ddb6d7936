//! The ownership table: the committed replicas that live in this process's own segments.
//!
//! A storage owner holds the bytes; crescentd's object directory is in memory and, after a
//! restart or failover, is rebuilt from what the owners report (design brief section 7, seed
//! 004). This table is that report: (object identity, put id, segment, offset, length) of every
//! committed replica in one of our segments. It is fed by the puts this process commits into
//! its own segments, trimmed by this process's removes and by newer puts of the same key, and
//! emptied segment by segment when a segment is unmounted (so a later replay never reports a
//! region we no longer serve).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crescent_wire::store::ObjectId;
use prometheus::IntGauge;

/// One committed replica in one of our segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedReplica {
    pub id: ObjectId,
    /// The put that wrote it (a version fence: larger is newer).
    pub put_id: u64,
    pub segment_id: Arc<str>,
    pub offset: u64,
    pub length: u64,
}

/// (object, segment) -> replica. One object has at most one replica per segment.
type Slot = (ObjectId, Arc<str>);

#[derive(Debug)]
pub struct OwnershipTable {
    entries: Mutex<HashMap<Slot, OwnedReplica>>,
    gauge: IntGauge,
}

impl OwnershipTable {
    pub fn new(gauge: IntGauge) -> Self {
        Self {
            entries: Mutex::default(),
            gauge,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Slot, OwnedReplica>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, len: usize) {
        self.gauge.set(len as i64);
    }

    /// Records a committed replica. A stale report (an older put than the one recorded for the
    /// same object and segment) is ignored; returns whether the entry was taken.
    pub fn record(&self, replica: OwnedReplica) -> bool {
        let mut entries = self.lock();
        let slot = (replica.id.clone(), replica.segment_id.clone());
        let taken = match entries.get(&slot) {
            Some(existing) if existing.put_id > replica.put_id => false,
            _ => {
                entries.insert(slot, replica);
                true
            }
        };
        self.publish(entries.len());
        taken
    }

    /// Forgets every replica of `id` (the object was removed). Returns how many.
    pub fn forget(&self, id: &ObjectId) -> usize {
        let mut entries = self.lock();
        let before = entries.len();
        entries.retain(|(object, _), _| object != id);
        self.publish(entries.len());
        before - entries.len()
    }

    /// Forgets the replicas of objects under `prefix` in a tenant/domain scope.
    pub fn forget_prefix(&self, tenant: &str, domain: Option<&str>, prefix: &str) -> usize {
        let mut entries = self.lock();
        let before = entries.len();
        entries.retain(|(object, _), _| {
            !(object.tenant() == tenant
                && object.domain.as_deref() == domain
                && object.key.starts_with(prefix))
        });
        self.publish(entries.len());
        before - entries.len()
    }

    /// Forgets everything in a segment (it is being unmounted). Returns how many.
    pub fn forget_segment(&self, segment_id: &str) -> usize {
        let mut entries = self.lock();
        let before = entries.len();
        entries.retain(|(_, segment), _| &**segment != segment_id);
        self.publish(entries.len());
        before - entries.len()
    }

    /// Every recorded replica, ordered by segment then offset (the replay order).
    pub fn snapshot(&self) -> Vec<OwnedReplica> {
        let mut all: Vec<OwnedReplica> = self.lock().values().cloned().collect();
        all.sort_by(|a, b| (&a.segment_id, a.offset).cmp(&(&b.segment_id, b.offset)));
        all
    }

    /// The replica of `id` in `segment_id`, if recorded.
    pub fn lookup(&self, id: &ObjectId, segment_id: &str) -> Option<OwnedReplica> {
        self.lock()
            .get(&(id.clone(), Arc::from(segment_id)))
            .cloned()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> OwnershipTable {
        OwnershipTable::new(IntGauge::new("t_owned", "test").unwrap())
    }

    fn rep(tenant: Option<&str>, key: &str, put_id: u64, seg: &str, offset: u64) -> OwnedReplica {
        OwnedReplica {
            id: ObjectId::scoped(tenant, None, key),
            put_id,
            segment_id: Arc::from(seg),
            offset,
            length: 10,
        }
    }

    #[test]
    fn newer_puts_replace_and_stale_reports_are_ignored() {
        let t = table();
        assert!(t.record(rep(None, "a", 5, "s1", 0)));
        assert!(!t.record(rep(None, "a", 4, "s1", 100)));
        assert_eq!(t.lookup(&ObjectId::new("a"), "s1").unwrap().offset, 0);
        assert!(t.record(rep(None, "a", 6, "s1", 200)));
        assert_eq!(t.lookup(&ObjectId::new("a"), "s1").unwrap().put_id, 6);
        assert_eq!(t.len(), 1);
        assert_eq!(t.gauge.get(), 1);
    }

    #[test]
    fn the_same_key_in_two_tenants_is_two_objects() {
        let t = table();
        t.record(rep(None, "a", 1, "s1", 0));
        t.record(rep(Some("t2"), "a", 1, "s1", 10));
        assert_eq!(t.len(), 2);
        assert_eq!(t.forget(&ObjectId::scoped(Some("t2"), None, "a")), 1);
        assert!(t.lookup(&ObjectId::new("a"), "s1").is_some());
    }

    #[test]
    fn prefix_and_segment_cleanup() {
        let t = table();
        t.record(rep(None, "p/1", 1, "s1", 0));
        t.record(rep(None, "p/2", 2, "s2", 0));
        t.record(rep(None, "q/1", 3, "s1", 20));
        t.record(rep(Some("other"), "p/3", 4, "s1", 40));
        assert_eq!(t.forget_prefix("default", None, "p/"), 2);
        assert_eq!(t.len(), 2);
        assert_eq!(t.forget_segment("s1"), 2);
        assert!(t.is_empty());
        assert_eq!(t.gauge.get(), 0);
    }

    #[test]
    fn snapshot_is_ordered_by_segment_and_offset() {
        let t = table();
        t.record(rep(None, "c", 1, "s2", 5));
        t.record(rep(None, "b", 1, "s1", 50));
        t.record(rep(None, "a", 1, "s1", 7));
        let order: Vec<_> = t
            .snapshot()
            .into_iter()
            .map(|r| (r.segment_id.to_string(), r.offset))
            .collect();
        assert_eq!(
            order,
            vec![("s1".into(), 7), ("s1".into(), 50), ("s2".into(), 5)]
        );
    }
}

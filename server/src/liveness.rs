//! Owner liveness: when each registered storage owner was last heard from.
//!
//! Heartbeats are high-rate and say nothing durable, so they are kept in memory only. The table
//! mirrors the registry's owners (filled by the segment mirror as owner events commit, and from
//! the recovered registry at startup, which gives every recovered owner a fresh TTL window).

use std::collections::HashMap;
use std::sync::Mutex;

/// Why a heartbeat was refused; both tell the owner to register again (or stop).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    /// Not registered (never, or expired and removed): register and mount again.
    #[error("owner {owner_id:?} is not registered{detail}")]
    UnknownOwner { owner_id: String, detail: String },
    /// A heartbeat from an older process than the one registered.
    #[error("owner {owner_id:?} is at incarnation {current}, heartbeat from stale incarnation {offered}")]
    StaleIncarnation {
        owner_id: String,
        current: u64,
        offered: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    incarnation: u64,
    last_seen_ms: i64,
}

#[derive(Debug)]
pub struct OwnerLiveness {
    ttl_ms: i64,
    owners: Mutex<HashMap<String, Seen>>,
    /// Owners that never expire (the embedded segment's owner, which is this process).
    exempt: Mutex<Vec<String>>,
}

impl OwnerLiveness {
    pub fn new(ttl_ms: i64) -> Self {
        Self {
            ttl_ms,
            owners: Mutex::default(),
            exempt: Mutex::default(),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        self.owners.lock().expect("liveness lock")
    }

    pub fn ttl_ms(&self) -> i64 {
        self.ttl_ms
    }

    /// Never expires `owner_id`.
    pub fn exempt(&self, owner_id: &str) {
        let mut e = self.exempt.lock().expect("exempt lock");
        if !e.iter().any(|o| o == owner_id) {
            e.push(owner_id.to_string());
        }
    }

    fn is_exempt(&self, owner_id: &str) -> bool {
        self.exempt
            .lock()
            .expect("exempt lock")
            .iter()
            .any(|o| o == owner_id)
    }

    /// An owner registered (or re-registered): its TTL window starts now.
    pub fn registered(&self, owner_id: &str, incarnation: u64, now_ms: i64) {
        self.table().insert(
            owner_id.to_string(),
            Seen {
                incarnation,
                last_seen_ms: now_ms,
            },
        );
    }

    pub fn removed(&self, owner_id: &str) {
        self.table().remove(owner_id);
    }

    /// Records a heartbeat of `owner_id` at `incarnation`.
    pub fn heartbeat(
        &self,
        owner_id: &str,
        incarnation: u64,
        now_ms: i64,
    ) -> Result<(), HeartbeatError> {
        let mut table = self.table();
        let Some(seen) = table.get_mut(owner_id) else {
            return Err(HeartbeatError::UnknownOwner {
                owner_id: owner_id.to_string(),
                detail: String::new(),
            });
        };
        if incarnation < seen.incarnation {
            return Err(HeartbeatError::StaleIncarnation {
                owner_id: owner_id.to_string(),
                current: seen.incarnation,
                offered: incarnation,
            });
        }
        if incarnation > seen.incarnation {
            // The process restarted and has not registered its new incarnation yet.
            return Err(HeartbeatError::UnknownOwner {
                owner_id: owner_id.to_string(),
                detail: format!(
                    " at incarnation {incarnation} (registered: {})",
                    seen.incarnation
                ),
            });
        }
        seen.last_seen_ms = seen.last_seen_ms.max(now_ms);
        Ok(())
    }

    /// Owners (not exempt) last heard from at least a TTL before `now_ms`, with the
    /// incarnation they were seen at.
    pub fn expired(&self, now_ms: i64) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self
            .table()
            .iter()
            .filter(|(_, s)| now_ms.saturating_sub(s.last_seen_ms) >= self.ttl_ms)
            .map(|(id, s)| (id.clone(), s.incarnation))
            .collect();
        out.retain(|(id, _)| !self.is_exempt(id));
        out.sort();
        out
    }

    /// Whether `owner_id` at `incarnation` is still expired (re-checked just before removal,
    /// since a heartbeat may have arrived meanwhile).
    pub fn still_expired(&self, owner_id: &str, incarnation: u64, now_ms: i64) -> bool {
        self.table().get(owner_id).is_some_and(|s| {
            s.incarnation == incarnation && now_ms.saturating_sub(s.last_seen_ms) >= self.ttl_ms
        })
    }

    /// Owners tracked.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_extend_the_window_and_check_incarnations() {
        let l = OwnerLiveness::new(1000);
        assert!(matches!(
            l.heartbeat("a", 1, 0),
            Err(HeartbeatError::UnknownOwner { .. })
        ));
        l.registered("a", 2, 0);
        l.registered("b", 1, 0);
        l.exempt("b");
        assert!(matches!(
            l.heartbeat("a", 1, 10),
            Err(HeartbeatError::StaleIncarnation { current: 2, .. })
        ));
        assert!(matches!(
            l.heartbeat("a", 3, 10),
            Err(HeartbeatError::UnknownOwner { .. })
        ));
        assert!(l.expired(999).is_empty());
        l.heartbeat("a", 2, 900).unwrap();
        assert!(l.expired(1500).is_empty());
        assert_eq!(l.expired(1900), vec![("a".to_string(), 2)]);
        assert!(l.still_expired("a", 2, 1900));
        assert!(!l.still_expired("a", 3, 1900));
        l.heartbeat("a", 2, 1950).unwrap();
        assert!(!l.still_expired("a", 2, 1960));
        l.removed("a");
        assert_eq!(l.len(), 1);
        // The exempt owner never expires.
        assert!(l.expired(1 << 40).is_empty());
    }
}

//! One object's metadata, kept compact: 50M of these must fit in 10 GiB with their keys and
//! index. The key itself is stored once, in the scope index (see `shard.rs`), not here.

use std::num::NonZeroU32;

use crescent_wire::store::DataType;

use crate::identity::ScopeId;
use crate::segments::SegmentIdx;
use crate::time::Ticks;

/// A managed group (the weight issue fills the guarded set).
pub type GroupId = NonZeroU32;

/// Where one replica lives. Its length is the object's size; its slot length follows from it
/// (`allocator::slot_len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replica {
    pub offset: u64,
    pub segment: SegmentIdx,
}

/// The replicas of one version: inline when there is one (the common case), boxed otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Replicas {
    One(Replica),
    Many(Box<[Replica]>),
}

impl Replicas {
    pub fn from_vec(mut v: Vec<Replica>) -> Self {
        if v.len() == 1 {
            Replicas::One(v.pop().expect("one"))
        } else {
            Replicas::Many(v.into_boxed_slice())
        }
    }

    pub fn one(r: Replica) -> Self {
        Replicas::One(r)
    }

    pub fn none() -> Self {
        Replicas::Many(Box::new([]))
    }

    pub fn as_slice(&self) -> &[Replica] {
        match self {
            Replicas::One(r) => std::slice::from_ref(r),
            Replicas::Many(v) => v,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Removes the replicas on `segment`; returns how many.
    pub fn drop_segment(&mut self, segment: SegmentIdx) -> usize {
        let before = self.as_slice().len();
        if self.as_slice().iter().any(|r| r.segment == segment) {
            let kept: Vec<Replica> = self
                .as_slice()
                .iter()
                .copied()
                .filter(|r| r.segment != segment)
                .collect();
            *self = Replicas::from_vec(kept);
        }
        before - self.as_slice().len()
    }
}

/// A put between put_start and put_end. Held out of line: only in-flight puts pay for it. It
/// keeps the object's scope and key so housekeeping can retire it without a search.
#[derive(Debug)]
pub(crate) struct PendingPut {
    pub put_id: u64,
    pub size: u64,
    pub checksum: Option<u32>,
    pub data_type: DataType,
    pub replicas: Replicas,
    pub started: Ticks,
    pub scope: ScopeId,
    pub key: Box<[u8]>,
    pub soft_pin_until: Ticks,
    pub hard_pin: bool,
    pub group: Option<GroupId>,
    /// What it reserved of its tenant's quota (`tenants.rs`).
    pub reserved: crate::tenants::Reservation,
}

pub(crate) const COMPLETE: u8 = 1;
pub(crate) const HAS_CHECKSUM: u8 = 2;
pub(crate) const HARD_PIN: u8 = 4;
/// A lease-expiry record for this version is in the shard's lease heap.
pub(crate) const LEASE_TRACKED: u8 = 8;

/// The metadata of one object: its complete version (when `COMPLETE` is set) and at most one
/// put in progress.
#[derive(Debug)]
pub(crate) struct Entry {
    pub size: u64,
    /// The put id of the complete version (the version fence for owner replay).
    pub put_id: u64,
    pub replicas: Replicas,
    pub pending: Option<Box<PendingPut>>,
    pub checksum: u32,
    pub group: Option<GroupId>,
    pub lease_until: Ticks,
    pub lease_chain_start: Ticks,
    pub soft_pin_until: Ticks,
    pub last_access: Ticks,
    pub data_type: DataType,
    pub flags: u8,
    /// Readers counted into the current read lease (see `lease.rs`); fits in padding.
    pub readers: u8,
    /// The fenced route version within this content (see `cold.rs`): bumped by every
    /// eviction, offload and restore CAS. Unique together with `put_id`.
    pub route_rev: u32,
}

impl Entry {
    /// A complete entry with no hot replica (a cold-only object; the caller sets the rest).
    pub fn cold_only(now: Ticks) -> Self {
        Self {
            size: 0,
            put_id: 0,
            replicas: Replicas::none(),
            pending: None,
            checksum: 0,
            group: None,
            lease_until: 0,
            lease_chain_start: 0,
            soft_pin_until: 0,
            last_access: now,
            data_type: DataType::default(),
            flags: COMPLETE,
            readers: 0,
            route_rev: 1,
        }
    }

    /// An entry that so far only has a put in progress.
    pub fn pending_only(pending: Box<PendingPut>, now: Ticks) -> Self {
        Self {
            size: 0,
            put_id: 0,
            replicas: Replicas::none(),
            pending: Some(pending),
            checksum: 0,
            group: None,
            lease_until: 0,
            lease_chain_start: 0,
            soft_pin_until: 0,
            last_access: now,
            data_type: DataType::default(),
            flags: 0,
            readers: 0,
            route_rev: 0,
        }
    }

    /// A complete entry with one replica (a replayed version; the caller sets the rest).
    pub fn complete(size: u64, put_id: u64, replica: Replica, now: Ticks) -> Self {
        Self {
            size,
            put_id,
            replicas: Replicas::One(replica),
            pending: None,
            checksum: 0,
            group: None,
            lease_until: 0,
            lease_chain_start: 0,
            soft_pin_until: 0,
            last_access: now,
            data_type: DataType::default(),
            flags: COMPLETE,
            readers: 0,
            route_rev: 1,
        }
    }

    pub fn is_complete(&self) -> bool {
        self.flags & COMPLETE != 0
    }

    pub fn checksum(&self) -> Option<u32> {
        (self.flags & HAS_CHECKSUM != 0).then_some(self.checksum)
    }

    pub fn hard_pinned(&self) -> bool {
        self.flags & HARD_PIN != 0
    }

    pub fn leased(&self, now: Ticks) -> bool {
        self.lease_until > now
    }

    pub fn soft_pinned(&self, now: Ticks) -> bool {
        self.soft_pin_until > now
    }

    /// Installs the pending put as the complete version; returns the previous complete
    /// replicas (to free or defer) with their size and put id, and the lease that protected
    /// them.
    pub fn complete_pending(&mut self, now: Ticks) -> Option<(Replicas, u64, u64, Ticks)> {
        let p = self.pending.take()?;
        let old = self.is_complete().then(|| {
            (
                std::mem::replace(&mut self.replicas, Replicas::none()),
                self.size,
                self.put_id,
                self.lease_until,
            )
        });
        self.size = p.size;
        self.put_id = p.put_id;
        self.replicas = p.replicas;
        self.checksum = p.checksum.unwrap_or(0);
        self.group = p.group;
        self.data_type = p.data_type;
        self.soft_pin_until = p.soft_pin_until;
        self.lease_until = 0;
        self.lease_chain_start = 0;
        self.readers = 0;
        self.last_access = now;
        self.route_rev = 1;
        self.flags = COMPLETE
            | if p.checksum.is_some() {
                HAS_CHECKSUM
            } else {
                0
            }
            | if p.hard_pin { HARD_PIN } else { 0 };
        old
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_stays_compact() {
        // The memory budget (<= 200 B/object with key and index) depends on this.
        assert!(
            std::mem::size_of::<Entry>() <= 80,
            "{}",
            std::mem::size_of::<Entry>()
        );
        assert_eq!(
            std::mem::size_of::<Option<Entry>>(),
            std::mem::size_of::<Entry>()
        );
    }

    #[test]
    fn drop_segment_keeps_the_others() {
        let r = |s| Replica {
            offset: 64 * s as u64,
            segment: s,
        };
        let mut rs = Replicas::from_vec(vec![r(1), r(2), r(3)]);
        assert_eq!(rs.drop_segment(2), 1);
        assert_eq!(rs.as_slice(), &[r(1), r(3)]);
        assert_eq!(rs.drop_segment(9), 0);
        assert_eq!(rs.drop_segment(1), 1);
        assert!(matches!(rs, Replicas::One(_)));
        assert_eq!(rs.drop_segment(3), 1);
        assert!(rs.is_empty());
    }
}

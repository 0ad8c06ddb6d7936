//! Managed group ids (`wgrp-...`) and the directory's compact numeric group ids.
//!
//! The directory tags objects with a `NonZeroU32`; this table gives every managed group one
//! for the life of the process. Object metadata is not journaled, so numbers need not survive
//! a restart: they are handed out again as revisions are recovered.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::RwLock;

use crescent_store::GroupId;

#[derive(Default)]
pub struct GroupTable {
    inner: RwLock<Groups>,
}

#[derive(Default)]
struct Groups {
    by_name: HashMap<String, GroupId>,
    /// `names[n - 1]` is group number `n`.
    names: Vec<String>,
}

impl GroupTable {
    /// The number of `group_id`, assigned on first use.
    pub fn intern(&self, group_id: &str) -> GroupId {
        if let Some(g) = self.lookup(group_id) {
            return g;
        }
        let mut groups = self.inner.write().expect("group table");
        if let Some(g) = groups.by_name.get(group_id) {
            return *g;
        }
        groups.names.push(group_id.to_string());
        let n = u32::try_from(groups.names.len()).expect("fewer than 2^32 managed groups");
        let g = NonZeroU32::new(n).expect("numbers start at 1");
        groups.by_name.insert(group_id.to_string(), g);
        g
    }

    pub fn lookup(&self, group_id: &str) -> Option<GroupId> {
        self.inner
            .read()
            .expect("group table")
            .by_name
            .get(group_id)
            .copied()
    }

    /// The group id of number `g` (`wgrp-...`), for refusals naming it.
    pub fn name(&self, g: GroupId) -> Option<String> {
        let groups = self.inner.read().expect("group table");
        groups.names.get(g.get() as usize - 1).cloned()
    }

    /// Every interned group is managed (the eviction and removal guard).
    pub fn is_managed(&self, g: GroupId) -> bool {
        (g.get() as usize) <= self.inner.read().expect("group table").names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_stable_and_distinct() {
        let t = GroupTable::default();
        let a = t.intern("wgrp-a");
        let b = t.intern("wgrp-b");
        assert_ne!(a, b);
        assert_eq!(t.intern("wgrp-a"), a);
        assert_eq!(t.lookup("wgrp-b"), Some(b));
        assert!(t.is_managed(a) && t.is_managed(b));
        assert!(!t.is_managed(NonZeroU32::new(3).unwrap()));
        assert_eq!(t.lookup("wgrp-c"), None);
        assert_eq!(t.name(b).as_deref(), Some("wgrp-b"));
        assert_eq!(t.name(NonZeroU32::new(3).unwrap()), None);
    }
}

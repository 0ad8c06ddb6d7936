//! Managed groups: listing members, the guarded remove paths (and their skip counts) and the
//! deletion workflow's own removal.

mod common;

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use common::*;
use crescent_store::{ObjectDirectory, StoreConfig};
use crescent_wire::store::{DataType, ItemResult, PutEndRequest, RemovePrefixRequest};

/// (operation, members) pairs the skip hook saw.
type Skips = Arc<Mutex<Vec<(&'static str, u64)>>>;

fn guarded_dir(group: NonZeroU32) -> (ObjectDirectory, Skips) {
    let d = dir_with(StoreConfig {
        shards: 4,
        ..Default::default()
    });
    mount(&d, "s1", "o1", 64 * 1000);
    d.set_group_guard(Some(Arc::new(move |g| g == group)));
    let skips = Arc::new(Mutex::new(Vec::new()));
    let seen = skips.clone();
    d.set_managed_skip_hook(Some(Arc::new(move |op, n| {
        seen.lock().unwrap().push((op, n))
    })));
    (d, skips)
}

fn put_in_group(d: &ObjectDirectory, key: &str, group: NonZeroU32, data_type: DataType, end: bool) {
    let mut r = req(id(None, None, key), 64);
    r.data_type = data_type;
    r.hard_pin = data_type == DataType::Metadata;
    let s = d.put_start_in_group(&r, Some(group), T0).unwrap();
    if end {
        d.put_end(
            &PutEndRequest {
                id: r.id.clone(),
                put_id: s.put_id,
            },
            T0,
        )
        .unwrap();
    }
}

#[test]
fn members_are_listed_with_their_state() {
    let g = NonZeroU32::new(3).unwrap();
    let (d, _) = guarded_dir(g);
    put_in_group(&d, "w/p/1", g, DataType::Weight, true);
    put_in_group(&d, "w/p/2", g, DataType::Weight, false);
    put_in_group(&d, "w/manifest", g, DataType::Metadata, true);
    put(&d, id(None, None, "w/other"), 64, T0);
    let members = d.group_members(g);
    let keys: Vec<_> = members.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(keys, ["w/manifest", "w/p/1", "w/p/2"]);
    assert!(members[0].complete && members[0].hard_pinned && members[0].memory_readable);
    assert_eq!(members[0].data_type, DataType::Metadata);
    assert!(members[1].complete && !members[1].hard_pinned);
    assert!(!members[2].complete && !members[2].memory_readable);
    assert_eq!(members[2].size, 64);
    assert!(d.group_members(NonZeroU32::new(4).unwrap()).is_empty());
}

#[test]
fn remove_and_prefix_remove_skip_managed_members_and_count_them() {
    let g = NonZeroU32::new(3).unwrap();
    let (d, skips) = guarded_dir(g);
    put_in_group(&d, "w/p/1", g, DataType::Weight, true);
    put_in_group(&d, "w/p/2", g, DataType::Weight, true);
    put(&d, id(None, None, "w/plain"), 64, T0);
    let err = d.remove(&id(None, None, "w/p/1"), true, T0).unwrap_err();
    assert_eq!(err.code(), "CONFLICT", "{err}");
    let reply = d
        .remove_prefix(
            &RemovePrefixRequest {
                tenant: None,
                domain: None,
                prefix: "w/".into(),
            },
            T0,
        )
        .unwrap();
    assert_eq!((reply.removed, reply.skipped), (1, 2));
    assert_eq!(
        *skips.lock().unwrap(),
        vec![("remove", 1), ("prefix_remove", 2)]
    );
    assert_eq!(d.group_members(g).len(), 2);
}

#[test]
fn only_the_group_removal_deletes_members() {
    let g = NonZeroU32::new(3).unwrap();
    let other = NonZeroU32::new(9).unwrap();
    let (d, _) = guarded_dir(g);
    put_in_group(&d, "w/p/1", g, DataType::Weight, true);
    put_in_group(&d, "w/manifest", g, DataType::Metadata, true);
    assert_eq!(
        d.remove_group_member(&id(None, None, "w/p/1"), other, T0)
            .unwrap_err()
            .code(),
        "CONFLICT"
    );
    assert!(d
        .remove_group_member(&id(None, None, "w/p/1"), g, T0)
        .unwrap());
    assert!(!d
        .remove_group_member(&id(None, None, "w/p/1"), g, T0)
        .unwrap());
    assert!(d
        .remove_group_member(&id(None, None, "w/manifest"), g, T0)
        .unwrap());
    assert!(d.group_members(g).is_empty());
    assert_eq!(d.stats().objects, 0);
}

#[test]
fn an_ungrouped_object_is_adopted_into_its_group_and_then_guarded() {
    let g = NonZeroU32::new(3).unwrap();
    let other = NonZeroU32::new(9).unwrap();
    let (d, _) = guarded_dir(g);
    // What a cold-only route rebuilt after a restart looks like to the directory: no group.
    put(&d, id(None, None, "w/p/1"), 64, T0);
    assert!(d.group_members(g).is_empty());
    assert!(d.adopt_group_member(&id(None, None, "w/p/1"), g).unwrap());
    assert!(
        d.adopt_group_member(&id(None, None, "w/p/1"), g).unwrap(),
        "repeatable"
    );
    assert_eq!(d.group_members(g).len(), 1);
    let err = d
        .adopt_group_member(&id(None, None, "w/p/1"), other)
        .unwrap_err();
    assert_eq!(err.code(), "CONFLICT", "{err}");
    assert!(!d
        .adopt_group_member(&id(None, None, "w/absent"), g)
        .unwrap());
    // Now a managed member: ordinary removal skips it, the group removal deletes it.
    let err = d.remove(&id(None, None, "w/p/1"), true, T0).unwrap_err();
    assert_eq!(err.code(), "CONFLICT", "{err}");
    assert!(d
        .remove_group_member(&id(None, None, "w/p/1"), g, T0)
        .unwrap());
}

#[test]
fn plain_writes_of_a_managed_member_are_refused_naming_its_group() {
    let g = NonZeroU32::new(3).unwrap();
    let (d, _) = guarded_dir(g);
    d.set_group_namer(Some(Arc::new(move |n| {
        (n == g).then(|| "wgrp-test".to_string())
    })));
    put_in_group(&d, "w/p/1", g, DataType::Weight, true);
    put_in_group(&d, "w/p/2", g, DataType::Weight, false);
    let mut upsert = req(id(None, None, "w/p/1"), 10);
    upsert.upsert = true;
    // Plain put with the same size (would be "already exists"), plain upsert, a put of a
    // member whose import is in progress, and the batch form: all refused, nothing changed.
    let refused = [
        req(id(None, None, "w/p/1"), 64),
        upsert,
        req(id(None, None, "w/p/2"), 64),
    ];
    for r in &refused {
        let err = d.put_start(r, T0).unwrap_err();
        assert_eq!(err.code(), "CONFLICT", "{err}");
        assert_eq!(err.outcome_label(), "managed");
        assert!(err.to_string().contains("MANAGED_OBJECT"), "{err}");
        assert!(err.to_string().contains("wgrp-test"), "{err}");
    }
    let batch = d.batch_put_start(&refused, T0).unwrap();
    assert!(batch.iter().all(
        |r| matches!(r, ItemResult::Err { code, message } if code.as_str() == "CONFLICT" && message.contains("wgrp-test"))
    ));
    let err = d.remove(&id(None, None, "w/p/1"), true, T0).unwrap_err();
    assert!(err.to_string().contains("wgrp-test"), "{err}");
    let members = d.group_members(g);
    assert_eq!(members.len(), 2);
    assert_eq!(members[0].size, 64);
    // Without a namer the group is named by its number; an unmanaged key is unaffected.
    d.set_group_namer(None);
    let err = d
        .put_start(&req(id(None, None, "w/p/1"), 64), T0)
        .unwrap_err();
    assert!(err.to_string().contains("#3"), "{err}");
    put(&d, id(None, None, "w/plain"), 64, T0);
}

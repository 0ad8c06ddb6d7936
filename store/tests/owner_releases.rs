//! Every allocation the directory frees on a remote owner's segment is queued for that owner
//! with the put id that wrote it (docs/rebuild.md, "Releases"): removes, replacements, and
//! frees deferred by a read lease once the lease ends. The embedded segment (no owner process)
//! queues nothing; unmounting drops the queue.

mod common;

use common::*;
use crescent_store::MountSpec;
use crescent_wire::segments::TransportKind;
use crescent_wire::store::{PutEndRequest, PutStartRequest};

fn drain(d: &crescent_store::ObjectDirectory, owner: &str) -> Vec<(String, u64, u64, u64)> {
    let all = d.releases().exchange(owner, None, usize::MAX);
    if let Some(last) = all.last() {
        d.releases().exchange(owner, Some(last.seq), 0);
    }
    all.into_iter()
        .map(|r| (r.segment_id, r.offset, r.length, r.put_id))
        .collect()
}

#[test]
fn a_remove_queues_the_freed_allocation_for_its_owner() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    let put_id = put(&d, k.clone(), 100, T0);
    let offset = d.get(&k, T0).unwrap().replicas[0].offset;
    assert!(drain(&d, "o1").is_empty(), "nothing freed yet");
    // The get's read lease defers the free until it expires.
    d.remove(&k, true, T0 + 1).unwrap();
    assert!(drain(&d, "o1").is_empty(), "deferred by the lease");
    d.tick(T0 + 3_600_000);
    assert_eq!(drain(&d, "o1"), vec![("s1".into(), offset, 100, put_id)]);

    let k2 = id(Some("t"), None, "k2");
    let put2 = put(&d, k2.clone(), 10, T0 + 3_600_001);
    d.remove(&k2, false, T0 + 3_600_002).unwrap();
    let got = drain(&d, "o1");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].3, put2);
    let (queued, delivered, overflow) = d.releases().metrics().counts();
    assert_eq!((queued, delivered, overflow), (2, 2, 0));
}

#[test]
fn an_upsert_queues_the_replaced_version() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    let old = put(&d, k.clone(), 100, T0);
    let new = put_req(
        &d,
        PutStartRequest {
            upsert: true,
            ..req(k.clone(), 200)
        },
        T0 + 1,
    );
    assert!(new > old);
    let got = drain(&d, "o1");
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].2, got[0].3), (100, old));
}

#[test]
fn versions_gone_while_their_key_lives_on_are_fenced_for_a_later_remove() {
    // The owner of a replaced version holds it until its release arrives; if the key is then
    // removed and crescentd dies, only a fence keeps that version from being replayed
    // (docs/rebuild.md, "Removes are journaled").
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    let old = put(&d, k.clone(), 100, T0);
    let upsert = PutStartRequest {
        upsert: true,
        ..req(k.clone(), 200)
    };
    let new = put_req(&d, upsert.clone(), T0 + 1);
    assert!(d.removals().is_fenced(old), "the replaced version");
    assert!(
        !d.removals().is_fenced(new),
        "the live version is never fenced"
    );
    // A put abandoned by its writer while the key holds a version.
    let started = d.put_start(&upsert, T0 + 2).unwrap();
    let revoke = PutEndRequest {
        id: k.clone(),
        put_id: started.put_id,
    };
    d.put_revoke(&revoke, T0 + 3).unwrap();
    assert!(d.removals().is_fenced(started.put_id), "the revoked put");
    assert!(!d.removals().is_fenced(new));
    assert_eq!(
        d.removals().take().by_owner["o1"],
        vec![old, started.put_id],
        "waiting for the next journal write"
    );
    // Once the owner acknowledged their releases, nothing is left to fence.
    d.removals().settle("o1", &[old, started.put_id]);
    assert_eq!(d.removals().fenced(), 0);
}

#[test]
fn the_embedded_segment_and_unmounted_owners_queue_nothing() {
    let d = dir();
    d.mount_segment(
        MountSpec {
            segment_id: "embedded".into(),
            owner_id: "crescentd".into(),
            endpoint: None,
            transport: TransportKind::Tcp,
            size: 1 << 20,
        },
        T0,
    )
    .unwrap();
    let k = id(None, None, "k");
    put(&d, k.clone(), 100, T0);
    d.remove(&k, false, T0 + 1).unwrap();
    assert_eq!(d.releases().pending("crescentd"), 0);

    mount(&d, "s1", "o1", 1 << 20);
    d.unmount_segment("embedded", true, T0 + 2).unwrap();
    let k = id(None, None, "k3");
    put(&d, k.clone(), 100, T0 + 3);
    d.remove(&k, false, T0 + 4).unwrap();
    assert_eq!(d.releases().pending("o1"), 1);
    d.unmount_segment("s1", true, T0 + 5).unwrap();
    assert_eq!(d.releases().pending("o1"), 0);
    assert!(d.releases().exchange("o1", None, 10).is_empty());
}

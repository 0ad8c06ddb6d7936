//! Releasing read leases: the last reader out ends the lease, so a remove right after a get
//! succeeds; stale or foreign releases change nothing.

mod common;

use common::*;
use crescent_wire::store::{ItemResult, ReleaseRequest};

fn release_of(
    id: &crescent_wire::store::ObjectId,
    got: &crescent_wire::store::GetReply,
) -> ReleaseRequest {
    ReleaseRequest {
        id: id.clone(),
        put_id: got.put_id,
        lease_until_ms: got.lease_until_ms,
        staged_token: None,
    }
}

#[test]
fn get_then_release_lets_remove_through() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    let put_id = put(&d, k.clone(), 100, T0);
    let got = d.get(&k, T0).unwrap();
    assert_eq!(got.put_id, put_id);
    assert_eq!(d.remove(&k, false, T0 + 1).unwrap_err().code(), "BUSY");
    assert!(d.release(&release_of(&k, &got), T0 + 2).unwrap());
    // A second release of the same get counts nothing more.
    assert!(!d.release(&release_of(&k, &got), T0 + 3).unwrap());
    d.remove(&k, false, T0 + 4).unwrap();
    assert!(!d.exist(&k, T0 + 4).unwrap());
}

#[test]
fn the_lease_holds_until_the_last_reader_releases() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(Some("t1"), Some("d1"), "k");
    put(&d, k.clone(), 100, T0);
    let a = d.get(&k, T0).unwrap();
    let b = d.get(&k, T0 + 500).unwrap();
    assert!(d.release(&release_of(&k, &a), T0 + 600).unwrap());
    assert_eq!(d.remove(&k, false, T0 + 700).unwrap_err().code(), "BUSY");
    assert!(d.release(&release_of(&k, &b), T0 + 800).unwrap());
    d.remove(&k, false, T0 + 900).unwrap();
}

#[test]
fn stale_releases_change_nothing() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let k = id(None, None, "k");
    put(&d, k.clone(), 100, T0);
    let old = d.get(&k, T0).unwrap();
    // The first lease ran out; a new reader's lease must survive the old reader's release.
    let later = old.lease_until_ms + 1;
    let fresh = d.get(&k, later).unwrap();
    assert!(!d.release(&release_of(&k, &old), later + 1).unwrap());
    assert_eq!(d.remove(&k, false, later + 2).unwrap_err().code(), "BUSY");
    // A release naming another version does nothing either.
    let mut other = release_of(&k, &fresh);
    other.put_id += 1;
    assert!(!d.release(&other, later + 3).unwrap());
    assert_eq!(d.remove(&k, false, later + 4).unwrap_err().code(), "BUSY");
    assert!(d.release(&release_of(&k, &fresh), later + 5).unwrap());
    d.remove(&k, false, later + 6).unwrap();
}

#[test]
fn release_bad_input_and_unknown_keys() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let bad = ReleaseRequest {
        id: id(None, None, ""),
        put_id: 1,
        lease_until_ms: T0 + 10_000,
        staged_token: None,
    };
    assert_eq!(d.release(&bad, T0).unwrap_err().code(), "INVALID_ARGUMENT");
    let unknown = ReleaseRequest {
        id: id(None, None, "nope"),
        put_id: 1,
        lease_until_ms: T0 + 10_000,
        staged_token: None,
    };
    assert_eq!(d.release(&unknown, T0).unwrap_err().code(), "NOT_FOUND");
    // Other tenants never release each other's leases.
    let k = id(Some("a"), None, "k");
    put(&d, k.clone(), 10, T0);
    let got = d.get(&k, T0).unwrap();
    let foreign = release_of(&id(Some("b"), None, "k"), &got);
    assert_eq!(d.release(&foreign, T0).unwrap_err().code(), "NOT_FOUND");
    assert_eq!(d.remove(&k, false, T0 + 1).unwrap_err().code(), "BUSY");
}

#[test]
fn batch_release_answers_per_item() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let keys: Vec<_> = (0..3).map(|i| id(None, None, &format!("k{i}"))).collect();
    for k in &keys {
        put(&d, k.clone(), 64, T0);
    }
    let got = d.batch_get(&keys, T0).unwrap();
    let mut releases: Vec<ReleaseRequest> = keys
        .iter()
        .zip(&got)
        .map(|(k, g)| match g {
            ItemResult::Ok(g) => release_of(k, g),
            ItemResult::Err { .. } => panic!("get failed"),
        })
        .collect();
    releases.push(ReleaseRequest {
        id: id(None, None, "absent"),
        put_id: 1,
        lease_until_ms: T0 + 10_000,
        staged_token: None,
    });
    let done = d.batch_release(&releases, T0 + 1).unwrap();
    assert_eq!(done.len(), 4);
    assert!(done[..3].iter().all(|r| *r == ItemResult::Ok(true)));
    assert!(matches!(&done[3], ItemResult::Err { code, .. } if code.as_str() == "NOT_FOUND"));
    for k in &keys {
        d.remove(k, false, T0 + 2).unwrap();
    }
}

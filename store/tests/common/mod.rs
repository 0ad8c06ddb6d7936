#![allow(dead_code)]

use crescent_store::{MountSpec, ObjectDirectory, StoreConfig};
use crescent_wire::segments::TransportKind;
use crescent_wire::store::{ObjectId, PutEndRequest, PutStartRequest};

pub const T0: i64 = 1_700_000_000_000;

pub fn dir() -> ObjectDirectory {
    dir_with(StoreConfig::default())
}

pub fn dir_with(config: StoreConfig) -> ObjectDirectory {
    ObjectDirectory::new(config, T0).unwrap()
}

pub fn mount(d: &ObjectDirectory, segment: &str, owner: &str, size: u64) {
    assert!(d
        .mount_segment(
            MountSpec {
                segment_id: segment.into(),
                owner_id: owner.into(),
                endpoint: Some("127.0.0.1:7000".into()),
                transport: TransportKind::Tcp,
                size,
            },
            T0,
        )
        .unwrap());
}

pub fn id(tenant: Option<&str>, domain: Option<&str>, key: &str) -> ObjectId {
    ObjectId::scoped(tenant, domain, key)
}

pub fn req(id: ObjectId, size: u64) -> PutStartRequest {
    PutStartRequest {
        id,
        size,
        replicas: 1,
        placement: Default::default(),
        preferred_segment: None,
        data_type: Default::default(),
        checksum: None,
        upsert: false,
        soft_pin_secs: None,
        hard_pin: false,
    }
}

/// put_start + put_end; returns the put id.
pub fn put(d: &ObjectDirectory, id: ObjectId, size: u64, now: i64) -> u64 {
    put_req(d, req(id, size), now)
}

pub fn put_req(d: &ObjectDirectory, r: PutStartRequest, now: i64) -> u64 {
    let id = r.id.clone();
    let reply = d.put_start(&r, now).unwrap();
    if !reply.already_exists {
        d.put_end(
            &PutEndRequest {
                id,
                put_id: reply.put_id,
            },
            now,
        )
        .unwrap();
    }
    reply.put_id
}

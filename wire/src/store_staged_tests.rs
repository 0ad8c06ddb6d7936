//! Compatibility of the staged remote-restore fields (all optional, wire v1 additions).

use super::*;

fn id() -> ObjectId {
    ObjectId {
        tenant: None,
        domain: None,
        key: "k".into(),
    }
}

fn staged() -> StagedPayload {
    StagedPayload {
        version: STAGED_PAYLOAD_VERSION,
        endpoint: "127.0.0.1:7001".into(),
        segment_id: "crescentd-staging-0/17".into(),
        offset: 0,
        length: 4096,
        checksum: 0xdead_beef,
        token: 17,
        expires_at_ms: 1_700_000_000_000,
        grant: None,
    }
}

#[test]
fn a_get_request_accepting_staging_reads_as_an_older_request() {
    let old = rmp_serde::to_vec_named(&ObjectRequest { id: id() }).unwrap();
    let get: GetRequest = rmp_serde::from_slice(&old).unwrap();
    assert!(!get.accept_staged);
    let new = GetRequest {
        id: id(),
        accept_cold_backing: true,
        accept_staged: true,
    };
    let bytes = rmp_serde::to_vec_named(&new).unwrap();
    assert_eq!(rmp_serde::from_slice::<GetRequest>(&bytes).unwrap(), new);
    // An older server reads it as a plain object request (and answers inline).
    let plain: ObjectRequest = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(plain.id, id());
}

#[test]
fn a_get_reply_carries_its_staged_payload_optionally() {
    let mut reply = GetReply {
        size: 4096,
        put_id: 7,
        data_type: DataType::default(),
        checksum: Some(0xdead_beef),
        replicas: Vec::new(),
        lease_until_ms: 0,
        inline: None,
        cold_backing: None,
        staged: None,
    };
    let without = rmp_serde::to_vec_named(&reply).unwrap();
    reply.staged = Some(staged());
    let bytes = rmp_serde::to_vec_named(&reply).unwrap();
    assert_eq!(rmp_serde::from_slice::<GetReply>(&bytes).unwrap(), reply);
    let json = serde_json::to_string(&reply).unwrap();
    assert_eq!(serde_json::from_str::<GetReply>(&json).unwrap(), reply);
    // An absent staged payload leaves the encoding as before.
    reply.staged = None;
    assert_eq!(rmp_serde::to_vec_named(&reply).unwrap(), without);
}

#[test]
fn a_release_acks_its_staged_token_optionally() {
    let mut release = ReleaseRequest {
        id: id(),
        put_id: 3,
        lease_until_ms: 99,
        staged_token: None,
    };
    let old = rmp_serde::to_vec_named(&release).unwrap();
    release.staged_token = Some(17);
    let bytes = rmp_serde::to_vec_named(&release).unwrap();
    assert_eq!(
        rmp_serde::from_slice::<ReleaseRequest>(&bytes).unwrap(),
        release
    );
    let read_old: ReleaseRequest = rmp_serde::from_slice(&old).unwrap();
    assert_eq!(read_old.staged_token, None);
}

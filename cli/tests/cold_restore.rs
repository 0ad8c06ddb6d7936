//! Restore paths end to end against a real crescentd (docs/cold-tier.md, "Restore on read"):
//! the local restore (the client reads the device directory itself, the server only names the
//! backing), the remote restore (verified bytes inline) and the fallback between them, the
//! background re-promotion, and the batch restore grouped by device.

mod common;

use std::path::Path;

use common::cold::{cold_only, payload, runtime, start, write_config};
use crescent_client::ClientError;

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[96 + at] ^= 0x01;
    std::fs::write(path, &bytes).unwrap();
}

fn checksum_failure(e: &ClientError) -> bool {
    e.code_str() == "INTERNAL" && e.to_string().contains("checksum")
}

#[test]
fn a_local_reader_reads_the_device_directory_and_the_object_is_promoted_later() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let data = payload(3 << 20, 5);
    cold_only(dir.path(), &node, "local", &data);
    let rt = runtime();
    let client = common::client_of(&node.s());
    assert_eq!(rt.block_on(client.get("local")).unwrap(), data);
    let restore = client.local_cold_restore();
    assert_eq!((restore.count("local"), restore.count("fallback")), (1, 0));
    assert_eq!(node.metric("crescent_cold_backing_refs_total"), 1.0);
    // The re-promotion runs in the background; then the object is hot again.
    node.wait_for("the background promotion", || node.replicas("local") == 1);
    assert_eq!(
        node.metric("crescent_cold_promotions_total{outcome=\"done\"}"),
        1.0
    );
    assert_eq!(rt.block_on(client.get("local")).unwrap(), data);
    assert_eq!(restore.count("local"), 1, "a hot object is not restored");
}

#[test]
fn a_remote_restore_answers_inline_when_local_restore_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let data = payload(1 << 20, 8);
    cold_only(dir.path(), &node, "remote", &data);
    let rt = runtime();
    let client = common::client_of(&node.s());
    client.set_local_cold_restore(false);
    assert_eq!(rt.block_on(client.get("remote")).unwrap(), data);
    let restore = client.local_cold_restore();
    assert_eq!((restore.count("local"), restore.count("fallback")), (0, 0));
    assert_eq!(node.metric("crescent_cold_backing_refs_total"), 0.0);
    assert!(node.metric("crescent_cold_restores_total{outcome=\"ok\"}") >= 1.0);
    node.wait_for("the background promotion", || node.replicas("remote") == 1);
    // The CLI flag turns it off too.
    cold_only(dir.path(), &node, "remote2", &data);
    let (_, out, err) = common::crescent(
        &node.s(),
        &["--no-local-cold-restore", "get", "remote2"],
        None,
    );
    assert_eq!(out, data, "{err}");
    assert_eq!(node.metric("crescent_cold_backing_refs_total"), 0.0);
}

#[test]
fn a_flipped_byte_fails_with_a_checksum_error_on_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let data = payload(200_000, 3);
    let file = cold_only(dir.path(), &node, "bad", &data);
    flip_byte(&file, 54_321);
    let rt = runtime();
    let client = common::client_of(&node.s());
    // Local: the client's read fails its check, it falls back, the server's read fails too.
    let e = rt.block_on(client.get("bad")).unwrap_err();
    assert!(checksum_failure(&e), "{e}");
    assert_eq!(client.local_cold_restore().count("fallback"), 1);
    // Remote only.
    client.set_local_cold_restore(false);
    let e = rt.block_on(client.get("bad")).unwrap_err();
    assert!(checksum_failure(&e), "{e}");
    // The server read it for the fallback and for the remote get, and its background
    // promotion (offered when it named the backing) read it too, and failed.
    node.wait_for("the failed promotion", || {
        node.metric("crescent_cold_promotions_total{outcome=\"failed\"}") == 1.0
    });
    assert_eq!(
        node.metric("crescent_cold_restores_total{outcome=\"checksum_mismatch\"}"),
        3.0
    );
    // Nothing was promoted from a damaged payload.
    assert_eq!(node.replicas("bad"), 0);
}

#[test]
fn a_root_stamped_for_another_device_is_not_trusted_and_the_server_restores() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let data = payload(500_000, 1);
    cold_only(dir.path(), &node, "stamped", &data);
    // The server opened the device at start; only a reader opening it now sees the stamp.
    let stamp = dir.path().join("data/cold/local0/DEVICE");
    std::fs::write(&stamp, "crescent-cold-device v1\nsomeone-else\n").unwrap();
    let rt = runtime();
    let client = common::client_of(&node.s());
    assert_eq!(rt.block_on(client.get("stamped")).unwrap(), data);
    let restore = client.local_cold_restore();
    assert_eq!((restore.count("local"), restore.count("fallback")), (0, 1));
}

#[test]
fn a_batch_get_restores_its_cold_only_items_grouped_by_device() {
    let dir = tempfile::tempdir().unwrap();
    // Promotion off: every cold read counted below is one of the batch's.
    let config = write_config(dir.path(), "[cold]\npromote_on_read = false\n");
    let node = start(dir.path(), &[("CRESCENT_CONFIG", &config)]);
    let values: Vec<Vec<u8>> = (0..6).map(|i| payload(100_000 + i * 7, i as u8)).collect();
    for (i, v) in values.iter().enumerate() {
        cold_only(dir.path(), &node, &format!("b/{i}"), v);
    }
    let bad = cold_only(dir.path(), &node, "b/bad", &payload(50_000, 99));
    flip_byte(&bad, 10);
    node.put("b/hot", b"still hot");
    let rt = runtime();
    let client = common::client_of(&node.s());
    // b/2 twice: one read answers both.
    let keys = [
        "b/0", "b/1", "b/2", "b/hot", "b/bad", "b/3", "b/2", "b/4", "b/5",
    ];
    let got = rt.block_on(client.get_batch(&keys)).unwrap();
    let expect = |k: &str| -> Option<Vec<u8>> {
        match k {
            "b/hot" => Some(b"still hot".to_vec()),
            "b/bad" => None,
            _ => Some(values[k[2..].parse::<usize>().unwrap()].clone()),
        }
    };
    for (k, item) in keys.iter().zip(got.iter()) {
        match expect(k) {
            Some(v) => assert_eq!(item.as_ref().unwrap(), &v, "{k}"),
            None => {
                let e = item.as_ref().unwrap_err();
                assert!(checksum_failure(e), "{k}: {e}");
            }
        }
    }
    // Six good backings read once each (the duplicate merged), the damaged one once.
    assert_eq!(
        node.metric("crescent_cold_restores_total{outcome=\"ok\"}"),
        6.0
    );
    assert_eq!(
        node.metric("crescent_cold_restores_total{outcome=\"checksum_mismatch\"}"),
        1.0
    );
    assert_eq!(
        node.metric("crescent_cold_promotions_total{outcome=\"queued\"}"),
        0.0
    );
    assert_eq!(node.replicas("b/0"), 0, "promotion is off");
}

#[test]
fn get_into_a_registered_buffer_restores_locally_and_remotely() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let local = payload(600_000, 11);
    let remote = payload(70_000, 12);
    cold_only(dir.path(), &node, "into-local", &local);
    cold_only(dir.path(), &node, "into-remote", &remote);
    let rt = runtime();
    let client = common::client_of(&node.s());
    rt.block_on(async {
        let buf = client.register_buffer(vec![0u8; 1 << 20]).await.unwrap();
        // Local: read and verified in the client, written at the offset.
        let n = client.get_into("into-local", &buf, 100).await.unwrap();
        assert_eq!(n, local.len());
        let mut got = vec![0u8; n];
        buf.read(100, &mut got).await.unwrap();
        assert_eq!(got, local);
        // Remote: the server's inline value, checked on arrival.
        client.set_local_cold_restore(false);
        let n = client.get_into("into-remote", &buf, 0).await.unwrap();
        let mut got = vec![0u8; n];
        buf.read(0, &mut got).await.unwrap();
        assert_eq!(got, remote);
        // A value that does not fit is refused before anything is written.
        let small = client.register_buffer(vec![0u8; 1_000]).await.unwrap();
        client.set_local_cold_restore(true);
        cold_only(dir.path(), &node, "into-big", &local);
        assert!(client.get_into("into-big", &small, 0).await.is_err());
    });
    let restore = client.local_cold_restore();
    assert_eq!(restore.count("local"), 2);
    assert_eq!(restore.count("fallback"), 0);
}

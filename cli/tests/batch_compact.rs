//! The compact batch ops (`compact_batch_v1`, `compact_put_end_v1`) against a real crescentd: a
//! new client uses them when the server lists the feature and the classic batch ops when it
//! does not (a server that predates them, or only the put_end op); a bad item fails alone; own-segment replicas are read and written in place
//! and their read leases still released.

mod common;

use std::time::Duration;

use common::{as_admin, client_of, owner_and_writer, DirNode};
use crescent_client::PutOptions;

/// The server's RPC fast-path description (`GET /v1/rpc`: version, features).
async fn rpc_info(server: &str) -> serde_json::Value {
    let req = reqwest::Client::new().get(format!("http://{server}/v1/rpc"));
    as_admin(req, server)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `crescent_rpc_requests_total{op, code="OK"}` as the server counts it.
async fn served(server: &str, op: &str) -> u64 {
    let text = reqwest::get(format!("http://{server}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let wanted = format!("op=\"{op}\"");
    text.lines()
        .filter(|l| l.starts_with("crescent_rpc_requests_total{"))
        .filter(|l| l.contains(&wanted) && l.contains("code=\"OK\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

/// Puts and reads back a batch with one bad item per phase through an owning client, then
/// checks another client can remove every key (the reader's leases were released). Returns
/// nothing: the caller checks which ops the server ran.
async fn batch_round_trip(server: &str, tag: &str) {
    let (owner, client) = owner_and_writer(server, "compact-owner", 8 << 20).await;
    let keys: Vec<String> = (0..40).map(|i| format!("{tag}/k{i}")).collect();
    let values: Vec<Vec<u8>> = (0..40)
        .map(|i| vec![i as u8 ^ 0x5a; 1000 + i * 37])
        .collect();

    // One bad item: the same key with other content, no upsert (CONFLICT from the server).
    client.put(&keys[3], b"other content").await.unwrap();
    let put = client.put_batch(&keys, &values).await.unwrap();
    for (i, r) in put.iter().enumerate() {
        match i {
            3 => assert_eq!(r.as_ref().unwrap_err().code_str(), "CONFLICT"),
            _ => assert!(!r.as_ref().unwrap().already_existed, "item {i}: {r:?}"),
        }
    }
    // Every committed item is in the owner's ownership table (recorded for the whole batch
    // at once) with its put id, offset-disjoint in our own segment; the refused one is not
    // there under this batch's put id.
    let owned = owner.ownership().snapshot();
    for (i, r) in put.iter().enumerate().filter(|(i, _)| *i != 3) {
        let done = r.as_ref().unwrap();
        let id = crescent_wire::store::ObjectId::new(keys[i].as_str());
        let entry = owner
            .ownership()
            .lookup(&id, owner.segment_id())
            .unwrap_or_else(|| panic!("item {i} not recorded"));
        assert_eq!(entry.put_id, done.put_id, "item {i}");
        assert_eq!(entry.length, values[i].len() as u64, "item {i}");
    }
    assert!(owned
        .windows(2)
        .all(|w| w[0].offset + w[0].length <= w[1].offset));
    // Idempotent repeat: the same content again is an already-existing success.
    let again = client.put_batch(&keys[..2], &values[..2]).await.unwrap();
    assert!(again.iter().all(|r| r.as_ref().unwrap().already_existed));

    // One bad item: a key that does not exist.
    let mut asked = keys.clone();
    asked.push(format!("{tag}/missing"));
    let got = client.get_batch(&asked).await.unwrap();
    for (i, r) in got.iter().enumerate() {
        match i {
            3 => assert_eq!(r.as_ref().unwrap(), b"other content"),
            40 => assert_eq!(r.as_ref().unwrap_err().code_str(), "NOT_FOUND"),
            _ => assert_eq!(r.as_ref().unwrap(), &values[i], "item {i}"),
        }
    }

    // Checksums written by the batch put are verified by the batch get.
    let checked = PutOptions {
        checksum: true,
        ..PutOptions::default()
    };
    let ck: Vec<String> = (0..3).map(|i| format!("{tag}/ck{i}")).collect();
    for r in client
        .put_batch_with(&ck, &values[..3], &checked)
        .await
        .unwrap()
    {
        r.unwrap();
    }
    for (r, v) in client.get_batch(&ck).await.unwrap().iter().zip(&values) {
        assert_eq!(r.as_ref().unwrap(), v);
    }

    // The reader's leases are released: another client removes everything without BUSY.
    client.settle().await;
    let other = client_of(server);
    let mut all = keys.clone();
    all.extend(ck);
    let removed = tokio::time::timeout(Duration::from_secs(3), other.remove_batch(&all))
        .await
        .expect("remove answered")
        .unwrap();
    for (k, r) in all.iter().zip(removed) {
        r.unwrap_or_else(|e| panic!("{k}: {e} (a lease left held?)"));
    }
    owner.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_client_uses_the_compact_ops_of_a_server_that_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let node = DirNode::start(dir.path(), None, &[]);
    let server = node.s();
    batch_round_trip(&server, "new").await;
    assert_eq!(served(&server, "batch_get_compact").await, 2);
    assert_eq!(served(&server, "batch_put_start_compact").await, 3);
    // Two of the three batch puts end something (the repeat only finds existing keys).
    assert_eq!(served(&server, "batch_put_end_compact").await, 2);
    assert_eq!(served(&server, "batch_get").await, 0);
    assert_eq!(served(&server, "batch_put_start").await, 0);
    assert_eq!(served(&server, "batch_put_end").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_client_ends_puts_classically_on_a_server_without_the_compact_put_end() {
    let dir = tempfile::tempdir().unwrap();
    let node = DirNode::start(
        dir.path(),
        Some("[store]\nrpc_compact_put_end = false\n"),
        &[],
    );
    let server = node.s();
    let info = rpc_info(&server).await;
    assert_eq!(info["features"], serde_json::json!(["compact_batch_v1"]));
    batch_round_trip(&server, "mid").await;
    assert_eq!(served(&server, "batch_put_start_compact").await, 3);
    assert_eq!(served(&server, "batch_get_compact").await, 2);
    assert_eq!(served(&server, "batch_put_end").await, 2);
    assert_eq!(served(&server, "batch_put_end_compact").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_client_uses_the_classic_ops_of_a_server_without_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let node = DirNode::start(
        dir.path(),
        Some("[store]\nrpc_compact_batch = false\n"),
        &[],
    );
    let server = node.s();
    let info = rpc_info(&server).await;
    assert!(info.get("features").is_none(), "{info}");
    batch_round_trip(&server, "old").await;
    assert_eq!(served(&server, "batch_get").await, 2);
    assert_eq!(served(&server, "batch_put_start").await, 3);
    assert_eq!(served(&server, "batch_put_end").await, 2);
    assert_eq!(served(&server, "batch_get_compact").await, 0);
    assert_eq!(served(&server, "batch_put_start_compact").await, 0);
    assert_eq!(served(&server, "batch_put_end_compact").await, 0);
}

//! The object API end to end against a real crescentd: byte-identical round trips across
//! sizes (local owner fast path and a separate owner process over TCP), batches, exist,
//! remove, listing, idempotent puts and upserts, zero-copy buffers, tenant/domain isolation.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{crescent_bin, owner_and_writer, Proc, Server};
use crescent_client::{BearerToken, CrescentClient, Placement, PutOptions};
use rand::{Rng, RngCore, SeedableRng};

/// 0: an empty value is an object like any other (docs/api.md "Empty values").
const SIZES: [usize; 9] = [0, 1, 7, 4095, 4096, 65_537, 1 << 20, (3 << 20) + 5, 4 << 20];

fn value(rng: &mut impl RngCore, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

/// Takes a read lease on `key` the way a reader that never releases would (a bare HTTP get);
/// returns its deadline (ms).
async fn held_lease(client: &CrescentClient, key: &str) -> i64 {
    let scope = client.scope();
    let body = serde_json::json!({
        "id": {"tenant": scope.tenant(), "domain": scope.domain(), "key": key}
    });
    let mut req = reqwest::Client::new().post(format!("http://{}/v1/objects/get", client.server()));
    if let Some(key) = common::key_of(&client.server()) {
        req = req.bearer_auth(key.client(scope.tenant().unwrap_or(common::auth::DEFAULT_TENANT)));
    }
    let reply: serde_json::Value = req.json(&body).send().await.unwrap().json().await.unwrap();
    reply["lease_until_ms"].as_i64().expect("a lease deadline")
}

async fn round_trips(client: &CrescentClient, opts: &PutOptions, tag: &str) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (i, &len) in SIZES.iter().enumerate() {
        let key = format!("{tag}/single/{i}");
        let v = value(&mut rng, len);
        let out = client.put_with(&key, &v, opts).await.unwrap();
        assert!(!out.already_existed);
        assert_eq!(client.get(&key).await.unwrap(), v, "{key} ({len} B)");
        assert_eq!(client.get_size(&key).await.unwrap(), len as u64);
        assert!(client.is_exist(&key).await.unwrap());
    }
    let keys: Vec<String> = (0..40).map(|i| format!("{tag}/batch/{i}")).collect();
    let values: Vec<Vec<u8>> = (0..40)
        .map(|i| {
            let len = if i % 10 == 0 {
                1 << 20
            } else if i % 10 == 5 {
                0
            } else {
                rng.gen_range(1..20_000)
            };
            value(&mut rng, len)
        })
        .collect();
    for r in client.put_batch_with(&keys, &values, opts).await.unwrap() {
        r.unwrap();
    }
    let got = client.get_batch(&keys).await.unwrap();
    for ((k, v), g) in keys.iter().zip(&values).zip(got) {
        assert_eq!(&g.unwrap(), v, "{k}");
    }
    let mut probe = keys.clone();
    probe.push(format!("{tag}/absent"));
    let exist = client.batch_is_exist(&probe).await.unwrap();
    assert!(exist[..40].iter().all(|e| *e.as_ref().unwrap()));
    assert!(!exist[40].as_ref().unwrap());
    let listed = client.list_all(&format!("{tag}/batch/")).await.unwrap();
    assert_eq!(listed.len(), 40);

    // A get leases what it read (10 s by default) and the client releases the lease once
    // its copy is done: a remove right after a get (single or batch) goes through.
    assert_eq!(client.get(&keys[2]).await.unwrap(), values[2]);
    client.remove(&keys[2]).await.unwrap();
    client.remove(&keys[3]).await.unwrap();
    // A lease nobody released (a reader still copying, here a bare HTTP get) refuses a plain
    // remove; a forced one is not refused.
    let leased = held_lease(client, &keys[0]).await;
    assert!(leased > 0);
    let e = client.remove(&keys[0]).await.unwrap_err();
    assert_eq!(e.code_str(), "BUSY", "{e}");
    assert!(e.retryable());
    client.remove_forced(&keys[0]).await.unwrap();
    assert!(!client.is_exist(&keys[0]).await.unwrap());
    let e = client.get(&keys[0]).await.unwrap_err();
    assert_eq!(e.code_str(), "NOT_FOUND", "{e}");

    // Unread keys: remove, batch remove and prefix remove.
    let rm: Vec<String> = (0..6).map(|i| format!("{tag}/rm/{i}")).collect();
    let small: Vec<&[u8]> = vec![b"v"; rm.len()];
    for r in client.put_batch(&rm, &small).await.unwrap() {
        r.unwrap();
    }
    client.remove(&rm[0]).await.unwrap();
    let removed = client.remove_batch(&rm[1..3]).await.unwrap();
    assert!(removed.iter().all(|r| r.is_ok()), "{removed:?}");
    let exist = client.batch_is_exist(&rm).await.unwrap();
    let exist: Vec<bool> = exist.into_iter().map(|e| e.unwrap()).collect();
    assert_eq!(exist, vec![false, false, false, true, true, true]);
    let r = client.remove_prefix(&format!("{tag}/rm/")).await.unwrap();
    assert_eq!((r.removed, r.skipped), (3, 0));
    assert!(client
        .list_all(&format!("{tag}/rm/"))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn local_owner_round_trips_every_operation() {
    let server = Server::start();
    let (owner, client) = owner_and_writer(&server.server(), "objects-owner", 128 << 20).await;
    round_trips(&client, &PutOptions::default(), "local").await;
    // Everything committed here landed in our own segment: the ownership table holds exactly
    // the live objects (removed ones were forgotten).
    let live = client.list_all("").await.unwrap();
    let owned = owner.ownership().snapshot();
    assert_eq!(owned.len(), live.len());
    assert!(owned.iter().all(|o| &*o.segment_id == owner.segment_id()));
    assert!(owned.iter().all(|o| live.iter().any(|l| l.key == o.id.key)));
    client.put("tracked", b"abc").await.unwrap();
    let entry = owner
        .ownership()
        .lookup(
            &crescent_wire::store::ObjectId::new("tracked"),
            owner.segment_id(),
        )
        .unwrap();
    assert_eq!(entry.length, 3);
    assert_eq!(owner.shutdown().await.unwrap(), live.len() + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_writes_and_reads_a_separate_owner_process_over_tcp() {
    let server = Server::start();
    let mut cmd = Command::new(crescent_bin());
    if let Some(token) = server.owner_token("remote-owner") {
        cmd.env("CRESCENT_TOKEN", token);
    }
    let child = cmd
        .args([
            "--server",
            &server.server(),
            "--json",
            "owner",
            "--size",
            "128M",
            "--id",
            "remote-owner",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut proc = Proc(child);
    let mut lines = BufReader::new(proc.0.stdout.take().unwrap()).lines();
    let ready: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let segment = ready["segment_id"].as_str().unwrap().to_string();
    let reader = server.client();
    let opts = PutOptions {
        placement: Some(Placement::LocalFirst),
        preferred_segment: Some(segment),
        ..PutOptions::default()
    };
    round_trips(&reader, &opts, "remote").await;
    proc.signal(libc::SIGTERM);
    assert!(proc.0.wait().unwrap().success());
}

#[tokio::test]
async fn idempotent_puts_conflicts_and_upserts() {
    let server = Server::start();
    let (_owner, client) = owner_and_writer(&server.server(), "objects-owner", 16 << 20).await;
    client.put("k", b"one").await.unwrap();
    let again = client.put("k", b"one").await.unwrap();
    assert!(
        again.already_existed,
        "same content is an idempotent success"
    );
    let e = client.put("k", b"two").await.unwrap_err();
    assert_eq!(e.code_str(), "CONFLICT", "{e}");
    assert_eq!(client.get("k").await.unwrap(), b"one");
    client
        .put_with("k", b"two!", &PutOptions::upsert())
        .await
        .unwrap();
    assert_eq!(client.get("k").await.unwrap(), b"two!");
    assert_eq!(
        client.put("", b"x").await.unwrap_err().code_str(),
        "INVALID_ARGUMENT"
    );
    let long = "k".repeat(4097);
    assert_eq!(
        client.put(&long, b"x").await.unwrap_err().code_str(),
        "INVALID_ARGUMENT"
    );
    let e = client.get("never-written").await.unwrap_err();
    assert_eq!(e.code_str(), "NOT_FOUND");
}

#[tokio::test]
async fn zero_copy_put_from_and_get_into() {
    let server = Server::start();
    let (_owner, client) = owner_and_writer(&server.server(), "objects-owner", 32 << 20).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let data = value(&mut rng, 3 << 20);
    let src = client.register_buffer(data.clone()).await.unwrap();
    client
        .put_from("zc", &src, 1000, 2 << 20, &PutOptions::default())
        .await
        .unwrap();
    let dst = client.register_buffer(vec![0u8; 4 << 20]).await.unwrap();
    let n = client.get_into("zc", &dst, 4096).await.unwrap();
    assert_eq!(n, 2 << 20);
    let mut back = vec![0u8; n];
    dst.read(4096, &mut back).await.unwrap();
    assert_eq!(back, data[1000..1000 + (2 << 20)]);
    // The object does not fit after offset 3 MiB of a 4 MiB buffer.
    let e = client.get_into("zc", &dst, 3 << 20).await.unwrap_err();
    assert_eq!(e.code_str(), "INVALID_ARGUMENT");
    let e = client
        .put_from("zc2", &src, 3 << 20, 1, &PutOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code_str(), "INVALID_ARGUMENT");
    // An empty value: sent from and read into a registered buffer, nothing moves.
    client
        .put_from("zc-empty", &src, 1000, 0, &PutOptions::default())
        .await
        .unwrap();
    assert_eq!(client.get_into("zc-empty", &dst, 4 << 20).await.unwrap(), 0);
    assert_eq!(client.get_size("zc-empty").await.unwrap(), 0);
    client.unregister_buffer(&dst).await.unwrap();
}

#[tokio::test]
async fn tenants_and_domains_never_cross() {
    let server = Server::start();
    let (_owner, base) = owner_and_writer(&server.server(), "objects-owner", 16 << 20).await;
    // Each tenant's client holds a token of that tenant.
    let tenant = |t: &'static str| {
        let client = match server.client_token(t) {
            Some(token) => base.with_token(BearerToken::new(token)).unwrap(),
            None => base.clone(),
        };
        move |domain: Option<&str>| client.with_scope(Some(t), domain).unwrap()
    };
    let (t1, t2) = (tenant("t1"), tenant("t2"));
    let scopes = [
        base.clone(),
        t1(None),
        t2(None),
        t1(Some("d1")),
        t1(Some("d2")),
    ];
    for (i, c) in scopes.iter().enumerate() {
        c.put("same", format!("value-{i}").as_bytes())
            .await
            .unwrap();
        c.put(&format!("only-{i}"), b"x").await.unwrap();
    }
    for (i, c) in scopes.iter().enumerate() {
        assert_eq!(
            c.get("same").await.unwrap(),
            format!("value-{i}").as_bytes()
        );
        let keys: Vec<String> = c
            .list_all("")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.key)
            .collect();
        assert_eq!(keys, vec![format!("only-{i}"), "same".to_string()]);
        for j in 0..scopes.len() {
            assert_eq!(c.is_exist(&format!("only-{j}")).await.unwrap(), i == j);
        }
    }
    scopes[1].remove_forced("same").await.unwrap();
    let e = scopes[1].get("same").await.unwrap_err();
    assert_eq!(e.code_str(), "NOT_FOUND");
    for (i, c) in scopes.iter().enumerate() {
        assert_eq!(c.is_exist("same").await.unwrap(), i != 1, "scope {i}");
    }
    let r = scopes[3].remove_prefix("only-").await.unwrap();
    assert_eq!(r.removed, 1);
    for (i, c) in scopes.iter().enumerate() {
        let there = c.is_exist(&format!("only-{i}")).await.unwrap();
        assert_eq!(there, i != 3, "scope {i}");
    }
    assert!(base.with_scope(Some("bad tenant"), None).is_err());
}

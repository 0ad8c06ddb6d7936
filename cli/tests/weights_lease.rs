//! A weight read holds its revision lease for the whole read (docs/weights.md, "Reads:
//! lease, streaming, progress"), against a real crescentd through the public `WeightStore`: a read that
//! outlasts the lease's TTL keeps it renewed (the revision cannot be removed meanwhile), and
//! the lease is released when the read completes, fails, or is cancelled (dropped) well
//! before its TTL would end it. `weight_get_into` lands each payload object in the caller's
//! registered buffer. A `crescent weights get` interrupted by SIGINT releases its lease
//! before it exits and leaves no file.

mod weights_common;

use std::path::Path;
use std::time::{Duration, Instant};

use crescent_client::{ClientError, CrescentClient, WeightStore};
use crescent_wire::weights as w;
use weights_common::common;
use weights_common::*;

fn id(resource: &str) -> w::WeightId {
    w::WeightId::new("lease", resource, "main", 1)
}

/// Tensor `t` of the test revisions: 64 KiB of a byte pattern of its own.
fn tensor(t: usize) -> Vec<u8> {
    (0..65_536).map(|i| (i * 7 + t * 13) as u8).collect()
}

async fn put(store: &WeightStore, id: &w::WeightId, tensors: usize) {
    let policy = w::WeightPolicy::of(w::PreferredResidency::Hot, w::MigrationMode::Manual);
    let mut writer = store.weight_put(id.clone(), Some(policy)).await.unwrap();
    for t in 0..tensors {
        writer
            .add_tensor(&format!("t{t}"), &tensor(t))
            .await
            .unwrap();
    }
    writer.close().await.unwrap();
}

async fn leases(store: &WeightStore, id: &w::WeightId) -> u64 {
    store
        .weight_get_metadata(id)
        .await
        .unwrap()
        .active_lease_count
}

fn remove_req(id: &w::WeightId) -> w::RemoveWeightRequest {
    w::RemoveWeightRequest {
        id: id.clone(),
        expected_metadata_generation: None,
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, ClientError>) -> &'static str {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code_str(),
    }
}

fn start() -> (tempfile::TempDir, Node, CrescentClient) {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "", &[]);
    // Publishing weights is an operator's call (docs/security.md: weight_write).
    let client = node.inner.admin_client();
    (dir, node, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_outlasting_its_lease_keeps_it_renewed_then_releases_it() {
    let (_dir, _node, client) = start();
    let ttl = Duration::from_millis(600);
    let store = WeightStore::new(&client).with_read_lease(ttl).unwrap();
    let a = id("long-read");
    put(&store, &a, 6).await;
    let reader = store.weight_open(&a, "lease-test").await.unwrap();
    let objects = reader.manifest().objects.clone();
    // Six TTLs of a slow load: one object every half TTL.
    let started = Instant::now();
    for (t, object) in objects.iter().enumerate() {
        tokio::time::sleep(ttl / 2).await;
        assert_eq!(reader.read_object(object).await.unwrap(), tensor(t));
        assert_eq!(leases(&store, &a).await, 1, "after {:?}", started.elapsed());
        assert_eq!(code(store.weight_remove(&remove_req(&a)).await), "BUSY");
    }
    tokio::time::sleep(ttl * 2).await;
    assert!(started.elapsed() > ttl * 5, "{:?}", started.elapsed());
    assert_eq!(leases(&store, &a).await, 1, "still held past five TTLs");
    assert_eq!(code(store.weight_remove(&remove_req(&a)).await), "BUSY");
    reader.close().await.unwrap();
    assert_eq!(leases(&store, &a).await, 0, "released at once by close");
    store.weight_remove(&remove_req(&a)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_read_releases_its_lease_long_before_the_ttl() {
    let (_dir, _node, client) = start();
    // The default 60 s TTL: only a release, not an expiry, can end the lease in this test.
    let store = WeightStore::new(&client);
    let a = id("cancelled");
    put(&store, &a, 3).await;
    let (opened_tx, opened) = tokio::sync::oneshot::channel();
    let reading = {
        let store = store.clone();
        let a = a.clone();
        tokio::spawn(async move {
            let reader = store.weight_open(&a, "cancelled-load").await.unwrap();
            let first = reader.manifest().objects[0].clone();
            reader.read_object(&first).await.unwrap();
            opened_tx.send(()).unwrap();
            // A load stuck on its next step until cancelled.
            tokio::time::sleep(Duration::from_secs(600)).await;
            drop(reader);
        })
    };
    opened.await.unwrap();
    assert_eq!(leases(&store, &a).await, 1);
    reading.abort();
    assert!(reading.await.unwrap_err().is_cancelled());
    let deadline = Instant::now() + Duration::from_secs(10);
    while leases(&store, &a).await != 0 {
        assert!(
            Instant::now() < deadline,
            "the dropped read's lease is still held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    store.weight_remove(&remove_req(&a)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weight_get_into_fills_caller_buffers_and_releases_on_success_and_error() {
    let (_dir, _node, client) = start();
    let store = WeightStore::new(&client);
    let a = id("into");
    put(&store, &a, 5).await;
    let size = store.weight_get_size(&a).await.unwrap() as usize;
    let buffer = client.register_buffer(vec![0u8; size]).await.unwrap();
    let mut at = 0;
    let placed = store
        .weight_get_into(&a, "into-test", |_, object| {
            let offset = at;
            at += object.bytes as usize;
            Ok((buffer.clone(), offset))
        })
        .await
        .unwrap();
    assert_eq!(placed.manifest.objects.len(), 5);
    let mut landed = vec![0u8; size];
    buffer.read(0, &mut landed).await.unwrap();
    let expected: Vec<u8> = (0..5).flat_map(tensor).collect();
    assert!(landed == expected, "the objects landed in manifest order");
    assert_eq!(leases(&store, &a).await, 0, "released on success");

    // A placement that fails part-way fails the read and still releases the lease.
    let mut placed = 0;
    let failed = store
        .weight_get_into(&a, "into-test", |_, _| {
            placed += 1;
            if placed == 3 {
                return Err(ClientError::InvalidArgument("no room for it".into()));
            }
            Ok((buffer.clone(), 0))
        })
        .await;
    assert_eq!(code(failed), "INVALID_ARGUMENT");
    assert_eq!(leases(&store, &a).await, 0, "released on error");
    // A buffer too small for an object is refused before any byte moves.
    let small = client.register_buffer(vec![0u8; 1024]).await.unwrap();
    let refused = store
        .weight_get_into(&a, "into-test", |_, _| Ok((small.clone(), 0)))
        .await;
    assert_eq!(code(refused), "INVALID_ARGUMENT");
    assert_eq!(leases(&store, &a).await, 0);
    assert_eq!(
        code(WeightStore::new(&client).with_read_lease(Duration::from_millis(10))),
        "INVALID_ARGUMENT"
    );
}

/// `crescent weights get` of revision `a` into `out`, interrupted (SIGINT) once it holds its
/// lease. `None` when it finished first (the test then tries again).
async fn interrupted_get(
    node: &Node,
    store: &WeightStore,
    a: &w::WeightId,
    out: &Path,
) -> Option<i32> {
    let args = [
        "weights",
        "get",
        "--namespace",
        &a.namespace,
        "--resource",
        &a.resource_id,
        "--revision",
        &a.revision,
        "--generation",
        "1",
        "-o",
        out.to_str().unwrap(),
    ];
    let mut cmd = std::process::Command::new(common::crescent_bin());
    cmd.env_remove("CRESCENT_TOKEN");
    if let Some(key) = common::key_of(&node.s()) {
        cmd.env("CRESCENT_TOKEN", key.token_for_cli(&args));
    }
    let mut child = cmd
        .arg("--server")
        .arg(node.s())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        if leases(store, a).await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // SAFETY: signalling our own child by its pid.
    #[allow(unsafe_code)]
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    Some(status.code().unwrap_or(-1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_cli_get_releases_its_lease_and_leaves_no_file() {
    let (dir, node, client) = start();
    let store = WeightStore::new(&client);
    let a = id("interrupted");
    let policy = w::WeightPolicy::of(w::PreferredResidency::Hot, w::MigrationMode::Manual);
    let mut writer = store.weight_put(a.clone(), Some(policy)).await.unwrap();
    let model = model_safetensors(64, 128 << 20, 7);
    writer
        .add_safetensors("model.safetensors", &model)
        .await
        .unwrap();
    writer.close().await.unwrap();
    for attempt in 0..5 {
        let out = dir.path().join(format!("out{attempt}"));
        let Some(code) = interrupted_get(&node, &store, &a, &out).await else {
            continue; // the get won the race: try again
        };
        assert_ne!(code, 0, "an interrupted get exits non-zero");
        // The CLI released the lease before exiting (its 60 s TTL has not run out).
        assert_eq!(
            leases(&store, &a).await,
            0,
            "the interrupted get's lease is held"
        );
        let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
        assert!(left.is_empty(), "an interrupted get left {left:?}");
        store.weight_remove(&remove_req(&a)).await.unwrap();
        return;
    }
    panic!("every get finished before it could be interrupted");
}

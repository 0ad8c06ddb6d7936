//! Releases reach the owner (docs/rebuild.md, "Releases"): objects in an owner's segment that
//! another process removes, prefix-removes or replaces are forgotten by the owner once its next
//! heartbeat brings the release, so a crescentd SIGKILL and restart (the owner replays its
//! table) does not bring them back, while every other object reads back byte-identical.

mod common;

use std::time::{Duration, Instant};

use common::Server;
use crescent_client::{Placement, PutOptions};
use crescent_owner::{Owner, OwnerConfig};
use crescent_wire::rebuild::GateState;
use crescent_wire::ErrorCode;
use rand::{Rng, RngCore, SeedableRng};

fn config(dir: &std::path::Path) -> String {
    let path = dir.join("crescentd.toml");
    std::fs::write(
        &path,
        "[store]\nembedded_segment_bytes = 0\nrebuild_degraded_timeout_secs = 120\n",
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

fn on_segment(segment: &str, upsert: bool) -> PutOptions {
    PutOptions {
        placement: Some(Placement::LocalFirst),
        preferred_segment: Some(segment.to_string()),
        upsert,
        ..PutOptions::default()
    }
}

fn random_value(rng: &mut rand::rngs::StdRng) -> Vec<u8> {
    let mut v = vec![0u8; rng.gen_range(1..20_000)];
    rng.fill_bytes(&mut v);
    v
}

async fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what} not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_objects_stay_removed_after_a_crescentd_restart() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = config(cfg_dir.path());
    let server = Server::start_with(&["--config", &cfg]);
    // The owner lives in this process; writer and remover are other clients, whose puts reach
    // the owner's table only as notices and whose removes only as releases.
    let owner_client = server.owner_client("forget-owner");
    let owner = Owner::start(
        &owner_client,
        OwnerConfig {
            owner_id: Some("forget-owner".into()),
            size: 16 << 20,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let writer = server.client();
    let remover = server.client();
    let seg = owner.segment_id().to_string();

    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let mut kept = Vec::new();
    for i in 0..30 {
        let v = random_value(&mut rng);
        writer
            .put_with(&format!("keep/{i}"), &v, &on_segment(&seg, false))
            .await
            .unwrap();
        kept.push((format!("keep/{i}"), v));
    }
    let mut gone = Vec::new();
    for key in ["gone/one", "gone/two", "doomed/a", "doomed/b", "doomed/c"] {
        let v = random_value(&mut rng);
        writer
            .put_with(key, &v, &on_segment(&seg, false))
            .await
            .unwrap();
        gone.push(key.to_string());
    }
    let replaced_old = random_value(&mut rng);
    writer
        .put_with("replaced", &replaced_old, &on_segment(&seg, false))
        .await
        .unwrap();
    let total = kept.len() + gone.len() + 1;
    let table = owner.ownership().clone();
    wait_until("every notice recorded", Duration::from_secs(10), || {
        table.len() == total
    })
    .await;

    remover.remove("gone/one").await.unwrap();
    remover.remove("gone/two").await.unwrap();
    let prefix = remover.remove_prefix("doomed/").await.unwrap();
    assert_eq!(prefix.removed, 3, "{prefix:?}");
    let replaced_new = random_value(&mut rng);
    remover
        .put_with("replaced", &replaced_new, &on_segment(&seg, true))
        .await
        .unwrap();
    kept.push(("replaced".to_string(), replaced_new));

    // One heartbeat later (2.5 s by default) the owner has applied all six releases. A
    // release finds its entry gone already ("unmatched") when the new version of "replaced"
    // was recorded first, or took over a freed address (the address fence dropped the older
    // replica): either way the allocation is out of the table.
    let releases = |outcome| owner_client.metrics().rebuild().count("releases", outcome);
    let started = Instant::now();
    while releases("forgotten") + releases("unmatched") < 6 {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "releases not applied: forgotten {} unmatched {} table {} heartbeats {}",
            releases("forgotten"),
            releases("unmatched"),
            table.len(),
            owner.heartbeats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(releases("forgotten") + releases("unmatched"), 6);
    assert!(releases("forgotten") >= 1);
    wait_until("the new version's notice", Duration::from_secs(10), || {
        table.len() == kept.len()
    })
    .await;
    let old_puts = table
        .snapshot()
        .into_iter()
        .filter(|r| {
            r.id.key.starts_with("gone/")
                || r.id.key.starts_with("doomed/")
                || (r.id.key == "replaced" && r.length == replaced_old.len() as u64)
        })
        .count();
    assert_eq!(old_puts, 0);

    let term_before = owner.term();
    let server = server.kill_and_restart();
    wait_until("the owner's replay", Duration::from_secs(30), || {
        owner.term() != term_before && owner.replayed_term() == owner.term()
    })
    .await;
    let check = server.client();
    let started = Instant::now();
    while check.rebuild_status().await.map(|s| s.state).ok() != Some(GateState::Serving) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "gate not SERVING"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for key in &gone {
        let err = check.get(key).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::NotFound), "{key}: {err}");
    }
    for (key, value) in &kept {
        assert_eq!(&check.get(key).await.unwrap(), value, "{key}");
    }
    owner.shutdown().await.unwrap();
}

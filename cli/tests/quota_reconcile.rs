//! The tenants' usage in the journal (docs/tenants.md, "Journaled usage and
//! reconciliation"), with real processes: crescentd records it write-behind, and after a
//! SIGKILL the restarted node compares the record with the directory its owners rebuilt,
//! reporting a difference instead of silently starting from the rebuilt usage.

mod common;

use common::tenant::{self, show};
use common::{crescent, wait_readable, Server};

fn put(server: &str, tenant: &str, key: &str, bytes: usize) {
    let (code, answer) = tenant::put(server, tenant, key, &vec![3u8; bytes], false);
    assert_eq!(code, 0, "{answer}");
}

/// Waits until `done` holds of `tenant show` (housekeeping runs every 100 ms here).
fn wait_show(server: &str, tenant: &str, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let q = show(server, tenant);
        if done(&q) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {q}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn metric(server: &str, series: &str) -> Option<f64> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let text = runtime.block_on(async {
        let m = reqwest::get(format!("http://{server}/metrics"))
            .await
            .unwrap();
        m.text().await.unwrap()
    });
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

const CONFIG: &str = "[store]\nembedded_segment_bytes = 0\nhousekeeping_interval_ms = 100\n\
    rebuild_degraded_timeout_secs = 2\n";

fn reconciliation(q: &serde_json::Value) -> (u64, u64, u64, u64) {
    let r = &q["reconciliation"];
    let n = |f: &str| r[f].as_u64().unwrap_or_else(|| panic!("{f} in {q}"));
    (
        n("recorded_bytes"),
        n("recorded_objects"),
        n("rebuilt_bytes"),
        n("rebuilt_objects"),
    )
}

#[test]
fn usage_is_journaled_and_reconciled_with_what_comes_back_after_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crescentd.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let server = Server::start_with(&["--config", config.to_str().unwrap()]);
    let s = server.server();
    // The bytes live in a separate owner process, so they outlive crescentd.
    let (owner, _) = common::start_owner(&s, "usage-owner", "8M");
    for key in ["a", "b", "c"] {
        put(&s, "acme", key, 1000);
    }
    // The usage reaches the journal without any put waiting for it (a housekeeping pass).
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert!(
        show(&s, "acme").get("reconciliation").is_none(),
        "none before a rebuild"
    );

    // Everything comes back: the rebuilt usage is the recorded one.
    let server = server.kill_and_restart();
    let s = server.server();
    for key in ["a", "b", "c"] {
        wait_readable(&s, "acme", key);
    }
    wait_show(&s, "acme", "acme reconciled", |q| {
        q["reconciliation"].is_object()
    });
    let acme = show(&s, "acme");
    assert_eq!(reconciliation(&acme), (3000, 3, 3000, 3), "{acme}");
    assert_eq!(
        metric(
            &s,
            "crescent_quota_reconciliations_total{outcome=\"converged\"}"
        ),
        Some(1.0)
    );

    // The owner dies with crescentd: nothing comes back, and the difference is reported.
    drop(owner);
    let server = server.kill_and_restart();
    let s = server.server();
    wait_show(&s, "acme", "acme reconciled again", |q| {
        q["reconciliation"]["rebuilt_bytes"] == 0
    });
    let acme = show(&s, "acme");
    assert_eq!(reconciliation(&acme), (3000, 3, 0, 0), "{acme}");
    assert_eq!(
        (&acme["used_bytes"], &acme["used_objects"]),
        (&0.into(), &0.into())
    );
    assert_eq!(
        metric(
            &s,
            "crescent_quota_reconciliations_total{outcome=\"differed\"}"
        ),
        Some(1.0)
    );
    let (code, out, err) = crescent(&s, &["tenant", "show", "--tenant", "acme"], None);
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.contains("last reconciliation: recorded 3000 bytes in 3 objects, rebuilt 0 bytes"),
        "{out}"
    );
}

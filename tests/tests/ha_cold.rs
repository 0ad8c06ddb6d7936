//! The cold tier across an HA failover, on a real etcd (CRESCENT_TEST_ETCD, started by
//! scripts/test.sh): two crescentd processes share one cold directory (the shared mount of
//! docs/cold-tier.md, "HA"). An object offloaded and evicted to cold-only on the active is
//! read back byte-identical from the new active after a SIGKILL of the old one, with no
//! owner replay: its locator is in the replicated journal, its payload on the shared mount.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crescent_tests::auth::DEFAULT_TENANT;
use crescent_tests::binaries::ensure_workspace_binary;
use crescent_tests::crescentd::{log_tail, CrescentdProcess};
use crescent_tests::ha_pair::{
    self, cluster_name, etcd, pair_key, wait_active, wait_pair_in_sync, write_node_config,
};
use crescent_tests::store_e2e::with_token;

/// Starts HA node `name` with an embedded segment and the shared cold root, HTTP only.
fn start_node(dir: &Path, name: &str, cluster: &str, cold_root: &Path) -> CrescentdProcess {
    // Continues the [ha] section that `write_node_config` opens.
    let extra = format!(
        "embedded_segment = true\n\n[store]\nembedded_segment_bytes = 16777216\n\n\
         [cold]\nroot = {:?}\n",
        cold_root.to_str().unwrap()
    );
    write_node_config(dir, name, &extra);
    ha_pair::start_node(dir, name, cluster, false)
}

/// Who runs a `crescent` command: an application of the default tenant, or an operator.
#[derive(Clone, Copy)]
enum As {
    Client,
    Admin,
}

/// `crescent --server ADDR --json ARGS` with optional stdin, with `who`'s token: (exit code,
/// stdout).
fn crescent(
    node: &CrescentdProcess,
    who: As,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> (i32, Vec<u8>) {
    use std::io::Write;
    let bin = ensure_workspace_binary("crescent-cli", "crescent");
    let token = match who {
        As::Client => node.client_token(DEFAULT_TENANT),
        As::Admin => node.admin_token(),
    };
    let mut cmd = Command::new(bin);
    with_token(&mut cmd, token.as_deref());
    let mut child = cmd
        .args(["--server", &node.addr.to_string()])
        .args(args)
        .env_remove("CRESCENT_SERVER")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), out.stdout)
}

fn json_ok(
    node: &CrescentdProcess,
    who: As,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> serde_json::Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let (code, out) = crescent(node, who, &full, stdin);
    assert_eq!(
        code,
        0,
        "{args:?}: {}\n{}",
        String::from_utf8_lossy(&out),
        log_tail(&node.log_path, 30)
    );
    serde_json::from_slice(&out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_only_object_is_read_from_the_shared_mount_after_failover() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("shared-cold");
    let cluster = cluster_name();
    let a = start_node(dir.path(), "a", &cluster, &cold);
    let b = start_node(dir.path(), "b", &cluster, &cold);
    let mut nodes = [a, b];
    let first = wait_pair_in_sync(&[&nodes[0], &nodes[1]]).await;
    let active = &nodes[first];

    let data: Vec<u8> = (0..(3 << 20) + 17)
        .map(|i: u32| i.wrapping_mul(2_654_435_761).to_le_bytes()[1])
        .collect();
    json_ok(active, As::Client, &["put", "ha/cold", "-"], Some(&data));
    let stat = json_ok(active, As::Admin, &["offload", "ha/cold"], None);
    assert_eq!(stat["cold"]["state"], "materialized", "{stat}");
    let stat = json_ok(active, As::Admin, &["evict", "ha/cold", "--hot"], None);
    assert!(stat["replicas"].as_array().unwrap().is_empty(), "{stat}");
    assert!(cold.join("DEVICE").exists());
    // The standby has the journal up to the eviction before the active dies.
    wait_pair_in_sync(&[&nodes[0], &nodes[1]]).await;

    nodes[first].guard.sigkill();
    let standby = &nodes[1 - first];
    wait_active(standby, Duration::from_secs(30)).await;
    let (code, got) = crescent(standby, As::Client, &["get", "ha/cold"], None);
    assert_eq!(code, 0, "{}", log_tail(&standby.log_path, 40));
    assert!(got == data, "the restored bytes differ");
    let devices = json_ok(standby, As::Admin, &["cold", "ls"], None);
    let device = &devices["devices"][0];
    assert_eq!(device["used"], data.len() as u64, "{devices}");
    assert_eq!(device["live_materialized_bytes"], data.len() as u64);
}

#[test]
fn a_shared_root_stamped_for_another_device_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cold = dir.path().join("shared-cold");
    std::fs::create_dir_all(&cold).unwrap();
    std::fs::write(cold.join("DEVICE"), "crescent-cold-device v1\nother\n").unwrap();
    let bin = ensure_workspace_binary("crescent-server", "crescentd");
    let cluster = cluster_name();
    let config = dir.path().join("a.toml");
    std::fs::write(
        &config,
        format!(
            "[ha]\nlease_ttl_secs = 2\n\n[cold]\nroot = {:?}\n",
            cold.to_str().unwrap()
        ),
    )
    .unwrap();
    let out = Command::new(bin)
        .arg("--data-dir")
        .arg(dir.path().join("a"))
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .args([
            "--etcd",
            &etcd(),
            "--cluster",
            &cluster,
            "--advertise",
            "127.0.0.1:1",
        ])
        .args(["--rpc-listen", "off", "--auth-secret-file"])
        .arg(&pair_key(dir.path()).path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(log.contains("stamped for another device"), "{log}");
}

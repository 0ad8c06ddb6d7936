//! `crescent tenant quota set` and `crescent tenant show` against a real crescentd with
//! [auth] on: the policy is journaled (versions bump only on change, it survives SIGKILL),
//! setting is the admin's, and a client sees only its own tenant.

mod common;

use common::{crescent, json, tenant, wait_readable, Server};

fn show(server: &str, tenant: &str) -> serde_json::Value {
    tenant::show(server, tenant)
}

fn set(server: &str, args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["--json", "tenant", "quota", "set"];
    all.extend_from_slice(args);
    let (code, out, err) = crescent(server, &all, None);
    assert!(!out.is_empty(), "exit {code}: {err}");
    (code, json(&out))
}

#[test]
fn quota_policies_are_set_by_admins_journaled_and_shown_to_their_tenant() {
    let server = Server::start();
    let s = server.server();
    let fresh = show(&s, "acme");
    assert_eq!(
        fresh,
        serde_json::json!({
            "tenant": "acme", "max_bytes": null, "max_objects": null,
            "policy_version": null, "fingerprint": null, "used_bytes": 0, "used_objects": 0,
            "pending_bytes": 0, "pending_operations": 0, "in_doubt_operations": 0,
            "removing_bytes": 0,
        })
    );

    let args = [
        "--tenant",
        "acme",
        "--max-bytes",
        "1000",
        "--max-objects",
        "5",
    ];
    let (code, reply) = set(&s, &args);
    assert_eq!(code, 0, "{reply}");
    assert_eq!(reply["changed"], true);
    let quota = &reply["quota"];
    assert_eq!(
        (quota["max_bytes"].as_u64(), quota["max_objects"].as_u64()),
        (Some(1000), Some(5))
    );
    assert_eq!(quota["policy_version"], 1);
    // sha256 of "quota-policy/v1/max_bytes=1000/max_objects=5"
    assert_eq!(
        quota["fingerprint"],
        "0b4c07d46c826b7d2ff395a360ee7885a39128642dad3dd90f031221b9ea984b"
    );
    let (code, again) = set(&s, &args);
    assert_eq!(
        (code, &again["changed"], &again["quota"]),
        (0, &serde_json::json!(false), quota)
    );
    let (code, changed) = set(&s, &["--tenant", "acme", "--max-bytes", "2000"]);
    assert_eq!(code, 0, "{changed}");
    assert_eq!(changed["quota"]["policy_version"], 2);
    assert_eq!(changed["quota"]["max_objects"], serde_json::Value::Null);
    assert_eq!(show(&s, "other")["policy_version"], serde_json::Value::Null);

    // A client may show its own tenant only, and set nothing.
    let key = server.key.clone().expect("the harness runs with [auth]");
    let as_client = |tenant: &str, args: &[&str]| {
        let token = key.client(tenant);
        let mut all = vec!["--json", "--token", token.as_str()];
        all.extend_from_slice(args);
        let (code, out, _) = crescent(&s, &all, None);
        (code, json(&out))
    };
    let (code, own) = as_client("acme", &["tenant", "show", "--tenant", "acme"]);
    assert_eq!((code, &own["max_bytes"]), (0, &serde_json::json!(2000)));
    let (code, denied) = as_client("other", &["tenant", "show", "--tenant", "acme"]);
    assert_eq!(
        (code, &denied["error"]["code"]),
        (10, &serde_json::json!("PERMISSION_DENIED"))
    );
    let (code, denied) = as_client(
        "acme",
        &[
            "tenant",
            "quota",
            "set",
            "--tenant",
            "acme",
            "--max-bytes",
            "1",
        ],
    );
    assert_eq!(
        (code, &denied["error"]["code"]),
        (10, &serde_json::json!("PERMISSION_DENIED"))
    );
    let (code, _, err) = crescent(&s, &["tenant", "show"], None);
    assert_eq!(code, 2, "no --tenant is a usage error: {err}");

    // Journaled: a SIGKILLed crescentd recovers the policy and its version.
    let server = server.kill_and_restart();
    let after = show(&server.server(), "acme");
    assert_eq!(after, changed["quota"]);
}

fn put(server: &str, tenant: &str, key: &str, bytes: usize) -> (i32, serde_json::Value) {
    tenant::put(server, tenant, key, &vec![7u8; bytes], false)
}

fn usage(server: &str, tenant: &str) -> (u64, u64, u64) {
    let q = show(server, tenant);
    let n = |f: &str| q[f].as_u64().unwrap_or_else(|| panic!("{f} in {q}"));
    (n("used_bytes"), n("used_objects"), n("pending_bytes"))
}

#[test]
fn puts_past_a_tenants_quota_are_refused_and_usage_survives_sigkill() {
    // The bytes live in a separate owner process, so they outlive crescentd.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crescentd.toml");
    std::fs::write(&config, "[store]\nembedded_segment_bytes = 0\n").unwrap();
    let server = Server::start_with(&["--config", config.to_str().unwrap()]);
    let s = server.server();
    let _owner = common::start_owner(&s, "quota-owner", "16M");
    let (code, _) = set(
        &s,
        &[
            "--tenant",
            "acme",
            "--max-bytes",
            "3000",
            "--max-objects",
            "3",
        ],
    );
    assert_eq!(code, 0);
    for key in ["a", "b"] {
        let (code, reply) = put(&s, "acme", key, 1000);
        assert_eq!(code, 0, "{reply}");
    }
    // Each CLI process exits right after its put: the refusal is the server's, exit code 8.
    let (code, refused) = put(&s, "acme", "c", 1500);
    assert_eq!(code, 8, "{refused}");
    assert_eq!(refused["error"]["code"], "QUOTA_EXCEEDED", "{refused}");
    let (code, reply) = put(&s, "other", "c", 5000);
    assert_eq!(
        code, 0,
        "another tenant is not held by acme's quota: {reply}"
    );
    assert_eq!(usage(&s, "acme"), (2000, 2, 0));
    assert_eq!(usage(&s, "other"), (5000, 1, 0));

    let (code, out, err) = crescent(&s, &["--json", "tenant", "ls"], None);
    assert_eq!(code, 0, "{err}");
    let listed = json(&out);
    let names: Vec<&str> = listed["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .map(|t| t["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["acme", "other"]);
    let stats = reqwest::Client::new()
        .get(format!("http://{s}/v1/stats?tenant=acme"))
        .bearer_auth(server.admin_token().expect("harness key"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stats: serde_json::Value =
        runtime.block_on(async { stats.send().await.unwrap().json().await.unwrap() });
    assert_eq!(
        (stats["used_bytes"].as_u64(), stats["max_bytes"].as_u64()),
        (Some(2000), Some(3000))
    );
    let metrics = runtime.block_on(async {
        let m = reqwest::get(format!("http://{s}/metrics")).await.unwrap();
        m.text().await.unwrap()
    });
    for line in [
        "crescent_tenant_used_bytes{tenant=\"acme\"} 2000",
        "crescent_tenant_max_bytes{tenant=\"acme\"} 3000",
        "crescent_tenant_used_bytes{tenant=\"other\"} 5000",
        "crescent_store_ops_total{op=\"put_start\",outcome=\"quota_exceeded\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }

    // After SIGKILL the limits come back from the journal and the usage with the directory.
    let server = server.kill_and_restart();
    let s = server.server();
    for key in ["a", "b"] {
        wait_readable(&s, "acme", key);
    }
    wait_readable(&s, "other", "c");
    assert_eq!(usage(&s, "acme"), (2000, 2, 0));
    assert_eq!(usage(&s, "other"), (5000, 1, 0));
    let (code, refused) = put(&s, "acme", "c", 1500);
    assert_eq!(
        (code, &refused["error"]["code"]),
        (8, &serde_json::json!("QUOTA_EXCEEDED"))
    );
    let (code, reply) = put(&s, "acme", "c", 1000);
    assert_eq!(code, 0, "{reply}");
    let (code, refused) = put(&s, "acme", "d", 1);
    assert_eq!(
        (code, &refused["error"]["code"]),
        (8, &serde_json::json!("QUOTA_EXCEEDED")),
        "max_objects"
    );
    let (code, _, err) = crescent(&s, &["--tenant", "acme", "rm", "a"], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(usage(&s, "acme"), (2000, 2, 0));
}

fn tenants_config(max_bytes: u64) -> String {
    format!("[[tenants]]\nname = \"acme\"\nmax_bytes = {max_bytes}\n")
}

/// crescentd on `dir/data` with `config`, expected to stop on its own: its exit status and log.
fn start_refused(dir: &std::path::Path, config: &str) -> (std::process::ExitStatus, String) {
    let path = dir.join("refused.toml");
    std::fs::write(&path, config).unwrap();
    let mut child = std::process::Command::new(common::crescentd_bin())
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--config",
            path.to_str().unwrap(),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("crescentd started with a [[tenants]] policy that differs from the stored one");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn tenants_in_the_config_are_created_if_absent_and_a_changed_config_is_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::DirNode::start(dir.path(), Some(&tenants_config(1000)), &[]);
    let s = node.s();
    let q = show(&s, "acme");
    assert_eq!(
        (q["max_bytes"].as_u64(), q["policy_version"].as_u64()),
        (Some(1000), Some(1))
    );
    let (code, refused) = put(&s, "acme", "big", 1500);
    assert_eq!(
        (code, &refused["error"]["code"]),
        (8, &serde_json::json!("QUOTA_EXCEEDED"))
    );
    drop(node);

    // The config now says otherwise about a policy only the config set: startup fails.
    let (status, err) = start_refused(dir.path(), &tenants_config(2000));
    assert!(!status.success());
    assert!(
        err.contains("\"acme\"") && err.contains("tenant quota set"),
        "{err}"
    );

    // An admin's change wins over a config that is out of date.
    let node = common::DirNode::start(dir.path(), Some(&tenants_config(1000)), &[]);
    let (code, _) = set(&node.s(), &["--tenant", "acme", "--max-bytes", "5000"]);
    assert_eq!(code, 0);
    drop(node);
    let node = common::DirNode::start(dir.path(), Some(&tenants_config(2000)), &[]);
    let q = show(&node.s(), "acme");
    assert_eq!(
        (q["max_bytes"].as_u64(), q["policy_version"].as_u64()),
        (Some(5000), Some(2))
    );
}

#[test]
fn tenants_without_a_policy_are_held_to_the_configured_default() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crescentd.toml");
    let text = "[tenant_default]\nmax_bytes = 3000\nmax_objects = 2\n\n\
        [[tenants]]\nname = \"big\"\nmax_bytes = 100000\n";
    std::fs::write(&config, text).unwrap();
    let server = Server::start_with(&["--config", config.to_str().unwrap()]);
    let s = server.server();
    let anyone = show(&s, "anyone");
    assert_eq!(
        (
            &anyone["max_bytes"],
            &anyone["max_objects"],
            &anyone["policy_version"]
        ),
        (&3000.into(), &2.into(), &serde_json::Value::Null),
        "the default limits, no policy: {anyone}"
    );
    let (code, reply) = put(&s, "anyone", "a", 2000);
    assert_eq!(code, 0, "{reply}");
    let (code, refused) = put(&s, "anyone", "b", 1500);
    assert_eq!(code, 8, "{refused}");
    assert_eq!(refused["error"]["code"], "QUOTA_EXCEEDED", "{refused}");
    let (code, reply) = put(&s, "big", "a", 5000);
    assert_eq!(code, 0, "a policy replaces the default: {reply}");
    // An admin policy for a default-held tenant replaces the default for it alone.
    let (code, _) = set(&s, &["--tenant", "anyone", "--max-bytes", "10000"]);
    assert_eq!(code, 0);
    let (code, reply) = put(&s, "anyone", "b", 1500);
    assert_eq!(code, 0, "{reply}");
    let (code, refused) = put(&s, "other", "a", 3001);
    assert_eq!(
        (code, &refused["error"]["code"]),
        (8, &"QUOTA_EXCEEDED".into())
    );
}

//! A tenant's objects and usage as `crescent` CLI processes see them (docs/tenants.md,
//! "Admin API"): shared by the quota tests, which compare the usage with the listing.

use super::{crescent, json};

/// `crescent --json tenant show --tenant T`: the policy and the usage.
pub fn show(server: &str, tenant: &str) -> serde_json::Value {
    let (code, out, err) = crescent(
        server,
        &["--json", "tenant", "show", "--tenant", tenant],
        None,
    );
    assert_eq!(code, 0, "{err}");
    json(&out)
}

/// The unsigned figure `field` of a `tenant show` (or `tenant ls` entry).
pub fn figure(quota: &serde_json::Value, field: &str) -> u64 {
    quota[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {quota}"))
}

/// The tenant's objects as listed: (key, size), all complete, in key order.
pub fn listed(server: &str, tenant: &str) -> Vec<(String, u64)> {
    let (code, out, err) = crescent(server, &["--tenant", tenant, "--json", "ls"], None);
    assert_eq!(code, 0, "{err}");
    let listing = json(&out);
    listing["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| {
            assert_eq!(k["complete"], true, "{listing}");
            (
                k["key"].as_str().unwrap().to_string(),
                k["size"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `crescent --json --tenant T put [--upsert] KEY -` with `value` on stdin: its exit code and
/// its JSON answer (`{"stderr": ...}` when it printed none).
pub fn put(
    server: &str,
    tenant: &str,
    key: &str,
    value: &[u8],
    upsert: bool,
) -> (i32, serde_json::Value) {
    let mut args = vec!["--json", "--tenant", tenant, "put", key, "-"];
    if upsert {
        args.push("--upsert");
    }
    let (code, out, err) = crescent(server, &args, Some(value));
    match out.is_empty() {
        true => (code, serde_json::json!({ "stderr": err })),
        false => (code, json(&out)),
    }
}

/// The bytes of `tenant`'s `key` (`crescent get`), or the exit code and stderr of a failure.
pub fn get(server: &str, tenant: &str, key: &str) -> Result<Vec<u8>, (i32, String)> {
    let (code, out, err) = crescent(server, &["--tenant", tenant, "get", key], None);
    match code {
        0 => Ok(out),
        _ => Err((code, err)),
    }
}

/// The error code of a refused CLI answer (`QUOTA_EXCEEDED`, `OUT_OF_SPACE`, ...).
pub fn error_code(answer: &serde_json::Value) -> &str {
    answer["error"]["code"].as_str().unwrap_or("")
}

/// Waits (up to 20 s) until the tenant's usage is exactly its listing, with nothing pending
/// or held by a remove (a remove's held quota is given back by its journal write); returns
/// the listing.
pub fn wait_usage_is_the_listing(server: &str, tenant: &str) -> Vec<(String, u64)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let objects = listed(server, tenant);
        let bytes: u64 = objects.iter().map(|(_, size)| size).sum();
        let want = (bytes, objects.len() as u64, 0, 0, 0);
        let q = show(server, tenant);
        let got = (
            figure(&q, "used_bytes"),
            figure(&q, "used_objects"),
            figure(&q, "pending_bytes"),
            figure(&q, "in_doubt_operations"),
            figure(&q, "removing_bytes"),
        );
        if got == want {
            return objects;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{tenant}: usage {got:?}, the listing {objects:?} wants {want:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

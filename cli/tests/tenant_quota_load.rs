//! Tenant quotas under load, with real processes only: crescentd, `crescent` CLI processes
//! that exit right after their command, and `crescent owner` storage owners
//! (docs/tenants.md, "Enforcement on the put path" and "Eviction"): concurrent writers of one
//! tenant never pass its limits together, a tenant past its quota and past the store's free
//! space never evicts another tenant's objects, and limits and usage come back the same after
//! a SIGKILL.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use common::tenant::{error_code, figure, get, listed, put, show, wait_usage_is_the_listing};
use common::{crescent, json, start_owner, wait_readable, Proc, Server};

/// What a tenant holds as its writers saw it: key -> the value of its last acknowledged put.
type Stored = BTreeMap<String, Vec<u8>>;

fn set_quota(server: &str, tenant: &str, limits: &[&str]) {
    let mut args = vec!["--json", "tenant", "quota", "set", "--tenant", tenant];
    args.extend_from_slice(limits);
    let (code, out, err) = crescent(server, &args, None);
    assert_eq!(code, 0, "{err}{}", String::from_utf8_lossy(&out));
}

/// `size` bytes that differ for every (key, version): a read shows which put it got.
fn value(key: &str, version: u32, size: usize) -> Vec<u8> {
    let seed = format!("{key}/{version}/");
    seed.bytes().cycle().take(size).collect()
}

fn rm(server: &str, tenant: &str, key: &str) {
    let (code, _, err) = crescent(server, &["--tenant", tenant, "rm", key], None);
    assert_eq!(code, 0, "rm {key}: {err}");
}

/// Every acknowledged put of `tenant` is listed with its size, nothing else is, and each
/// reads back byte for byte; the usage is then exactly the listing.
fn assert_holds_exactly(server: &str, tenant: &str, stored: &Stored) {
    let want: Vec<(String, u64)> = stored
        .iter()
        .map(|(k, v)| (k.clone(), v.len() as u64))
        .collect();
    assert_eq!(listed(server, tenant), want, "{tenant}'s listing");
    for (key, bytes) in stored {
        let got = get(server, tenant, key).unwrap_or_else(|e| panic!("get {key}: {e:?}"));
        assert!(
            got == *bytes,
            "{tenant}/{key}: other bytes than its last put"
        );
    }
    assert_eq!(wait_usage_is_the_listing(server, tenant), want);
}

/// crescentd without its embedded segment, and one `crescent owner` of `size`: the store's
/// capacity is that owner's segment, and its bytes outlive a crescentd SIGKILL. The config's
/// directory lives as long as the store (a restart reads the config again).
fn store_of_one_owner(owner: &str, size: &str) -> (Server, Proc, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crescentd.toml");
    std::fs::write(&config, "[store]\nembedded_segment_bytes = 0\n").unwrap();
    let server = Server::start_with(&["--config", config.to_str().unwrap()]);
    let (proc, _) = start_owner(&server.server(), owner, size);
    (server, proc, dir)
}

const ACME: &str = "acme";
const ACME_MAX_BYTES: u64 = 40_000;
const ACME_MAX_OBJECTS: u64 = 30;
const WRITERS: usize = 16;
const REFUSALS_PER_WRITER: usize = 8;

/// Writer `w` of acme: `crescent put` processes of its own keys (new ones of 1000..=3000
/// bytes; every third put an overwrite of its oldest key, 500 bytes bigger) until the quota
/// refused it REFUSALS_PER_WRITER times. After each refusal but the last it removes its oldest
/// key, so the tenant keeps hovering at its limit while the others write.
fn acme_writer(s: &str, w: usize) -> Stored {
    let mut stored = Stored::new();
    let mut refusals = 0;
    for i in 0..200u32 {
        let oldest = stored.iter().next().map(|(k, v)| (k.clone(), v.len()));
        let (key, size, upsert) = match oldest {
            Some((key, len)) if i % 3 == 2 => (key, len + 500, true),
            _ => {
                let size = 1000 + (w * 7919 + i as usize * 104_729) % 2001;
                (format!("w{w:02}-{i:03}"), size, false)
            }
        };
        let bytes = value(&key, i, size);
        let (code, answer) = put(s, ACME, &key, &bytes, upsert);
        match (code, error_code(&answer)) {
            (0, _) => {
                stored.insert(key, bytes);
            }
            (8, "QUOTA_EXCEEDED") => {
                refusals += 1;
                if refusals == REFUSALS_PER_WRITER {
                    return stored;
                }
                if let Some(oldest) = stored.keys().next().cloned() {
                    rm(s, ACME, &oldest);
                    stored.remove(&oldest);
                }
            }
            _ => panic!("put {key} ({size} bytes): exit {code}: {answer}"),
        }
    }
    panic!("writer {w}: 200 puts and only {refusals} refusals");
}

/// Polls `tenant show` of acme until `done`: how many polls, and those over a limit.
/// `tenant show` loads the counters one by one (`TenantUsage::figures`, store/src/tenants.rs)
/// while a put's commit adds to used before it takes from pending: a figure over the limit by
/// no more than the puts then committing would be that read, not an admission past the limit.
fn poll_acme_limits(s: &str, done: &AtomicBool) -> (usize, Vec<serde_json::Value>) {
    let (mut polls, mut over) = (0, Vec::new());
    while !done.load(Ordering::Acquire) {
        let q = show(s, ACME);
        polls += 1;
        let bytes = figure(&q, "used_bytes") + figure(&q, "pending_bytes");
        if bytes > ACME_MAX_BYTES || figure(&q, "used_objects") > ACME_MAX_OBJECTS {
            over.push(q);
        }
    }
    (polls, over)
}

#[test]
fn sixteen_concurrent_writer_processes_of_one_tenant_never_exceed_its_quota() {
    let server = Server::start();
    let s = server.server();
    let (max_bytes, max_objects) = (ACME_MAX_BYTES.to_string(), ACME_MAX_OBJECTS.to_string());
    set_quota(
        &s,
        ACME,
        &["--max-bytes", &max_bytes, "--max-objects", &max_objects],
    );
    let done = AtomicBool::new(false);
    let (stored, (polls, over)) = std::thread::scope(|scope| {
        let poller = scope.spawn(|| poll_acme_limits(&s, &done));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                scope.spawn({
                    let s = &s;
                    move || acme_writer(s, w)
                })
            })
            .collect();
        let mut stored = Stored::new();
        for writer in writers {
            stored.extend(writer.join().expect("a writer failed"));
        }
        done.store(true, Ordering::Release);
        (stored, poller.join().expect("the poller failed"))
    });
    eprintln!(
        "{polls} polls of tenant show; acme holds {} objects",
        stored.len()
    );
    assert!(polls > 0);
    assert!(over.is_empty(), "used + pending over a limit: {over:?}");
    let q = show(&s, ACME);
    assert!(
        figure(&q, "used_bytes") <= ACME_MAX_BYTES
            && figure(&q, "used_objects") <= ACME_MAX_OBJECTS,
        "{q}"
    );
    assert_holds_exactly(&s, ACME, &stored);
}

const QUIET: &str = "quiet";
const NOISY: &str = "noisy";
/// The owner's segment: the whole store.
const SEGMENT_BYTES: u64 = 4 << 20;
const QUIET_OBJECTS: usize = 20;
const QUIET_OBJECT_BYTES: usize = 50_000;

/// noisy's puts `from..to`: 200 KB values under new keys, every fourth a 250 KB overwrite of
/// the key three puts back. Returns how many ended in each outcome (`ok` or the error code of
/// an exit 8), panicking on any other.
fn noisy_puts(s: &str, range: std::ops::Range<u32>) -> BTreeMap<String, usize> {
    let mut outcomes = BTreeMap::new();
    for i in range {
        let (key, size, upsert) = match i % 4 {
            3 => (format!("n{:03}", i - 3), 250_000, true),
            _ => (format!("n{i:03}"), 200_000, false),
        };
        let (code, answer) = put(s, NOISY, &key, &value(&key, i, size), upsert);
        let outcome = match code {
            0 => "ok",
            8 => error_code(&answer),
            _ => panic!("put {key}: exit {code}: {answer}"),
        };
        *outcomes.entry(outcome.to_string()).or_default() += 1;
    }
    outcomes
}

/// The sum of the `crescent_store_evictions_total` series, and those lines.
fn evictions(s: &str) -> (f64, Vec<String>) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let text = runtime.block_on(async {
        let m = reqwest::get(format!("http://{s}/metrics")).await.unwrap();
        m.text().await.unwrap()
    });
    let lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("crescent_store_evictions_total"))
        .map(str::to_string)
        .collect();
    let total = lines
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    (total, lines)
}

#[test]
fn a_noisy_tenant_past_its_quota_never_evicts_another_tenants_objects() {
    let (server, _owner, _config) = store_of_one_owner("small-owner", "4M");
    let s = server.server();
    // quiet holds a quarter of the store, well under its fair share (half of it, with two
    // tenants holding objects): watermark eviction takes from noisy's excess first.
    let quiet: Stored = (0..QUIET_OBJECTS)
        .map(|i| {
            let key = format!("q{i:02}");
            let bytes = value(&key, 0, QUIET_OBJECT_BYTES);
            (key, bytes)
        })
        .collect();
    for (key, bytes) in &quiet {
        let (code, answer) = put(&s, QUIET, key, bytes, false);
        assert_eq!(code, 0, "{answer}");
    }

    // Past its quota (2 MiB of the 3 MiB still free): refused by the quota, not the space.
    set_quota(&s, NOISY, &["--max-bytes", "2M"]);
    let refused = noisy_puts(&s, 0..30);
    eprintln!("noisy under a 2M quota: {refused:?}");
    assert!(refused.get("QUOTA_EXCEEDED") > Some(&0), "{refused:?}");
    assert_eq!(refused.get("OUT_OF_SPACE"), None, "{refused:?}");
    assert!(figure(&show(&s, NOISY), "used_bytes") <= 2 << 20);
    assert_holds_exactly(&s, QUIET, &quiet);

    // Past the store's free space: the quota no longer stops noisy, the space does, and
    // noisy may only evict its own objects (docs/tenants.md, "Eviction").
    set_quota(&s, NOISY, &["--max-bytes", "1G"]);
    let full = noisy_puts(&s, 30..80);
    let (evicted, lines) = evictions(&s);
    eprintln!("noisy past the free space: {full:?}; evictions: {lines:?}");
    assert!(
        full.contains_key("OUT_OF_SPACE") || evicted > 0.0,
        "noisy wrote 10 MB into a 4 MiB store without meeting its end: {full:?} {lines:?}"
    );
    assert_holds_exactly(&s, QUIET, &quiet);
    let noisy_used = figure(&show(&s, NOISY), "used_bytes");
    let quiet_bytes = (QUIET_OBJECTS * QUIET_OBJECT_BYTES) as u64;
    assert!(noisy_used <= SEGMENT_BYTES - quiet_bytes, "{noisy_used}");
}

/// alpha (10000 bytes, 5 objects) and beta (20000 bytes) after creates, overwrites (growing
/// and shrinking), removes and a refusal: what each holds.
fn two_tenants_with_history(s: &str) -> (Stored, Stored) {
    set_quota(s, "alpha", &["--max-bytes", "10000", "--max-objects", "5"]);
    set_quota(s, "beta", &["--max-bytes", "20000"]);
    let mut held = [Stored::new(), Stored::new()];
    let steps: [(usize, &str, usize, bool); 9] = [
        (0, "a", 3000, false),
        (0, "b", 3000, false),
        (0, "c", 2000, false),
        (0, "a", 4000, true),
        (0, "d", 1000, false),
        (1, "x", 5000, false),
        (1, "y", 5000, false),
        (1, "x", 2000, true),
        (1, "z", 9000, false),
    ];
    for (version, (t, key, size, upsert)) in steps.into_iter().enumerate() {
        let tenant = ["alpha", "beta"][t];
        let bytes = value(key, version as u32, size);
        let (code, answer) = put(s, tenant, key, &bytes, upsert);
        assert_eq!(code, 0, "{tenant}/{key}: {answer}");
        held[t].insert(key.to_string(), bytes);
    }
    for (t, key) in [(0, "b"), (1, "y")] {
        rm(s, ["alpha", "beta"][t], key);
        held[t].remove(key);
    }
    let (code, refused) = put(s, "alpha", "e", &value("e", 0, 4000), false);
    assert_eq!((code, error_code(&refused)), (8, "QUOTA_EXCEEDED"));
    let [alpha, beta] = held;
    (alpha, beta)
}

/// `tenant ls --json` without the journal's view of the usage (`recorded`, `reconciliation`:
/// written behind, and reconciled after a restart), which a restart changes by design.
fn tenant_ls(s: &str) -> serde_json::Value {
    let (code, out, err) = crescent(s, &["--json", "tenant", "ls"], None);
    assert_eq!(code, 0, "{err}");
    let mut listed = json(&out);
    for t in listed["tenants"].as_array_mut().expect("tenants") {
        let fields = t.as_object_mut().expect("a tenant");
        fields.remove("recorded");
        fields.remove("reconciliation");
    }
    listed
}

#[test]
fn quotas_and_usage_are_the_same_after_kill_9_restart() {
    let (server, _owner, _config) = store_of_one_owner("restart-owner", "16M");
    let s = server.server();
    let (alpha, beta) = two_tenants_with_history(&s);
    assert_holds_exactly(&s, "alpha", &alpha);
    assert_holds_exactly(&s, "beta", &beta);
    let before = tenant_ls(&s);
    assert_eq!(
        before["tenants"].as_array().map(Vec::len),
        Some(2),
        "{before}"
    );

    let server = server.kill_and_restart();
    let s = server.server();
    server.wait_serving();
    for (tenant, stored) in [("alpha", &alpha), ("beta", &beta)] {
        for key in stored.keys() {
            wait_readable(&s, tenant, key);
        }
        assert_holds_exactly(&s, tenant, stored);
    }
    assert_eq!(tenant_ls(&s), before);

    // The same limits admit the same puts: alpha has 3000 bytes left, beta 9000.
    let (code, refused) = put(&s, "alpha", "e", &value("e", 1, 4000), false);
    assert_eq!((code, error_code(&refused)), (8, "QUOTA_EXCEEDED"));
    let (code, answer) = put(&s, "alpha", "e", &value("e", 2, 3000), false);
    assert_eq!(code, 0, "{answer}");
    let (code, refused) = put(&s, "beta", "w", &value("w", 0, 9001), false);
    assert_eq!((code, error_code(&refused)), (8, "QUOTA_EXCEEDED"));
    assert_eq!(figure(&show(&s, "alpha"), "used_bytes"), 10_000);
}

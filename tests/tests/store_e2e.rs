//! The store end to end over loopback, three processes each: crescentd (no embedded segment,
//! so every object lives on an owner), `crescent owner` storage owners, and this test process
//! as a non-owner reader/writer using the crescent-client library (every byte crosses TCP
//! to the owner's transfer listener).
//!
//! - `objects_round_trip_remove_and_owner_loss`: 10,000 objects of 1 B ..= 4 MiB (skewed
//!   small) are put and read back byte-identical; removed keys are gone and the rest stay;
//!   a second owner is SIGKILLed and its objects disappear after client_ttl while the first
//!   owner's objects all stay readable.
//! - `eviction_spares_leased_and_hard_pinned_objects`: a small owner segment is filled past
//!   the high watermark several times over; eviction happens (counter and missing keys, the
//!   oldest first) and never touches read-leased or hard-pinned objects.
//!
//! `CRESCENT_E2E_OBJECTS` overrides the object count (default 10,000).

use std::time::{Duration, Instant};

use crescent_client::{CrescentClient, Placement, PutOptions};
use crescent_tests::auth::DEFAULT_TENANT;
use crescent_tests::crescentd::CrescentdProcess;
use crescent_tests::env_count;
use crescent_tests::store_e2e::{
    check_value, counter, crescent_cli, object_sizes, object_value, start_crescentd, OwnerProcess,
};
use futures::stream::{self, StreamExt, TryStreamExt};

/// Items and bytes per batch request, and batches in flight.
const BATCH_ITEMS: usize = 64;
const BATCH_BYTES: usize = 8 << 20;
const IN_FLIGHT: usize = 4;

fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}/{i:06}")
}

/// Takes a read lease on each key with a bare HTTP get, which (unlike the client library)
/// never releases it: the lease lasts its full TTL.
async fn hold_read_leases(node: &CrescentdProcess, keys: &[String]) {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let base_url = node.base_url();
    let token = node.client_token(DEFAULT_TENANT).expect("auth is on");
    for k in keys {
        let reply: serde_json::Value = http
            .post(format!("{base_url}/v1/objects/get"))
            .bearer_auth(&token)
            .json(&serde_json::json!({"id": {"key": k}}))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("get {k}: {e}"))
            .json()
            .await
            .unwrap();
        assert!(reply["lease_until_ms"].as_i64().is_some(), "{reply}");
    }
}

/// Index ranges of `sizes` grouped into batches bounded by [`BATCH_ITEMS`] and [`BATCH_BYTES`].
fn batches(sizes: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, &len) in sizes.iter().enumerate() {
        if i > start && (i - start == BATCH_ITEMS || bytes + len > BATCH_BYTES) {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

fn on_segment(segment_id: &str) -> PutOptions {
    PutOptions {
        placement: Some(Placement::LocalFirst),
        preferred_segment: Some(segment_id.to_string()),
        ..PutOptions::default()
    }
}

/// Puts objects `base + i` (content index) under `prefix/i` with `opts`; every item must be a
/// fresh write of one replica.
async fn put_all(
    client: &CrescentClient,
    prefix: &str,
    base: u64,
    sizes: &[usize],
    opts: &PutOptions,
) {
    stream::iter(batches(sizes))
        .map(|range| async move {
            let keys: Vec<String> = range.clone().map(|i| key(prefix, i)).collect();
            let values: Vec<Vec<u8>> = range
                .clone()
                .map(|i| object_value(base + i as u64, sizes[i]))
                .collect();
            let results = client
                .put_batch_with(&keys, &values, opts)
                .await
                .map_err(|e| format!("put_batch of {}..: {e}", keys[0]))?;
            for (k, r) in keys.iter().zip(results) {
                let out = r.map_err(|e| format!("put {k}: {} {e}", e.code_str()))?;
                if out.already_existed || out.replicas != 1 {
                    return Err(format!("put {k}: unexpected outcome {out:?}"));
                }
            }
            Ok::<(), String>(())
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Reads every index in `which` of `prefix` back and checks it byte for byte.
async fn verify_all(
    client: &CrescentClient,
    prefix: &str,
    base: u64,
    sizes: &[usize],
    which: &[usize],
) {
    let which_sizes: Vec<usize> = which.iter().map(|&i| sizes[i]).collect();
    stream::iter(batches(&which_sizes))
        .map(|range| async move {
            let idx = &which[range];
            let keys: Vec<String> = idx.iter().map(|&i| key(prefix, i)).collect();
            let got = client
                .get_batch(&keys)
                .await
                .map_err(|e| format!("get_batch of {}..: {e}", keys[0]))?;
            for ((k, &i), r) in keys.iter().zip(idx).zip(got) {
                let v = r.map_err(|e| format!("get {k}: {} {e}", e.code_str()))?;
                check_value(k, base + i as u64, sizes[i], &v)?;
            }
            Ok::<(), String>(())
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// exist for each key (in batches).
async fn exists(client: &CrescentClient, keys: &[String]) -> Vec<bool> {
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(1000) {
        for (k, r) in chunk
            .iter()
            .zip(client.batch_is_exist(chunk).await.expect("batch exist"))
        {
            out.push(r.unwrap_or_else(|e| panic!("exist {k}: {e}")));
        }
    }
    out
}

/// Every key's get fails with one of `codes`.
async fn assert_gets_fail(client: &CrescentClient, keys: &[String], codes: &[&str]) {
    for chunk in keys.chunks(BATCH_ITEMS) {
        let got = client.get_batch(chunk).await.expect("get_batch");
        for (k, r) in chunk.iter().zip(got) {
            match r {
                Ok(v) => panic!("get {k}: returned {} bytes, expected {codes:?}", v.len()),
                Err(e) => assert!(
                    codes.contains(&e.code_str()),
                    "get {k}: {} ({e}), expected {codes:?}",
                    e.code_str()
                ),
            }
        }
    }
}

/// `(used, capacity)` of segment `segment_id` from `/stats`.
async fn segment_usage(client: &CrescentClient, segment_id: &str) -> Option<(u64, u64)> {
    let stats = client.stats().await.expect("stats");
    stats["store"]["per_segment"]
        .as_array()
        .expect("per_segment array")
        .iter()
        .find(|s| s["segment_id"] == segment_id)
        .map(|s| (s["used"].as_u64().unwrap(), s["capacity"].as_u64().unwrap()))
}

/// The `crescent` CLI, a reader process of its own, sees what the library sees: the 1 B and
/// the 4 MiB objects byte for byte, and a removed key absent.
fn cli_spot_check(node: &CrescentdProcess, sizes: &[usize], removed_key: &str) {
    let server = &node.addr.to_string();
    let token = node.client_token(DEFAULT_TENANT);
    let crescent_cli = |server: &str, args: &[&str]| crescent_cli(server, token.as_deref(), args);
    for i in [0, 1] {
        let k = key("obj", i);
        let (code, out, err) = crescent_cli(server, &["get", &k]);
        assert_eq!(code, 0, "crescent get {k}: {err}");
        check_value(&format!("crescent get {k}"), i as u64, sizes[i], &out)
            .unwrap_or_else(|e| panic!("{e}"));
        let (code, _, err) = crescent_cli(server, &["exist", &k]);
        assert_eq!(code, 0, "crescent exist {k}: {err}");
    }
    let (code, _, err) = crescent_cli(server, &["exist", removed_key]);
    assert_eq!(code, 1, "crescent exist {removed_key} (removed): {err}");
    let (code, out, err) = crescent_cli(server, &["--json", "get", removed_key]);
    let body: serde_json::Value = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("crescent --json get {removed_key}: {e}; stderr {err}"));
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (4, Some("NOT_FOUND")),
        "crescent get {removed_key} (removed): {body}"
    );
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_remove_and_owner_loss() {
    const CLIENT_TTL_SECS: u64 = 2;
    let tmp = tempfile::tempdir().unwrap();
    let crescentd = start_crescentd(
        tmp.path(),
        &format!(
            "embedded_segment_bytes = 0\nclient_ttl_secs = {CLIENT_TTL_SECS}\n\
             housekeeping_interval_ms = 100\nlease_ttl_ms = 500\nmax_lease_ms = 2000"
        ),
    );
    let mut keeper = OwnerProcess::start(&crescentd, "keeper", 2 << 30);
    let mut doomed = OwnerProcess::start(&crescentd, "doomed", 256 << 20);
    let client = crescentd.client().await;
    assert_eq!(client.own_segment(), None, "the reader is no storage owner");

    let n = env_count("CRESCENT_E2E_OBJECTS", 10_000) as usize;
    let sizes = object_sizes(n, 0x5EED);
    let total: u64 = sizes.iter().map(|&s| s as u64).sum();

    let t = Instant::now();
    put_all(&client, "obj", 0, &sizes, &on_segment(&keeper.segment_id)).await;
    let put_time = t.elapsed();
    let (used, _) = segment_usage(&client, &keeper.segment_id).await.unwrap();
    assert!(used >= total, "keeper holds {used} bytes, {total} were put");
    assert_eq!(
        segment_usage(&client, &doomed.segment_id).await,
        Some((0, doomed.size)),
        "nothing was placed on the other owner"
    );

    let t = Instant::now();
    let all: Vec<usize> = (0..n).collect();
    verify_all(&client, "obj", 0, &sizes, &all).await;
    let get_time = t.elapsed();

    // Remove every tenth key (and one more by itself) once the reads' leases are over.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let removed: Vec<usize> = (0..n).filter(|i| i % 10 == 3).collect();
    let removed_keys: Vec<String> = removed.iter().map(|&i| key("obj", i)).collect();
    for (k, r) in removed_keys[1..]
        .iter()
        .zip(client.remove_batch(&removed_keys[1..]).await.unwrap())
    {
        r.unwrap_or_else(|e| panic!("remove {k}: {e}"));
    }
    client.remove(&removed_keys[0]).await.unwrap();
    let again = client.remove(&removed_keys[0]).await.unwrap_err();
    assert_eq!(again.code_str(), "NOT_FOUND", "second remove: {again}");
    let all_keys: Vec<String> = (0..n).map(|i| key("obj", i)).collect();
    for (i, there) in exists(&client, &all_keys).await.into_iter().enumerate() {
        assert_eq!(
            there,
            i % 10 != 3,
            "exist {} after removing every 10th",
            all_keys[i]
        );
    }
    assert_gets_fail(&client, &removed_keys, &["NOT_FOUND"]).await;
    let listed = client.list_all("obj/").await.unwrap();
    assert_eq!(listed.len(), n - removed.len(), "listing after remove");
    cli_spot_check(&crescentd, &sizes, &removed_keys[0]);

    // A second owner's objects; it then dies without a word.
    let doomed_sizes = object_sizes(300, 0xD00D);
    put_all(
        &client,
        "doomed",
        1 << 32,
        &doomed_sizes,
        &on_segment(&doomed.segment_id),
    )
    .await;
    let doomed_idx: Vec<usize> = (0..doomed_sizes.len()).collect();
    verify_all(&client, "doomed", 1 << 32, &doomed_sizes, &doomed_idx).await;
    let doomed_keys: Vec<String> = doomed_idx.iter().map(|&i| key("doomed", i)).collect();
    // Objects dropped because their owner expired, and owners expired.
    let base_url = crescentd.base_url();
    let expired_label = "reason=\"owner_expired\"";
    let dropped_before = counter(
        &base_url,
        "crescent_store_dropped_objects_total",
        expired_label,
    )
    .await;
    let expired_before = counter(&base_url, "crescent_owners_expired_total", "").await;
    let killed = Instant::now();
    let status = doomed.guard.sigkill();
    assert!(
        crescent_tests::process::killed_by_sigkill(&status),
        "{status}"
    );
    let deadline = Duration::from_secs(CLIENT_TTL_SECS + 10);
    let gone_after = loop {
        let there = exists(&client, &doomed_keys).await;
        if there.iter().all(|t| !t) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < deadline,
            "{} of {} objects of the killed owner still exist {deadline:?} after SIGKILL \
             (first: {})",
            there.iter().filter(|t| **t).count(),
            doomed_keys.len(),
            doomed_keys[there.iter().position(|t| *t).unwrap()]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Expiry waits for the TTL (counted from the last heartbeat, sent every TTL / 4): never
    // sooner than half the TTL after the kill.
    assert!(
        gone_after >= Duration::from_millis(CLIENT_TTL_SECS * 1000 / 2),
        "objects vanished {gone_after:?} after the kill, well before client_ttl"
    );
    assert_gets_fail(&client, &doomed_keys, &["NOT_FOUND", "UNAVAILABLE"]).await;
    let dropped = counter(
        &base_url,
        "crescent_store_dropped_objects_total",
        expired_label,
    )
    .await
        - dropped_before;
    assert_eq!(
        dropped,
        doomed_keys.len() as u64,
        "objects dropped with the killed owner"
    );
    // The owner's objects are dropped before its removal is journaled, and the counter moves
    // once that append returns: it may trail the objects' disappearance by an append.
    let counted = Instant::now();
    let expired = loop {
        let expired =
            counter(&base_url, "crescent_owners_expired_total", "").await - expired_before;
        if expired > 0 || counted.elapsed() > Duration::from_secs(10) {
            break expired;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(expired, 1, "owners expired");
    let segments = crescentd
        .segments_client(Duration::from_secs(10))
        .list()
        .await
        .unwrap();
    assert!(
        segments
            .segments
            .iter()
            .all(|s| s.segment_id != doomed.segment_id),
        "the killed owner's segment is still mounted: {:?}",
        segments.segments
    );

    // Everything on the surviving owner is still there, byte for byte.
    let t = Instant::now();
    let kept: Vec<usize> = (0..n).filter(|i| i % 10 != 3).collect();
    verify_all(&client, "obj", 0, &sizes, &kept).await;
    let reverify_time = t.elapsed();
    assert_eq!(
        keeper.guard.try_exit_status(),
        None,
        "the surviving owner exited"
    );

    let kept_bytes: u64 = kept.iter().map(|&i| sizes[i] as u64).sum();
    eprintln!(
        "store e2e: {n} objects, {:.1} MiB (largest {} B, smallest {} B): put {put_time:.2?} \
         ({:.1} MiB/s), get+verify {get_time:.2?} ({:.1} MiB/s); removed {}; killed owner's {} \
         objects gone {gone_after:.2?} after SIGKILL (client_ttl {CLIENT_TTL_SECS} s); \
         re-verified {} objects / {:.1} MiB on the surviving owner in {reverify_time:.2?}",
        mib(total),
        sizes.iter().max().unwrap(),
        sizes.iter().min().unwrap(),
        mib(total) / put_time.as_secs_f64(),
        mib(total) / get_time.as_secs_f64(),
        removed.len(),
        doomed_keys.len(),
        kept.len(),
        mib(kept_bytes),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_spares_leased_and_hard_pinned_objects() {
    const SEGMENT: u64 = 64 << 20;
    const PROTECTED: usize = 6;
    const FILLER: usize = 256 << 10;
    let tmp = tempfile::tempdir().unwrap();
    let crescentd = start_crescentd(
        tmp.path(),
        "embedded_segment_bytes = 0\nhousekeeping_interval_ms = 100\nlease_ttl_ms = 120000\n\
         max_lease_ms = 120000\nhigh_watermark = 0.9\nevict_ratio = 0.1",
    );
    let owner = OwnerProcess::start(&crescentd, "small", SEGMENT);
    let client = crescentd.client().await;
    let opts = on_segment(&owner.segment_id);
    let started = Instant::now();

    let protected_sizes = vec![1 << 20; PROTECTED];
    let pinned_opts = PutOptions {
        hard_pin: true,
        ..opts.clone()
    };
    put_all(&client, "pinned", 1 << 40, &protected_sizes, &pinned_opts).await;
    put_all(&client, "leased", 2 << 40, &protected_sizes, &opts).await;
    let idx: Vec<usize> = (0..PROTECTED).collect();
    verify_all(&client, "leased", 2 << 40, &protected_sizes, &idx).await;
    // The client releases a get's lease once its copy is done; these gets take the read leases
    // that must protect the objects from now on (readers still copying, as it were).
    let leased_keys: Vec<String> = idx.iter().map(|&i| key("leased", i)).collect();
    hold_read_leases(&crescentd, &leased_keys).await;

    // Write three segments' worth of filler, oldest first.
    let n_fill = 3 * SEGMENT as usize / FILLER;
    let fill_sizes = vec![FILLER; n_fill];
    // Batches of 16 one after another, so "older" is meaningful for the LRU check below.
    for start in (0..n_fill).step_by(16) {
        let range = start..(start + 16).min(n_fill);
        let keys: Vec<String> = range.clone().map(|i| key("fill", i)).collect();
        let values: Vec<Vec<u8>> = range.map(|i| object_value(i as u64, FILLER)).collect();
        let results = client.put_batch_with(&keys, &values, &opts).await.unwrap();
        for (k, r) in keys.iter().zip(results) {
            r.unwrap_or_else(|e| panic!("put {k} into a full segment: {} {e}", e.code_str()));
        }
    }
    // Let housekeeping bring usage back under the watermark.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let evicted = counter(&crescentd.base_url(), "crescent_store_evictions_total", "").await;
    let skipped_pinned = counter(
        &crescentd.base_url(),
        "crescent_store_eviction_skips_total",
        "reason=\"hard_pinned\"",
    )
    .await;
    let skipped_leased = counter(
        &crescentd.base_url(),
        "crescent_store_eviction_skips_total",
        "reason=\"leased\"",
    )
    .await;
    let fill_keys: Vec<String> = (0..n_fill).map(|i| key("fill", i)).collect();
    let present = exists(&client, &fill_keys).await;
    let (kept, gone): (Vec<usize>, Vec<usize>) = (0..n_fill).partition(|&i| present[i]);
    let (used, capacity) = segment_usage(&client, &owner.segment_id).await.unwrap();
    assert_eq!(capacity, SEGMENT);
    assert!(used <= capacity, "used {used} of {capacity}");
    assert!(
        (kept.len() * FILLER) as u64 <= SEGMENT,
        "{} filler objects of {FILLER} B cannot all be in a {SEGMENT} B segment",
        kept.len()
    );
    assert!(!kept.is_empty(), "eviction removed every filler object");
    assert!(
        evicted >= gone.len() as u64 && !gone.is_empty(),
        "evictions counter {evicted}, {} filler objects missing",
        gone.len()
    );
    assert!(
        skipped_pinned > 0,
        "eviction never passed over a hard-pinned object"
    );
    assert!(
        skipped_leased > 0,
        "eviction never passed over a leased object"
    );
    // Approximate LRU: what went is older, on average, than what stayed.
    let mean = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len() as f64;
    assert!(
        mean(&gone) < mean(&kept),
        "evicted filler is not the older part: mean index evicted {:.0}, kept {:.0}",
        mean(&gone),
        mean(&kept)
    );
    let gone_keys: Vec<String> = gone.iter().map(|&i| fill_keys[i].clone()).collect();
    assert_gets_fail(&client, &gone_keys, &["NOT_FOUND"]).await;

    // The protected objects all survived, byte for byte; the surviving filler too.
    verify_all(&client, "pinned", 1 << 40, &protected_sizes, &idx).await;
    verify_all(&client, "leased", 2 << 40, &protected_sizes, &idx).await;
    verify_all(&client, "fill", 0, &fill_sizes, &kept).await;

    eprintln!(
        "eviction e2e: {n_fill} x {FILLER} B into a {} MiB segment: {} evicted (counter \
         {evicted}), {} kept, used {:.1} MiB; {PROTECTED} hard-pinned + {PROTECTED} leased \
         objects all kept (skips: hard_pinned {skipped_pinned}, leased {skipped_leased}); \
         {:.2?}",
        SEGMENT >> 20,
        gone.len(),
        kept.len(),
        mib(used),
        started.elapsed()
    );
}

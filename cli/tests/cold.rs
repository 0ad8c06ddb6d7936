//! The cold tier end to end against a real crescentd: offload, evict --hot, restore on read,
//! checksum failures, restart from the journal alone, reclaim on overwrite/delete, and
//! crash windows (crescentd SIGKILLs itself at a cold protocol step; the restarted node
//! reconciles).

mod common;

use std::path::{Path, PathBuf};

use common::cold::{payload, start, write_config};
use common::crescent;
use serde_json::Value;

#[test]
fn cold_ls_shows_the_default_device() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let d = node.device();
    assert_eq!(d["id"], "local0");
    assert_eq!(d["kind"], "local_dir");
    assert_eq!(d["health"], "healthy");
    assert!(d["capacity"].as_u64().unwrap() > 0);
    assert_eq!(
        (d["used"].as_u64(), d["reserved"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(dir.path().join("data/cold/local0/DEVICE").exists());
}

#[test]
fn offload_evict_restore_round_trip_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let data = payload(300_000, 7);
    node.put("obj", &data);

    // Not materialized yet: evict --hot refuses (CONFLICT).
    let (code, v) = node.cli(&["evict", "obj", "--hot"], None);
    assert_ne!(code, 0);
    assert_eq!(v["error"]["code"], "CONFLICT", "{v}");

    let stat = node.ok(&["offload", "obj"], None);
    assert_eq!(stat["cold"]["state"], "materialized", "{stat}");
    assert_eq!(stat["cold"]["op_state"], "usage_committed", "{stat}");
    assert_eq!(stat["replicas"].as_array().unwrap().len(), 1);
    assert_eq!(node.usage(), (data.len() as u64, 0, data.len() as u64));
    // Offloading again is a no-op.
    let again = node.ok(&["offload", "obj"], None);
    assert_eq!(again["cold"]["op_id"], stat["cold"]["op_id"]);

    let evicted = node.ok(&["evict", "obj", "--hot"], None);
    assert!(
        evicted["replicas"].as_array().unwrap().is_empty(),
        "{evicted}"
    );
    let stat = node.ok(&["stat", "obj"], None);
    assert!(stat["replicas"].as_array().unwrap().is_empty());
    assert_eq!(stat["cold"]["state"], "materialized");

    // Cold-only: the get restores (verified) and re-promotes into DRAM in the background.
    assert_eq!(node.get("obj").unwrap(), data);
    node.wait_for("the background promotion", || {
        let stat = node.ok(&["stat", "obj"], None);
        stat["replicas"].as_array().unwrap().len() == 1
    });
    assert_eq!(node.get("obj").unwrap(), data);

    // Unknown keys.
    let (code, v) = node.cli(&["offload", "nope"], None);
    assert_ne!(code, 0);
    assert_eq!(v["error"]["code"], "NOT_FOUND");
    let (code, _) = node.cli(&["evict", "obj"], None);
    assert_ne!(code, 0, "evict without --hot is refused");
}

#[test]
fn an_empty_value_offloads_restores_and_survives_a_restart_cold_only() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    node.put("empty", b"");
    let stat = node.ok(&["offload", "empty"], None);
    assert_eq!(stat["cold"]["state"], "materialized", "{stat}");
    let evicted = node.ok(&["evict", "empty", "--hot"], None);
    assert!(
        evicted["replicas"].as_array().unwrap().is_empty(),
        "{evicted}"
    );
    assert!(cold_file(dir.path(), &evicted).exists());
    assert_eq!(node.get("empty").unwrap(), b"");
    node.kill();
    let node = start(dir.path(), &[]);
    let stat = node.ok(&["stat", "empty"], None);
    assert_eq!(stat["cold"]["state"], "materialized", "{stat}");
    assert_eq!(node.get("empty").unwrap(), b"");
    node.ok(&["rm", "empty"], None);
    let (code, _) = node.cli(&["stat", "empty"], None);
    assert_ne!(code, 0);
}

fn cold_file(dir: &Path, stat: &Value) -> PathBuf {
    let locator = stat["cold"]["locator"].as_str().expect("locator");
    dir.join("data/cold/local0").join(locator)
}

#[test]
fn a_flipped_byte_in_the_cold_file_fails_the_read_with_a_checksum_error() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let data = payload(50_000, 3);
    node.put("bad", &data);
    node.ok(&["offload", "bad"], None);
    let stat = node.ok(&["evict", "bad", "--hot"], None);
    let path = cold_file(dir.path(), &stat);
    let mut bytes = std::fs::read(&path).unwrap();
    let i = 96 + 12_345;
    bytes[i] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let (code, v) = node.cli(&["get", "bad"], None);
    assert_ne!(code, 0, "wrong bytes must never be returned: {v}");
    assert_eq!(v["error"]["code"], "INTERNAL", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("checksum"), "{message}");
    assert!(v.get("value_hex").is_none());
}

#[test]
fn a_cold_only_object_is_served_from_the_journal_after_sigkill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let data = payload(1 << 20, 9);
    node.put("big", &data);
    node.put("hot-only", b"gone after restart");
    node.ok(&["offload", "big"], None);
    node.ok(&["evict", "big", "--hot"], None);
    node.kill();

    let node = start(dir.path(), &[]);
    let stat = node.ok(&["stat", "big"], None);
    assert!(stat["replicas"].as_array().unwrap().is_empty(), "{stat}");
    assert_eq!(stat["cold"]["state"], "materialized");
    assert_eq!(node.get("big").unwrap(), data);
    // Hot-only objects of the embedded segment do not survive a restart (its memory is new).
    assert!(node.get("hot-only").is_err());
    assert_eq!(node.usage(), (data.len() as u64, 0, data.len() as u64));
}

#[test]
fn overwrite_and_delete_reclaim_the_cold_copy() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let a = payload(40_000, 1);
    let b = payload(70_000, 2);
    node.put("del", &a);
    let stat = node.ok(&["offload", "del"], None);
    let del_file = cold_file(dir.path(), &stat);
    node.put("ow", &b);
    let stat = node.ok(&["offload", "ow"], None);
    let ow_file = cold_file(dir.path(), &stat);
    assert_eq!(node.usage().0, (a.len() + b.len()) as u64);

    node.ok(&["rm", "--force", "del"], None);
    assert!(!del_file.exists());
    assert_eq!(node.usage(), (b.len() as u64, 0, b.len() as u64));

    let c = payload(10_000, 5);
    node.put_upsert("ow", &c);
    assert!(!ow_file.exists());
    assert_eq!(node.usage(), (0, 0, 0));
    let stat = node.ok(&["stat", "ow"], None);
    assert!(
        stat.get("cold").is_none() || stat["cold"].is_null(),
        "{stat}"
    );
    assert_eq!(node.get("ow").unwrap(), c);

    // A cold-only object deleted: its copy goes too.
    node.put("co", &a);
    node.ok(&["offload", "co"], None);
    node.ok(&["evict", "co", "--hot"], None);
    node.ok(&["rm", "co"], None);
    assert_eq!(node.usage(), (0, 0, 0));
    assert!(node.get("co").is_err());
}

/// Puts one object, arms the crash point `cold.<point>`, offloads (the node dies there), restarts and checks
/// that reconciliation converged: nothing reserved, used = sum of live materialized lengths,
/// no payload file beyond the live ones.
fn crash_window(point: &str, survives: bool) {
    let dir = tempfile::tempdir().unwrap();
    let data = payload(123_457, 4);
    {
        let armed = format!("cold.{point}");
        let node = start(
            dir.path(),
            &[(crescent_crash::CRASH_AT_ENV, armed.as_str())],
        );
        node.put("k", &data);
        let (code, _, _) = crescent(&node.s(), &["offload", "k"], None);
        assert_ne!(code, 0, "the node died mid-offload");
        node.wait_killed();
    }
    let node = start(dir.path(), &[]);
    let (used, reserved, live) = node.usage();
    assert_eq!(reserved, 0, "{point}: {}", node.log());
    assert_eq!(used, live, "{point}");
    let files = count_payloads(&dir.path().join("data/cold/local0/objects"));
    if survives {
        // The route was committed before the crash: the cold-only object is readable.
        assert_eq!(used, data.len() as u64, "{point}");
        assert_eq!(files, 1, "{point}");
        assert_eq!(node.get("k").unwrap(), data, "{point}");
    } else {
        assert_eq!(used, 0, "{point}");
        assert_eq!(files, 0, "{point}: orphan payload left");
    }
    // A second restart changes nothing (reconciliation is idempotent).
    node.kill();
    let node = start(dir.path(), &[]);
    assert_eq!(node.usage(), (used, 0, live), "{point}");
}

fn count_payloads(dir: &Path) -> usize {
    let Ok(shards) = std::fs::read_dir(dir) else {
        return 0;
    };
    shards
        .flatten()
        .map(|s| {
            std::fs::read_dir(s.path())
                .map(|f| f.flatten().count())
                .unwrap_or(0)
        })
        .sum()
}

#[test]
fn crash_after_reserve_releases_the_reservation() {
    crash_window("after_reserve", false);
}

#[test]
fn crash_after_backend_write_deletes_the_unrecorded_payload() {
    crash_window("before_record_payload_written", false);
}

#[test]
fn crash_after_payload_written_reclaims_the_orphan() {
    crash_window("after_record_payload_written", false);
}

#[test]
fn crash_after_route_commit_commits_usage_on_restart() {
    crash_window("after_commit_route", true);
}

#[test]
fn crash_after_usage_commit_keeps_the_object() {
    crash_window("after_commit_usage", true);
}

#[test]
fn crash_during_reclaim_releases_usage_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = payload(65_536, 8);
    {
        let node = start(
            dir.path(),
            &[(
                crescent_crash::CRASH_AT_ENV,
                "cold.after_record_backend_deleted",
            )],
        );
        node.put("r", &data);
        node.ok(&["offload", "r"], None);
        assert_eq!(node.usage().0, data.len() as u64);
        let (code, _, _) = crescent(&node.s(), &["rm", "--force", "r"], None);
        assert_ne!(code, 0);
        node.wait_killed();
    }
    let node = start(dir.path(), &[]);
    assert_eq!(node.usage(), (0, 0, 0), "{}", node.log());
    assert_eq!(
        count_payloads(&dir.path().join("data/cold/local0/objects")),
        0
    );
}

#[test]
fn passthrough_materializes_every_completed_put_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "[cold]\noffload_mode = \"passthrough\"\n");
    let node = start(dir.path(), &[("CRESCENT_CONFIG", &config)]);
    let values: Vec<Vec<u8>> = (0..5)
        .map(|i| payload(20_000 + i * 1000, i as u8))
        .collect();
    for (i, v) in values.iter().enumerate() {
        node.put(&format!("p/{i}"), v);
    }
    let total: u64 = values.iter().map(|v| v.len() as u64).sum();
    node.wait_for("passthrough offloads", || node.usage() == (total, 0, total));
    for i in 0..values.len() {
        let stat = node.ok(&["stat", &format!("p/{i}")], None);
        assert_eq!(stat["cold"]["state"], "materialized", "{stat}");
        node.ok(&["evict", &format!("p/{i}"), "--hot"], None);
    }
    for (i, v) in values.iter().enumerate() {
        assert_eq!(&node.get(&format!("p/{i}")).unwrap(), v);
    }
}

#[test]
fn evict_triggered_offloads_victims_before_dropping_their_hot_copy() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[store]\nembedded_segment_bytes = 4194304\nhigh_watermark = 0.5\nevict_ratio = 0.3\n\
         housekeeping_interval_ms = 100\n\n[cold]\noffload_mode = \"evict_triggered\"\n",
    );
    let node = start(dir.path(), &[("CRESCENT_CONFIG", &config)]);
    let values: Vec<Vec<u8>> = (0..8).map(|i| payload(400_000, 10 + i as u8)).collect();
    for (i, v) in values.iter().enumerate() {
        node.put(&format!("e/{i}"), v);
    }
    // Above the watermark: victims are materialized, then eviction drops their hot replicas
    // (never the hot replica of an object without a cold copy).
    node.wait_for("eviction to cold", || {
        (0..values.len()).any(|i| {
            let stat = node.ok(&["stat", &format!("e/{i}")], None);
            stat["replicas"].as_array().unwrap().is_empty()
        })
    });
    let (used, reserved, live) = node.usage();
    assert_eq!((used, reserved), (live, 0));
    assert!(used > 0);
    for (i, v) in values.iter().enumerate() {
        let stat = node.ok(&["stat", &format!("e/{i}")], None);
        if stat["replicas"].as_array().unwrap().is_empty() {
            assert_eq!(stat["cold"]["state"], "materialized", "{stat}");
        }
        assert_eq!(&node.get(&format!("e/{i}")).unwrap(), v, "e/{i}");
    }
}

#[test]
fn remove_prefix_reclaims_cold_backed_objects() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let values: Vec<Vec<u8>> = (0..3).map(|i| payload(30_000, 40 + i as u8)).collect();
    for (i, v) in values.iter().enumerate() {
        node.put(&format!("pre/{i}"), v);
    }
    node.put("other", &values[0]);
    // pre/0 hot only, pre/1 hot + materialized, pre/2 cold-only; "other" materialized.
    node.ok(&["offload", "pre/1"], None);
    node.ok(&["offload", "pre/2"], None);
    node.ok(&["evict", "pre/2", "--hot"], None);
    node.ok(&["offload", "other"], None);
    let objects = dir.path().join("data/cold/local0/objects");
    let payloads_before = count_payloads(&objects);
    assert_eq!(payloads_before, 3);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = common::client_of(&node.s());
    let reply = rt.block_on(client.remove_prefix("pre/")).unwrap();
    assert_eq!((reply.removed, reply.skipped), (3, 0), "{}", node.log());
    for i in 0..3 {
        assert!(node.get(&format!("pre/{i}")).is_err());
    }
    // Only "other"'s copy is left, and usage is exactly its length.
    assert_eq!(count_payloads(&objects), 1);
    let len = values[0].len() as u64;
    assert_eq!(node.usage(), (len, 0, len));
    assert_eq!(node.get("other").unwrap(), values[0]);
}

#[test]
fn the_health_probe_marks_a_vanished_device_unavailable_and_heals_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "[cold]\nhealth_probe_interval_ms = 100\n");
    let node = start(dir.path(), &[("CRESCENT_CONFIG", &config)]);
    node.put("h", &payload(10_000, 9));
    node.ok(&["offload", "h"], None);
    assert_eq!(node.device()["health"], "healthy");

    // The device's tmp dir vanishes (what an unmounted share looks like to the probe).
    let tmp = dir.path().join("data/cold/local0/tmp");
    std::fs::remove_dir_all(&tmp).unwrap();
    node.wait_for("the device to be unavailable", || {
        node.device()["health"] == "unavailable"
    });
    // No new offload is placed on it, and no last hot replica is evicted to it.
    node.put("h2", &payload(10_000, 10));
    let (code, v) = node.cli(&["offload", "h2"], None);
    assert_ne!(code, 0);
    // UNAVAILABLE from the server (the client reports a non-idempotent call's retryable
    // failure as FAILOVER_INTERRUPTED, quoting it).
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("UNAVAILABLE") && message.contains("health is unavailable"),
        "{v}"
    );
    let (code, v) = node.cli(&["evict", "h", "--hot"], None);
    assert_ne!(code, 0);
    assert_eq!(v["error"]["code"], "CONFLICT", "{v}");

    std::fs::create_dir_all(&tmp).unwrap();
    node.wait_for("the device to heal", || {
        node.device()["health"] == "healthy"
    });
    node.ok(&["offload", "h2"], None);
    node.ok(&["evict", "h", "--hot"], None);
}

/// `crescent cold bench-restore` on the default device, in each of its modes: every restore
/// reads back the bytes written, each round is timed, and the run removes its objects.
#[test]
fn bench_restore_times_each_mode_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), &[]);
    let modes: [&[&str]; 3] = [&[], &["--batch"], &["--reuse"]];
    for mode in modes {
        let mut args = vec![
            "cold",
            "bench-restore",
            "--size",
            "64K",
            "--count",
            "3",
            "--rounds",
            "2",
        ];
        args.extend_from_slice(mode);
        let report = node.ok(&args, None);
        assert_eq!(report["rounds"].as_array().unwrap().len(), 2, "{report}");
        assert_eq!(report["objects_per_round"], 3, "{report}");
        assert!(report["restore_gib_s"].as_f64().unwrap() > 0.0, "{report}");
        assert!(report["cat_gib_s"].as_f64().unwrap() > 0.0, "{report}");
    }
    let left = node.ok(&["ls", "bench-restore/"], None);
    assert_eq!(left["count"], 0, "{left}");
}

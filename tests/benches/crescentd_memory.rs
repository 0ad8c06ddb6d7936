//! crescentd's resident memory per object (a benchmark): a real crescentd
//! process, one storage owner (this process) putting N small objects into its own segment, and
//! crescentd's VmRSS read from /proc before and after. Target: at most 200 bytes per object
//! (so 50M objects fit in 10 GiB).
//!
//! The figure is the whole process's growth (directory, allocator, segment bookkeeping, the
//! ownership of every replica), not the directory alone (`cargo bench -p crescent-store --bench
//! directory_memory` measures that). The marginal figure (growth over the second half of the
//! fill, per object) leaves out one-time costs such as thread stacks and the first map pages.
//! Keys are 28 bytes (`kv/9f86d081884c7d65/00000000`), values 16 bytes.
//!
//! Run: `cargo bench -p crescent-tests --bench crescentd_memory [-- OBJECTS] [--json]`
//! (default 1,000,000; `10000000` takes a few minutes and a 2 GiB segment in this process).

use std::time::{Duration, Instant};

use crescent_client::CrescentClient;
use crescent_owner::{Owner, OwnerConfig};
use crescent_tests::binaries::ensure_workspace_binary;
use crescent_tests::bulk_fill::{
    fill, key_of, segment_bytes_for, value_of, wait_healthy, BenchArgs,
};
use crescent_tests::crescentd::CrescentdProcess;

const TAG: &str = "kv/9f86d081884c7d65";
const TARGET_BYTES_PER_OBJECT: f64 = 200.0;

/// Resident set size of process `pid` in bytes (VmRSS is in kB whatever the page size).
fn rss_of(pid: u32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line");
    kb * 1024
}

/// crescentd's RSS once it has been idle for a moment (the allocator settles after a burst).
async fn settled_rss(pid: u32) -> u64 {
    tokio::time::sleep(Duration::from_millis(500)).await;
    rss_of(pid)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let BenchArgs { objects, json } = BenchArgs::from_env(1_000_000);
    assert!(objects >= 2, "OBJECTS must be at least 2");
    let bin = ensure_workspace_binary("crescent-server", "crescentd");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("crescentd.toml");
    // No embedded segment: every object lives on the owner, as in a real deployment.
    std::fs::write(&config, "[store]\nembedded_segment_bytes = 0\n").expect("config");
    // Open mode: one client is both the storage owner and the writer, and the figures in
    // docs/performance.md were measured so; auth adds nothing per object held in memory.
    let server = CrescentdProcess::start_open(
        &bin,
        &dir.path().join("data"),
        &dir.path().join("crescentd.log"),
        &["--config".to_string(), config.display().to_string()],
    )
    .expect("crescentd");
    let pid = server.guard.pid();
    let client = CrescentClient::new(&server.addr.to_string()).expect("client");
    wait_healthy(&client, Duration::from_secs(60)).await;
    let owner = Owner::start(
        &client,
        OwnerConfig {
            size: segment_bytes_for(objects),
            ..OwnerConfig::default()
        },
    )
    .await
    .expect("owner");
    let segment = owner.segment_id().to_string();

    let before = settled_rss(pid).await;
    let half = objects / 2;
    let t = Instant::now();
    fill(&client, &segment, &format!("{TAG}/a"), half).await;
    let at_half = settled_rss(pid).await;
    fill(&client, &segment, &format!("{TAG}/b"), objects - half).await;
    let filled_in = t.elapsed();
    let after = settled_rss(pid).await;
    assert_eq!(owner.ownership().len(), objects, "ownership table");

    // Spot-check that the objects are really there.
    for i in (0..half).step_by((half / 200).max(1)) {
        let key = key_of(&format!("{TAG}/a"), i);
        assert_eq!(
            client.get(&key).await.expect("get"),
            value_of(&key),
            "{key}"
        );
    }

    let per_object = after.saturating_sub(before) as f64 / objects as f64;
    let marginal = after.saturating_sub(at_half) as f64 / (objects - half) as f64;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "objects": objects,
                "rss_before_bytes": before,
                "rss_after_bytes": after,
                "bytes_per_object": per_object,
                "marginal_bytes_per_object": marginal,
                "target_bytes_per_object": TARGET_BYTES_PER_OBJECT,
                "vs_target": TARGET_BYTES_PER_OBJECT / per_object,
                "fill_seconds": filled_in.as_secs_f64(),
            })
        );
    } else {
        println!("crescentd resident memory with {objects} objects (28-byte keys, one replica)");
        println!(
            "  RSS before / after       {:>8.1} / {:.1} MiB",
            mib(before),
            mib(after)
        );
        println!(
            "  bytes per object         {per_object:>8.1}  (target <= {TARGET_BYTES_PER_OBJECT}: {:.2}x)",
            TARGET_BYTES_PER_OBJECT / per_object
        );
        println!("  marginal (second half)   {marginal:>8.1}");
        println!(
            "  filled in                {:>8.2} s",
            filled_in.as_secs_f64()
        );
    }
    let _ = owner.shutdown().await;
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

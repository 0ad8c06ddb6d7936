//! Client-driven metadata rebuild at scale: N objects held by two storage
//! owners; crescentd is SIGKILLed and restarted on its data dir, and the clock runs from the
//! restart to the rebuild gate opening (every owner has replayed its ownership table).
//!
//! A restart takes the same path as an HA promotion (docs/rebuild.md): a new leader term, the
//! gate REBUILDING, owners seeing the term in a heartbeat answer and replaying in bounded
//! batches. The figures: seconds from spawn to gate open (includes process start and journal
//! recovery), seconds the server's gate was closed (its own started/opened stamps), and
//! entries replayed per second; the target is at most 10 s for 1,000,000 objects.
//!
//! Both owners live in this process (two clients, each the owner of its own segment); values
//! are 16 bytes, so 1M objects need 64 MiB of segment (64-byte slots).
//! Run: `cargo bench -p crescent-tests --bench rebuild [-- OBJECTS] [--json]`

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crescent_client::CrescentClient;
use crescent_owner::{Owner, OwnerConfig};
use crescent_tests::binaries::ensure_workspace_binary;
use crescent_tests::bulk_fill::{
    fill, key_of, segment_bytes_for, value_of, wait_healthy, BenchArgs,
};
use crescent_tests::process::free_local_port;
use crescent_wire::rebuild::GateState;

struct Crescentd(Child);

impl Drop for Crescentd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(bin: &Path, dir: &Path, addr: SocketAddr) -> Crescentd {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("crescentd.log"))
        .expect("log file");
    let child = Command::new(bin)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--config")
        .arg(dir.join("crescentd.toml"))
        .env_remove("CRESCENT_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn crescentd");
    Crescentd(child)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let BenchArgs { objects, json } = BenchArgs::from_env(1_000_000);
    let per_owner = objects / 2;
    let bin = ensure_workspace_binary("crescent-server", "crescentd");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("crescentd.toml"),
        "[store]\nembedded_segment_bytes = 0\nrebuild_degraded_timeout_secs = 600\n",
    )
    .expect("config");
    let addr: SocketAddr = ([127, 0, 0, 1], free_local_port()).into();
    let server = addr.to_string();
    let first = spawn(&bin, dir.path(), addr);

    let clients = [
        CrescentClient::new(&server).expect("client"),
        CrescentClient::new(&server).expect("client"),
    ];
    wait_healthy(&clients[0], Duration::from_secs(60)).await;
    let segment_bytes = segment_bytes_for(per_owner);
    let mut owners: Vec<Owner> = Vec::new();
    for client in &clients {
        let owner = Owner::start(
            client,
            OwnerConfig {
                size: segment_bytes,
                ..OwnerConfig::default()
            },
        )
        .await
        .expect("owner");
        owners.push(owner);
    }
    let t = Instant::now();
    let (a, b) = (owners[0].segment_id(), owners[1].segment_id());
    tokio::join!(
        fill(&clients[0], a, "a", per_owner),
        fill(&clients[1], b, "b", per_owner)
    );
    let filled_in = t.elapsed();
    for owner in &owners {
        assert_eq!(owner.ownership().len(), per_owner, "ownership table");
    }

    drop(first); // SIGKILL
    let restarted = Instant::now();
    let _second = spawn(&bin, dir.path(), addr);
    wait_healthy(&clients[0], Duration::from_secs(60)).await;
    let serving_after = restarted.elapsed();
    let status = loop {
        let status = clients[0].rebuild_status().await.expect("status");
        if matches!(status.state, GateState::Serving | GateState::Degraded) {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let gate_open_after = restarted.elapsed();
    assert_eq!(status.state, GateState::Serving, "{status:?}");
    let gate_closed_ms = status.opened_at_ms.unwrap_or(status.started_at_ms) - status.started_at_ms;
    let e = &status.entries;
    let replayed = e.replayed + e.duplicate + e.stale + e.rejected;

    // Spot-check a spread of keys on both owners.
    for i in (0..per_owner).step_by((per_owner / 500).max(1)) {
        for tag in ["a", "b"] {
            let key = key_of(tag, i);
            let got = clients[1].get(&key).await.expect("get after rebuild");
            assert_eq!(got, value_of(&key), "{key}");
        }
    }
    let seconds = gate_open_after.as_secs_f64();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "objects": per_owner * 2,
                "owners": 2,
                "fill_seconds": filled_in.as_secs_f64(),
                "restart_to_healthz_seconds": serving_after.as_secs_f64(),
                "restart_to_gate_open_seconds": seconds,
                "gate_closed_seconds_server_clock": gate_closed_ms as f64 / 1e3,
                "entries_replayed": replayed,
                "entries_per_second": replayed as f64 / seconds,
                "target_seconds": 10.0,
                "vs_target": 10.0 / seconds,
            })
        );
    } else {
        println!("rebuild of {} objects held by 2 owners", per_owner * 2);
        println!(
            "  filled in                     {:>8.2} s",
            filled_in.as_secs_f64()
        );
        println!(
            "  restart -> /healthz           {:>8.2} s",
            serving_after.as_secs_f64()
        );
        println!(
            "  restart -> gate open          {seconds:>8.2} s  (target <= 10 s: {:.2}x)",
            10.0 / seconds
        );
        println!(
            "  gate closed (server clock)    {:>8.2} s",
            gate_closed_ms as f64 / 1e3
        );
        println!(
            "  entries replayed              {replayed:>8}  ({:.0}/s)",
            replayed as f64 / seconds
        );
    }
    for owner in owners {
        let _ = owner.shutdown().await;
    }
}

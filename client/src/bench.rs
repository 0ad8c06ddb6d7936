//! `crescent bench`: the five figures of the reference store's benchmark
//! (`shared/anchors/mooncake_bench.py`), measured the same way: one client that is itself the
//! only storage owner of its data (its own segment, placement local_first), single operations
//! issued one at a time, batches of 128 keys, ops/s over `n` keys of `size`-byte values.

use std::time::{Duration, Instant};

use rand::RngCore;
use serde::Serialize;

use crate::client::CrescentClient;
use crate::error::ClientError;
use crate::owner::{Owner, OwnerConfig};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub n: usize,
    pub size: usize,
    pub batch: usize,
    /// Segment size; `None` sizes it for the run (both key sets plus headroom).
    pub segment_size: Option<u64>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            n: 20_000,
            size: 4096,
            batch: 128,
            segment_size: None,
        }
    }
}

/// The five figures (ops/s), as `bench --json` prints them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BenchReport {
    pub put: f64,
    pub get: f64,
    pub put_batch: f64,
    pub get_batch: f64,
    pub exist: f64,
    pub n: usize,
    pub size: usize,
}

fn rate(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}

fn bench_failure(what: &str, e: ClientError) -> ClientError {
    tracing::error!(phase = what, error = %e, "bench operation failed");
    e
}

/// Runs the benchmark against `client`'s server, as a storage owner of its own, and cleans up
/// (removes its keys, unmounts its segment) afterwards.
pub async fn run(
    client: &CrescentClient,
    config: &BenchConfig,
) -> Result<BenchReport, ClientError> {
    if config.n == 0 || config.size == 0 || config.batch == 0 {
        return Err(ClientError::InvalidArgument(
            "bench needs n, size and batch of at least 1".into(),
        ));
    }
    let needed = 2 * config.n as u64 * config.size as u64;
    let segment = config
        .segment_size
        .unwrap_or(needed + needed / 4 + (64 << 20));
    let owner = Owner::start(
        client,
        OwnerConfig {
            size: segment,
            ..OwnerConfig::default()
        },
    )
    .await?;
    let run_id = &owner.owner_id()[owner.owner_id().len().saturating_sub(8)..];
    let prefix = format!("bench-{run_id}/");
    let result = phases(client, config, &prefix).await;
    let cleanup = client.remove_prefix(&prefix).await;
    let stopped = owner.shutdown().await;
    let report = result?;
    cleanup?;
    stopped?;
    Ok(report)
}

async fn phases(
    client: &CrescentClient,
    config: &BenchConfig,
    prefix: &str,
) -> Result<BenchReport, ClientError> {
    let n = config.n;
    let mut value = vec![0u8; config.size];
    rand::thread_rng().fill_bytes(&mut value);
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}k{i}")).collect();
    let batch_keys: Vec<String> = (0..n).map(|i| format!("{prefix}b{i}")).collect();

    let t = Instant::now();
    for k in &keys {
        client
            .put(k, &value)
            .await
            .map_err(|e| bench_failure("put", e))?;
    }
    let put = rate(n, t.elapsed());

    let t = Instant::now();
    for k in &keys {
        let got = client.get(k).await.map_err(|e| bench_failure("get", e))?;
        if got.len() != config.size {
            return Err(ClientError::Protocol(format!(
                "get {k}: {} bytes, expected {}",
                got.len(),
                config.size
            )));
        }
    }
    let get = rate(n, t.elapsed());

    let values: Vec<&[u8]> = vec![&value; config.batch];
    let t = Instant::now();
    for chunk in batch_keys.chunks(config.batch) {
        let items = client
            .put_batch(chunk, &values[..chunk.len()])
            .await
            .map_err(|e| bench_failure("put_batch", e))?;
        for r in items {
            r.map_err(|e| bench_failure("put_batch item", e))?;
        }
    }
    let put_batch = rate(n, t.elapsed());

    let t = Instant::now();
    for chunk in batch_keys.chunks(config.batch) {
        let items = client
            .get_batch(chunk)
            .await
            .map_err(|e| bench_failure("get_batch", e))?;
        for r in items {
            let v = r.map_err(|e| bench_failure("get_batch item", e))?;
            if v.len() != config.size {
                return Err(ClientError::Protocol(format!(
                    "get_batch: {} bytes, expected {}",
                    v.len(),
                    config.size
                )));
            }
        }
    }
    let get_batch = rate(n, t.elapsed());

    let t = Instant::now();
    for k in &keys {
        if !client
            .is_exist(k)
            .await
            .map_err(|e| bench_failure("exist", e))?
        {
            return Err(ClientError::Protocol(format!("{k} reported absent")));
        }
    }
    let exist = rate(n, t.elapsed());

    Ok(BenchReport {
        put,
        get,
        put_batch,
        get_batch,
        exist,
        n,
        size: config.size,
    })
}

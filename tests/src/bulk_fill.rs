//! Filling a store with many small objects from a storage owner, for the benchmarks that need
//! a large directory (the rebuild and the crescentd memory benchmarks).
//!
//! Each value names its key, so a read-back check needs no stored copy; values are
//! [`VALUE_BYTES`] long, so an object takes one 64-byte slot of its owner's segment.

use std::time::{Duration, Instant};

use crescent_client::{CrescentClient, Placement, PutOptions};

/// Items per `put_batch` call (the batch size the store benchmarks use).
pub const BATCH: usize = 128;
/// Length of every value.
pub const VALUE_BYTES: usize = 16;

/// Puts `n` objects `TAG/00000000`... into `segment` (the client's own), in batches of
/// [`BATCH`], panicking on any failed item.
pub async fn fill(client: &CrescentClient, segment: &str, tag: &str, n: usize) {
    let opts = PutOptions {
        placement: Some(Placement::LocalFirst),
        preferred_segment: Some(segment.to_string()),
        ..PutOptions::default()
    };
    let keys: Vec<String> = (0..n).map(|i| key_of(tag, i)).collect();
    for chunk in keys.chunks(BATCH) {
        let values: Vec<Vec<u8>> = chunk.iter().map(|k| value_of(k)).collect();
        for r in client
            .put_batch_with(chunk, &values, &opts)
            .await
            .expect("put_batch")
        {
            r.expect("put_batch item");
        }
    }
}

/// The key of object `i` of a fill tagged `tag`.
pub fn key_of(tag: &str, i: usize) -> String {
    format!("{tag}/{i:08}")
}

/// The value stored under `key`: the key itself, cut or padded with dots to [`VALUE_BYTES`].
pub fn value_of(key: &str) -> Vec<u8> {
    let mut v = key.as_bytes().to_vec();
    v.resize(VALUE_BYTES, b'.');
    v
}

/// Segment bytes an owner needs to hold `objects` filled objects (64-byte slots, twice over
/// for allocator headroom, at least 128 MiB).
pub fn segment_bytes_for(objects: usize) -> u64 {
    (objects as u64 * 64).next_power_of_two().max(64 << 20) * 2
}

/// Waits until crescentd answers the rebuild status call (it is up and has recovered).
pub async fn wait_healthy(client: &CrescentClient, within: Duration) {
    let t = Instant::now();
    while client.rebuild_status().await.is_err() {
        assert!(t.elapsed() < within, "crescentd did not come up");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The command line of a large-directory benchmark: `[OBJECTS] [--json]`.
pub struct BenchArgs {
    pub objects: usize,
    pub json: bool,
}

impl BenchArgs {
    /// Parses this process's arguments (the first number is the object count).
    pub fn from_env(default_objects: usize) -> BenchArgs {
        let args: Vec<String> = std::env::args().skip(1).collect();
        BenchArgs {
            objects: args
                .iter()
                .find_map(|a| a.parse().ok())
                .unwrap_or(default_objects),
            json: args.iter().any(|a| a == "--json"),
        }
    }
}

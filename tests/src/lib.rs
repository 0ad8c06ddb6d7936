//! Shared helpers for Crescent's cross-crate integration and crash tests.
//!
//! The tests in `tests/` drive real processes: the `journal-crash-child` binary of this crate
//! (a journal appender that is SIGKILLed at random moments) and `crescentd` itself. What they
//! share lives here:
//!
//! - [`auth`], [`binaries`], [`crescentd`], [`process`]: the harness that starts crescentd,
//!   from `crescent-testkit` (shared with the CLI's tests): `[auth]` keys and tokens, the
//!   workspace binaries, starting crescentd, child processes that cannot outlive their test.
//! - [`bulk_fill`]: filling a store with many small objects (the large-directory benchmarks).
//! - [`crash_payload`]: the deterministic record payload scheme and the acknowledgement lines
//!   the crash child prints, so the parent can check every record byte for byte.
//! - [`crash_journal`]: how the crash child and its parent open the journal under test.
//! - [`chaos`], [`chaos_model`], [`chaos_ops`]: the chaos soak's writers (CLI processes and
//!   `chaos-writer` children), the per-key model of acceptable states, and the operations.
//! - [`etcd`]: a throwaway etcd for benchmarks run without scripts/test.sh.
//! - [`ha_cold_owner`]: a storage owner's cold device under an HA pair, for the cold-tier
//!   failover tests.
//! - [`ha_pair`]: an HA pair of crescentd processes on a real etcd (or Redis), for the
//!   failover tests.
//! - [`redis`]: a throwaway redis-server for the HA tests on Redis run without scripts/test.sh.
//! - [`store_e2e`]: deterministic object contents and sizes, `crescent owner` processes and
//!   Prometheus counters for the store end-to-end test.
//! - [`tls_node`]: crescentd with `[tls]` (a test PKI, HTTPS health), for the TLS tests.
//! - [`mount_load`]: concurrent clients mounting fresh segments, the HA tests' journaled load.
//! - [`segment_model`]: what a crash test knows about segments from acknowledged requests, and
//!   the check of a recovered server's listing against it.

pub mod bulk_fill;
pub mod chaos;
pub mod chaos_model;
pub mod chaos_ops;
pub mod crash_journal;
pub mod crash_payload;
pub mod etcd;
pub mod ha_cold_owner;
pub mod ha_pair;
pub mod mesh;
pub mod mount_load;
pub mod net_probe;
pub mod redis;
pub mod safetensors;
pub mod segment_model;
pub mod store_e2e;
pub mod tls_node;

// The harness that starts crescentd lives in `crescent-testkit` (the CLI's tests share it);
// these keep its modules at the paths the tests here use.
pub use crescent_testkit::{auth, binaries, crescentd, process};

/// Number of crash rounds a crash test runs: `CRESCENT_CRASH_ROUNDS` when set (must be a
/// positive integer), else `default`.
pub fn crash_rounds(default: u32) -> u32 {
    env_count("CRESCENT_CRASH_ROUNDS", default)
}

/// A positive count from environment variable `name`, or `default` when unset. An invalid value
/// panics with a clear message rather than silently running a different test.
pub fn env_count(name: &str, default: u32) -> u32 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => n,
            _ => panic!("{name}={v:?} is not a positive integer"),
        },
    }
}

//! Fuzz targets: one plain `fn(&[u8])` per decoder that reads bytes from the network or from
//! disk. Each must return (never panic, never loop) whatever the bytes; a decoder's error is a
//! normal outcome. The same functions run in two harnesses:
//!
//! - `cargo test -p crescent-fuzz-targets`: every target over its regression inputs
//!   (`regressions/<target>/`) and a few thousand seeded random and mutated inputs;
//! - `scripts/fuzz.sh MINUTES`: coverage-guided libFuzzer runs through the `fuzz/` crate
//!   (`cargo fuzz`, outside the workspace), which calls these same functions.

mod journal;
mod rpc;
mod snapshot;
mod transfer;
mod weights;

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// Every target by name (the `fuzz/` binaries and the regression directories use the names).
pub const TARGETS: &[(&str, Target)] = &[
    ("rpc_frame", rpc::rpc_frame),
    ("rpc_body", rpc::rpc_body),
    ("api_body", rpc::api_body),
    ("transfer_frame", transfer::transfer_frame),
    ("replication_message", journal::replication_message),
    ("journal_frames", journal::journal_frames),
    ("journal_segment_scan", journal::journal_segment_scan),
    ("snapshot_file", snapshot::snapshot_file),
    ("safetensors_header", weights::safetensors_header),
];

/// Valid encodings each target starts from (the random harness mutates them; `fuzz.sh` seeds
/// its corpus with them).
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "rpc_frame" => rpc::frame_seeds(),
        "rpc_body" => rpc::body_seeds(),
        "api_body" => rpc::api_seeds(),
        "transfer_frame" => transfer::seeds(),
        "replication_message" => journal::replication_seeds(),
        "journal_frames" => journal::frame_seeds(),
        "journal_segment_scan" => journal::segment_seeds(),
        "snapshot_file" => snapshot::seeds(),
        "safetensors_header" => weights::seeds(),
        _ => Vec::new(),
    }
}

/// Runs the target named `name` on `data` (for the `fuzz/` binaries).
pub fn run(name: &str, data: &[u8]) {
    match TARGETS.iter().find(|(n, _)| *n == name) {
        Some((_, target)) => target(data),
        None => panic!("no fuzz target {name}"),
    }
}

/// Splits off the first byte as a selector (which type, which mode) and the rest.
fn selector(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (*first, rest),
        None => (0, data),
    }
}

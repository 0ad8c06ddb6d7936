//! What the store end-to-end test shares: deterministic object contents and sizes, a crescentd
//! with a store config of the test's choosing, `crescent owner` processes, and reading
//! crescentd's Prometheus counters.
//!
//! Contents are a pure function of (key index, length), so the reader re-derives what it
//! expects instead of keeping a copy of a gigabyte of values.

use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};

use crate::binaries::ensure_workspace_binary;
use crate::crescentd::CrescentdProcess;
use crate::process::{kill_with_parent, ChildGuard};

/// Largest object the test writes (the upper bound).
pub const MAX_OBJECT: usize = 4 << 20;

/// SplitMix64: a seed per key index, so neighbouring keys get unrelated contents.
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value of object `index` with `len` bytes (xorshift64 stream seeded from the index and
/// the length, so an object of the wrong length never matches by accident).
pub fn object_value(index: u64, len: usize) -> Vec<u8> {
    let mut state = splitmix64(index ^ ((len as u64) << 40)) | 1;
    let mut v = vec![0u8; len];
    let mut chunks = v.chunks_exact_mut(8);
    for chunk in &mut chunks {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    state ^= state << 13;
    let tail = state.to_le_bytes();
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&tail[..n]);
    v
}

/// Checks `got` against the value of object `index` of `len` bytes; the error names the key,
/// both lengths and the first differing offset.
pub fn check_value(key: &str, index: u64, len: usize, got: &[u8]) -> Result<(), String> {
    let want = object_value(index, len);
    if got == want.as_slice() {
        return Ok(());
    }
    let first = got
        .iter()
        .zip(&want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Err(format!(
        "{key}: read {} bytes, expected {len}; first difference at offset {first} \
         (got {:?}, expected {:?})",
        got.len(),
        got.get(first),
        want.get(first)
    ))
}

/// `n` object sizes in 1 B ..= 4 MiB, skewed toward small ones: about 87% log-uniform in
/// 1 B .. 64 KiB, 10% log-uniform in 64 KiB .. 1 MiB and 3% uniform in 1 MiB ..= 4 MiB (mean
/// about 115 KB, so 10,000 objects are about 1.1 GB). The
/// first two are the bounds themselves (1 B and exactly 4 MiB). Deterministic per `seed`.
pub fn object_sizes(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let log_uniform = |rng: &mut rand::rngs::StdRng, lo: f64, hi: f64| -> usize {
        (lo.ln() + rng.gen::<f64>() * (hi.ln() - lo.ln())).exp() as usize
    };
    (0..n)
        .map(|i| match i {
            0 => 1,
            1 => MAX_OBJECT,
            _ => {
                let r: f64 = rng.gen();
                let len = if r < 0.87 {
                    log_uniform(&mut rng, 1.0, 65_536.0)
                } else if r < 0.97 {
                    log_uniform(&mut rng, 65_536.0, (1 << 20) as f64)
                } else {
                    rng.gen_range(1 << 20..=MAX_OBJECT)
                };
                len.clamp(1, MAX_OBJECT)
            }
        })
        .collect()
}

/// Starts crescentd on `dir` (data in `dir/data`, log `dir/crescentd.log`) with `[store]`
/// settings `store_toml` (TOML lines) written to `dir/crescentd.toml`.
pub fn start_crescentd(dir: &Path, store_toml: &str) -> CrescentdProcess {
    let bin = ensure_workspace_binary("crescent-server", "crescentd");
    let config = dir.join("crescentd.toml");
    std::fs::write(&config, format!("[store]\n{store_toml}\n")).expect("writing crescentd.toml");
    let args = vec!["--config".to_string(), config.display().to_string()];
    CrescentdProcess::start(&bin, &dir.join("data"), &dir.join("crescentd.log"), &args)
        .unwrap_or_else(|e| panic!("starting crescentd: {e}"))
}

/// A `crescent owner` process: a storage owner serving one segment until it is killed.
#[derive(Debug)]
pub struct OwnerProcess {
    pub guard: ChildGuard,
    pub owner_id: String,
    pub segment_id: String,
    pub size: u64,
    /// Kept open so the owner never writes into a closed pipe.
    _stdout: Lines<BufReader<ChildStdout>>,
}

impl OwnerProcess {
    /// Runs `crescent --server SERVER --json owner --size SIZE --id ID` with an owner token for
    /// `owner_id` when crescentd runs with `[auth]`, and waits for its ready line. Spawn from
    /// the test's own thread (the child dies with it).
    pub fn start(crescentd: &CrescentdProcess, owner_id: &str, size: u64) -> OwnerProcess {
        let server = crescentd.addr.to_string();
        let token = crescentd.owner_token(owner_id);
        Self::start_with(&["--server", &server], token.as_deref(), owner_id, size)
    }

    /// Like [`OwnerProcess::start`], with `globals` saying where crescentd is (e.g.
    /// `--etcd URL --cluster NAME` to follow an HA pair's leader) and the owner `token`
    /// (`CRESCENT_TOKEN`; `None` in open mode).
    pub fn start_with(
        globals: &[&str],
        token: Option<&str>,
        owner_id: &str,
        size: u64,
    ) -> OwnerProcess {
        Self::start_with_args(globals, token, owner_id, size, &[])
    }

    /// Like [`OwnerProcess::start_with`], with more `owner` arguments (e.g. `--cold-device
    /// ID=DIR`: the ready line is printed once the device is registered).
    pub fn start_with_args(
        globals: &[&str],
        token: Option<&str>,
        owner_id: &str,
        size: u64,
        owner_args: &[&str],
    ) -> OwnerProcess {
        let bin = ensure_workspace_binary("crescent-cli", "crescent");
        let mut cmd = Command::new(bin);
        with_token(&mut cmd, token);
        cmd.args(globals)
            .args(["--json", "owner", "--size"])
            .arg(size.to_string())
            .args(["--id", owner_id])
            .args(owner_args)
            .env_remove("CRESCENT_CRASH_AT")
            .env_remove("CRESCENT_TENANT")
            .env_remove("CRESCENT_DOMAIN")
            .env_remove("CRESCENT_SERVER")
            .env_remove("CRESCENT_ETCD")
            .env_remove("CRESCENT_CLUSTER")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        kill_with_parent(&mut cmd);
        let child = cmd.spawn().expect("spawning crescent owner");
        let mut guard = ChildGuard::new(format!("owner {owner_id}"), child);
        let stdout = guard.child_mut().stdout.take().expect("owner stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = match lines.next() {
            Some(Ok(line)) => line,
            other => panic!(
                "owner {owner_id} printed no ready line ({other:?}); exit {:?}",
                guard.try_exit_status()
            ),
        };
        let ready: serde_json::Value = serde_json::from_str(&first)
            .unwrap_or_else(|e| panic!("owner {owner_id} ready line {first:?}: {e}"));
        let segment_id = ready["segment_id"]
            .as_str()
            .unwrap_or_else(|| panic!("owner {owner_id} ready line without segment_id: {first}"))
            .to_string();
        assert_eq!(
            ready["size"].as_u64(),
            Some(size),
            "owner {owner_id}: {first}"
        );
        OwnerProcess {
            guard,
            owner_id: owner_id.to_string(),
            segment_id,
            size,
            _stdout: lines,
        }
    }
}

/// The sum of every sample of counter family `name` whose label set contains `label`
/// (e.g. `reason="watermark"`; empty = all), from crescentd's `/metrics`.
pub async fn counter(base_url: &str, name: &str, label: &str) -> u64 {
    let text = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("http client")
        .get(format!("{base_url}/metrics"))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("GET /metrics: {e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("GET /metrics body: {e}"));
    sum_samples(&text, name, label)
}

/// See [`counter`]; separate so the parsing is testable without a server.
pub fn sum_samples(text: &str, name: &str, label: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            let labels_match = match rest.strip_prefix('{') {
                Some(labels) => label.is_empty() || labels.contains(label),
                None => rest.is_empty() && label.is_empty(),
            };
            labels_match.then(|| value.parse::<f64>().ok())?
        })
        .map(|v| v as u64)
        .sum()
}

/// Gives a `crescent` process `token` in `CRESCENT_TOKEN` (never one from the test's own
/// environment).
pub fn with_token(cmd: &mut Command, token: Option<&str>) {
    match token {
        Some(t) => cmd.env("CRESCENT_TOKEN", t),
        None => cmd.env_remove("CRESCENT_TOKEN"),
    };
}

/// Runs the `crescent` CLI (`crescent --server SERVER ARGS...`) with `token` to completion:
/// (exit code, stdout, stderr).
pub fn crescent_cli(server: &str, token: Option<&str>, args: &[&str]) -> (i32, Vec<u8>, String) {
    let bin = ensure_workspace_binary("crescent-cli", "crescent");
    let mut cmd = Command::new(bin);
    with_token(&mut cmd, token);
    let out = cmd
        .args(["--server", server])
        .args(args)
        .env_remove("CRESCENT_TENANT")
        .env_remove("CRESCENT_DOMAIN")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running crescent {args:?}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_deterministic_and_distinct() {
        assert_eq!(object_value(5, 1000), object_value(5, 1000));
        assert_ne!(object_value(5, 1000), object_value(6, 1000));
        assert_ne!(object_value(5, 1000)[..999], object_value(5, 999)[..]);
        assert_eq!(object_value(1, 13).len(), 13);
        assert!(check_value("k", 3, 64, &object_value(3, 64)).is_ok());
        let mut bad = object_value(3, 64);
        bad[17] ^= 1;
        let e = check_value("k", 3, 64, &bad).unwrap_err();
        assert!(e.contains("k:") && e.contains("offset 17"), "{e}");
        let e = check_value("k", 3, 64, &bad[..10]).unwrap_err();
        assert!(e.contains("read 10 bytes, expected 64"), "{e}");
    }

    #[test]
    fn sizes_cover_the_range_and_skew_small() {
        let s = object_sizes(10_000, 1);
        assert_eq!((s[0], s[1]), (1, MAX_OBJECT));
        assert!(s.iter().all(|&n| (1..=MAX_OBJECT).contains(&n)));
        let small = s.iter().filter(|&&n| n < 65_536).count();
        assert!(small > 8_000, "{small}");
        assert!(s.iter().filter(|&&n| n > 1 << 20).count() > 200);
        assert_eq!(s, object_sizes(10_000, 1));
    }

    #[test]
    fn counters_are_summed_by_label() {
        let text = "# HELP x\n# TYPE x counter\n\
                    x_total{reason=\"a\"} 3\nx_total{reason=\"b\"} 4\nx_totally 100\ny 1\n";
        assert_eq!(sum_samples(text, "x_total", ""), 7);
        assert_eq!(sum_samples(text, "x_total", "reason=\"b\""), 4);
        assert_eq!(sum_samples(text, "y", ""), 1);
        assert_eq!(sum_samples(text, "z", ""), 0);
    }
}

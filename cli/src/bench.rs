//! `crescent bench`: the five figures of the reference store's benchmark
//! (`shared/anchors/mooncake_bench.py`), measured the same way: one client that is itself the
//! only storage owner of its data (its own segment, placement local_first), single operations
//! issued one at a time, batches of 128 keys, ops/s over `n` keys of `size`-byte values.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use rand::RngCore;
use serde::Serialize;

use crescent_client::ClientError;
use crescent_client::CrescentClient;
use crescent_owner::{Owner, OwnerConfig};

use crate::bench_target::BenchTarget;
use crate::progress::Progress;

/// One timed phase of the benchmark (`bench --only`), named as its figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Put,
    Get,
    PutBatch,
    GetBatch,
    Exist,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Put,
        Phase::Get,
        Phase::PutBatch,
        Phase::GetBatch,
        Phase::Exist,
    ];

    /// The figure's name (the JSON field and the text label).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Put => "put",
            Phase::Get => "get",
            Phase::PutBatch => "put_batch",
            Phase::GetBatch => "get_batch",
            Phase::Exist => "exist",
        }
    }

    /// The phases `only` selects, each once, in run order; none selected means all.
    pub fn selected(only: &[Phase]) -> Vec<Phase> {
        if only.is_empty() {
            return Phase::ALL.to_vec();
        }
        Phase::ALL
            .into_iter()
            .filter(|p| only.contains(p))
            .collect()
    }
}

impl FromStr for Phase {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Phase::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
                format!("unknown bench phase {s:?} (phases: {})", names.join(", "))
            })
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub n: usize,
    pub size: usize,
    pub batch: usize,
    /// Segment size; `None` sizes it for the run (both key sets plus headroom).
    pub segment_size: Option<u64>,
    /// The phases timed (always run in the order of [`Phase::ALL`]). A phase that reads keys
    /// another phase writes (get, exist after put; get_batch after put_batch) gets them written
    /// untimed first when that phase is not selected.
    pub phases: Vec<Phase>,
    /// The storage owner's credential, when it is not the client's (`--owner-token`: an
    /// `owner` token beside a `client` one, with `[auth]` on).
    pub owner_token: Option<crescent_client::BearerToken>,
    /// The storage owner's id (an `owner` token's); `None` picks a fresh one.
    pub owner_id: Option<String>,
    /// A progress bar per phase (on stderr when stdout is a terminal; off with `--json`).
    pub progress: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            n: 20_000,
            size: 4096,
            batch: 128,
            segment_size: None,
            phases: Phase::ALL.to_vec(),
            owner_token: None,
            owner_id: None,
            progress: false,
        }
    }
}

impl BenchConfig {
    /// The configuration `crescent bench`'s arguments describe (progress bars unless `json`).
    pub fn from_args(
        n: usize,
        size: u64,
        batch: usize,
        only: &[Phase],
        owner_token: Option<String>,
        owner_id: Option<String>,
        json: bool,
    ) -> Result<Self, ClientError> {
        let size = usize::try_from(size)
            .map_err(|_| ClientError::InvalidArgument("value size too large".into()))?;
        Ok(BenchConfig {
            n,
            size,
            batch,
            segment_size: None,
            phases: Phase::selected(only),
            owner_token: owner_token.map(crescent_client::BearerToken::new),
            owner_id,
            progress: !json,
        })
    }

    /// Refuses a run that would time nothing.
    pub(crate) fn validate(&self) -> Result<(), ClientError> {
        if self.n == 0 || self.size == 0 || self.batch == 0 {
            return Err(ClientError::InvalidArgument(
                "bench needs n, size and batch of at least 1".into(),
            ));
        }
        if self.phases.is_empty() {
            return Err(ClientError::InvalidArgument(
                "bench needs at least one phase".into(),
            ));
        }
        Ok(())
    }

    /// The segment of an owner that receives `share` (0 to 1) of the keys: both key sets'
    /// bytes of that share, a quarter more, and 64 MiB (`segment_size` when set).
    pub(crate) fn segment_for(&self, share: f64) -> u64 {
        if let Some(size) = self.segment_size {
            return size;
        }
        let needed = (2.0 * self.n as f64 * self.size as f64 * share).ceil() as u64;
        needed + needed / 4 + (64 << 20)
    }

    fn runs(&self, phase: Phase) -> bool {
        self.phases.contains(&phase)
    }

    /// The progress bar of a timed phase (a no-op unless drawn).
    fn progress(&self, phase: Phase) -> Progress {
        Progress::ops(phase.name(), self.n as u64, !self.progress)
    }
}

/// The five figures (ops/s), as `bench --json` prints them; a phase not run is `None` and
/// left out of the JSON.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct BenchReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub put: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub get: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub put_batch: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub get_batch: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exist: Option<f64>,
    pub n: usize,
    pub size: usize,
    /// The serving clusters of the mesh benched through (`--mesh`); absent for one cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clusters: Option<usize>,
}

impl BenchReport {
    /// The figure of `phase`, if it was run.
    pub fn figure(&self, phase: Phase) -> Option<f64> {
        match phase {
            Phase::Put => self.put,
            Phase::Get => self.get,
            Phase::PutBatch => self.put_batch,
            Phase::GetBatch => self.get_batch,
            Phase::Exist => self.exist,
        }
    }

    /// The one-line text form: `put 123/s get 456/s ...`, phases run only (the compare script
    /// parses these labels).
    pub fn text(&self) -> String {
        let figures: Vec<String> = Phase::ALL
            .into_iter()
            .filter_map(|p| self.figure(p).map(|r| format!("{p} {r:.0}/s")))
            .collect();
        let clusters = self
            .clusters
            .map(|c| format!(" clusters={c}"))
            .unwrap_or_default();
        format!(
            "crescent n={} size={}{clusters}: {}",
            self.n,
            self.size,
            figures.join(" ")
        )
    }
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
    config.validate()?;
    let owner = start_owner(client, config, config.segment_for(1.0)).await?;
    let prefix = key_prefix();
    let result = phases(client, config, &prefix).await;
    let cleanup = client.remove_prefix(&prefix).await;
    let stopped = owner.shutdown().await;
    let report = result?;
    cleanup?;
    stopped?;
    Ok(report)
}

/// The prefix of one run's keys (removed afterwards).
pub(crate) fn key_prefix() -> String {
    format!("bench-{:08x}/", rand::random::<u32>())
}

/// Starts the bench's storage owner on `client`'s cluster with a segment of `segment` bytes;
/// `client` (and every client sharing its data plane) then places its puts there first.
pub(crate) async fn start_owner(
    client: &CrescentClient,
    config: &BenchConfig,
    segment: u64,
) -> Result<Owner, ClientError> {
    let owner_client = match &config.owner_token {
        Some(token) => client.with_token(token.clone())?,
        None => client.clone(),
    };
    Owner::start(
        &owner_client,
        OwnerConfig {
            size: segment,
            // Like a storage node that keeps its memory resident: the timed writes take no
            // page faults (committing it is part of start-up, not of any phase).
            resident: true,
            owner_id: config.owner_id.clone(),
            ..OwnerConfig::default()
        },
    )
    .await
}

pub(crate) async fn phases<C: BenchTarget>(
    client: &C,
    config: &BenchConfig,
    prefix: &str,
) -> Result<BenchReport, ClientError> {
    let n = config.n;
    let mut value = vec![0u8; config.size];
    rand::thread_rng().fill_bytes(&mut value);
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}k{i}")).collect();
    let batch_keys: Vec<String> = (0..n).map(|i| format!("{prefix}b{i}")).collect();

    let values: Vec<&[u8]> = vec![&value; config.batch];
    let mut report = BenchReport {
        n,
        size: config.size,
        ..BenchReport::default()
    };
    // The keys a selected reader needs but no selected writer puts, written untimed.
    let untimed = Progress::hidden();
    if !config.runs(Phase::Put) && (config.runs(Phase::Get) || config.runs(Phase::Exist)) {
        put_batches(client, &keys, &values, &untimed).await?;
    }
    if !config.runs(Phase::PutBatch) && config.runs(Phase::GetBatch) {
        put_batches(client, &batch_keys, &values, &untimed).await?;
    }

    if config.runs(Phase::Put) {
        let progress = config.progress(Phase::Put);
        let t = Instant::now();
        for k in &keys {
            client
                .put(k, &value)
                .await
                .map_err(|e| bench_failure("put", e))?;
            progress.add(1);
        }
        report.put = Some(rate(n, t.elapsed()));
    }

    if config.runs(Phase::Get) {
        let progress = config.progress(Phase::Get);
        let t = Instant::now();
        get_all(client, &keys, config.size, &progress).await?;
        report.get = Some(rate(n, t.elapsed()));
    }

    if config.runs(Phase::PutBatch) {
        let progress = config.progress(Phase::PutBatch);
        let t = Instant::now();
        put_batches(client, &batch_keys, &values, &progress).await?;
        report.put_batch = Some(rate(n, t.elapsed()));
    }

    if config.runs(Phase::GetBatch) {
        let progress = config.progress(Phase::GetBatch);
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
            progress.add(chunk.len() as u64);
        }
        report.get_batch = Some(rate(n, t.elapsed()));
    }

    if config.runs(Phase::Exist) {
        let progress = config.progress(Phase::Exist);
        let t = Instant::now();
        for k in &keys {
            if !client
                .is_exist(k)
                .await
                .map_err(|e| bench_failure("exist", e))?
            {
                return Err(ClientError::Protocol(format!("{k} reported absent")));
            }
            progress.add(1);
        }
        report.exist = Some(rate(n, t.elapsed()));
    }
    Ok(report)
}

/// Gets every key, one at a time, each required to hold `size` bytes.
async fn get_all<C: BenchTarget>(
    client: &C,
    keys: &[String],
    size: usize,
    progress: &Progress,
) -> Result<(), ClientError> {
    for k in keys {
        let got = client.get(k).await.map_err(|e| bench_failure("get", e))?;
        if got.len() != size {
            return Err(ClientError::Protocol(format!(
                "get {k}: {} bytes, expected {size}",
                got.len(),
            )));
        }
        progress.add(1);
    }
    Ok(())
}

/// Puts `keys` in batches of `values.len()`, every item required to succeed.
async fn put_batches<C: BenchTarget>(
    client: &C,
    keys: &[String],
    values: &[&[u8]],
    progress: &Progress,
) -> Result<(), ClientError> {
    for chunk in keys.chunks(values.len()) {
        let items = client
            .put_batch(chunk, &values[..chunk.len()])
            .await
            .map_err(|e| bench_failure("put_batch", e))?;
        for r in items {
            r.map_err(|e| bench_failure("put_batch item", e))?;
        }
        progress.add(chunk.len() as u64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_shows_only_the_phases_run() {
        let r = BenchReport {
            put_batch: Some(1234.4),
            n: 10,
            size: 4096,
            ..BenchReport::default()
        };
        let json = serde_json::to_value(r).unwrap();
        let fields: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(fields.len(), 3, "{json}");
        assert_eq!(json["put_batch"], 1234.4);
        assert_eq!(json["n"], 10);
        assert_eq!(r.text(), "crescent n=10 size=4096: put_batch 1234/s");
    }
}

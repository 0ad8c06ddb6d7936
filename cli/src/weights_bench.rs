//! `crescent weights bench`: a model-shaped round trip and the weight_get benchmark.
//!
//! It generates a safetensors file in memory (`--size-mib`, `--tensors`: embedding-, attention-
//! and MLP-like tensors of varying size, F16/BF16/F32, a `__metadata__` entry and an alignment
//! hole), then against the connected crescentd:
//!
//! 1. `weight_put` (policy HOT, mode MANUAL) and a byte-identical `weight_get`;
//! 2. unless `--skip-lifecycle`: migrations to MIXED, COLD and back to HOT, each followed by a
//!    byte-identical `weight_get`;
//! 3. the benchmark, from HOT: `weight_get` of the revision (lease, manifest SHA-256 check,
//!    every payload, release) against the store's plain `get` of one ordinary object per
//!    payload holding the same bytes, over `--rounds` rounds, each side read twice per round,
//!    once in each order ([`BenchRound`]); each side's median in GiB/s and the median of the
//!    rounds' ratios;
//! 4. unless `--skip-lifecycle`: `weight_upsert` (PUT_FIRST) to generation 2 with another file,
//!    read back byte-identical; then `weight_remove` of what is left, and the plain objects.
//!
//! A subcommand rather than a criterion bench: it measures a running crescentd over the same
//! data plane and configuration a user has (standalone or HA, any transport), which a
//! self-contained bench binary cannot, and its JSON report is what CI and docs quote.

use std::time::Instant;

use clap::Args;
use crescent_wire::weights as w;
use serde::Serialize;

use crescent_client::weights::{LoadedWeights, WeightStore};
use crescent_client::ClientError;
use crescent_client::CrescentClient;

const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;
const FILE_NAME: &str = "model.safetensors";

#[derive(Debug, Clone, Args)]
pub struct WeightsBenchArgs {
    /// Size of the generated safetensors file in MiB.
    #[arg(long, default_value_t = 64)]
    pub size_mib: u64,
    /// Tensors in the file.
    #[arg(long, default_value_t = 96)]
    pub tensors: usize,
    /// Interleaved benchmark rounds (weight_get and plain gets each once per round).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Only put, benchmark and remove (no migrations, no upsert).
    #[arg(long)]
    pub skip_lifecycle: bool,
    /// Namespace of the benchmark's revisions (the resource is `bench-<pid>`).
    #[arg(long, default_value = "crescent-bench")]
    pub namespace: String,
}

/// One step of the round trip.
#[derive(Debug, Clone, Serialize)]
pub struct LifecycleStep {
    pub step: String,
    pub residency: String,
    pub observed_hot_ratio: f64,
    pub byte_identical: bool,
    pub seconds: f64,
}

/// One benchmark round: each side read twice, once before the other and once after it, and
/// its rate over both reads. The read that runs second reuses memory the first just freed and
/// skips most page faults (about 1.5x faster here), so a round that timed each side once, in
/// one order, would measure the order as much as the side.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BenchRound {
    pub weight_get_gib_s: f64,
    pub plain_get_gib_s: f64,
    /// weight_get / plain gets in this round.
    pub ratio: f64,
}

/// What `crescent --json weights bench` prints.
#[derive(Debug, Clone, Serialize)]
pub struct WeightsBenchReport {
    pub file_bytes: u64,
    pub payload_bytes: u64,
    pub tensors: usize,
    pub payload_objects: usize,
    pub put_gib_s: f64,
    pub lifecycle: Vec<LifecycleStep>,
    pub rounds: Vec<BenchRound>,
    /// Medians over the rounds.
    pub weight_get_gib_s: f64,
    pub plain_get_gib_s: f64,
    /// The process's first weight_get (the check after the put): fresh memory, no earlier
    /// load's region to reuse (docs/weights.md, "weight_get").
    pub first_weight_get_gib_s: f64,
    /// The process's first pass of plain gets (the first round's first): fresh memory too.
    pub first_plain_get_gib_s: f64,
    /// Median of the rounds' ratios, weight_get / plain gets (targets: every round at least
    /// 0.9, the median at least 1.2).
    pub ratio: f64,
    /// Every read of the revision (both generations) matched the file written.
    pub all_byte_identical: bool,
}

/// The generated model: F16/BF16/F32 tensors of 1/2, 1 and 3/2 of the mean size in turn.
pub fn model_file(total_bytes: u64, tensors: usize, seed: u64) -> Vec<u8> {
    let tensors = tensors.max(1);
    let per = (total_bytes / tensors as u64).max(64);
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        serde_json::json!({"format": "pt", "generator": "crescent weights bench"}),
    );
    let mut offset = 0u64;
    for t in 0..tensors {
        let bytes = (match t % 3 {
            0 => per / 2,
            1 => per,
            _ => per + per / 2,
        })
        .max(64)
            / 64
            * 64;
        let (dtype, width, name) = match t % 3 {
            0 => (
                "F16",
                2,
                format!("model.layers.{}.self_attn.qkv.weight", t / 3),
            ),
            1 => (
                "BF16",
                2,
                format!("model.layers.{}.mlp.up_proj.weight", t / 3),
            ),
            _ => (
                "F32",
                4,
                format!("model.layers.{}.mlp.down_proj.weight", t / 3),
            ),
        };
        if t == 1 {
            offset += 32; // an alignment hole no tensor covers
        }
        header.insert(
            name,
            serde_json::json!({
                "dtype": dtype,
                "shape": [bytes / width / 64, 64],
                "data_offsets": [offset, offset + bytes],
            }),
        );
        offset += bytes;
    }
    let mut text = serde_json::to_string(&header).expect("a header always encodes");
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut file = Vec::with_capacity(8 + text.len() + offset as usize);
    file.extend_from_slice(&(text.len() as u64).to_le_bytes());
    file.extend_from_slice(text.as_bytes());
    let start = file.len();
    file.resize(start + offset as usize, 0);
    let mut state = seed | 1;
    for chunk in file[start..].chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    file
}

fn gib_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / GIB / seconds.max(1e-9)
}

/// A round's rates from each side's two (bytes, seconds) reads.
fn round_of(weights: [(u64, f64); 2], plain: [(u64, f64); 2]) -> BenchRound {
    let rate = |reads: [(u64, f64); 2]| gib_s(reads[0].0 + reads[1].0, reads[0].1 + reads[1].1);
    let weight_get_gib_s = rate(weights);
    let plain_get_gib_s = rate(plain);
    BenchRound {
        weight_get_gib_s,
        plain_get_gib_s,
        ratio: weight_get_gib_s / plain_get_gib_s.max(1e-12),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn identical(loaded: &LoadedWeights, file: &[u8]) -> Result<bool, ClientError> {
    let files = loaded.files()?;
    Ok(files.len() == 1 && files[0].0 == FILE_NAME && files[0].1 == file)
}

struct Bench<'a> {
    client: &'a CrescentClient,
    store: &'a WeightStore,
    holder: String,
    lifecycle: Vec<LifecycleStep>,
    all_identical: bool,
    /// Bytes and seconds of the first weight_get.
    first_load: Option<(u64, f64)>,
}

impl Bench<'_> {
    /// Reads `id` and records the step.
    async fn check(
        &mut self,
        step: &str,
        id: &w::WeightId,
        file: &[u8],
        started: Instant,
    ) -> Result<(), ClientError> {
        let load_started = Instant::now();
        let loaded = self.store.weight_get(id, &self.holder).await?;
        let seconds = load_started.elapsed().as_secs_f64();
        self.first_load
            .get_or_insert((loaded.manifest.payload_bytes(), seconds));
        let same = identical(&loaded, file)?;
        self.all_identical &= same;
        let meta = self.store.weight_get_metadata(id).await?;
        tracing::info!(step, residency = %meta.residency, same, "weights bench step");
        self.lifecycle.push(LifecycleStep {
            step: step.to_string(),
            residency: meta.residency,
            observed_hot_ratio: meta.observed_hot_ratio,
            byte_identical: same,
            seconds: started.elapsed().as_secs_f64(),
        });
        Ok(())
    }

    async fn migrate(
        &mut self,
        id: &w::WeightId,
        to: w::PreferredResidency,
        file: &[u8],
    ) -> Result<(), ClientError> {
        let started = Instant::now();
        let mut op = self
            .store
            .weight_migrate(&w::MigrateRequest {
                id: id.clone(),
                to,
                hot_ratio: None,
                expected_metadata_generation: None,
            })
            .await?;
        while op.status == "RUNNING" {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            op = self.store.weight_get_operation(&op.operation_id).await?;
        }
        if op.status != "SUCCEEDED" {
            return Err(ClientError::Protocol(format!(
                "migration to {to:?} ended {}: {}",
                op.status,
                op.last_error.unwrap_or_default()
            )));
        }
        self.check(&format!("migrate_{to:?}").to_lowercase(), id, file, started)
            .await
    }

    /// PUT_FIRST upsert of `id` to `generation` with `file`, as `weights upsert` does it.
    async fn upsert(
        &mut self,
        base: &w::WeightId,
        generation: u64,
        file: &[u8],
    ) -> Result<w::WeightId, ClientError> {
        let started = Instant::now();
        let req = w::UpsertRequest {
            base: base.clone(),
            target_generation: generation,
            mode: w::UpsertMode::PutFirst,
            expected_base_metadata_generation: None,
            request_id: None,
            policy: Some(hot_manual()),
        };
        let mut reply = self.store.weight_upsert(&req).await?;
        let status = w::UpsertStatusRequest {
            tenant: base.tenant.clone(),
            namespace: base.namespace.clone(),
            resource_id: base.resource_id.clone(),
            revision: base.revision.clone(),
            request_id: reply.request_id.clone(),
        };
        let mut imported = false;
        while reply.next_step != "done" && reply.failure.is_none() {
            if reply.next_step == "import_target" && !imported {
                let mut writer = self
                    .store
                    .weight_put_with(w::PutBeginRequest {
                        id: reply.target.clone(),
                        policy: req.policy,
                        request_id: Some(reply.request_id.clone()),
                    })
                    .await?;
                writer.add_safetensors(FILE_NAME, file).await?;
                writer.close().await?;
                imported = true;
            } else {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            reply = self.store.weight_upsert_status(&status).await?;
        }
        if let Some(f) = reply.failure {
            return Err(ClientError::Protocol(format!("upsert failed: {f}")));
        }
        let target = reply.target.clone();
        self.check("upsert", &target, file, started).await?;
        Ok(target)
    }

    /// One round: weight_get then plain gets, then plain gets then weight_get. Also returns
    /// the round's first plain pass (bytes, seconds).
    async fn time_round(
        &self,
        id: &w::WeightId,
        keys: &[(String, u64)],
    ) -> Result<(BenchRound, (u64, f64)), ClientError> {
        let weights_first = self.time_weight_get(id).await?;
        let plain_second = self.time_plain_gets(keys).await?;
        let plain_first = self.time_plain_gets(keys).await?;
        let weights_second = self.time_weight_get(id).await?;
        let round = round_of([weights_first, weights_second], [plain_first, plain_second]);
        Ok((round, plain_second))
    }

    /// One weight_get of the revision; returns its payload bytes and seconds.
    async fn time_weight_get(&self, id: &w::WeightId) -> Result<(u64, f64), ClientError> {
        let started = Instant::now();
        let loaded = self.store.weight_get(id, &self.holder).await?;
        let seconds = started.elapsed().as_secs_f64();
        Ok((loaded.manifest.payload_bytes(), seconds))
    }

    /// Plain gets of every key in turn (the same sizes, one object per payload). The values
    /// are kept until the clock stops, as weight_get keeps the whole model: a loader holds
    /// what it read, and dropping each value at once would let the allocator hand the same
    /// warm pages back for the next one (a cost weight_get cannot avoid).
    async fn time_plain_gets(&self, keys: &[(String, u64)]) -> Result<(u64, f64), ClientError> {
        let started = Instant::now();
        let mut values = Vec::with_capacity(keys.len());
        for (key, len) in keys {
            let v = self.client.get(key).await?;
            if v.len() as u64 != *len {
                return Err(ClientError::Protocol(format!(
                    "{key:?} read {} bytes, {len} written",
                    v.len()
                )));
            }
            values.push(v);
        }
        let seconds = started.elapsed().as_secs_f64();
        let bytes = values.iter().map(|v| v.len() as u64).sum();
        Ok((bytes, seconds))
    }
}

/// Removes the plain copies (forced: the benchmark's own reads still hold their leases).
async fn remove_plain(client: &CrescentClient, prefix: &str) -> Result<(), ClientError> {
    for entry in client.list_all(prefix).await? {
        client.remove_forced(&entry.key).await?;
    }
    Ok(())
}

fn hot_manual() -> w::WeightPolicy {
    w::WeightPolicy::of(w::PreferredResidency::Hot, w::MigrationMode::Manual)
}

/// Runs the round trip and the benchmark; removes everything it wrote, also on failure of the
/// benchmark itself (best effort).
pub async fn run(
    client: &CrescentClient,
    store: &WeightStore,
    tenant: Option<&str>,
    args: &WeightsBenchArgs,
) -> Result<WeightsBenchReport, ClientError> {
    if args.size_mib == 0 || args.tensors == 0 || args.rounds == 0 {
        return Err(ClientError::InvalidArgument(
            "--size-mib, --tensors and --rounds must be positive".into(),
        ));
    }
    let pid = std::process::id();
    let id = w::WeightId {
        tenant: tenant.map(str::to_string),
        namespace: args.namespace.clone(),
        resource_id: format!("bench-{pid}"),
        revision: "main".into(),
        generation: 1,
    };
    let plain_prefix = format!("crescent-weights-bench/{pid}/");
    let result = run_steps(client, store, args, &id, &plain_prefix).await;
    // Cleanup of whatever is left (the steps remove on success; this covers failures).
    if let Err(e) = remove_plain(client, &plain_prefix).await {
        tracing::warn!(error = %e, "bench cleanup: plain objects not removed");
    }
    for generation in [1, 2] {
        let gid = w::WeightId {
            generation,
            ..id.clone()
        };
        if store.weight_is_exist(&gid).await.unwrap_or(false) {
            let req = w::RemoveWeightRequest {
                id: gid,
                expected_metadata_generation: None,
            };
            if let Err(e) = store.weight_remove(&req).await {
                tracing::warn!(generation, error = %e, "bench cleanup: revision not removed");
            }
        }
    }
    result
}

async fn run_steps(
    client: &CrescentClient,
    store: &WeightStore,
    args: &WeightsBenchArgs,
    id: &w::WeightId,
    plain_prefix: &str,
) -> Result<WeightsBenchReport, ClientError> {
    let file = model_file(args.size_mib * MIB, args.tensors, 0x5eed_0001);
    let mut bench = Bench {
        client,
        store,
        holder: format!("crescent-weights-bench-{}", std::process::id()),
        lifecycle: Vec::new(),
        all_identical: true,
        first_load: None,
    };
    let started = Instant::now();
    let mut writer = store.weight_put(id.clone(), Some(hot_manual())).await?;
    writer.add_safetensors(FILE_NAME, &file).await?;
    let meta = writer.close().await?;
    let payload_bytes = meta.logical_bytes.unwrap_or(0);
    let put_gib_s = gib_s(payload_bytes, started.elapsed().as_secs_f64());
    bench.check("put", id, &file, started).await?;
    if !args.skip_lifecycle {
        for to in [
            w::PreferredResidency::Mixed,
            w::PreferredResidency::Cold,
            w::PreferredResidency::Hot,
        ] {
            bench.migrate(id, to, &file).await?;
        }
    }

    // The plain copies: one ordinary object per payload, the same bytes.
    let loaded = store.weight_get(id, &bench.holder).await?;
    let mut keys = Vec::with_capacity(loaded.manifest.objects.len());
    for (i, o) in loaded.manifest.objects.iter().enumerate() {
        let key = format!("{plain_prefix}{i:06}");
        let value = loaded.objects.get(&o.key).ok_or_else(|| {
            ClientError::Protocol(format!("weight_get returned no bytes for {:?}", o.key))
        })?;
        client.put(&key, value).await?;
        keys.push((key, o.bytes));
    }
    let payload_objects = keys.len();
    drop(loaded);

    let mut rounds = Vec::with_capacity(args.rounds);
    let mut first_plain = None;
    for r in 0..args.rounds {
        let (round, plain_pass) = bench.time_round(id, &keys).await?;
        first_plain.get_or_insert(plain_pass);
        tracing::info!(round = r, ?round, "weights bench round");
        rounds.push(round);
    }
    remove_plain(client, plain_prefix).await?;
    let weight_get_gib_s = median(rounds.iter().map(|r| r.weight_get_gib_s).collect());
    let plain_get_gib_s = median(rounds.iter().map(|r| r.plain_get_gib_s).collect());
    let ratio = median(rounds.iter().map(|r| r.ratio).collect());

    let mut last = id.clone();
    if !args.skip_lifecycle {
        let next = model_file(args.size_mib * MIB, args.tensors, 0x5eed_0002);
        last = bench.upsert(id, 2, &next).await?;
    }
    let removed = store
        .weight_remove(&w::RemoveWeightRequest {
            id: last,
            expected_metadata_generation: None,
        })
        .await?;
    if removed.status != "SUCCEEDED" {
        return Err(ClientError::Protocol(format!(
            "removal ended {}: {}",
            removed.status,
            removed.last_error.unwrap_or_default()
        )));
    }
    Ok(WeightsBenchReport {
        file_bytes: file.len() as u64,
        payload_bytes,
        tensors: args.tensors,
        payload_objects,
        put_gib_s,
        lifecycle: bench.lifecycle,
        rounds,
        weight_get_gib_s,
        plain_get_gib_s,
        first_weight_get_gib_s: bench.first_load.map_or(0.0, |(b, s)| gib_s(b, s)),
        first_plain_get_gib_s: first_plain.map_or(0.0, |(b, s)| gib_s(b, s)),
        ratio,
        all_byte_identical: bench.all_identical,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_file_is_a_valid_safetensors_file_of_the_asked_shape() {
        let file = model_file(3 * MIB, 30, 1);
        let layout =
            crescent_client::weights::manifest::parse_safetensors(FILE_NAME, &file).unwrap();
        let tensors = layout.spans.iter().filter(|s| s.0.is_some()).count();
        assert_eq!(tensors, 30);
        assert_eq!(layout.spans.iter().filter(|s| s.0.is_none()).count(), 1);
        let data = file.len() - layout.data_start;
        assert!((data as u64).abs_diff(3 * MIB) < 64 * 30 + 32, "{data}");
        assert_eq!(
            model_file(MIB, 4, 9),
            model_file(MIB, 4, 9),
            "deterministic"
        );
        assert_ne!(model_file(MIB, 4, 9), model_file(MIB, 4, 10));
    }

    #[test]
    fn a_round_weighs_both_orders_alike() {
        // Each side 2 s in one read and 1 s in the other: a tie.
        let r = round_of(
            [(1 << 30, 2.0), (1 << 30, 1.0)],
            [(1 << 30, 2.0), (1 << 30, 1.0)],
        );
        assert!((r.ratio - 1.0).abs() < 1e-9, "{r:?}");
        assert!((r.weight_get_gib_s - 2.0 / 3.0).abs() < 1e-9);
        let r = round_of(
            [(1 << 30, 0.5), (1 << 30, 0.5)],
            [(1 << 30, 1.0), (1 << 30, 1.0)],
        );
        assert!((r.ratio - 2.0).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn median_of_rounds() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![1.0]), 1.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}

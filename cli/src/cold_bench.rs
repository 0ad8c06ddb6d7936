//! `crescent cold bench-restore`: restore throughput through crescentd against a plain
//! `cat`-style sequential read of the same cold files, interleaved in one run.
//!
//! Setup puts `rounds * count` objects of `size` bytes, offloads each and evicts its hot
//! replica, so every object is cold-only. Each round then times two passes over its own
//! objects, alternating which goes first: `get` of every object through crescentd (restore:
//! read and verify the cold file, promote it, answer; the client then reads the bytes), and a
//! sequential read of the same payload files from the device directory (which therefore must
//! be readable from where the CLI runs: the same host). The restore pass reads locally (the
//! server names the backing, the client reads and verifies the file) unless
//! `--no-local-cold-restore` makes crescentd read and answer inline; `--batch` restores a
//! round with one batch get. Every object is read cold exactly once (a restore promotes it, so
//! a second get would be a hot read). Both passes read files the setup just wrote (the page
//! cache holds them for both alike), and before each timed pass the bench waits, off the
//! clock, until crescentd's background promotions are done, so neither pass pays for the
//! other's promotions. The figure is the median of the per-round ratios restore/cat; the
//! returned bytes are checked after the clock stops.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use rand::{RngCore, SeedableRng};
use serde::Serialize;

use crescent_client::ClientError;
use crescent_client::CrescentClient;

#[derive(Debug, Args)]
pub struct BenchRestoreArgs {
    /// Object size (bytes; K, M, G suffixes are powers of 1024).
    #[arg(long, value_parser = super::parse_size, default_value = "4M")]
    pub size: u64,
    /// Objects per round.
    #[arg(long, default_value_t = 16)]
    pub count: usize,
    /// Rounds (each with fresh cold-only objects).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Key prefix of the bench objects (removed afterwards).
    #[arg(long, default_value = "bench-restore")]
    pub prefix: String,
    /// Restore each round's objects with one batch get instead of one get per object.
    #[arg(long)]
    pub batch: bool,
    /// Both passes reuse one buffer: the restores `get_into` one registered buffer (each value
    /// checked off the clock), the plain reads read into one reused `Vec`. Without it both
    /// passes keep `count` fresh buffers.
    #[arg(long, conflicts_with = "batch")]
    pub reuse: bool,
    /// The cold device the objects must land on (e.g. a storage owner's device; placement
    /// chooses, so make the other devices unschedulable). Default: the first listed.
    #[arg(long)]
    pub device: Option<String>,
}

/// One round's two passes.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreRound {
    pub restore_secs: f64,
    pub cat_secs: f64,
    /// restore throughput / cat throughput.
    pub ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RestoreBenchReport {
    /// The restore pass was one batch get per round (`--batch`).
    pub batch: bool,
    /// Both passes reused one buffer (`--reuse`).
    pub reuse: bool,
    pub object_bytes: u64,
    pub objects_per_round: usize,
    pub restore_gib_s: f64,
    pub restore_objects_s: f64,
    pub cat_gib_s: f64,
    pub cat_objects_s: f64,
    /// Median of the per-round ratios.
    pub ratio: f64,
    /// Restores the client read from the device directory itself (local restore), and those
    /// it handed back to crescentd (fallback); both 0 when crescentd restored every object
    /// (`--no-local-cold-restore`, or a server that does not name backings).
    pub local_restores: u64,
    pub local_fallbacks: u64,
    pub rounds: Vec<RestoreRound>,
}

fn invalid(reason: impl Into<String>) -> ClientError {
    ClientError::InvalidArgument(reason.into())
}

/// The bytes of object `i` of round `round` (distinct per object, cheap to regenerate).
/// Object `i` of round `r`: seeded random bytes, so every object differs from every other in
/// (nearly) every byte and a read of the wrong object or file cannot pass the check.
fn value(size: u64, round: usize, i: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; size as usize];
    rand::rngs::StdRng::seed_from_u64((round as u64) << 32 | i as u64).fill_bytes(&mut bytes);
    bytes
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// How long the bench waits for crescentd's background promotions before a timed pass.
const PROMOTION_SETTLE: Duration = Duration::from_secs(10);

/// Waits (off the clock) until crescentd has no background promotion queued or running, so
/// the promotions of one pass do not compete with the next pass for the CPU; gives up after
/// [`PROMOTION_SETTLE`] (the pass then runs anyway, and the figure includes that noise).
async fn promotions_settled(client: &CrescentClient) -> Result<(), ClientError> {
    let deadline = Instant::now() + PROMOTION_SETTLE;
    while client.cold_devices().await?.promotions_pending > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

pub async fn bench_restore(
    client: &CrescentClient,
    args: &BenchRestoreArgs,
) -> Result<RestoreBenchReport, ClientError> {
    if args.size == 0 || args.count == 0 || args.rounds == 0 {
        return Err(invalid("size, count and rounds must be greater than 0"));
    }
    let (device_id, root) = pick_device(client, args).await?;
    // One fresh namespace per run: a cleanup the server refuses (an object still leased by its
    // restore) must not make the next run collide with this one's keys.
    let run = uuid::Uuid::new_v4().simple().to_string();
    let keys = Keys {
        prefix: format!("{}/{}", args.prefix, &run[..12]),
    };
    let files = setup(client, args, &keys, &device_id, &root).await?;
    let reuse_buf = match args.reuse {
        true => Some(
            client
                .register_buffer(vec![0u8; args.size as usize])
                .await?,
        ),
        false => None,
    };
    let mut cat_buf: Vec<u8> = Vec::with_capacity(args.size as usize + 4096);
    let local_before = client.local_cold_restore().count("local");
    let fallback_before = client.local_cold_restore().count("fallback");
    let mut rounds = Vec::with_capacity(args.rounds);
    for (r, round_files) in files.iter().enumerate() {
        let pass = Pass {
            client,
            args,
            keys: &keys,
            r,
        };
        rounds.push(
            pass.round(round_files, reuse_buf.as_ref(), &mut cat_buf)
                .await?,
        );
    }
    // The gets' read leases are released first, or the cleanup would be refused (BUSY) and a
    // second run would find the keys holding other content.
    client.settle().await;
    client.remove_prefix(&format!("{}/", keys.prefix)).await?;
    let per_round_bytes = (args.size as usize * args.count) as f64;
    let gib = (1u64 << 30) as f64;
    let restore = median(rounds.iter().map(|r| r.restore_secs).collect());
    let cat = median(rounds.iter().map(|r| r.cat_secs).collect());
    Ok(RestoreBenchReport {
        batch: args.batch,
        reuse: args.reuse,
        object_bytes: args.size,
        objects_per_round: args.count,
        restore_gib_s: per_round_bytes / restore / gib,
        restore_objects_s: args.count as f64 / restore,
        cat_gib_s: per_round_bytes / cat / gib,
        cat_objects_s: args.count as f64 / cat,
        ratio: median(rounds.iter().map(|r| r.ratio).collect()),
        local_restores: client.local_cold_restore().count("local") - local_before,
        local_fallbacks: client.local_cold_restore().count("fallback") - fallback_before,
        rounds,
    })
}

/// The cold device the bench restores from (`--device`, else the first), and its directory,
/// which must be readable here.
async fn pick_device(
    client: &CrescentClient,
    args: &BenchRestoreArgs,
) -> Result<(String, PathBuf), ClientError> {
    let devices = client.cold_devices().await?;
    let device = match &args.device {
        Some(id) => devices
            .devices
            .iter()
            .find(|d| &d.id == id)
            .ok_or_else(|| invalid(format!("the server has no cold device {id:?}")))?,
        None => devices
            .devices
            .first()
            .ok_or_else(|| invalid("the server has no cold device"))?,
    };
    let root = PathBuf::from(&device.root);
    if !root.join("DEVICE").exists() {
        return Err(invalid(format!(
            "the device directory {} is not readable here: run the bench on the device's host",
            root.display()
        )));
    }
    Ok((device.id.clone(), root))
}

/// The keys of one run: `PREFIX/RUN/ROUND/INDEX`.
struct Keys {
    prefix: String,
}

impl Keys {
    fn key(&self, r: usize, i: usize) -> String {
        format!("{}/{r}/{i}", self.prefix)
    }
}

/// Setup: cold-only objects on `device_id`, and where their payload files are (per round).
async fn setup(
    client: &CrescentClient,
    args: &BenchRestoreArgs,
    keys: &Keys,
    device_id: &str,
    root: &std::path::Path,
) -> Result<Vec<Vec<PathBuf>>, ClientError> {
    let mut files: Vec<Vec<PathBuf>> = Vec::with_capacity(args.rounds);
    for r in 0..args.rounds {
        let mut round = Vec::with_capacity(args.count);
        for i in 0..args.count {
            let key = keys.key(r, i);
            client.put(&key, &value(args.size, r, i)).await?;
            let stat = client.offload(&key).await?;
            let placed = stat.cold.as_ref().map(|c| c.device_id.as_str());
            if placed != Some(device_id) {
                return Err(invalid(format!(
                    "{key} was offloaded to {placed:?}, not {device_id:?}: make the other \
                     devices unschedulable",
                )));
            }
            let locator = stat
                .cold
                .and_then(|c| c.locator)
                .ok_or_else(|| invalid(format!("{key} was not materialized")))?;
            client.evict_hot(&key).await?;
            round.push(root.join(locator));
        }
        files.push(round);
    }
    Ok(files)
}

/// One timed round `r`: the restore pass and the plain-read pass, in alternating order.
struct Pass<'a> {
    client: &'a CrescentClient,
    args: &'a BenchRestoreArgs,
    keys: &'a Keys,
    r: usize,
}

impl Pass<'_> {
    async fn round(
        &self,
        round_files: &[PathBuf],
        reuse_buf: Option<&crescent_client::RegisteredBuffer>,
        cat_buf: &mut Vec<u8>,
    ) -> Result<RestoreRound, ClientError> {
        let (args, r) = (self.args, self.r);
        let mut restored = Vec::with_capacity(args.count);
        let mut cat_values = Vec::with_capacity(args.count);
        let mut restore_secs = 0.0;
        let mut cat_secs = 0.0;
        for pass in 0..2 {
            promotions_settled(self.client).await?;
            if (pass + r) % 2 == 0 {
                restore_secs = match reuse_buf {
                    Some(buf) => self.restore_into(buf).await?,
                    None => self.restore(&mut restored).await?,
                };
            } else {
                cat_secs = cat(args, round_files, cat_buf, &mut cat_values)?;
            }
        }
        for (i, got) in restored.iter().enumerate() {
            if *got != value(args.size, r, i) {
                return Err(invalid(format!(
                    "{} read back other bytes",
                    self.keys.key(r, i)
                )));
            }
        }
        std::hint::black_box(cat_values);
        Ok(RestoreRound {
            restore_secs,
            cat_secs,
            ratio: cat_secs / restore_secs.max(f64::MIN_POSITIVE),
        })
    }

    /// Restores into the registered buffer, timing each get alone and checking its bytes.
    async fn restore_into(
        &self,
        buf: &crescent_client::RegisteredBuffer,
    ) -> Result<f64, ClientError> {
        let (args, r) = (self.args, self.r);
        let mut restore_secs = 0.0;
        for i in 0..args.count {
            let started = Instant::now();
            let n = self.client.get_into(&self.keys.key(r, i), buf, 0).await?;
            restore_secs += started.elapsed().as_secs_f64();
            let mut got = vec![0u8; n];
            buf.read(0, &mut got).await?;
            if got != value(args.size, r, i) {
                return Err(invalid(format!(
                    "{} read back other bytes",
                    self.keys.key(r, i)
                )));
            }
        }
        Ok(restore_secs)
    }

    /// Restores the round's objects (a batch get or one get each) into `restored`.
    async fn restore(&self, restored: &mut Vec<Vec<u8>>) -> Result<f64, ClientError> {
        let (args, r) = (self.args, self.r);
        let started = Instant::now();
        if args.batch {
            let keys: Vec<String> = (0..args.count).map(|i| self.keys.key(r, i)).collect();
            for item in self.client.get_batch(&keys).await? {
                restored.push(item?);
            }
        } else {
            for i in 0..args.count {
                restored.push(self.client.get(&self.keys.key(r, i)).await?);
            }
        }
        Ok(started.elapsed().as_secs_f64())
    }
}

/// The plain reads of the round's payload files. They keep their bytes until the round ends,
/// as the restores do: both passes hand back `count` owned buffers (dropping each at once would
/// let the allocator reuse one warm buffer, a cost the restores cannot avoid).
fn cat(
    args: &BenchRestoreArgs,
    round_files: &[PathBuf],
    cat_buf: &mut Vec<u8>,
    cat_values: &mut Vec<Vec<u8>>,
) -> Result<f64, ClientError> {
    let started = Instant::now();
    for f in round_files {
        let read = |into: &mut Vec<u8>| {
            std::fs::File::open(f)
                .and_then(|mut file| std::io::Read::read_to_end(&mut file, into))
                .map_err(|e| invalid(format!("reading {}: {e}", f.display())))
        };
        if args.reuse {
            cat_buf.clear();
            read(cat_buf)?;
        } else {
            let mut bytes = Vec::new();
            read(&mut bytes)?;
            cat_values.push(bytes);
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_differ_between_objects_and_the_median_is_the_middle() {
        assert_ne!(value(64, 0, 1), value(64, 0, 2));
        assert_ne!(value(64, 1, 0), value(64, 0, 0));
        assert_eq!(value(64, 3, 4), value(64, 3, 4));
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}

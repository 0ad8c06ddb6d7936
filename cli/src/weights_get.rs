//! `crescent weights get ID --generation G -o DIR [--tp-size N --tp-rank R ...]`: the whole
//! revision written back byte-identical, streamed (each tensor is written to its file as it
//! arrives, through one registered buffer the size of the largest tensor), or one
//! tensor-parallel rank's shards as valid safetensors files (`NAME.tp-R-of-N.safetensors`)
//! read with ranged reads.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use crescent_wire::weights as w;
use serde_json::json;

use crescent_client::weights::manifest::ManifestFile;
use crescent_client::weights::shard::RevisionPlan;
use crescent_client::weights::{
    ManifestObject, ShardStats, SplitRule, TargetLayout, TensorRule, WeightReader, WeightStore,
};
use crescent_client::{ClientError, CrescentClient, RegisteredBuffer};

use super::progress::Progress;

/// Bytes copied out of the registered buffer into the file per write.
const WRITE_CHUNK: usize = 4 << 20;

/// The target layout of `weights get` (all optional: without `--tp-size` the whole revision
/// is read).
#[derive(Debug, Clone, Args)]
pub struct TpArgs {
    /// Tensor-parallel world size: read only one rank's shards.
    #[arg(long, requires = "tp_rank")]
    pub tp_size: Option<u32>,
    /// The rank (0-based) whose shards to read.
    #[arg(long, requires = "tp_size")]
    pub tp_rank: Option<u32>,
    /// PATTERN=SPLIT for the tensors whose name matches the glob PATTERN (first match wins),
    /// SPLIT `shard:AXIS` or `replicate`; e.g. `--tp-rule '*.o_proj.weight=shard:1'`.
    #[arg(long = "tp-rule", requires = "tp_size")]
    pub tp_rules: Vec<String>,
    /// The split of tensors no rule matches.
    #[arg(long, default_value = "shard:0", requires = "tp_size")]
    pub tp_default: String,
}

impl TpArgs {
    /// The layout these arguments describe, or `None` for a whole-revision read.
    pub fn layout(&self) -> Result<Option<TargetLayout>, ClientError> {
        let (Some(size), Some(rank)) = (self.tp_size, self.tp_rank) else {
            return Ok(None);
        };
        let mut layout = TargetLayout::new(size, rank, self.tp_default.parse::<SplitRule>()?);
        for rule in &self.tp_rules {
            layout.rules.push(rule.parse::<TensorRule>()?);
        }
        layout.compile()?;
        Ok(Some(layout))
    }
}

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> ClientError {
    move |source| ClientError::Io { context, source }
}

/// `output/name`, refusing names that would leave the output directory.
fn output_path(output: &Path, name: &str) -> Result<PathBuf, ClientError> {
    if name.is_empty() || name.contains('/') || name == ".." || name == "." {
        return Err(ClientError::Protocol(format!(
            "the manifest names a file {name:?} outside the output directory"
        )));
    }
    Ok(output.join(name))
}

/// Writes every file of the open revision into `output`, one payload object at a time;
/// returns `(file name, bytes)` per file.
async fn write_revision(
    client: &CrescentClient,
    reader: &WeightReader,
    output: &Path,
    progress: &Progress,
) -> Result<Vec<(String, u64)>, ClientError> {
    let manifest = reader.manifest();
    let objects: HashMap<&str, &ManifestObject> = manifest
        .objects
        .iter()
        .map(|o| (o.key.as_str(), o))
        .collect();
    let largest = manifest.objects.iter().map(|o| o.bytes).max().unwrap_or(0);
    let buffer = client
        .register_buffer(vec![0u8; largest.max(1) as usize])
        .await?;
    let mut written = Vec::new();
    let mut chunk = vec![0u8; WRITE_CHUNK.min(largest.max(1) as usize)];
    for file in &manifest.files {
        let path = output_path(output, &file.name)?;
        // Written beside its final name and renamed once complete: a read that fails
        // part-way leaves no truncated file under the model's name.
        let partial = output.join(format!(".{}.partial", file.name));
        let dst = Destination {
            buffer: &buffer,
            chunk: &mut chunk,
            progress,
        };
        let bytes = match write_file(reader, &objects, file, &partial, dst).await {
            Ok(bytes) => bytes,
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                return Err(e);
            }
        };
        std::fs::rename(&partial, &path).map_err(io_err(format!(
            "renaming {} to {}",
            partial.display(),
            path.display()
        )))?;
        written.push((file.name.clone(), bytes));
    }
    client.unregister_buffer(&buffer).await?;
    Ok(written)
}

/// Where [`write_file`] lands each object and copies it from.
struct Destination<'a> {
    buffer: &'a RegisteredBuffer,
    chunk: &'a mut [u8],
    progress: &'a Progress,
}

/// One file of the revision into `path`: its header, then each segment as it is read.
async fn write_file(
    reader: &WeightReader,
    objects: &HashMap<&str, &ManifestObject>,
    file: &ManifestFile,
    path: &Path,
    dst: Destination<'_>,
) -> Result<u64, ClientError> {
    let io = |source| ClientError::Io {
        context: format!("writing {}", path.display()),
        source,
    };
    let mut out = std::fs::File::create(path).map_err(io)?;
    out.write_all(&(file.header.len() as u64).to_le_bytes())
        .map_err(io)?;
    out.write_all(file.header.as_bytes()).map_err(io)?;
    let mut bytes = 8 + file.header.len() as u64;
    for segment in &file.segments {
        let object = objects.get(segment.key.as_str()).ok_or_else(|| {
            ClientError::Protocol(format!(
                "file {} names object {:?}, which the manifest does not list",
                file.name, segment.key
            ))
        })?;
        let size = reader.read_object_into(object, dst.buffer, 0).await?;
        copy_out(dst.buffer, size, dst.chunk, &mut out)
            .await
            .map_err(|e| e.unwrap_or_else(io))?;
        bytes += size as u64;
        dst.progress.add(size as u64);
    }
    out.sync_all().map_err(io)?;
    Ok(bytes)
}

/// Appends the first `size` bytes of `buffer` to `out`, `chunk` at a time. `Err(Err(_))` is
/// an IO error of `out`, named by the caller.
async fn copy_out(
    buffer: &RegisteredBuffer,
    size: usize,
    chunk: &mut [u8],
    out: &mut std::fs::File,
) -> Result<(), Result<ClientError, std::io::Error>> {
    let mut at = 0;
    while at < size {
        let n = chunk.len().min(size - at);
        buffer.read(at, &mut chunk[..n]).await.map_err(Ok)?;
        out.write_all(&chunk[..n]).map_err(Err)?;
        at += n;
    }
    Ok(())
}

/// SIGINT and SIGTERM, caught from the start of a get (before its lease is taken, so a
/// signal never kills the process while it holds one): an interrupted get returns through
/// [`Interrupts::guard`], and its caller still closes the reader and releases the revision
/// lease (docs/weights.md, "Reads: lease, streaming, progress") instead of leaving it to
/// expire.
struct Interrupts {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Interrupts {
    fn listen() -> Result<Self, ClientError> {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind| {
            signal(kind).map_err(|source| ClientError::Io {
                context: "listening for signals".into(),
                source,
            })
        };
        Ok(Self {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
        })
    }

    /// `work`, unless a signal arrived before or arrives during it.
    async fn guard<T>(
        &mut self,
        work: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        let interrupted = || ClientError::Io {
            context: "weights get".into(),
            source: std::io::Error::new(std::io::ErrorKind::Interrupted, "interrupted by a signal"),
        };
        tokio::select! {
            _ = self.interrupt.recv() => Err(interrupted()),
            _ = self.terminate.recv() => Err(interrupted()),
            done = work => done,
        }
    }
}

/// The whole revision into `output`, streamed under the reader's lease.
async fn get_whole(
    client: &CrescentClient,
    store: &WeightStore,
    id: &w::WeightId,
    holder: &str,
    output: &Path,
    json_out: bool,
    signals: &mut Interrupts,
) -> Result<(), ClientError> {
    let reader = store.weight_open(id, holder).await?;
    let metadata = reader.metadata().clone();
    let progress = Progress::new("get", reader.manifest().payload_bytes(), json_out);
    let written = signals
        .guard(write_revision(client, &reader, output, &progress))
        .await;
    progress.finish();
    if written.is_err() {
        // An interrupted write stopped mid-file: its partial file is still there.
        for file in &reader.manifest().files {
            let _ = std::fs::remove_file(output.join(format!(".{}.partial", file.name)));
        }
    }
    let closed = reader.close().await;
    let written = written?;
    closed?;
    let files: Vec<_> = written
        .iter()
        .map(|(name, bytes)| json!({"file": name, "bytes": bytes}))
        .collect();
    if json_out {
        outln!("{}", json!({"files": files, "metadata": metadata}))?;
    } else {
        outln!("{} file(s) written to {}", files.len(), output.display())?;
    }
    Ok(())
}

pub(super) async fn get(
    client: &CrescentClient,
    store: &WeightStore,
    id: &w::WeightId,
    output: &Path,
    tp: &TpArgs,
    json_out: bool,
) -> Result<(), ClientError> {
    let layout = tp.layout()?;
    let mut signals = Interrupts::listen()?;
    let holder = format!("crescent-cli-{}", std::process::id());
    std::fs::create_dir_all(output).map_err(io_err(format!("creating {}", output.display())))?;
    let Some(layout) = layout else {
        return get_whole(client, store, id, &holder, output, json_out, &mut signals).await;
    };
    let reader = store.weight_open(id, &holder).await?;
    let rank = async {
        let plan = reader.plan(&layout)?;
        let progress = Progress::new("get", plan.bytes(), json_out);
        let written = signals
            .guard(write_rank(&reader, &plan, &layout, output, &progress))
            .await;
        progress.finish();
        if written.is_err() {
            for file in &plan.files {
                let name = file.rank_file_name(&layout);
                let _ = std::fs::remove_file(output.join(format!(".{name}.partial")));
            }
        }
        written
    }
    .await;
    let metadata = reader.metadata().clone();
    let closed = reader.close().await;
    let (written, stats) = rank?;
    closed?;
    if json_out {
        outln!(
            "{}",
            json!({
                "files": written,
                "metadata": metadata,
                "layout": layout,
                "stats": stats,
            })
        )?;
    } else {
        outln!(
            "rank {} of {}: {} file(s) written to {}; read {} of {} payload bytes ({:.1}%) in {} range(s)",
            layout.rank,
            layout.world_size,
            written.len(),
            output.display(),
            stats.transferred_bytes,
            stats.full_bytes,
            100.0 * stats.transferred_bytes as f64 / stats.full_bytes.max(1) as f64,
            stats.ranges
        )?;
    }
    Ok(())
}

/// One rank's files into `output`, each tensor's shard written as it arrives (plus the
/// objects outside any file, read and counted as `weight_get_layout` does); returns one JSON
/// entry per file and the read's statistics.
async fn write_rank(
    reader: &WeightReader,
    plan: &RevisionPlan,
    layout: &TargetLayout,
    output: &Path,
    progress: &Progress,
) -> Result<(Vec<serde_json::Value>, ShardStats), ClientError> {
    let mut stats = ShardStats {
        full_bytes: reader.manifest().payload_bytes(),
        shard_bytes: plan.bytes(),
        ..ShardStats::default()
    };
    let mut written = Vec::new();
    for file in &plan.files {
        let name = file.rank_file_name(layout);
        let path = output_path(output, &name)?;
        let partial = output.join(format!(".{name}.partial"));
        let io = |source| ClientError::Io {
            context: format!("writing {}", partial.display()),
            source,
        };
        let wrote = async {
            let mut out = std::fs::File::create(&partial).map_err(io)?;
            let head = file.rank_head(layout);
            out.write_all(&head).map_err(io)?;
            let mut bytes = head.len() as u64;
            for tensor in &file.tensors {
                let (data, transferred) = reader.read_shard(tensor).await?;
                out.write_all(&data).map_err(io)?;
                bytes += data.len() as u64;
                stats.transferred_bytes += transferred;
                stats.ranges += tensor.plan.ranges.len() as u64;
                progress.add(data.len() as u64);
            }
            out.sync_all().map_err(io)?;
            Ok::<_, ClientError>(bytes)
        }
        .await;
        let bytes = wrote.inspect_err(|_| {
            let _ = std::fs::remove_file(&partial);
        })?;
        std::fs::rename(&partial, &path).map_err(io_err(format!(
            "renaming {} to {}",
            partial.display(),
            path.display()
        )))?;
        written.push(json!({"file": name, "bytes": bytes, "tensors": file.tensors.len()}));
    }
    for (key, bytes) in &plan.loose_objects {
        let object = reader
            .manifest()
            .objects
            .iter()
            .find(|o| &o.key == key)
            .ok_or_else(|| ClientError::Protocol(format!("object {key:?} is not listed")))?;
        reader.read_object(object).await?;
        stats.transferred_bytes += bytes;
        stats.ranges += u64::from(*bytes > 0);
        progress.add(*bytes);
    }
    Ok((written, stats))
}

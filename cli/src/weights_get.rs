//! `crescent weights get ID --generation G -o DIR [--tp-size N --tp-rank R ...]`: the whole
//! revision written back byte-identical, or one tensor-parallel rank's shards as valid
//! safetensors files (`NAME.tp-R-of-N.safetensors`) read with ranged reads.

use std::path::{Path, PathBuf};

use clap::Args;
use crescent_wire::weights as w;
use serde_json::json;

use crescent_client::weights::{SplitRule, TargetLayout, TensorRule, WeightStore};
use crescent_client::ClientError;

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

fn write(path: &Path, bytes: &[u8]) -> Result<(), ClientError> {
    std::fs::write(path, bytes).map_err(io_err(format!("writing {}", path.display())))
}

pub(super) async fn get(
    store: &WeightStore,
    id: &w::WeightId,
    output: &Path,
    tp: &TpArgs,
    json_out: bool,
) -> Result<(), ClientError> {
    let layout = tp.layout()?;
    let holder = format!("crescent-cli-{}", std::process::id());
    std::fs::create_dir_all(output).map_err(io_err(format!("creating {}", output.display())))?;
    let mut written = Vec::new();
    let Some(layout) = layout else {
        let loaded = store.weight_get(id, &holder).await?;
        for (name, bytes) in loaded.files()? {
            write(&output_path(output, &name)?, &bytes)?;
            written.push(json!({"file": name, "bytes": bytes.len()}));
        }
        if json_out {
            outln!("{}", json!({"files": written, "metadata": loaded.metadata}))?;
        } else {
            outln!("{} file(s) written to {}", written.len(), output.display())?;
        }
        return Ok(());
    };
    let sharded = store.weight_get_layout(id, &holder, &layout).await?;
    for file in &sharded.files {
        let name = file.rank_file_name(&layout);
        let bytes = file.to_safetensors(&layout);
        write(&output_path(output, &name)?, &bytes)?;
        written.push(json!({"file": name, "bytes": bytes.len(), "tensors": file.tensors.len()}));
    }
    let stats = sharded.stats;
    if json_out {
        outln!(
            "{}",
            json!({
                "files": written,
                "metadata": sharded.metadata,
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

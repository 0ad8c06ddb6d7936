//! weight_get with a target layout: the plan (which byte ranges of which payload object one
//! tensor-parallel rank needs, from the safetensors headers the manifest keeps verbatim), the
//! rank's tensors as read, and the per-rank safetensors files they make.

use std::collections::BTreeMap;

use crescent_wire::weights as w;
use serde::Serialize;

use super::layout::{header_tensors, plan_shard, CompiledLayout, ShardPlan, TargetLayout};
use super::manifest::WeightManifest;
use crate::error::ClientError;

/// One tensor of one file, planned for a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTensor {
    pub name: String,
    pub dtype: String,
    pub full_shape: Vec<u64>,
    /// The payload object holding the whole tensor, and its size.
    pub key: String,
    pub object_bytes: u64,
    pub plan: ShardPlan,
}

/// One safetensors file of the revision, planned for a rank.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedFile {
    pub name: String,
    /// The file's `__metadata__` entry, if any.
    pub metadata: Option<serde_json::Value>,
    /// In data order of the rank's file (tensor name order).
    pub tensors: Vec<PlannedTensor>,
}

/// The reads of one rank: every tensor of every file, and the objects outside any file
/// (added by name, without a shape: read whole).
#[derive(Debug, Clone, PartialEq)]
pub struct RevisionPlan {
    pub files: Vec<PlannedFile>,
    /// `(key, bytes)` of the objects outside any file.
    pub loose_objects: Vec<(String, u64)>,
}

impl RevisionPlan {
    /// Bytes the rank reads.
    pub fn bytes(&self) -> u64 {
        let tensors: u64 = self
            .files
            .iter()
            .flat_map(|f| &f.tensors)
            .map(|t| t.plan.bytes)
            .sum();
        tensors + self.loose_objects.iter().map(|(_, b)| b).sum::<u64>()
    }
}

/// Plans the reads of the rank `layout` names over a verified manifest. Pure.
pub fn plan_revision(
    manifest: &WeightManifest,
    layout: &CompiledLayout,
) -> Result<RevisionPlan, ClientError> {
    let world = layout.layout().world_size;
    let rank = layout.layout().rank;
    let mut in_files = std::collections::HashSet::new();
    let mut files = Vec::with_capacity(manifest.files.len());
    for file in &manifest.files {
        let (infos, metadata) = header_tensors(&file.name, &file.header)?;
        let mut tensors = Vec::with_capacity(infos.len());
        for segment in &file.segments {
            in_files.insert(segment.key.as_str());
            let Some(name) = &segment.tensor else {
                continue;
            };
            let info = infos.get(name).ok_or_else(|| {
                ClientError::Protocol(format!(
                    "segment {:?} of {} holds tensor {name:?}, which its header lacks",
                    segment.key, file.name
                ))
            })?;
            let qualified = format!("{}:{name}", file.name);
            let plan = plan_shard(&qualified, info, layout.split_for(name), world, rank)?;
            if segment.bytes != info.data_offsets[1] - info.data_offsets[0] {
                return Err(ClientError::Protocol(format!(
                    "tensor {qualified:?} is stored in {} bytes, its header spans {}",
                    segment.bytes,
                    info.data_offsets[1] - info.data_offsets[0]
                )));
            }
            tensors.push(PlannedTensor {
                name: name.clone(),
                dtype: info.dtype.clone(),
                full_shape: info.shape.clone(),
                key: segment.key.clone(),
                object_bytes: segment.bytes,
                plan,
            });
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        files.push(PlannedFile {
            name: file.name.clone(),
            metadata,
            tensors,
        });
    }
    let loose_objects = manifest
        .objects
        .iter()
        .filter(|o| !in_files.contains(o.key.as_str()))
        .map(|o| (o.key.clone(), o.bytes))
        .collect();
    Ok(RevisionPlan {
        files,
        loose_objects,
    })
}

/// One rank's part of a tensor, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorShard {
    pub tensor: PlannedTensor,
    pub data: Vec<u8>,
}

/// One file's tensors for a rank.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardedFile {
    pub name: String,
    pub metadata: Option<serde_json::Value>,
    pub tensors: Vec<TensorShard>,
}

/// What [`super::WeightStore::weight_get_layout`] read.
#[derive(Debug, Clone)]
pub struct ShardedWeights {
    pub metadata: w::WeightMetadata,
    pub layout: TargetLayout,
    pub files: Vec<ShardedFile>,
    /// Objects outside any file, whole, by key.
    pub loose_objects: BTreeMap<String, Vec<u8>>,
    pub stats: ShardStats,
}

/// Bytes of a sharded read against the whole revision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ShardStats {
    /// The revision's logical payload bytes (what a full weight_get reads).
    pub full_bytes: u64,
    /// The bytes of the rank's shards.
    pub shard_bytes: u64,
    /// Bytes that crossed the data plane (cold-only objects arrive whole).
    pub transferred_bytes: u64,
    /// Transfer descriptors (coalesced ranges) issued.
    pub ranges: u64,
}

impl PlannedFile {
    /// The rank's file name: `NAME.safetensors` -> `NAME.tp-R-of-N.safetensors`.
    pub fn rank_file_name(&self, layout: &TargetLayout) -> String {
        rank_file_name(&self.name, layout)
    }

    /// The head of the rank's safetensors file (length and header) for these tensors, as
    /// [`ShardedFile::to_safetensors`] writes it: the data follows, tensor after tensor.
    pub fn rank_head(&self, layout: &TargetLayout) -> Vec<u8> {
        rank_head(&self.metadata, self.tensors.iter(), layout)
    }
}

impl ShardedFile {
    /// The rank's file name: `NAME.safetensors` -> `NAME.tp-R-of-N.safetensors`.
    pub fn rank_file_name(&self, layout: &TargetLayout) -> String {
        rank_file_name(&self.name, layout)
    }

    /// A valid safetensors file of the rank's tensors: tensors in name order, contiguous, the
    /// header space-padded to 8 bytes; `__metadata__` is the original one plus the layout
    /// (`crescent.tp_size`, `crescent.tp_rank`).
    pub fn to_safetensors(&self, layout: &TargetLayout) -> Vec<u8> {
        let mut out = rank_head(
            &self.metadata,
            self.tensors.iter().map(|t| &t.tensor),
            layout,
        );
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
        }
        out
    }
}

fn rank_file_name(name: &str, layout: &TargetLayout) -> String {
    let suffix = format!(".tp-{}-of-{}", layout.rank, layout.world_size);
    match name.strip_suffix(".safetensors") {
        Some(stem) => format!("{stem}{suffix}.safetensors"),
        None => format!("{name}{suffix}"),
    }
}

/// The length and header of a rank's file of `tensors` (each `plan.bytes` long, in order).
fn rank_head<'a>(
    metadata: &Option<serde_json::Value>,
    tensors: impl Iterator<Item = &'a PlannedTensor>,
    layout: &TargetLayout,
) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut meta = match metadata {
        Some(serde_json::Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    meta.insert(
        "crescent.tp_size".into(),
        layout.world_size.to_string().into(),
    );
    meta.insert("crescent.tp_rank".into(), layout.rank.to_string().into());
    header.insert("__metadata__".into(), serde_json::Value::Object(meta));
    let mut offset = 0u64;
    for t in tensors {
        let end = offset + t.plan.bytes;
        header.insert(
            t.name.clone(),
            serde_json::json!({
                "dtype": t.dtype,
                "shape": t.plan.shape,
                "data_offsets": [offset, end],
            }),
        );
        offset = end;
    }
    let mut text = serde_json::to_string(&header).expect("a header always encodes");
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = Vec::with_capacity(8 + text.len());
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

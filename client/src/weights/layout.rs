//! Target layouts of `weight_get` (format `crescent.weights.target_layout`, version 1): which
//! part of every tensor one tensor-parallel rank needs, and the exact byte ranges of that
//! part inside the tensor's payload object. Pure: no IO, so the range arithmetic is tested on
//! its own (`layout_tests.rs`).
//!
//! A tensor of shape `[d0, .., dn-1]` stored row-major (safetensors is C order) split along
//! axis `a` into `world_size` parts: rank `r` takes indexes `[start, start + count)` of `da`
//! (balanced: the first `da % world_size` ranks take one more, as `numpy.array_split`). For
//! every index of the axes before `a` that is one contiguous run of `count * inner` bytes
//! (`inner` = bytes of one index of `a`), so a split along axis 0 is one range and a split
//! along a later axis is strided: `d0 * .. * d(a-1)` ranges, coalesced where they touch.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::ClientError;

pub const TARGET_LAYOUT_FORMAT: &str = "crescent.weights.target_layout";
pub const TARGET_LAYOUT_VERSION: u32 = 1;

/// Largest world size accepted (well above any tensor-parallel degree in use).
pub const MAX_WORLD_SIZE: u32 = 4096;

/// How one tensor is divided among the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SplitRule {
    /// Every rank reads the whole tensor (norms, biases of row-parallel layers, ...).
    Replicate,
    /// Each rank reads its share of axis `axis` (0: the first dimension).
    Shard { axis: usize },
}

impl fmt::Display for SplitRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SplitRule::Replicate => f.write_str("replicate"),
            SplitRule::Shard { axis } => write!(f, "shard:{axis}"),
        }
    }
}

impl FromStr for SplitRule {
    type Err = ClientError;

    /// `replicate` or `shard:AXIS`.
    fn from_str(s: &str) -> Result<Self, ClientError> {
        let bad = || {
            ClientError::InvalidArgument(format!(
                "split rule {s:?}: expected replicate or shard:AXIS (AXIS a dimension index)"
            ))
        };
        match s.split_once(':') {
            None if s.eq_ignore_ascii_case("replicate") => Ok(SplitRule::Replicate),
            Some((kind, axis)) if kind.eq_ignore_ascii_case("shard") => Ok(SplitRule::Shard {
                axis: axis.parse().map_err(|_| bad())?,
            }),
            _ => Err(bad()),
        }
    }
}

/// A split rule for the tensors whose name matches `pattern` (a glob: `*` any run of
/// characters, `?` one, `[..]` a class; matched against the tensor name inside its file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorRule {
    pub pattern: String,
    pub split: SplitRule,
}

impl FromStr for TensorRule {
    type Err = ClientError;

    /// `PATTERN=SPLIT`, e.g. `*.q_proj.weight=shard:0`.
    fn from_str(s: &str) -> Result<Self, ClientError> {
        let (pattern, split) = s.rsplit_once('=').ok_or_else(|| {
            ClientError::InvalidArgument(format!("tensor rule {s:?}: expected PATTERN=SPLIT"))
        })?;
        Ok(TensorRule {
            pattern: pattern.to_string(),
            split: split.parse()?,
        })
    }
}

/// The part of a revision one tensor-parallel rank reads. Rules are tried in order; the first
/// whose pattern matches decides, `default_split` otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetLayout {
    pub format: String,
    pub version: u32,
    pub world_size: u32,
    pub rank: u32,
    #[serde(default)]
    pub rules: Vec<TensorRule>,
    pub default_split: SplitRule,
}

/// A [`TargetLayout`] checked and with its patterns compiled.
#[derive(Debug, Clone)]
pub struct CompiledLayout {
    layout: TargetLayout,
    patterns: Vec<glob::Pattern>,
}

impl TargetLayout {
    /// `world_size` ranks, this one `rank`, every tensor split by `default_split` unless a
    /// rule says otherwise.
    pub fn new(world_size: u32, rank: u32, default_split: SplitRule) -> Self {
        Self {
            format: TARGET_LAYOUT_FORMAT.into(),
            version: TARGET_LAYOUT_VERSION,
            world_size,
            rank,
            rules: Vec::new(),
            default_split,
        }
    }

    pub fn with_rule(mut self, pattern: &str, split: SplitRule) -> Self {
        self.rules.push(TensorRule {
            pattern: pattern.into(),
            split,
        });
        self
    }

    /// Checks the layout and compiles its patterns (INVALID_ARGUMENT on any fault).
    pub fn compile(&self) -> Result<CompiledLayout, ClientError> {
        if self.format != TARGET_LAYOUT_FORMAT || self.version != TARGET_LAYOUT_VERSION {
            return Err(ClientError::InvalidArgument(format!(
                "target layout is {} v{}; this client reads {TARGET_LAYOUT_FORMAT} \
                 v{TARGET_LAYOUT_VERSION}",
                self.format, self.version
            )));
        }
        if self.world_size == 0 || self.world_size > MAX_WORLD_SIZE {
            return Err(ClientError::InvalidArgument(format!(
                "tensor-parallel size {} must be in 1..={MAX_WORLD_SIZE}",
                self.world_size
            )));
        }
        if self.rank >= self.world_size {
            return Err(ClientError::InvalidArgument(format!(
                "tensor-parallel rank {} is not below the size {}",
                self.rank, self.world_size
            )));
        }
        let patterns = self
            .rules
            .iter()
            .map(|r| {
                glob::Pattern::new(&r.pattern).map_err(|e| {
                    ClientError::InvalidArgument(format!("tensor pattern {:?}: {e}", r.pattern))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(CompiledLayout {
            layout: self.clone(),
            patterns,
        })
    }
}

impl CompiledLayout {
    pub fn layout(&self) -> &TargetLayout {
        &self.layout
    }

    /// The split of tensor `name`.
    pub fn split_for(&self, name: &str) -> SplitRule {
        self.patterns
            .iter()
            .zip(&self.layout.rules)
            .find(|(p, _)| p.matches(name))
            .map_or(self.layout.default_split, |(_, r)| r.split)
    }
}

/// `[offset, offset + len)` of a payload object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ByteRange {
    pub offset: u64,
    pub len: u64,
}

/// The first index and the count of axis length `dim` that `rank` of `world` takes.
pub fn axis_share(dim: u64, world: u32, rank: u32) -> (u64, u64) {
    let (world, rank) = (u64::from(world), u64::from(rank));
    let (base, extra) = (dim / world, dim % world);
    (
        rank * base + rank.min(extra),
        base + u64::from(rank < extra),
    )
}

/// Bytes of one element of a safetensors dtype (sub-byte dtypes cannot be split by bytes).
pub fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 1,
        "U16" | "I16" | "F16" | "BF16" => 2,
        "U32" | "I32" | "F32" => 4,
        "U64" | "I64" | "F64" | "C64" => 8,
        _ => return None,
    })
}

/// A tensor's entry in a safetensors header.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TensorInfo {
    pub dtype: String,
    pub shape: Vec<u64>,
    pub data_offsets: [u64; 2],
}

/// Where one rank's part of a tensor lies in its payload object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardPlan {
    pub split: SplitRule,
    /// The shape of the rank's part.
    pub shape: Vec<u64>,
    /// Ascending, disjoint, non-touching ranges of the payload object.
    pub ranges: Vec<ByteRange>,
    /// Sum of the ranges' lengths.
    pub bytes: u64,
}

/// Appends `r`, merging it into the last range when they touch.
fn push_coalesced(ranges: &mut Vec<ByteRange>, r: ByteRange) {
    if r.len == 0 {
        return;
    }
    match ranges.last_mut() {
        Some(last) if last.offset + last.len == r.offset => last.len += r.len,
        _ => ranges.push(r),
    }
}

/// The part of a tensor (`dtype`, `shape`, stored in `stored_bytes`) rank `rank` of `world`
/// reads under `split`. `tensor` names it in errors.
pub fn plan_shard(
    tensor: &str,
    info: &TensorInfo,
    split: SplitRule,
    world: u32,
    rank: u32,
) -> Result<ShardPlan, ClientError> {
    let elem = dtype_bytes(&info.dtype).ok_or_else(|| {
        ClientError::InvalidArgument(format!(
            "tensor {tensor:?} has dtype {}, which cannot be split by bytes",
            info.dtype
        ))
    })?;
    let total = info
        .shape
        .iter()
        .try_fold(elem, |acc, d| acc.checked_mul(*d))
        .ok_or_else(|| ClientError::Protocol(format!("tensor {tensor:?}: shape overflows")))?;
    let stored = info.data_offsets[1].saturating_sub(info.data_offsets[0]);
    if total != stored {
        return Err(ClientError::Protocol(format!(
            "tensor {tensor:?} ({} {:?}) needs {total} bytes but holds {stored}",
            info.dtype, info.shape
        )));
    }
    let axis = match split {
        SplitRule::Replicate => {
            let mut ranges = Vec::new();
            push_coalesced(
                &mut ranges,
                ByteRange {
                    offset: 0,
                    len: total,
                },
            );
            return Ok(ShardPlan {
                split,
                shape: info.shape.clone(),
                ranges,
                bytes: total,
            });
        }
        SplitRule::Shard { axis } => axis,
    };
    if axis >= info.shape.len() {
        return Err(ClientError::InvalidArgument(format!(
            "tensor {tensor:?} has {} dimension(s); it cannot be split along axis {axis}",
            info.shape.len()
        )));
    }
    let dim = info.shape[axis];
    let outer: u64 = info.shape[..axis].iter().product();
    let inner: u64 = info.shape[axis + 1..].iter().product::<u64>() * elem;
    let (start, count) = axis_share(dim, world, rank);
    let mut shape = info.shape.clone();
    shape[axis] = count;
    let mut ranges = Vec::new();
    if count > 0 && inner > 0 {
        for i in 0..outer {
            push_coalesced(
                &mut ranges,
                ByteRange {
                    offset: (i * dim + start) * inner,
                    len: count * inner,
                },
            );
        }
    }
    Ok(ShardPlan {
        split,
        shape,
        bytes: outer * count * inner,
        ranges,
    })
}

/// The tensors of a safetensors header (its JSON text), `__metadata__` apart.
pub fn header_tensors(
    file: &str,
    header: &str,
) -> Result<(BTreeMap<String, TensorInfo>, Option<serde_json::Value>), ClientError> {
    let mut entries: BTreeMap<String, serde_json::Value> = serde_json::from_str(header)
        .map_err(|e| ClientError::Protocol(format!("header of {file} does not decode: {e}")))?;
    let metadata = entries.remove("__metadata__");
    let tensors = entries
        .into_iter()
        .map(|(name, v)| {
            let info: TensorInfo = serde_json::from_value(v).map_err(|e| {
                ClientError::Protocol(format!("tensor {name:?} of {file} does not decode: {e}"))
            })?;
            Ok((name, info))
        })
        .collect::<Result<_, ClientError>>()?;
    Ok((tensors, metadata))
}

//! The client's manifest of a managed weight revision (format `crescent.weights.manifest`,
//! version 1) and the safetensors layout it records. crescentd never parses it: it only keeps
//! its SHA-256, which readers verify before trusting the object keys listed here.
//!
//! A safetensors file is an 8-byte little-endian header length, a JSON header (tensor name ->
//! dtype, shape, data_offsets relative to the data region; `__metadata__` optional) and the
//! data region. The manifest keeps the header text verbatim and the data region as an ordered
//! list of segments (one payload object per tensor, plus any bytes no tensor covers), so the
//! file is rebuilt byte-identical.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ClientError;

pub const MANIFEST_FORMAT: &str = "crescent.weights.manifest";
pub const MANIFEST_VERSION: u32 = 1;

/// Largest safetensors header accepted (the format's reference implementation uses 100 MB).
pub const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// One payload object of the revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestObject {
    pub key: String,
    pub bytes: u64,
    /// The tensor (or caller-chosen name) the object holds; also its affinity unit.
    pub name: String,
}

/// A span of a file's data region, stored as one payload object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSegment {
    pub key: String,
    pub bytes: u64,
    /// `None` for bytes no tensor covers (alignment padding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
}

/// A safetensors file of the revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    pub name: String,
    /// The JSON header exactly as it was in the file (padding included).
    pub header: String,
    /// The data region in file order.
    pub segments: Vec<FileSegment>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightManifest {
    pub format: String,
    pub version: u32,
    /// Every payload object, in the order written (each its own affinity unit).
    pub objects: Vec<ManifestObject>,
    pub files: Vec<ManifestFile>,
}

impl Default for WeightManifest {
    fn default() -> Self {
        Self {
            format: MANIFEST_FORMAT.into(),
            version: MANIFEST_VERSION,
            objects: Vec::new(),
            files: Vec::new(),
        }
    }
}

impl WeightManifest {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a manifest always encodes")
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, ClientError> {
        let m: Self = serde_json::from_slice(bytes)
            .map_err(|e| ClientError::Protocol(format!("manifest does not decode: {e}")))?;
        if m.format != MANIFEST_FORMAT || m.version != MANIFEST_VERSION {
            return Err(ClientError::Protocol(format!(
                "manifest is {} v{}; this client reads {MANIFEST_FORMAT} v{MANIFEST_VERSION}",
                m.format, m.version
            )));
        }
        Ok(m)
    }

    /// The logical payload bytes.
    pub fn payload_bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.bytes).sum()
    }
}

/// A tensor's entry in a safetensors header.
#[derive(Debug, Clone, Deserialize)]
struct TensorEntry {
    #[allow(dead_code)]
    dtype: String,
    #[allow(dead_code)]
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// A parsed safetensors file: its header text and the spans of its data region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetensorsLayout {
    pub header: String,
    /// Offset of the data region in the file.
    pub data_start: usize,
    /// `(tensor or None for padding, start, end)` relative to the data region, in order,
    /// covering it exactly.
    pub spans: Vec<(Option<String>, u64, u64)>,
}

fn bad(file: &str, why: impl std::fmt::Display) -> ClientError {
    ClientError::InvalidArgument(format!("{file} is not a valid safetensors file: {why}"))
}

/// Parses the header of a safetensors file held in `bytes`.
pub fn parse_safetensors(file: &str, bytes: &[u8]) -> Result<SafetensorsLayout, ClientError> {
    parse_safetensors_head(file, bytes, bytes.len() as u64)
}

/// The length of the header of a safetensors file that starts with `prefix` (at least its
/// first 8 bytes), checked against [`MAX_SAFETENSORS_HEADER`].
pub fn safetensors_header_len(file: &str, prefix: &[u8]) -> Result<u64, ClientError> {
    let len_bytes: [u8; 8] = prefix
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad(file, "shorter than the 8-byte header length"))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_SAFETENSORS_HEADER {
        return Err(bad(file, format!("header of {header_len} bytes")));
    }
    Ok(header_len)
}

/// Parses the header of a safetensors file of `file_len` bytes from `head`, its first bytes
/// (at least the length and the header): a file read piece by piece needs only its head.
pub fn parse_safetensors_head(
    file: &str,
    head: &[u8],
    file_len: u64,
) -> Result<SafetensorsLayout, ClientError> {
    let header_len = safetensors_header_len(file, head)?;
    let data_start = 8 + header_len as usize;
    let header_bytes = head.get(8..data_start).ok_or_else(|| {
        bad(
            file,
            format!("header of {header_len} bytes runs past the end"),
        )
    })?;
    let header = std::str::from_utf8(header_bytes)
        .map_err(|e| bad(file, format!("header is not UTF-8: {e}")))?
        .to_string();
    let mut entries: BTreeMap<String, serde_json::Value> = serde_json::from_str(&header)
        .map_err(|e| bad(file, format!("header is not a JSON object: {e}")))?;
    entries.remove("__metadata__");
    let data_len = file_len.checked_sub(data_start as u64).ok_or_else(|| {
        bad(
            file,
            format!("header of {header_len} bytes runs past the end"),
        )
    })?;
    let mut tensors = Vec::with_capacity(entries.len());
    for (name, value) in entries {
        let t: TensorEntry = serde_json::from_value(value)
            .map_err(|e| bad(file, format!("tensor {name:?}: {e}")))?;
        let [start, end] = t.data_offsets;
        if start > end || end > data_len {
            return Err(bad(
                file,
                format!("tensor {name:?} spans [{start}, {end}) of a {data_len}-byte data region"),
            ));
        }
        tensors.push((name, start, end));
    }
    tensors.sort_by(|a, b| (a.1, a.2, &a.0).cmp(&(b.1, b.2, &b.0)));
    let mut spans = Vec::with_capacity(tensors.len() + 1);
    let mut at = 0u64;
    for (name, start, end) in tensors {
        if start < at {
            return Err(bad(
                file,
                format!("tensor {name:?} overlaps the tensor before it"),
            ));
        }
        if start > at {
            spans.push((None, at, start));
        }
        spans.push((Some(name), start, end));
        at = end;
    }
    if at < data_len {
        spans.push((None, at, data_len));
    }
    Ok(SafetensorsLayout {
        header,
        data_start,
        spans,
    })
}

/// Rebuilds a safetensors file from its manifest entry and the payload objects it lists.
pub fn assemble_file<V: AsRef<[u8]>>(
    file: &ManifestFile,
    objects: &BTreeMap<String, V>,
) -> Result<Vec<u8>, ClientError> {
    let data: u64 = file.segments.iter().map(|s| s.bytes).sum();
    let mut out = Vec::with_capacity(8 + file.header.len() + data as usize);
    out.extend_from_slice(&(file.header.len() as u64).to_le_bytes());
    out.extend_from_slice(file.header.as_bytes());
    for s in &file.segments {
        let bytes = objects.get(&s.key).map(AsRef::as_ref).ok_or_else(|| {
            ClientError::Protocol(format!("object {:?} of {} was not read", s.key, file.name))
        })?;
        if bytes.len() as u64 != s.bytes {
            return Err(ClientError::Protocol(format!(
                "object {:?} of {} is {} bytes, the manifest says {}",
                s.key,
                file.name,
                bytes.len(),
                s.bytes
            )));
        }
        out.extend_from_slice(bytes);
    }
    Ok(out)
}

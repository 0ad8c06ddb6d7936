//! [`WeightWriter`]: the weight_put writer. Begin made the revision IMPORTING; each added
//! tensor or object becomes one payload object of the revision's managed group; `close` writes
//! the manifest last and commits (crescentd validates the whole group and publishes READY).

use std::collections::HashSet;
use std::time::Instant;

use crescent_wire::store::{DataType, PutStartReply};
use crescent_wire::weights::{self as w, routes};
use sha2::{Digest, Sha256};
use tracing::Instrument;

use super::manifest::{
    parse_safetensors, parse_safetensors_head, safetensors_header_len, FileSegment, ManifestFile,
    ManifestObject,
};
use super::{object_id, WeightManifest, WeightStore};
use crate::error::ClientError;

/// Writes one IMPORTING revision. Dropping it without [`WeightWriter::close`] publishes
/// nothing: the revision stays IMPORTING (invisible) until a retry or a remove.
#[derive(Debug)]
pub struct WeightWriter {
    store: WeightStore,
    id: w::WeightId,
    begun: w::PutBeginReply,
    manifest: WeightManifest,
    /// Object names so far: each names one affinity unit, so they must differ.
    names: HashSet<String>,
    bytes: u64,
}

impl WeightWriter {
    pub(super) fn new(store: WeightStore, id: w::WeightId, begun: w::PutBeginReply) -> Self {
        Self {
            store,
            id,
            begun,
            manifest: WeightManifest::default(),
            names: HashSet::new(),
            bytes: 0,
        }
    }

    /// The revision being written.
    pub fn id(&self) -> &w::WeightId {
        &self.id
    }

    /// Payload bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    async fn put_object(
        &self,
        key: &str,
        value: &[u8],
        kind: w::WeightObjectKind,
    ) -> Result<(), ClientError> {
        let checksum = crescent_checksum::crc32c(value);
        let req = w::WeightObjectRequest {
            id: self.id.clone(),
            key: key.to_string(),
            size: value.len() as u64,
            kind,
            checksum: Some(checksum),
        };
        let (started, leader): (PutStartReply, _) =
            self.store.post_at(routes::PUT_OBJECT, &req).await?;
        if started.already_exists {
            return Ok(());
        }
        let data_type = match kind {
            w::WeightObjectKind::Manifest => DataType::Metadata,
            w::WeightObjectKind::Payload => DataType::Weight,
        };
        self.store
            .client
            .write_started(
                &leader,
                object_id(key),
                &started,
                value,
                Some(checksum),
                data_type,
            )
            .await
    }

    /// Adds one payload object named `name` (its own affinity unit); returns its key.
    pub async fn add_tensor(&mut self, name: &str, value: &[u8]) -> Result<String, ClientError> {
        if name.is_empty() {
            return Err(ClientError::InvalidArgument(
                "tensor name must not be empty".into(),
            ));
        }
        if self.names.contains(name) {
            return Err(ClientError::InvalidArgument(format!(
                "tensor {name:?} was already added to this revision"
            )));
        }
        // Keys are positional, not derived from names: tensor names may hold any character.
        let key = format!(
            "{}{:06}",
            self.begun.payload_prefix,
            self.manifest.objects.len()
        );
        self.put_object(&key, value, w::WeightObjectKind::Payload)
            .instrument(tracing::debug_span!(
                "weights.put_object",
                size = value.len()
            ))
            .await?;
        self.names.insert(name.to_string());
        self.manifest.objects.push(ManifestObject {
            key: key.clone(),
            bytes: value.len() as u64,
            name: name.to_string(),
        });
        self.bytes += value.len() as u64;
        Ok(key)
    }

    /// Adds a safetensors file (`bytes` is the whole file): one payload object per tensor,
    /// plus one per run of bytes no tensor covers, so `get` rebuilds it byte-identical.
    pub async fn add_safetensors(
        &mut self,
        file_name: &str,
        bytes: &[u8],
    ) -> Result<(), ClientError> {
        self.check_new_file(file_name)?;
        let layout = parse_safetensors(file_name, bytes)?;
        let mut segments = Vec::with_capacity(layout.spans.len());
        for (tensor, start, end) in &layout.spans {
            let value =
                &bytes[layout.data_start + *start as usize..layout.data_start + *end as usize];
            segments.push(self.add_span(file_name, tensor, *start, value).await?);
        }
        self.push_file(file_name, layout.header, segments);
        Ok(())
    }

    /// [`WeightWriter::add_safetensors`] of the file at `path`, read one tensor at a time into
    /// one reused buffer (resident memory: the largest tensor, whatever the file's size).
    /// `progress` is called with the bytes of each span once it is written.
    pub async fn add_safetensors_file(
        &mut self,
        file_name: &str,
        path: &std::path::Path,
        mut progress: impl FnMut(u64),
    ) -> Result<(), ClientError> {
        self.check_new_file(file_name)?;
        let mut file = SourceFile::open(path).await?;
        let mut buf = file.read_at(Vec::new(), 0, 8).await?;
        let header_len = safetensors_header_len(file_name, &buf)?;
        buf = file.read_at(buf, 0, 8 + header_len as usize).await?;
        let layout = parse_safetensors_head(file_name, &buf, file.len)?;
        let mut segments = Vec::with_capacity(layout.spans.len());
        for (tensor, start, end) in &layout.spans {
            let offset = layout.data_start as u64 + start;
            buf = file.read_at(buf, offset, (end - start) as usize).await?;
            segments.push(self.add_span(file_name, tensor, *start, &buf).await?);
            progress(end - start);
        }
        self.push_file(file_name, layout.header, segments);
        Ok(())
    }

    fn check_new_file(&self, file_name: &str) -> Result<(), ClientError> {
        if self.manifest.files.iter().any(|f| f.name == file_name) {
            return Err(ClientError::InvalidArgument(format!(
                "file {file_name:?} was already added to this revision"
            )));
        }
        Ok(())
    }

    /// One span of a file's data region (`start` in it) as a payload object.
    async fn add_span(
        &mut self,
        file_name: &str,
        tensor: &Option<String>,
        start: u64,
        value: &[u8],
    ) -> Result<FileSegment, ClientError> {
        let name = match tensor {
            Some(t) => format!("{file_name}:{t}"),
            None => format!("{file_name}:@padding:{start}"),
        };
        let key = self.add_tensor(&name, value).await?;
        Ok(FileSegment {
            key,
            bytes: value.len() as u64,
            tensor: tensor.clone(),
        })
    }

    fn push_file(&mut self, file_name: &str, header: String, segments: Vec<FileSegment>) {
        self.manifest.files.push(ManifestFile {
            name: file_name.to_string(),
            header,
            segments,
        });
    }

    /// Writes the manifest (last) and commits: the revision is READY when this returns.
    pub async fn close(self) -> Result<w::WeightMetadata, ClientError> {
        let started = Instant::now();
        let bytes = self.bytes;
        let result = async {
            let body = self.manifest.encode();
            let sha = hex::encode(Sha256::digest(&body));
            self.put_object(
                &self.begun.manifest_key,
                &body,
                w::WeightObjectKind::Manifest,
            )
            .await?;
            // Every object is in its owners' tables already: each put is recorded by its
            // owners before it is ended (docs/rebuild.md, "Owners record before the ack").
            let units = self
                .manifest
                .objects
                .iter()
                .map(|o| w::AffinityUnit {
                    unit_id: o.name.clone(),
                    member_keys: vec![o.key.clone()],
                    bytes: o.bytes,
                })
                .collect();
            let commit = w::PutCommitRequest {
                id: self.id.clone(),
                expected_metadata_generation: self.begun.metadata_generation,
                manifest_sha256: sha,
                affinity_units: units,
            };
            self.store.post(routes::PUT_COMMIT, &commit).await
        }
        .instrument(tracing::debug_span!(
            "weights.commit",
            payload_bytes = bytes
        ))
        .await;
        self.store
            .client
            .data
            .metrics
            .record("weight_put", started, &result, bytes);
        result
    }
}

/// A file read at offsets on the blocking pool (the reads do not stall the runtime).
struct SourceFile {
    file: std::sync::Arc<std::fs::File>,
    path: std::path::PathBuf,
    len: u64,
}

impl SourceFile {
    async fn open(path: &std::path::Path) -> Result<Self, ClientError> {
        let io = |source| ClientError::Io {
            context: format!("reading {}", path.display()),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok(Self {
            file: std::sync::Arc::new(file),
            path: path.to_path_buf(),
            len,
        })
    }

    /// `len` bytes at `offset`, read into `buf` (reused: it grows to the largest read only).
    async fn read_at(
        &mut self,
        mut buf: Vec<u8>,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, ClientError> {
        use std::os::unix::fs::FileExt;
        let file = self.file.clone();
        let read = tokio::task::spawn_blocking(move || {
            buf.resize(len, 0);
            file.read_exact_at(&mut buf, offset).map(|()| buf)
        })
        .await
        .map_err(|e| ClientError::Protocol(format!("file read task failed: {e}")))?;
        read.map_err(|source| ClientError::Io {
            context: format!("reading {} at {offset}", self.path.display()),
            source,
        })
    }
}

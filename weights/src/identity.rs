//! Revision identity, lineage, the canonical manifest key and the managed group id.

use std::fmt;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::WeightError;

/// The tenant of requests that name none.
pub const DEFAULT_TENANT: &str = "default";
/// Longest identity component, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 256;

/// Everything but RFC 3986 "unreserved" characters is encoded, so a component can never
/// contain `/` and keys of different identities never collide.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn encode(component: &str) -> String {
    utf8_percent_encode(component, COMPONENT).to_string()
}

/// A non-empty component of at most [`MAX_COMPONENT_BYTES`] without control characters.
pub(crate) fn check_component(field: &'static str, value: &str) -> Result<(), WeightError> {
    if value.is_empty() {
        return Err(WeightError::invalid(field, "must not be empty"));
    }
    if value.len() > MAX_COMPONENT_BYTES {
        return Err(WeightError::invalid(
            field,
            format!(
                "{} bytes, at most {MAX_COMPONENT_BYTES} allowed",
                value.len()
            ),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(WeightError::invalid(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// A lowercase hex SHA-256 digest (64 characters).
pub(crate) fn check_sha256(field: &'static str, value: &str) -> Result<(), WeightError> {
    let ok = value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(WeightError::invalid(
            field,
            "must be a lowercase hex SHA-256 digest (64 characters)",
        ))
    }
}

/// `(tenant_id, namespace, resource_id, revision)`: every generation of one logical revision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LineageId {
    pub tenant_id: String,
    pub namespace: String,
    pub resource_id: String,
    pub revision: String,
}

impl LineageId {
    pub fn validate(&self) -> Result<(), WeightError> {
        check_component("tenant_id", &self.tenant_id)?;
        check_component("namespace", &self.namespace)?;
        check_component("resource_id", &self.resource_id)?;
        check_component("revision", &self.revision)
    }

    /// The `LineageClaim` aggregate instance id: encoded components joined by `/`.
    pub fn stream_id(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            encode(&self.tenant_id),
            encode(&self.namespace),
            encode(&self.resource_id),
            encode(&self.revision)
        )
    }

    pub fn at_generation(&self, weight_generation: u64) -> RevisionIdentity {
        RevisionIdentity {
            tenant_id: self.tenant_id.clone(),
            namespace: self.namespace.clone(),
            resource_id: self.resource_id.clone(),
            revision: self.revision.clone(),
            weight_generation,
        }
    }
}

impl fmt::Display for LineageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.stream_id())
    }
}

/// `(tenant_id, namespace, resource_id, revision, weight_generation)`: one complete, immutable
/// weight revision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RevisionIdentity {
    pub tenant_id: String,
    pub namespace: String,
    pub resource_id: String,
    pub revision: String,
    pub weight_generation: u64,
}

impl RevisionIdentity {
    /// An identity in the default tenant.
    pub fn new(
        namespace: impl Into<String>,
        resource_id: impl Into<String>,
        revision: impl Into<String>,
        weight_generation: u64,
    ) -> Self {
        Self {
            tenant_id: DEFAULT_TENANT.to_string(),
            namespace: namespace.into(),
            resource_id: resource_id.into(),
            revision: revision.into(),
            weight_generation,
        }
    }

    pub fn with_tenant(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = tenant_id.into();
        self
    }

    pub fn validate(&self) -> Result<(), WeightError> {
        self.lineage().validate()
    }

    pub fn lineage(&self) -> LineageId {
        LineageId {
            tenant_id: self.tenant_id.clone(),
            namespace: self.namespace.clone(),
            resource_id: self.resource_id.clone(),
            revision: self.revision.clone(),
        }
    }

    /// The `WeightRevision` aggregate instance id: encoded components joined by `/`.
    pub fn stream_id(&self) -> String {
        format!("{}/{}", self.lineage().stream_id(), self.weight_generation)
    }

    /// `weights/<tenant>/<namespace>/<resource_id>/<revision>/<generation>/manifest`, each
    /// component UTF-8 percent-encoded.
    pub fn manifest_key(&self) -> String {
        format!("weights/{}/manifest", self.stream_id())
    }

    /// The managed group shared by the manifest and every payload. Derived from the identity,
    /// so a retried import (even after a lost begin response) finds the same group.
    pub fn group_id(&self) -> String {
        let digest: [u8; 32] = Sha256::digest(self.stream_id().as_bytes()).into();
        format!("wgrp-{}", hex::encode(&digest[..16]))
    }
}

impl fmt::Display for RevisionIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.stream_id())
    }
}

fn length_prefixed(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

/// SHA-256 of the sorted payload keys, each length-prefixed (u64 big-endian), lowercase hex.
/// Order-independent input, unambiguous encoding.
pub fn payload_keys_sha256<S: AsRef<str>>(keys: &[S]) -> String {
    let mut sorted: Vec<&str> = keys.iter().map(AsRef::as_ref).collect();
    sorted.sort_unstable();
    let mut hasher = Sha256::new();
    for key in sorted {
        length_prefixed(&mut hasher, key.as_bytes());
    }
    let digest: [u8; 32] = hasher.finalize().into();
    hex::encode(digest)
}

/// Deterministic `request_id` of a `weight_upsert` that names none: SHA-256 over the canonical
/// base identity, target identity, mode and expected metadata generation. Retrying the same
/// arguments derives the same id.
pub fn derive_request_id(
    base: &RevisionIdentity,
    target: &RevisionIdentity,
    mode: crate::lineage::UpsertMode,
    expected_metadata_generation: u64,
) -> String {
    let mut hasher = Sha256::new();
    length_prefixed(&mut hasher, b"crescent.weight_upsert.v1");
    length_prefixed(&mut hasher, base.stream_id().as_bytes());
    length_prefixed(&mut hasher, target.stream_id().as_bytes());
    length_prefixed(&mut hasher, mode.as_str().as_bytes());
    hasher.update(expected_metadata_generation.to_be_bytes());
    let digest: [u8; 32] = hasher.finalize().into();
    format!("req-{}", hex::encode(digest))
}

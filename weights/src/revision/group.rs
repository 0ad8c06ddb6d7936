//! Whole-group validation at commit: object types, membership, counts, bytes and digests of
//! what the store holds against what the writer declares. The manifest body is never parsed.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::WeightError;
use crate::identity::payload_keys_sha256;
use crate::planner::{affinity_digest, AffinityUnit};

use super::types::{GroupMember, ObjectType, PayloadSummary};

fn mismatch(group_id: &str, reason: String) -> WeightError {
    WeightError::GroupMismatch {
        group_id: group_id.to_string(),
        reason,
    }
}

/// Validates the group of `group_id` whose manifest must be `manifest_key`.
pub(crate) fn validate_group(
    group_id: &str,
    manifest_key: &str,
    summary: &PayloadSummary,
    members: &[GroupMember],
    units: &[AffinityUnit],
) -> Result<(), WeightError> {
    let (manifest, payload_bytes) = sort_members(group_id, manifest_key, members)?;
    validate_manifest(group_id, manifest_key, summary, manifest)?;
    validate_payloads(group_id, summary, &payload_bytes)?;
    validate_units(group_id, summary, &payload_bytes, units)
}

/// Every member belongs to the group and has ended its put; exactly one is the manifest (a
/// METADATA object at `manifest_key`), every other a readable WEIGHT payload listed once.
/// Returns the manifest, if listed, and the payloads' logical bytes by key.
fn sort_members<'a>(
    group_id: &str,
    manifest_key: &str,
    members: &'a [GroupMember],
) -> Result<(Option<&'a GroupMember>, BTreeMap<&'a str, u64>), WeightError> {
    let mut payload_bytes: BTreeMap<&str, u64> = BTreeMap::new();
    let mut manifest: Option<&GroupMember> = None;
    for m in members {
        if m.group_id != group_id {
            return Err(mismatch(
                group_id,
                format!("member {:?} belongs to group {:?}", m.key, m.group_id),
            ));
        }
        if !m.complete {
            return Err(WeightError::GroupIncomplete {
                group_id: group_id.to_string(),
                reason: format!("put of {:?} has not ended", m.key),
            });
        }
        match m.object_type {
            ObjectType::Metadata if m.key == manifest_key => {
                if manifest.replace(m).is_some() {
                    return Err(mismatch(group_id, "the manifest is listed twice".into()));
                }
            }
            ObjectType::Metadata => {
                return Err(mismatch(
                    group_id,
                    format!(
                        "METADATA object {:?} is not the manifest {manifest_key:?}",
                        m.key
                    ),
                ))
            }
            ObjectType::Other => {
                return Err(mismatch(
                    group_id,
                    format!(
                        "member {:?} is neither the manifest nor a WEIGHT payload",
                        m.key
                    ),
                ))
            }
            ObjectType::Weight => check_payload(group_id, manifest_key, m, &mut payload_bytes)?,
        }
    }
    Ok((manifest, payload_bytes))
}

/// A WEIGHT member: not at the manifest key, readable from memory, listed once.
fn check_payload<'a>(
    group_id: &str,
    manifest_key: &str,
    m: &'a GroupMember,
    payload_bytes: &mut BTreeMap<&'a str, u64>,
) -> Result<(), WeightError> {
    if m.key == manifest_key {
        return Err(mismatch(
            group_id,
            "the manifest key holds a WEIGHT object".into(),
        ));
    }
    if !m.memory_readable {
        return Err(WeightError::GroupIncomplete {
            group_id: group_id.to_string(),
            reason: format!("payload {:?} has no readable memory replica", m.key),
        });
    }
    if payload_bytes.insert(&m.key, m.logical_bytes).is_some() {
        return Err(mismatch(
            group_id,
            format!("payload {:?} is listed twice", m.key),
        ));
    }
    Ok(())
}

/// The manifest is committed, hard-pinned and readable, with the declared digest (when the
/// store knows it).
fn validate_manifest(
    group_id: &str,
    manifest_key: &str,
    summary: &PayloadSummary,
    manifest: Option<&GroupMember>,
) -> Result<(), WeightError> {
    let Some(manifest) = manifest else {
        return Err(WeightError::GroupIncomplete {
            group_id: group_id.to_string(),
            reason: format!("the manifest {manifest_key:?} is not committed"),
        });
    };
    if !(manifest.memory_readable && manifest.hard_pinned) {
        return Err(mismatch(
            group_id,
            "the manifest must have a hard-pinned, readable memory replica".into(),
        ));
    }
    if let Some(digest) = &manifest.content_sha256 {
        if *digest != summary.manifest_sha256 {
            return Err(mismatch(
                group_id,
                format!(
                    "manifest SHA-256 is {digest}, the commit declares {}",
                    summary.manifest_sha256
                ),
            ));
        }
    }
    Ok(())
}

/// The payloads' count, logical bytes and key digest match the declared summary.
fn validate_payloads(
    group_id: &str,
    summary: &PayloadSummary,
    payload_bytes: &BTreeMap<&str, u64>,
) -> Result<(), WeightError> {
    let count = payload_bytes.len() as u64;
    if count != summary.payload_count {
        return Err(mismatch(
            group_id,
            format!(
                "{count} payloads in the group, {} declared",
                summary.payload_count
            ),
        ));
    }
    let bytes = payload_bytes
        .values()
        .try_fold(0u64, |acc, b| acc.checked_add(*b))
        .ok_or_else(|| mismatch(group_id, "payload bytes overflow".into()))?;
    if bytes != summary.logical_bytes {
        return Err(mismatch(
            group_id,
            format!(
                "{bytes} logical payload bytes in the group, {} declared",
                summary.logical_bytes
            ),
        ));
    }
    let keys: Vec<&str> = payload_bytes.keys().copied().collect();
    let keys_digest = payload_keys_sha256(&keys);
    if keys_digest != summary.payload_keys_sha256 {
        return Err(mismatch(
            group_id,
            format!(
                "payload key digest is {keys_digest}, {} declared",
                summary.payload_keys_sha256
            ),
        ));
    }
    Ok(())
}

/// The affinity summary covers every payload exactly once with the right bytes, and matches
/// the declared count and digest.
fn validate_units(
    group_id: &str,
    summary: &PayloadSummary,
    payload_bytes: &BTreeMap<&str, u64>,
    units: &[AffinityUnit],
) -> Result<(), WeightError> {
    if units.len() as u64 != summary.affinity_count {
        return Err(mismatch(
            group_id,
            format!(
                "{} affinity units, {} declared",
                units.len(),
                summary.affinity_count
            ),
        ));
    }
    let digest = affinity_digest(units);
    if digest != summary.affinity_digest {
        return Err(mismatch(
            group_id,
            format!(
                "affinity digest is {digest}, {} declared",
                summary.affinity_digest
            ),
        ));
    }
    let mut covered: BTreeSet<&str> = BTreeSet::new();
    for unit in units {
        if unit.member_keys.is_empty() {
            return Err(mismatch(
                group_id,
                format!("affinity unit {:?} has no members", unit.unit_id),
            ));
        }
        let mut unit_bytes = 0u64;
        for key in &unit.member_keys {
            let Some(b) = payload_bytes.get(key.as_str()) else {
                return Err(mismatch(
                    group_id,
                    format!(
                        "affinity unit {:?} names unknown payload {key:?}",
                        unit.unit_id
                    ),
                ));
            };
            if !covered.insert(key) {
                return Err(mismatch(
                    group_id,
                    format!("payload {key:?} is in more than one affinity unit"),
                ));
            }
            unit_bytes = unit_bytes.saturating_add(*b);
        }
        if unit_bytes != unit.bytes {
            return Err(mismatch(
                group_id,
                format!(
                    "affinity unit {:?} declares {} bytes, its payloads hold {unit_bytes}",
                    unit.unit_id, unit.bytes
                ),
            ));
        }
    }
    if covered.len() != payload_bytes.len() {
        return Err(mismatch(
            group_id,
            format!(
                "{} payloads are in no affinity unit",
                payload_bytes.len() - covered.len()
            ),
        ));
    }
    Ok(())
}

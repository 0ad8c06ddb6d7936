//! Fixtures shared by the integration tests: a revision's group as the store reports it.

#![allow(dead_code)]

use crescent_weights::revision::{GroupMember, ObjectType, PayloadSummary};
use crescent_weights::{affinity_digest, payload_keys_sha256, AffinityUnit, RevisionIdentity};

pub struct Fixture {
    pub summary: PayloadSummary,
    pub members: Vec<GroupMember>,
    pub units: Vec<AffinityUnit>,
}

pub fn manifest_sha() -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"manifest body"))
}

/// The group of `id` with one unit per `(members, bytes per member)`; payload keys start with
/// `payload/` and unit ids with `unit-` (so tests can check metadata never stores them).
pub fn fixture(id: &RevisionIdentity, shape: &[(u64, u64)]) -> Fixture {
    let mut members = vec![GroupMember {
        key: id.manifest_key(),
        group_id: id.group_id(),
        object_type: ObjectType::Metadata,
        logical_bytes: 64,
        complete: true,
        memory_readable: true,
        hard_pinned: true,
        content_sha256: Some(manifest_sha()),
    }];
    let mut units = Vec::new();
    for (u, (count, each)) in shape.iter().enumerate() {
        let keys: Vec<String> = (0..*count)
            .map(|m| format!("payload/{}/u{u}/{m}", id.weight_generation))
            .collect();
        for key in &keys {
            members.push(GroupMember {
                key: key.clone(),
                group_id: id.group_id(),
                object_type: ObjectType::Weight,
                logical_bytes: *each,
                complete: true,
                memory_readable: true,
                hard_pinned: false,
                content_sha256: None,
            });
        }
        units.push(AffinityUnit {
            unit_id: format!("unit-{u}"),
            member_keys: keys,
            bytes: count * each,
        });
    }
    let keys: Vec<&str> = members[1..].iter().map(|m| m.key.as_str()).collect();
    let summary = PayloadSummary {
        manifest_sha256: manifest_sha(),
        payload_keys_sha256: payload_keys_sha256(&keys),
        payload_count: keys.len() as u64,
        logical_bytes: members[1..].iter().map(|m| m.logical_bytes).sum(),
        affinity_count: units.len() as u64,
        affinity_digest: affinity_digest(&units),
    };
    Fixture {
        summary,
        members,
        units,
    }
}

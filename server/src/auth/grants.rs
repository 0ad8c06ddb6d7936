//! Data-plane grants minted by crescentd (docs/security.md, "The data plane").
//!
//! With `[auth]`, every replica range a put_start or get answers carries a grant for its
//! operation, and every owner gets its grant key when it registers and with each heartbeat.
//! The owner keys are derived from the signing secret, so both nodes of a pair mint grants
//! every owner accepts, and a failover changes nothing for the data plane.

use std::collections::HashMap;
use std::sync::Mutex;

use crescent_transport::grant::{GrantKey, SUBJECT_LEN};
use crescent_transport::{Grant, TransferOp};
use crescent_wire::store::ReplicaDesc;

/// Owner keys kept derived (more owners than this: the cache starts over).
const MAX_CACHED_KEYS: usize = 4096;

pub struct DataGrants {
    secret: Vec<u8>,
    ttl_ms: u64,
    keys: Mutex<HashMap<String, GrantKey>>,
}

impl std::fmt::Debug for DataGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataGrants")
            .field("ttl_ms", &self.ttl_ms)
            .finish_non_exhaustive()
    }
}

impl DataGrants {
    /// Grants signed under `secret` (the signing key's bytes), valid `ttl_ms` after minting.
    pub fn new(secret: &[u8], ttl_ms: u64) -> Self {
        Self {
            secret: secret.to_vec(),
            ttl_ms,
            keys: Mutex::default(),
        }
    }

    /// The grant key of `owner_id`.
    pub fn owner_key(&self, owner_id: &str) -> GrantKey {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = keys.get(owner_id) {
            return k.clone();
        }
        if keys.len() >= MAX_CACHED_KEYS {
            keys.clear();
        }
        let key = GrantKey::derive(&self.secret, owner_id);
        keys.insert(owner_id.to_string(), key.clone());
        key
    }

    /// A grant for `op` on `[offset, offset+length)` of `segment_id` (owned by `owner_id`).
    #[allow(clippy::too_many_arguments)]
    pub fn mint(
        &self,
        owner_id: &str,
        segment_id: &str,
        op: TransferOp,
        offset: u64,
        length: u64,
        now_ms: i64,
        subject: [u8; SUBJECT_LEN],
    ) -> Grant {
        let expires = (now_ms.max(0) as u64).saturating_add(self.ttl_ms);
        self.owner_key(owner_id)
            .mint(segment_id, op, offset, length, expires, subject)
    }

    /// Attaches a grant for `op` to each replica (its whole range).
    pub fn grant_replicas(
        &self,
        replicas: &mut [ReplicaDesc],
        op: TransferOp,
        now_ms: i64,
        subject: [u8; SUBJECT_LEN],
    ) {
        for r in replicas {
            let g = self.mint(
                &r.owner_id,
                &r.segment_id,
                op,
                r.offset,
                r.length,
                now_ms,
                subject,
            );
            r.grant = Some(g.encode().to_vec());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_transport::grant::put_subject;
    use crescent_transport::GrantKeys;
    use crescent_wire::segments::TransportKind;
    use crescent_wire::store::ObjectId;
    use crescent_wire::store::ReplicaState;

    #[test]
    fn granted_replicas_verify_with_their_owners_key_only() {
        let grants = DataGrants::new(&[5u8; 32], 1_000);
        let mut replicas = vec![
            ReplicaDesc {
                segment_id: "a/seg0".into(),
                owner_id: "a".into(),
                endpoint: Some("127.0.0.1:1".into()),
                transport: TransportKind::Tcp,
                offset: 64,
                length: 10,
                state: ReplicaState::Processing,
                grant: None,
            };
            2
        ];
        replicas[1].owner_id = "b".into();
        replicas[1].segment_id = "b/seg0".into();
        let id = ObjectId::scoped(Some("t"), None, "k");
        grants.grant_replicas(&mut replicas, TransferOp::Write, 5_000, put_subject(&id, 9));
        let a = GrantKeys::single(grants.owner_key("a"));
        let b = GrantKeys::single(grants.owner_key("b"));
        let g0 = Grant::decode(replicas[0].grant.as_deref().unwrap()).unwrap();
        let g1 = Grant::decode(replicas[1].grant.as_deref().unwrap()).unwrap();
        assert_eq!(g0.expires_at_ms, 6_000);
        assert_eq!(
            a.verify("a/seg0", TransferOp::Write, 64, 10, 6_000, &g0),
            Ok(())
        );
        assert!(b
            .verify("a/seg0", TransferOp::Write, 64, 10, 0, &g0)
            .is_err());
        assert_eq!(
            b.verify("b/seg0", TransferOp::Write, 64, 10, 0, &g1),
            Ok(())
        );
        assert_eq!(
            a.verify_notice("a/seg0", 64, 10, &put_subject(&id, 9), &g0),
            Ok(())
        );
        // Another secret (the other node of a pair with another key file) mints grants no
        // owner of this one accepts.
        let other = DataGrants::new(&[6u8; 32], 1_000);
        assert_ne!(other.owner_key("a"), grants.owner_key("a"));
    }
}

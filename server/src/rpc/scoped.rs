//! What an RPC request body names, read from its decoded type: the tenant of each object it
//! selects, or the owner id of an owner operation. The HTTP guard reads the same fields from
//! the undecoded body (`crate::api::auth_target`); the tests below hold the two to the same
//! answer for every op's request type. The compact bodies name their one tenant without a
//! `key` beside it, which is why the fast path scopes the typed request.

use crescent_wire::rpc_compact::{
    CompactKeysRequest, CompactPutEndRequest, CompactPutStartRequest,
};
use crescent_wire::store::{
    BatchRequest, GetRequest, HeartbeatRequest, ObjectId, ObjectRequest, PutEndRequest,
    PutStartRequest, ReleaseRequest, RemoveRequest,
};

/// A request body whose tenants (or owner id) the fast path checks before running it.
pub(crate) trait Scoped {
    /// Calls `f` on every tenant field of an object selector (absent: `None`), in order.
    fn tenants(&mut self, f: &mut dyn FnMut(&mut Option<String>));

    /// The owner id an owner operation names.
    fn owner_id(&self) -> Option<&str> {
        None
    }
}

impl Scoped for ObjectId {
    fn tenants(&mut self, f: &mut dyn FnMut(&mut Option<String>)) {
        f(&mut self.tenant)
    }
}

/// Request types whose one selector is their `id`.
macro_rules! scoped_by_id {
    ($($t:ty),*) => {$(
        impl Scoped for $t {
            fn tenants(&mut self, f: &mut dyn FnMut(&mut Option<String>)) {
                self.id.tenants(f)
            }
        }
    )*};
}

scoped_by_id!(
    PutStartRequest,
    PutEndRequest,
    ObjectRequest,
    GetRequest,
    RemoveRequest,
    ReleaseRequest
);

/// Compact bodies: one tenant for every item.
macro_rules! scoped_by_tenant {
    ($($t:ty),*) => {$(
        impl Scoped for $t {
            fn tenants(&mut self, f: &mut dyn FnMut(&mut Option<String>)) {
                f(&mut self.tenant)
            }
        }
    )*};
}

scoped_by_tenant!(
    CompactKeysRequest,
    CompactPutStartRequest,
    CompactPutEndRequest
);

impl<T: Scoped> Scoped for BatchRequest<T> {
    fn tenants(&mut self, f: &mut dyn FnMut(&mut Option<String>)) {
        for item in &mut self.items {
            item.tenants(f);
        }
    }
}

impl Scoped for HeartbeatRequest {
    fn tenants(&mut self, _: &mut dyn FnMut(&mut Option<String>)) {}

    fn owner_id(&self) -> Option<&str> {
        Some(&self.owner_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::auth_target::Body;
    use crate::api::wire::Format;
    use serde::de::DeserializeOwned;
    use serde::Serialize;

    fn named<T: Scoped>(req: &mut T) -> Vec<String> {
        let mut out = Vec::new();
        req.tenants(&mut |t| out.extend(t.clone()));
        out
    }

    fn fill<T: Scoped>(req: &mut T, tenant: &str) {
        req.tenants(&mut |t| {
            t.get_or_insert_with(|| tenant.to_string());
        });
    }

    /// The HTTP guard's reading of `req`'s msgpack body and the typed one agree: the same
    /// named tenants, and filling the unnamed ones gives the same request.
    fn agree<T>(mut req: T)
    where
        T: Scoped + Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let bytes = rmp_serde::to_vec_named(&req).unwrap();
        let mut body = Body::decode(Format::Msgpack, &bytes).unwrap();
        let mut http_named = body.named_tenants();
        let mut typed_named = named(&mut req);
        http_named.sort();
        typed_named.sort();
        assert_eq!(http_named, typed_named, "{req:?}");
        body.fill_tenant("own");
        let http_filled: T = rmp_serde::from_slice(&body.encode()).unwrap();
        fill(&mut req, "own");
        assert_eq!(http_filled, req);
    }

    fn ids() -> [ObjectId; 2] {
        [
            ObjectId::new("a"),
            ObjectId::scoped(Some("t2"), Some("d"), "b"),
        ]
    }

    #[test]
    fn every_classic_request_type_is_scoped_as_the_http_guard_scopes_it() {
        for id in ids() {
            agree(ObjectRequest { id: id.clone() });
            agree(PutEndRequest {
                id: id.clone(),
                put_id: 3,
            });
            agree(RemoveRequest {
                id: id.clone(),
                force: true,
            });
            agree(GetRequest {
                id: id.clone(),
                accept_cold_backing: false,
                accept_staged: true,
            });
            agree(ReleaseRequest {
                id: id.clone(),
                put_id: 1,
                lease_until_ms: 2,
                staged_token: None,
            });
            let put: PutStartRequest = rmp_serde::from_slice(
                &rmp_serde::to_vec_named(&serde_json::json!({
                    "id": id, "size": 4096
                }))
                .unwrap(),
            )
            .unwrap();
            agree(put);
        }
        agree(BatchRequest {
            items: ids().map(|id| ObjectRequest { id }).to_vec(),
        });
        agree(BatchRequest {
            items: ids().map(|id| RemoveRequest { id, force: false }).to_vec(),
        });
    }

    #[test]
    fn compact_bodies_name_their_one_tenant_and_get_it_filled() {
        let mut keys = CompactKeysRequest {
            v: 1,
            tenant: None,
            domain: Some("d".into()),
            keys: vec!["a".into(), "b".into()],
        };
        assert!(named(&mut keys).is_empty());
        // The HTTP guard's walker would not see a selector here (no `key` field): the typed
        // scoping is what fills it.
        fill(&mut keys, "own");
        assert_eq!(keys.tenant.as_deref(), Some("own"));
        assert_eq!(keys.id("a").tenant(), "own");
        let mut end = CompactPutEndRequest {
            v: 1,
            tenant: Some("t2".into()),
            domain: None,
            items: vec![],
        };
        assert_eq!(named(&mut end), vec!["t2".to_string()]);
    }

    #[test]
    fn a_heartbeat_names_its_owner_and_no_tenant() {
        let mut hb = HeartbeatRequest {
            owner_id: "o1".into(),
            incarnation: 1,
            releases_applied: None,
        };
        assert!(named(&mut hb).is_empty());
        assert_eq!(hb.owner_id(), Some("o1"));
        let bytes = rmp_serde::to_vec_named(&hb).unwrap();
        let body = Body::decode(Format::Msgpack, &bytes).unwrap();
        assert_eq!(body.owner_id().as_deref(), hb.owner_id());
    }
}

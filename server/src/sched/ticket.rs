//! What a waiting store request is charged against its tenant's turn: its tenant (that of its
//! first object, the default tenant when it names none), its items (a batch's length, else 1)
//! and its bytes (the sizes a put_start announces). Computed only when the request has to
//! wait (docs/tenants.md, "Soft isolation").

use crescent_sched::Cost;
use crescent_wire::rpc::RpcOp;
use crescent_wire::store::DEFAULT_TENANT;
use rmpv::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub tenant: String,
    pub cost: Cost,
}

impl Ticket {
    fn new(tenant: Option<String>, items: u64, bytes: u64) -> Self {
        Self {
            tenant: tenant.unwrap_or_else(|| DEFAULT_TENANT.to_string()),
            cost: Cost::new(items, bytes),
        }
    }

    /// The ticket of a decoded request (`items`, `bytes` given by its route) whose tenants
    /// `tenants` walks (`crate::rpc::scoped::Scoped::tenants`).
    pub(crate) fn of_typed(
        tenants: impl FnOnce(&mut dyn FnMut(&mut Option<String>)),
        items: u64,
        bytes: u64,
    ) -> Self {
        let mut first = None;
        tenants(&mut |t| {
            if first.is_none() {
                first = t.clone();
            }
        });
        Self::new(first, items, bytes)
    }

    /// The ticket of an undecoded RPC body (msgpack, fields by name). `own_tenant` is the
    /// tenant of a client credential, which a body naming none acts in.
    pub fn of_rpc(op: RpcOp, body: &[u8], own_tenant: Option<&str>) -> Self {
        let value = rmpv::decode::read_value(&mut &body[..]).unwrap_or(Value::Nil);
        let items = list(&value, "items")
            .or_else(|| list(&value, "keys"))
            .map_or(1, |l| l.len() as u64);
        let tenant = tenant_of(&value).or_else(|| own_tenant.map(str::to_string));
        Self::new(tenant, items, put_bytes(op, &value))
    }
}

fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(name))
        .map(|(_, v)| v)
}

fn list<'a>(v: &'a Value, name: &str) -> Option<&'a Vec<Value>> {
    field(v, name)?.as_array()
}

fn tenant_in(v: &Value) -> Option<String> {
    let direct = field(v, "tenant").and_then(Value::as_str);
    let by_id = || field(field(v, "id")?, "tenant")?.as_str();
    direct.or_else(by_id).map(str::to_string)
}

/// The top-level tenant (compact bodies), the id's, or the first item's.
fn tenant_of(v: &Value) -> Option<String> {
    tenant_in(v).or_else(|| tenant_in(list(v, "items")?.first()?))
}

/// The bytes a put_start announces: `size` of the request or of each item, or the second
/// field of each compact item (`[key, size, checksum]`).
fn put_bytes(op: RpcOp, v: &Value) -> u64 {
    let size = |item: &Value| {
        field(item, "size")
            .or_else(|| item.as_array()?.get(1))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    match op {
        RpcOp::PutStart => size(v),
        RpcOp::BatchPutStart | RpcOp::BatchPutStartCompact => list(v, "items").map_or(0, |items| {
            items.iter().map(size).fold(0, u64::saturating_add)
        }),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_wire::store::{BatchRequest, ObjectId, PutStartRequest};

    fn named<T: serde::Serialize>(v: &T) -> Vec<u8> {
        rmp_serde::to_vec_named(v).unwrap()
    }

    fn put(tenant: Option<&str>, size: u64) -> PutStartRequest {
        let mut id = ObjectId::new("k");
        id.tenant = tenant.map(str::to_string);
        PutStartRequest {
            id,
            size,
            ..serde_json::from_value(serde_json::json!({"id": {"key": "k"}, "size": 0})).unwrap()
        }
    }

    #[test]
    fn rpc_bodies_are_charged_their_tenant_items_and_bytes() {
        let one = named(&put(Some("a"), 7));
        assert_eq!(
            Ticket::of_rpc(RpcOp::PutStart, &one, None),
            Ticket::new(Some("a".into()), 1, 7)
        );
        let batch = named(&BatchRequest {
            items: vec![put(None, 3), put(None, 4)],
        });
        assert_eq!(
            Ticket::of_rpc(RpcOp::BatchPutStart, &batch, Some("own")),
            Ticket::new(Some("own".into()), 2, 7)
        );
        assert_eq!(
            Ticket::of_rpc(RpcOp::Get, b"\xc1", None),
            Ticket::new(None, 1, 0)
        );
    }

    #[test]
    fn typed_requests_are_charged_their_first_tenant() {
        let batch = [Some("b"), Some("c")];
        let walk = |f: &mut dyn FnMut(&mut Option<String>)| {
            for t in batch {
                f(&mut t.map(str::to_string));
            }
        };
        assert_eq!(
            Ticket::of_typed(walk, 2, 7),
            Ticket::new(Some("b".into()), 2, 7)
        );
    }
}

//! What a request body names (tenant, owner id), and scoping a client's body to its tenant.
//!
//! Bodies are msgpack maps or JSON objects (crate::api::wire). A map is an object selector when
//! it has a `key`, `prefix` or `tenant` field (`ObjectId`, list and remove-by-prefix requests,
//! at any depth, batches included). For a `client`, every selector must name the token's
//! tenant or none; those naming none get it filled in, so the request acts in that tenant.

use crate::api::wire::Format;

const SELECTOR_FIELDS: [&str; 3] = ["key", "prefix", "tenant"];

/// A decoded body that can be inspected and scoped.
pub enum Body {
    Json(serde_json::Value),
    Msgpack(rmpv::Value),
}

impl Body {
    /// Decodes `bytes`; `None` when they are not a document of `format` (the handler then
    /// reports the bad body as usual).
    pub fn decode(format: Format, bytes: &[u8]) -> Option<Body> {
        match format {
            Format::Json => serde_json::from_slice(bytes).ok().map(Body::Json),
            Format::Msgpack => rmpv::decode::read_value(&mut &bytes[..])
                .ok()
                .map(Body::Msgpack),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        match self {
            Body::Json(v) => serde_json::to_vec(v).expect("a JSON value serializes"),
            Body::Msgpack(v) => {
                let mut out = Vec::new();
                rmpv::encode::write_value(&mut out, v).expect("writing to a Vec cannot fail");
                out
            }
        }
    }

    /// The top-level `owner_id` string, if any.
    pub fn owner_id(&self) -> Option<String> {
        self.string_field("owner_id")
    }

    /// A top-level string field, if any.
    pub fn string_field(&self, name: &str) -> Option<String> {
        match self {
            Body::Json(v) => v.get(name)?.as_str().map(str::to_string),
            Body::Msgpack(rmpv::Value::Map(m)) => {
                msgpack_field(m, name)?.as_str().map(str::to_string)
            }
            Body::Msgpack(_) => None,
        }
    }

    /// Every tenant named by a selector.
    pub fn named_tenants(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self {
            Body::Json(v) => json_tenants(v, &mut out),
            Body::Msgpack(v) => msgpack_tenants(v, &mut out),
        }
        out
    }

    /// Fills `tenant` into every selector naming none; true if anything changed.
    pub fn fill_tenant(&mut self, tenant: &str) -> bool {
        match self {
            Body::Json(v) => json_fill(v, tenant),
            Body::Msgpack(v) => msgpack_fill(v, tenant),
        }
    }
}

fn json_is_selector(m: &serde_json::Map<String, serde_json::Value>) -> bool {
    SELECTOR_FIELDS.iter().any(|f| m.contains_key(*f))
}

fn json_tenants(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            if let Some(t) = m.get("tenant").and_then(|t| t.as_str()) {
                out.push(t.to_string());
            }
            m.values().for_each(|c| json_tenants(c, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|c| json_tenants(c, out)),
        _ => {}
    }
}

fn json_fill(v: &mut serde_json::Value, tenant: &str) -> bool {
    match v {
        serde_json::Value::Object(m) => {
            let mut changed = false;
            if json_is_selector(m) && m.get("tenant").is_none_or(|t| t.is_null()) {
                m.insert("tenant".into(), tenant.into());
                changed = true;
            }
            for c in m.values_mut() {
                changed |= json_fill(c, tenant);
            }
            changed
        }
        serde_json::Value::Array(a) => a.iter_mut().fold(false, |ch, c| json_fill(c, tenant) | ch),
        _ => false,
    }
}

fn msgpack_field<'a>(m: &'a [(rmpv::Value, rmpv::Value)], name: &str) -> Option<&'a rmpv::Value> {
    m.iter()
        .find(|(k, _)| k.as_str() == Some(name))
        .map(|(_, v)| v)
}

fn msgpack_tenants(v: &rmpv::Value, out: &mut Vec<String>) {
    match v {
        rmpv::Value::Map(m) => {
            if let Some(t) = msgpack_field(m, "tenant").and_then(|t| t.as_str()) {
                out.push(t.to_string());
            }
            m.iter().for_each(|(_, c)| msgpack_tenants(c, out));
        }
        rmpv::Value::Array(a) => a.iter().for_each(|c| msgpack_tenants(c, out)),
        _ => {}
    }
}

fn msgpack_fill(v: &mut rmpv::Value, tenant: &str) -> bool {
    match v {
        rmpv::Value::Map(m) => {
            let mut changed = false;
            let selector = SELECTOR_FIELDS
                .iter()
                .any(|f| msgpack_field(m, f).is_some());
            if selector && msgpack_field(m, "tenant").is_none_or(|t| t.is_nil()) {
                m.retain(|(k, _)| k.as_str() != Some("tenant"));
                m.push(("tenant".into(), tenant.into()));
                changed = true;
            }
            for (_, c) in m.iter_mut() {
                changed |= msgpack_fill(c, tenant);
            }
            changed
        }
        rmpv::Value::Array(a) => a
            .iter_mut()
            .fold(false, |ch, c| msgpack_fill(c, tenant) | ch),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_wire::store::{ListRequest, ObjectId};

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Batch {
        ids: Vec<ObjectId>,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    }

    #[test]
    fn msgpack_selectors_are_found_and_filled_keeping_binary_fields() {
        let batch = Batch {
            ids: vec![ObjectId::new("a"), ObjectId::scoped(Some("t2"), None, "b")],
            data: vec![1, 2, 3],
        };
        let bytes = rmp_serde::to_vec_named(&batch).unwrap();
        let mut body = Body::decode(Format::Msgpack, &bytes).unwrap();
        assert_eq!(body.named_tenants(), vec!["t2".to_string()]);
        assert!(body.fill_tenant("t1"));
        let back: Batch = rmp_serde::from_slice(&body.encode()).unwrap();
        assert_eq!(back.ids[0].tenant.as_deref(), Some("t1"));
        assert_eq!(back.ids[1].tenant.as_deref(), Some("t2"));
        assert_eq!(back.data, vec![1, 2, 3]);
    }

    #[test]
    fn json_list_requests_get_the_tenant_and_owner_ids_are_read() {
        let bytes = br#"{"prefix":"p","limit":5}"#;
        let mut body = Body::decode(Format::Json, bytes).unwrap();
        assert!(body.named_tenants().is_empty());
        assert!(body.fill_tenant("t1"));
        let list: ListRequest = serde_json::from_slice(&body.encode()).unwrap();
        assert_eq!(list.tenant.as_deref(), Some("t1"));
        let owner = Body::decode(Format::Json, br#"{"owner_id":"o1","term":1}"#).unwrap();
        assert_eq!(owner.owner_id().as_deref(), Some("o1"));
        let packed = rmp_serde::to_vec_named(&serde_json::json!({"owner_id": "o2"})).unwrap();
        let owner = Body::decode(Format::Msgpack, &packed).unwrap();
        assert_eq!(owner.owner_id().as_deref(), Some("o2"));
        assert!(Body::decode(Format::Json, b"{").is_none());
    }
}

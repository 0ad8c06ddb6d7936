//! The same key in two tenants, and in two domains of one tenant, holds independent values;
//! list, exist, remove and get never cross scopes.

mod common;

use common::*;
use crescent_wire::store::{ListRequest, RemovePrefixRequest};

fn list(
    d: &crescent_store::ObjectDirectory,
    t: Option<&str>,
    dom: Option<&str>,
) -> Vec<(String, u64)> {
    d.list(&ListRequest {
        tenant: t.map(Into::into),
        domain: dom.map(Into::into),
        prefix: String::new(),
        after: None,
        limit: Some(1000),
    })
    .unwrap()
    .keys
    .into_iter()
    .map(|e| (e.key, e.size))
    .collect()
}

#[test]
fn scopes_hold_independent_values_and_never_cross() {
    let d = dir();
    mount(&d, "s1", "o1", 1 << 20);
    let scopes: [(Option<&str>, Option<&str>, u64); 5] = [
        (None, None, 10),                // default tenant
        (Some("alpha"), None, 20),       // tenant alpha
        (Some("beta"), None, 30),        // tenant beta
        (Some("alpha"), Some("d1"), 40), // domain d1 of alpha
        (Some("alpha"), Some("d2"), 50), // domain d2 of alpha
    ];
    for (t, dom, size) in scopes {
        put(&d, id(t, dom, "shared"), size, T0);
    }
    // `Some("default")` is the default tenant itself.
    assert_eq!(
        d.get_size(&id(Some("default"), None, "shared")).unwrap(),
        10
    );
    for (t, dom, size) in scopes {
        assert_eq!(d.get(&id(t, dom, "shared"), T0).unwrap().size, size);
        assert_eq!(d.get_size(&id(t, dom, "shared")).unwrap(), size);
        assert_eq!(list(&d, t, dom), vec![("shared".to_string(), size)]);
    }
    // A key only in one scope is invisible to the others.
    put(&d, id(Some("alpha"), Some("d1"), "only-d1"), 1, T0);
    assert!(d
        .exist(&id(Some("alpha"), Some("d1"), "only-d1"), T0)
        .unwrap());
    for (t, dom) in [
        (None, None),
        (Some("alpha"), None),
        (Some("beta"), None),
        (Some("alpha"), Some("d2")),
        (Some("beta"), Some("d1")),
    ] {
        assert!(!d.exist(&id(t, dom, "only-d1"), T0).unwrap());
        assert_eq!(
            d.get(&id(t, dom, "only-d1"), T0).unwrap_err().code(),
            "NOT_FOUND"
        );
        assert_eq!(
            d.remove(&id(t, dom, "only-d1"), true, T0)
                .unwrap_err()
                .code(),
            "NOT_FOUND"
        );
        assert!(!list(&d, t, dom).iter().any(|(k, _)| k == "only-d1"));
    }
    // Removing in one scope leaves the others.
    d.remove(&id(Some("alpha"), None, "shared"), true, T0)
        .unwrap();
    assert!(!d.exist(&id(Some("alpha"), None, "shared"), T0).unwrap());
    for (t, dom, size) in scopes
        .iter()
        .filter(|s| !(s.0 == Some("alpha") && s.1.is_none()))
    {
        assert_eq!(d.get_size(&id(*t, *dom, "shared")).unwrap(), *size);
    }
    // Remove by prefix is scoped too.
    let r = d
        .remove_prefix(
            &RemovePrefixRequest {
                tenant: Some("beta".into()),
                domain: None,
                prefix: "sh".into(),
            },
            T0 + 20_000,
        )
        .unwrap();
    assert_eq!((r.removed, r.skipped), (1, 0));
    assert!(d
        .exist(&id(Some("alpha"), Some("d1"), "shared"), T0)
        .unwrap());
    assert!(d.exist(&id(None, None, "shared"), T0).unwrap());
    // A tenant that never put anything lists nothing and does not get interned by reads.
    let before = d.stats().scopes;
    assert!(list(&d, Some("ghost"), None).is_empty());
    assert!(!d.exist(&id(Some("ghost"), None, "shared"), T0).unwrap());
    assert_eq!(d.stats().scopes, before);
}

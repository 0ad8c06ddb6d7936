//! scan: every object of every tenant and domain, once, page by page; removals between pages
//! neither repeat nor skip the others (docs/api.md, "Scanning every object").

mod common;

use std::collections::BTreeSet;

use common::*;
use crescent_store::StoreConfig;
use crescent_wire::scan::{ScanRequest, MAX_SCAN_PAGE};

type Identity = (String, Option<String>, String);

/// Every page of a scan, removing every third object seen (as a drain does) when `remove`.
fn scan_all(d: &crescent_store::ObjectDirectory, limit: u32, remove: bool) -> Vec<Identity> {
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = d.scan(&ScanRequest::page(cursor, Some(limit))).unwrap();
        assert!(page.objects.len() <= limit as usize);
        for (i, o) in page.objects.iter().enumerate() {
            assert!(o.complete && o.size == 64, "{o:?}");
            if remove && i % 3 == 0 {
                let gone = id(Some(&o.tenant), o.domain.as_deref(), &o.key);
                d.remove(&gone, false, T0).unwrap();
            }
            seen.push((o.tenant.clone(), o.domain.clone(), o.key.clone()));
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return seen,
        }
    }
}

#[test]
fn a_scan_sees_every_object_of_every_scope_once() {
    let d = dir_with(StoreConfig {
        shards: 5,
        ..Default::default()
    });
    mount(&d, "s1", "o1", 1 << 24);
    let mut all = BTreeSet::new();
    for (t, dom) in [(None, None), (Some("t1"), None), (Some("t1"), Some("d"))] {
        for i in 0..40 {
            let key = format!("k{i:03}");
            put(&d, id(t, dom, &key), 64, T0);
            let tenant = t.unwrap_or("default").to_string();
            all.insert((tenant, dom.map(str::to_string), key));
        }
    }
    for limit in [1, 7, 120, MAX_SCAN_PAGE] {
        let seen = scan_all(&d, limit, false);
        assert_eq!(seen.len(), all.len(), "limit {limit}: no repeats");
        assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), all);
    }
    let seen = scan_all(&d, 9, true);
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), all);
    assert!(scan_all(&d, 9, false).len() < all.len());
}

#[test]
fn a_bad_page_size_or_version_is_refused() {
    let d = dir();
    for limit in [0, MAX_SCAN_PAGE + 1] {
        let e = d.scan(&ScanRequest::page(None, Some(limit))).unwrap_err();
        assert_eq!(e.code(), "INVALID_ARGUMENT");
    }
    let mut req = ScanRequest::page(None, None);
    req.version = 2;
    assert_eq!(d.scan(&req).unwrap_err().code(), "INVALID_ARGUMENT");
    let empty = d.scan(&ScanRequest::page(None, None)).unwrap();
    assert!(empty.objects.is_empty() && empty.next.is_none());
}

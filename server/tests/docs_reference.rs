//! The references in docs/ match the code: every configuration key crescentd reads is in
//! docs/configuration.md and every key listed there is one crescentd reads; every HTTP route
//! the app serves is in docs/api.md and every route listed there is served; docs/metrics.md is
//! exactly what the source defines (regenerate it with `CRESCENT_BLESS=1 cargo test -p
//! crescent-server --test docs_reference`).

mod common;
mod docs_reference_support;

use std::collections::BTreeSet;
use std::path::Path;

use actix_web::test as web_test;
use crescent_server::config::Config;
use docs_reference_support::*;

/// A configuration with every optional key set, so that serializing it names every key.
const EVERY_OPTIONAL_KEY: &str = r#"
[auth]
secret_file = "/k"
[tls]
cert_file = "/c"
key_file = "/k"
ca_file = "/a"
[store]
transfer_advertise = "127.0.0.1:1"
[cold]
root = "/r"
[[cold.devices]]
id = "d"
root = "/d"
[[tenants]]
name = "t"
max_bytes = 1
max_objects = 1
"#;

#[test]
fn every_configuration_key_is_documented_and_every_documented_key_exists() {
    let config = Config::from_toml(Path::new("x.toml"), EVERY_OPTIONAL_KEY).unwrap();
    let mut in_code = BTreeSet::new();
    flatten_keys("", &serde_json::to_value(&config).unwrap(), &mut in_code);
    let documented = documented_config_keys(&read_doc("configuration.md"));
    let undocumented: Vec<_> = in_code.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "keys crescentd reads that docs/configuration.md does not list: {undocumented:?}"
    );
    let unknown: Vec<_> = documented
        .iter()
        .filter(|key| !in_code.contains(*key) && !config_accepts(key))
        .collect();
    assert!(
        unknown.is_empty(),
        "keys docs/configuration.md lists that crescentd refuses as unknown: {unknown:?}"
    );
}

/// Whether crescentd's config parser knows `key` (a value of the wrong type is refused as
/// such, not as an unknown field).
fn config_accepts(key: &str) -> bool {
    let (table, field) = key.rsplit_once('.').unwrap_or(("", key));
    let text = if table.is_empty() {
        format!("{field} = \"?\"\n")
    } else {
        format!("[{table}]\n{field} = \"?\"\n")
    };
    match Config::from_toml(Path::new("x.toml"), &text) {
        Ok(_) => true,
        Err(e) => !e.to_string().contains("unknown field"),
    }
}

#[actix_web::test]
async fn every_route_is_documented_and_every_documented_route_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start(&common::open_config(dir.path()));
    let app = common::app_for(&node).await;
    let documented = documented_routes(&read_doc("api.md"));
    let mut not_served = Vec::new();
    for route in &documented {
        if !serves(&app, route).await {
            not_served.push(route.clone());
        }
    }
    assert!(
        not_served.is_empty(),
        "routes docs/api.md lists that crescentd does not serve: {not_served:?}"
    );
    let mut undocumented = Vec::new();
    for route in candidate_routes() {
        if serves(&app, &route).await && !documented.contains(&route) {
            undocumented.push(route);
        }
    }
    assert!(
        undocumented.is_empty(),
        "routes crescentd serves that docs/api.md does not list: {undocumented:?}"
    );
}

/// Whether the app routes `route` to a handler: an unmatched path is answered 404 with an
/// empty body and a wrong method 405, while a handler answers a bodiless request with its
/// own error (400, 401, 415, ...) or a success.
async fn serves(app: &common::TestApp<impl common::TestService>, route: &Route) -> bool {
    let path = route.path.replace("{key}", "k");
    let req = match route.method.as_str() {
        "GET" => web_test::TestRequest::get(),
        "POST" => web_test::TestRequest::post(),
        other => panic!("unexpected method {other}"),
    }
    .uri(&path);
    let res = app.call(req, None).await;
    let status = res.status().as_u16();
    let body = web_test::read_body(res).await;
    !(status == 405 || (status == 404 && body.is_empty()))
}

#[test]
fn the_metrics_reference_is_generated_from_the_source() {
    let metrics = metric_definitions(&workspace_root());
    assert!(
        metrics.len() > 100,
        "found only {} metric definitions",
        metrics.len()
    );
    let generated = render_metrics_reference(&metrics);
    let path = workspace_root().join("docs/metrics.md");
    if std::env::var_os("CRESCENT_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/metrics.md differs from the metrics the source defines; regenerate it with \
         CRESCENT_BLESS=1 cargo test -p crescent-server --test docs_reference"
    );
}

/// Old metric names docs/operations.md lists beside their new ones ("Metric names").
const RENAMED_METRICS: [&str; 3] = [
    "crescent_store_bytes_used",
    "crescent_store_bytes_capacity",
    "crescent_snapshot_bytes_written_total",
];

#[test]
fn metric_names_in_the_docs_exist() {
    let defined: BTreeSet<String> = metric_definitions(&workspace_root())
        .into_iter()
        .map(|m| m.name)
        .collect();
    for old in RENAMED_METRICS {
        assert!(
            !defined.contains(old),
            "{old} is listed as renamed but still defined"
        );
    }
    let mut stale = Vec::new();
    for doc in doc_files() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for name in mentioned_metric_names(&text) {
            if !defined.contains(&name) && !RENAMED_METRICS.contains(&name.as_str()) {
                stale.push(format!("{}: {name}", doc.display()));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "metric names in docs/ that no code defines: {stale:?}"
    );
}

//! The Grafana dashboard and the Prometheus alert rules in packaging/ use only metrics that
//! crescentd exports (docs/operations.md, "Dashboard and alerts"): every metric name they
//! mention is a family in a node's `/metrics` after it served a little of everything.

mod common;

use std::collections::BTreeSet;

use common::rpc::{Rpc, MAX_BODY};
use common::*;
use crescent_server::node::Node;
use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{ExistReply, ObjectId, ObjectRequest};
use serde_json::json;

const DASHBOARD: &str = include_str!("../../packaging/grafana/crescent-dashboard.json");
const ALERTS: &str = include_str!("../../packaging/prometheus/crescent-alerts.yml");

/// Metric names in `text`: identifiers starting `crescent_` or `process_`, with a
/// histogram's `_bucket`, `_sum` and `_count` series named by their family.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("crescent_") || w.starts_with("process_"))
        .map(|w| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| w.strip_suffix(s))
                .unwrap_or(w)
                .to_string()
        })
        .collect()
}

/// The families a scrape lists (`# TYPE name kind`).
fn families(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[actix_web::test]
async fn the_dashboard_and_the_alerts_name_only_exported_metrics() {
    let t = tempfile::tempdir().unwrap();
    // With the cold tier on (crescentd's own device), whose families only it registers.
    let mut c = config(t.path());
    c.cold.enabled = true;
    c.cold.root = Some(t.path().join("cold"));
    c.cold.capacity_bytes = 1 << 20;
    let node = start(&c);
    crescent_server::cold::start_node(&node.cold_context, &c)
        .await
        .expect("cold tier starts");
    let app = app_for(&node).await;
    owner_with_segment(&app, "o1", "seg1", 1 << 20).await;
    // A little of everything, so that labelled families have a series: a quota and a put in
    // its tenant, a refused request, an RPC.
    let (s, b) = post(
        &app,
        crescent_wire::tenants::routes::QUOTA_SET,
        json!({"tenant": "acme", "max_bytes": 1000}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    put(&app, json!({"key": "k", "tenant": "acme"}), 10).await;
    let (s, _) = post_as(&app, "/v1/objects/exist", json!({"id": {"key": "k"}}), None).await;
    assert_eq!(s, 401);
    let addr = node
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let mut rpc = Rpc::connect(addr, node.client_token("acme").as_deref()).await;
    let exists: ExistReply = rpc
        .call(
            RpcOp::Exist,
            &ObjectRequest {
                id: ObjectId::new("k"),
            },
        )
        .await
        .unwrap();
    assert!(exists.exists);

    let exported = families(&get_text(&app, "/metrics").await);
    let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("dashboard JSON");
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().expect("targets").clone())
        .map(|t| t["expr"].as_str().expect("expr").to_string())
        .collect();
    let used = metric_names(&exprs.join("\n"));
    assert!(
        used.len() >= 20,
        "the dashboard reads the main families: {used:?}"
    );
    let alerted = metric_names(ALERTS);
    assert!(alerted.len() >= 10, "{alerted:?}");
    for (file, names) in [("dashboard", &used), ("alert rules", &alerted)] {
        let missing: Vec<_> = names.difference(&exported).collect();
        assert!(
            missing.is_empty(),
            "the {file} names metrics crescentd does not export: {missing:?}"
        );
    }
    Node::stop(&node);
}

#[test]
fn names_are_read_like_prometheus_reads_them() {
    let names = metric_names("rate(crescent_x_bucket[5m]) / process_y{a=\"crescent\"}");
    assert_eq!(
        names,
        BTreeSet::from(["crescent_x".into(), "process_y".into()])
    );
}

//! The HTTP API in-process: routes, both body formats, error codes, health and metrics.

mod common;

use actix_web::test;
use common::*;
use crescent_server::node::Node;
use serde_json::{json, Value};

#[actix_web::test]
async fn mount_list_unmount_round_trip_with_seqs() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    // every start journals its incarnation first
    let base = state.journal.last_seq();
    let app = app_for(&state).await;

    let (s, b) = post(
        &app,
        "/v1/segments/mount",
        json!({"owner_id": "a", "segment_id": "s1", "size": 4096}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["events"], json!(["owner_registered", "segment_mounted"]));
    assert_eq!(b["first_seq"], json!(base + 1));
    assert_eq!(b["last_seq"], json!(base + 2));

    // Identical repeat: idempotent, journals nothing.
    let (s, b) = post(
        &app,
        "/v1/segments/mount",
        json!({"owner_id": "a", "segment_id": "s1", "size": 4096}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(b["events"], json!([]));
    assert_eq!(state.journal.last_seq(), base + 2);

    let list = get_json(&app, "/v1/segments").await;
    assert_eq!(list["segments"][0]["segment_id"], "s1");
    assert_eq!(list["segments"][0]["size"], 4096);
    assert_eq!(list["owners"][0]["owner_id"], "a");

    let (s, b) = post(&app, "/v1/segments/unmount", json!({"segment_id": "s1"})).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["events"], json!(["segment_unmounted"]));
    Node::stop(&state);
}

#[actix_web::test]
async fn errors_have_stable_codes_and_store_nothing() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    // every start journals its incarnation first
    let base = state.journal.last_seq();
    let app = app_for(&state).await;
    let cases = [
        (
            "/v1/segments/mount",
            json!({"owner_id": "a"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "/v1/segments/mount",
            json!({"owner_id": "a", "segment_id": "s", "size": 0}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "/v1/segments/mount",
            json!({"owner_id": "", "segment_id": "s", "size": 1}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "/v1/segments/mount",
            json!({"owner_id": "a", "segment_id": "s", "size": "big"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            // Smaller than the object directory can allocate from: refused before journaling.
            "/v1/segments/mount",
            json!({"owner_id": "a", "segment_id": "s", "size": 8}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "/v1/segments/unmount",
            json!({"segment_id": "nope"}),
            404,
            "NOT_FOUND",
        ),
    ];
    for (path, body, status, code) in cases {
        let (s, b) = post(&app, path, body.clone()).await;
        assert_eq!(s, status, "{path} {body}: {b}");
        assert_eq!(b["code"], code, "{path} {body}: {b}");
        assert_eq!(b["retryable"], false);
    }
    assert_eq!(
        state.journal.last_seq(),
        base,
        "a refused request journals nothing"
    );

    // A conflicting re-mount after a good one.
    let (s, _) = post(
        &app,
        "/v1/segments/mount",
        json!({"owner_id": "a", "segment_id": "s", "size": 4096}),
    )
    .await;
    assert_eq!(s, 200);
    let (s, b) = post(
        &app,
        "/v1/segments/mount",
        json!({"owner_id": "a", "segment_id": "s", "size": 8192}),
    )
    .await;
    assert_eq!((s, b["code"].as_str()), (409, Some("CONFLICT")));
    assert_eq!(state.journal.last_seq(), base + 2);

    // Garbage bodies in both formats, and an unsupported content type.
    for (ct, body) in [
        ("application/json", &b"{not json"[..]),
        ("application/msgpack", &b"\xc1\xc1"[..]),
        ("text/plain", &b"hello"[..]),
    ] {
        let req = test::TestRequest::post()
            .uri("/v1/segments/mount")
            .insert_header(("content-type", ct))
            .set_payload(body.to_vec());
        let resp = app.call(req, app.admin_token()).await;
        assert_eq!(resp.status().as_u16(), 400, "{ct}");
        let b: Value = test::read_body_json(resp).await;
        assert_eq!(b["code"], "INVALID_ARGUMENT", "{ct}");
    }
    assert_eq!(state.journal.last_seq(), base + 2);
    Node::stop(&state);
}

#[actix_web::test]
async fn msgpack_in_msgpack_out() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    // every start journals its incarnation first
    let base = state.journal.last_seq();
    let app = app_for(&state).await;
    let body = json!({"owner_id": "a", "segment_id": "m", "size": 64});
    let token = app.token_for("/v1/segments/mount", &body);
    let req = test::TestRequest::post()
        .uri("/v1/segments/mount")
        .insert_header(("content-type", "application/msgpack"))
        .insert_header(("accept", "application/msgpack"))
        .set_payload(rmp_serde::to_vec_named(&body).unwrap());
    let resp = app.call(req, token).await;
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers().get("content-type").unwrap(),
        "application/msgpack"
    );
    let bytes = test::read_body(resp).await;
    let reply: crescent_wire::segments::CommandReply = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(reply.last_seq, Some(base + 2));
    Node::stop(&state);
}

#[actix_web::test]
async fn health_metrics_and_stats() {
    let t = tempfile::tempdir().unwrap();
    let state = start(&config(t.path()));
    // every start journals its incarnation first
    let base = state.journal.last_seq();
    let app = app_for(&state).await;
    let h = get_json(&app, "/healthz").await;
    assert_eq!(h["status"], "serving");
    assert_eq!(h["role"], "standalone");
    assert_eq!(h["gate"], "SERVING");
    // Public like /healthz: the harness sends no token for it.
    let r = get_json(&app, "/readyz").await;
    assert_eq!(
        r,
        json!({"ready": true, "role": "standalone", "gate": "SERVING"})
    );

    let _ = post(
        &app,
        "/v1/segments/mount",
        json!({"owner_id": "a", "segment_id": "x", "size": 4096}),
    )
    .await;
    let text = get_text(&app, "/metrics").await;
    for name in [
        "crescent_http_requests_total",
        "crescent_actor_commands_total",
        "crescent_journal_durable_seq",
        "crescent_up 1",
        "process_resident_memory_bytes",
        "process_open_fds",
        "crescent_build_info{version=",
    ] {
        assert!(text.contains(name), "missing {name} in\n{text}");
    }
    // The mount was acknowledged, so the commit watermark has passed it.
    let commit: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("crescent_commit_seq "))
        .unwrap_or_else(|| panic!("no crescent_commit_seq in\n{text}"))
        .parse()
        .unwrap();
    assert!(commit > base, "commit {commit} <= {base}");
    // Route patterns, never raw paths or ids, as labels.
    assert!(text.contains("route=\"/v1/segments/mount\""), "{text}");
    assert!(!text.contains("segment_id=\"x\""));

    let s = get_json(&app, "/stats").await;
    assert_eq!(s["journal"]["last_seq"], base + 2);
    assert_eq!(s["journal"]["backend"], "file");
    Node::stop(&state);
}

#[actix_web::test]
async fn state_survives_restart_through_journal_and_snapshot() {
    let t = tempfile::tempdir().unwrap();
    {
        let state = start(&config(t.path()));
        let app = app_for(&state).await;
        for i in 0..10 {
            let (s, b) = post(
                &app,
                "/v1/segments/mount",
                json!({"owner_id": format!("o{}", i % 3), "segment_id": format!("s{i}"), "size": 100 + i}),
            )
            .await;
            assert_eq!(s, 200, "{b}");
        }
        // Snapshot in the middle, then more events in the tail.
        let info = state.snapshot_now().await.expect("snapshot written");
        assert_eq!(info.position.seq, state.journal.last_seq());
        let (s, _) = post(&app, "/v1/segments/unmount", json!({"segment_id": "s3"})).await;
        assert_eq!(s, 200);
        Node::stop(&state);
    }
    let state = start(&config(t.path()));
    let app = app_for(&state).await;
    let list = get_json(&app, "/v1/segments").await;
    let ids: Vec<&str> = list["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["segment_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 9, "{ids:?}");
    assert!(!ids.contains(&"s3"));
    assert_eq!(list["owners"].as_array().unwrap().len(), 3);
    // Seqs continue after the restart.
    let (s, b) = post(
        &app,
        "/v1/segments/mount",
        json!({"owner_id": "o9", "segment_id": "new", "size": 64}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(b["first_seq"], json!(state.journal.last_seq() - 1));
    Node::stop(&state);
}

#[actix_web::test]
async fn a_data_dir_of_a_newer_format_is_refused_untouched() {
    let t = tempfile::tempdir().unwrap();
    let c = config(t.path());
    std::fs::create_dir(&c.data_dir).unwrap();
    let marker =
        r#"{"format_version": 7, "created_at": "2030-01-01T00:00:00Z", "journal_backend": "file"}"#;
    std::fs::write(c.data_dir.join("CRESCENT_DATA_DIR"), marker).unwrap();
    let err = match Node::start(&c) {
        Ok(_) => panic!("a newer data dir must be refused"),
        Err(e) => e,
    };
    assert!(err.to_string().contains("format version 7"), "{err}");
    assert_eq!(
        std::fs::read_to_string(c.data_dir.join("CRESCENT_DATA_DIR")).unwrap(),
        marker
    );
    assert_eq!(std::fs::read_dir(&c.data_dir).unwrap().count(), 1);
}

//! `crescent weights` against a real crescentd: a ~4 MiB safetensors file of 40 tensors is
//! put with policy HOT, is READY/HOT, reads back byte-identical, is listed, and is removed.

mod common;

use common::{crescent, json, Server};

/// A safetensors file: `tensors` F32 tensors of `floats` values each, with a `__metadata__`
/// entry, a space-padded header and a 24-byte hole between the first two tensors (a file
/// the client must rebuild byte-identical, padding included).
fn safetensors(tensors: usize, floats: usize) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        serde_json::json!({"format": "pt", "source": "crescent-test"}),
    );
    let mut data = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for t in 0..tensors {
        if t == 1 {
            data.extend_from_slice(&[0xAB; 24]);
        }
        let start = data.len();
        for _ in 0..floats {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            data.extend_from_slice(&((seed % 1000) as f32 / 7.0).to_le_bytes());
        }
        header.insert(
            format!("model.layers.{t}.mlp.weight"),
            serde_json::json!({
                "dtype": "F32",
                "shape": [floats / 64, 64],
                "data_offsets": [start, data.len()],
            }),
        );
    }
    let mut text = serde_json::to_string(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(text.as_bytes());
    file.extend_from_slice(&data);
    file
}

#[test]
fn put_meta_get_ls_rm_round_trip() {
    let server = Server::start();
    let s = server.server();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("model.safetensors");
    let bytes = safetensors(40, 26_112);
    assert!(bytes.len() > 4_000_000, "{}", bytes.len());
    std::fs::write(&file, &bytes).unwrap();
    let id = [
        "--namespace",
        "llm",
        "--resource",
        "tiny-model",
        "--revision",
        "main",
        "--generation",
        "1",
    ];
    let with = |cmd: &[&str], tail: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["--json", "weights"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(cmd.iter().map(|s| s.to_string()));
        v.extend(id.iter().map(|s| s.to_string()));
        v.extend(tail.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        crescent(&s, &refs, None)
    };

    let (code, out, err) = run(with(&["put"], &["--policy", "hot", file.to_str().unwrap()]));
    assert_eq!(code, 0, "{err}\n{}", server.log());
    let put = json(&out);
    assert_eq!(put["availability"], "READY");
    assert_eq!(put["residency"], "HOT");
    // 40 tensors plus the hole between the first two.
    assert_eq!(put["payload_count"], 41);
    assert_eq!(
        put["logical_bytes"],
        (bytes.len() - 8 - header_len(&bytes)) as u64
    );

    let (code, out, err) = run(with(&["meta"], &[]));
    assert_eq!(code, 0, "{err}");
    let meta = json(&out);
    assert_eq!(meta["availability"], "READY");
    assert_eq!(meta["residency"], "HOT");
    assert_eq!(meta["observed_hot_ratio"], 1.0);
    assert!(meta["metadata_generation"].as_u64().unwrap() >= 1);
    assert_eq!(meta["active_lease_count"], 0);

    let out_dir = dir.path().join("out");
    let (code, out, err) = run(with(&["get"], &["-o", out_dir.to_str().unwrap()]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["files"][0]["file"], "model.safetensors");
    let back = std::fs::read(out_dir.join("model.safetensors")).unwrap();
    assert!(back == bytes, "the file read back differs");

    // The read lease was released: nothing blocks the removal.
    let (code, out, _) = run(with(&["meta"], &[]));
    assert_eq!(code, 0);
    assert_eq!(json(&out)["active_lease_count"], 0);

    let (code, out, err) = crescent(&s, &["--json", "weights", "ls", "--namespace", "llm"], None);
    assert_eq!(code, 0, "{err}");
    let listed = json(&out);
    assert_eq!(listed["revisions"].as_array().unwrap().len(), 1);
    assert_eq!(listed["revisions"][0]["id"]["resource_id"], "tiny-model");
    let (code, out, _) = crescent(
        &s,
        &["--json", "weights", "ls", "--namespace", "other"],
        None,
    );
    assert_eq!(code, 0);
    assert!(json(&out)["revisions"].as_array().unwrap().is_empty());

    // Policy and migration: a HOT revision migrated to HOT finishes at once; COLD goes
    // through the standalone node's cold tier and still reads back byte-identical.
    let (code, out, err) = run(with(&["policy"], &["--policy", "hot", "--mode", "manual"]));
    assert_eq!(code, 0, "{err}");
    let policy = json(&out);
    assert_eq!(policy["policy"]["migration_mode"], "MANUAL");
    assert!(policy["metadata_generation"].as_u64() > meta["metadata_generation"].as_u64());
    let (code, out, err) = run(with(&["migrate"], &["--to", "hot"]));
    assert_eq!(code, 0, "{err}\n{}", String::from_utf8_lossy(&out));
    let migration = json(&out);
    assert_eq!(migration["kind"], "MIGRATING");
    assert_eq!(migration["status"], "SUCCEEDED");
    let op_id = migration["operation_id"].as_str().unwrap().to_string();
    let (code, out, err) = crescent(&s, &["--json", "weights", "op", &op_id], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["status"], "SUCCEEDED");
    let (code, _, _) = run(with(&["migrate"], &["--to", "mixed:1.5"]));
    assert_ne!(code, 0, "a ratio outside (0, 1) is refused");
    let (code, out, err) = run(with(&["migrate"], &["--to", "cold"]));
    assert_eq!(code, 0, "{err}\n{}", server.log());
    assert_eq!(json(&out)["status"], "SUCCEEDED");
    let (code, out, _) = run(with(&["meta"], &[]));
    assert_eq!(code, 0);
    assert_eq!(json(&out)["residency"], "COLD");
    let (code, _, err) = run(with(&["get"], &["-o", out_dir.to_str().unwrap()]));
    assert_eq!(code, 0, "{err}");
    let back = std::fs::read(out_dir.join("model.safetensors")).unwrap();
    assert!(back == bytes, "the COLD revision read back differs");

    let (code, out, err) = run(with(&["rm"], &[]));
    assert_eq!(code, 0, "{err}\n{}", String::from_utf8_lossy(&out));
    let op = json(&out);
    assert_eq!(op["kind"], "DELETING");
    assert_eq!(op["status"], "SUCCEEDED");

    let (code, out, _) = run(with(&["meta"], &[]));
    let after = json(&out);
    if code == 0 {
        assert_eq!(after["availability"], "DELETED");
        assert_eq!(after["residency"], "ABSENT");
    } else {
        assert_eq!(after["error"]["code"], "NOT_FOUND");
    }
    let (code, _, _) = run(with(&["get"], &["-o", out_dir.to_str().unwrap()]));
    assert_ne!(code, 0, "a deleted revision must not be readable");
}

fn header_len(file: &[u8]) -> usize {
    u64::from_le_bytes(file[..8].try_into().unwrap()) as usize
}

#[test]
fn upsert_put_first_replaces_the_generation() {
    let server = Server::start();
    let s = server.server();
    let dir = tempfile::tempdir().unwrap();
    let v1 = dir.path().join("v1");
    let v2 = dir.path().join("v2");
    std::fs::create_dir_all(&v1).unwrap();
    std::fs::create_dir_all(&v2).unwrap();
    let old = safetensors(8, 1024);
    let new = safetensors(12, 2048);
    std::fs::write(v1.join("model.safetensors"), &old).unwrap();
    std::fs::write(v2.join("model.safetensors"), &new).unwrap();
    let id = [
        "--namespace",
        "llm",
        "--resource",
        "m",
        "--revision",
        "main",
    ];
    let args = |tail: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["--json".into(), "weights".into(), tail[0].into()];
        v.extend(id.iter().map(|s| s.to_string()));
        v.extend(tail[1..].iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        crescent(&s, &refs, None)
    };

    let (code, _, err) = run(args(&[
        "put",
        "--generation",
        "1",
        "--policy",
        "hot",
        v1.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(args(&[
        "upsert",
        "--generation",
        "2",
        "--replacing",
        "1",
        "--policy",
        "hot",
        v2.to_str().unwrap(),
    ]));
    assert_eq!(
        code,
        0,
        "{err}\n{}\n{}",
        String::from_utf8_lossy(&out),
        server.log()
    );
    let reply = json(&out);
    assert_eq!(reply["phase"], "COMMITTED");
    assert_eq!(reply["watermark"], 2);

    let (code, out, _) = run(args(&["meta", "--generation", "2"]));
    assert_eq!(code, 0);
    assert_eq!(json(&out)["availability"], "READY");
    let (code, out, _) = run(args(&["meta", "--generation", "1"]));
    if code == 0 {
        assert_eq!(json(&out)["availability"], "DELETED");
    } else {
        assert_eq!(json(&out)["error"]["code"], "NOT_FOUND");
    }
    let out_dir = dir.path().join("out");
    let (code, _, err) = run(args(&[
        "get",
        "--generation",
        "2",
        "-o",
        out_dir.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read(out_dir.join("model.safetensors")).unwrap() == new);
}

/// A small safetensors file whose middle tensor holds 0 bytes (shape [0, 64]).
fn safetensors_with_an_empty_tensor() -> Vec<u8> {
    let a: Vec<u8> = (0..256u32).map(|i| i as u8).collect();
    let b: Vec<u8> = (0..512u32).map(|i| (i * 7) as u8).collect();
    let header = serde_json::json!({
        "a.weight": {"dtype": "F32", "shape": [1, 64], "data_offsets": [0, 256]},
        "empty.weight": {"dtype": "F32", "shape": [0, 64], "data_offsets": [256, 256]},
        "b.weight": {"dtype": "F32", "shape": [2, 64], "data_offsets": [256, 768]},
    });
    let mut text = header.to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(text.as_bytes());
    file.extend_from_slice(&a);
    file.extend_from_slice(&b);
    file
}

/// A published revision's objects are its own: every plain write or remove of one (CLI, the
/// Rust client over the RPC fast path, batch forms, HTTP) is refused with CONFLICT naming its
/// group, remove_prefix skips them, and the revision still reads back byte-identical. Its
/// 0-byte tensor is a 0-byte payload object like any other.
#[test]
fn plain_writes_of_a_managed_revision_are_refused() {
    let server = Server::start();
    let s = server.server();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir_all(&model).unwrap();
    let bytes = safetensors_with_an_empty_tensor();
    std::fs::write(model.join("model.safetensors"), &bytes).unwrap();
    let id = [
        "--namespace",
        "llm",
        "--resource",
        "guarded",
        "--revision",
        "main",
        "--generation",
        "1",
    ];
    let weights = |cmd: &str, tail: &[&str]| {
        let mut args = vec!["--json", "weights", cmd];
        args.extend_from_slice(&id);
        args.extend_from_slice(tail);
        crescent(&s, &args, None)
    };
    let (code, out, err) = weights("put", &["--policy", "hot", model.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}\n{}", server.log());
    assert_eq!(json(&out)["availability"], "READY");

    let in_weights = |args: &[&str], stdin: Option<&[u8]>| {
        let mut full = vec!["--json", "--domain", "_weights"];
        full.extend_from_slice(args);
        let (code, out, err) = crescent(&s, &full, stdin);
        (code, json(&out), err)
    };
    let (code, listed, err) = in_weights(&["ls", "weights/"], None);
    assert_eq!(code, 0, "{err}");
    let keys: Vec<(String, u64)> = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["key"].as_str().unwrap().to_string(),
                k["size"].as_u64().unwrap(),
            )
        })
        .collect();
    // Three tensors and the manifest; the empty tensor is a 0-byte object.
    assert_eq!(keys.len(), 4, "{listed}");
    assert!(keys.iter().any(|(_, size)| *size == 0), "{listed}");
    let key = keys[0].0.clone();

    let managed = |v: &serde_json::Value| {
        assert_eq!(v["error"]["code"], "CONFLICT", "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("MANAGED_OBJECT"), "{message}");
        assert!(message.contains("wgrp-"), "{message}");
    };
    for args in [
        vec!["put", key.as_str(), "-"],
        vec!["put", "--upsert", key.as_str(), "-"],
        vec!["rm", key.as_str()],
        vec!["rm", "--force", key.as_str()],
    ] {
        let (code, v, _) = in_weights(&args, Some(b"plain"));
        assert_ne!(code, 0, "{args:?}");
        managed(&v);
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = common::client_of(&s)
            .with_scope(None, Some("_weights"))
            .unwrap();
        let e = client
            .put_with(&key, b"x", &crescent_client::PutOptions::upsert())
            .await
            .unwrap_err();
        assert_eq!(e.code_str(), "CONFLICT", "{e}");
        assert!(e.to_string().contains("MANAGED_OBJECT"), "{e}");
        let items = client
            .put_batch(std::slice::from_ref(&key), &[b"x".as_slice()])
            .await
            .unwrap();
        let e = items[0].as_ref().unwrap_err();
        assert_eq!(e.code_str(), "CONFLICT", "{e}");
        let removed = client
            .remove_batch(std::slice::from_ref(&key))
            .await
            .unwrap();
        assert_eq!(removed[0].as_ref().unwrap_err().code_str(), "CONFLICT");
        let r = client.remove_prefix("weights/").await.unwrap();
        assert_eq!((r.removed, r.skipped), (0, 4));
        // Plain HTTP.
        let http = reqwest::Client::new();
        let req = http.post(format!("http://{s}/v1/objects/put_start"));
        let reply = common::as_client(req, &s)
            .json(&serde_json::json!({
                "id": {"domain": "_weights", "key": key}, "size": 1, "upsert": true
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status().as_u16(), 409);
        let body: serde_json::Value = reply.json().await.unwrap();
        managed(&serde_json::json!({ "error": body }));
    });

    // Nothing changed: the revision is READY and reads back byte-identical.
    let (code, out, _) = weights("meta", &[]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["availability"], "READY");
    let out_dir = dir.path().join("out");
    let (code, _, err) = weights("get", &["-o", out_dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read(out_dir.join("model.safetensors")).unwrap() == bytes);
    let (code, _, err) = weights("rm", &[]);
    assert_eq!(code, 0, "{err}");
}

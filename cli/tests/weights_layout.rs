//! `crescent weights get --tp-size N --tp-rank R` against a real crescentd: each rank's file is
//! a valid safetensors file whose tensors are exactly the rank's slice of the full tensors
//! (checked element by element against the file that was put), only the rank's bytes cross
//! the data plane, and the same holds once the revision is COLD (cold-only payloads).

mod weights_common;

use std::collections::BTreeMap;

use serde_json::Value;
use weights_common::*;

/// `(name, dtype, element bytes, shape)` of the test model: row- and column-parallel
/// matrices with dimensions that do not divide by 3, a 3-D tensor, a norm and a scalar.
const TENSORS: &[(&str, &str, u64, &[u64])] = &[
    ("model.embed_tokens.weight", "F16", 2, &[70, 16]),
    (
        "model.layers.0.self_attn.q_proj.weight",
        "BF16",
        2,
        &[48, 40],
    ),
    (
        "model.layers.0.self_attn.o_proj.weight",
        "F32",
        4,
        &[40, 47],
    ),
    ("model.layers.0.mlp.experts", "F32", 4, &[3, 10, 8]),
    ("model.norm.weight", "F32", 4, &[40]),
    ("scale", "F64", 8, &[]),
];

const RULES: &[&str] = &[
    "--tp-rule",
    "*.o_proj.weight=shard:1",
    "--tp-rule",
    "*.experts=shard:1",
    "--tp-rule",
    "*.norm.weight=replicate",
    "--tp-rule",
    "scale=replicate",
];

/// The safetensors file of [`TENSORS`] (deterministic bytes) and each tensor's bytes.
fn model() -> (Vec<u8>, BTreeMap<String, Vec<u8>>) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut data = Vec::new();
    let mut tensors = BTreeMap::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for (name, dtype, elem, shape) in TENSORS {
        let bytes = elem * shape.iter().product::<u64>();
        let start = data.len() as u64;
        let mut t = Vec::with_capacity(bytes as usize);
        for _ in 0..bytes {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            t.push(state as u8);
        }
        data.extend_from_slice(&t);
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [start, start + bytes]}),
        );
        tensors.insert(name.to_string(), t);
    }
    let mut text = serde_json::to_string(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(text.as_bytes());
    file.extend_from_slice(&data);
    (file, tensors)
}

/// A safetensors file parsed strictly: header length, JSON header, tensors contiguous from 0
/// and covering the data region exactly (the format's rules). Returns the metadata and
/// `name -> (dtype, shape, bytes)`.
#[allow(clippy::type_complexity)]
fn parse(file: &[u8]) -> (Value, BTreeMap<String, (String, Vec<u64>, Vec<u8>)>) {
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    assert_eq!((8 + n) % 8, 0, "header padded to 8 bytes");
    let mut header: serde_json::Map<String, Value> =
        serde_json::from_slice(&file[8..8 + n]).unwrap();
    let metadata = header.remove("__metadata__").unwrap_or(Value::Null);
    let data = &file[8 + n..];
    let mut spans = Vec::new();
    let mut out = BTreeMap::new();
    for (name, v) in header {
        let offsets: Vec<usize> = serde_json::from_value(v["data_offsets"].clone()).unwrap();
        let shape: Vec<u64> = serde_json::from_value(v["shape"].clone()).unwrap();
        spans.push((offsets[0], offsets[1]));
        let dtype = v["dtype"].as_str().unwrap().to_string();
        out.insert(name, (dtype, shape, data[offsets[0]..offsets[1]].to_vec()));
    }
    spans.sort();
    let mut at = 0;
    for (s, e) in spans {
        assert_eq!(s, at, "no holes between tensors");
        at = e;
    }
    assert_eq!(at, data.len(), "the tensors cover the data region");
    (metadata, out)
}

/// The slice of `full` (row-major `shape`, `elem` bytes an element) along `axis` at
/// `[start, start + count)`, built element by element.
fn slice(full: &[u8], shape: &[u64], elem: u64, axis: usize, start: u64, count: u64) -> Vec<u8> {
    let outer: u64 = shape[..axis].iter().product();
    let inner: u64 = shape[axis + 1..].iter().product::<u64>() * elem;
    let mut out = Vec::new();
    for i in 0..outer {
        for j in start..start + count {
            let at = ((i * shape[axis] + j) * inner) as usize;
            out.extend_from_slice(&full[at..at + inner as usize]);
        }
    }
    out
}

/// Balanced split of `dim` over `world`: the first `dim % world` ranks take one more.
fn share(dim: u64, world: u64, rank: u64) -> (u64, u64) {
    let (base, extra) = (dim / world, dim % world);
    (
        rank * base + rank.min(extra),
        base + u64::from(rank < extra),
    )
}

fn axis_of(name: &str) -> Option<usize> {
    match name {
        n if n.ends_with(".o_proj.weight") || n.ends_with(".experts") => Some(1),
        n if n.ends_with(".norm.weight") || n == "scale" => None,
        _ => Some(0),
    }
}

/// Reads every rank of a `world`-way layout and checks each shard against the full tensor;
/// returns the bytes each rank transferred and the revision's full bytes.
fn check_ranks(node: &Node, dir: &std::path::Path, world: u64) -> (Vec<u64>, u64) {
    let (_, full) = model();
    let mut transferred = Vec::new();
    let mut full_bytes = 0;
    let mut concatenated: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for rank in 0..world {
        let out = dir.join(format!("rank{rank}"));
        let _ = std::fs::remove_dir_all(&out);
        let mut tail = vec![
            "-o".to_string(),
            out.to_str().unwrap().to_string(),
            "--tp-size".into(),
            world.to_string(),
            "--tp-rank".into(),
            rank.to_string(),
        ];
        tail.extend(RULES.iter().map(|s| s.to_string()));
        let v = node.ok(&refs(&weights_args("get", "tp", 1, &refs(&tail))));
        let stats = &v["stats"];
        transferred.push(stats["transferred_bytes"].as_u64().unwrap());
        full_bytes = stats["full_bytes"].as_u64().unwrap();
        assert_eq!(v["layout"]["version"], 1, "{v}");
        let name = format!("model.tp-{rank}-of-{world}.safetensors");
        assert_eq!(v["files"][0]["file"], name, "{v}");
        let (metadata, tensors) = parse(&std::fs::read(out.join(&name)).unwrap());
        assert_eq!(metadata["format"], "pt");
        assert_eq!(metadata["crescent.tp_rank"], rank.to_string());
        assert_eq!(tensors.len(), TENSORS.len());
        for (tname, dtype, elem, shape) in TENSORS {
            let (got_dtype, got_shape, got) = &tensors[*tname];
            assert_eq!(got_dtype, dtype);
            let (expected_shape, expected) = match axis_of(tname) {
                None => (shape.to_vec(), full[*tname].clone()),
                Some(axis) => {
                    let (start, count) = share(shape[axis], world, rank);
                    let mut s = shape.to_vec();
                    s[axis] = count;
                    (s, slice(&full[*tname], shape, *elem, axis, start, count))
                }
            };
            assert_eq!(got_shape, &expected_shape, "{tname} rank {rank}");
            assert!(
                got == &expected,
                "{tname} rank {rank}: the shard differs from the slice"
            );
            concatenated
                .entry(tname.to_string())
                .or_default()
                .push(got.clone());
        }
    }
    // Row-parallel shards (axis 0) concatenate back to the whole tensor.
    for (tname, _, _, _) in TENSORS.iter().filter(|t| axis_of(t.0) == Some(0)) {
        assert!(concatenated[*tname].concat() == full[*tname], "{tname}");
    }
    (transferred, full_bytes)
}

#[test]
fn each_rank_reads_only_its_shards_hot_and_cold() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "", &[]);
    let (file, _) = model();
    let src = model_dir(dir.path(), "src", &file);
    let put = node.ok(&refs(&weights_args(
        "put",
        "tp",
        1,
        &["--policy", "hot", "--mode", "manual", src.to_str().unwrap()],
    )));
    assert_eq!(put["residency"], "HOT", "{put}");
    let replicated: u64 = 40 * 4 + 8;
    let (transferred, full) = check_ranks(&node, dir.path(), 3);
    assert_eq!(full, payload_bytes(&file));
    // HOT: the rank's bytes only; together the ranks read the revision once plus the
    // replicated tensors (world - 1) more times.
    assert!(
        transferred.iter().all(|t| *t < full / 2),
        "{transferred:?} of {full}"
    );
    assert_eq!(transferred.iter().sum::<u64>(), full + 2 * replicated);
    // One rank: every tensor whole, one range each.
    let (transferred, _) = check_ranks(&node, dir.path(), 1);
    assert_eq!(transferred, vec![full]);

    // COLD: cold-only payloads arrive whole (inline), the shards are still exact.
    let op = node.ok(&refs(&weights_args("migrate", "tp", 1, &["--to", "cold"])));
    assert_eq!(op["status"], "SUCCEEDED", "{op}\n{}", node.log());
    let (transferred, _) = check_ranks(&node, dir.path(), 2);
    assert_eq!(transferred, vec![full, full]);
    // The residency did not change by reading.
    let m = node.ok(&refs(&weights_args("meta", "tp", 1, &[])));
    assert_eq!(m["residency"], "COLD", "{m}");
}

#[test]
fn bad_layouts_are_refused_before_any_read() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), "", &[]);
    let (file, _) = model();
    let src = model_dir(dir.path(), "src", &file);
    node.ok(&refs(&weights_args(
        "put",
        "tp",
        1,
        &["--policy", "hot", "--mode", "manual", src.to_str().unwrap()],
    )));
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    for (tail, why) in [
        (
            vec!["--tp-size", "2", "--tp-rank", "2"],
            "rank not below the size",
        ),
        (vec!["--tp-size", "0", "--tp-rank", "0"], "size 0"),
        (
            vec!["--tp-size", "2", "--tp-rank", "0", "--tp-default", "column"],
            "split syntax",
        ),
        (
            vec!["--tp-size", "2", "--tp-rank", "0", "--tp-rule", "[=shard:0"],
            "bad glob",
        ),
        // The scalar has no axis 0 and no rule replicates it.
        (
            vec!["--tp-size", "2", "--tp-rank", "0"],
            "scalar without a rule",
        ),
    ] {
        let mut args = vec!["-o", o];
        args.extend(tail);
        let (code, v, err) = node.cli(&refs(&weights_args("get", "tp", 1, &args)));
        assert_ne!(code, 0, "{why}: {v}");
        assert_eq!(v["error"]["code"], "INVALID_ARGUMENT", "{why}: {v}\n{err}");
    }
    // The lease of a refused read was released: the revision can be removed at once.
    let rm = node.ok(&refs(&weights_args("rm", "tp", 1, &[])));
    assert_eq!(rm["status"], "SUCCEEDED", "{rm}");
}

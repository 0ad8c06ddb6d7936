//! Target layouts: the split arithmetic against an element-by-element oracle, the plan of a
//! revision, and the per-rank safetensors files.

use proptest::prelude::*;

use super::layout::*;
use super::manifest::{parse_safetensors, FileSegment, ManifestFile, ManifestObject};
use super::shard::{plan_revision, ShardedFile, TensorShard};
use super::WeightManifest;

fn info(dtype: &str, shape: &[u64]) -> TensorInfo {
    let bytes = dtype_bytes(dtype).unwrap() * shape.iter().product::<u64>();
    TensorInfo {
        dtype: dtype.into(),
        shape: shape.to_vec(),
        data_offsets: [0, bytes],
    }
}

fn r(offset: u64, len: u64) -> ByteRange {
    ByteRange { offset, len }
}

/// The bytes of `ranges` of `full`, concatenated.
fn gather(full: &[u8], ranges: &[ByteRange]) -> Vec<u8> {
    ranges
        .iter()
        .flat_map(|r| &full[r.offset as usize..(r.offset + r.len) as usize])
        .copied()
        .collect()
}

#[test]
fn balanced_shares_give_the_first_ranks_the_remainder() {
    let shares: Vec<_> = (0..4).map(|rank| axis_share(10, 4, rank)).collect();
    assert_eq!(shares, vec![(0, 3), (3, 3), (6, 2), (8, 2)]);
    assert_eq!(axis_share(8, 4, 3), (6, 2));
    assert_eq!(axis_share(2, 4, 3), (2, 0));
}

#[test]
fn a_split_along_axis_zero_is_one_contiguous_range() {
    // F16 [8, 6]: 12 bytes a row; rank 1 of 4 takes rows 2..4.
    let plan = plan_shard(
        "t",
        &info("F16", &[8, 6]),
        SplitRule::Shard { axis: 0 },
        4,
        1,
    )
    .unwrap();
    assert_eq!(plan.shape, vec![2, 6]);
    assert_eq!(plan.ranges, vec![r(24, 24)]);
    assert_eq!(plan.bytes, 24);
}

#[test]
fn a_split_along_axis_one_is_strided() {
    // F32 [3, 8]: 32 bytes a row; rank 1 of 2 takes columns 4..8 of each row.
    let plan = plan_shard(
        "t",
        &info("F32", &[3, 8]),
        SplitRule::Shard { axis: 1 },
        2,
        1,
    )
    .unwrap();
    assert_eq!(plan.shape, vec![3, 4]);
    assert_eq!(plan.ranges, vec![r(16, 16), r(48, 16), r(80, 16)]);
    assert_eq!(plan.bytes, 48);
}

#[test]
fn touching_ranges_are_coalesced() {
    // A split along axis 1 of [4, 1, 6] leaves whole rows: one range for the whole tensor.
    let plan = plan_shard(
        "t",
        &info("U8", &[4, 1, 6]),
        SplitRule::Shard { axis: 1 },
        3,
        0,
    )
    .unwrap();
    assert_eq!(plan.ranges, vec![r(0, 24)]);
    assert_eq!(
        plan_shard(
            "t",
            &info("U8", &[4, 1, 6]),
            SplitRule::Shard { axis: 1 },
            3,
            2
        )
        .unwrap()
        .ranges,
        vec![]
    );
    let plan = plan_shard("t", &info("BF16", &[5, 7]), SplitRule::Replicate, 8, 3).unwrap();
    assert_eq!((plan.shape, plan.ranges), (vec![5, 7], vec![r(0, 70)]));
}

#[test]
fn bad_tensors_and_layouts_are_refused() {
    let err = |e: crate::ClientError| e.code_str();
    let axis2 = SplitRule::Shard { axis: 2 };
    assert_eq!(
        err(plan_shard("t", &info("F32", &[4, 4]), axis2, 2, 0).unwrap_err()),
        "INVALID_ARGUMENT"
    );
    let f4 = TensorInfo {
        dtype: "F4".into(),
        shape: vec![4],
        data_offsets: [0, 2],
    };
    assert_eq!(
        err(plan_shard("t", &f4, SplitRule::Replicate, 2, 0).unwrap_err()),
        "INVALID_ARGUMENT"
    );
    let short = TensorInfo {
        dtype: "F32".into(),
        shape: vec![4],
        data_offsets: [0, 12],
    };
    assert_eq!(
        err(plan_shard("t", &short, SplitRule::Replicate, 2, 0).unwrap_err()),
        "INTERNAL"
    );
    for layout in [
        TargetLayout::new(0, 0, SplitRule::Replicate),
        TargetLayout::new(2, 2, SplitRule::Replicate),
        TargetLayout::new(MAX_WORLD_SIZE + 1, 0, SplitRule::Replicate),
        TargetLayout::new(2, 0, SplitRule::Replicate).with_rule("[", SplitRule::Replicate),
        TargetLayout {
            version: 2,
            ..TargetLayout::new(2, 0, SplitRule::Replicate)
        },
    ] {
        assert_eq!(
            err(layout.compile().unwrap_err()),
            "INVALID_ARGUMENT",
            "{layout:?}"
        );
    }
}

#[test]
fn rules_are_tried_in_order_then_the_default() {
    let layout = TargetLayout::new(4, 0, SplitRule::Replicate)
        .with_rule("*.q_proj.weight", SplitRule::Shard { axis: 0 })
        .with_rule("*.o_proj.*", SplitRule::Shard { axis: 1 })
        .with_rule("*", SplitRule::Shard { axis: 0 })
        .compile()
        .unwrap();
    assert_eq!(
        layout.split_for("model.layers.0.self_attn.q_proj.weight"),
        SplitRule::Shard { axis: 0 }
    );
    assert_eq!(
        layout.split_for("model.layers.0.self_attn.o_proj.weight"),
        SplitRule::Shard { axis: 1 }
    );
    let default_only = TargetLayout::new(4, 0, SplitRule::Replicate)
        .with_rule("*.o_proj.*", SplitRule::Shard { axis: 1 })
        .compile()
        .unwrap();
    assert_eq!(
        default_only.split_for("model.norm.weight"),
        SplitRule::Replicate
    );
}

#[test]
fn rule_and_split_syntax() {
    assert_eq!(
        "replicate".parse::<SplitRule>().unwrap(),
        SplitRule::Replicate
    );
    assert_eq!(
        "shard:1".parse::<SplitRule>().unwrap(),
        SplitRule::Shard { axis: 1 }
    );
    for bad in ["shard", "shard:x", "column", "shard:-1", ""] {
        assert_eq!(
            bad.parse::<SplitRule>().unwrap_err().code_str(),
            "INVALID_ARGUMENT",
            "{bad}"
        );
    }
    let rule: TensorRule = "*.weight=shard:0".parse().unwrap();
    assert_eq!(
        (rule.pattern.as_str(), rule.split),
        ("*.weight", SplitRule::Shard { axis: 0 })
    );
    assert!("*.weight".parse::<TensorRule>().is_err());
    // The layout is a versioned document: it round-trips through JSON.
    let layout =
        TargetLayout::new(8, 3, SplitRule::Replicate).with_rule("*", SplitRule::Shard { axis: 1 });
    let json = serde_json::to_string(&layout).unwrap();
    assert!(json.contains("\"version\":1"), "{json}");
    assert_eq!(serde_json::from_str::<TargetLayout>(&json).unwrap(), layout);
}

/// A one-file manifest of tensors `(name, dtype, shape)` stored back to back, one object each.
fn manifest(tensors: &[(&str, &str, &[u64])]) -> WeightManifest {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut m = WeightManifest::default();
    let mut segments = Vec::new();
    let mut offset = 0u64;
    for (i, (name, dtype, shape)) in tensors.iter().enumerate() {
        let bytes = dtype_bytes(dtype).unwrap() * shape.iter().product::<u64>();
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
        let key = format!("p{i}");
        segments.push(FileSegment {
            key: key.clone(),
            bytes,
            tensor: Some(name.to_string()),
        });
        m.objects.push(ManifestObject {
            key,
            bytes,
            name: format!("m.safetensors:{name}"),
        });
    }
    m.files.push(ManifestFile {
        name: "m.safetensors".into(),
        header: serde_json::to_string(&header).unwrap(),
        segments,
    });
    m.objects.push(ManifestObject {
        key: "loose".into(),
        bytes: 5,
        name: "extra".into(),
    });
    m
}

#[test]
fn a_revision_plan_names_each_tensors_object_and_counts_the_bytes() {
    let m = manifest(&[("b.weight", "F32", &[4, 6]), ("a.norm", "F16", &[6])]);
    let layout = TargetLayout::new(2, 1, SplitRule::Replicate)
        .with_rule("*.weight", SplitRule::Shard { axis: 1 })
        .compile()
        .unwrap();
    let plan = plan_revision(&m, &layout).unwrap();
    let file = &plan.files[0];
    let names: Vec<_> = file.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["a.norm", "b.weight"]);
    assert_eq!(file.tensors[1].key, "p0");
    assert_eq!(file.tensors[1].plan.shape, vec![4, 3]);
    assert_eq!(
        file.tensors[1].plan.ranges,
        vec![r(12, 12), r(36, 12), r(60, 12), r(84, 12)]
    );
    assert_eq!(file.metadata, Some(serde_json::json!({"format": "pt"})));
    assert_eq!(plan.loose_objects, vec![("loose".to_string(), 5)]);
    assert_eq!(plan.bytes(), 48 + 12 + 5);
}

#[test]
fn rank_files_are_valid_safetensors_with_the_shard_shapes() {
    let m = manifest(&[("w", "F32", &[4, 2]), ("n", "U8", &[3])]);
    let layout = TargetLayout::new(2, 0, SplitRule::Shard { axis: 0 });
    let plan = plan_revision(&m, &layout.compile().unwrap()).unwrap();
    let tensors = plan.files[0]
        .tensors
        .iter()
        .map(|t| TensorShard {
            tensor: t.clone(),
            data: vec![7; t.plan.bytes as usize],
        })
        .collect();
    let file = ShardedFile {
        name: "m.safetensors".into(),
        metadata: plan.files[0].metadata.clone(),
        tensors,
    };
    assert_eq!(file.rank_file_name(&layout), "m.tp-0-of-2.safetensors");
    let bytes = file.to_safetensors(&layout);
    let parsed = parse_safetensors("rank", &bytes).unwrap();
    assert_eq!(parsed.data_start % 8, 0);
    assert_eq!(
        parsed.spans,
        vec![
            (Some("n".to_string()), 0, 2),
            (Some("w".to_string()), 2, 18)
        ]
    );
    let (infos, metadata) = header_tensors("rank", &parsed.header).unwrap();
    assert_eq!(infos["w"].shape, vec![2, 2]);
    assert_eq!(infos["n"].shape, vec![2]);
    let metadata = metadata.unwrap();
    assert_eq!(
        (
            metadata["format"].as_str(),
            metadata["crescent.tp_size"].as_str()
        ),
        (Some("pt"), Some("2"))
    );
}

/// Flat row-major index of `index` in `shape`.
fn flat(index: &[u64], shape: &[u64]) -> u64 {
    index.iter().zip(shape).fold(0, |acc, (i, d)| acc * d + i)
}

proptest! {
    /// Every element of the full tensor is in exactly the rank the split gives it, at the
    /// place its shard shape says: the ranks' shards concatenated along the axis are the
    /// tensor. The ranges are ascending and never touch (coalesced).
    #[test]
    fn shards_concatenate_to_the_full_tensor(
        shape in proptest::collection::vec(0u64..6, 1..4),
        axis_pick in 0usize..4,
        elem in prop::sample::select(vec![("U8", 1u64), ("F16", 2), ("F32", 4), ("F64", 8)]),
        world in 1u32..7,
        replicate in proptest::bool::weighted(0.15),
    ) {
        let axis = axis_pick % shape.len();
        let split = if replicate { SplitRule::Replicate } else { SplitRule::Shard { axis } };
        let tensor = info(elem.0, &shape);
        let total = tensor.data_offsets[1];
        let full: Vec<u8> = (0..total).map(|i| (i * 31 % 251) as u8).collect();
        let mut covered = 0u64;
        for rank in 0..world {
            let plan = plan_shard("t", &tensor, split, world, rank).unwrap();
            for pair in plan.ranges.windows(2) {
                prop_assert!(pair[0].offset + pair[0].len < pair[1].offset, "{:?}", plan.ranges);
            }
            prop_assert!(plan.ranges.iter().all(|r| r.len > 0 && r.offset + r.len <= total));
            let shard = gather(&full, &plan.ranges);
            prop_assert_eq!(shard.len() as u64, plan.bytes);
            prop_assert_eq!(plan.bytes, plan.shape.iter().product::<u64>() * elem.1);
            covered += plan.bytes;
            let start = match split {
                SplitRule::Shard { axis } => axis_share(shape[axis], world, rank).0,
                SplitRule::Replicate => 0,
            };
            // Oracle: walk every element of the shard and find it in the full tensor.
            let count: u64 = plan.shape.iter().product();
            for local in 0..count {
                let mut index = vec![0u64; shape.len()];
                let mut rest = local;
                for d in (0..shape.len()).rev() {
                    index[d] = rest % plan.shape[d];
                    rest /= plan.shape[d];
                }
                let mut global = index.clone();
                if let SplitRule::Shard { axis } = split {
                    global[axis] += start;
                }
                let at = (flat(&global, &shape) * elem.1) as usize;
                let here = (local * elem.1) as usize;
                prop_assert_eq!(&shard[here..here + elem.1 as usize], &full[at..at + elem.1 as usize]);
            }
        }
        let expected = if replicate { total * u64::from(world) } else { total };
        prop_assert_eq!(covered, expected);
    }
}

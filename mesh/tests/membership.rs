//! The membership record: validation, stored form, and the update rule.

use crescent_mesh::{
    apply_update, ClusterEntry, ClusterState, Membership, MeshError, MAX_CLUSTERS,
    MEMBERSHIP_FORMAT_VERSION,
};
use ClusterState::*;

fn entry(name: &str, weight: f64, state: ClusterState) -> ClusterEntry {
    ClusterEntry {
        name: name.into(),
        leader: Some(format!("127.0.0.1:{}", 7000 + name.len())),
        weight,
        state,
    }
}

fn mesh(generation: u64, clusters: Vec<ClusterEntry>) -> Membership {
    Membership {
        generation,
        ..Membership::new("m1", clusters)
    }
}

fn code(r: Result<impl std::fmt::Debug, MeshError>) -> &'static str {
    r.expect_err("refused").code()
}

#[test]
fn a_valid_record_round_trips_through_its_stored_form() {
    let m = mesh(
        7,
        vec![
            entry("a", 1.0, Serving),
            entry("b", 2.5, Draining),
            ClusterEntry {
                leader: None,
                ..entry("c", 1.0, Joining)
            },
        ],
    );
    let bytes = m.encode();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(text.contains(r#""format_version":1"#), "{text}");
    assert!(text.contains(r#""state":"draining""#), "{text}");
    assert_eq!(Membership::decode(&bytes).unwrap(), m);
}

#[test]
fn validation_refuses_bad_names_weights_addresses_and_duplicates() {
    let ok = entry("a", 1.0, Serving);
    let bad_records = [
        (mesh(1, vec![entry("a b", 1.0, Serving)]), "INVALID_NAME"),
        (mesh(1, vec![entry("", 1.0, Serving)]), "INVALID_NAME"),
        (
            mesh(1, vec![entry(&"x".repeat(129), 1.0, Serving)]),
            "INVALID_NAME",
        ),
        (mesh(1, vec![ok.clone(), ok.clone()]), "DUPLICATE_CLUSTER"),
        (mesh(1, vec![entry("a", 0.0, Serving)]), "INVALID_WEIGHT"),
        (mesh(1, vec![entry("a", -1.0, Serving)]), "INVALID_WEIGHT"),
        (
            mesh(1, vec![entry("a", f64::NAN, Serving)]),
            "INVALID_WEIGHT",
        ),
        (
            mesh(1, vec![entry("a", f64::INFINITY, Serving)]),
            "INVALID_WEIGHT",
        ),
        (mesh(1, vec![entry("a", 2e9, Serving)]), "INVALID_WEIGHT"),
        (
            mesh(
                1,
                vec![ClusterEntry {
                    leader: Some("host :1".into()),
                    ..ok.clone()
                }],
            ),
            "INVALID_LEADER",
        ),
        (
            mesh(
                1,
                vec![ClusterEntry {
                    leader: Some(String::new()),
                    ..ok.clone()
                }],
            ),
            "INVALID_LEADER",
        ),
        (mesh(0, vec![ok.clone()]), "MALFORMED"),
        (
            Membership {
                mesh: "m/1".into(),
                ..mesh(1, vec![ok.clone()])
            },
            "INVALID_NAME",
        ),
        (
            mesh(
                1,
                (0..=MAX_CLUSTERS)
                    .map(|i| entry(&format!("c{i}"), 1.0, Serving))
                    .collect(),
            ),
            "TOO_MANY_CLUSTERS",
        ),
    ];
    for (record, expected) in bad_records {
        assert_eq!(code(record.validate()), expected, "{record:?}");
        // What validation refuses, decoding refuses too (JSON has no NaN or infinity: serde
        // writes null, which no reader takes for a weight).
        let non_finite = record.clusters.iter().any(|c| !c.weight.is_finite());
        let decoded = if non_finite { "MALFORMED" } else { expected };
        assert_eq!(code(Membership::decode(&record.encode())), decoded);
    }
}

#[test]
fn decoding_reports_a_newer_format_before_anything_else() {
    let newer = br#"{"format_version":2,"something":"else"}"#;
    assert_eq!(
        Membership::decode(newer),
        Err(MeshError::UnsupportedVersion {
            found: 2,
            supported: MEMBERSHIP_FORMAT_VERSION
        })
    );
    assert_eq!(code(Membership::decode(b"not json")), "MALFORMED");
    assert_eq!(
        code(Membership::decode(br#"{"format_version":1}"#)),
        "MALFORMED"
    );
    // Fields a later minor change may add are ignored.
    let extra = br#"{"format_version":1,"mesh":"m","generation":1,"extra":true,
        "clusters":[{"name":"a","leader":null,"weight":1.0,"state":"serving","objects":5}]}"#;
    assert_eq!(Membership::decode(extra).unwrap().clusters.len(), 1);
    let bad_state = br#"{"format_version":1,"mesh":"m","generation":1,
        "clusters":[{"name":"a","leader":null,"weight":1.0,"state":"gone"}]}"#;
    assert_eq!(code(Membership::decode(bad_state)), "MALFORMED");
}

#[test]
fn a_first_record_needs_a_serving_cluster() {
    let first = mesh(1, vec![entry("a", 1.0, Serving), entry("b", 1.0, Joining)]);
    assert_eq!(apply_update(None, first.clone()), Ok(first));
    // Given again to a backend that lost it: above the generation its members hold.
    let again = mesh(42, vec![entry("a", 1.0, Serving)]);
    assert_eq!(apply_update(None, again.clone()), Ok(again));
    assert_eq!(
        code(apply_update(None, mesh(1, vec![entry("a", 1.0, Joining)]))),
        "LAST_SERVING_CLUSTER"
    );
    assert_eq!(
        code(apply_update(None, mesh(1, vec![]))),
        "LAST_SERVING_CLUSTER"
    );
}

#[test]
fn an_update_must_follow_the_generation_it_was_built_from() {
    let current = mesh(5, vec![entry("a", 1.0, Serving)]);
    let next = mesh(6, vec![entry("a", 2.0, Serving), entry("b", 1.0, Joining)]);
    assert_eq!(apply_update(Some(&current), next.clone()), Ok(next.clone()));
    for stale in [5, 4, 7, u64::MAX] {
        let proposed = Membership {
            generation: stale,
            ..next.clone()
        };
        assert_eq!(
            apply_update(Some(&current), proposed),
            Err(MeshError::StaleGeneration {
                current: 5,
                proposed: stale
            })
        );
    }
    let other = Membership {
        mesh: "m2".into(),
        ..next
    };
    assert_eq!(code(apply_update(Some(&current), other)), "MESH_MISMATCH");
    let last = mesh(u64::MAX, vec![entry("a", 1.0, Serving)]);
    assert_eq!(
        code(apply_update(
            Some(&last),
            mesh(u64::MAX, vec![entry("a", 1.0, Serving)])
        )),
        "STALE_GENERATION"
    );
}

/// Every (from, to) pair, `None` for "not listed", against the state machine.
#[test]
fn clusters_move_only_along_the_join_and_drain_machine() {
    let states = [
        None,
        Some(Joining),
        Some(Serving),
        Some(Draining),
        Some(Leaving),
    ];
    let allowed = |from: Option<ClusterState>, to: Option<ClusterState>| -> bool {
        match (from, to) {
            (a, b) if a == b => true,
            (None, Some(Joining)) => true,
            (Some(Joining), None | Some(Serving) | Some(Leaving)) => true,
            (Some(Serving), Some(Draining)) => true,
            (Some(Draining), Some(Serving) | Some(Leaving)) => true,
            (Some(Leaving), None) => true,
            _ => false,
        }
    };
    for from in states {
        for to in states {
            // "keeper" stays serving so the last-serving rule does not interfere.
            let with = |gen, s: Option<ClusterState>| {
                let mut c = vec![entry("keeper", 1.0, Serving)];
                c.extend(s.map(|s| entry("x", 3.0, s)));
                mesh(gen, c)
            };
            let got = apply_update(Some(&with(1, from)), with(2, to));
            if allowed(from, to) {
                assert!(got.is_ok(), "{from:?} -> {to:?}: {got:?}");
            } else {
                assert_eq!(
                    got,
                    Err(MeshError::IllegalTransition {
                        cluster: "x".into(),
                        from,
                        to
                    }),
                    "{from:?} -> {to:?}"
                );
            }
        }
    }
}

#[test]
fn the_last_serving_cluster_cannot_start_draining() {
    let current = mesh(1, vec![entry("a", 1.0, Serving), entry("b", 1.0, Joining)]);
    let drained = mesh(2, vec![entry("a", 1.0, Draining), entry("b", 1.0, Joining)]);
    let err = apply_update(Some(&current), drained).unwrap_err();
    assert_eq!(err, MeshError::LastServingCluster);
    assert_eq!(err.class(), crescent_mesh::ErrorClass::User);
    let handed = mesh(2, vec![entry("a", 1.0, Draining), entry("b", 1.0, Serving)]);
    assert!(apply_update(Some(&current), handed).is_ok());
}

#[test]
fn error_messages_name_the_states() {
    let err = MeshError::IllegalTransition {
        cluster: "x".into(),
        from: Some(Serving),
        to: None,
    };
    assert_eq!(
        err.to_string(),
        "cluster \"x\" cannot go from serving to absent"
    );
    assert_eq!(err.code(), "ILLEGAL_TRANSITION");
}

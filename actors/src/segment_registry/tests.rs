//! Given/when/then tests: every command and every refusal, with the exact events.

use super::*;
use crate::aggregate::{DecodeError, DomainEvent};
use crate::testing::{decode_hex, given, NOW};

fn registered(
    owner: &str,
    endpoint: Option<&str>,
    incarnation: u64,
    at: i64,
) -> SegmentRegistryEvent {
    SegmentRegistryEvent::OwnerRegistered(OwnerRegistered {
        owner_id: owner.into(),
        endpoint: endpoint.map(Into::into),
        incarnation,
        at_ms: at,
    })
}

fn mounted(seg: &str, owner: &str, base: u64, size: u64, at: i64) -> SegmentRegistryEvent {
    SegmentRegistryEvent::SegmentMounted(SegmentMounted {
        segment_id: seg.into(),
        owner_id: owner.into(),
        base,
        size,
        transport: TransportKind::Tcp,
        at_ms: at,
    })
}

fn unmounted(seg: &str, owner: &str, reason: UnmountReason) -> SegmentRegistryEvent {
    SegmentRegistryEvent::SegmentUnmounted(SegmentUnmounted {
        segment_id: seg.into(),
        owner_id: owner.into(),
        reason,
        at_ms: NOW,
    })
}

fn register(owner: &str, endpoint: &str, incarnation: u64) -> SegmentRegistryCommand {
    SegmentRegistryCommand::RegisterOwner {
        owner_id: owner.into(),
        endpoint: endpoint.into(),
        incarnation,
    }
}

fn mount(seg: &str, owner: &str, base: u64, size: u64) -> SegmentRegistryCommand {
    SegmentRegistryCommand::MountSegment {
        segment_id: seg.into(),
        owner_id: owner.into(),
        base,
        size,
        transport: TransportKind::Tcp,
    }
}

fn invalid(field: &'static str, reason: &str) -> SegmentRegistryError {
    SegmentRegistryError::InvalidArgument {
        field,
        reason: reason.into(),
    }
}

#[test]
fn register_new_owner() {
    let state = given::<SegmentRegistry>(vec![])
        .when(register("o1", "10.0.0.1:7000", 1))
        .then(vec![registered("o1", Some("10.0.0.1:7000"), 1, NOW)]);
    assert_eq!(state.owner("o1").unwrap().registered_at_ms, NOW);
}

#[test]
fn register_same_incarnation_and_endpoint_is_idempotent() {
    given::<SegmentRegistry>(vec![registered("o1", Some("h:1"), 3, 5)])
        .when(register("o1", "h:1", 3))
        .then(vec![]);
}

#[test]
fn register_same_incarnation_other_endpoint_conflicts() {
    given::<SegmentRegistry>(vec![registered("o1", Some("h:1"), 3, 5)])
        .when(register("o1", "h:2", 3))
        .then_error(SegmentRegistryError::Conflict {
            what: "owner",
            id: "o1".into(),
            reason: "incarnation 3 is registered at endpoint \"h:1\", not \"h:2\"".into(),
        });
}

#[test]
fn register_fills_in_the_endpoint_of_an_implicit_owner_and_keeps_its_segments() {
    let state = given::<SegmentRegistry>(vec![
        registered("o1", None, 1, 5),
        mounted("s1", "o1", 0, 64, 5),
    ])
    .when(register("o1", "h:1", 1))
    .then(vec![registered("o1", Some("h:1"), 1, NOW)]);
    assert!(state.segment("s1").is_some());
    assert_eq!(state.owner("o1").unwrap().endpoint.as_deref(), Some("h:1"));
}

#[test]
fn register_higher_incarnation_unmounts_the_old_segments() {
    let state = given::<SegmentRegistry>(vec![
        registered("o1", Some("h:1"), 1, 5),
        registered("o2", Some("h:2"), 1, 5),
        mounted("s1", "o1", 0, 64, 5),
        mounted("s2", "o2", 0, 64, 5),
        mounted("s3", "o1", 64, 64, 5),
    ])
    .when(register("o1", "h:9", 2))
    .then(vec![
        unmounted("s1", "o1", UnmountReason::OwnerRestarted),
        unmounted("s3", "o1", UnmountReason::OwnerRestarted),
        registered("o1", Some("h:9"), 2, NOW),
    ]);
    assert_eq!(
        state.segments().map(|(id, _)| id).collect::<Vec<_>>(),
        ["s2"]
    );
    assert_eq!(state.owner("o1").unwrap().incarnation, 2);
}

#[test]
fn register_lower_incarnation_is_stale() {
    given::<SegmentRegistry>(vec![registered("o1", Some("h:1"), 4, 5)])
        .when(register("o1", "h:1", 3))
        .then_error(SegmentRegistryError::StaleIncarnation {
            owner_id: "o1".into(),
            current: 4,
            offered: 3,
        });
}

#[test]
fn register_refuses_bad_arguments() {
    given::<SegmentRegistry>(vec![])
        .when(register("", "h:1", 1))
        .then_error(invalid("owner_id", "must not be empty"));
    given::<SegmentRegistry>(vec![])
        .when(register("o1", "h:1", 0))
        .then_error(invalid("incarnation", "must be at least 1"));
    given::<SegmentRegistry>(vec![])
        .when(register("o1", "h:\n1", 1))
        .then_error(invalid("endpoint", "must not contain control characters"));
    given::<SegmentRegistry>(vec![])
        .when(register(&"a".repeat(257), "h:1", 1))
        .then_error(invalid("owner_id", "257 bytes, at most 256 allowed"));
    given::<SegmentRegistry>(vec![])
        .when(register(&"a".repeat(256), "h:1", 1))
        .then(vec![registered(&"a".repeat(256), Some("h:1"), 1, NOW)]);
}

#[test]
fn mount_on_a_known_owner() {
    given::<SegmentRegistry>(vec![registered("o1", Some("h:1"), 1, 5)])
        .when(SegmentRegistryCommand::MountSegment {
            segment_id: "s1".into(),
            owner_id: "o1".into(),
            base: 4096,
            size: 1 << 30,
            transport: TransportKind::TransferEngine,
        })
        .then(vec![SegmentRegistryEvent::SegmentMounted(SegmentMounted {
            segment_id: "s1".into(),
            owner_id: "o1".into(),
            base: 4096,
            size: 1 << 30,
            transport: TransportKind::TransferEngine,
            at_ms: NOW,
        })]);
}

#[test]
fn mount_on_an_unknown_owner_registers_it_implicitly() {
    let state = given::<SegmentRegistry>(vec![])
        .when(mount("s1", "o1", 0, 64))
        .then(vec![
            registered("o1", None, 1, NOW),
            mounted("s1", "o1", 0, 64, NOW),
        ]);
    assert_eq!(state.segments_of("o1").count(), 1);
}

#[test]
fn mount_identical_is_idempotent() {
    given::<SegmentRegistry>(vec![
        registered("o1", None, 1, 5),
        mounted("s1", "o1", 0, 64, 5),
    ])
    .when(mount("s1", "o1", 0, 64))
    .then(vec![]);
}

#[test]
fn mount_with_different_parameters_conflicts() {
    let history = || vec![registered("o1", None, 1, 5), mounted("s1", "o1", 0, 64, 5)];
    let conflict = SegmentRegistryError::Conflict {
        what: "segment",
        id: "s1".into(),
        reason: "already mounted by owner \"o1\" at base 0 size 64 over Tcp".into(),
    };
    given::<SegmentRegistry>(history())
        .when(mount("s1", "o1", 0, 128))
        .then_error(conflict.clone());
    given::<SegmentRegistry>(history())
        .when(mount("s1", "o2", 0, 64))
        .then_error(conflict.clone());
    given::<SegmentRegistry>(history())
        .when(SegmentRegistryCommand::MountSegment {
            segment_id: "s1".into(),
            owner_id: "o1".into(),
            base: 0,
            size: 64,
            transport: TransportKind::Embedded,
        })
        .then_error(conflict);
}

#[test]
fn mount_refuses_bad_arguments() {
    given::<SegmentRegistry>(vec![])
        .when(mount("s1", "o1", 0, 0))
        .then_error(invalid("size", "must be greater than 0"));
    given::<SegmentRegistry>(vec![])
        .when(mount("s1", "o1", u64::MAX, 1))
        .then_error(invalid(
            "size",
            &format!("base {} + size 1 overflows the address space", u64::MAX),
        ));
    given::<SegmentRegistry>(vec![])
        .when(mount("", "o1", 0, 1))
        .then_error(invalid("segment_id", "must not be empty"));
    given::<SegmentRegistry>(vec![])
        .when(mount("s1", "o\u{7f}", 0, 1))
        .then_error(invalid("owner_id", "must not contain control characters"));
    given::<SegmentRegistry>(vec![])
        .when(mount(&"s".repeat(300), "o1", 0, 1))
        .then_error(invalid("segment_id", "300 bytes, at most 256 allowed"));
    // The highest range that does not overflow is fine.
    given::<SegmentRegistry>(vec![registered("o1", None, 1, 5)])
        .when(mount("s1", "o1", u64::MAX - 1, 1))
        .then(vec![mounted("s1", "o1", u64::MAX - 1, 1, NOW)]);
}

#[test]
fn unmount_a_mounted_segment() {
    let state = given::<SegmentRegistry>(vec![
        registered("o1", None, 1, 5),
        mounted("s1", "o1", 0, 64, 5),
    ])
    .when(SegmentRegistryCommand::UnmountSegment {
        segment_id: "s1".into(),
    })
    .then(vec![unmounted("s1", "o1", UnmountReason::Requested)]);
    assert_eq!(state.segment_count(), 0);
    assert!(state.owner("o1").is_some(), "the owner stays registered");
}

#[test]
fn unmount_unknown_segment_is_not_found() {
    given::<SegmentRegistry>(vec![])
        .when(SegmentRegistryCommand::UnmountSegment {
            segment_id: "s1".into(),
        })
        .then_error(SegmentRegistryError::NotFound {
            what: "segment",
            id: "s1".into(),
        });
    given::<SegmentRegistry>(vec![])
        .when(SegmentRegistryCommand::UnmountSegment {
            segment_id: "".into(),
        })
        .then_error(invalid("segment_id", "must not be empty"));
}

#[test]
fn remove_owner_unmounts_its_segments_first() {
    let state = given::<SegmentRegistry>(vec![
        registered("o1", Some("h:1"), 1, 5),
        mounted("s1", "o1", 0, 64, 5),
        mounted("s2", "o1", 64, 64, 5),
    ])
    .when(SegmentRegistryCommand::RemoveOwner {
        owner_id: "o1".into(),
        reason: "decommissioned".into(),
    })
    .then(vec![
        unmounted("s1", "o1", UnmountReason::OwnerRemoved),
        unmounted("s2", "o1", UnmountReason::OwnerRemoved),
        SegmentRegistryEvent::OwnerRemoved(OwnerRemoved {
            owner_id: "o1".into(),
            reason: "decommissioned".into(),
            at_ms: NOW,
        }),
    ]);
    assert_eq!(state, SegmentRegistry::default());
}

#[test]
fn remove_owner_refusals() {
    given::<SegmentRegistry>(vec![])
        .when(SegmentRegistryCommand::RemoveOwner {
            owner_id: "o1".into(),
            reason: String::new(),
        })
        .then_error(SegmentRegistryError::NotFound {
            what: "owner",
            id: "o1".into(),
        });
    given::<SegmentRegistry>(vec![registered("o1", None, 1, 5)])
        .when(SegmentRegistryCommand::RemoveOwner {
            owner_id: "o1".into(),
            reason: "x".repeat(MAX_REASON_BYTES + 1),
        })
        .then_error(invalid("reason", "1025 bytes, at most 1024 allowed"));
}

#[test]
fn error_codes_are_stable() {
    assert_eq!(invalid("x", "y").code().as_str(), "INVALID_ARGUMENT");
    assert_eq!(
        SegmentRegistryError::NotFound {
            what: "segment",
            id: "s".into()
        }
        .code()
        .as_str(),
        "NOT_FOUND"
    );
    assert_eq!(
        SegmentRegistryError::Conflict {
            what: "segment",
            id: "s".into(),
            reason: String::new()
        }
        .code()
        .as_str(),
        "CONFLICT"
    );
    assert_eq!(
        SegmentRegistryError::StaleIncarnation {
            owner_id: "o".into(),
            current: 2,
            offered: 1
        }
        .code()
        .as_str(),
        "STALE_GENERATION"
    );
}

#[test]
fn segment_mounted_v1_upcasts_to_v2_with_tcp() {
    let v1 = SegmentMountedV1 {
        segment_id: "s1".into(),
        owner_id: "o1".into(),
        base: 7,
        size: 9,
        at_ms: 11,
    };
    let payload = rmp_serde::to_vec_named(&v1).unwrap();
    let decoded = SegmentRegistryEvent::decode("segment_mounted", 1, &payload).unwrap();
    assert_eq!(decoded, mounted("s1", "o1", 7, 9, 11));
    // And a v2 payload read as v2 keeps its transport.
    let v2 = SegmentRegistryEvent::SegmentMounted(SegmentMounted {
        transport: TransportKind::Embedded,
        ..match mounted("s1", "o1", 7, 9, 11) {
            SegmentRegistryEvent::SegmentMounted(m) => m,
            _ => unreachable!(),
        }
    });
    let back = SegmentRegistryEvent::decode(v2.kind(), 2, &v2.encode_at(2).unwrap()).unwrap();
    assert_eq!(back, v2);
}

#[test]
fn decode_refuses_unknown_kinds_versions_and_garbage() {
    let e = registered("o1", Some("h"), 1, 1);
    assert_eq!(
        SegmentRegistryEvent::decode("owner_exploded", 1, &e.encode()),
        Err(DecodeError::UnknownKind {
            aggregate: "segment_registry",
            kind: "owner_exploded".into()
        })
    );
    assert_eq!(
        SegmentRegistryEvent::decode("owner_registered", 2, &e.encode()),
        Err(DecodeError::UnsupportedVersion {
            kind: "owner_registered".into(),
            version: 2,
            supported: 1
        })
    );
    assert!(matches!(
        SegmentRegistryEvent::decode("owner_registered", 0, &e.encode()),
        Err(DecodeError::UnsupportedVersion { version: 0, .. })
    ));
    assert!(matches!(
        SegmentRegistryEvent::decode("owner_registered", 1, b"\xc1garbage"),
        Err(DecodeError::Malformed { .. })
    ));
    // A payload of another kind, of another shape, does not decode.
    let mounted = SegmentRegistryEvent::decode("segment_mounted", 2, &e.encode());
    assert!(
        matches!(mounted, Err(DecodeError::Malformed { .. })),
        "{mounted:?}"
    );
}

#[test]
fn every_event_kind_round_trips_and_is_in_the_schema() {
    let events = vec![
        registered("o1", Some("h:1"), 3, 1),
        registered("o2", None, 1, 2),
        mounted("s1", "o1", 0, 64, 3),
        unmounted("s1", "o1", UnmountReason::OwnerRestarted),
        SegmentRegistryEvent::OwnerRemoved(OwnerRemoved {
            owner_id: "o1".into(),
            reason: "bye".into(),
            at_ms: 4,
        }),
    ];
    for e in events {
        assert!(SegmentRegistryEvent::schema().contains(&(e.kind(), e.version())));
        assert_eq!(
            SegmentRegistryEvent::decode(e.kind(), e.version(), &e.encode()),
            Ok(e)
        );
    }
}

#[test]
fn payloads_are_compact_and_the_named_form_still_decodes() {
    let event = registered("o1", None, 1, 1);
    let payload = event.encode();
    let value: serde_json::Value = rmp_serde::from_slice(&payload).unwrap();
    assert!(value.is_array(), "compact form: {value}");
    assert_eq!(value[0], "o1");
    let SegmentRegistryEvent::OwnerRegistered(inner) = &event else {
        unreachable!()
    };
    let named = rmp_serde::to_vec_named(inner).unwrap();
    assert_eq!(
        SegmentRegistryEvent::decode(event.kind(), event.version(), &named),
        Ok(event)
    );
}

/// The journal form is pinned: journals of earlier builds must replay (docs/architecture.md,
/// "Aggregates"), and the schema and write floor are what the HA handshake compares (docs/ha.md,
/// "Event versions in a mixed pair"). `segment_mounted` is pinned at each version it was
/// written at: v1 (decode only), v2, and v3 in the upgrade test's build.
#[test]
fn the_schema_and_the_journal_form_of_every_kind_are_pinned() {
    let mounted_version = if cfg!(feature = "upgrade-test-schema") {
        3
    } else {
        2
    };
    assert_eq!(
        SegmentRegistryEvent::schema(),
        &[
            ("owner_registered", 1),
            ("segment_mounted", mounted_version),
            ("segment_unmounted", 1),
            ("owner_removed", 1),
        ]
    );
    let floor: &[(&str, u16)] = if cfg!(feature = "upgrade-test-schema") {
        &[("segment_mounted", 2)]
    } else {
        &[]
    };
    assert_eq!(SegmentRegistryEvent::write_floor(), floor);
    let others = [
        registered("o1", Some("h:1"), 3, 1),
        registered("o2", None, 1, 2),
        unmounted("s1", "o1", UnmountReason::OwnerRestarted),
        SegmentRegistryEvent::OwnerRemoved(OwnerRemoved {
            owner_id: "o1".into(),
            reason: "bye".into(),
            at_ms: 4,
        }),
    ];
    crate::testing::assert_journal_form(
        &others,
        &[
            ("owner_registered", 1, "94a26f31a3683a310301"),
            ("owner_registered", 1, "94a26f32c00102"),
            (
                "segment_unmounted",
                1,
                "94a27331a26f31af6f776e65725f726573746172746564cf0000018bcfe56800",
            ),
            ("owner_removed", 1, "93a26f31a362796504"),
        ],
    );
    let engine = SegmentRegistryEvent::SegmentMounted(SegmentMounted {
        transport: TransportKind::TransferEngine,
        ..match mounted("s1", "o1", 4096, 64, 3) {
            SegmentRegistryEvent::SegmentMounted(m) => m,
            _ => unreachable!(),
        }
    });
    let v2 = "96a27331a26f31cd100040af7472616e736665725f656e67696e6503";
    assert_eq!(engine.encode_at(2).map(hex::encode).as_deref(), Some(v2));
    assert_eq!(decode_hex("segment_mounted", 2, v2), Ok(engine.clone()));
    // v1, in the named form its writers used and in the compact one.
    for v1 in [
        "85aa7365676d656e745f6964a27331a86f776e65725f6964a26f31a462617365cd1000a473697a6540a561745f6d7303",
        "95a27331a26f31cd10004003",
    ] {
        let tcp = mounted("s1", "o1", 4096, 64, 3);
        assert_eq!(decode_hex("segment_mounted", 1, v1), Ok(tcp));
    }
    #[cfg(feature = "upgrade-test-schema")]
    {
        let v3 = "95a27331a26f3192cd1000cd1040af7472616e736665725f656e67696e6503";
        assert_eq!(engine.encode_at(3).map(hex::encode).as_deref(), Some(v3));
        assert_eq!(decode_hex("segment_mounted", 3, v3), Ok(engine.clone()));
    }
    assert_eq!(engine.encode_at(mounted_version), Some(engine.encode()));
}

//! World routing, fail-closed decoding and snapshot sections.

use crescent_journal::{EventData, NewRecord, Record, StreamId};
use crescent_snapshot::{Position, ReplayState, Section, SectionSet};

use super::*;
use crate::event_codec::{new_record, RecordChain};
use crate::segment_registry::{
    OwnerRegistered, SegmentMounted, SegmentRegistryEvent, TransportKind, INSTANCE_ID,
};

fn owner(id: &str) -> SegmentRegistryEvent {
    SegmentRegistryEvent::OwnerRegistered(OwnerRegistered {
        owner_id: id.into(),
        endpoint: Some(format!("{id}:1")),
        incarnation: 1,
        at_ms: 10,
    })
}

fn segment(id: &str, owner: &str) -> SegmentRegistryEvent {
    SegmentRegistryEvent::SegmentMounted(SegmentMounted {
        segment_id: id.into(),
        owner_id: owner.into(),
        base: 0,
        size: 4096,
        transport: TransportKind::Tcp,
        at_ms: 11,
    })
}

fn records(events: &[SegmentRegistryEvent]) -> Vec<Record> {
    let mut chain = RecordChain::default();
    events
        .iter()
        .map(|e| chain.push(1, new_record::<SegmentRegistry>(INSTANCE_ID, e, 100)))
        .collect()
}

fn world_of(recs: &[Record]) -> World {
    let mut w = World::standard();
    for r in recs {
        w.apply(r).unwrap();
    }
    w
}

#[test]
fn apply_routes_by_stream_kind_and_tracks_position() {
    let recs = records(&[owner("o1"), segment("s1", "o1")]);
    let w = world_of(&recs);
    assert_eq!(w.position(), Position::of(&recs[1]));
    let reg = w.get::<SegmentRegistry>(INSTANCE_ID).unwrap();
    assert_eq!(reg.segment("s1").unwrap().owner_id, "o1");
    assert_eq!(w.iter::<SegmentRegistry>().count(), 1);
    assert_eq!(w.counts()[STREAM], 1);
}

const STREAM: &str = "segment_registry";

#[test]
fn unknown_stream_kind_fails_closed_and_leaves_the_world_unchanged() {
    let mut chain = RecordChain::default();
    let rec = chain.push(
        1,
        NewRecord {
            stream: StreamId::new("weight_revision", "r1"),
            event: EventData {
                kind: "revision_created".into(),
                version: 1,
                payload: vec![0x80],
            },
            timestamp_ms: 1,
        },
    );
    let mut w = World::standard();
    let err = w.apply(&rec).unwrap_err();
    assert!(
        matches!(err, WorldError::UnknownStream { seq: 1, ref kind } if kind == "weight_revision"),
        "{err}"
    );
    assert_eq!(w, World::standard());
}

#[test]
fn undecodable_event_fails_closed() {
    let mut recs = records(&[owner("o1")]);
    recs[0].event.version = 9;
    let mut w = World::standard();
    let err = w.apply(&recs[0]).unwrap_err();
    assert!(matches!(err, WorldError::Decode { seq: 1, .. }), "{err}");
    assert!(err.to_string().contains("version 9"), "{err}");
    assert_eq!(w.last_seq(), 0);
}

#[test]
fn event_json_renders_the_upcast_event_of_a_registered_kind() {
    let v1 = crate::segment_registry::SegmentMountedV1 {
        segment_id: "s1".into(),
        owner_id: "o1".into(),
        base: 0,
        size: 4096,
        at_ms: 11,
    };
    let mut chain = RecordChain::default();
    let rec = chain.push(
        1,
        NewRecord {
            stream: StreamId::new(SegmentRegistry::KIND, INSTANCE_ID),
            event: EventData {
                kind: "segment_mounted".into(),
                version: 1,
                payload: crate::event_payload::to_msgpack(&v1),
            },
            timestamp_ms: 1,
        },
    );
    let w = World::standard();
    let json = w.event_json(rec.as_ref()).unwrap();
    assert_eq!(json["kind"], "segment_mounted");
    // The current version: 3 in the rolling-upgrade test's build.
    let current = if cfg!(feature = "upgrade-test-schema") {
        3
    } else {
        2
    };
    assert_eq!(json["version"], current);
    assert_eq!(json["data"]["segment_id"], "s1");
    assert_eq!(json["data"]["transport"], "tcp");

    let mut bad = rec.clone();
    bad.event.version = 9;
    let err = w.event_json(bad.as_ref()).unwrap_err();
    assert!(matches!(err, WorldError::Decode { seq: 1, .. }), "{err}");
    bad.stream = StreamId::new("weight_revision", "r1");
    let err = w.event_json(bad.as_ref()).unwrap_err();
    assert!(matches!(err, WorldError::UnknownStream { .. }), "{err}");
}

#[test]
fn records_must_be_contiguous() {
    let recs = records(&[owner("o1"), owner("o2")]);
    let mut w = World::standard();
    assert!(matches!(
        w.apply(&recs[1]),
        Err(WorldError::OutOfOrder {
            expected: 1,
            found: 2
        })
    ));
    w.apply(&recs[0]).unwrap();
    assert!(matches!(
        w.apply(&recs[0]),
        Err(WorldError::OutOfOrder {
            expected: 2,
            found: 1
        })
    ));
}

#[test]
fn sections_round_trip() {
    let recs = records(&[owner("o1"), segment("s1", "o1"), owner("o2")]);
    let w = world_of(&recs);
    let sections = w.to_sections().unwrap();
    assert_eq!(sections[0].name, META_SECTION);
    assert!(!sections[0].optional);
    assert!(sections[1].optional);
    let set = SectionSet::from_sections(sections, &w.section_specs()).unwrap();
    let mut restored = World::standard();
    restored.load_sections(&w.position(), set).unwrap();
    assert_eq!(restored, w);
}

#[test]
fn missing_aggregate_section_means_empty_state() {
    let w = world_of(&records(&[owner("o1")]));
    let sections: Vec<Section> = w
        .to_sections()
        .unwrap()
        .into_iter()
        .filter(|s| s.name == META_SECTION)
        .collect();
    let set = SectionSet::from_sections(sections, &w.section_specs()).unwrap();
    let mut restored = world_of(&records(&[owner("stale")]));
    restored.load_sections(&w.position(), set).unwrap();
    assert!(restored.table::<SegmentRegistry>().unwrap().is_empty());
    assert_eq!(restored.position(), w.position());
}

#[test]
fn meta_must_agree_with_the_header() {
    let w = world_of(&records(&[owner("o1")]));
    let set = SectionSet::from_sections(w.to_sections().unwrap(), &w.section_specs()).unwrap();
    let wrong = Position {
        seq: 7,
        ..w.position()
    };
    let err = World::standard().load_sections(&wrong, set).unwrap_err();
    assert!(err.to_string().contains("section meta"), "{err}");
}

#[test]
fn older_aggregate_schema_is_refused() {
    let w = world_of(&records(&[owner("o1")]));
    let mut sections = w.to_sections().unwrap();
    sections[1].schema = 0;
    let set = SectionSet::from_sections(sections, &w.section_specs()).unwrap();
    let err = World::standard()
        .load_sections(&w.position(), set)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("section segment_registry: schema 0"),
        "{err}"
    );
}

#[test]
fn garbage_section_body_is_refused() {
    let w = world_of(&records(&[owner("o1")]));
    let mut sections = w.to_sections().unwrap();
    sections[1].body = vec![0xc1, 0x00];
    let set = SectionSet::from_sections(sections, &w.section_specs()).unwrap();
    assert!(matches!(
        World::standard().load_sections(&w.position(), set),
        Err(WorldError::SectionDecode { .. })
    ));
}

#[test]
fn json_shows_every_aggregate() {
    let w = world_of(&records(&[owner("o1"), segment("s1", "o1")]));
    let j = w.to_json().unwrap();
    assert_eq!(j["position"]["seq"], 2);
    assert_eq!(j["position"]["digest"].as_str().unwrap().len(), 64);
    let reg = &j["aggregates"]["segment_registry"]["cluster"];
    assert_eq!(reg["segments"]["s1"]["transport"], "tcp");
    assert_eq!(reg["owners"]["o1"]["endpoint"], "o1:1");
}

#[test]
fn kinds_register_once() {
    let mut w = World::standard();
    assert!(matches!(
        w.register::<SegmentRegistry>(),
        Err(WorldError::DuplicateKind("segment_registry"))
    ));
    assert_eq!(w.kinds().collect::<Vec<_>>(), ["segment_registry"]);
    assert!(World::empty().table::<SegmentRegistry>().is_none());
}

#[test]
fn equality_sees_position_and_content() {
    let a = world_of(&records(&[owner("o1")]));
    let b = world_of(&records(&[owner("o2")]));
    assert_ne!(a, b);
    assert_eq!(a.clone(), a);
    assert_ne!(a, World::standard());
}

#[test]
fn replay_capabilities_cover_what_is_written() {
    let ours = World::standard().event_schemas();
    assert!(ours.iter().any(|(k, v)| k == "segment_mounted" && *v >= 2));
    assert_eq!(World::can_replay(&ours, &ours), Ok(()));
    let mut older = ours.clone();
    for (k, v) in &mut older {
        if k == "segment_mounted" {
            *v = 1;
        }
    }
    let err = World::can_replay(&ours, &older).unwrap_err();
    assert!(
        err.contains("segment_mounted") && err.contains("upgrade the standby"),
        "{err}"
    );
    // a newer standby replays an older active's events
    assert_eq!(World::can_replay(&older, &ours), Ok(()));
    let missing: Vec<_> = ours.iter().skip(1).cloned().collect();
    assert!(World::can_replay(&ours, &missing).is_err());
}

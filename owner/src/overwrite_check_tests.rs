use std::sync::Arc;

use crescent_wire::store::{DataType, ObjectId};
use prometheus::IntGauge;

use super::*;

const SEG: &str = "seg-a";

fn table() -> OwnershipTable {
    let t = OwnershipTable::new(IntGauge::new("t_owned_check", "test").unwrap());
    t.serve_segment(SEG, 1 << 16);
    t.serve_segment("seg-b", 1 << 16);
    t
}

fn write(memory: &SegmentMemory, offset: u64, bytes: &[u8]) {
    memory
        .try_with_write(offset, bytes.len() as u64, |dst| dst.copy_from_slice(bytes))
        .unwrap()
        .expect("nobody holds the range");
}

fn replica(key: &str, put_id: u64, segment: &str, offset: u64, value: &[u8]) -> OwnedReplica {
    OwnedReplica {
        id: ObjectId::new(key),
        put_id,
        segment_id: Arc::from(segment),
        offset,
        length: value.len() as u64,
        checksum: Some(crescent_checksum::crc32c(value)),
        data_type: DataType::default(),
    }
}

#[test]
fn replicas_whose_bytes_changed_are_dropped_and_the_rest_kept() {
    let memory = SegmentMemory::allocate(1 << 16).unwrap();
    let t = table();
    let kept = replica("kept", 1, SEG, 0, b"the bytes of kept");
    write(&memory, 0, b"the bytes of kept");
    // `reused` was written at 4096, then the address got other bytes (a promotion).
    let reused = replica("reused", 2, SEG, 4096, b"the bytes of reused");
    write(&memory, 4096, b"someone else's bytes");
    let unchecked = OwnedReplica {
        checksum: None,
        ..replica("unchecked", 3, SEG, 8192, b"anything")
    };
    // Another segment's replica is not this memory's to judge.
    let elsewhere = replica("elsewhere", 4, "seg-b", 0, b"not in this memory");
    for r in [&kept, &reused, &unchecked, &elsewhere] {
        t.record(r.clone());
    }

    let report = forget_overwritten(&t, SEG, &memory);

    assert_eq!(
        report,
        OverwriteCheck {
            intact: 1,
            overwritten: 1,
            unverifiable: 1,
        }
    );
    assert_eq!(t.lookup(&ObjectId::new("kept"), SEG), Some(kept));
    assert_eq!(t.lookup(&ObjectId::new("reused"), SEG), None);
    assert_eq!(t.lookup(&ObjectId::new("unchecked"), SEG), Some(unchecked));
    assert_eq!(
        t.lookup(&ObjectId::new("elsewhere"), "seg-b"),
        Some(elsewhere)
    );
    // Checking again finds nothing more to drop.
    let again = forget_overwritten(&t, SEG, &memory);
    assert_eq!(again.overwritten, 0);
    assert_eq!(again.intact, 1);
}

#[test]
fn one_flipped_byte_is_an_overwrite_and_a_range_outside_the_region_is_unverifiable() {
    let memory = SegmentMemory::allocate(1 << 16).unwrap();
    let value = vec![7u8; 1000];
    let r = replica("k", 1, SEG, 100, &value);
    write(&memory, 100, &value);
    assert_eq!(check_replica(&memory, &r), ReplicaBytes::Intact);
    write(&memory, 600, &[8]);
    assert_eq!(check_replica(&memory, &r), ReplicaBytes::Overwritten);
    let outside = OwnedReplica {
        offset: (1 << 16) - 10,
        ..r
    };
    assert_eq!(check_replica(&memory, &outside), ReplicaBytes::Unverifiable);
}

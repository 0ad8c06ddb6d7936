//! Crash-window tests: a scripted lifecycle (put with offload, materialize, evict to
//! cold-only, restore, overwrite, offload again, delete) is killed at every ledger command in
//! turn (after reserve, after backend write, after PayloadWritten, after route commit, after
//! usage commit, during reclaim, ...) and before each route CAS. After each crash the state is
//! rebuilt from the persisted events alone and reconciliation must converge: usage equals
//! the sum of live materialized lengths, no leak or underflow, every object reads back
//! byte-identical.

mod harness;

use harness::{content, is_crash, World};

fn script(world: &mut World, step: usize) -> Result<(), crescent_cold::ColdError> {
    match step {
        0 => world.put("a", 5000, 1, true),
        1 => world.put("b", 70_000, 2, false),
        2 => world.offload("a"),
        3 => world.offload("b"),
        4 => world.evict("a"),
        5 => world.evict("b"),
        6 => world.evict("b"),
        7 => world.restore("a"),
        8 => world.put("a", 3000, 1, true),
        9 => world.offload("a"),
        10 => world.evict("a"),
        11 => world.delete("b"),
        12 => world.put("c", 100, 1, true),
        13 => world.delete("c"),
        _ => unreachable!(),
    }
}

const STEPS: usize = 14;

/// Runs the script with a crash armed at `crash_at` ledger commands (and, when `cas`, the
/// first route CAS after that point failing); returns whether the crash was hit.
fn run_with_crash(crash_at: usize, cas: bool) -> bool {
    let mut world = World::new();
    world.ledger.crash_in = Some(crash_at);
    let mut hit = false;
    for step in 0..STEPS {
        // A step hit by a crash is retried after recovery, as its client would.
        loop {
            match script(&mut world, step) {
                Ok(()) => break,
                Err(e) if is_crash(&e) => {
                    hit = true;
                    world.crash_and_recover(true);
                    world.check_converged();
                    if cas && world.crashes == 1 {
                        world.store.fail_next_cas = true;
                    }
                }
                Err(e) => panic!("crash at {crash_at} (cas {cas}), step {step}: {e}"),
            }
        }
        world.check_readable();
    }
    world.ledger.crash_in = None;
    world.store.fail_next_cas = false;
    world.crash_and_recover(false);
    world.check_converged();
    // The script's final state: "a" holds content 4 (3000 bytes) and is cold-only.
    let a = world.store.routes["a"].clone();
    assert!(a.is_cold_only(), "crash at {crash_at}: {a:?}");
    assert!(
        world.read(&a) == content(a.content_op, 3000),
        "crash at {crash_at}: content of a"
    );
    assert_eq!(world.ledger.state.used(), 3000);
    world.delete_all_and_check_empty();
    hit
}

#[test]
fn every_crash_window_converges() {
    let mut windows = 0;
    for crash_at in 0.. {
        if !run_with_crash(crash_at, false) {
            break;
        }
        windows += 1;
    }
    assert!(
        windows >= 20,
        "the script crosses {windows} ledger commands"
    );
}

#[test]
fn every_crash_window_followed_by_a_lost_route_cas_converges() {
    for crash_at in 0..40 {
        run_with_crash(crash_at, true);
    }
}

#[test]
fn a_cold_only_object_is_served_from_the_journal_alone() {
    let mut world = World::new();
    world.put("k", 12_345, 1, true).unwrap();
    world.offload("k").unwrap();
    world.evict("k").unwrap();
    let route = world.store.routes["k"].clone();
    assert!(route.is_cold_only());
    // Failover: a new process with no owner replay knows only the journal.
    let recovered = world.ledger.recover();
    let cold = crescent_cold::driver::rebuild_cold_routes([&recovered.state]);
    let r = &cold["k"];
    let io =
        crescent_cold::local_dir::LocalDirDevice::open(harness::DEVICE, world.io.root()).unwrap();
    assert!(
        io.read(&r.locator, r.length, r.checksum).unwrap() == content(route.content_op, 12_345)
    );
}

#[test]
fn a_corrupted_cold_file_fails_the_read_with_a_checksum_error() {
    let mut world = World::new();
    world.put("k", 4096, 1, true).unwrap();
    world.offload("k").unwrap();
    world.evict("k").unwrap();
    let route = world.store.routes["k"].clone();
    let locator = route.cold.as_ref().unwrap().locator().unwrap().to_string();
    let path = world.io.path_of(&locator).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x80;
    std::fs::write(&path, bytes).unwrap();
    let err = crescent_cold::driver::read_cold(&world.io, &route).unwrap_err();
    assert!(
        matches!(err, crescent_cold::ColdError::ChecksumMismatch { .. }),
        "{err}"
    );
    assert_eq!(err.code().as_str(), "INTERNAL");
}

#[test]
fn overwrite_racing_usage_commit_releases_exactly_once_either_way() {
    use crescent_cold::device::{ColdOpState, ReleasedFrom};
    for commit_first in [false, true] {
        let mut world = World::new();
        world.put("k", 1000, 1, true).unwrap();
        // Reserve, PayloadWritten, CommitRoute: paused before CommitUsage.
        world.offload_partially("k", 3).unwrap();
        let op = world.store.routes["k"].cold.as_ref().unwrap().cold_op();
        assert_eq!(
            world.ledger.state.operation(&op).unwrap().state,
            ColdOpState::RouteCommitted
        );
        assert!(world.evict("k").is_ok(), "refused (checked inside)");
        assert_eq!(
            world.store.routes["k"].replicas.len(),
            1,
            "the last hot replica stays"
        );
        if commit_first {
            world.offload("k").unwrap();
        }
        world.put("k", 500, 1, false).unwrap();
        let reclaim = world.ledger.state.operation(&op).unwrap().reclaim.unwrap();
        let expected = if commit_first {
            ReleasedFrom::Used
        } else {
            ReleasedFrom::Reserved
        };
        assert_eq!(
            world.ledger.state.reclaim(&reclaim).unwrap().released_from,
            Some(expected)
        );
        assert_eq!(world.ledger.releases_of(op), 1);
        world.crash_and_recover(false);
        world.check_converged();
        assert_eq!(
            (world.ledger.state.used(), world.ledger.state.reserved()),
            (0, 0)
        );
    }
}

#[test]
fn reconcile_deletes_payloads_no_operation_holds_and_reports_missing_ones() {
    let mut world = World::new();
    world.put("k", 2000, 1, true).unwrap();
    world.offload("k").unwrap();
    // A payload of an operation the journal does not know (e.g. pruned), left on the device.
    let stray = crescent_cold::ColdOpId(uuid::Uuid::from_u128(0xdead));
    world.io.write(stray, b"stray").unwrap();
    let hot = world.store.contents.clone();
    let report =
        crescent_cold::driver::reconcile(&mut world.ledger, &world.io, &mut world.store, &hot, 10)
            .unwrap();
    assert_eq!(report.orphan_files_deleted, 1);
    assert!(!world
        .io
        .exists(&crescent_cold::local_dir::locator_for(stray))
        .unwrap());
    world.check_converged();
    // The live payload vanishes from the device: reconciliation reports it.
    let op = world.store.routes["k"].cold.as_ref().unwrap().cold_op();
    world
        .io
        .delete(&crescent_cold::local_dir::locator_for(op))
        .unwrap();
    let report =
        crescent_cold::driver::reconcile(&mut world.ledger, &world.io, &mut world.store, &hot, 10)
            .unwrap();
    assert_eq!(report.missing_payloads, vec![op]);
}

//! Property test over random interleavings of put, overwrite, delete, offload, evict, restore
//! and crashes: the last readable copy is never removed, usage never goes negative (the
//! accounting identity holds after every event), each cold operation ends in exactly one
//! terminal outcome, and reconciliation after a crash converges.

mod harness;

use harness::{is_crash, World};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    Put {
        key: u8,
        len: u16,
        replicas: u8,
        offload: bool,
    },
    Delete {
        key: u8,
    },
    Offload {
        key: u8,
    },
    /// A slow worker pausing after `commands` ledger commands of the offload.
    OffloadPartially {
        key: u8,
        commands: u8,
    },
    Evict {
        key: u8,
    },
    Restore {
        key: u8,
    },
    /// The `after`-th next ledger command fails unpersisted (the process dies there); the
    /// route CAS fails too when `cas`.
    Crash {
        after: u8,
        cas: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let key = 0u8..4;
    prop_oneof![
        3 => (key.clone(), 1u16..6000, 1u8..3, any::<bool>()).prop_map(|(key, len, replicas, offload)| Step::Put { key, len, replicas, offload }),
        1 => key.clone().prop_map(|key| Step::Delete { key }),
        3 => key.clone().prop_map(|key| Step::Offload { key }),
        2 => (key.clone(), 0u8..6).prop_map(|(key, commands)| Step::OffloadPartially { key, commands }),
        3 => key.clone().prop_map(|key| Step::Evict { key }),
        2 => key.prop_map(|key| Step::Restore { key }),
        1 => (0u8..6, any::<bool>()).prop_map(|(after, cas)| Step::Crash { after, cas }),
    ]
}

fn run(world: &mut World, step: &Step) {
    let name = |k: &u8| format!("key-{k}");
    let result = match step {
        Step::Put {
            key,
            len,
            replicas,
            offload,
        } => world.put(&name(key), *len as usize, *replicas as usize, *offload),
        Step::Delete { key } => world.delete(&name(key)),
        Step::Offload { key } => world.offload(&name(key)),
        Step::OffloadPartially { key, commands } => {
            world.offload_partially(&name(key), *commands as usize)
        }
        Step::Evict { key } => world.evict(&name(key)),
        Step::Restore { key } => world.restore(&name(key)),
        Step::Crash { after, cas } => {
            world.ledger.crash_in = Some(*after as usize);
            world.store.fail_next_cas = *cas;
            Ok(())
        }
    };
    match result {
        Ok(()) => {}
        Err(e) if is_crash(&e) => {
            let temp = matches!(step, Step::Put { offload: true, .. } | Step::Offload { .. });
            world.crash_and_recover(temp);
        }
        Err(e) => panic!("{step:?} failed: {e}"),
    }
    world.check_readable();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings_keep_the_cold_tier_invariants(steps in prop::collection::vec(step(), 1..40)) {
        let mut world = World::new();
        for s in &steps {
            run(&mut world, s);
        }
        // A crash armed but not hit: disarm it, then recover as after any restart.
        world.ledger.crash_in = None;
        world.store.fail_next_cas = false;
        world.crash_and_recover(false);
        world.check_converged();
        world.delete_all_and_check_empty();
    }
}

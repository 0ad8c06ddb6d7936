//! The scheduler's guarantees, by exact pop order.

use std::collections::HashMap;

use proptest::prelude::*;

use crate::{Budget, Cost, FairQueue, Popped};

fn budget(items: u64, bytes: u64) -> Budget {
    Budget {
        items_per_turn: items,
        bytes_per_turn: bytes,
    }
}

fn weights(pairs: &[(&str, u32)]) -> HashMap<String, u32> {
    pairs.iter().map(|(t, w)| (t.to_string(), *w)).collect()
}

fn drain<T>(q: &mut FairQueue<T>) -> Vec<Popped<T>> {
    std::iter::from_fn(|| q.pop()).collect()
}

/// The longest run of consecutive pops of `tenant` that happen while `other` still has work.
fn longest_run_while_runnable(order: &[Popped<usize>], tenant: &str, other: &str) -> u64 {
    let other_last = order.iter().rposition(|p| p.tenant == other).unwrap_or(0);
    let (mut run, mut longest) = (0, 0);
    for p in &order[..other_last] {
        run = if p.tenant == tenant {
            run + p.cost.items
        } else {
            0
        };
        longest = longest.max(run);
    }
    longest
}

#[test]
fn a_backlogged_tenant_takes_at_most_its_budget_while_another_is_runnable() {
    let mut q = FairQueue::new(budget(4, 1 << 20), HashMap::new());
    for i in 0..1000 {
        q.push("noisy", Cost::new(1, 100), i);
    }
    for i in 0..10 {
        q.push("quiet", Cost::new(1, 100), i);
    }
    let order = drain(&mut q);
    assert_eq!(longest_run_while_runnable(&order, "noisy", "quiet"), 4);
    // Turns alternate: 4 noisy, 4 quiet, 4 noisy, 4 quiet, 4 noisy, the last 2 quiet.
    let quiet_last = order.iter().rposition(|p| p.tenant == "quiet").unwrap();
    assert_eq!(quiet_last, 21);
    let turns: Vec<_> = order[..22]
        .chunk_by(|a, b| a.turn == b.turn)
        .map(|t| t.len())
        .collect();
    assert_eq!(turns, [4, 4, 4, 4, 4, 2]);
}

#[test]
fn the_byte_budget_ends_a_turn_before_the_item_budget() {
    let mut q = FairQueue::new(budget(100, 1000), HashMap::new());
    for i in 0..10 {
        q.push("a", Cost::new(1, 400), i);
        q.push("b", Cost::new(1, 400), i);
    }
    let tenants: Vec<_> = drain(&mut q).into_iter().map(|p| p.tenant).collect();
    assert_eq!(&tenants[..6], ["a", "a", "b", "b", "a", "a"]);
}

#[test]
fn weight_scales_the_budget() {
    let mut q = FairQueue::new(budget(2, 1 << 30), weights(&[("heavy", 3)]));
    for i in 0..100 {
        q.push("heavy", Cost::new(1, 1), i);
        q.push("light", Cost::new(1, 1), i);
    }
    let first: Vec<_> = drain(&mut q)
        .into_iter()
        .take(16)
        .map(|p| p.tenant)
        .collect();
    let heavy = first.iter().filter(|t| *t == "heavy").count();
    assert_eq!((heavy, first.len() - heavy), (12, 4));
}

#[test]
fn an_item_larger_than_the_budget_goes_alone_after_the_turns_it_needs() {
    let mut q = FairQueue::new(budget(4, 1 << 20), HashMap::new());
    q.push("big", Cost::new(10, 0), 0); // needs 3 turns of 4 items
    for i in 0..20 {
        q.push("small", Cost::new(1, 0), i);
    }
    let order = drain(&mut q);
    let big = order.iter().position(|p| p.tenant == "big").unwrap();
    // "big" passed twice while "small" took two turns of 4, then took its third turn alone.
    assert_eq!(big, 8);
    assert_ne!(order[big - 1].turn, order[big].turn);
    assert_ne!(order[big + 1].turn, order[big].turn);
}

#[test]
fn oversized_heads_alone_do_not_spin() {
    let mut q = FairQueue::new(budget(1, 1), HashMap::new());
    q.push("a", Cost::new(1, 1 << 40), 0);
    q.push("b", Cost::new(1, 1 << 41), 1);
    let order: Vec<_> = drain(&mut q).into_iter().map(|p| p.value).collect();
    assert_eq!(order, [0, 1]);
}

#[test]
fn a_tenant_that_comes_back_joins_the_end_of_the_rotation() {
    let mut q = FairQueue::new(budget(1, 1 << 20), HashMap::new());
    q.push("a", Cost::new(1, 0), 0);
    q.push("b", Cost::new(1, 0), 1);
    assert_eq!(q.pop().unwrap().tenant, "a");
    q.push("a", Cost::new(1, 0), 2);
    q.push("c", Cost::new(1, 0), 3);
    let rest: Vec<_> = drain(&mut q).into_iter().map(|p| p.tenant).collect();
    assert_eq!(rest, ["b", "a", "c"]);
}

/// A random workload: (tenant index, items, bytes) per push.
fn workload() -> impl Strategy<Value = Vec<(usize, u64, u64)>> {
    proptest::collection::vec((0usize..4, 1u64..6, 0u64..3000), 1..200)
}

fn load(q: &mut FairQueue<usize>, work: &[(usize, u64, u64)]) {
    for (i, (t, items, bytes)) in work.iter().enumerate() {
        q.push(&format!("t{t}"), Cost::new(*items, *bytes), i);
    }
}

proptest! {
    /// Every item comes out exactly once, in its tenant's order (no starvation, no loss).
    #[test]
    fn every_item_comes_out_once_in_tenant_order(
        work in workload(),
        items in 1u64..8,
        bytes in 1u64..5000,
    ) {
        let mut q = FairQueue::new(budget(items, bytes), weights(&[("t1", 2), ("t3", 5)]));
        load(&mut q, &work);
        let order = drain(&mut q);
        prop_assert_eq!(order.len(), work.len());
        prop_assert!(q.is_empty());
        for t in 0..4 {
            let name = format!("t{t}");
            let got: Vec<_> = order.iter().filter(|p| p.tenant == name).map(|p| p.value).collect();
            let want: Vec<_> = (0..work.len()).filter(|i| work[*i].0 == t).collect();
            prop_assert_eq!(got, want);
        }
    }

    /// A turn is one tenant's and stays within its budget, or is one item larger than it.
    #[test]
    fn a_turn_stays_within_its_budget(
        work in workload(),
        items in 1u64..8,
        bytes in 1u64..5000,
    ) {
        let mut q = FairQueue::new(budget(items, bytes), weights(&[("t2", 3)]));
        load(&mut q, &work);
        let order = drain(&mut q);
        for turn in order.chunk_by(|a, b| a.turn == b.turn) {
            prop_assert!(turn.iter().all(|p| p.tenant == turn[0].tenant));
            let total = turn.iter().fold(Cost::default(), |s, p| {
                Cost::new(s.items + p.cost.items, s.bytes + p.cost.bytes)
            });
            prop_assert!(turn.len() == 1 || total.fits(q.quantum(&turn[0].tenant)));
        }
    }

    /// While every tenant is backlogged, each gets one turn per round, in the same order, and
    /// items served are proportional to weight.
    #[test]
    fn backlogged_tenants_share_in_proportion_to_weight(
        w in proptest::collection::vec(1u32..5, 2..5),
        per_turn in 1u64..5,
        rounds in 1u64..6,
    ) {
        let names: Vec<String> = (0..w.len()).map(|i| format!("t{i}")).collect();
        let ws = names.iter().cloned().zip(w.iter().copied()).collect();
        let mut q = FairQueue::new(budget(per_turn, 1 << 30), ws);
        for name in &names {
            for i in 0..(per_turn * 5 * (rounds + 1)) as usize {
                q.push(name, Cost::new(1, 1), i);
            }
        }
        let mut served: HashMap<String, u64> = HashMap::new();
        let total: u64 = w.iter().map(|w| u64::from(*w) * per_turn).sum::<u64>() * rounds;
        for _ in 0..total {
            let p = q.pop().unwrap();
            *served.entry(p.tenant).or_default() += 1;
        }
        prop_assert_eq!(q.turns(), rounds * names.len() as u64);
        for (name, w) in names.iter().zip(&w) {
            prop_assert_eq!(served[name], u64::from(*w) * per_turn * rounds);
        }
    }
}

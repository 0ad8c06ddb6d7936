//! `ThreadTurns` driven by a model of a single-threaded executor: tasks always ready, run in
//! FIFO order, a waiting task going to the back.

use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;

use super::*;

struct Task {
    tenant: &'static str,
    work: VecDeque<Cost>,
    /// The epoch it was told to wait with, checked when it runs again.
    waiting: Option<u64>,
}

/// Runs every task to completion; returns (tenant, cost) in the order they ran.
fn run(
    turns: &mut ThreadTurns,
    tasks: Vec<(&'static str, Vec<Cost>)>,
) -> Vec<(&'static str, Cost)> {
    let mut ready: VecDeque<Task> = tasks
        .into_iter()
        .map(|(tenant, work)| Task {
            tenant,
            work: work.into(),
            waiting: None,
        })
        .collect();
    let mut order = Vec::new();
    let mut polls = 0;
    while let Some(mut task) = ready.pop_front() {
        polls += 1;
        assert!(polls < 1_000_000, "no progress");
        if let Some(epoch) = task.waiting.take() {
            turns.waited(epoch);
        }
        while let Some(&cost) = task.work.front() {
            match turns.try_run(task.tenant, cost) {
                Turn::Run => {
                    order.push((task.tenant, cost));
                    task.work.pop_front();
                }
                Turn::Wait { epoch } => {
                    task.waiting = Some(epoch);
                    break;
                }
            }
        }
        if !task.work.is_empty() {
            ready.push_back(task);
        }
    }
    order
}

fn turns(items: u64, bytes: u64, weights: &[(&str, u32)]) -> ThreadTurns {
    let budget = Budget {
        items_per_turn: items,
        bytes_per_turn: bytes,
    };
    let weights = weights.iter().map(|(t, w)| (t.to_string(), *w)).collect();
    ThreadTurns::new(budget, weights)
}

fn one(n: usize) -> Vec<Cost> {
    vec![Cost::new(1, 0); n]
}

#[test]
fn a_backlogged_tenant_takes_its_budget_per_turn_while_another_waits() {
    let mut t = turns(2, 1 << 20, &[]);
    let order = run(
        &mut t,
        vec![
            ("noisy", one(6)),
            ("noisy", one(6)),
            ("noisy", one(6)),
            ("quiet", one(5)),
        ],
    );
    let tenants: Vec<&str> = order.iter().map(|(t, _)| *t).collect();
    let n = "noisy";
    let q = "quiet";
    assert_eq!(
        tenants,
        [vec![n, n, q, q, n, n, q, q, n, n, q], vec![n; 12],].concat()
    );
}

#[test]
fn a_lone_tenant_runs_everything_in_turns_of_its_budget() {
    let mut t = turns(3, 1 << 20, &[]);
    let order = run(&mut t, vec![("a", one(10))]);
    assert_eq!(order.len(), 10);
    assert_eq!(t.turns(), 4);
}

#[test]
fn bytes_end_a_turn_too_and_an_oversized_item_runs_alone() {
    let mut t = turns(100, 100, &[]);
    let work = vec![
        Cost::new(1, 60),
        Cost::new(1, 60),
        Cost::new(1, 500),
        Cost::new(1, 1),
    ];
    let order = run(&mut t, vec![("a", work), ("b", vec![Cost::new(1, 10); 4])]);
    let tenants: Vec<&str> = order.iter().map(|(t, _)| *t).collect();
    // a: 60 | b: 10 x4 | a: 60 | a: 500 alone | a: 1
    assert_eq!(tenants, ["a", "b", "b", "b", "b", "a", "a", "a"]);
}

#[test]
fn weights_scale_the_turn() {
    let mut t = turns(1, 1 << 20, &[("heavy", 3)]);
    let order = run(&mut t, vec![("heavy", one(6)), ("light", one(2))]);
    let tenants: Vec<&str> = order.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        tenants,
        ["heavy", "heavy", "heavy", "light", "heavy", "heavy", "heavy", "light"]
    );
}

proptest! {
    /// Whatever the tenants, tasks and costs: all work runs, and while another tenant still
    /// has work, no tenant runs more than its budget in a row (one item larger than the
    /// budget counts as a whole turn).
    #[test]
    fn no_tenant_runs_past_its_budget_while_another_has_work(
        tasks in prop::collection::vec(
            (0usize..3, prop::collection::vec((1u64..4, 0u64..200), 1..20)),
            1..8,
        ),
    ) {
        const NAMES: [&str; 3] = ["a", "b", "c"];
        let mut t = turns(4, 256, &[("c", 2)]);
        let tasks: Vec<(&'static str, Vec<Cost>)> = tasks
            .into_iter()
            .map(|(n, w)| (NAMES[n], w.into_iter().map(|(i, b)| Cost::new(i, b)).collect()))
            .collect();
        let mut remaining: HashMap<&str, usize> = HashMap::new();
        for (tenant, work) in &tasks {
            *remaining.entry(tenant).or_default() += work.len();
        }
        let total: usize = remaining.values().sum();
        let order = run(&mut t, tasks);
        prop_assert_eq!(order.len(), total);
        let mut streak: Option<(&str, Cost)> = None;
        for (tenant, cost) in order {
            let others_waiting = remaining.iter().any(|(t, n)| *t != tenant && *n > 0);
            let quantum = t.quantum(tenant);
            let used = match streak {
                Some((t, used)) if t == tenant => {
                    Cost::new(used.items + cost.items, used.bytes + cost.bytes)
                }
                _ => cost,
            };
            let alone = used == cost;
            if others_waiting && !alone {
                prop_assert!(used.fits(quantum), "{tenant} ran {used:?} in a row, budget {quantum:?}");
            }
            streak = Some((tenant, used));
            *remaining.get_mut(tenant).unwrap() -= 1;
        }
    }
}

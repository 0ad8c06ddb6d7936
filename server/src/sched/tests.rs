//! The gate lets waiting requests in by the scheduler's turns, and never loses a slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crescent_sched::{Budget, Cost};

use super::{Gate, Ticket};

fn gate(slots: usize, items_per_turn: u64) -> Arc<Gate> {
    let budget = Budget {
        items_per_turn,
        bytes_per_turn: 1 << 20,
    };
    let weights = HashMap::from([("noisy".to_string(), 1)]);
    Arc::new(Gate::new(slots, budget, weights, &prometheus::Registry::new()).unwrap())
}

fn ticket(tenant: &str) -> Ticket {
    Ticket {
        tenant: tenant.into(),
        cost: Cost::new(1, 0),
    }
}

async fn let_tasks_run() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn waiting_requests_get_in_by_tenant_turns() {
    let gate = gate(1, 2);
    let order = Arc::new(Mutex::new(Vec::new()));
    let held = gate
        .admit(|| unreachable!("a free slot needs no ticket"))
        .await;
    let mut tasks = Vec::new();
    for tenant in std::iter::repeat_n("noisy", 8).chain(["quiet", "quiet"]) {
        let (gate, order) = (gate.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.admit(|| ticket(tenant)).await;
            order.lock().unwrap().push(tenant);
        }));
        let_tasks_run().await;
    }
    drop(held);
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order,
        [
            "noisy", "noisy", "quiet", "quiet", "noisy", "noisy", "noisy", "noisy", "noisy",
            "noisy"
        ]
    );
    assert_eq!(gate.free.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_that_goes_away_gives_its_slot_back() {
    let gate = gate(1, 4);
    let held = gate.admit(|| unreachable!()).await;
    let waiter = {
        let gate = gate.clone();
        tokio::spawn(async move {
            let _permit = gate.admit(|| ticket("a")).await;
            std::future::pending::<()>().await;
        })
    };
    let gone = {
        let gate = gate.clone();
        tokio::spawn(async move { drop(gate.admit(|| ticket("b")).await) })
    };
    let_tasks_run().await;
    // "b" goes away while it waits; "a" gets the slot, then goes away holding it.
    gone.abort();
    drop(held);
    let_tasks_run().await;
    waiter.abort();
    let_tasks_run().await;
    assert_eq!(gate.free.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(gate.waiting.load(std::sync::atomic::Ordering::SeqCst), 0);
    drop(gate.admit(|| unreachable!("the slot is free again")).await);
}

/// Connections of one RPC thread (tasks of one current-thread runtime, each running its
/// buffered requests without another await) share the thread by their tenants' budgets: while
/// the quiet tenant has requests left, the noisy one's three connections together run at most
/// its budget between two of the quiet tenant's turns.
#[tokio::test(flavor = "current_thread")]
async fn connections_of_one_thread_take_turns_by_tenant() {
    let gate = gate(4, 2);
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (tenant, requests) in [("noisy", 30), ("noisy", 30), ("noisy", 30), ("quiet", 10)] {
        let (gate, order) = (gate.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let mut turns = super::ConnectionTurns::default();
            for _ in 0..requests {
                turns
                    .take_as(&gate, Cost::new(1, 0), || tenant.to_string())
                    .await;
                order.lock().unwrap().push(tenant);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 100);
    let last_quiet = order.iter().rposition(|t| *t == "quiet").unwrap();
    let mut noisy_in_a_row = 0;
    for tenant in &order[..last_quiet] {
        if *tenant == "noisy" {
            noisy_in_a_row += 1;
            assert!(noisy_in_a_row <= 2, "noisy ran past its budget: {order:?}");
        } else {
            noisy_in_a_row = 0;
        }
    }
    // Without the quiet tenant the noisy one is not held back: it ran everything.
    assert_eq!(order.iter().filter(|t| **t == "noisy").count(), 90);
}

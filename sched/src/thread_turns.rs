//! [`ThreadTurns`]: per-tenant turns between the tasks that share one thread.
//!
//! Tasks on one single-threaded executor never run at the same time, so they never contend
//! for a gate's slots among themselves: a task that always has work ready keeps the thread
//! until it runs out. `ThreadTurns` gives the thread to one tenant at a time, for at most its
//! budget (times its weight): work of another tenant waits, registered in a rotation, and so
//! does the turn's own tenant once its budget is spent. A waiting task yields the thread to
//! the executor; when it runs again and nothing ran or changed turns meanwhile, every task
//! that was ready has had its chance, so the turn passes to the next tenant in the rotation
//! (the tenant whose budget ran out goes to the back of it). A tenant's tasks on the thread
//! share one turn.
//!
//! Pure: no clock, no IO; the executor's yield is the caller's. It relies on the executor
//! running a yielded task only after the tasks already ready to run, as single-threaded
//! executors do.

use std::collections::{HashMap, VecDeque};

use crate::{Budget, Cost};

/// Whether a piece of work may run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    Run,
    /// Not its tenant's turn: yield the thread, then call [`ThreadTurns::waited`] with
    /// `epoch` and try again.
    Wait {
        epoch: u64,
    },
}

#[derive(Debug)]
struct Current {
    tenant: String,
    left: Cost,
    quantum: Cost,
    /// Its budget is spent and its tenant has more: it goes to the back of the rotation.
    spent: bool,
}

/// The turns of one thread (see the module docs).
#[derive(Debug)]
pub struct ThreadTurns {
    budget: Budget,
    weights: HashMap<String, u32>,
    current: Option<Current>,
    /// Tenants waiting for a turn, in the order they get one.
    rotation: VecDeque<String>,
    /// Counts runs and turn changes: a waiter that finds it unchanged knows nothing moved.
    epoch: u64,
    /// Counts turns begun.
    turns: u64,
}

impl ThreadTurns {
    /// Tenants not in `weights` have weight 1.
    pub fn new(budget: Budget, weights: HashMap<String, u32>) -> Self {
        Self {
            budget,
            weights,
            current: None,
            rotation: VecDeque::new(),
            epoch: 0,
            turns: 0,
        }
    }

    /// Turns begun so far (a caller may cache what it learned per turn).
    pub fn turns(&self) -> u64 {
        self.turns
    }

    /// `tenant`'s budget for one turn: the budget times its weight.
    pub fn quantum(&self, tenant: &str) -> Cost {
        let weight = self.weights.get(tenant).copied().unwrap_or(1);
        self.budget.scaled(weight)
    }

    /// Runs `cost` (an item count of 0 is charged as 1) for `tenant` if it is its turn and
    /// the cost fits what is left of it (or the turn is new: work larger than a whole budget
    /// runs alone, first in a turn); begins a turn for it if nobody has one. Otherwise
    /// `tenant` waits in the rotation.
    pub fn try_run(&mut self, tenant: &str, cost: Cost) -> Turn {
        let cost = Cost::new(cost.items.max(1), cost.bytes);
        if self.current.is_none() {
            self.begin(tenant.to_string());
        }
        let current = self.current.as_mut().expect("begun above");
        if current.tenant != tenant {
            if !self.rotation.iter().any(|t| t == tenant) {
                self.rotation.push_back(tenant.to_string());
            }
            return Turn::Wait { epoch: self.epoch };
        }
        let fresh = current.left == current.quantum;
        if current.spent || !(fresh || cost.fits(current.left)) {
            current.spent = true;
            return Turn::Wait { epoch: self.epoch };
        }
        current.left = Cost::new(
            current.left.items.saturating_sub(cost.items),
            current.left.bytes.saturating_sub(cost.bytes),
        );
        self.epoch += 1;
        Turn::Run
    }

    /// A waiter that was told `epoch` ran again: if nothing ran and no turn changed since,
    /// the turn's tenant has nothing ready within its budget, and the next tenant of the
    /// rotation gets a turn (the spent one queues behind it; alone, it gets a new one).
    pub fn waited(&mut self, epoch: u64) {
        if self.epoch != epoch {
            return;
        }
        self.epoch += 1;
        let previous = self.current.take();
        match (previous, self.rotation.pop_front()) {
            (Some(previous), Some(next)) => {
                if previous.spent {
                    self.rotation.push_back(previous.tenant);
                }
                self.begin(next);
            }
            (Some(previous), None) if previous.spent => self.begin(previous.tenant),
            (Some(_), None) | (None, None) => {}
            (None, Some(next)) => self.begin(next),
        }
    }

    fn begin(&mut self, tenant: String) {
        let quantum = self.quantum(&tenant);
        self.current = Some(Current {
            tenant,
            left: quantum,
            quantum,
            spent: false,
        });
        self.turns += 1;
    }
}

#[cfg(test)]
mod tests;

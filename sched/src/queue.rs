//! [`FairQueue`]: per-tenant FIFO queues served in weighted round-robin turns.

use std::collections::{HashMap, VecDeque};

use crate::{Budget, Cost};

/// One tenant's waiting work.
#[derive(Debug)]
struct TenantQueue<T> {
    items: VecDeque<(Cost, T)>,
    /// Turns passed over while its head is larger than a whole budget.
    waited_turns: u64,
}

/// The turn in progress: whose, and what is left of its budget.
#[derive(Debug)]
struct Turn {
    tenant: String,
    left: Cost,
}

/// One item taken by [`FairQueue::pop`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Popped<T> {
    pub tenant: String,
    pub cost: Cost,
    pub value: T,
    /// The turn it was taken in: consecutive pops of one turn share it (counted from 1).
    pub turn: u64,
}

/// Per-tenant FIFO queues served in weighted round-robin turns (see the crate docs).
#[derive(Debug)]
pub struct FairQueue<T> {
    budget: Budget,
    weights: HashMap<String, u32>,
    queues: HashMap<String, TenantQueue<T>>,
    /// Tenants with waiting work, other than the current turn's, in the order they get turns.
    rotation: VecDeque<String>,
    turn: Option<Turn>,
    turns: u64,
    len: usize,
}

impl<T> FairQueue<T> {
    /// An empty queue; tenants not in `weights` have weight 1.
    pub fn new(budget: Budget, weights: HashMap<String, u32>) -> Self {
        Self {
            budget,
            weights,
            queues: HashMap::new(),
            rotation: VecDeque::new(),
            turn: None,
            turns: 0,
            len: 0,
        }
    }

    /// Items waiting, all tenants together.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Items `tenant` has waiting.
    pub fn queued(&self, tenant: &str) -> usize {
        self.queues.get(tenant).map_or(0, |q| q.items.len())
    }

    /// Turns started so far.
    pub fn turns(&self) -> u64 {
        self.turns
    }

    /// `tenant`'s weight (1 unless configured).
    pub fn weight(&self, tenant: &str) -> u32 {
        self.weights.get(tenant).copied().unwrap_or(1).max(1)
    }

    /// `tenant`'s whole budget for one turn.
    pub fn quantum(&self, tenant: &str) -> Cost {
        self.budget.scaled(self.weight(tenant))
    }

    /// Appends `value` to `tenant`'s queue (an item count of 0 is charged as 1).
    pub fn push(&mut self, tenant: &str, cost: Cost, value: T) {
        let cost = Cost::new(cost.items.max(1), cost.bytes);
        let queue = self
            .queues
            .entry(tenant.to_string())
            .or_insert_with(|| TenantQueue {
                items: VecDeque::new(),
                waited_turns: 0,
            });
        let was_idle = queue.items.is_empty();
        queue.items.push_back((cost, value));
        self.len += 1;
        let current = self.turn.as_ref().is_some_and(|t| t.tenant == tenant);
        if was_idle && !current {
            self.rotation.push_back(tenant.to_string());
        }
    }

    /// Takes the next item: the current turn's tenant's next one while it fits the turn's
    /// budget, else the first item of the next runnable tenant's turn.
    pub fn pop(&mut self) -> Option<Popped<T>> {
        if self.len == 0 {
            return None;
        }
        loop {
            if let Some(popped) = self.take_in_turn() {
                return Some(popped);
            }
            self.end_turn();
            while !self.start_turn() {
                self.fast_forward();
            }
        }
    }

    /// The current turn's tenant's next item, if it has one that fits what is left.
    fn take_in_turn(&mut self) -> Option<Popped<T>> {
        let turn = self.turn.as_mut()?;
        let queue = self.queues.get_mut(&turn.tenant)?;
        let (cost, _) = queue.items.front()?;
        if !cost.fits(turn.left) {
            return None;
        }
        let (cost, value) = queue.items.pop_front()?;
        turn.left = turn.left.minus(cost);
        let tenant = turn.tenant.clone();
        let spent = turn.left.items == 0;
        if queue.items.is_empty() {
            // A tenant with nothing left waits for a new turn at the end of the rotation.
            self.queues.remove(&tenant);
            self.turn = None;
        } else if spent {
            self.end_turn();
        }
        self.len -= 1;
        Some(Popped {
            tenant,
            cost,
            value,
            turn: self.turns,
        })
    }

    /// Ends the current turn; its tenant, if it still has work, waits for its next one.
    fn end_turn(&mut self) {
        if let Some(turn) = self.turn.take() {
            if self.queues.contains_key(&turn.tenant) {
                self.rotation.push_back(turn.tenant);
            }
        }
    }

    /// Gives the next runnable tenant a turn. A tenant whose head is larger than its whole
    /// budget passes until it has waited the turns the item needs, then gets a turn for that
    /// one item. False when every runnable tenant passed.
    fn start_turn(&mut self) -> bool {
        for _ in 0..self.rotation.len() {
            let Some(tenant) = self.rotation.pop_front() else {
                return false;
            };
            let quantum = self.quantum(&tenant);
            let Some(queue) = self.queues.get_mut(&tenant) else {
                continue; // nothing waiting any more
            };
            let Some(&(head, _)) = queue.items.front() else {
                continue;
            };
            let left = if head.fits(quantum) {
                Some(quantum)
            } else {
                queue.waited_turns += 1;
                (queue.waited_turns >= Budget::turns_needed(head, quantum)).then_some(head)
            };
            match left {
                Some(left) => {
                    queue.waited_turns = 0;
                    self.turns += 1;
                    self.turn = Some(Turn { tenant, left });
                    return true;
                }
                None => self.rotation.push_back(tenant),
            }
        }
        false
    }

    /// When every runnable tenant's head is larger than its budget, counts the rounds in which
    /// all of them would only pass, at once, so the next round serves one (no idle spinning).
    fn fast_forward(&mut self) {
        let remaining = |q: &TenantQueue<T>, quantum: Cost| {
            let head = q.items.front().map_or(Cost::default(), |(c, _)| *c);
            Budget::turns_needed(head, quantum).saturating_sub(q.waited_turns)
        };
        let skip = self
            .rotation
            .iter()
            .filter_map(|t| Some(remaining(self.queues.get(t)?, self.quantum(t))))
            .min()
            .unwrap_or(1)
            .saturating_sub(1);
        for tenant in &self.rotation {
            if let Some(q) = self.queues.get_mut(tenant) {
                q.waited_turns += skip;
            }
        }
    }
}

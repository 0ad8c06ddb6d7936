//! Per-tenant fair scheduling (docs/tenants.md, "Soft isolation").
//!
//! [`FairQueue`] keeps one FIFO queue of work per tenant and serves the non-empty ones in
//! weighted round-robin turns. A turn takes from one tenant's queue, in order, while the next
//! item fits what is left of the tenant's per-turn budget (`items` and `bytes`, each times the
//! tenant's weight), then passes to the next runnable tenant. So a tenant never takes more
//! than its budget in a turn while another tenant is runnable.
//!
//! One item larger than a whole budget (a batch of more items, or more bytes, than a turn
//! allows) would never fit: it is served alone, in a turn of its own, once its tenant has
//! passed over as many turns as its size needs budgets, so its long-run share is still the
//! tenant's weight.
//!
//! The queue is pure: no clock, no IO, no randomness. The same pushes and pops give the same
//! order, which is what the tests below and crescentd's gate rely on.

mod queue;
mod thread_turns;

pub use queue::{FairQueue, Popped};
pub use thread_turns::{ThreadTurns, Turn};

/// What one piece of work costs against a turn's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cost {
    /// Items (a batch's length; at least 1 is charged).
    pub items: u64,
    /// Value bytes.
    pub bytes: u64,
}

impl Cost {
    pub fn new(items: u64, bytes: u64) -> Self {
        Self { items, bytes }
    }

    /// Whether `self` fits within `left`.
    pub fn fits(self, left: Cost) -> bool {
        self.items <= left.items && self.bytes <= left.bytes
    }

    fn minus(self, other: Cost) -> Cost {
        Cost {
            items: self.items.saturating_sub(other.items),
            bytes: self.bytes.saturating_sub(other.bytes),
        }
    }
}

/// A tenant's per-turn budget at weight 1 (both at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub items_per_turn: u64,
    pub bytes_per_turn: u64,
}

impl Budget {
    /// The budget of a tenant of `weight` (0 counts as 1).
    pub fn scaled(self, weight: u32) -> Cost {
        let w = u64::from(weight.max(1));
        Cost {
            items: self.items_per_turn.max(1).saturating_mul(w),
            bytes: self.bytes_per_turn.max(1).saturating_mul(w),
        }
    }

    /// How many of `quantum`'s turns an item of `cost` needs (1 when it fits one).
    pub fn turns_needed(cost: Cost, quantum: Cost) -> u64 {
        cost.items
            .div_ceil(quantum.items.max(1))
            .max(cost.bytes.div_ceil(quantum.bytes.max(1)))
            .max(1)
    }
}

#[cfg(test)]
mod tests;

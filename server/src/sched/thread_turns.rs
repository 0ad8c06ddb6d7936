//! Turns between the connections one RPC thread serves (docs/tenants.md, "Fair scheduling of
//! requests").
//!
//! Each RPC thread is a single-threaded runtime, and a connection runs its pipelined requests
//! without giving the thread up, so the connections of one thread never contend for the gate's
//! slots among themselves: the gate alone would let one busy connection hold its thread while
//! the others on it wait. Each thread therefore keeps [`crescent_sched::ThreadTurns`]: the
//! thread serves one tenant's requests at a time, for at most its budget, and a request of
//! another tenant yields the thread until its tenant's turn.

use std::cell::RefCell;

use crescent_sched::{Cost, ThreadTurns, Turn};
use crescent_wire::rpc::RpcOp;

use super::{Gate, Ticket};

thread_local! {
    /// The turns of the RPC thread this runs on (made from the first gate seen: a thread
    /// serves one node).
    static TURNS: RefCell<Option<ThreadTurns>> = const { RefCell::new(None) };
}

/// One connection's side of its thread's turns: the tenant its requests are charged to,
/// learned once per turn from a request's ticket (so a turn costs one look into a body, not
/// one per request).
#[derive(Debug, Default)]
pub struct ConnectionTurns {
    tenant: Option<(String, u64)>,
}

impl ConnectionTurns {
    /// Waits until it is the turn of a store request's tenant on this thread and the request
    /// fits what is left of it, yielding the thread meanwhile. A request costs its batch's
    /// items (1 for a single operation) and its body's bytes.
    pub async fn take(&mut self, gate: &Gate, op: RpcOp, body: &[u8], own_tenant: Option<&str>) {
        let cost = Cost::new(super::batch_len::batch_items(body), body.len() as u64);
        self.take_as(gate, cost, || Ticket::of_rpc(op, body, own_tenant).tenant)
            .await;
    }

    /// [`Self::take`] with the tenant given by `tenant_of` (asked at most once per turn).
    pub(super) async fn take_as(
        &mut self,
        gate: &Gate,
        cost: Cost,
        mut tenant_of: impl FnMut() -> String,
    ) {
        let mut yielded = false;
        loop {
            let turn = gate.with_turns(|turns| {
                let now = turns.turns();
                if self.tenant.as_ref().is_none_or(|(_, seen)| *seen != now) {
                    self.tenant = Some((tenant_of(), now));
                }
                let (tenant, _) = self.tenant.as_ref().expect("set above");
                turns.try_run(tenant, cost)
            });
            let Turn::Wait { epoch } = turn else {
                return;
            };
            if !yielded {
                yielded = true;
                if let Some((tenant, _)) = &self.tenant {
                    gate.metrics.thread_yielded(tenant);
                }
            }
            tokio::task::yield_now().await;
            gate.with_turns(|turns| turns.waited(epoch));
        }
    }
}

impl Gate {
    /// Runs `f` on this thread's turns, made with the gate's budget and weights if new.
    fn with_turns<T>(&self, f: impl FnOnce(&mut ThreadTurns) -> T) -> T {
        TURNS.with(|cell| {
            let mut slot = cell.borrow_mut();
            let turns =
                slot.get_or_insert_with(|| ThreadTurns::new(self.budget, self.weights.clone()));
            f(turns)
        })
    }
}

//! [`DeviceLedger`] over the `ColdDevice` actor: the cold driver is synchronous (it runs on a
//! blocking thread, under its device's lock), so each command is sent to the actor and waited
//! for; the committed events are applied to a local copy of the device, which is what the
//! driver reads. The copy stays exact because every command of the device goes through this
//! one ledger (its mutex in [`super::ColdTier`]).

use crescent_actors::runtime::RuntimeError;
use crescent_actors::{Aggregate, AggregateRegistry};
use crescent_cold::driver::DeviceLedger;
use crescent_cold::{ColdDevice, ColdDeviceCommand, ColdError};
use crescent_crash::points::{self, Stage};

/// The ledger of one device.
pub struct ActorLedger {
    registry: AggregateRegistry<ColdDevice>,
    device_id: String,
    state: ColdDevice,
}

/// The snake_case name of a command (its serde tag), as its crash points name it.
pub fn command_name(cmd: &ColdDeviceCommand) -> &'static str {
    match cmd {
        ColdDeviceCommand::Configure { .. } => "configure",
        ColdDeviceCommand::SetHealth { .. } => "set_health",
        ColdDeviceCommand::AssignOwner { .. } => "assign_owner",
        ColdDeviceCommand::SetSchedulable { .. } => "set_schedulable",
        ColdDeviceCommand::PlanOffload { .. } => "plan_offload",
        ColdDeviceCommand::Reserve { .. } => "reserve",
        ColdDeviceCommand::RecordPayloadWritten { .. } => "record_payload_written",
        ColdDeviceCommand::CommitRoute { .. } => "commit_route",
        ColdDeviceCommand::CommitUsage { .. } => "commit_usage",
        ColdDeviceCommand::Cancel { .. } => "cancel",
        ColdDeviceCommand::PlanReclaim { .. } => "plan_reclaim",
        ColdDeviceCommand::CancelReclaim { .. } => "cancel_reclaim",
        ColdDeviceCommand::RecordBackendDeleted { .. } => "record_backend_deleted",
        ColdDeviceCommand::ReleaseUsage { .. } => "release_usage",
        ColdDeviceCommand::PruneTerminal { .. } => "prune_terminal",
    }
}

/// A runtime failure as a cold error: refusals keep their own; a journal or actor failure is
/// an unavailable device (retryable: the outcome is settled by replay and reconciliation).
pub fn from_runtime(e: RuntimeError<ColdError>) -> ColdError {
    match e {
        RuntimeError::Domain(e) => e,
        other => ColdError::DeviceNotEligible {
            device_id: String::new(),
            reason: format!("the device ledger is unavailable: {other}"),
        },
    }
}

impl ActorLedger {
    /// A ledger seeded with the actor's committed state (must not be called on the actor's
    /// own arbiter thread: it waits for the actor).
    pub fn load(
        registry: AggregateRegistry<ColdDevice>,
        device_id: &str,
    ) -> Result<Self, ColdError> {
        let state =
            futures::executor::block_on(registry.read(device_id, |d: &ColdDevice| d.clone()))
                .map_err(from_runtime)?;
        Ok(Self {
            registry,
            device_id: device_id.to_string(),
            state,
        })
    }
}

impl DeviceLedger for ActorLedger {
    fn device(&self) -> &ColdDevice {
        &self.state
    }

    fn execute(&mut self, cmd: ColdDeviceCommand) -> Result<(), ColdError> {
        // Crash points around each command (docs/testing.md): `cold.before_<command>`,
        // `cold.after_<command>` (its events durable).
        let name = command_name(&cmd);
        crescent_crash::command(points::COLD, Stage::Before, name);
        let executed = futures::executor::block_on(self.registry.execute(&self.device_id, cmd))
            .map_err(from_runtime)?;
        crescent_crash::command(points::COLD, Stage::After, name);
        for event in &executed.events {
            self.state.apply(event);
        }
        Ok(())
    }
}

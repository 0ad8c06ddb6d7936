//! [`DeviceLedger`] over the `ColdDevice` actor: the cold driver is synchronous (it runs on a
//! blocking thread, under its device's lock), so each command is sent to the actor and waited
//! for; the committed events are applied to a local copy of the device, which is what the
//! driver reads. The copy stays exact because every command of the device goes through this
//! one ledger (its mutex in [`super::ColdTier`]).

use crescent_actors::runtime::RuntimeError;
use crescent_actors::{Aggregate, AggregateRegistry};
use crescent_cold::driver::DeviceLedger;
use crescent_cold::{ColdDevice, ColdDeviceCommand, ColdError};

/// The ledger of one device.
pub struct ActorLedger {
    registry: AggregateRegistry<ColdDevice>,
    device_id: String,
    state: ColdDevice,
    kill_point: Option<KillPoint>,
}

/// Fault injection for crash-window tests: `CRESCENT_COLD_KILL_AT=before_<command>` or
/// `after_<command>` (e.g. `after_reserve`, `before_record_payload_written`) makes the process
/// SIGKILL itself at that point of the first such command. Unset in production.
pub const KILL_AT_ENV: &str = "CRESCENT_COLD_KILL_AT";

#[derive(Debug, Clone, PartialEq, Eq)]
struct KillPoint {
    before: bool,
    command: String,
}

impl KillPoint {
    fn from_env() -> Option<Self> {
        let v = std::env::var(KILL_AT_ENV).ok()?;
        let (before, command) = if let Some(c) = v.strip_prefix("before_") {
            (true, c)
        } else if let Some(c) = v.strip_prefix("after_") {
            (false, c)
        } else {
            tracing::warn!(value = %v, "{KILL_AT_ENV} ignored: not before_X or after_X");
            return None;
        };
        tracing::warn!(before, command, "cold fault injection armed");
        Some(Self {
            before,
            command: command.to_string(),
        })
    }

    fn fire(&self, before: bool, cmd: &ColdDeviceCommand) {
        if self.before == before && self.command == command_name(cmd) {
            tracing::error!(command = %self.command, before, "cold fault injection: SIGKILL");
            // SAFETY: raise(2) has no memory-safety preconditions.
            #[allow(unsafe_code)]
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        }
    }
}

/// The snake_case name of a command (its serde tag).
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
            kill_point: KillPoint::from_env(),
        })
    }
}

impl DeviceLedger for ActorLedger {
    fn device(&self) -> &ColdDevice {
        &self.state
    }

    fn execute(&mut self, cmd: ColdDeviceCommand) -> Result<(), ColdError> {
        let kill = self.kill_point.clone();
        if let Some(k) = &kill {
            k.fire(true, &cmd);
        }
        let name = kill.as_ref().map(|_| cmd.clone());
        let executed = futures::executor::block_on(self.registry.execute(&self.device_id, cmd))
            .map_err(from_runtime)?;
        if let (Some(k), Some(cmd)) = (&kill, &name) {
            k.fire(false, cmd);
        }
        for event in &executed.events {
            self.state.apply(event);
        }
        Ok(())
    }
}

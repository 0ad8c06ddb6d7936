//! Coming back as a standby without a supervisor: after its term ends (or to apply a rewind),
//! crescentd replaces itself with a fresh copy of its own executable, same arguments, same pid.
//!
//! `exec` keeps none of the old process: actors, caches, pending replies, threads and every
//! descriptor (Rust opens files and sockets close-on-exec, so the journal's `flock` and the
//! listeners go too) are gone, exactly as after an exit and a supervisor's restart. What
//! carries over is the data dir, which the new process opens as any restart does. This is
//! what makes the in-process path as safe as exiting: no state of the lost term can survive.
//!
//! If the executable cannot be run again (deleted or replaced by an upgrade, say), the process
//! exits with the given code and a supervisor restarts it, as before.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Set on the re-executed process: `REASON:COUNT` (how many restarts in place so far).
pub const RESTART_ENV: &str = "CRESCENT_HA_RESTARTED";

/// Why the node restarts itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartReason {
    /// The active's term ended (deadline passed, lease or key lost).
    Deposed,
    /// A standby must drop a tail the active never received (docs/ha.md, "Rejoining").
    Rewind,
    /// A standby staged the active's snapshot to install (docs/ha.md, "Reseeding").
    Reseed,
}

impl RestartReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RestartReason::Deposed => "deposed",
            RestartReason::Rewind => "rewind",
            RestartReason::Reseed => "reseed",
        }
    }
}

/// The restart this process came from, if it was re-executed: `(reason, count)`.
pub fn previous_restart() -> Option<(String, u64)> {
    parse_restart_env(&std::env::var(RESTART_ENV).ok()?)
}

fn parse_restart_env(value: &str) -> Option<(String, u64)> {
    let (reason, count) = value.split_once(':')?;
    Some((reason.to_string(), count.parse().ok()?))
}

/// Re-executes crescentd in place when `in_place` (the `ha.restart_in_place` setting);
/// otherwise, or if that fails, exits with `exit_code` for a supervisor to restart it. Call it
/// only once the journal is closed and nothing of the old term is serving.
pub fn rejoin_as_standby(reason: RestartReason, in_place: bool, exit_code: i32) -> ! {
    if in_place {
        let count = previous_restart().map(|(_, n)| n).unwrap_or(0) + 1;
        match std::env::current_exe() {
            Ok(exe) => {
                let args: Vec<OsString> = std::env::args_os().skip(1).collect();
                tracing::warn!(reason = reason.as_str(), count, exe = %exe.display(),
                               "restarting in place to rejoin as a standby");
                // Returns only on failure.
                let err = Command::new(&exe)
                    .args(&args)
                    .env(RESTART_ENV, format!("{}:{count}", reason.as_str()))
                    .exec();
                tracing::error!(error = %err, exe = %exe.display(),
                                "cannot re-execute crescentd; exiting for the supervisor");
            }
            Err(e) => tracing::error!(error = %e,
                "cannot find crescentd's own executable; exiting for the supervisor"),
        }
    }
    std::process::exit(exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restart_marker_parses_or_is_ignored() {
        assert_eq!(
            parse_restart_env("deposed:3"),
            Some(("deposed".to_string(), 3))
        );
        assert_eq!(parse_restart_env("deposed"), None);
        assert_eq!(parse_restart_env("rewind:x"), None);
        assert_eq!(RestartReason::Rewind.as_str(), "rewind");
    }
}

//! Child processes that cannot outlive their test, and free ports.

use std::net::TcpListener;
use std::process::{Child, ExitStatus};

/// Owns a spawned child: [`ChildGuard::sigkill`] kills it with SIGKILL (the crash under test)
/// and reaps it; dropping the guard does the same if that has not happened yet, so a test that
/// panics halfway never leaks a process (or the data-dir lock it holds).
#[derive(Debug)]
pub struct ChildGuard {
    name: String,
    child: Child,
    reaped: Option<ExitStatus>,
}

impl ChildGuard {
    pub fn new(name: impl Into<String>, child: Child) -> Self {
        Self {
            name: name.into(),
            child,
            reaped: None,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child itself, e.g. to take its stdout.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// `Some(status)` if the child has exited (it is then reaped), `None` while it runs.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.reaped {
            return Some(status);
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.reaped = Some(status);
                Some(status)
            }
            Ok(None) => None,
            Err(e) => panic!("waiting for {} (pid {}): {e}", self.name, self.child.id()),
        }
    }

    /// Sends `signal` to the child unless it was already reaped (a reaped pid may have been
    /// reused, so it is never signalled).
    pub fn signal(&mut self, signal: libc::c_int) {
        if self.reaped.is_some() {
            return;
        }
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits pid_t");
        // SAFETY: kill(2) only takes integers; `pid` is our own unreaped child, so it cannot
        // name an unrelated process.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::kill(pid, signal) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            // ESRCH: it has already exited (a zombie still accepts signals, so this is rare).
            if err.raw_os_error() != Some(libc::ESRCH) {
                panic!("kill({pid}, {signal}) for {}: {err}", self.name);
            }
        }
    }

    /// SIGKILLs the child and waits for it. Returns its exit status (normally "killed by
    /// signal 9"; an exit code means it died on its own before the kill landed).
    pub fn sigkill(&mut self) -> ExitStatus {
        self.signal(libc::SIGKILL);
        self.wait()
    }

    /// Waits for the child to exit and reaps it.
    pub fn wait(&mut self) -> ExitStatus {
        if let Some(status) = self.reaped {
            return status;
        }
        let status = self
            .child
            .wait()
            .unwrap_or_else(|e| panic!("waiting for {} (pid {}): {e}", self.name, self.pid()));
        self.reaped = Some(status);
        status
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// True when `status` says the process was killed by SIGKILL.
pub fn killed_by_sigkill(status: &ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(libc::SIGKILL)
}

/// A TCP port on 127.0.0.1 that was free a moment ago (another process may still take it before
/// it is used; callers retry on "address in use").
pub fn free_local_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// Asks the kernel to SIGKILL the process being spawned when the spawning thread exits, so a
/// test runner that is itself killed leaves no children behind. Linux only; a no-op elsewhere.
/// Spawn from a thread that lives as long as the child should (the test's own thread).
pub fn kill_with_parent(cmd: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only calls prctl(2),
        // which is async-signal-safe and touches no memory of the parent.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// Resident set size of process `pid` in bytes (`VmRSS` of /proc/PID/status, in kB there).
pub fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS line")
        * 1024
}

//! The one harness that starts crescentd in tests, shared by the CLI's integration tests and
//! the cross-crate tests of `crescent-tests` (docs/testing.md):
//!
//! - [`crescentd`]: starting a `crescentd` on a data dir (`[auth]`, a config file, extra
//!   environment, a fixed address for restarts, readiness, the log for failure messages) and
//!   stopping it with SIGKILL.
//! - [`segments_api`]: the segment endpoints of its HTTP API as the crash tests see them.
//! - [`auth`]: a key file for crescentd's `[auth]` and tokens issued from it.
//! - [`process`]: a child-process guard that SIGKILLs and reaps its child on drop (so a
//!   panicking test never leaves processes behind), and free-port discovery.
//! - [`binaries`]: locating (and, when needed, building) the workspace binaries under test.

pub mod auth;
pub mod binaries;
pub mod crescentd;
pub mod process;
pub mod segments_api;

//! The actix actor shell: runs pure aggregates against the journal.
//!
//! - [`Runtime`]: what all actors share (journal, commit watermark, term, clock, fresh ids,
//!   fatal handler, metrics).
//! - [`AggregateActor`]: one aggregate instance. Command: decide, submit to the journal, apply,
//!   reply once the commit watermark covers the events. Read: evaluate on the current state,
//!   reply once the commit watermark covers the actor's last applied seq.
//! - [`AggregateRegistry`]: one actor per instance id, started on demand with recovered state;
//!   `execute`, `read` and periodic timer commands.
//! - [`Runtime::execute_blocking`]: one command on state no actor owns yet, on the calling
//!   thread (startup).
//!
//! A journal failure is fatal: the actor stops and the runtime's fatal handler (by default: log
//! and exit with [`JOURNAL_FATAL_EXIT_CODE`]) runs, so the process never keeps serving state the
//! journal does not hold.

mod actor;
mod blocking;
mod clock;
mod context;
mod error;
mod metrics;
mod registry;

pub use actor::{AggregateActor, Execute, Executed, Read};
pub use blocking::Decided;
pub use clock::{Clock, IdSource, ManualClock, RandomIds, SequentialIds, SystemClock};
pub use context::{
    exit_process_on_fatal, FatalHandler, Runtime, RuntimeBuilder, JOURNAL_FATAL_EXIT_CODE,
};
pub use error::{ErrorClass, RuntimeError};
pub use metrics::{CommandOutcome, RuntimeMetrics};
pub use registry::{AggregateRegistry, RegistryBuilder, StateLoader, TimerHandle};

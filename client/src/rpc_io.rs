//! How long the client busy-polls for an answer before sleeping (the reader itself is
//! `crescent_transport::frame_input`, shared with crescentd's RPC listener).

use std::time::Duration;

/// How long a caller polls for the answer of a single-key operation before sleeping.
pub(crate) const SPIN: Duration = Duration::from_micros(200);
/// The same for a batch, which the server takes a few µs per item to run (a batch of 128 puts
/// about 0.5 ms): sleeping first would add a wake-up to every batch.
pub(crate) const SPIN_BATCH: Duration = Duration::from_millis(2);

//! The subcommands. Each takes its parsed arguments and a writer for stdout, prints its result
//! (text, or JSON with `--json`) and returns the exit code; errors that stop a command are
//! returned for `main` to print.

pub mod diff;
pub mod dump;
pub mod quarantine;
pub mod replay;
pub mod stats;
pub mod verify;

use std::io::Write;

use serde::Serialize;

use crate::error::Result;

/// Pretty-prints `value` as one JSON document.
pub(crate) fn write_json<T: Serialize>(out: &mut dyn Write, value: &T) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value).map_err(std::io::Error::from)?;
    writeln!(out)?;
    Ok(())
}

/// `(a, b)` as `a..=b`, or `none`.
pub(crate) fn range_text(r: Option<(u64, u64)>) -> String {
    r.map_or_else(|| "none".to_string(), |(a, b)| format!("{a}..={b}"))
}

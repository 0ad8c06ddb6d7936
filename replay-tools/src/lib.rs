//! `crescent-replay`: offline inspection of a crescentd data dir.
//!
//! Everything here reads; nothing writes to a data dir (but [`backup`], which writes only into
//! a new directory). The data dir is opened without a lock, files are
//! opened read-only, and no temp file is created, so the tool is safe to point at the data dir
//! of a running crescentd (it then sees a consistent prefix plus possibly a tail still being
//! written) or at a copy taken for forensics.
//!
//! Subcommands (see [`cmd`]): `dump`, `verify`, `replay`, `diff`, `stats`. Exit codes are in
//! [`error`]: 0 ok, 1 a fault found / data invalid, 2 bad usage or unreadable dir.

pub mod backup;
pub mod cmd;
pub mod datadir;
pub mod decode;
pub mod error;
pub mod fault;
pub mod records;
pub mod source;
pub mod walk;

pub use datadir::{DataDirView, Marker};
pub use decode::{decode_event, EventDecoder};
pub use error::{Result, ToolError, EXIT_FAULT, EXIT_OK, EXIT_USAGE};
pub use fault::{Fault, FaultSource};
pub use source::OfflineJournal;

//! How the journal crash child and its parent open the journal under test, identically.

use std::path::Path;

use crescent_journal::file::{FileBackend, FileOptions};
use crescent_journal::sled_backend::SledBackend;
use crescent_journal::{Journal, JournalBackend, JournalOptions, RecoveryMode};

/// Segment size of the file backend in the crash test: small, so rounds rotate segments.
pub const CRASH_SEGMENT_BYTES: u64 = 1 << 20;

/// The journal backend a crash test drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashBackend {
    File,
    Sled,
}

impl CrashBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            CrashBackend::File => "file",
            CrashBackend::Sled => "sled",
        }
    }

    pub fn parse(s: &str) -> Result<CrashBackend, String> {
        match s {
            "file" => Ok(CrashBackend::File),
            "sled" => Ok(CrashBackend::Sled),
            other => Err(format!("unknown backend {other:?} (expected file or sled)")),
        }
    }

    /// Opens the journal at `dir` the way both sides of the crash test do: tolerate a torn
    /// tail (a crash mid-write is expected), refuse anything worse.
    pub fn open_journal(self, dir: &Path) -> Result<Journal, String> {
        let backend: Box<dyn JournalBackend> = match self {
            CrashBackend::File => Box::new(
                FileBackend::open(
                    dir,
                    FileOptions {
                        segment_bytes: CRASH_SEGMENT_BYTES,
                        preallocate: true,
                    },
                )
                .map_err(|e| format!("opening file journal {}: {e}", dir.display()))?,
            ),
            CrashBackend::Sled => Box::new(
                SledBackend::open(dir)
                    .map_err(|e| format!("opening sled journal {}: {e}", dir.display()))?,
            ),
        };
        Journal::open(
            backend,
            JournalOptions {
                recovery_mode: RecoveryMode::TolerateTailCorruption,
                ..JournalOptions::default()
            },
        )
        .map_err(|e| {
            format!(
                "recovering {} journal {}: {e}",
                self.as_str(),
                dir.display()
            )
        })
    }
}

//! Opening a data dir's journal: the part of startup a standalone node and an HA node share
//! (docs/architecture.md). The data dir is validated (or initialised), the configured backend
//! opened and the journal recovered under `journal.recovery_mode`.

use crescent_journal::file::{FileBackend, FileOptions};
use crescent_journal::metrics::JournalMetrics;
#[cfg(feature = "sled")]
use crescent_journal::sled_backend::SledBackend;
use crescent_journal::{Journal, JournalBackend, JournalOptions};

use crate::config::{Config, JournalBackendKind};
use crate::datadir::DataDir;
use crate::error::ServerError;
use crate::metrics::ServerMetrics;

/// A data dir with its journal open (startup's first half).
pub struct OpenedJournal {
    pub dir: DataDir,
    pub journal: Journal,
    pub backend_name: String,
    pub metrics: ServerMetrics,
}

/// Validates the data dir and opens (recovers) its journal.
pub fn open_journal(config: &Config) -> Result<OpenedJournal, ServerError> {
    let dir = DataDir::open_or_init(&config.data_dir, config.journal.backend.as_str())?;
    let metrics = ServerMetrics::new();
    let (backend, backend_name) = open_backend(config, &dir)?;
    let journal_metrics = JournalMetrics::register(&metrics.registry)
        .map_err(|e| ServerError::Recovery(format!("journal metrics: {e}")))?;
    let journal = Journal::open(
        backend,
        JournalOptions {
            recovery_mode: config.journal.recovery_mode,
            max_record_bytes: config.journal.max_record_bytes as usize,
            metrics: Some(journal_metrics),
            ..JournalOptions::default()
        },
    )?;
    // Journal::open logged what recovery cut (once); the quarantine it left, and any
    // earlier one not yet cleared, shows in /healthz and the gauge from here on.
    crate::journal_health::journal_health(&dir.journal_dir(), journal.metrics());
    Ok(OpenedJournal {
        dir,
        journal,
        backend_name,
        metrics,
    })
}

/// The configured journal backend over `dir`, and its name.
fn open_backend(
    config: &Config,
    dir: &DataDir,
) -> Result<(Box<dyn JournalBackend>, String), ServerError> {
    Ok(match config.journal.backend {
        JournalBackendKind::File => {
            let opts = FileOptions {
                segment_bytes: config.journal.segment_bytes,
                ..FileOptions::default()
            };
            (
                Box::new(FileBackend::open(dir.journal_dir(), opts)?),
                "file".to_string(),
            )
        }
        #[cfg(feature = "sled")]
        JournalBackendKind::Sled => (
            Box::new(SledBackend::open(dir.journal_dir().join("sled"))?),
            "sled".to_string(),
        ),
        // Config::validate refuses the setting in a build without the backend.
        #[cfg(not(feature = "sled"))]
        JournalBackendKind::Sled => {
            return Err(ServerError::Config(crate::config::invalid(
                "journal.backend",
                "\"sled\" needs a crescentd built with feature `sled`",
            )))
        }
    })
}

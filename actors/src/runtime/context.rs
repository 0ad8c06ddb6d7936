//! [`Runtime`]: what every aggregate actor shares (journal, commit watermark, term, clock, ids,
//! fatal handler, metrics).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crescent_journal::{EventData, Journal, JournalError, StreamId, Watermark};

use super::clock::{Clock, IdSource, RandomIds, SystemClock};
use super::metrics::RuntimeMetrics;
use crate::aggregate::{Ctx, DomainEvent};
use crate::event_versions::EventVersions;

/// Exit code of the process after a fatal journal failure (EX_SOFTWARE), distinct from a clean
/// exit (0) and from a startup/config failure (1), so supervisors and crash tests can tell them
/// apart.
pub const JOURNAL_FATAL_EXIT_CODE: i32 = 70;

/// What the runtime calls, once, when the journal can no longer make writes durable: the
/// affected stream and the error. The process must not continue serving state the journal does
/// not hold; the default handler exits.
pub type FatalHandler = Arc<dyn Fn(&StreamId, &JournalError) + Send + Sync>;

/// The production fatal handler: log at error level and exit with [`JOURNAL_FATAL_EXIT_CODE`].
pub fn exit_process_on_fatal() -> FatalHandler {
    Arc::new(|stream: &StreamId, err: &JournalError| {
        tracing::error!(
            stream = %stream,
            error = %err,
            exit_code = JOURNAL_FATAL_EXIT_CODE,
            "journal failure is fatal: stopping the process; restart recovers from disk"
        );
        std::process::exit(JOURNAL_FATAL_EXIT_CODE);
    })
}

struct Inner {
    journal: Journal,
    commit: Watermark,
    term: Arc<AtomicU64>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
    fatal: FatalHandler,
    fatal_fired: AtomicBool,
    metrics: RuntimeMetrics,
    versions: Option<EventVersions>,
}

/// The context shared by all aggregate actors. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("commit", &self.inner.commit.get())
            .field("term", &self.term())
            .field("failed", &self.has_failed())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A builder with production defaults: the commit watermark is the journal's durable
    /// watermark, the term is the journal's current term, system clock, random ids, exit on
    /// fatal, unregistered metrics.
    pub fn builder(journal: Journal) -> RuntimeBuilder {
        RuntimeBuilder {
            journal,
            commit: None,
            term: None,
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            fatal: exit_process_on_fatal(),
            metrics: RuntimeMetrics::unregistered(),
            versions: None,
        }
    }

    pub fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    /// The watermark replies and reads wait on.
    pub fn commit(&self) -> &Watermark {
        &self.inner.commit
    }

    /// The term new appends carry.
    pub fn term(&self) -> u64 {
        self.inner.term.load(Ordering::SeqCst)
    }

    /// Sets the term new appends carry (the HA layer calls this on promotion).
    pub fn set_term(&self, term: u64) {
        self.inner.term.store(term, Ordering::SeqCst);
    }

    /// The shared term cell, for a component that tracks the term itself.
    pub fn term_cell(&self) -> Arc<AtomicU64> {
        self.inner.term.clone()
    }

    pub fn clock(&self) -> &dyn Clock {
        self.inner.clock.as_ref()
    }

    pub fn metrics(&self) -> &RuntimeMetrics {
        &self.inner.metrics
    }

    /// The context for deciding one command: the time, a fresh id and the current term, each
    /// read once so the same values reach `decide` and the journal record.
    pub fn next_ctx(&self) -> Ctx {
        Ctx {
            now_ms: self.inner.clock.now_ms(),
            fresh_id: self.inner.ids.fresh_id(),
            term: self.term(),
        }
    }

    /// The journal form of `event` at the version the event version policy chooses for its
    /// kind (docs/ha.md, "Event versions in a mixed pair"); without a policy, or for a kind
    /// with one version only, its current version.
    pub fn event_data<E: DomainEvent>(&self, event: &E) -> EventData {
        let kind = event.kind();
        let chosen = self.inner.versions.as_ref().and_then(|v| v.writes(kind));
        match chosen {
            Some(version) if version != event.version() => EventData {
                kind: kind.to_owned(),
                version,
                // The policy only chooses versions between the kind's write floor and its
                // current one, which `encode_at` covers (each aggregate's codec tests).
                payload: event
                    .encode_at(version)
                    .expect("encode_at covers every version from the write floor up"),
            },
            _ => EventData {
                kind: kind.to_owned(),
                version: event.version(),
                payload: event.encode(),
            },
        }
    }

    /// The event version policy this runtime writes with, if it has one.
    pub fn event_versions(&self) -> Option<&EventVersions> {
        self.inner.versions.as_ref()
    }

    /// True once a fatal journal failure has been reported.
    pub fn has_failed(&self) -> bool {
        self.inner.fatal_fired.load(Ordering::SeqCst)
    }

    /// Reports a fatal journal failure. The handler runs once per runtime: every actor that
    /// observes the same failure lands here, and the first report is the one that matters.
    pub fn report_fatal(&self, stream: &StreamId, err: &JournalError) {
        if self.inner.fatal_fired.swap(true, Ordering::SeqCst) {
            tracing::error!(stream = %stream, error = %err, "journal failure (already reported)");
            return;
        }
        (self.inner.fatal)(stream, err);
    }
}

/// Builds a [`Runtime`]; see [`Runtime::builder`] for the defaults.
pub struct RuntimeBuilder {
    journal: Journal,
    commit: Option<Watermark>,
    term: Option<Arc<AtomicU64>>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
    fatal: FatalHandler,
    metrics: RuntimeMetrics,
    versions: Option<EventVersions>,
}

impl RuntimeBuilder {
    /// The watermark that decides when a reply may leave (HA: min(local, in-sync standby)).
    pub fn commit_watermark(mut self, commit: Watermark) -> Self {
        self.commit = Some(commit);
        self
    }

    /// The initial term.
    pub fn term(mut self, term: u64) -> Self {
        self.term = Some(Arc::new(AtomicU64::new(term)));
        self
    }

    /// A term cell shared with another component (the election loop).
    pub fn shared_term(mut self, term: Arc<AtomicU64>) -> Self {
        self.term = Some(term);
        self
    }

    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn ids(mut self, ids: Arc<dyn IdSource>) -> Self {
        self.ids = ids;
        self
    }

    pub fn fatal_handler(mut self, fatal: FatalHandler) -> Self {
        self.fatal = fatal;
        self
    }

    pub fn metrics(mut self, metrics: RuntimeMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Writes each event at the version `versions` chooses (an HA active; without it, every
    /// event at its current version).
    pub fn event_versions(mut self, versions: EventVersions) -> Self {
        self.versions = Some(versions);
        self
    }

    pub fn build(self) -> Runtime {
        let commit = self.commit.unwrap_or_else(|| self.journal.durable());
        let term = self
            .term
            .unwrap_or_else(|| Arc::new(AtomicU64::new(self.journal.term())));
        Runtime {
            inner: Arc::new(Inner {
                journal: self.journal,
                commit,
                term,
                clock: self.clock,
                ids: self.ids,
                fatal: self.fatal,
                fatal_fired: AtomicBool::new(false),
                metrics: self.metrics,
                versions: self.versions,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::DecodeError;
    use crate::event_versions::{EventVersionPolicy, StartAt};
    use crescent_journal::memory::{MemoryBackend, MemoryStore};
    use crescent_journal::JournalOptions;

    /// An event written at v2, or at v1 (its write floor).
    #[derive(Debug, Clone, PartialEq, serde::Serialize)]
    struct Twice;

    impl DomainEvent for Twice {
        fn kind(&self) -> &'static str {
            "twice"
        }
        fn version(&self) -> u16 {
            2
        }
        fn encode(&self) -> Vec<u8> {
            b"v2".to_vec()
        }
        fn decode(_: &str, _: u16, _: &[u8]) -> Result<Self, DecodeError> {
            Ok(Twice)
        }
        fn schema() -> &'static [(&'static str, u16)] {
            &[("twice", 2)]
        }
        fn write_floor() -> &'static [(&'static str, u16)] {
            &[("twice", 1)]
        }
        fn encode_at(&self, version: u16) -> Option<Vec<u8>> {
            match version {
                1 => Some(b"v1".to_vec()),
                2 => Some(self.encode()),
                _ => None,
            }
        }
    }

    fn runtime(versions: Option<EventVersions>) -> Runtime {
        let journal = Journal::open(
            Box::new(MemoryBackend::new(MemoryStore::new())),
            JournalOptions::default(),
        )
        .unwrap();
        let builder = Runtime::builder(journal);
        match versions {
            Some(v) => builder.event_versions(v),
            None => builder,
        }
        .build()
    }

    fn written(rt: &Runtime) -> (u16, Vec<u8>) {
        let data = rt.event_data(&Twice);
        assert_eq!(data.kind, "twice");
        (data.version, data.payload)
    }

    #[test]
    fn events_are_written_at_the_version_the_policy_chooses() {
        assert_eq!(written(&runtime(None)), (2, b"v2".to_vec()));
        let schema = [("twice".to_string(), 2)];
        let floor = [("twice".to_string(), 1)];
        let versions = EventVersions::new(EventVersionPolicy::new(&schema, &floor, StartAt::Floor));
        let rt = runtime(Some(versions.clone()));
        assert_eq!(written(&rt), (1, b"v1".to_vec()));
        versions.follow(&[("twice".to_string(), 2)]).unwrap();
        assert_eq!(written(&rt), (2, b"v2".to_vec()));
    }
}

//! Shadow replay: a thread that follows the journal's durable records into its own copy of the
//! state and writes snapshots from it, so live actors never pause for a snapshot.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crescent_journal::JournalError;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Result, SnapshotError};
use crate::format::Position;
use crate::metrics::SnapshotMetrics;
use crate::source::JournalSource;
use crate::state::ReplayState;
use crate::store::{SnapshotDir, SnapshotInfo};

/// When to snapshot and what to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotterConfig {
    /// Write a snapshot once this many new events have been applied (default 10 000).
    pub every_events: u64,
    /// Write a snapshot once this much time has passed since the last one, if there are new
    /// events (default 5 minutes).
    pub every: Duration,
    /// Snapshots kept (default 3, at least 1).
    pub retain: usize,
    /// After retention, drop journal records behind the oldest retained snapshot (default on).
    pub truncate_journal: bool,
    /// Wait after a failed write before trying again (default 10 s).
    pub retry_backoff: Duration,
}

impl Default for SnapshotterConfig {
    fn default() -> Self {
        Self {
            every_events: 10_000,
            every: Duration::from_secs(300),
            retain: 3,
            truncate_journal: true,
            retry_backoff: Duration::from_secs(10),
        }
    }
}

/// What the snapshotter is doing, for `/stats` and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotterStatus {
    /// The shadow state's position.
    pub applied: Position,
    pub last_snapshot: Option<SnapshotInfo>,
    /// The last failure (cleared by the next successful write).
    pub last_error: Option<String>,
    /// The thread has exited (stop, journal closed, or a fatal replay error).
    pub stopped: bool,
}

enum Control {
    SnapshotNow(oneshot::Sender<Result<SnapshotInfo>>),
    Stop,
}

/// Handle on the snapshotter thread. Dropping it stops the thread.
pub struct Snapshotter {
    control: mpsc::UnboundedSender<Control>,
    status: Arc<Mutex<SnapshotterStatus>>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl std::fmt::Debug for Snapshotter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshotter")
            .field("status", &self.status())
            .finish()
    }
}

impl Snapshotter {
    /// Starts following `journal` from `state`'s position (typically a clone of what restore
    /// produced). Prepares `dir` (creates it, removes leftover temp files) first.
    pub fn start<S: ReplayState, J: JournalSource>(
        state: S,
        journal: J,
        dir: SnapshotDir,
        config: SnapshotterConfig,
        metrics: SnapshotMetrics,
    ) -> Result<Self> {
        dir.prepare_for_writing()?;
        let status = Arc::new(Mutex::new(SnapshotterStatus {
            applied: state.position(),
            ..Default::default()
        }));
        let (tx, rx) = mpsc::unbounded_channel();
        let worker = Worker {
            state,
            journal,
            dir,
            config,
            metrics,
            status: status.clone(),
            pending: 0,
            last_write: Instant::now(),
            retry_at: None,
        };
        let thread = std::thread::Builder::new()
            .name("crescent-snapshotter".into())
            .spawn(move || {
                let status = worker.status.clone();
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .map_err(|e| SnapshotError::io("<snapshotter runtime>", e))?;
                let result = rt.block_on(worker.run(rx));
                let mut st = status.lock().expect("status poisoned");
                st.stopped = true;
                if let Err(e) = &result {
                    tracing::error!(error = %e, "snapshotter stopped on a fatal error");
                    st.last_error = Some(e.to_string());
                }
                result
            })
            .map_err(|e| SnapshotError::io("<snapshotter thread>", e))?;
        Ok(Self {
            control: tx,
            status,
            thread: Some(thread),
        })
    }

    fn request(&self) -> Result<oneshot::Receiver<Result<SnapshotInfo>>> {
        let (tx, rx) = oneshot::channel();
        self.control
            .send(Control::SnapshotNow(tx))
            .map_err(|_| SnapshotError::Stopped(self.stop_reason()))?;
        Ok(rx)
    }

    fn stop_reason(&self) -> String {
        self.status()
            .last_error
            .unwrap_or_else(|| "the snapshotter has exited".into())
    }

    /// Catches up with the durable journal and writes a snapshot now (blocking; not for use on
    /// an async runtime thread, see [`Snapshotter::snapshot_now_async`]). If nothing changed
    /// since the last snapshot, returns that one.
    pub fn snapshot_now(&self) -> Result<SnapshotInfo> {
        self.request()?
            .blocking_recv()
            .map_err(|_| SnapshotError::Stopped(self.stop_reason()))?
    }

    /// Async form of [`Snapshotter::snapshot_now`].
    pub async fn snapshot_now_async(&self) -> Result<SnapshotInfo> {
        self.request()?
            .await
            .map_err(|_| SnapshotError::Stopped(self.stop_reason()))?
    }

    pub fn status(&self) -> SnapshotterStatus {
        self.status.lock().expect("status poisoned").clone()
    }

    /// Stops the thread and waits for it; returns the fatal error it stopped on, if any.
    pub fn stop(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        let _ = self.control.send(Control::Stop);
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| SnapshotError::Stopped("the snapshotter thread panicked".into()))?,
            None => Ok(()),
        }
    }
}

impl Drop for Snapshotter {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// First wait after a failed journal read (doubling up to `retry_backoff`).
const READ_RETRY_FIRST: Duration = Duration::from_millis(100);

/// An IO failure (the file is there, the process could not open or read it now) rather than
/// a journal that does not continue the state: worth retrying.
fn is_transient(e: &SnapshotError) -> bool {
    matches!(
        e,
        SnapshotError::Io { .. } | SnapshotError::Journal(JournalError::Io { .. })
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

struct Worker<S, J> {
    state: S,
    journal: J,
    dir: SnapshotDir,
    config: SnapshotterConfig,
    metrics: SnapshotMetrics,
    status: Arc<Mutex<SnapshotterStatus>>,
    /// Events applied since the last snapshot.
    pending: u64,
    last_write: Instant,
    /// After a failed write, no automatic attempt before this instant.
    retry_at: Option<Instant>,
}

impl<S: ReplayState, J: JournalSource> Worker<S, J> {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Control>) -> Result<()> {
        let watermark = self.journal.durable();
        let mut read_backoff = self.config.retry_backoff.min(READ_RETRY_FIRST);
        loop {
            if let Err(e) = self.catch_up() {
                if !is_transient(&e) {
                    return Err(e);
                }
                // An IO failure reading the journal (EMFILE under a connection flood, say) is
                // retried with backoff, never the end of snapshots.
                self.metrics.failures.inc();
                tracing::warn!(error = %e, retry_ms = read_backoff.as_millis() as u64,
                    "snapshotter cannot read the journal; retrying");
                self.status.lock().expect("status poisoned").last_error = Some(e.to_string());
                tokio::select! {
                    biased;
                    msg = rx.recv() => match msg {
                        Some(Control::SnapshotNow(reply)) => {
                            let _ = reply.send(Err(SnapshotError::Stopped(e.to_string())));
                        }
                        Some(Control::Stop) | None => return Ok(()),
                    },
                    _ = tokio::time::sleep(read_backoff) => {}
                }
                read_backoff =
                    (read_backoff * 2).min(self.config.retry_backoff.max(READ_RETRY_FIRST));
                continue;
            }
            read_backoff = self.config.retry_backoff.min(READ_RETRY_FIRST);
            if self.due() {
                // Failures are counted and logged inside; the next attempt waits for the backoff.
                let _ = self.write();
            }
            let next = self.state.position().seq + 1;
            let deadline = self
                .next_deadline()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                biased;
                msg = rx.recv() => match msg {
                    Some(Control::SnapshotNow(reply)) => {
                        if let Err(e) = self.catch_up() {
                            let _ = reply.send(Err(SnapshotError::Stopped(e.to_string())));
                            if is_transient(&e) {
                                continue;
                            }
                            return Err(e);
                        }
                        let _ = reply.send(self.snapshot_now());
                    }
                    Some(Control::Stop) | None => return Ok(()),
                },
                waited = watermark.wait_for(next) => match waited {
                    Ok(_) => {}
                    Err(JournalError::Closed) => {
                        self.catch_up()?;
                        tracing::info!("journal closed, snapshotter exits");
                        return Ok(());
                    }
                    Err(e) => return Err(e.into()),
                },
                _ = tokio::time::sleep_until(deadline.into()) => {}
            }
        }
    }

    /// Applies every durable record beyond the state's position.
    fn catch_up(&mut self) -> Result<()> {
        let durable = self.journal.durable().get();
        let from = self.state.position().seq + 1;
        if durable < from {
            return Ok(());
        }
        let span = tracing::debug_span!("snapshotter.catch_up", from, durable);
        let _g = span.enter();
        let result = self.apply_from(from);
        // Published even on failure, so the status shows where replay stopped.
        let applied = self.state.position();
        self.metrics.applied_seq.set(applied.seq as i64);
        self.status.lock().expect("status poisoned").applied = applied;
        result
    }

    fn apply_from(&mut self, from: u64) -> Result<()> {
        let (journal, state, pending) = (&self.journal, &mut self.state, &mut self.pending);
        crescent_journal::visit_capturing(
            |visit| journal.visit_range(from, u64::MAX, visit),
            |rec| {
                let at = state.position();
                if rec.seq != at.seq + 1 {
                    return Err(SnapshotError::Discontinuity {
                        snapshot: None,
                        after: at.seq,
                        reason: format!("the journal returned seq {} next", rec.seq),
                    });
                }
                state
                    .apply(rec)
                    .map_err(|e| SnapshotError::state(format!("replaying seq {}", rec.seq), e))?;
                *pending += 1;
                Ok(())
            },
        )
    }

    fn due(&self) -> bool {
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            return false;
        }
        self.pending >= self.config.every_events.max(1)
            || (self.pending > 0 && self.last_write.elapsed() >= self.config.every)
    }

    fn next_deadline(&self) -> Option<Instant> {
        let retry = self.retry_at.unwrap_or_else(Instant::now);
        if self.pending >= self.config.every_events.max(1) {
            Some(retry)
        } else if self.pending > 0 {
            Some((self.last_write + self.config.every).max(retry))
        } else {
            None
        }
    }

    fn snapshot_now(&mut self) -> Result<SnapshotInfo> {
        let last = self
            .status
            .lock()
            .expect("status poisoned")
            .last_snapshot
            .clone();
        match last {
            Some(info) if self.pending == 0 && info.position == self.state.position() => Ok(info),
            _ => self.write(),
        }
    }

    /// Writes a snapshot of the shadow state, applies retention and truncates the journal.
    fn write(&mut self) -> Result<SnapshotInfo> {
        let position = self.state.position();
        let span = tracing::info_span!("snapshot.write", seq = position.seq);
        let _g = span.enter();
        let started = Instant::now();
        let written = self
            .state
            .to_sections()
            .map_err(|e| SnapshotError::state(format!("encoding state at seq {}", position.seq), e))
            .and_then(|sections| self.dir.write(&position, now_ms(), &sections));
        let info = match written {
            Ok(info) => info,
            Err(e) => {
                self.metrics.failures.inc();
                self.retry_at = Some(Instant::now() + self.config.retry_backoff);
                tracing::error!(error = %e, "snapshot write failed");
                self.status.lock().expect("status poisoned").last_error = Some(e.to_string());
                return Err(e);
            }
        };
        let elapsed = started.elapsed();
        self.metrics.written.inc();
        self.metrics.bytes_written.inc_by(info.bytes);
        self.metrics.last_bytes.set(info.bytes as i64);
        self.metrics.last_seq.set(position.seq as i64);
        self.metrics.write_seconds.observe(elapsed.as_secs_f64());
        tracing::info!(
            file = %info.path.display(),
            bytes = info.bytes,
            ms = elapsed.as_millis() as u64,
            "snapshot written"
        );
        self.pending = 0;
        self.last_write = Instant::now();
        self.retry_at = None;
        {
            let mut st = self.status.lock().expect("status poisoned");
            st.last_snapshot = Some(info.clone());
            st.last_error = None;
        }
        if let Err(e) = self.retain() {
            // The snapshot itself is durable; only housekeeping failed and reruns next time.
            self.metrics.failures.inc();
            tracing::error!(error = %e, "snapshot retention or journal truncation failed");
            self.status.lock().expect("status poisoned").last_error = Some(e.to_string());
        }
        Ok(info)
    }

    fn retain(&mut self) -> Result<()> {
        let kept = self.dir.retain(self.config.retain)?;
        if self.config.truncate_journal {
            if let Some(oldest) = kept.first() {
                // Restore may fall back to the oldest retained snapshot (when newer ones are
                // damaged), so the journal must keep everything after it.
                self.journal.truncate_prefix(oldest.seq + 1)?;
            }
        }
        Ok(())
    }
}

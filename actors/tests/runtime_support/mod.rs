//! Shared fixtures for the runtime tests: toy aggregates and a journal backend whose writes the
//! test can hold back or fail.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crescent_actors::runtime::{FatalHandler, ManualClock, Runtime, SequentialIds};
use crescent_actors::{Aggregate, Ctx, DecodeError, DomainEvent};
use crescent_journal::codec::{decode_exact, EncodedBatch};
use crescent_journal::recovery::RecoveryMode;
use crescent_journal::{Journal, Watermark};
use crescent_journal::{
    JournalBackend, JournalError, JournalOptions, ReadSource, Record, RecordIter, Recovered,
    GENESIS_DIGEST,
};
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// A counter aggregate.

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counter {
    pub value: i64,
    /// Time and operation id of the last change, as decided from `Ctx`.
    pub last_change: Option<(i64, uuid::Uuid)>,
}

#[derive(Debug)]
pub enum CounterCmd {
    /// Adds a positive amount.
    Add(i64),
    /// Adds `n` once per element: several events from one command.
    AddEach(Vec<i64>),
    /// Sets the value; a no-op when it already has that value.
    Set(i64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CounterEvent {
    Added { by: i64, at_ms: i64, op: uuid::Uuid },
    Set { to: i64, at_ms: i64, op: uuid::Uuid },
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CounterError {
    #[error("amount must be positive, got {0}")]
    NotPositive(i64),
}

impl DomainEvent for CounterEvent {
    fn kind(&self) -> &'static str {
        match self {
            CounterEvent::Added { .. } => "counter_added",
            CounterEvent::Set { .. } => "counter_set",
        }
    }

    fn version(&self) -> u16 {
        1
    }

    fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("counter event encodes")
    }

    fn decode(kind: &str, version: u16, payload: &[u8]) -> Result<Self, DecodeError> {
        if version != 1 {
            return Err(DecodeError::UnsupportedVersion {
                kind: kind.into(),
                version,
                supported: 1,
            });
        }
        rmp_serde::from_slice(payload).map_err(|e| DecodeError::Malformed {
            kind: kind.into(),
            version,
            reason: e.to_string(),
        })
    }

    fn schema() -> &'static [(&'static str, u16)] {
        &[("counter_added", 1), ("counter_set", 1)]
    }
}

impl Aggregate for Counter {
    const KIND: &'static str = "test_counter";
    const SNAPSHOT_SCHEMA: u32 = 1;
    type Command = CounterCmd;
    type Event = CounterEvent;
    type Error = CounterError;

    fn decide(&self, cmd: &CounterCmd, ctx: &Ctx) -> Result<Vec<CounterEvent>, CounterError> {
        let added = |by: i64| {
            if by <= 0 {
                return Err(CounterError::NotPositive(by));
            }
            Ok(CounterEvent::Added {
                by,
                at_ms: ctx.now_ms,
                op: ctx.fresh_id,
            })
        };
        match cmd {
            CounterCmd::Add(n) => Ok(vec![added(*n)?]),
            CounterCmd::AddEach(ns) => ns.iter().map(|n| added(*n)).collect(),
            CounterCmd::Set(to) if *to == self.value => Ok(vec![]),
            CounterCmd::Set(to) => Ok(vec![CounterEvent::Set {
                to: *to,
                at_ms: ctx.now_ms,
                op: ctx.fresh_id,
            }]),
        }
    }

    fn apply(&mut self, event: &CounterEvent) {
        match event {
            CounterEvent::Added { by, at_ms, op } => {
                self.value += by;
                self.last_change = Some((*at_ms, *op));
            }
            CounterEvent::Set { to, at_ms, op } => {
                self.value = *to;
                self.last_change = Some((*at_ms, *op));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A lease that a periodic Tick expires, for timer tests.

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub holder: Option<String>,
    pub expires_at_ms: i64,
    /// When the lease was seen expired (the Tick's `Ctx::now_ms`).
    pub expired_at_ms: Option<i64>,
}

#[derive(Debug)]
pub enum LeaseCmd {
    Acquire { holder: String, ttl_ms: i64 },
    Tick,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LeaseEvent {
    Acquired { holder: String, expires_at_ms: i64 },
    Expired { at_ms: i64 },
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    #[error("lease is held by {0}")]
    Held(String),
}

impl DomainEvent for LeaseEvent {
    fn kind(&self) -> &'static str {
        match self {
            LeaseEvent::Acquired { .. } => "lease_acquired",
            LeaseEvent::Expired { .. } => "lease_expired",
        }
    }

    fn version(&self) -> u16 {
        1
    }

    fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("lease event encodes")
    }

    fn decode(kind: &str, version: u16, payload: &[u8]) -> Result<Self, DecodeError> {
        rmp_serde::from_slice(payload).map_err(|e| DecodeError::Malformed {
            kind: kind.into(),
            version,
            reason: e.to_string(),
        })
    }

    fn schema() -> &'static [(&'static str, u16)] {
        &[("lease_acquired", 1), ("lease_expired", 1)]
    }
}

impl Aggregate for Lease {
    const KIND: &'static str = "test_lease";
    const SNAPSHOT_SCHEMA: u32 = 1;
    type Command = LeaseCmd;
    type Event = LeaseEvent;
    type Error = LeaseError;

    fn decide(&self, cmd: &LeaseCmd, ctx: &Ctx) -> Result<Vec<LeaseEvent>, LeaseError> {
        match cmd {
            LeaseCmd::Acquire { holder, ttl_ms } => match &self.holder {
                Some(h) if h != holder => Err(LeaseError::Held(h.clone())),
                _ => Ok(vec![LeaseEvent::Acquired {
                    holder: holder.clone(),
                    expires_at_ms: ctx.now_ms + ttl_ms,
                }]),
            },
            LeaseCmd::Tick => match &self.holder {
                Some(_) if ctx.now_ms >= self.expires_at_ms => {
                    Ok(vec![LeaseEvent::Expired { at_ms: ctx.now_ms }])
                }
                _ => Ok(vec![]),
            },
        }
    }

    fn apply(&mut self, event: &LeaseEvent) {
        match event {
            LeaseEvent::Acquired {
                holder,
                expires_at_ms,
            } => {
                self.holder = Some(holder.clone());
                self.expires_at_ms = *expires_at_ms;
                self.expired_at_ms = None;
            }
            LeaseEvent::Expired { at_ms } => {
                self.holder = None;
                self.expired_at_ms = Some(*at_ms);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A journal backend whose writes the test controls.

#[derive(Default)]
struct ControlInner {
    held: Mutex<bool>,
    released: Condvar,
    fail: AtomicBool,
    appends: AtomicU64,
    records: Mutex<Vec<Record>>,
}

/// Test-side handle of a [`GatedBackend`]: hold writes (the "fsync" does not finish until
/// released), make them fail, inspect what was stored.
#[derive(Clone, Default)]
pub struct BackendControl {
    inner: Arc<ControlInner>,
}

impl BackendControl {
    /// Writes started from now on block until [`BackendControl::release`].
    pub fn hold(&self) {
        *self.inner.held.lock().unwrap() = true;
    }

    pub fn release(&self) {
        *self.inner.held.lock().unwrap() = false;
        self.inner.released.notify_all();
    }

    /// Every later write fails (a device error).
    pub fn fail_writes(&self) {
        self.inner.fail.store(true, Ordering::SeqCst);
    }

    /// Batches written so far.
    pub fn appends(&self) -> u64 {
        self.inner.appends.load(Ordering::SeqCst)
    }

    /// Records stored so far.
    pub fn records(&self) -> Vec<Record> {
        self.inner.records.lock().unwrap().clone()
    }
}

pub struct GatedBackend {
    ctl: BackendControl,
}

impl JournalBackend for GatedBackend {
    fn name(&self) -> &'static str {
        "gated-test"
    }

    fn recover(&mut self, _mode: RecoveryMode) -> crescent_journal::Result<Recovered> {
        Ok(Recovered {
            first_seq: 1,
            last_seq: 0,
            last_term: 0,
            max_term: 0,
            last_digest: GENESIS_DIGEST,
            truncated: None,
            base: None,
        })
    }

    fn append(&mut self, batch: &EncodedBatch) -> crescent_journal::Result<()> {
        let inner = &self.ctl.inner;
        let mut held = inner.held.lock().unwrap();
        while *held {
            held = inner.released.wait(held).unwrap();
        }
        drop(held);
        if inner.fail.load(Ordering::SeqCst) {
            return Err(JournalError::io(
                "gated-test",
                std::io::Error::other("injected write failure"),
            ));
        }
        let mut records = inner.records.lock().unwrap();
        for i in 0..batch.len() {
            records.push(decode_exact(batch.frame_bytes(i)).expect("frame decodes"));
        }
        inner.appends.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn truncate_prefix(&mut self, keep_from: u64) -> crescent_journal::Result<()> {
        self.ctl
            .inner
            .records
            .lock()
            .unwrap()
            .retain(|r| r.seq >= keep_from);
        Ok(())
    }

    fn read_source(&self) -> Box<dyn ReadSource> {
        Box::new(GatedReader {
            ctl: self.ctl.clone(),
        })
    }
}

struct GatedReader {
    ctl: BackendControl,
}

impl ReadSource for GatedReader {
    fn read_range(&self, from: u64, upto: u64) -> crescent_journal::Result<RecordIter> {
        let records: Vec<_> = self
            .ctl
            .records()
            .into_iter()
            .filter(|r| r.seq >= from && r.seq <= upto)
            .map(Ok)
            .collect();
        Ok(Box::new(records.into_iter()))
    }

    fn boxed_clone(&self) -> Box<dyn ReadSource> {
        Box::new(GatedReader {
            ctl: self.ctl.clone(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// A runtime over that backend, with a manual clock, sequential ids and a recording fatal handler.

pub struct Fixture {
    pub journal: Journal,
    pub backend: BackendControl,
    pub clock: ManualClock,
    pub runtime: Runtime,
    /// One entry per fatal-handler call: "stream: error".
    pub fatal_calls: Arc<Mutex<Vec<String>>>,
}

pub const START_MS: i64 = 1_700_000_000_000;

impl Fixture {
    /// Replies wait on the journal's durable watermark.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// Replies wait on `commit` (the test advances it by hand).
    pub fn with_commit(commit: Watermark) -> Self {
        Self::build(Some(commit))
    }

    fn build(commit: Option<Watermark>) -> Self {
        let backend = BackendControl::default();
        let journal = Journal::open(
            Box::new(GatedBackend {
                ctl: backend.clone(),
            }),
            JournalOptions::default(),
        )
        .expect("test journal opens");
        let clock = ManualClock::new(START_MS);
        let fatal_calls = Arc::new(Mutex::new(Vec::new()));
        let calls = fatal_calls.clone();
        let fatal: FatalHandler = Arc::new(move |stream, err| {
            calls.lock().unwrap().push(format!("{stream}: {err}"));
        });
        let mut builder = Runtime::builder(journal.clone())
            .term(1)
            .clock(Arc::new(clock.clone()))
            .ids(Arc::new(SequentialIds::new()))
            .fatal_handler(fatal);
        if let Some(commit) = commit {
            builder = builder.commit_watermark(commit);
        }
        Self {
            journal,
            backend,
            clock,
            runtime: builder.build(),
            fatal_calls,
        }
    }

    pub fn fatal_calls(&self) -> Vec<String> {
        self.fatal_calls.lock().unwrap().clone()
    }
}

/// Polls `cond` every few ms until it holds or `within` passes.
pub async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

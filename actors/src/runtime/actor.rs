//! [`AggregateActor`]: the actix shell around one aggregate instance.
//!
//! A command is decided against the current state, its events are submitted to the journal
//! (which assigns seqs at once), applied, and the reply waits on the commit watermark. The actor
//! does not wait with it: the reply runs as its own task beside the mailbox, so the next command
//! is decided while the previous batch's fsync is in flight (pipelining), and the journal's group
//! commit folds them into one write. No reply and no read result leaves before the state it
//! reflects is committed.

use std::ops::RangeInclusive;
use std::time::Instant;

use actix::{Actor, ActorContext, Addr, AsyncContext, Context, Handler, Message, ResponseFuture};
use crescent_journal::error::ErrorClass;
use crescent_journal::{JournalError, NewRecord, StreamId};
use tracing::Instrument;

use super::context::Runtime;
use super::error::RuntimeError;
use super::metrics::CommandOutcome;
use crate::aggregate::Aggregate;

/// A command for the aggregate instance an actor owns.
pub struct Execute<A: Aggregate> {
    pub command: A::Command,
}

impl<A: Aggregate> Execute<A> {
    pub fn new(command: A::Command) -> Self {
        Self { command }
    }
}

impl<A: Aggregate> Message for Execute<A> {
    type Result = Result<Executed<A::Event>, RuntimeError<A::Error>>;
}

/// The committed outcome of a command.
#[derive(Debug, Clone, PartialEq)]
pub struct Executed<E> {
    /// The events the command produced, in journal order (empty for a no-op).
    pub events: Vec<E>,
    /// The journal seqs of `events` (`events[i]` has seq `start + i`); `None` for a no-op.
    pub seqs: Option<RangeInclusive<u64>>,
    /// The instance's last applied seq after the command. The commit watermark had reached it
    /// when the reply was sent, so everything this reply reflects is committed.
    pub committed_through: u64,
}

impl<E> Executed<E> {
    /// True when the command produced no events.
    pub fn is_noop(&self) -> bool {
        self.events.is_empty()
    }

    /// The seq of the last event, if any.
    pub fn last_seq(&self) -> Option<u64> {
        self.seqs.as_ref().map(|r| *r.end())
    }

    /// Each event with its journal seq.
    pub fn events_with_seqs(&self) -> impl Iterator<Item = (u64, &E)> {
        let first = self.seqs.as_ref().map_or(0, |r| *r.start());
        self.events
            .iter()
            .enumerate()
            .map(move |(i, e)| (first + i as u64, e))
    }
}

/// A query evaluated on the current state of an instance. The result is sent once the commit
/// watermark covers every event that state reflects.
pub struct Read<A, R> {
    query: Box<dyn FnOnce(&A) -> R + Send>,
}

impl<A, R> Read<A, R> {
    pub fn new(query: impl FnOnce(&A) -> R + Send + 'static) -> Self {
        Self {
            query: Box::new(query),
        }
    }
}

impl<A: Aggregate, R: Send + 'static> Message for Read<A, R> {
    type Result = Result<R, RuntimeError<A::Error>>;
}

/// Owns one aggregate instance: its id, its state and the seq of the last event applied to it.
pub struct AggregateActor<A: Aggregate> {
    stream: StreamId,
    state: A,
    last_seq: u64,
    runtime: Runtime,
}

impl<A: Aggregate> std::fmt::Debug for AggregateActor<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregateActor")
            .field("stream", &self.stream)
            .field("last_seq", &self.last_seq)
            .finish_non_exhaustive()
    }
}

/// A command that was decided (and, if it produced events, submitted and applied) and now only
/// waits for the commit watermark.
struct Submitted<E> {
    events: Vec<E>,
    seqs: Option<RangeInclusive<u64>>,
    wait_for: u64,
    outcome: CommandOutcome,
}

/// A command that failed before anything was left to wait for, and how to count it.
struct Refused<E> {
    error: RuntimeError<E>,
    outcome: CommandOutcome,
}

impl<A: Aggregate> AggregateActor<A> {
    /// An actor for instance `id` holding `state`, recovered from the journal up to
    /// `recovered_seq` (reads wait for the commit watermark to reach it; 0 for a new instance).
    pub fn new(runtime: Runtime, id: impl Into<String>, state: A, recovered_seq: u64) -> Self {
        Self {
            stream: StreamId::new(A::KIND, id),
            state,
            last_seq: recovered_seq,
            runtime,
        }
    }

    pub fn id(&self) -> &str {
        &self.stream.id
    }

    /// Decides `cmd`; if it produced events, submits them and applies them.
    ///
    /// The state is only changed after the journal accepted the submission (seqs assigned), so
    /// a refused submission (fenced, record too large, journal failed) leaves it untouched.
    /// `decide` sees the state by reference and `apply` runs on the live state afterwards, which
    /// gives the same result as applying to a clone and swapping it in, without copying the
    /// whole state per command.
    fn decide_and_submit(
        &mut self,
        cmd: &A::Command,
    ) -> Result<Submitted<A::Event>, Refused<A::Error>> {
        if self.runtime.has_failed() {
            return Err(Refused {
                error: RuntimeError::Journal(JournalError::Fatal(
                    "the journal failed earlier; this process no longer accepts commands".into(),
                )),
                outcome: CommandOutcome::Fatal,
            });
        }
        let ctx = self.runtime.next_ctx();
        let events = self.state.decide(cmd, &ctx).map_err(|e| Refused {
            error: RuntimeError::Domain(e),
            outcome: CommandOutcome::Rejected,
        })?;
        if events.is_empty() {
            // The caller may have seen the current state through an earlier reply whose commit
            // wait has not finished yet; a no-op must not overtake it.
            return Ok(Submitted {
                events,
                seqs: None,
                wait_for: self.last_seq,
                outcome: CommandOutcome::NoOp,
            });
        }
        let records = events
            .iter()
            .map(|e| NewRecord {
                stream: self.stream.clone(),
                event: self.runtime.event_data(e),
                timestamp_ms: ctx.now_ms,
            })
            .collect();
        let ticket = self
            .runtime
            .journal()
            .submit(ctx.term, records)
            .map_err(|e| {
                let outcome = journal_outcome(&e);
                Refused {
                    error: RuntimeError::Journal(e),
                    outcome,
                }
            })?;
        for e in &events {
            self.state.apply(e);
        }
        self.last_seq = ticket.last_seq;
        self.runtime
            .metrics()
            .events_appended(A::KIND, events.len());
        tracing::debug!(
            first_seq = ticket.first_seq,
            last_seq = ticket.last_seq,
            events = events.len(),
            "submitted"
        );
        Ok(Submitted {
            events,
            seqs: Some(ticket.first_seq..=ticket.last_seq),
            wait_for: ticket.last_seq,
            outcome: CommandOutcome::Committed,
        })
    }

    /// Reports a fatal journal failure and stops this actor: its state may hold events the
    /// journal never made durable, so it must not answer anything else.
    fn fail(&mut self, err: &JournalError, ctx: &mut Context<Self>) {
        self.runtime.report_fatal(&self.stream, err);
        ctx.stop();
    }

    fn fatal_reporter(&self, ctx: &Context<Self>) -> FatalReporter<A> {
        FatalReporter {
            runtime: self.runtime.clone(),
            stream: self.stream.clone(),
            actor: ctx.address(),
        }
    }
}

fn journal_outcome(e: &JournalError) -> CommandOutcome {
    match e {
        JournalError::Fenced { .. } => CommandOutcome::Fenced,
        e if e.class() == ErrorClass::Fatal => CommandOutcome::Fatal,
        _ => CommandOutcome::JournalError,
    }
}

impl<A: Aggregate> Actor for AggregateActor<A> {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        self.runtime.metrics().actor_started(A::KIND);
        tracing::debug!(aggregate = A::KIND, id = %self.stream.id, last_seq = self.last_seq, "aggregate actor started");
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.runtime.metrics().actor_stopped(A::KIND);
        tracing::debug!(aggregate = A::KIND, id = %self.stream.id, "aggregate actor stopped");
    }
}

impl<A: Aggregate> Handler<Execute<A>> for AggregateActor<A> {
    type Result = ResponseFuture<Result<Executed<A::Event>, RuntimeError<A::Error>>>;

    fn handle(&mut self, msg: Execute<A>, ctx: &mut Context<Self>) -> Self::Result {
        let started = Instant::now();
        let span =
            tracing::debug_span!("aggregate_command", aggregate = A::KIND, id = %self.stream.id);
        let submitted = {
            let _entered = span.enter();
            self.decide_and_submit(&msg.command)
        };
        let metrics = self.runtime.metrics().clone();
        let submitted = match submitted {
            Ok(s) => s,
            Err(Refused {
                error: err,
                outcome,
            }) => {
                metrics.command(A::KIND, outcome, started.elapsed());
                if let (CommandOutcome::Fatal, RuntimeError::Journal(e)) = (outcome, &err) {
                    self.fail(e, ctx);
                }
                // The reply runs as its own task, so it still leaves after a stop.
                return Box::pin(std::future::ready(Err(err)));
            }
        };
        // The commit wait runs as a separate task, not in this actor's context: the actor goes
        // on with its mailbox, and a wake-up of many waiters does not make the context re-poll
        // every pending reply.
        let commit = self.runtime.commit().clone();
        let on_fatal = self.fatal_reporter(ctx);
        let wait_for = submitted.wait_for;
        Box::pin(
            async move {
                match commit.wait_for(wait_for).await {
                    Ok(_) => {
                        metrics.command(A::KIND, submitted.outcome, started.elapsed());
                        Ok(Executed {
                            events: submitted.events,
                            seqs: submitted.seqs,
                            committed_through: wait_for,
                        })
                    }
                    Err(e) => {
                        let outcome = journal_outcome(&e);
                        metrics.command(A::KIND, outcome, started.elapsed());
                        if outcome == CommandOutcome::Fatal {
                            on_fatal.report(&e);
                        }
                        Err(RuntimeError::Journal(e))
                    }
                }
            }
            .instrument(span),
        )
    }
}

impl<A: Aggregate, R: Send + 'static> Handler<Read<A, R>> for AggregateActor<A> {
    type Result = ResponseFuture<Result<R, RuntimeError<A::Error>>>;

    fn handle(&mut self, msg: Read<A, R>, ctx: &mut Context<Self>) -> Self::Result {
        if self.runtime.has_failed() {
            // The state may hold events that never became durable: answer nothing from it.
            return Box::pin(std::future::ready(Err(RuntimeError::Journal(
                JournalError::Fatal("the journal failed earlier; reads are refused".into()),
            ))));
        }
        let value = (msg.query)(&self.state);
        let wait_for = self.last_seq;
        let commit = self.runtime.commit().clone();
        let metrics = self.runtime.metrics().clone();
        let on_fatal = self.fatal_reporter(ctx);
        let started = Instant::now();
        Box::pin(async move {
            let res = commit.wait_for(wait_for).await;
            metrics.read(A::KIND, res.is_ok(), started.elapsed());
            match res {
                Ok(_) => Ok(value),
                Err(e) => {
                    if e.class() == ErrorClass::Fatal {
                        on_fatal.report(&e);
                    }
                    Err(RuntimeError::Journal(e))
                }
            }
        })
    }
}

/// Stops the actor from outside its context (after a fatal failure seen by a reply task).
struct StopAfterFatal;

impl Message for StopAfterFatal {
    type Result = ();
}

impl<A: Aggregate> Handler<StopAfterFatal> for AggregateActor<A> {
    type Result = ();

    fn handle(&mut self, _msg: StopAfterFatal, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// What a reply task needs to handle a fatal failure: report it and stop the actor.
struct FatalReporter<A: Aggregate> {
    runtime: Runtime,
    stream: StreamId,
    actor: Addr<AggregateActor<A>>,
}

impl<A: Aggregate> FatalReporter<A> {
    fn report(&self, err: &JournalError) {
        self.runtime.report_fatal(&self.stream, err);
        self.actor.do_send(StopAfterFatal);
    }
}

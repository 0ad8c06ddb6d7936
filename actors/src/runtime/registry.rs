//! [`AggregateRegistry`]: one actor per aggregate instance, started on demand.
//!
//! After recovery the server hands the registry every instance's recovered state; the first
//! message for an instance starts its actor seeded with that state (or the aggregate's default
//! for an instance never seen). An instance whose actor stopped (after a fatal journal failure)
//! is never restarted in-process: its seed is stale, and only recovery from disk may rebuild it.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::{Actor, Addr, Arbiter, ArbiterHandle, MailboxError};
use crescent_journal::error::ErrorClass;
use futures::future::{AbortHandle, Abortable};

use super::actor::{AggregateActor, Execute, Executed, Read};
use super::context::Runtime;
use super::error::RuntimeError;
use crate::aggregate::Aggregate;

/// Looks up an instance's recovered state when its actor first starts (`None`: a new instance).
pub type StateLoader<A> = Box<dyn FnMut(&str) -> Option<A> + Send>;

struct Instances<A: Aggregate> {
    actors: HashMap<String, Addr<AggregateActor<A>>>,
    loader: StateLoader<A>,
}

struct RegistryInner<A: Aggregate> {
    runtime: Runtime,
    arbiter: ArbiterHandle,
    recovered_seq: u64,
    instances: Mutex<Instances<A>>,
}

/// Cheap cloneable handle to the actors of one aggregate type.
pub struct AggregateRegistry<A: Aggregate> {
    inner: Arc<RegistryInner<A>>,
}

impl<A: Aggregate> Clone for AggregateRegistry<A> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<A: Aggregate> std::fmt::Debug for AggregateRegistry<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregateRegistry")
            .field("kind", &A::KIND)
            .field("recovered_seq", &self.inner.recovered_seq)
            .finish_non_exhaustive()
    }
}

/// Builds an [`AggregateRegistry`]; see [`AggregateRegistry::builder`].
pub struct RegistryBuilder<A: Aggregate> {
    runtime: Runtime,
    arbiter: Option<ArbiterHandle>,
    recovered_seq: u64,
    loader: StateLoader<A>,
}

impl<A: Aggregate> RegistryBuilder<A> {
    /// Seeds instances with the states recovery rebuilt (snapshot + journal tail up to
    /// `recovered_seq`). Each state is handed to its actor once.
    pub fn recovered(mut self, mut states: BTreeMap<String, A>, recovered_seq: u64) -> Self {
        self.loader = Box::new(move |id: &str| states.remove(id));
        self.recovered_seq = recovered_seq;
        self
    }

    /// Seeds instances through a lookup (e.g. into a recovered snapshot), called once per
    /// instance when its actor starts.
    pub fn loader(
        mut self,
        loader: impl FnMut(&str) -> Option<A> + Send + 'static,
        recovered_seq: u64,
    ) -> Self {
        self.loader = Box::new(loader);
        self.recovered_seq = recovered_seq;
        self
    }

    /// The arbiter (thread) the actors and timers run on. Default: the arbiter current when
    /// [`RegistryBuilder::build`] is called.
    pub fn arbiter(mut self, arbiter: ArbiterHandle) -> Self {
        self.arbiter = Some(arbiter);
        self
    }

    /// Panics outside an actix system unless an arbiter was given.
    pub fn build(self) -> AggregateRegistry<A> {
        AggregateRegistry {
            inner: Arc::new(RegistryInner {
                runtime: self.runtime,
                arbiter: self.arbiter.unwrap_or_else(Arbiter::current),
                recovered_seq: self.recovered_seq,
                instances: Mutex::new(Instances {
                    actors: HashMap::new(),
                    loader: self.loader,
                }),
            }),
        }
    }
}

impl<A: Aggregate> AggregateRegistry<A> {
    pub fn builder(runtime: Runtime) -> RegistryBuilder<A> {
        RegistryBuilder {
            runtime,
            arbiter: None,
            recovered_seq: 0,
            loader: Box::new(|_: &str| None),
        }
    }

    /// A registry with no recovered state, on the current arbiter.
    pub fn new(runtime: Runtime) -> Self {
        Self::builder(runtime).build()
    }

    pub fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// The actor of instance `id`, started now if it is not running yet.
    ///
    /// Fails with [`RuntimeError::Stopped`] when the instance's actor has stopped, or when the
    /// registry's arbiter is gone.
    pub fn addr(&self, id: &str) -> Result<Addr<AggregateActor<A>>, RuntimeError<A::Error>> {
        let stopped = || RuntimeError::Stopped {
            kind: A::KIND,
            id: id.to_owned(),
        };
        let mut instances = self
            .inner
            .instances
            .lock()
            .expect("aggregate registry mutex poisoned");
        if let Some(addr) = instances.actors.get(id) {
            return if addr.connected() {
                Ok(addr.clone())
            } else {
                Err(stopped())
            };
        }
        if self.inner.runtime.has_failed() {
            return Err(stopped());
        }
        let state = (instances.loader)(id).unwrap_or_default();
        let runtime = self.inner.runtime.clone();
        let recovered_seq = self.inner.recovered_seq;
        let owned_id = id.to_owned();
        let addr = AggregateActor::start_in_arbiter(&self.inner.arbiter, move |_ctx| {
            AggregateActor::new(runtime, owned_id, state, recovered_seq)
        });
        instances.actors.insert(id.to_owned(), addr.clone());
        Ok(addr)
    }

    /// Ids of the instances whose actors have been started (running or stopped).
    pub fn started_ids(&self) -> Vec<String> {
        let instances = self
            .inner
            .instances
            .lock()
            .expect("aggregate registry mutex poisoned");
        let mut ids: Vec<String> = instances.actors.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Runs `command` on instance `id`; resolves once its events are committed.
    ///
    /// The command is queued for the actor when this is called (not when the future is first
    /// polled), so commands reach an instance in call order.
    pub fn execute(
        &self,
        id: &str,
        command: A::Command,
    ) -> impl Future<Output = Result<Executed<A::Event>, RuntimeError<A::Error>>> + Send + 'static
    {
        let sent = self.addr(id).map(|addr| addr.send(Execute::new(command)));
        let id = id.to_owned();
        async move { sent?.await.map_err(|e| mailbox_error::<A>(&id, e))? }
    }

    /// Evaluates `query` on the state of instance `id`; resolves once that state is committed.
    /// Queued like [`AggregateRegistry::execute`], so it sees every command sent before it.
    pub fn read<R: Send + 'static>(
        &self,
        id: &str,
        query: impl FnOnce(&A) -> R + Send + 'static,
    ) -> impl Future<Output = Result<R, RuntimeError<A::Error>>> + Send + 'static {
        let sent = self.addr(id).map(|addr| addr.send(Read::new(query)));
        let id = id.to_owned();
        async move { sent?.await.map_err(|e| mailbox_error::<A>(&id, e))? }
    }

    /// Sends the command made by `make` to instance `id` every `period` (the first one a period
    /// from now), until cancelled or the instance stops. Time reaches `decide` only through
    /// `Ctx::now_ms` from the runtime clock, so the command itself carries no time.
    ///
    /// Ticks do not pile up: the next tick waits for the previous command's reply. A refused
    /// command is logged and the timer keeps going; a stopped instance or a fatal journal
    /// failure ends it. Dropping the handle leaves the timer running; call
    /// [`TimerHandle::cancel`] to stop it.
    pub fn every(
        &self,
        id: &str,
        period: Duration,
        mut make: impl FnMut() -> A::Command + Send + 'static,
    ) -> TimerHandle {
        let registry = self.clone();
        let id = id.to_owned();
        let (abort, registration) = AbortHandle::new_pair();
        let timer = async move {
            let start = tokio::time::Instant::now() + period;
            let mut ticks = tokio::time::interval_at(start, period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                registry.runtime().metrics().timer_fired(A::KIND);
                match registry.execute(&id, make()).await {
                    Ok(_) => {}
                    Err(RuntimeError::Domain(e)) => {
                        tracing::debug!(aggregate = A::KIND, id = %id, error = %e, "timer command refused");
                    }
                    Err(e)
                        if matches!(e, RuntimeError::Stopped { .. })
                            || e.class() == ErrorClass::Fatal =>
                    {
                        tracing::debug!(aggregate = A::KIND, id = %id, error = %e, "timer ends");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(aggregate = A::KIND, id = %id, error = %e, "timer command failed");
                    }
                }
            }
        };
        let spawned = self.inner.arbiter.spawn(async move {
            // Ok: the timer ended by itself; Err: it was cancelled. Both end quietly.
            let _ = Abortable::new(timer, registration).await;
        });
        if !spawned {
            tracing::warn!(
                aggregate = A::KIND,
                "timer not started: the registry's arbiter has stopped"
            );
            abort.abort();
        }
        TimerHandle { abort }
    }
}

fn mailbox_error<A: Aggregate>(id: &str, e: MailboxError) -> RuntimeError<A::Error> {
    tracing::debug!(aggregate = A::KIND, id, error = %e, "aggregate actor unreachable");
    RuntimeError::Stopped {
        kind: A::KIND,
        id: id.to_owned(),
    }
}

/// Controls a timer started by [`AggregateRegistry::every`].
#[derive(Debug, Clone)]
pub struct TimerHandle {
    abort: AbortHandle,
}

impl TimerHandle {
    /// Stops the timer. A command already sent still completes.
    pub fn cancel(&self) {
        self.abort.abort();
    }

    /// True once the timer was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.abort.is_aborted()
    }
}

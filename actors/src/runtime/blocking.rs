//! [`Runtime::execute_blocking`]: one command decided, journaled and applied on the calling
//! thread, for state no actor owns yet (startup work that must be durable before the node
//! serves, such as the incarnation of a start: docs/rebuild.md). The records are the ones an
//! [`super::AggregateActor`] writes for the same events: the runtime's context (time, fresh id,
//! term) and its event version policy (docs/ha.md, "Event versions in a mixed pair").

use crescent_journal::{JournalError, NewRecord, StreamId};

use super::context::Runtime;
use super::error::RuntimeError;
use crate::aggregate::Aggregate;

/// The state after a command, and the events it produced (in journal order).
pub type Decided<A> = (A, Vec<<A as Aggregate>::Event>);

impl Runtime {
    /// Decides `command` on `state` (instance `id`), appends the events under the runtime's
    /// term and waits until they are durable, then returns `state` with them applied, and the
    /// events. A refusal (domain or journal) journals nothing and leaves `state` as it was.
    pub fn execute_blocking<A: Aggregate>(
        &self,
        id: &str,
        state: &A,
        command: &A::Command,
    ) -> Result<Decided<A>, RuntimeError<A::Error>> {
        if self.has_failed() {
            return Err(RuntimeError::Journal(JournalError::Fatal(
                "the journal failed earlier; this process no longer accepts commands".into(),
            )));
        }
        let ctx = self.next_ctx();
        let events = state.decide(command, &ctx).map_err(RuntimeError::Domain)?;
        let mut next = state.clone();
        if events.is_empty() {
            return Ok((next, events));
        }
        let stream = StreamId::new(A::KIND, id);
        let records = events
            .iter()
            .map(|e| NewRecord {
                stream: stream.clone(),
                event: self.event_data(e),
                timestamp_ms: ctx.now_ms,
            })
            .collect();
        self.journal()
            .append_blocking(ctx.term, records)
            .map_err(RuntimeError::Journal)?;
        for e in &events {
            next.apply(e);
        }
        Ok((next, events))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crescent_journal::memory::{MemoryBackend, MemoryStore};
    use crescent_journal::{Journal, JournalError, JournalOptions};

    use crate::incarnation::{IncarnationCommand, IncarnationError, NodeIncarnation, INSTANCE_ID};
    use crate::runtime::{ManualClock, Runtime, RuntimeError};

    const NOW: i64 = 1_700_000_000_000;

    fn runtime(term: u64) -> Runtime {
        let journal = Journal::open(
            Box::new(MemoryBackend::new(MemoryStore::new())),
            JournalOptions::default(),
        )
        .unwrap();
        Runtime::builder(journal)
            .term(term)
            .clock(Arc::new(ManualClock::new(NOW)))
            .build()
    }

    #[test]
    fn a_command_is_journaled_durably_as_an_actor_would_and_applied() {
        let rt = runtime(3);
        let state = NodeIncarnation::default();
        let (next, events) = rt
            .execute_blocking(INSTANCE_ID, &state, &IncarnationCommand::Begin)
            .unwrap();
        assert_eq!((next.incarnation, next.term, next.began_at_ms), (1, 3, NOW));
        assert_eq!(state, NodeIncarnation::default());
        assert_eq!(rt.journal().durable().get(), 1);
        let records: Vec<_> = rt
            .journal()
            .read_from(1)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(records.len(), 1);
        let want = crate::event_codec::new_record::<NodeIncarnation>(INSTANCE_ID, &events[0], NOW);
        let got = &records[0];
        assert_eq!((got.seq, got.term, got.timestamp_ms), (1, 3, NOW));
        assert_eq!((&got.stream, &got.event), (&want.stream, &want.event));
    }

    #[test]
    fn a_refusal_journals_nothing() {
        let rt = runtime(3);
        let later = NodeIncarnation {
            incarnation: 4,
            term: 9,
            began_at_ms: 0,
        };
        let refused = rt.execute_blocking(INSTANCE_ID, &later, &IncarnationCommand::Begin);
        assert!(matches!(
            refused,
            Err(RuntimeError::Domain(IncarnationError::StaleTerm {
                term: 3,
                current: 9
            }))
        ));
        rt.journal().fence(5);
        let fenced = rt.execute_blocking(
            INSTANCE_ID,
            &NodeIncarnation::default(),
            &IncarnationCommand::Begin,
        );
        assert!(matches!(
            fenced,
            Err(RuntimeError::Journal(JournalError::Fenced { .. }))
        ));
        assert_eq!(rt.journal().last_seq(), 0);
    }
}

//! The given/when/then kit for any [`Aggregate`] (docs/design.md, "The event-sourcing core"):
//! the state after some events, one command, then the exact events (applied, so a test can go
//! on from the state they lead to) or the exact refusal. `decide` is pure, so a refusal leaves
//! the state as it was by construction.
//!
//! ```
//! use std::collections::BTreeMap;
//!
//! use crescent_actors::removed_puts::{OwnerPutIds, RemovedPuts, RemovedPutsCommand, RemovedPutsEvent};
//! use crescent_actors::testing::{given, Given};
//!
//! let remember = RemovedPutsCommand::Remember(BTreeMap::from([("o1".to_string(), vec![7])]));
//! let state = given::<RemovedPuts>(vec![])
//!     .when(remember.clone())
//!     .then(vec![RemovedPutsEvent::Removed(OwnerPutIds {
//!         owner: "o1".into(),
//!         put_ids: vec![7],
//!     })]);
//! // Remembering the same ids again decides nothing.
//! Given::state(state).when(remember).then(vec![]);
//! ```

use crate::aggregate::{Aggregate, Ctx, DecodeError, DomainEvent};

/// The `now_ms` of [`Given::when`].
pub const NOW: i64 = 1_700_000_000_000;

/// A state to run a command against.
pub struct Given<A: Aggregate> {
    state: A,
}

/// The state after folding `events` into an empty instance.
pub fn given<A: Aggregate>(events: Vec<A::Event>) -> Given<A> {
    Given {
        state: state_after(&events),
    }
}

/// An empty instance with `events` applied in order.
pub fn state_after<A: Aggregate>(events: &[A::Event]) -> A {
    let mut state = A::default();
    for e in events {
        state.apply(e);
    }
    state
}

/// What `decide` answered, and the state it was asked in.
pub struct When<A: Aggregate> {
    state: A,
    result: Result<Vec<A::Event>, A::Error>,
}

impl<A: Aggregate> Given<A> {
    /// Starts from a state reached earlier in the test instead of from events.
    pub fn state(state: A) -> Given<A> {
        Given { state }
    }

    /// The state itself, for assertions on it.
    pub fn into_state(self) -> A {
        self.state
    }

    /// Decides `cmd` at [`NOW`].
    pub fn when(self, cmd: A::Command) -> When<A> {
        self.when_at(NOW, cmd)
    }

    /// Decides `cmd` with the clock at `now_ms`.
    pub fn when_at(self, now_ms: i64, cmd: A::Command) -> When<A> {
        let result = self.state.decide(&cmd, &Ctx::at(now_ms));
        When {
            state: self.state,
            result,
        }
    }
}

impl<A: Aggregate> When<A> {
    /// Asserts the events and returns the state after applying them.
    pub fn then(self, expected: Vec<A::Event>) -> A {
        match self.result {
            Ok(events) => {
                assert_eq!(events, expected);
                let mut state = self.state;
                for e in &events {
                    state.apply(e);
                }
                state
            }
            Err(e) => panic!("expected events {expected:?}, got error {e}"),
        }
    }

    /// The events decided, applied; the test inspects them itself.
    pub fn then_events(self) -> (Vec<A::Event>, A) {
        match self.result {
            Ok(events) => {
                let mut state = self.state;
                for e in &events {
                    state.apply(e);
                }
                (events, state)
            }
            Err(e) => panic!("expected events, got error {e}"),
        }
    }

    /// The refusal, for assertions on its parts (its code, a field).
    pub fn refusal(self) -> A::Error {
        match self.result {
            Ok(events) => panic!("expected a refusal, got events {events:?}"),
            Err(e) => e,
        }
    }
}

impl<A: Aggregate> When<A>
where
    A::Error: PartialEq,
{
    /// Asserts the exact refusal.
    pub fn then_error(self, expected: A::Error) {
        assert_eq!(self.refusal(), expected);
    }
}

/// Asserts the journal form (kind, version, payload hex) of each of `events`, and that each
/// expected payload decodes back to its event. A codec test lists forms captured from the build
/// that first wrote them, so a changed kind name, version or payload byte fails it: stored bytes
/// are never rewritten (docs/architecture.md, "Aggregates"). On a mismatch the message lists the
/// forms this build writes, in the same shape.
pub fn assert_journal_form<E: DomainEvent>(events: &[E], expected: &[(&str, u16, &str)]) {
    let actual: Vec<(&str, u16, String)> = events
        .iter()
        .map(|e| (e.kind(), e.version(), hex::encode(e.encode())))
        .collect();
    let listing: String = actual
        .iter()
        .map(|(k, v, h)| format!("    (\"{k}\", {v}, \"{h}\"),\n"))
        .collect();
    let same = actual.len() == expected.len()
        && actual
            .iter()
            .zip(expected)
            .all(|((k, v, h), (ek, ev, eh))| k == ek && v == ev && h == eh);
    assert!(same, "journal forms differ; this build writes:\n{listing}");
    for (e, (kind, version, hex)) in events.iter().zip(expected) {
        assert_eq!(
            decode_hex::<E>(kind, *version, hex).as_ref(),
            Ok(e),
            "{kind} v{version}"
        );
    }
}

/// Decodes a payload given as hex: an older version's bytes, captured from the build that wrote
/// them.
pub fn decode_hex<E: DomainEvent>(kind: &str, version: u16, hex: &str) -> Result<E, DecodeError> {
    let payload = hex::decode(hex).expect("test payloads are hex");
    E::decode(kind, version, &payload)
}

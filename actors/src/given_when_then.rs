//! The given/when/then harness of the aggregates' unit tests (cqrs-es style): the state after
//! some events, one command, then the exact events (applied, so a test can go on from the
//! state they lead to) or the exact refusal.

use crate::aggregate::{Aggregate, Ctx};

/// The `now_ms` of [`Given::when`].
pub(crate) const NOW: i64 = 1_700_000_000_000;

pub(crate) struct Given<A: Aggregate> {
    state: A,
}

/// The state after folding `events` into an empty instance.
pub(crate) fn given<A: Aggregate>(events: Vec<A::Event>) -> Given<A> {
    let mut state = A::default();
    for e in &events {
        state.apply(e);
    }
    Given { state }
}

pub(crate) struct When<A: Aggregate> {
    state: A,
    result: Result<Vec<A::Event>, A::Error>,
}

impl<A: Aggregate> Given<A> {
    /// Starts from a state reached earlier in the test instead of from events.
    pub(crate) fn state(state: A) -> Given<A> {
        Given { state }
    }

    pub(crate) fn when(self, cmd: A::Command) -> When<A> {
        self.when_at(NOW, cmd)
    }

    pub(crate) fn when_at(self, now_ms: i64, cmd: A::Command) -> When<A> {
        let result = self.state.decide(&cmd, &Ctx::at(now_ms));
        When {
            state: self.state,
            result,
        }
    }
}

impl<A: Aggregate> When<A>
where
    A::Error: PartialEq,
{
    /// Asserts the events and returns the state after applying them.
    pub(crate) fn then(self, expected: Vec<A::Event>) -> A {
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

    /// Asserts the refusal; the state is unchanged by construction (decide is pure).
    pub(crate) fn then_error(self, expected: A::Error) {
        match self.result {
            Ok(events) => panic!("expected error {expected}, got events {events:?}"),
            Err(e) => assert_eq!(e, expected),
        }
    }
}

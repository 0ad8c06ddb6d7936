//! The leader's local lease deadline, readable synchronously by whoever is about to act as
//! leader (append, commit, ack a client).

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A cheap, cloneable view of "am I the leader right now, and under which term".
///
/// The elector sets it on winning, moves the deadline forward on every acknowledged renewal and
/// clears it on stepping down. [`LeaderFence::current_term`] compares with the clock itself, so
/// a caller that runs before the elector task (say, right after the process was frozen and
/// resumed) still sees an expired deadline as "not leader".
#[derive(Debug, Clone, Default)]
pub struct LeaderFence {
    inner: Arc<Mutex<Option<Tenure>>>,
}

#[derive(Debug, Clone, Copy)]
struct Tenure {
    term: u64,
    deadline: Instant,
}

impl LeaderFence {
    /// The term this node leads under, if its local deadline has not passed.
    pub fn current_term(&self) -> Option<u64> {
        let tenure = *self.inner.lock().expect("fence lock");
        tenure
            .filter(|t| Instant::now() < t.deadline)
            .map(|t| t.term)
    }

    /// Time left before this node must stop acting as leader, if it leads.
    pub fn remaining(&self) -> Option<std::time::Duration> {
        let tenure = *self.inner.lock().expect("fence lock");
        tenure.and_then(|t| t.deadline.checked_duration_since(Instant::now()))
    }

    pub(crate) fn set(&self, term: u64, deadline: Instant) {
        *self.inner.lock().expect("fence lock") = Some(Tenure { term, deadline });
    }

    /// Moves the deadline forward (never back) for `term`; ignored for any other term.
    pub(crate) fn extend(&self, term: u64, deadline: Instant) {
        let mut guard = self.inner.lock().expect("fence lock");
        if let Some(t) = guard.as_mut() {
            if t.term == term && deadline > t.deadline {
                t.deadline = deadline;
            }
        }
    }

    pub(crate) fn clear(&self) {
        *self.inner.lock().expect("fence lock") = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn expires_by_itself_and_only_moves_forward() {
        let fence = LeaderFence::default();
        assert_eq!(fence.current_term(), None);
        let now = Instant::now();
        fence.set(5, now + Duration::from_secs(60));
        assert_eq!(fence.current_term(), Some(5));
        fence.extend(5, now + Duration::from_secs(1));
        assert!(fence.remaining().unwrap() > Duration::from_secs(30));
        fence.extend(4, now + Duration::from_secs(600));
        assert!(fence.remaining().unwrap() < Duration::from_secs(61));
        fence.set(6, now);
        assert_eq!(
            fence.current_term(),
            None,
            "a passed deadline is not leadership"
        );
        fence.set(7, now + Duration::from_secs(60));
        fence.clear();
        assert_eq!(fence.current_term(), None);
    }
}

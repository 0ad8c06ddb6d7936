//! When the leader sends its lease renewals: pure timing rules, kept apart so they can be
//! tested without etcd or a clock.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::ElectorConfig;

/// The renewal timing of one leadership, derived from the lease TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RenewalSchedule {
    /// Time between the send of an acknowledged renewal and the next one (TTL/6).
    pub(crate) interval: Duration,
    /// Longest one attempt (keep-alive plus key check) may take before it is abandoned and
    /// retried on a fresh stream (TTL/4): a hung stream must not eat the whole margin.
    pub(crate) attempt_timeout: Duration,
    /// Pause after a failed attempt before the next one (TTL/24, at least 20 ms): short, so
    /// that several retries fit before the deadline, but not a busy loop on a dead etcd.
    pub(crate) retry_after: Duration,
}

impl RenewalSchedule {
    pub(crate) fn new(config: &ElectorConfig) -> Self {
        let interval = config.renew_interval();
        RenewalSchedule {
            interval,
            attempt_timeout: config.lease_ttl / 4,
            retry_after: (interval / 4).max(Duration::from_millis(20)),
        }
    }

    /// The next attempt after a renewal sent at `sent_at` was acknowledged at `now`: one
    /// interval after the *send* (the deadline counts from there too), but never sooner than
    /// `retry_after` from now, so a slow round trip does not turn into back-to-back renewals.
    pub(crate) fn after_success(&self, sent_at: Instant, now: Instant) -> Instant {
        (sent_at + self.interval).max(now + self.retry_after)
    }

    /// The next attempt after a failed or abandoned one ended at `now`.
    pub(crate) fn after_failure(&self, now: Instant) -> Instant {
        now + self.retry_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(ttl_secs: u64) -> RenewalSchedule {
        let config = ElectorConfig::new(vec!["http://127.0.0.1:2379".into()], "c", "n", "n:1")
            .with_lease_ttl(Duration::from_secs(ttl_secs));
        RenewalSchedule::new(&config)
    }

    #[test]
    fn timings_follow_the_ttl() {
        let s = schedule(2);
        assert_eq!(
            s.interval,
            Duration::from_millis(333) + Duration::from_nanos(333_333)
        );
        assert_eq!(s.attempt_timeout, Duration::from_millis(500));
        assert_eq!(s.retry_after, s.interval / 4);
        let s = schedule(3);
        assert_eq!(s.interval, Duration::from_millis(500));
        assert_eq!(s.attempt_timeout, Duration::from_millis(750));
        assert_eq!(s.retry_after, Duration::from_millis(125));
    }

    #[test]
    fn a_renewal_is_due_one_interval_after_the_last_acknowledged_send() {
        let s = schedule(3);
        let granted = Instant::now();
        // A campaign that took 900 ms (longer than the interval): renew at once, not one
        // interval after taking office. This is what a freshly promoted leader once missed.
        let took_office = granted + Duration::from_millis(900);
        assert_eq!(
            s.after_success(granted, took_office),
            took_office + s.retry_after
        );
        // A fast renewal: the next one is due one interval after it was sent.
        let sent = granted + Duration::from_millis(1000);
        let acked = sent + Duration::from_millis(5);
        assert_eq!(
            s.after_success(sent, acked),
            sent + Duration::from_millis(500)
        );
    }

    #[test]
    fn the_attempt_and_a_retry_fit_between_a_renewal_and_the_deadline() {
        for ttl in [2, 3, 10] {
            let s = schedule(ttl);
            let ttl = Duration::from_secs(ttl);
            let sent = Instant::now();
            let deadline = sent + ttl - ttl / 3;
            // Worst case: the next attempt hangs until its timeout; the retry after it still
            // starts before the deadline with time left for a round trip.
            let first = s.after_success(sent, sent);
            let retry = s.after_failure(first + s.attempt_timeout);
            assert!(
                retry + ttl / 10 < deadline,
                "ttl {ttl:?}: retry at {:?} of {:?}",
                retry - sent,
                deadline - sent
            );
        }
    }
}

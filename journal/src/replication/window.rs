//! What the active has sent its standby and the standby has not yet acknowledged as durable:
//! the replication lag in bytes, exact for what is in flight.
//!
//! Acks name a seq, frames have sizes: the window keeps, per message sent, its last seq and the
//! running byte total, so an ack turns into "bytes acknowledged" without re-reading anything.
//! Records durable on the active but not yet sent (a standby still catching up) have no size
//! yet; [`SendWindow::lag_bytes`] counts them at the average frame size sent so far.

use std::collections::VecDeque;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendWindow {
    /// (last seq of a message, bytes sent up to and including it), oldest first.
    unacked: VecDeque<(u64, u64)>,
    sent_bytes: u64,
    sent_records: u64,
    acked_bytes: u64,
}

impl SendWindow {
    /// A message of `records` records ending at seq `last_seq`, `bytes` long, was sent.
    pub fn sent(&mut self, last_seq: u64, records: u64, bytes: u64) {
        self.sent_bytes += bytes;
        self.sent_records += records;
        self.unacked.push_back((last_seq, self.sent_bytes));
    }

    /// The standby has everything up to `durable_seq` durable.
    pub fn acked(&mut self, durable_seq: u64) {
        while let Some(&(seq, total)) = self.unacked.front() {
            if seq > durable_seq {
                break;
            }
            self.acked_bytes = total;
            self.unacked.pop_front();
        }
    }

    /// A new session: nothing is in flight any more (the standby resumes from its durable seq).
    pub fn restart(&mut self) {
        self.unacked.clear();
        self.acked_bytes = self.sent_bytes;
    }

    /// Bytes sent and not acknowledged.
    pub fn in_flight_bytes(&self) -> u64 {
        self.sent_bytes - self.acked_bytes
    }

    /// Bytes sent over the source's lifetime.
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes
    }

    /// The standby's lag in bytes: in flight, plus `unsent_records` (durable here, not yet
    /// sent) at the average frame size sent so far.
    pub fn lag_bytes(&self, unsent_records: u64) -> u64 {
        let average = self.sent_bytes.checked_div(self.sent_records).unwrap_or(0);
        self.in_flight_bytes() + unsent_records.saturating_mul(average)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_release_whole_messages_in_order() {
        let mut w = SendWindow::default();
        w.sent(10, 10, 1000);
        w.sent(15, 5, 500);
        w.sent(20, 5, 700);
        assert_eq!(w.in_flight_bytes(), 2200);
        w.acked(12); // inside the second message: only the first is acknowledged
        assert_eq!(w.in_flight_bytes(), 1200);
        w.acked(15);
        assert_eq!(w.in_flight_bytes(), 700);
        w.acked(9); // an older ack changes nothing
        assert_eq!(w.in_flight_bytes(), 700);
        w.acked(20);
        assert_eq!(w.in_flight_bytes(), 0);
        assert_eq!(w.sent_bytes(), 2200);
    }

    #[test]
    fn unsent_records_count_at_the_average_frame_size() {
        let mut w = SendWindow::default();
        assert_eq!(w.lag_bytes(5), 0, "no size known before anything was sent");
        w.sent(4, 4, 400);
        w.acked(4);
        assert_eq!(w.lag_bytes(0), 0);
        assert_eq!(w.lag_bytes(3), 300);
        w.sent(6, 2, 300);
        assert_eq!(w.lag_bytes(2), 300 + 2 * (700 / 6));
    }

    #[test]
    fn a_new_session_drops_what_was_in_flight() {
        let mut w = SendWindow::default();
        w.sent(4, 4, 400);
        w.restart();
        assert_eq!(w.in_flight_bytes(), 0);
        w.sent(8, 4, 100);
        w.acked(8);
        assert_eq!(w.in_flight_bytes(), 0);
        assert_eq!(w.sent_bytes(), 500);
    }
}

//! Compact timestamps: per-object deadlines are u32 ticks of 100 ms since the directory's epoch
//! (its creation time), 4 bytes instead of 8 per field. That covers 13.6 years of uptime (later
//! times saturate); deadlines round up, so a lease or pin never ends early.

/// Milliseconds per tick.
pub const TICK_MS: i64 = 100;

/// A point in time in ticks since the directory's epoch. 0 means "never set".
pub type Ticks = u32;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    epoch_ms: i64,
}

impl Clock {
    pub(crate) fn new(epoch_ms: i64) -> Self {
        // One tick before the epoch, so "now" at creation is tick 1 and 0 keeps meaning unset.
        Self {
            epoch_ms: epoch_ms - TICK_MS,
        }
    }

    fn clamp(v: i64) -> Ticks {
        v.clamp(1, u32::MAX as i64) as Ticks
    }

    /// The tick containing `now_ms` (rounded down): for "last access" and "now".
    pub(crate) fn now(&self, now_ms: i64) -> Ticks {
        Self::clamp(now_ms.saturating_sub(self.epoch_ms).div_euclid(TICK_MS))
    }

    /// A deadline `after_ms` after `now_ms`, rounded up to the next tick boundary.
    pub(crate) fn deadline(&self, now_ms: i64, after_ms: u64) -> Ticks {
        let at = now_ms
            .saturating_add(after_ms.min(i64::MAX as u64) as i64)
            .saturating_sub(self.epoch_ms);
        Self::clamp(at.saturating_add(TICK_MS - 1).div_euclid(TICK_MS))
    }

    /// A duration in ticks, rounded up.
    pub(crate) fn span(ms: u64) -> Ticks {
        (ms.saturating_add(TICK_MS as u64 - 1) / TICK_MS as u64).min(u32::MAX as u64) as Ticks
    }

    /// Back to milliseconds since the Unix epoch.
    pub(crate) fn to_ms(self, t: Ticks) -> i64 {
        self.epoch_ms + t as i64 * TICK_MS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_and_now_rounds_down() {
        let c = Clock::new(1_000_000);
        assert_eq!(c.now(1_000_000), 1);
        assert_eq!(c.now(1_000_099), 1);
        assert_eq!(c.now(1_000_100), 2);
        let d = c.deadline(1_000_050, 10_000);
        assert!(c.to_ms(d) >= 1_010_050);
        assert!(c.to_ms(d) < 1_010_150);
        // Before the epoch saturates to tick 1, never 0.
        assert_eq!(c.now(0), 1);
        assert_eq!(Clock::span(1), 1);
        assert_eq!(Clock::span(10_000), 100);
    }
}

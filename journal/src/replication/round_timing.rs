//! Where one sync replication round's time goes: timestamps of each stage of a batch, by its
//! last seq, for the replication benchmark (docs/ha.md, "The sync commit path").
//!
//! Only with the `round-timing` feature: without it [`mark`] is an empty inline function and
//! nothing is recorded (the hot path carries no lock, no clock read). With it, every stage
//! takes a global mutex and reads the clock, which perturbs the figures a little: use it to
//! see the breakdown, never for the throughput figure itself.

/// A point of a sync round, in the order a batch passes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The active's writer hands the batch to the replication tap (before its own sync).
    Tapped,
    /// The Records message is on the socket.
    Sent,
    /// The active's own sync of the batch is done.
    ActiveDurable,
    /// The standby has read the whole Records message.
    Received,
    /// The standby's frames are checked and queued for its journal writer.
    Queued,
    /// The standby's writer starts writing the batch.
    StandbyWriting,
    /// The standby's sync is done.
    StandbyDurable,
    /// The standby's ack is on the socket.
    AckSent,
    /// The active's ack reader has the ack.
    AckReceived,
    /// The commit watermark passed the batch (waiters are being woken).
    Committed,
}

/// Every stage, in order.
pub const STAGES: [Stage; 10] = [
    Stage::Tapped,
    Stage::Sent,
    Stage::ActiveDurable,
    Stage::Received,
    Stage::Queued,
    Stage::StandbyWriting,
    Stage::StandbyDurable,
    Stage::AckSent,
    Stage::AckReceived,
    Stage::Committed,
];

#[cfg(feature = "round-timing")]
mod imp {
    use super::{Stage, STAGES};
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    use std::time::Instant;

    type Row = [Option<Instant>; STAGES.len()];

    fn table() -> &'static Mutex<HashMap<u64, Row>> {
        static TABLE: OnceLock<Mutex<HashMap<u64, Row>>> = OnceLock::new();
        TABLE.get_or_init(|| Mutex::new(HashMap::new()))
    }

    pub fn mark(stage: Stage, seq: u64) {
        mark_at(stage, seq, Instant::now())
    }

    pub fn mark_at(stage: Stage, seq: u64, now: Instant) {
        let index = STAGES.iter().position(|s| *s == stage).expect("a stage");
        let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
        let row = t.entry(seq).or_insert([None; STAGES.len()]);
        // The first time counts (a batch is acked once by the hook, maybe again later).
        row[index].get_or_insert(now);
    }

    pub fn take_report() -> Option<String> {
        let rows: Vec<Row> = {
            let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
            t.drain().map(|(_, r)| r).collect()
        };
        let complete: Vec<[Instant; STAGES.len()]> = rows
            .iter()
            .filter_map(|r| {
                let mut out = [r[0]?; STAGES.len()];
                for (o, v) in out.iter_mut().zip(r) {
                    *o = (*v)?;
                }
                Some(out)
            })
            .collect();
        if complete.is_empty() {
            return None;
        }
        let n = complete.len() as f64;
        let mut lines = format!(
            "  round breakdown over {} complete rounds (mean us after Tapped; median in brackets):\n",
            complete.len()
        );
        for (i, stage) in STAGES.iter().enumerate() {
            let mut v: Vec<f64> = complete
                .iter()
                .map(|r| r[i].saturating_duration_since(r[0]).as_secs_f64() * 1e6)
                .collect();
            let mean = v.iter().sum::<f64>() / n;
            v.sort_by(f64::total_cmp);
            lines.push_str(&format!(
                "    {:<16} {mean:>8.1} [{:>8.1}]\n",
                format!("{stage:?}"),
                v[v.len() / 2]
            ));
        }
        Some(lines)
    }
}

/// Records that the batch ending at `seq` reached `stage` now (`round-timing` feature only).
#[cfg(feature = "round-timing")]
pub fn mark(stage: Stage, seq: u64) {
    imp::mark(stage, seq)
}

/// The clock now, to [`mark_at`] a stage once its seq is known (`None` without the feature:
/// no clock read).
#[inline(always)]
pub fn now() -> Option<std::time::Instant> {
    #[cfg(feature = "round-timing")]
    {
        Some(std::time::Instant::now())
    }
    #[cfg(not(feature = "round-timing"))]
    {
        None
    }
}

/// Records that the batch ending at `seq` reached `stage` at `at` (taken by [`now`]).
#[inline(always)]
pub fn mark_at(stage: Stage, seq: u64, at: Option<std::time::Instant>) {
    #[cfg(feature = "round-timing")]
    if let Some(at) = at {
        imp::mark_at(stage, seq, at)
    }
    #[cfg(not(feature = "round-timing"))]
    let _ = (stage, seq, at);
}

/// Records nothing: the `round-timing` feature is off.
#[cfg(not(feature = "round-timing"))]
#[inline(always)]
pub fn mark(_stage: Stage, _seq: u64) {}

/// The mean and median time from `Tapped` to each stage over the complete rounds recorded
/// since the last call, and forgets them (`None` without the feature or without a round).
pub fn take_report() -> Option<String> {
    #[cfg(feature = "round-timing")]
    {
        imp::take_report()
    }
    #[cfg(not(feature = "round-timing"))]
    {
        None
    }
}

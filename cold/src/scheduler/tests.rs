//! Offload scheduler tests: bounds, order, rate limit, retries, watermarks.

use super::*;

fn op(n: u128) -> ColdOpId {
    ColdOpId(uuid::Uuid::from_u128(n))
}

fn job(n: u128, length: u64, mode: OffloadMode) -> OffloadJob {
    OffloadJob {
        op_id: op(n),
        device_id: "dev1".into(),
        object_key: format!("k{n}"),
        length,
        mode,
    }
}

fn config() -> SchedulerConfig {
    SchedulerConfig {
        max_entries: 4,
        max_bytes: 1000,
        order: OffloadOrder::Fifo,
        rate_bytes_per_sec: 0,
        burst_bytes: 100,
        retry_base_ms: 10,
        retry_max_ms: 35,
        max_attempts: 4,
        high_watermark: 0.8,
        low_watermark: 0.5,
    }
}

fn drain(s: &mut OffloadScheduler, now: i64) -> Vec<ColdOpId> {
    let mut out = Vec::new();
    while let Some(d) = s.next(now) {
        out.push(d.job.op_id);
    }
    out
}

#[test]
fn fifo_order_with_eviction_work_first() {
    let mut s = OffloadScheduler::new(config()).unwrap();
    s.enqueue(job(1, 300, OffloadMode::Passthrough)).unwrap();
    s.enqueue(job(2, 100, OffloadMode::Passthrough)).unwrap();
    s.enqueue(job(3, 200, OffloadMode::EvictTriggered)).unwrap();
    assert_eq!(drain(&mut s, 0), vec![op(3), op(1), op(2)]);
    assert_eq!((s.depth(), s.in_flight(), s.held_bytes()), (0, 3, 600));
}

#[test]
fn size_aware_order_takes_small_payloads_first() {
    let mut s = OffloadScheduler::new(SchedulerConfig {
        order: OffloadOrder::SizeAware,
        ..config()
    })
    .unwrap();
    s.enqueue(job(1, 300, OffloadMode::Passthrough)).unwrap();
    s.enqueue(job(2, 100, OffloadMode::Passthrough)).unwrap();
    s.enqueue(job(3, 100, OffloadMode::Passthrough)).unwrap();
    assert_eq!(drain(&mut s, 0), vec![op(2), op(3), op(1)]);
}

#[test]
fn bounds_refuse_with_backpressure_and_duplicates_are_ignored() {
    let mut s = OffloadScheduler::new(SchedulerConfig {
        high_watermark: 1.0,
        low_watermark: 0.5,
        ..config()
    })
    .unwrap();
    for n in 1..=4 {
        s.enqueue(job(n, 10, OffloadMode::Passthrough)).unwrap();
    }
    s.enqueue(job(1, 10, OffloadMode::Passthrough)).unwrap();
    let err = s
        .enqueue(job(5, 10, OffloadMode::EvictTriggered))
        .unwrap_err();
    assert!(
        matches!(
            err,
            ColdError::Backpressure {
                queue: "offload queue",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.code().as_str(), "BUSY");
    let mut s = OffloadScheduler::new(SchedulerConfig {
        high_watermark: 1.0,
        low_watermark: 0.5,
        ..config()
    })
    .unwrap();
    s.enqueue(job(1, 900, OffloadMode::EvictTriggered)).unwrap();
    assert!(s.enqueue(job(2, 101, OffloadMode::EvictTriggered)).is_err());
    let mut s = OffloadScheduler::new(config()).unwrap();
    s.enqueue(job(1, 5000, OffloadMode::Passthrough)).unwrap();
}

#[test]
fn watermarks_refuse_passthrough_until_below_the_low_one() {
    let mut s = OffloadScheduler::new(config()).unwrap();
    s.enqueue(job(1, 500, OffloadMode::Passthrough)).unwrap();
    s.enqueue(job(2, 300, OffloadMode::Passthrough)).unwrap();
    assert!(s.is_pressured(), "800 >= 0.8 * 1000");
    assert!(s.enqueue(job(3, 10, OffloadMode::Passthrough)).is_err());
    s.enqueue(job(4, 100, OffloadMode::EvictTriggered)).unwrap();
    let first = s.next(0).unwrap();
    assert_eq!(first.job.op_id, op(4));
    s.complete(&op(4));
    let second = s.next(0).unwrap();
    s.complete(&second.job.op_id);
    assert_eq!(s.held_bytes(), 300);
    assert!(!s.is_pressured(), "300 <= 0.5 * 1000");
    s.enqueue(job(3, 10, OffloadMode::Passthrough)).unwrap();
}

#[test]
fn rate_limit_spends_tokens_with_time_passed_in() {
    let mut s = OffloadScheduler::new(SchedulerConfig {
        rate_bytes_per_sec: 1000,
        burst_bytes: 100,
        ..config()
    })
    .unwrap();
    s.enqueue(job(1, 150, OffloadMode::Passthrough)).unwrap();
    s.enqueue(job(2, 50, OffloadMode::Passthrough)).unwrap();
    assert_eq!(
        s.next(0).unwrap().job.op_id,
        op(1),
        "a full bucket admits a job larger than it"
    );
    assert!(s.next(0).is_none(), "now 50 bytes in debt");
    assert_eq!(s.next_wakeup_ms(0), Some(50));
    assert!(s.next(50).is_none(), "exactly zero tokens");
    assert_eq!(s.next(51).unwrap().job.op_id, op(2));
}

#[test]
fn failures_back_off_exponentially_then_give_up() {
    let mut s = OffloadScheduler::new(config()).unwrap();
    s.enqueue(job(1, 10, OffloadMode::Passthrough)).unwrap();
    let mut now = 0;
    let mut delays = Vec::new();
    loop {
        let d = s.next(now).expect("due");
        match s.fail(&op(1), now).unwrap() {
            RetryDecision::Retry { at_ms } => {
                delays.push(at_ms - now);
                assert!(s.next(at_ms - 1).is_none(), "not before its time");
                assert_eq!(s.next_wakeup_ms(now), Some(at_ms));
                now = at_ms;
            }
            RetryDecision::GiveUp { attempts } => {
                assert_eq!((attempts, d.attempt), (4, 4));
                break;
            }
        }
    }
    assert_eq!(delays, vec![10, 20, 35]);
    assert_eq!((s.depth(), s.in_flight(), s.held_bytes()), (0, 0, 0));
    assert!(!s.contains(&op(1)));
}

#[test]
fn cancel_and_complete_release_what_they_held() {
    let mut s = OffloadScheduler::new(config()).unwrap();
    s.enqueue(job(1, 10, OffloadMode::Passthrough)).unwrap();
    s.enqueue(job(2, 20, OffloadMode::Passthrough)).unwrap();
    s.enqueue(job(3, 30, OffloadMode::Passthrough)).unwrap();
    s.next(0).unwrap();
    s.fail(&op(1), 0).unwrap();
    assert!(s.cancel(&op(1)), "from the retry set");
    assert!(s.cancel(&op(3)), "from the ready queue");
    let d = s.next(0).unwrap();
    assert!(s.complete(&d.job.op_id));
    assert!(!s.complete(&d.job.op_id));
    assert!(!s.cancel(&op(9)));
    assert_eq!((s.depth(), s.in_flight(), s.held_bytes()), (0, 0, 0));
}

#[test]
fn config_is_validated() {
    for bad in [
        SchedulerConfig {
            max_entries: 0,
            ..config()
        },
        SchedulerConfig {
            max_attempts: 0,
            ..config()
        },
        SchedulerConfig {
            low_watermark: 0.9,
            ..config()
        },
        SchedulerConfig {
            high_watermark: 1.5,
            ..config()
        },
        SchedulerConfig {
            rate_bytes_per_sec: 1,
            burst_bytes: 0,
            ..config()
        },
        SchedulerConfig {
            retry_base_ms: 100,
            retry_max_ms: 10,
            ..config()
        },
    ] {
        assert_eq!(
            OffloadScheduler::new(bad).unwrap_err().code(),
            crescent_actors::ErrorCode::InvalidArgument
        );
    }
}

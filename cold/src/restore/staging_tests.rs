use super::*;

const MIB: u64 = 1 << 20;

fn pool(capacity: u64) -> StagingPool {
    StagingPool::new(
        StagingConfig {
            capacity_bytes: capacity,
            unit_bytes: MIB,
            reader_ttl_ms: 1_000,
        },
        100,
    )
}

/// Reserve, publish, one reader admitted, owner released: the usual remote restore.
fn staged(p: &mut StagingPool, length: u64, now: u64) -> (Placement, StagingToken) {
    let placed = p.reserve(length).unwrap();
    p.publish(placed.slot).unwrap();
    let (token, _) = p.admit_reader(placed.slot, now).unwrap();
    assert_eq!(p.release_owner(placed.slot).unwrap(), Release::Held);
    (placed, token)
}

#[test]
fn reserve_takes_contiguous_units_first_fit() {
    let mut p = pool(8 * MIB);
    let a = p.reserve(4 * MIB).unwrap();
    assert_eq!((a.slot, a.offset, a.length), (100, 0, 4 * MIB));
    assert_eq!(p.placement(a.slot), Some(a));
    assert_eq!(p.placement(7), None);
    let b = p.reserve(MIB + 1).unwrap();
    assert_eq!((b.slot, b.offset, b.length), (101, 4 * MIB, MIB + 1));
    assert_eq!(p.used_bytes(), 6 * MIB);
    assert_eq!(p.slots(), 2);
}

#[test]
fn saturation_is_busy_and_oversize_or_empty_is_not_stageable() {
    let mut p = pool(4 * MIB);
    assert_eq!(p.reserve(0), Err(StagingRefusal::NotStageable));
    assert_eq!(p.reserve(4 * MIB + 1), Err(StagingRefusal::NotStageable));
    let a = p.reserve(3 * MIB).unwrap();
    assert_eq!(p.reserve(2 * MIB), Err(StagingRefusal::Busy));
    // One unit is still free.
    assert_eq!(p.reserve(MIB).unwrap().offset, 3 * MIB);
    assert_eq!(p.reserve(1), Err(StagingRefusal::Busy));
    assert_eq!(p.abort(a.slot), Ok(Release::Recycled(a.slot)));
    assert_eq!(p.reserve(2 * MIB).unwrap().offset, 0);
}

#[test]
fn ack_then_transfer_terminal_recycles() {
    let mut p = pool(8 * MIB);
    let (placed, token) = staged(&mut p, 4 * MIB, 10);
    assert_eq!(p.ack(token), AckOutcome::Released);
    assert_eq!(p.ack(token), AckOutcome::AlreadyAcked);
    assert_eq!(p.used_bytes(), 4 * MIB, "the transfer pin still holds it");
    assert_eq!(
        p.transfer_terminal(token),
        Ok(Release::Recycled(placed.slot))
    );
    assert_eq!(p.used_bytes(), 0);
    assert_eq!(p.live_tokens(), 0);
    // Retired: a repeat ack is unknown (no effect), and the transfer report is refused.
    assert_eq!(p.ack(token), AckOutcome::Unknown);
    assert_eq!(
        p.transfer_terminal(token),
        Err(StagingMisuse::UnknownToken(token))
    );
}

#[test]
fn transfer_terminal_before_the_ack_keeps_the_token_until_the_ack() {
    let mut p = pool(8 * MIB);
    let (_, token) = staged(&mut p, MIB, 10);
    assert_eq!(p.transfer_terminal(token), Ok(Release::Held));
    assert_eq!(p.live_tokens(), 1);
    assert_eq!(p.ack(token), AckOutcome::Released);
    assert_eq!(p.used_bytes(), 0, "both pins released: recycled on the ack");
    assert_eq!(p.live_tokens(), 0);
}

#[test]
fn expiry_after_the_transfer_ended_retires_without_asking_for_it_again() {
    let mut p = pool(8 * MIB);
    let (_, token) = staged(&mut p, MIB, 0);
    assert_eq!(p.transfer_terminal(token), Ok(Release::Held));
    assert_eq!(p.expire(2_000), Vec::<StagingToken>::new());
    assert_eq!(p.used_bytes(), 0);
    assert_eq!(p.ack(token), AckOutcome::Unknown);
}

#[test]
fn the_owner_hold_keeps_a_slot_with_no_reader() {
    let mut p = pool(8 * MIB);
    let placed = p.reserve(MIB).unwrap();
    assert_eq!(
        p.admit_reader(placed.slot, 0),
        Err(StagingMisuse::NotReady(placed.slot))
    );
    p.publish(placed.slot).unwrap();
    assert_eq!(
        p.publish(placed.slot),
        Err(StagingMisuse::NotFilling(placed.slot))
    );
    assert_eq!(
        p.abort(placed.slot),
        Err(StagingMisuse::NotFilling(placed.slot))
    );
    assert_eq!(
        p.release_owner(placed.slot),
        Ok(Release::Recycled(placed.slot))
    );
    assert_eq!(
        p.release_owner(placed.slot),
        Err(StagingMisuse::UnknownSlot(placed.slot))
    );
}

#[test]
fn expiry_fences_late_acks_and_waits_for_the_transfer() {
    let mut p = pool(8 * MIB);
    let (placed, token) = staged(&mut p, 2 * MIB, 10);
    // Deadline is 10 + 1000: not expired at 1010, expired after it.
    assert_eq!(p.expire(1_010), Vec::<StagingToken>::new());
    assert_eq!(p.expire(1_011), vec![token]);
    assert_eq!(p.expire(5_000), Vec::<StagingToken>::new(), "fenced once");
    assert_eq!(p.ack(token), AckOutcome::Fenced);
    assert_eq!(p.used_bytes(), 2 * MIB, "a transfer may still run");
    assert_eq!(
        p.transfer_terminal(token),
        Ok(Release::Recycled(placed.slot))
    );
    assert_eq!(p.ack(token), AckOutcome::Unknown);
}

#[test]
fn an_acked_token_is_never_fenced() {
    let mut p = pool(8 * MIB);
    let (_, token) = staged(&mut p, MIB, 0);
    assert_eq!(p.ack(token), AckOutcome::Released);
    assert_eq!(p.expire(10_000), Vec::<StagingToken>::new());
}

#[test]
fn a_promotion_pin_overlapping_expiry_holds_the_slot() {
    let mut p = pool(8 * MIB);
    let (placed, token) = staged(&mut p, 3 * MIB, 0);
    let pinned = p.pin_promotion(placed.slot).unwrap();
    assert_eq!(pinned, placed);
    assert_eq!(p.expire(2_000), vec![token]);
    assert_eq!(p.transfer_terminal(token), Ok(Release::Held));
    assert_eq!(
        p.used_bytes(),
        3 * MIB,
        "the promotion still copies from it"
    );
    assert_eq!(
        p.unpin_promotion(placed.slot),
        Ok(Release::Recycled(placed.slot))
    );
    assert_eq!(
        p.unpin_promotion(placed.slot),
        Err(StagingMisuse::UnknownSlot(placed.slot))
    );
}

#[test]
fn promotion_pins_count_and_need_a_ready_slot() {
    let mut p = pool(8 * MIB);
    let placed = p.reserve(MIB).unwrap();
    assert_eq!(
        p.pin_promotion(placed.slot),
        Err(StagingMisuse::NotReady(placed.slot))
    );
    p.publish(placed.slot).unwrap();
    p.pin_promotion(placed.slot).unwrap();
    p.pin_promotion(placed.slot).unwrap();
    assert_eq!(p.release_owner(placed.slot), Ok(Release::Held));
    assert_eq!(p.unpin_promotion(placed.slot), Ok(Release::Held));
    assert_eq!(
        p.unpin_promotion(placed.slot),
        Ok(Release::Recycled(placed.slot))
    );
}

#[test]
fn readers_sharing_a_slot_each_hold_it() {
    let mut p = pool(8 * MIB);
    let (placed, first) = staged(&mut p, MIB, 0);
    assert!(p.is_ready(placed.slot));
    let (second, deadline) = p.admit_reader(placed.slot, 500).unwrap();
    assert_eq!(deadline, 1_500);
    assert_ne!(first, second);
    assert_eq!(p.ack(first), AckOutcome::Released);
    assert_eq!(p.transfer_terminal(first), Ok(Release::Held));
    // Only the first reader's deadline passed.
    assert_eq!(p.expire(1_200), Vec::<StagingToken>::new());
    assert_eq!(p.expire(1_501), vec![second]);
    assert_eq!(
        p.transfer_terminal(second),
        Ok(Release::Recycled(placed.slot))
    );
    assert!(!p.is_ready(placed.slot));
}

#[test]
fn ids_count_up_from_the_seed_and_are_never_reused() {
    let mut p = StagingPool::new(
        StagingConfig {
            capacity_bytes: MIB,
            unit_bytes: MIB,
            reader_ttl_ms: 1,
        },
        7 << 32,
    );
    let (a, ta) = staged(&mut p, MIB, 0);
    assert_eq!((a.slot, ta), ((7 << 32), (7 << 32) + 1));
    p.ack(ta);
    p.transfer_terminal(ta).unwrap();
    let (b, tb) = staged(&mut p, MIB, 0);
    assert_eq!((b.slot, tb), ((7 << 32) + 2, (7 << 32) + 3));
    assert_eq!(b.offset, 0, "the same units, a new slot id");
    // A token of another run of the owner is unknown here.
    assert_eq!(p.ack(3), AckOutcome::Unknown);
}

#[test]
fn fenced_tokens_settle_only_once_no_transfer_reads_their_range() {
    let mut p = pool(8 * MIB);
    let (placed, token) = staged(&mut p, 2 * MIB, 0);
    assert_eq!(p.token_placement(token), Some(placed));
    let fenced = p.expire(5_000);
    assert_eq!(fenced, vec![token]);
    // A transfer still reads the range: nothing is released, the token is kept.
    let mut asked = Vec::new();
    let (still, released) = p.settle_fenced(fenced, |pl| {
        asked.push(pl);
        false
    });
    assert_eq!(asked, vec![placed]);
    assert_eq!((still.clone(), released), (vec![token], Vec::new()));
    assert_eq!(p.slots(), 1);
    // Idle now: the transfer pin goes, the token retires and the slot is recycled.
    let (still, released) = p.settle_fenced(still, |_| true);
    assert!(still.is_empty());
    assert_eq!(released, vec![Release::Recycled(placed.slot)]);
    assert_eq!(p.token_placement(token), None);
    assert_eq!((p.slots(), p.used_bytes()), (0, 0));
}

#[test]
fn ack_outcomes_have_their_metric_labels() {
    let labels: Vec<&str> = [
        AckOutcome::Released,
        AckOutcome::AlreadyAcked,
        AckOutcome::Fenced,
        AckOutcome::Unknown,
    ]
    .into_iter()
    .map(AckOutcome::label)
    .collect();
    assert_eq!(labels, ["released", "repeat", "fenced", "unknown"]);
}

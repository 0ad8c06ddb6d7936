use super::*;

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

fn key() -> GrantKey {
    GrantKey::derive(SECRET, "owner-a")
}

fn read_grant() -> Grant {
    key().mint(
        "owner-a/seg0",
        TransferOp::Read,
        4096,
        1000,
        10_000,
        [0; 16],
    )
}

#[test]
fn a_minted_grant_verifies_for_its_range_and_any_part_of_it() {
    let keys = GrantKeys::single(key());
    let g = read_grant();
    assert_eq!(Grant::decode(&g.encode()), Some(g));
    let at =
        |offset, length| keys.verify("owner-a/seg0", TransferOp::Read, offset, length, 9_999, &g);
    assert_eq!(at(4096, 1000), Ok(()));
    assert_eq!(at(4100, 10), Ok(()));
    assert_eq!(at(5095, 1), Ok(()));
    assert_eq!(at(4095, 10), Err(GrantRefusal::OutsideRange));
    assert_eq!(at(5000, 97), Err(GrantRefusal::OutsideRange));
    assert_eq!(at(u64::MAX, 2), Err(GrantRefusal::OutsideRange));
}

#[test]
fn every_refusal_has_its_reason() {
    let keys = GrantKeys::single(key());
    let g = read_grant();
    let seg = "owner-a/seg0";
    assert_eq!(
        keys.verify(seg, TransferOp::Read, 4096, 1, 10_001, &g),
        Err(GrantRefusal::Expired)
    );
    assert_eq!(
        keys.verify(seg, TransferOp::Write, 4096, 1, 0, &g),
        Err(GrantRefusal::WrongOp)
    );
    // Another segment, another owner's key, a widened range: the signature no longer holds.
    assert_eq!(
        keys.verify("owner-a/seg1", TransferOp::Read, 4096, 1, 0, &g),
        Err(GrantRefusal::BadSignature)
    );
    let mut wider = g;
    wider.length = 1 << 30;
    assert_eq!(
        keys.verify(seg, TransferOp::Read, 4096, 1, 0, &wider),
        Err(GrantRefusal::BadSignature)
    );
    let mut later = g;
    later.expires_at_ms = u64::MAX;
    assert_eq!(
        keys.verify(seg, TransferOp::Read, 4096, 1, 0, &later),
        Err(GrantRefusal::BadSignature)
    );
    let other = GrantKeys::single(GrantKey::derive(SECRET, "owner-b"));
    assert_eq!(
        other.verify(seg, TransferOp::Read, 4096, 1, 0, &g),
        Err(GrantRefusal::UnknownKey)
    );
    // A key with the same id but other bytes cannot exist in practice; a forged id with the
    // right key id but a made-up tag fails the signature.
    let mut forged = g;
    forged.tag = [7; 32];
    assert_eq!(
        keys.verify(seg, TransferOp::Read, 4096, 1, 0, &forged),
        Err(GrantRefusal::BadSignature)
    );
}

#[test]
fn decoding_refuses_unknown_versions_ops_and_lengths() {
    let b = read_grant().encode();
    assert!(Grant::decode(&b[..79]).is_none());
    for (at, value) in [(0, 2u8), (1, 3), (1, 0), (2, 1), (3, 1)] {
        let mut bad = b;
        bad[at] = value;
        assert!(Grant::decode(&bad).is_none(), "byte {at} = {value}");
    }
}

#[test]
fn keys_rotate_keeping_the_previous_one() {
    let old = GrantKey::derive(SECRET, "owner-a");
    let new = GrantKey::derive(b"another secret of 32 bytes......", "owner-a");
    assert_ne!(old.id(), new.id());
    let mut keys = GrantKeys::single(old.clone());
    assert!(!keys.install(old.clone()));
    assert!(keys.install(new.clone()));
    let seg = "owner-a/seg0";
    let by_old = old.mint(seg, TransferOp::Read, 0, 8, 100, [0; 16]);
    let by_new = new.mint(seg, TransferOp::Read, 0, 8, 100, [0; 16]);
    assert_eq!(keys.verify(seg, TransferOp::Read, 0, 8, 0, &by_old), Ok(()));
    assert_eq!(keys.verify(seg, TransferOp::Read, 0, 8, 0, &by_new), Ok(()));
    let third = GrantKey::derive(b"a third secret of 32 bytes......", "owner-a");
    assert!(keys.install(third));
    assert_eq!(
        keys.verify(seg, TransferOp::Read, 0, 8, 0, &by_old),
        Err(GrantRefusal::UnknownKey)
    );
    assert_eq!(GrantKey::from_bytes(*new.bytes()), new);
}

#[test]
fn a_notice_must_name_the_put_its_range_was_granted_for() {
    let keys = GrantKeys::single(key());
    let seg = "owner-a/seg0";
    let subject = subject_of(&[b"tenant", b"key", &7u64.to_le_bytes()]);
    let g = key().mint(seg, TransferOp::Write, 0, 64, 1, subject);
    // Long expired: notices are not bound by the transfer window.
    assert_eq!(keys.verify_notice(seg, 0, 64, &subject, &g), Ok(()));
    let other = subject_of(&[b"tenant", b"key", &8u64.to_le_bytes()]);
    assert_eq!(
        keys.verify_notice(seg, 0, 64, &other, &g),
        Err(GrantRefusal::OutsideRange)
    );
    assert_eq!(
        keys.verify_notice(seg, 0, 32, &subject, &g),
        Err(GrantRefusal::OutsideRange)
    );
    let read = key().mint(seg, TransferOp::Read, 0, 64, 1, subject);
    assert_eq!(
        keys.verify_notice(seg, 0, 64, &subject, &read),
        Err(GrantRefusal::WrongOp)
    );
    // Length-prefixed parts: moving a byte between parts changes the subject.
    assert_ne!(subject_of(&[b"ab", b"c"]), subject_of(&[b"a", b"bc"]));
}

//! Given/when/then tests of batch reservations, malformed commands and wire codes.

use super::tests::*;
use super::*;
use crate::testing::given;

fn batch(items: Vec<ReserveItem>) -> QuotaCommand {
    QuotaCommand::ReserveBatch {
        items,
        deadline_ms: DEADLINE,
    }
}

#[test]
fn a_batch_is_admitted_in_key_order_and_counts_its_own_items() {
    let put_item = |op: &str, key: &str, size| item(op, key, ObjectChange::Put { size });
    let state = given::<QuotaRoot>(with_a())
        .when(batch(vec![
            put_item("p3", "z", 100),
            put_item("p1", "b", 200),
            item("d2", "a", ObjectChange::Delete),
        ]))
        .then(vec![
            reserved("d2", "a", OpKind::Delete, 0, (300, Some(7)), (0, 0)),
            reserved("p1", "b", OpKind::Create, 200, (0, None), (200, 1)),
            reserved("p3", "z", OpKind::Create, 100, (0, None), (100, 1)),
        ]);
    assert_eq!((state.pending_bytes(), state.pending_objects()), (300, 2));
    // 300 used + 500 from b, 201 from c: c fails, so b is not reserved either.
    given::<QuotaRoot>(with_a())
        .when(batch(vec![
            put_item("p2", "c", 201),
            put_item("p1", "b", 500),
        ]))
        .then_error(exceeded(QuotaLimit::MaxBytes, "c", 1000, 300, 500, 201));
    // A busy key anywhere refuses the whole batch.
    let mut events = with_a();
    events.push(reserved("p9", "c", OpKind::Create, 1, (0, None), (1, 1)));
    given::<QuotaRoot>(events)
        .when(batch(vec![put_item("p1", "b", 1), put_item("p2", "c", 1)]))
        .then_error(QuotaError::ObjectBusy {
            key: "c".into(),
            holder: "p9".into(),
        });
}

#[test]
fn a_retried_batch_reserves_only_what_is_new() {
    let put_item = |op: &str, key: &str, size| item(op, key, ObjectChange::Put { size });
    let mut events = with_a();
    events.push(reserved(
        "p1",
        "b",
        OpKind::Create,
        200,
        (0, None),
        (200, 1),
    ));
    given::<QuotaRoot>(events.clone())
        .when(batch(vec![
            put_item("p1", "b", 200),
            put_item("p2", "c", 100),
        ]))
        .then(vec![reserved(
            "p2",
            "c",
            OpKind::Create,
            100,
            (0, None),
            (100, 1),
        )]);
    given::<QuotaRoot>(events)
        .when(batch(vec![put_item("p1", "b", 200)]))
        .then(vec![]);
}

#[test]
fn malformed_commands_are_refused() {
    let put_item = |op: &str, key: &str| item(op, key, ObjectChange::Put { size: 1 });
    let cases = vec![
        (
            put("", "a", 1),
            invalid("op_id", "0 bytes, 1..=128 allowed"),
        ),
        (
            put("p\n", "a", 1),
            invalid("op_id", "must not contain control characters"),
        ),
        (put("p", "", 1), invalid("key", "0 bytes, 1..=4161 allowed")),
        (
            put("p", "a", MAX_BYTES + 1),
            invalid(
                "size",
                "9223372036854775808 bytes, at most 9223372036854775807 allowed",
            ),
        ),
        (batch(vec![]), invalid("items", "0 items, 1..=1024 allowed")),
        (
            batch(vec![put_item("p", "a"), put_item("p", "b")]),
            invalid("op_id", "\"p\" twice in a batch"),
        ),
        (
            batch(vec![put_item("p", "a"), put_item("q", "a")]),
            invalid("key", "\"a\" twice in a batch"),
        ),
        (
            batch(
                (0..=MAX_BATCH_OPS)
                    .map(|i| put_item(&format!("p{i}"), &format!("k{i}")))
                    .collect(),
            ),
            invalid("items", "1025 items, 1..=1024 allowed"),
        ),
    ];
    for (cmd, error) in cases {
        given::<QuotaRoot>(with_a()).when(cmd).then_error(error);
    }
    let long_key = "k".repeat(MAX_KEY_BYTES);
    given::<QuotaRoot>(vec![])
        .when(put("p", &long_key, 1))
        .then(vec![reserved(
            "p",
            &long_key,
            OpKind::Create,
            1,
            (0, None),
            (1, 1),
        )]);
}

#[test]
fn refusals_carry_their_wire_codes() {
    let codes = [
        (invalid("key", "x"), "INVALID_ARGUMENT"),
        (QuotaError::NotFound { op_id: "p".into() }, "NOT_FOUND"),
        (
            exceeded(QuotaLimit::MaxObjects, "k", 1, 1, 0, 1),
            "QUOTA_EXCEEDED",
        ),
        (
            QuotaError::ObjectTooLarge {
                key: "k".into(),
                size: 2,
                max_bytes: 1,
            },
            "QUOTA_EXCEEDED",
        ),
        (
            QuotaError::ObjectBusy {
                key: "k".into(),
                holder: "p".into(),
            },
            "BUSY",
        ),
        (
            QuotaError::OperationConflict {
                op_id: "p".into(),
                reason: "x".into(),
            },
            "CONFLICT",
        ),
    ];
    for (error, code) in codes {
        assert_eq!(error.code().as_str(), code, "{error}");
    }
    assert_eq!(
        exceeded(QuotaLimit::MaxBytes, "c", 1000, 300, 400, 301).to_string(),
        "quota max_bytes exceeded for \"c\": used 300 + pending 400 + requested 301 > 1000"
    );
}

#[test]
fn without_a_policy_a_batch_of_the_largest_sizes_saturates_instead_of_overflowing() {
    let items = (0..3)
        .map(|i| {
            item(
                &format!("p{i}"),
                &format!("k{i}"),
                ObjectChange::Put { size: MAX_BYTES },
            )
        })
        .collect();
    let expected = (0..3)
        .map(|i| {
            let (op, key) = (format!("p{i}"), format!("k{i}"));
            reserved(
                &op,
                &key,
                OpKind::Create,
                MAX_BYTES,
                (0, None),
                (MAX_BYTES, 1),
            )
        })
        .collect();
    let state = given::<QuotaRoot>(vec![]).when(batch(items)).then(expected);
    assert_eq!(state.pending_bytes(), u64::MAX);
}

//! The batch count is refused while decoding, before the items are.

use super::*;

fn ids(n: usize) -> Vec<ObjectRequest> {
    (0..n)
        .map(|i| ObjectRequest {
            id: ObjectId {
                tenant: None,
                domain: None,
                key: format!("k{i}"),
            },
        })
        .collect()
}

#[test]
fn a_full_batch_decodes_in_both_formats() {
    let full = BatchRequest {
        items: ids(MAX_BATCH),
    };
    let packed = rmp_serde::to_vec_named(&full).unwrap();
    let back: BatchRequest<ObjectRequest> = rmp_serde::from_slice(&packed).unwrap();
    assert_eq!(back, full);
    let json = serde_json::to_vec(&full).unwrap();
    let back: BatchRequest<ObjectRequest> = serde_json::from_slice(&json).unwrap();
    assert_eq!(back, full);
}

#[test]
fn a_declared_count_over_the_limit_is_refused_before_any_item() {
    // {"items": <array32 claiming a million items>} and no item at all: only the count can be
    // what refuses it (decoding items would fail on the missing bytes instead).
    let mut body = vec![0x81, 0xa5];
    body.extend_from_slice(b"items");
    body.push(0xdd);
    body.extend_from_slice(&1_000_000u32.to_be_bytes());
    let err = rmp_serde::from_slice::<BatchRequest<ObjectRequest>>(&body).unwrap_err();
    assert!(
        err.to_string()
            .contains("1000000 items; a batch holds at most 1024"),
        "{err}"
    );
}

#[test]
fn json_stops_at_the_first_item_over_the_limit() {
    let mut json = serde_json::to_string(&BatchRequest {
        items: ids(MAX_BATCH + 1),
    })
    .unwrap();
    // Garbage after the over-limit item: decoding stopped before reaching it.
    json.truncate(json.len() - 2);
    json.push_str(",!!!]}");
    let err = serde_json::from_str::<BatchRequest<ObjectRequest>>(&json).unwrap_err();
    assert!(
        err.to_string().contains("a batch holds at most 1024"),
        "{err}"
    );
}

//! Coalesced lease releases against a real crescentd: a reader's releases ride on its later
//! requests or leave on the linger timer, so another client's remove finds them released
//! without the reader calling `settle()`; the reader's own remove never waits.

mod common;

use std::time::Duration;

use common::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_reach_the_server_without_settle() {
    let server = Server::start();
    let reader = server.client();
    let other = server.client();
    let keys: Vec<String> = (0..10).map(|i| format!("lease/{i}")).collect();
    let values: Vec<Vec<u8>> = (0..10).map(|i| vec![i as u8; 100 + i]).collect();
    for r in reader.put_batch(&keys, &values).await.unwrap() {
        r.unwrap();
    }

    // Fewer gets than a coalesced batch: their releases wait in the reader's queue, and the
    // reader's own remove carries them in front of itself.
    for (k, v) in keys.iter().zip(&values).take(3) {
        assert_eq!(&reader.get(k).await.unwrap(), v);
    }
    reader.remove(&keys[0]).await.unwrap();

    // Another client's remove: the timer has sent the queued releases meanwhile.
    assert_eq!(reader.get(&keys[4]).await.unwrap(), values[4]);
    let released = async {
        loop {
            match other.remove(&keys[4]).await {
                Ok(()) => return,
                Err(e) if e.code_str() == "BUSY" => {
                    tokio::time::sleep(Duration::from_millis(5)).await
                }
                Err(e) => panic!("remove: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(2), released)
        .await
        .expect("the reader's lease was released well before its 10 s deadline");
    other
        .remove(&keys[1])
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // A batch get's releases likewise.
    let batch = reader.get_batch(&keys[5..]).await.unwrap();
    for (got, want) in batch.into_iter().zip(&values[5..]) {
        assert_eq!(&got.unwrap(), want);
    }
    reader.settle().await;
    for r in other.remove_batch(&keys[5..]).await.unwrap() {
        r.unwrap();
    }
}

/// More releases than one batch holds (`MAX_BATCH`): they leave as several frames (one refused
/// whole would keep every lease until its deadline), riding in front of the remove and on the
/// linger timer alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_releases_than_a_batch_holds_are_all_released() {
    let server = Server::start();
    let reader = server.client();
    let other = server.client();
    let n = crescent_wire::store::MAX_BATCH + 300;
    let keys: Vec<String> = (0..n).map(|i| format!("many/{i}")).collect();
    let values: Vec<Vec<u8>> = (0..n).map(|i| (i as u32).to_le_bytes().to_vec()).collect();
    for r in reader.put_batch(&keys, &values).await.unwrap() {
        r.unwrap();
    }
    // Riding in front of the reader's own remove.
    for (got, want) in reader
        .get_batch(&keys)
        .await
        .unwrap()
        .into_iter()
        .zip(&values)
    {
        assert_eq!(&got.unwrap(), want);
    }
    let (first, rest) = keys.split_at(n / 2);
    for r in reader.remove_batch(first).await.unwrap() {
        r.unwrap_or_else(|e| panic!("reader's remove: {e}"));
    }
    // Sent by the timer, found released by another client.
    for got in reader.get_batch(rest).await.unwrap() {
        got.unwrap();
    }
    reader.settle().await;
    for r in other.remove_batch(rest).await.unwrap() {
        r.unwrap_or_else(|e| panic!("other's remove: {e}"));
    }
}

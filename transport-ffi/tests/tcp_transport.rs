//! End-to-end tests of the TCP transport over loopback: round trips, batches, concurrency,
//! per-descriptor errors, the same-process fast path and metrics.

mod common;

use std::sync::Arc;

use common::*;
use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{
    LocalHandle, RemoteSegment, SegmentMemory, TransferDescriptor, TransferOp, Transport,
    TransportError, TransportMetrics,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_of_many_sizes_are_byte_identical() {
    let (_owner, remote) = owner("seg-a", 16 * MIB).await;
    let c = client().await;
    let sizes = [
        1usize,
        2,
        7,
        100,
        4095,
        4096,
        4097,
        65535,
        65536,
        65537,
        MIB,
        4 * MIB,
    ];
    let mut offset = 0u64;
    for (i, &size) in sizes.iter().enumerate() {
        let data = random_bytes(i as u64, size);
        assert!(
            write_and_read_back(&c, &remote, offset, &data).await == data,
            "size {size} differs"
        );
        offset += size as u64;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_mixed_batches_across_segments_and_owners() {
    let (_o1, seg1) = owner("seg-1", 8 * MIB).await;
    let (_o2, seg2) = owner("seg-2", 8 * MIB).await;
    let c = client().await;
    let n = 512usize;
    let chunk = 8192usize;
    let data = random_bytes(99, n * chunk);
    let (src, _) = buffer(&c, data.clone());
    let (dst, dst_mem) = buffer(&c, vec![0u8; n * chunk]);
    let writes: Vec<_> = (0..n)
        .map(|i| {
            let seg = if i % 2 == 0 { &seg1 } else { &seg2 };
            desc(
                TransferOp::Write,
                seg,
                (i * chunk) as u64,
                src,
                (i * chunk) as u64,
                chunk as u64,
            )
        })
        .collect();
    assert!(c.submit(&writes).await.unwrap().all_ok());
    // Read back in reverse order, so responses land far from where requests started.
    let reads: Vec<_> = writes
        .iter()
        .rev()
        .map(|w| TransferDescriptor {
            op: TransferOp::Read,
            local: dst,
            ..w.clone()
        })
        .collect();
    let done = c.submit(&reads).await.unwrap();
    assert_eq!(done.statuses.len(), n);
    assert!(done.all_ok());
    assert!(contents(&dst_mem, 0, n * chunk).await == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_write_disjoint_ranges() {
    let (_owner, remote) = owner("shared", 8 * MIB).await;
    let mut tasks = Vec::new();
    for client_no in 0..6u64 {
        let remote = remote.clone();
        tasks.push(tokio::spawn(async move {
            let c = client().await;
            for round in 0..20u64 {
                let len = 16 * 1024 + (round as usize * 997);
                let base = client_no * MIB as u64 + round * 40_000;
                let data = random_bytes(client_no * 1000 + round, len);
                let (src, _) = buffer(&c, data.clone());
                let (dst, dst_mem) = buffer(&c, vec![0u8; len]);
                let w = desc(TransferOp::Write, &remote, base, src, 0, len as u64);
                assert!(c.submit(&[w]).await.unwrap().all_ok());
                let r = desc(TransferOp::Read, &remote, base, dst, 0, len as u64);
                assert!(c.submit(&[r]).await.unwrap().all_ok());
                assert!(contents(&dst_mem, 0, len).await == data);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_descriptors_get_clear_errors_and_do_not_spoil_the_batch() {
    let (owner_t, remote) = owner("small", 4096).await;
    let c = client().await;
    let (src, _) = buffer(&c, vec![5u8; 1024]);
    let missing = RemoteSegment::new(remote.endpoint.clone(), "no-such-segment");
    let batch = [
        desc(TransferOp::Write, &remote, 0, src, 0, 1024), // ok
        desc(TransferOp::Write, &remote, 3584, src, 0, 1024), // past the segment end
        desc(TransferOp::Write, &remote, 0, src, 512, 1024), // past the local buffer
        desc(TransferOp::Write, &missing, 0, src, 0, 16),  // unknown segment
        desc(TransferOp::Read, &remote, 0, LocalHandle(999_999), 0, 1), // unknown handle
        desc(TransferOp::Read, &remote, u64::MAX, src, 0, 2), // offset overflow
        desc(TransferOp::Write, &remote, 1024, src, 0, 1024), // ok
    ];
    let done = c.submit(&batch).await.unwrap();
    let codes = status_codes(&done);
    assert_eq!(
        codes,
        [
            None,
            Some("INVALID_ARGUMENT"),
            Some("INVALID_ARGUMENT"),
            Some("NOT_FOUND"),
            Some("NOT_FOUND"),
            Some("INVALID_ARGUMENT"),
            None
        ]
    );
    assert!(matches!(
        done.statuses[1],
        Err(TransportError::OutOfRange { size: 4096, .. })
    ));
    assert!(matches!(
        done.statuses[3],
        Err(TransportError::SegmentNotFound { .. })
    ));
    // Nothing was written outside the two good ranges.
    let mem = owner_t.withdraw_segment("small").unwrap();
    assert_eq!(contents(&mem, 0, 2048).await, vec![5u8; 2048]);
    assert_eq!(contents(&mem, 2048, 2048).await, vec![0u8; 2048]);
    // The segment is gone now: a cached handle must not keep it reachable.
    let gone = c
        .submit(&[desc(TransferOp::Write, &remote, 0, src, 0, 8)])
        .await
        .unwrap();
    assert_eq!(
        gone.statuses[0].as_ref().unwrap_err().code().as_str(),
        "NOT_FOUND"
    );
    // Too large a batch is refused as a whole.
    let huge = vec![desc(TransferOp::Write, &remote, 0, src, 0, 1); 5000];
    assert!(matches!(
        c.submit(&huge).await,
        Err(TransportError::BatchTooLarge { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_process_fast_path_copies_directly() {
    let t = TcpTransport::start(
        TcpConfig {
            listen: Some("127.0.0.1:0".into()),
            ..TcpConfig::default()
        },
        TransportMetrics::unregistered(),
    )
    .await
    .unwrap();
    let segment = Arc::new(SegmentMemory::allocate(MIB).unwrap());
    t.serve_segment("local", segment.clone()).unwrap();
    let remote = RemoteSegment::new(t.local_endpoint().unwrap(), "local");
    let data = random_bytes(3, 300_000);
    let (src, _) = buffer(&t, data.clone());
    let (dst, dst_mem) = buffer(&t, vec![0u8; data.len()]);
    let n = data.len() as u64;
    assert!(t
        .submit(&[desc(TransferOp::Write, &remote, 100, src, 0, n)])
        .await
        .unwrap()
        .all_ok());
    assert_eq!(contents(&segment, 100, data.len()).await, data);
    assert!(t
        .submit(&[desc(TransferOp::Read, &remote, 100, dst, 0, n)])
        .await
        .unwrap()
        .all_ok());
    assert_eq!(contents(&dst_mem, 0, data.len()).await, data);
    let bad = t
        .submit(&[desc(TransferOp::Read, &remote, MIB as u64 - 10, dst, 0, 11)])
        .await
        .unwrap();
    assert_eq!(
        bad.statuses[0].as_ref().unwrap_err().code(),
        crescent_error_class::ErrorCode::InvalidArgument
    );
    // The served segment registered as a local buffer too, overlapping itself: refused, not
    // deadlocked.
    let own = t.register(segment.clone()).unwrap();
    let overlap = t
        .submit(&[desc(TransferOp::Write, &remote, 0, own, 10, 100)])
        .await
        .unwrap();
    assert_eq!(
        overlap.statuses[0].as_ref().unwrap_err().code(),
        crescent_error_class::ErrorCode::InvalidArgument
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_bytes_ops_and_errors() {
    let registry = prometheus::Registry::new();
    let metrics = TransportMetrics::register(&registry).unwrap();
    let (_owner, remote) = owner("m", 64 * 1024).await;
    let c = TcpTransport::start(config(false), metrics).await.unwrap();
    let (src, _) = buffer(&c, vec![1u8; 4096]);
    let done = c
        .submit(&[
            desc(TransferOp::Write, &remote, 0, src, 0, 4096),
            desc(TransferOp::Write, &remote, 64 * 1024, src, 0, 1),
        ])
        .await
        .unwrap();
    assert!(done.statuses[0].is_ok() && done.statuses[1].is_err());
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    assert!(
        text.contains(r#"crescent_transport_bytes_total{op="write",transport="tcp"} 4096"#),
        "{text}"
    );
    assert!(text.contains(r#"crescent_transport_errors_total{op="write",outcome="out_of_range",transport="tcp"} 1"#), "{text}");
    assert!(text.contains(r#"crescent_transport_batches_total{op="write",outcome="out_of_range",transport="tcp"} 1"#), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_reading_into_what_it_writes_does_not_wait_on_itself() {
    let (owner_t, remote) = owner("loop", 32 * MIB).await;
    let c = client().await;
    let chunk = MIB;
    let n = 8usize;
    let half = (16 * MIB) as u64;
    // The segment's first half holds `old`; the local buffer holds `new`.
    let old = random_bytes(11, n * chunk);
    let new = random_bytes(12, n * chunk);
    let (seed, _) = buffer(&c, old.clone());
    let fill = desc(TransferOp::Write, &remote, 0, seed, 0, (n * chunk) as u64);
    assert!(c.submit(&[fill]).await.unwrap().all_ok());
    let (buf, buf_mem) = buffer(&c, new);
    // Each chunk: read the first half into `buf`, then write the same `buf` range to the second
    // half. Pipelined blindly, the 1 MiB answer of the read waits for the write's lock while
    // the write waits for the peer, which waits for us to take the answer.
    let mut batch = Vec::new();
    for i in 0..n {
        let at = (i * chunk) as u64;
        batch.push(desc(TransferOp::Read, &remote, at, buf, at, chunk as u64));
        batch.push(desc(
            TransferOp::Write,
            &remote,
            half + at,
            buf,
            at,
            chunk as u64,
        ));
    }
    let done = tokio::time::timeout(std::time::Duration::from_secs(8), c.submit(&batch))
        .await
        .expect("no self-deadlock")
        .unwrap();
    assert!(done.all_ok(), "{:?}", done.first_error());
    // Descriptors ran in order: the writes sent what the reads brought in.
    assert!(contents(&buf_mem, 0, n * chunk).await == old);
    let segment = owner_t.withdraw_segment("loop").unwrap();
    assert!(contents(&segment, half, n * chunk).await == old);
}

/// A 0-length transfer (an empty value's replica) is valid and moves nothing, in a batch with
/// other transfers and at the very end of a buffer and a segment (docs/api.md "Empty values").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_length_transfers_complete_and_move_nothing() {
    let (_owner, remote) = owner("seg-z", MIB).await;
    let c = client().await;
    let (src, _) = buffer(&c, vec![7u8; 64]);
    let (dst, dst_mem) = buffer(&c, vec![1u8; 64]);
    let batch = [
        desc(TransferOp::Write, &remote, 0, src, 0, 0),
        desc(TransferOp::Write, &remote, 64, src, 0, 64),
        desc(TransferOp::Write, &remote, MIB as u64, src, 64, 0),
    ];
    let done = c.submit(&batch).await.unwrap();
    assert!(done.all_ok(), "{:?}", done.statuses);
    let reads = [
        desc(TransferOp::Read, &remote, 0, dst, 0, 0),
        desc(TransferOp::Read, &remote, MIB as u64, dst, 64, 0),
    ];
    let done = c.submit(&reads).await.unwrap();
    assert!(done.all_ok(), "{:?}", done.statuses);
    assert_eq!(
        contents(&dst_mem, 0, 64).await,
        vec![1u8; 64],
        "nothing landed"
    );
}

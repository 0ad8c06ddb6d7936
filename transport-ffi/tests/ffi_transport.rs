//! The transfer-engine binding, end to end through dlopen: the tests compile the mini engine
//! (`c/mini_transfer_engine*.c`) with the system C compiler into a temp dir and load it.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::mini_engine::{compile, mini_engine};
use common::{buffer, contents, desc, random_bytes, status_codes, write_and_read_back};
use crescent_transport::ffi::{FfiConfig, FfiTransport};
use crescent_transport::{
    build_transport, LocalHandle, RemoteSegment, RoutedTransport, SegmentMemory, TransferOp,
    Transport, TransportConfig, TransportError, TransportKind, TransportMetrics,
};

fn ffi_config(library: &Path, name: &str) -> FfiConfig {
    FfiConfig {
        library: library.to_string_lossy().into_owned(),
        local_server_name: name.into(),
        ..FfiConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_through_the_dlopened_engine_are_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let library = mini_engine(dir.path());
    // Selected by configuration, as crescentd and the client do it.
    let config: TransportConfig = serde_json::from_value(serde_json::json!({
        "kind": "ffi",
        "library": library.to_string_lossy(),
        "local_server_name": "owner-a",
    }))
    .unwrap();
    let owner = build_transport(&config, TransportMetrics::unregistered())
        .await
        .unwrap();
    assert_eq!(owner.kind(), TransportKind::Ffi);
    let segment = Arc::new(SegmentMemory::allocate(8 << 20).unwrap());
    owner.serve_segment("ffi-seg", segment.clone()).unwrap();

    // A second engine instance in the same process acts as the client.
    let client = FfiTransport::load(
        ffi_config(&library, "client-b"),
        TransportMetrics::unregistered(),
    )
    .unwrap();
    let remote = RemoteSegment::new("owner-a", "ffi-seg");
    let mut offset = 0u64;
    for (i, size) in [1usize, 4096, 65_537, 4 << 20].into_iter().enumerate() {
        let data = random_bytes(i as u64, size);
        assert!(
            write_and_read_back(&client, &remote, offset, &data).await == data,
            "round trip of {size} bytes differs"
        );
        assert!(
            contents(&segment, offset, size).await == data,
            "segment holds the put bytes"
        );
        offset += size as u64;
    }

    // A batch of 64, with a conflicting pair of local ranges (read into what a write sends).
    let data = random_bytes(77, 64 * 1024);
    let (buf, buf_mem) = buffer(&client, data.clone());
    let mut batch: Vec<_> = (0..64u64)
        .map(|i| desc(TransferOp::Write, &remote, i * 1024, buf, i * 1024, 1024))
        .collect();
    batch.push(desc(TransferOp::Read, &remote, 0, buf, 0, 1024));
    let done = client.submit(&batch).await.unwrap();
    assert!(done.all_ok(), "{:?}", done.first_error());
    assert!(contents(&segment, 0, data.len()).await == data);
    assert!(contents(&buf_mem, 0, data.len()).await == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_errors_are_clear_and_per_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let library = mini_engine(dir.path());
    let owner = FfiTransport::load(
        ffi_config(&library, "owner"),
        TransportMetrics::unregistered(),
    )
    .unwrap();
    let segment = Arc::new(SegmentMemory::allocate(4096).unwrap());
    owner.serve_segment("small", segment.clone()).unwrap();
    assert_eq!(
        owner
            .serve_segment("small", Arc::new(SegmentMemory::allocate(64).unwrap()))
            .unwrap_err()
            .code(),
        crescent_error_class::ErrorCode::InvalidArgument
    );
    let client = FfiTransport::load(
        ffi_config(&library, "client"),
        TransportMetrics::unregistered(),
    )
    .unwrap();
    let remote = RemoteSegment::new("owner", "small");
    let (src, _) = buffer(&client, vec![9u8; 1024]);
    let batch = [
        desc(TransferOp::Write, &remote, 0, src, 0, 1024),
        desc(
            TransferOp::Write,
            &RemoteSegment::new("owner", "missing"),
            0,
            src,
            0,
            8,
        ),
        desc(TransferOp::Write, &remote, 4000, src, 0, 100),
        desc(TransferOp::Write, &remote, 0, src, 1000, 100),
        desc(TransferOp::Write, &remote, 0, LocalHandle(424242), 0, 1),
    ];
    let done = client.submit(&batch).await.unwrap();
    let codes = status_codes(&done);
    assert_eq!(
        codes,
        [
            None,
            Some("NOT_FOUND"),
            Some("INVALID_ARGUMENT"),
            Some("INVALID_ARGUMENT"),
            Some("NOT_FOUND")
        ]
    );
    // The rejected out-of-range write copied nothing.
    assert_eq!(contents(&segment, 1024, 3072).await, vec![0u8; 3072]);

    // A withdrawn segment fails afterwards (the engine resolves names at submit time), then is
    // reported NOT_FOUND once the binding re-opens it.
    owner.withdraw_segment("small").unwrap();
    let first = client.submit(&batch[..1]).await.unwrap();
    assert!(first.statuses[0].is_err());
    let again = client.submit(&batch[..1]).await.unwrap();
    assert_eq!(
        again.statuses[0].as_ref().unwrap_err().code().as_str(),
        "NOT_FOUND"
    );
}

#[test]
fn a_missing_library_is_an_error_naming_it() {
    let err = FfiTransport::load(
        ffi_config(Path::new("/nonexistent/libte.so"), "x"),
        TransportMetrics::unregistered(),
    )
    .unwrap_err();
    assert!(matches!(err, TransportError::LibraryLoad { .. }));
    assert!(err.to_string().contains("/nonexistent/libte.so"), "{err}");
    assert_eq!(err.code().as_str(), "INTERNAL");
}

#[test]
fn a_missing_symbol_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // A library with part of the API only: everything up to submitTransfer.
    let source = dir.path().join("partial.c");
    std::fs::write(
        &source,
        r#"
        #include <stddef.h>
        #include <stdint.h>
        void *createTransferEngine(const char *a, const char *b, const char *c, uint64_t d, int e) { (void)a; (void)b; (void)c; (void)d; (void)e; return NULL; }
        void *installTransport(void *e, const char *p, void **a) { (void)e; (void)p; (void)a; return NULL; }
        int registerLocalMemory(void *e, void *a, size_t l, const char *o, int r) { (void)e; (void)a; (void)l; (void)o; (void)r; return 0; }
        int unregisterLocalMemory(void *e, void *a) { (void)e; (void)a; return 0; }
        int openSegment(void *e, const char *n) { (void)e; (void)n; return -1; }
        int closeSegment(void *e, int s) { (void)e; (void)s; return 0; }
        uint64_t allocateBatchID(void *e, size_t n) { (void)e; (void)n; return UINT64_MAX; }
        "#,
    )
    .unwrap();
    let library = compile(&[&source], dir.path(), "libpartial.so");
    let err = FfiTransport::load(ffi_config(&library, "x"), TransportMetrics::unregistered())
        .unwrap_err();
    assert!(matches!(err, TransportError::LibraryLoad { .. }));
    assert!(
        err.to_string().contains("missing symbol submitTransfer"),
        "{err}"
    );
}

#[test]
fn a_refused_protocol_is_an_engine_error() {
    let dir = tempfile::tempdir().unwrap();
    let library = mini_engine(dir.path());
    let config = FfiConfig {
        protocol: "rdma".into(),
        ..ffi_config(&library, "x")
    };
    let err = FfiTransport::load(config, TransportMetrics::unregistered()).unwrap_err();
    assert!(err.to_string().contains("installTransport"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routed_transport_sends_each_transfer_where_its_segment_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let library = mini_engine(dir.path());
    let (_tcp_owner, tcp_remote) = common::owner("tcp-seg", 1 << 20).await;
    let engine_owner = FfiTransport::load(
        ffi_config(&library, "engine-owner"),
        TransportMetrics::unregistered(),
    )
    .unwrap();
    let engine_segment = Arc::new(SegmentMemory::allocate(1 << 20).unwrap());
    engine_owner
        .serve_segment("engine-seg", engine_segment.clone())
        .unwrap();
    let engine_remote = RemoteSegment::transfer_engine("engine-owner", "engine-seg");

    // TCP alone refuses an engine-served segment, with a stable code.
    let tcp_only: Arc<dyn Transport> = Arc::new(common::client().await);
    let (buf, _) = buffer(&*tcp_only, vec![1u8; 16]);
    let done = tcp_only
        .submit(&[desc(TransferOp::Write, &engine_remote, 0, buf, 0, 16)])
        .await
        .unwrap();
    let refused = done.statuses[0].as_ref().unwrap_err();
    assert_eq!(refused.code().as_str(), "INVALID_ARGUMENT", "{refused}");

    let engine = FfiTransport::load(
        ffi_config(&library, "router"),
        TransportMetrics::unregistered(),
    )
    .unwrap();
    let routed = RoutedTransport::new(
        Arc::new(common::client().await) as Arc<dyn Transport>,
        Arc::new(engine) as Arc<dyn Transport>,
    );
    let data = random_bytes(5, 8192);
    let (src, _) = buffer(&routed, data.clone());
    let batch = [
        desc(TransferOp::Write, &tcp_remote, 0, src, 0, 4096),
        desc(TransferOp::Write, &engine_remote, 100, src, 4096, 4096),
        desc(TransferOp::Write, &engine_remote, (1 << 20) - 1, src, 0, 2),
    ];
    let codes = status_codes(&routed.submit(&batch).await.unwrap());
    assert_eq!(codes, [None, None, Some("INVALID_ARGUMENT")]);
    assert!(contents(&engine_segment, 100, 4096).await == data[4096..]);
    for remote in [&tcp_remote, &engine_remote] {
        let back = write_and_read_back(&routed, remote, 200_000, &data).await;
        assert!(back == data, "round trip through {:?}", remote.via);
    }
    routed.unregister(src).unwrap();
}

//! The mini engine across processes: this test binary starts itself again as a child that
//! serves a segment through its own engine (the `serving_child` test, armed by an environment
//! variable), and the parent reads and writes that segment through the metadata directory and
//! the child's listener (docs/transport.md, "The bundled engine").

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use common::mini_engine::mini_engine;
use common::{buffer, contents, desc, random_bytes, status_codes, write_and_read_back};
use crescent_transport::ffi::{FfiConfig, FfiTransport};
use crescent_transport::{RemoteSegment, SegmentMemory, TransferOp, Transport, TransportMetrics};

/// Set in the child: `<library>\n<metadata dir>`.
const CHILD_ENV: &str = "MINI_ENGINE_SERVING_CHILD";
const SEGMENT: &str = "child/seg0";
const SEGMENT_BYTES: usize = 1 << 20;

fn config(library: &Path, metadata: &Path, name: &str) -> FfiConfig {
    FfiConfig {
        library: library.to_string_lossy().into_owned(),
        metadata_conn_string: format!("file://{}", metadata.display()),
        local_server_name: name.into(),
        ..FfiConfig::default()
    }
}

/// The segment's initial content: byte i is i mod 251.
fn pattern(offset: usize, len: usize) -> Vec<u8> {
    (offset..offset + len).map(|i| (i % 251) as u8).collect()
}

/// The child's part: serve [`SEGMENT`] until stdin closes. A no-op in a normal test run.
#[test]
fn serving_child() {
    let Ok(armed) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (library, metadata) = armed.split_once('\n').expect("library and metadata dir");
    let engine = FfiTransport::load(
        config(Path::new(library), Path::new(metadata), "child"),
        TransportMetrics::unregistered(),
    )
    .unwrap();
    let memory = SegmentMemory::from_boxed_slice(pattern(0, SEGMENT_BYTES).into_boxed_slice());
    engine
        .serve_segment(SEGMENT, Arc::new(memory.unwrap()))
        .unwrap();
    println!("READY");
    let mut rest = String::new();
    while std::io::stdin().read_line(&mut rest).is_ok_and(|n| n > 0) {}
}

/// Starts the serving child and waits for its ready line.
fn start_child(library: &Path, metadata: &Path) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "serving_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            format!("{}\n{}", library.display(), metadata.display()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // libtest prints "test serving_child ... " before the test's own output.
    while let Some(line) = lines.next() {
        if line.unwrap().trim_end().ends_with("READY") {
            // Keep draining its stdout so that its last lines never hit a closed pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return child;
        }
    }
    panic!(
        "the serving child exited before it was ready: {:?}",
        child.wait()
    );
}

/// One request on the child's listener, bypassing every client-side check: the status byte
/// its header gets (0 accepted, 1 out of range; c/mini_transfer_engine_net.h).
fn raw_request(metadata: &Path, opcode: u8, offset: u64, length: u64) -> u8 {
    use std::io::{Read, Write};
    let endpoint = std::fs::read_to_string(metadata.join("child%2Fseg0")).unwrap();
    let mut stream = std::net::TcpStream::connect(endpoint.trim()).unwrap();
    let mut header = Vec::new();
    header.extend_from_slice(b"MTE1");
    header.extend_from_slice(&[opcode, 0]);
    header.extend_from_slice(&(SEGMENT.len() as u16).to_le_bytes());
    header.extend_from_slice(&offset.to_le_bytes());
    header.extend_from_slice(&length.to_le_bytes());
    header.extend_from_slice(SEGMENT.as_bytes());
    stream.write_all(&header).unwrap();
    let mut status = [0u8; 1];
    stream.read_exact(&mut status).unwrap();
    status[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_served_by_another_process_is_read_and_written() {
    let dir = tempfile::tempdir().unwrap();
    let library = mini_engine(dir.path());
    let metadata = dir.path().join("metadata");
    std::fs::create_dir(&metadata).unwrap();
    let mut child = start_child(&library, &metadata);
    let client = FfiTransport::load(
        config(&library, &metadata, "parent"),
        TransportMetrics::unregistered(),
    )
    .unwrap();
    let remote = RemoteSegment::new("child", SEGMENT);

    // What the child wrote into its segment comes over.
    let (dst, dst_mem) = buffer(&client, vec![0u8; 8192]);
    let read = [desc(TransferOp::Read, &remote, 1000, dst, 0, 8192)];
    let done = client.submit(&read).await.unwrap();
    assert!(done.all_ok(), "{:?}", done.statuses);
    assert!(contents(&dst_mem, 0, 8192).await == pattern(1000, 8192));

    // Writes land there: single transfers of several sizes, then a batch of 32.
    let mut offset = 16_384u64;
    for (seed, size) in [(1u64, 1usize), (2, 4096), (3, 65_537), (4, 300_000)] {
        let data = random_bytes(seed, size);
        assert!(write_and_read_back(&client, &remote, offset, &data).await == data);
        offset += size as u64;
    }
    let data = random_bytes(9, 32 * 1024);
    let (src, _) = buffer(&client, data.clone());
    let base = 512 * 1024;
    let writes: Vec<_> = (0..32u64)
        .map(|i| {
            desc(
                TransferOp::Write,
                &remote,
                base + i * 1024,
                src,
                i * 1024,
                1024,
            )
        })
        .collect();
    assert!(client.submit(&writes).await.unwrap().all_ok());
    let (back, back_mem) = buffer(&client, vec![0u8; data.len()]);
    let reads = [desc(TransferOp::Read, &remote, base, back, 0, 32 * 1024)];
    assert!(client.submit(&reads).await.unwrap().all_ok());
    assert!(contents(&back_mem, 0, data.len()).await == data);

    // The serving side checks bounds; an unknown segment is not found.
    let end = SEGMENT_BYTES as u64;
    let bad = [
        desc(TransferOp::Read, &remote, end - 10, dst, 0, 11),
        desc(TransferOp::Write, &remote, end, src, 0, 1),
        desc(
            TransferOp::Read,
            &RemoteSegment::new("child", "nope"),
            0,
            dst,
            0,
            1,
        ),
        desc(TransferOp::Read, &remote, end - 10, dst, 0, 10),
    ];
    let codes = status_codes(&client.submit(&bad).await.unwrap());
    assert_eq!(
        codes,
        [
            Some("INVALID_ARGUMENT"),
            Some("INVALID_ARGUMENT"),
            Some("NOT_FOUND"),
            None
        ]
    );

    assert_eq!(raw_request(&metadata, 0, end - 8, 16), 1, "past the end");
    assert_eq!(
        raw_request(&metadata, 0, u64::MAX - 1, 16),
        1,
        "offset + length overflows"
    );
    assert_eq!(
        raw_request(&metadata, 1, 8, u64::MAX),
        1,
        "a huge write length"
    );
    assert_eq!(raw_request(&metadata, 0, 0, 0), 0, "an empty read is fine");

    // Once the child is gone its segment cannot be reached: the transfer fails.
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let done = client.submit(&read).await.unwrap();
    assert!(done.statuses[0].is_err(), "{:?}", done.statuses);
}

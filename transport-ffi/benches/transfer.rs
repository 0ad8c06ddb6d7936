//! Data-plane micro-benchmark: 4 KiB and 4 MiB writes and reads over loopback TCP (client and
//! owner in one process, fast path off so every byte crosses the socket), the same-process
//! fast path, and a plain memcpy of the same sizes as the baseline, all in one run.
//!
//! Reported per case: ops/s (transfers, not batches) and GB/s, and the ratio to memcpy.
//! Options (after `--`): `--secs S` per case (default 1), `--json`.
//! Run: `cargo bench -p crescent-transport --bench transfer [-- --json]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{
    RemoteSegment, SegmentMemory, TransferDescriptor, TransferOp, Transport, TransportMetrics,
};

const KIB4: usize = 4096;
const MIB4: usize = 4 << 20;

struct Row {
    case: String,
    size: usize,
    ops_per_sec: f64,
    gb_per_sec: f64,
}

fn memcpy_case(size: usize, secs: f64) -> Row {
    // Page-aligned source and destination, like the transport's segments and buffers. (Two
    // plain `vec!`s of 4 KiB land 16 bytes apart modulo 4 KiB on this allocator, and the
    // resulting 4K-aliasing stalls make memcpy look ~20x slower than it is.)
    let mut src_backing = vec![0x5au8; size + 4096];
    let mut dst_backing = vec![0u8; size + 4096];
    let src_at = src_backing.as_ptr().align_offset(4096);
    let dst_at = dst_backing.as_ptr().align_offset(4096);
    let src = &mut src_backing[src_at..src_at + size];
    src.fill(0x5a);
    let src = &*src;
    let dst = &mut dst_backing[dst_at..dst_at + size];
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut ops = 0u64;
    while Instant::now() < deadline {
        for _ in 0..16 {
            dst.copy_from_slice(std::hint::black_box(src));
            std::hint::black_box(&mut *dst);
        }
        ops += 16;
    }
    row("memcpy".into(), size, ops, started.elapsed())
}

fn row(case: String, size: usize, ops: u64, elapsed: Duration) -> Row {
    let s = elapsed.as_secs_f64();
    Row {
        case,
        size,
        ops_per_sec: ops as f64 / s,
        gb_per_sec: ops as f64 * size as f64 / s / 1e9,
    }
}

async fn transport_case(
    client: &TcpTransport,
    remote: &RemoteSegment,
    label: &str,
    op: TransferOp,
    size: usize,
    batch: usize,
    secs: f64,
) -> Row {
    let local = Arc::new(SegmentMemory::allocate(size * batch).unwrap());
    let handle = client.register(local).unwrap();
    let descriptors: Vec<TransferDescriptor> = (0..batch)
        .map(|i| TransferDescriptor {
            op,
            remote: remote.clone(),
            remote_offset: (i * size) as u64,
            local: handle,
            local_offset: (i * size) as u64,
            length: size as u64,
            grant: None,
        })
        .collect();
    // Warm up: connections, handle cache.
    assert!(client.submit(&descriptors).await.unwrap().all_ok());
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut ops = 0u64;
    while Instant::now() < deadline {
        let done = client.submit(&descriptors).await.unwrap();
        assert!(done.all_ok(), "{:?}", done.first_error());
        ops += batch as u64;
    }
    client.unregister(handle).unwrap();
    let case = format!("{label} {} x{batch}", op.label());
    row(case, size, ops, started.elapsed())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let secs: f64 = args
        .iter()
        .position(|a| a == "--secs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);

    let mut rows = vec![memcpy_case(KIB4, secs), memcpy_case(MIB4, secs)];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let owner = TcpTransport::start(
            TcpConfig {
                listen: Some("127.0.0.1:0".into()),
                ..TcpConfig::default()
            },
            TransportMetrics::unregistered(),
        )
        .await
        .unwrap();
        owner
            .serve_segment(
                "bench",
                Arc::new(SegmentMemory::allocate(256 << 20).unwrap()),
            )
            .unwrap();
        let remote = RemoteSegment::new(owner.local_endpoint().unwrap(), "bench");
        let tcp = TcpTransport::start(
            TcpConfig {
                same_process_fast_path: false,
                ..TcpConfig::default()
            },
            TransportMetrics::unregistered(),
        )
        .await
        .unwrap();
        for (size, batches) in [(KIB4, &[1usize, 128][..]), (MIB4, &[1usize, 16][..])] {
            for &batch in batches {
                for op in [TransferOp::Write, TransferOp::Read] {
                    rows.push(transport_case(&tcp, &remote, "tcp", op, size, batch, secs).await);
                }
            }
        }
        for size in [KIB4, MIB4] {
            for op in [TransferOp::Write, TransferOp::Read] {
                rows.push(transport_case(&owner, &remote, "in-process", op, size, 1, secs).await);
            }
        }
    });

    let baseline = |size: usize| {
        rows.iter()
            .find(|r| r.case == "memcpy" && r.size == size)
            .map(|r| r.gb_per_sec)
            .unwrap_or(f64::NAN)
    };
    if json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"case\":\"{}\",\"size\":{},\"ops_per_sec\":{:.1},\"gb_per_sec\":{:.4},\"vs_memcpy\":{:.5}}}",
                    r.case,
                    r.size,
                    r.ops_per_sec,
                    r.gb_per_sec,
                    r.gb_per_sec / baseline(r.size)
                )
            })
            .collect();
        println!("[{}]", items.join(","));
    } else {
        println!(
            "{:<24} {:>9} {:>14} {:>10} {:>11}",
            "case", "size", "ops/s", "GB/s", "vs memcpy"
        );
        for r in &rows {
            println!(
                "{:<24} {:>9} {:>14.0} {:>10.3} {:>10.4}x",
                r.case,
                r.size,
                r.ops_per_sec,
                r.gb_per_sec,
                r.gb_per_sec / baseline(r.size)
            );
        }
    }
}

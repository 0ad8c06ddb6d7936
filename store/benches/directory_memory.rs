//! Resident memory per object of the directory, and single-thread op rates.
//!
//! `cargo bench -p crescent-store --bench directory_memory` inserts 1M small objects (16-40
//! byte keys, one replica, complete); `-- 10000000` (or `CRESCENT_BENCH_OBJECTS=10000000`)
//! sets the count. RSS is read from /proc/self/status (VmRSS) before and after.

use std::time::Instant;

use crescent_store::{MountSpec, ObjectDirectory, StoreConfig};
use crescent_wire::segments::TransportKind;
use crescent_wire::store::{ObjectId, PutEndRequest, PutStartRequest};

fn rss_bytes() -> u64 {
    // VmRSS is in kB whatever the page size.
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line");
    kb * 1024
}

/// A deterministic 16..=40 byte key.
fn key(i: u64) -> String {
    let mut k = format!("kv/{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let extra = (i % 25) as usize;
    k.extend(std::iter::repeat_n('x', extra));
    k.truncate(40);
    k
}

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .or_else(|| std::env::var("CRESCENT_BENCH_OBJECTS").ok()?.parse().ok())
        .unwrap_or(1_000_000);
    let now = 1_700_000_000_000i64;
    let d = ObjectDirectory::new(StoreConfig::default(), now).expect("directory");
    d.mount_segment(
        MountSpec {
            segment_id: "bench".into(),
            owner_id: "bench".into(),
            endpoint: None,
            transport: TransportKind::Embedded,
            size: 1 << 50,
        },
        now,
    )
    .expect("mount");
    let mut req = PutStartRequest {
        id: ObjectId::new(""),
        size: 64,
        replicas: 1,
        placement: Default::default(),
        preferred_segment: None,
        data_type: Default::default(),
        checksum: None,
        upsert: false,
        soft_pin_secs: None,
        hard_pin: false,
    };
    let before = rss_bytes();
    let t = Instant::now();
    for i in 0..n {
        req.id.key = key(i);
        let r = d.put_start(&req, now).expect("put_start");
        let end = PutEndRequest {
            id: std::mem::replace(&mut req.id, ObjectId::new("")),
            put_id: r.put_id,
        };
        d.put_end(&end, now).expect("put_end");
        req.id = end.id;
    }
    let put_secs = t.elapsed().as_secs_f64();
    let after = rss_bytes();
    let stats = d.stats();
    assert_eq!(stats.objects, n);
    let per = (after.saturating_sub(before)) as f64 / n as f64;
    println!("objects: {n}");
    println!(
        "rss before: {} MiB, after: {} MiB, growth per object: {per:.1} bytes",
        before >> 20,
        after >> 20
    );
    println!(
        "put_start+put_end: {:.0} ops/s ({put_secs:.2} s)",
        n as f64 / put_secs
    );
    let probes = n.min(1_000_000);
    let mut id = ObjectId::new("");
    let t = Instant::now();
    for i in 0..probes {
        id.key = key(i * (n / probes));
        std::hint::black_box(d.get(&id, now + 1).expect("get"));
    }
    println!(
        "get: {:.0} ops/s",
        probes as f64 / t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    for i in 0..probes {
        id.key = key(i * (n / probes));
        assert!(d.exist(&id, now + 1).expect("exist"));
    }
    println!(
        "exist: {:.0} ops/s",
        probes as f64 / t.elapsed().as_secs_f64()
    );
}

//! Segment memory is committed lazily: mounting a large segment costs no RAM until written.

use crescent_transport::memory::SegmentMemory;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line");
    kb * 1024
}

#[test]
fn a_large_segment_costs_nothing_until_written() {
    let before = rss_bytes();
    let mem = SegmentMemory::allocate(1 << 30).expect("1 GiB mapping");
    let after = rss_bytes();
    assert!(
        after.saturating_sub(before) < 64 << 20,
        "allocating 1 GiB grew RSS by {} bytes",
        after - before
    );
    assert_eq!(mem.len(), 1 << 30);
    assert_eq!(mem.as_ptr() as usize % 4096, 0, "page aligned");
}

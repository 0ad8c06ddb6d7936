//! Helpers shared by the transport tests (TCP and the dlopened engine).
#![allow(dead_code)]

pub mod mini_engine;

use std::sync::Arc;

use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{
    BatchCompletion, LocalHandle, RemoteSegment, SegmentMemory, TransferDescriptor, TransferOp,
    Transport, TransportMetrics,
};
use rand::{Rng, SeedableRng};

pub const MIB: usize = 1 << 20;

pub fn config(listen: bool) -> TcpConfig {
    TcpConfig {
        listen: listen.then(|| "127.0.0.1:0".to_owned()),
        // Exercise the wire even though client and owner share this test process.
        same_process_fast_path: false,
        batch_timeout_ms: 10_000,
        ..TcpConfig::default()
    }
}

pub async fn owner(segment: &str, size: usize) -> (TcpTransport, RemoteSegment) {
    let t = TcpTransport::start(config(true), TransportMetrics::unregistered())
        .await
        .unwrap();
    t.serve_segment(segment, Arc::new(SegmentMemory::allocate(size).unwrap()))
        .unwrap();
    let remote = RemoteSegment::new(t.local_endpoint().unwrap(), segment);
    (t, remote)
}

pub async fn client() -> TcpTransport {
    TcpTransport::start(config(false), TransportMetrics::unregistered())
        .await
        .unwrap()
}

pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

pub fn buffer(t: &dyn Transport, bytes: Vec<u8>) -> (LocalHandle, Arc<SegmentMemory>) {
    let m = Arc::new(SegmentMemory::from_boxed_slice(bytes.into_boxed_slice()).unwrap());
    (t.register(m.clone()).unwrap(), m)
}

pub fn desc(
    op: TransferOp,
    remote: &RemoteSegment,
    ro: u64,
    local: LocalHandle,
    lo: u64,
    len: u64,
) -> TransferDescriptor {
    TransferDescriptor {
        op,
        remote: remote.clone(),
        remote_offset: ro,
        local,
        local_offset: lo,
        length: len,
        grant: None,
    }
}

pub async fn contents(m: &SegmentMemory, offset: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    m.read_at(offset, &mut v).await.unwrap();
    v
}

/// Writes `data` to `remote` at `offset` from one registered buffer, reads it back into another
/// and returns what came back; both buffers are unregistered again.
pub async fn write_and_read_back(
    t: &dyn Transport,
    remote: &RemoteSegment,
    offset: u64,
    data: &[u8],
) -> Vec<u8> {
    let len = data.len() as u64;
    let (src, _) = buffer(t, data.to_vec());
    let (dst, dst_mem) = buffer(t, vec![0u8; data.len()]);
    let w = t
        .submit(&[desc(TransferOp::Write, remote, offset, src, 0, len)])
        .await
        .unwrap();
    assert!(w.all_ok(), "write of {len} bytes: {:?}", w.statuses);
    let r = t
        .submit(&[desc(TransferOp::Read, remote, offset, dst, 0, len)])
        .await
        .unwrap();
    assert!(r.all_ok(), "read of {len} bytes: {:?}", r.statuses);
    t.unregister(src).unwrap();
    t.unregister(dst).unwrap();
    contents(&dst_mem, 0, data.len()).await
}

/// Each descriptor's outcome in `done`: `None` for success, else its error's stable code.
pub fn status_codes(done: &BatchCompletion) -> Vec<Option<&'static str>> {
    done.statuses
        .iter()
        .map(|s| s.as_ref().err().map(|e| e.code().as_str()))
        .collect()
}

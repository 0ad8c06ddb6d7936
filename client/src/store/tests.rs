//! The put/get transfer paths against a real transfer listener.
use std::sync::Arc;

use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{RemoteSegment, SegmentMemory, TransportMetrics};
use crescent_wire::segments::TransportKind;
use crescent_wire::store::ReplicaState;
use prometheus::IntGauge;

use super::*;
use crate::ownership::OwnershipTable;

fn replica(seg: &str, endpoint: &str, offset: u64, length: u64) -> ReplicaDesc {
    ReplicaDesc {
        segment_id: seg.into(),
        owner_id: "o".into(),
        endpoint: Some(endpoint.into()),
        transport: TransportKind::Tcp,
        offset,
        length,
        state: ReplicaState::Complete,
        grant: None,
    }
}

/// An owner's NOTIFY answer as crescent-owner gives it without `[auth]`: the notice's entries
/// go into `table`.
fn recording_notices(table: Arc<OwnershipTable>) -> crescent_transport::tcp::NotifyHandler {
    use crescent_wire::rebuild::{OwnerNotice, OwnerNoticeReply, REBUILD_WIRE_VERSION};
    Arc::new(move |payload: &[u8]| {
        let notice: OwnerNotice = rmp_serde::from_slice(payload).map_err(|e| e.to_string())?;
        let reply = OwnerNoticeReply {
            version: REBUILD_WIRE_VERSION,
            outcomes: table.accept_notice(&notice.entries),
        };
        rmp_serde::to_vec_named(&reply).map_err(|e| e.to_string())
    })
}

/// A transport with a transfer listener on loopback, and its endpoint.
async fn listener() -> (TcpTransport, String) {
    let config = TcpConfig {
        listen: Some("127.0.0.1:0".into()),
        ..TcpConfig::default()
    };
    let served = TcpTransport::start(config, TransportMetrics::unregistered())
        .await
        .unwrap();
    let endpoint = served.local_endpoint().unwrap();
    (served, endpoint)
}

/// The put and get transfer paths against a real transfer listener (no control plane):
/// write descriptors to two replicas, read each back, record ownership of the local one.
#[tokio::test]
async fn replica_writes_and_reads_move_the_exact_bytes() {
    let (served, endpoint) = listener().await;
    served
        .serve_segment("s1", Arc::new(SegmentMemory::allocate(1 << 20).unwrap()))
        .unwrap();
    served
        .serve_segment("s2", Arc::new(SegmentMemory::allocate(1 << 20).unwrap()))
        .unwrap();
    let client = TcpTransport::start(TcpConfig::default(), TransportMetrics::unregistered())
        .await
        .unwrap();
    let register = |data: Vec<u8>| {
        let memory = Arc::new(SegmentMemory::from_boxed_slice(data.into()).unwrap());
        let handle = client.register(memory.clone()).unwrap();
        RegisteredBuffer { handle, memory }
    };
    let value: Vec<u8> = (0..70_000u32).map(|i| (i * 31 % 253) as u8).collect();
    let mut src_bytes = vec![0u8; 100_000];
    src_bytes[10..70_010].copy_from_slice(&value);
    let src = register(src_bytes);
    let replicas = vec![
        replica("s1", &endpoint, 4096, 70_000),
        replica("s2", &endpoint, 0, 70_000),
    ];
    let local = LocalSegment {
        remote: RemoteSegment::new(endpoint.as_str(), "s2"),
        table: Arc::new(OwnershipTable::new(IntGauge::new("g", "g").unwrap())),
        memory: None,
    };
    let mut descs = Vec::new();
    write_descriptors(&replicas, Some(&local), &src, 10, 70_000, &mut descs).unwrap();
    assert_eq!(descs.len(), 2);
    assert!(client.submit(&descs).await.unwrap().all_ok());

    for r in &replicas {
        let dst = register(vec![0u8; 80_000]);
        read_replica(&client, r, Some(&local), &dst, 5, 70_000)
            .await
            .unwrap();
        let mut back = vec![0u8; 70_000];
        dst.read(5, &mut back).await.unwrap();
        assert_eq!(back, value, "replica {}", r.segment_id);
        assert_eq!(
            dst.crc32c(5, 70_000).await.unwrap(),
            crescent_checksum::crc32c(&value)
        );
    }

    // Before put_end the owner of s1 records its replica (its listener answers NOTIFY with
    // its own ownership table); our own replica (s2) is left for after put_end.
    let owner_table = Arc::new(OwnershipTable::new(IntGauge::new("o", "o").unwrap()));
    owner_table.serve_segment("s1", 1 << 20);
    served.set_notify_handler(Some(recording_notices(owner_table.clone())));
    local.table.serve_segment("s2", 1 << 20);
    let data = crate::dataplane::DataPlane::new(crate::ClientMetrics::unregistered(), None);
    data.attach(local.clone());
    let id = ObjectId::new("k");
    let committed = crate::dataplane::Committed {
        id: &id,
        put_id: 3,
        checksum: Some(9),
        data_type: Default::default(),
    };
    let unrecorded = data
        .record_at_owners([(committed, replicas.as_slice())])
        .await;
    assert!(unrecorded.is_empty(), "{unrecorded:?}");
    let noticed = owner_table
        .lookup(&id, "s1")
        .expect("the owner of s1 recorded it before the call returned");
    assert_eq!(
        (noticed.offset, noticed.put_id, noticed.length),
        (4096, 3, 70_000)
    );
    assert_eq!(data.metrics.rebuild().count("notices", "recorded"), 1);
    assert!(local.table.is_empty(), "our own replica waits for put_end");
    // After put_end: our own replica enters our table; nothing more is sent.
    data.committed(committed, &replicas);
    let owned = local.table.snapshot();
    assert_eq!(owned.len(), 1, "only the replica in our own segment");
    assert_eq!((owned[0].offset, owned[0].put_id), (0, 3));
    assert_eq!(owned[0].checksum, Some(9));
    assert_eq!(data.metrics.rebuild().count("notices", "recorded"), 1);

    // An owner that is gone fails the put with DURABILITY_FAILED, naming it.
    let gone = [replica("s9", "127.0.0.1:1", 0, 70_000)];
    let unrecorded = data.record_at_owners([(committed, gone.as_slice())]).await;
    assert_eq!(unrecorded[&0].code_str(), "DURABILITY_FAILED");
    assert!(unrecorded[&0].to_string().contains("127.0.0.1:1"));

    // A replica sized differently from the value is a protocol error, not a short write.
    let mut none = Vec::new();
    let bad = [replica("s1", &endpoint, 0, 5)];
    let e = write_descriptors(&bad, None, &src, 0, 6, &mut none).unwrap_err();
    assert_eq!(e.code_str(), "INTERNAL");
    // Reading past the served segment fails with its transport code.
    let dst = register(vec![0u8; 10]);
    let oob = replica("s1", &endpoint, (1 << 20) - 4, 10);
    let e = read_replica(&client, &oob, None, &dst, 0, 10)
        .await
        .unwrap_err();
    assert_eq!(e.code_str(), "INVALID_ARGUMENT", "{e}");
    let missing = replica("nope", &endpoint, 0, 10);
    let e = read_replica(&client, &missing, None, &dst, 0, 10)
        .await
        .unwrap_err();
    assert_eq!(e.code_str(), "NOT_FOUND", "{e}");
}

#[test]
fn checksums_verify_only_when_stored() {
    assert!(verify("k", None, 5).is_ok());
    assert!(verify("k", Some(5), 5).is_ok());
    let e = verify("k", Some(5), 6).unwrap_err();
    assert_eq!(e.code_str(), "CHECKSUM_MISMATCH");
}

/// A get of a large value reads it straight into the `Vec` it returns (no staging buffer is
/// taken) and still checks its CRC32C there; a small one goes through the staging pool.
#[tokio::test]
async fn a_large_get_lands_in_its_value_checked_and_a_small_one_is_staged() {
    let (served, endpoint) = listener().await;
    let memory = Arc::new(SegmentMemory::allocate(1 << 20).unwrap());
    let large: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
    memory.write_at(4096, &large).await.unwrap();
    served.serve_segment("s1", memory).unwrap();
    let client = CrescentClient::new("127.0.0.1:1").unwrap();
    let reply = |length: u64, checksum: u32| GetReply {
        size: length,
        put_id: 1,
        data_type: Default::default(),
        checksum: Some(checksum),
        replicas: vec![replica("s1", &endpoint, 4096, length)],
        lease_until_ms: 0,
        inline: None,
        cold_backing: None,
        staged: None,
    };
    let good = reply(large.len() as u64, crescent_checksum::crc32c(&large));
    assert_eq!(client.read_object("k", &good).await.unwrap(), large);
    assert_eq!(client.data.staging.idle(), 0, "no staging buffer taken");
    let damaged = reply(large.len() as u64, crescent_checksum::crc32c(&large) ^ 1);
    let e = client.read_object("k", &damaged).await.unwrap_err();
    assert_eq!(e.code_str(), "CHECKSUM_MISMATCH", "{e}");
    let small = &large[..4096];
    let got = client
        .read_object("k", &reply(4096, crescent_checksum::crc32c(small)))
        .await
        .unwrap();
    assert_eq!(got, small);
    assert_eq!(client.data.staging.idle(), 1, "staged, then pooled");
}

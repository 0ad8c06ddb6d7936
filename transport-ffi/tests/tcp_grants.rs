//! A listener that holds a grant key serves a READ or WRITE only with a valid grant for that
//! operation and range (docs/security.md, "The data plane"); a segment id alone opens nothing.

mod common;

use common::*;
use crescent_transport::grant::{GrantKey, SUBJECT_LEN};
use crescent_transport::tcp::protocol::{self, Op, RequestHeader, ResponseHeader, Status};
use crescent_transport::{Grant, TransferOp, Transport, TransportError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECRET: &[u8] = b"a data-plane test secret of 32 b";
const FAR_FUTURE: u64 = u64::MAX / 2;

fn owner_key() -> GrantKey {
    GrantKey::derive(SECRET, "owner-a")
}

fn grant(op: TransferOp, offset: u64, length: u64, expires: u64) -> Grant {
    owner_key().mint("seg", op, offset, length, expires, [0; SUBJECT_LEN])
}

async fn submit_one(
    client: &dyn Transport,
    op: TransferOp,
    remote: &crescent_transport::RemoteSegment,
    offset: u64,
    len: u64,
    grant: Option<Grant>,
) -> Result<Vec<u8>, TransportError> {
    let (handle, memory) = buffer(client, vec![9u8; len as usize]);
    let mut d = desc(op, remote, offset, handle, 0, len);
    d.grant = grant;
    let done = client.submit(&[d]).await.unwrap().into_result();
    let bytes = contents(&memory, 0, len as usize).await;
    client.unregister(handle).unwrap();
    done.map(|()| bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_need_a_grant_for_their_operation_and_range() {
    let (owner, remote) = owner("seg", MIB).await;
    assert!(!owner.requires_grants());
    assert!(owner.install_grant_key(owner_key()));
    assert!(owner.requires_grants());
    let client = client().await;
    let denied = |r: Result<Vec<u8>, TransportError>| match r {
        Err(TransportError::PermissionDenied { .. }) => {}
        other => panic!("expected PERMISSION_DENIED, got {other:?}"),
    };

    // No grant, a grant for reading used to write, an expired one, one for another range.
    denied(submit_one(&client, TransferOp::Write, &remote, 0, 64, None).await);
    let read = grant(TransferOp::Read, 0, 64, FAR_FUTURE);
    denied(submit_one(&client, TransferOp::Write, &remote, 0, 64, Some(read)).await);
    let stale = grant(TransferOp::Write, 0, 64, 1);
    denied(submit_one(&client, TransferOp::Write, &remote, 0, 64, Some(stale)).await);
    let elsewhere = grant(TransferOp::Write, 4096, 64, FAR_FUTURE);
    denied(submit_one(&client, TransferOp::Write, &remote, 0, 64, Some(elsewhere)).await);
    // Another owner's key: refused as well.
    let foreign = GrantKey::derive(SECRET, "owner-b").mint(
        "seg",
        TransferOp::Read,
        0,
        64,
        FAR_FUTURE,
        [0; 16],
    );
    denied(submit_one(&client, TransferOp::Read, &remote, 0, 64, Some(foreign)).await);
    // Nothing was written by the refused writes.
    let seg = owner_segment_bytes(&client, &remote).await;
    assert!(
        seg.iter().all(|b| *b == 0),
        "a refused write reached the segment"
    );

    // The right grants work, for the whole range and for a part of it.
    let write = grant(TransferOp::Write, 0, 64, FAR_FUTURE);
    submit_one(&client, TransferOp::Write, &remote, 0, 64, Some(write))
        .await
        .unwrap();
    let read = grant(TransferOp::Read, 0, 64, FAR_FUTURE);
    let whole = submit_one(&client, TransferOp::Read, &remote, 0, 64, Some(read))
        .await
        .unwrap();
    assert_eq!(whole, vec![9u8; 64]);
    submit_one(&client, TransferOp::Read, &remote, 16, 8, Some(read))
        .await
        .unwrap();
    denied(submit_one(&client, TransferOp::Read, &remote, 60, 8, Some(read)).await);
}

/// Reads the whole test segment with a valid grant.
async fn owner_segment_bytes(
    client: &dyn Transport,
    remote: &crescent_transport::RemoteSegment,
) -> Vec<u8> {
    let read = grant(TransferOp::Read, 0, 4096, FAR_FUTURE);
    submit_one(client, TransferOp::Read, remote, 0, 4096, Some(read))
        .await
        .unwrap()
}

/// A raw version-1 peer (no grant field at all) is answered PERMISSION_DENIED and keeps its
/// connection; a forged grant likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_peer_cannot_read_a_segment_by_name() {
    let (owner, remote) = owner("seg", MIB).await;
    owner.install_grant_key(owner_key());
    let mut s = TcpStream::connect(remote.endpoint.as_ref()).await.unwrap();
    let mut hello = protocol::encode_hello();
    hello[4] = 1; // version 1
    s.write_all(&hello).await.unwrap();
    let mut ack = [0u8; protocol::HELLO_ACK_LEN];
    s.read_exact(&mut ack).await.unwrap();
    assert_eq!(
        u16::from_le_bytes([ack[4], ack[5]]),
        1,
        "acked in the peer's version"
    );
    assert_eq!(
        u16::from_le_bytes([ack[6], ack[7]]),
        protocol::HELLO_ACCEPTED
    );

    let open = RequestHeader {
        op: Op::Open,
        grant: false,
        handle: 0,
        request_id: 1,
        offset: 0,
        length: 3,
    };
    s.write_all(&open.encode()).await.unwrap();
    s.write_all(b"seg").await.unwrap();
    let r = response(&mut s).await;
    assert_eq!(r.status, Status::Ok as u16);
    let mut size = [0u8; 8];
    s.read_exact(&mut size).await.unwrap();

    let mut read = RequestHeader {
        op: Op::Read,
        grant: false,
        handle: r.handle,
        request_id: 2,
        offset: 0,
        length: 16,
    };
    s.write_all(&read.encode()).await.unwrap();
    let r2 = response(&mut s).await;
    assert_eq!(r2.status, Status::Denied as u16);
    assert_eq!(r2.payload_len, 0);

    let mut forged = grant(TransferOp::Read, 0, 16, FAR_FUTURE);
    forged.tag[0] ^= 1;
    read.grant = true;
    read.request_id = 3;
    s.write_all(&read.encode()).await.unwrap();
    s.write_all(&forged.encode()).await.unwrap();
    let r3 = response(&mut s).await;
    assert_eq!(r3.request_id, 3);
    assert_eq!(r3.status, Status::Denied as u16);
}

async fn response(s: &mut TcpStream) -> ResponseHeader {
    let mut raw = [0u8; protocol::RESPONSE_HEADER_LEN];
    s.read_exact(&mut raw).await.unwrap();
    ResponseHeader::decode(&raw)
}

/// Without a key the listener serves transfers without grants, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_without_keys_serves_any_transfer() {
    let (_owner, remote) = owner("seg", MIB).await;
    let client = client().await;
    submit_one(&client, TransferOp::Write, &remote, 0, 64, None)
        .await
        .unwrap();
    // A grant the listener cannot check is ignored, not refused.
    let g = grant(TransferOp::Read, 0, 64, 1);
    let back = submit_one(&client, TransferOp::Read, &remote, 0, 64, Some(g))
        .await
        .unwrap();
    assert_eq!(back, vec![9u8; 64]);
}

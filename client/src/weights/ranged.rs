//! Ranged reads of one payload object: only the byte ranges a tensor-parallel rank needs
//! cross the data plane (one transfer descriptor per range, straight from the replica's
//! segment at `replica.offset + range.offset`). The store's object get reads whole objects;
//! this is the same get (route, read lease, replica order, release) with partial transfers.

use crescent_transport::{TransferDescriptor, TransferOp};
use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{GetReply, ObjectId, ObjectRequest};
use crescent_wire::ErrorCode;

use super::layout::ByteRange;
use crate::client::CrescentClient;
use crate::dataplane::{grant_of, read_order, remote_for};
use crate::error::ClientError;
use crate::lease::release_of;
use crate::store::verify;

/// Descriptors per transport submission (the TCP transport accepts up to 4096 per batch).
const DESCRIPTORS_PER_SUBMIT: usize = 1024;

/// What a ranged read moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangedRead {
    /// Bytes that crossed the data plane (a cold-only object arrives whole, inline).
    pub bytes_transferred: u64,
    /// Whether the object's CRC32C was checked (only when the ranges cover it whole).
    pub checksum_verified: bool,
}

/// Reads `ranges` (ascending, disjoint, inside the object) of object `id`, which the manifest
/// says is `size` bytes, concatenated in order.
pub(crate) async fn read_ranges(
    client: &CrescentClient,
    id: ObjectId,
    size: u64,
    ranges: &[ByteRange],
) -> Result<(Vec<u8>, RangedRead), ClientError> {
    let reply: GetReply = client
        .call(RpcOp::Get, &ObjectRequest { id: id.clone() })
        .await?;
    let read = read_leased(client, &id.key, size, &reply, ranges).await;
    client.release_lease(release_of(&id, &reply)).await;
    read
}

fn check_ranges(key: &str, size: u64, ranges: &[ByteRange]) -> Result<u64, ClientError> {
    let mut at = 0u64;
    let mut total = 0u64;
    for r in ranges {
        let end = r.offset.checked_add(r.len).filter(|end| *end <= size);
        match end {
            Some(end) if r.offset >= at => {
                at = end;
                total += r.len;
            }
            _ => {
                return Err(ClientError::InvalidArgument(format!(
                    "range [{}, +{}) of object {key:?} ({size} bytes) is out of order or \
                     outside it",
                    r.offset, r.len
                )))
            }
        }
    }
    Ok(total)
}

/// The ranges of a cold-only object, which the server verified and sent whole: its length and
/// checksum are checked here too.
fn read_inline(
    key: &str,
    size: u64,
    reply: &GetReply,
    value: &[u8],
    ranges: &[ByteRange],
    total: u64,
) -> Result<(Vec<u8>, RangedRead), ClientError> {
    if value.len() as u64 != size {
        return Err(ClientError::Protocol(format!(
            "object {key:?} arrived with {} bytes, expected {size}",
            value.len()
        )));
    }
    if reply.checksum.is_some() {
        verify(key, reply.checksum, crescent_checksum::crc32c(value))?;
    }
    let mut out = Vec::with_capacity(total as usize);
    for r in ranges {
        out.extend_from_slice(&value[r.offset as usize..(r.offset + r.len) as usize]);
    }
    let read = RangedRead {
        bytes_transferred: size,
        checksum_verified: reply.checksum.is_some(),
    };
    Ok((out, read))
}

async fn read_leased(
    client: &CrescentClient,
    key: &str,
    size: u64,
    reply: &GetReply,
    ranges: &[ByteRange],
) -> Result<(Vec<u8>, RangedRead), ClientError> {
    if reply.size != size {
        return Err(ClientError::Protocol(format!(
            "object {key:?} is {} bytes, the manifest says {size}",
            reply.size
        )));
    }
    let total = check_ranges(key, size, ranges)?;
    let whole = ranges.len() == 1 && ranges[0].offset == 0 && ranges[0].len == size;
    if let Some(value) = &reply.inline {
        return read_inline(key, size, reply, value, ranges, total);
    }
    if total == 0 {
        return Ok((Vec::new(), RangedRead::default()));
    }
    let transport = client.data.transport().await?;
    let staging = client.data.staging.take(transport, total as usize)?;
    let buffer = staging.buffer();
    let local = client.data.local();
    let mut last = ClientError::item(
        ErrorCode::NotReady,
        format!("key {key:?} has no complete replica to read"),
    );
    'replicas: for replica in read_order(&reply.replicas, local.as_ref()) {
        if replica.length != size {
            last = ClientError::Protocol(format!(
                "replica on segment {} is {} bytes for a {size}-byte object",
                replica.segment_id, replica.length
            ));
            continue;
        }
        let remote = match remote_for(replica, local.as_ref()) {
            Ok(remote) => remote,
            Err(e) => {
                last = e;
                continue;
            }
        };
        let grant = grant_of(replica);
        let mut local_offset = 0u64;
        let mut descriptors = Vec::with_capacity(ranges.len().min(DESCRIPTORS_PER_SUBMIT));
        for chunk in ranges.chunks(DESCRIPTORS_PER_SUBMIT) {
            descriptors.clear();
            for r in chunk {
                descriptors.push(TransferDescriptor {
                    op: TransferOp::Read,
                    remote: remote.clone(),
                    remote_offset: replica.offset + r.offset,
                    local: buffer.handle,
                    local_offset,
                    length: r.len,
                    grant,
                });
                local_offset += r.len;
            }
            let done = match transport.submit(&descriptors).await {
                Ok(done) => done.into_result(),
                Err(e) => Err(e),
            };
            if let Err(e) = done {
                last = ClientError::transfer(format!("reading segment {}", replica.segment_id), e);
                continue 'replicas;
            }
        }
        let mut value = vec![0u8; total as usize];
        buffer.read(0, &mut value).await?;
        // The stored CRC32C covers the whole object: a partial read is checked for length
        // only (the transport's framing), a whole one against the checksum.
        let checksum_verified = whole && reply.checksum.is_some();
        if checksum_verified {
            if let Err(e) = verify(key, reply.checksum, crescent_checksum::crc32c(&value)) {
                last = e;
                continue;
            }
        }
        let read = RangedRead {
            bytes_transferred: total,
            checksum_verified,
        };
        return Ok((value, read));
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(offset: u64, len: u64) -> ByteRange {
        ByteRange { offset, len }
    }

    #[test]
    fn ranges_must_be_ascending_and_inside_the_object() {
        assert_eq!(
            check_ranges("k", 100, &[r(0, 10), r(10, 5), r(50, 50)]).unwrap(),
            65
        );
        assert_eq!(check_ranges("k", 100, &[]).unwrap(), 0);
        for bad in [
            vec![r(0, 101)],
            vec![r(90, 11)],
            vec![r(10, 5), r(0, 5)],
            vec![r(0, 10), r(5, 10)],
            vec![r(u64::MAX, 2)],
        ] {
            let e = check_ranges("k", 100, &bad).unwrap_err();
            assert_eq!(e.code_str(), "INVALID_ARGUMENT", "{bad:?}");
        }
    }
}

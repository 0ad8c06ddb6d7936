//! One client connection to a transfer listener, and the pipelined exchange of a batch on it.
//!
//! The exchange runs a writer and a reader concurrently on the two halves of the socket: the
//! writer streams every request (WRITE payloads straight from the local buffer), the reader
//! matches responses by request id and reads READ payloads straight into the destination
//! buffer. Running both at once is what keeps a long pipeline from deadlocking on full socket
//! buffers. Headers live on the stack and the 64 KiB socket buffers are reused for the
//! connection's life, so the per-request path does not allocate.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use super::protocol::{
    decode_hello_ack_for, encode_hello_version, Op, RequestHeader, ResponseHeader, Status,
    HELLO_ACK_LEN, MAX_NOTIFY_LEN, MIN_VERSION, RESPONSE_HEADER_LEN, VERSION,
};
use crate::error::{Result, TransportError};
use crate::grant::Grant;
use crate::memory::SegmentMemory;
use crate::transport::TransferOp;

const IO_BUFFER: usize = 64 * 1024;

/// An open, handshaken connection.
pub(crate) struct Connection {
    reader: BufReader<OwnedReadHalf>,
    writer: BufWriter<OwnedWriteHalf>,
    /// The listener's epoch: segment handles are only valid within it.
    pub(crate) epoch: u64,
    /// The protocol version agreed: grants are sent only from version 2 on.
    version: u16,
    next_request_id: u64,
}

/// One data transfer of an exchange, already resolved to a wire handle and local memory.
pub(crate) struct WireTransfer<'a> {
    pub op: TransferOp,
    pub handle: u32,
    pub remote_offset: u64,
    pub length: u64,
    pub local: &'a SegmentMemory,
    pub local_offset: u64,
    pub segment_id: &'a str,
    /// The segment's size as OPEN reported it (for error messages).
    pub segment_size: u64,
    pub grant: Option<&'a Grant>,
}

/// Result of opening one segment id.
pub(crate) enum Opened {
    Segment { handle: u32, size: u64 },
    NotFound,
    Invalid,
}

impl Connection {
    /// Connects and handshakes within `timeout`, in this build's version, or in version 1 when
    /// the listener is older (it then gets no grants, which it would not check anyway).
    pub(crate) async fn connect(endpoint: &str, timeout: Duration) -> Result<Self> {
        let attempt = async {
            match Self::handshake(endpoint, VERSION).await {
                Err(TransportError::UnsupportedVersion { theirs, .. }) if theirs == MIN_VERSION => {
                    Self::handshake(endpoint, MIN_VERSION).await
                }
                other => other,
            }
        };
        let span = tracing::info_span!("transport.connect", endpoint);
        tokio::time::timeout(timeout, tracing::Instrument::instrument(attempt, span))
            .await
            .map_err(|_| TransportError::Timeout {
                what: format!("connect to {endpoint}"),
                after: timeout,
            })?
    }

    async fn handshake(endpoint: &str, version: u16) -> Result<Self> {
        let stream = TcpStream::connect(endpoint)
            .await
            .map_err(|e| TransportError::unavailable(endpoint, format!("connect: {e}")))?;
        stream
            .set_nodelay(true)
            .map_err(|e| TransportError::unavailable(endpoint, format!("nodelay: {e}")))?;
        let (read_half, write_half) = stream.into_split();
        let mut conn = Connection {
            reader: BufReader::with_capacity(IO_BUFFER, read_half),
            writer: BufWriter::with_capacity(IO_BUFFER, write_half),
            epoch: 0,
            version,
            next_request_id: 1,
        };
        let broken =
            |e: std::io::Error| TransportError::unavailable(endpoint, format!("handshake: {e}"));
        conn.writer
            .write_all(&encode_hello_version(version))
            .await
            .map_err(broken)?;
        conn.writer.flush().await.map_err(broken)?;
        let mut ack = [0u8; HELLO_ACK_LEN];
        conn.reader.read_exact(&mut ack).await.map_err(broken)?;
        conn.epoch = decode_hello_ack_for(endpoint, version, &ack)?;
        Ok(conn)
    }

    fn take_ids(&mut self, n: usize) -> u64 {
        let base = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(n as u64);
        base
    }

    /// Opens segment ids (pipelined); one answer per id, in order.
    pub(crate) async fn open(&mut self, endpoint: &str, ids: &[&str]) -> Result<Vec<Opened>> {
        let base = self.take_ids(ids.len());
        let broken = |e: std::io::Error| TransportError::unavailable(endpoint, e.to_string());
        for (i, id) in ids.iter().enumerate() {
            let header = RequestHeader {
                op: Op::Open,
                grant: false,
                handle: 0,
                request_id: base + i as u64,
                offset: 0,
                length: id.len() as u64,
            };
            self.writer
                .write_all(&header.encode())
                .await
                .map_err(broken)?;
            self.writer.write_all(id.as_bytes()).await.map_err(broken)?;
        }
        self.writer.flush().await.map_err(broken)?;
        let mut answers = Vec::with_capacity(ids.len());
        for i in 0..ids.len() {
            let mut raw = [0u8; RESPONSE_HEADER_LEN];
            self.reader.read_exact(&mut raw).await.map_err(broken)?;
            let r = ResponseHeader::decode(&raw);
            if r.request_id != base + i as u64 {
                return Err(protocol(endpoint, "OPEN answer out of order"));
            }
            answers.push(match Status::from_u16(r.status) {
                Some(Status::Ok) if r.payload_len == 8 => {
                    let mut size = [0u8; 8];
                    self.reader.read_exact(&mut size).await.map_err(broken)?;
                    Opened::Segment {
                        handle: r.handle,
                        size: u64::from_le_bytes(size),
                    }
                }
                Some(Status::NotFound) if r.payload_len == 0 => Opened::NotFound,
                Some(Status::Invalid) if r.payload_len == 0 => Opened::Invalid,
                _ => return Err(protocol(endpoint, "malformed OPEN answer")),
            });
        }
        Ok(answers)
    }

    /// Sends one NOTIFY and waits for its answer: `Ok(answer)` or the refusal status. The
    /// error is connection-level: the connection must then be dropped.
    pub(crate) async fn notify(
        &mut self,
        endpoint: &str,
        payload: &[u8],
    ) -> Result<std::result::Result<Vec<u8>, Status>> {
        let id = self.take_ids(1);
        let broken = |e: std::io::Error| TransportError::unavailable(endpoint, e.to_string());
        let header = RequestHeader {
            op: Op::Notify,
            grant: false,
            handle: 0,
            request_id: id,
            offset: 0,
            length: payload.len() as u64,
        };
        self.writer
            .write_all(&header.encode())
            .await
            .map_err(broken)?;
        self.writer.write_all(payload).await.map_err(broken)?;
        self.writer.flush().await.map_err(broken)?;
        let mut raw = [0u8; RESPONSE_HEADER_LEN];
        self.reader.read_exact(&mut raw).await.map_err(broken)?;
        let r = ResponseHeader::decode(&raw);
        if r.request_id != id || r.payload_len > MAX_NOTIFY_LEN {
            return Err(protocol(endpoint, "malformed NOTIFY answer"));
        }
        let status =
            Status::from_u16(r.status).ok_or_else(|| protocol(endpoint, "unknown status code"))?;
        let mut answer = vec![0u8; r.payload_len as usize];
        self.reader.read_exact(&mut answer).await.map_err(broken)?;
        Ok(match status {
            Status::Ok => Ok(answer),
            other => Err(other),
        })
    }

    /// Runs `transfers` pipelined. Fills `statuses[i]` as answers arrive, so that on an error
    /// or a timeout (the future is dropped) the caller still knows which transfers finished.
    /// The returned error is connection-level: the connection must then be dropped.
    pub(crate) async fn exchange(
        &mut self,
        endpoint: &str,
        transfers: &[WireTransfer<'_>],
        statuses: &mut [Option<Result<()>>],
    ) -> Result<()> {
        let base = self.take_ids(transfers.len());
        let send_grants = self.version >= 2;
        let Connection { reader, writer, .. } = self;
        let send = async {
            let broken = |e: std::io::Error| TransportError::unavailable(endpoint, e.to_string());
            for (i, t) in transfers.iter().enumerate() {
                let header = RequestHeader {
                    op: match t.op {
                        TransferOp::Read => Op::Read,
                        TransferOp::Write => Op::Write,
                    },
                    grant: send_grants && t.grant.is_some(),
                    handle: t.handle,
                    request_id: base + i as u64,
                    offset: t.remote_offset,
                    length: t.length,
                };
                writer.write_all(&header.encode()).await.map_err(broken)?;
                if let Some(grant) = t.grant.filter(|_| send_grants) {
                    writer.write_all(&grant.encode()).await.map_err(broken)?;
                }
                if t.op == TransferOp::Write {
                    let guard = t
                        .local
                        .lock_read("local buffer", t.local_offset, t.length)
                        .await?;
                    writer.write_all(guard.as_slice()).await.map_err(broken)?;
                }
            }
            writer.flush().await.map_err(broken)
        };
        let receive = async {
            let broken = |e: std::io::Error| {
                let reason = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    "connection closed by the peer mid-batch".to_owned()
                } else {
                    e.to_string()
                };
                TransportError::unavailable(endpoint, reason)
            };
            for _ in 0..transfers.len() {
                let mut raw = [0u8; RESPONSE_HEADER_LEN];
                reader.read_exact(&mut raw).await.map_err(broken)?;
                let r = ResponseHeader::decode(&raw);
                let pos = r.request_id.wrapping_sub(base) as usize;
                if pos >= transfers.len() || statuses[pos].is_some() {
                    return Err(protocol(endpoint, "answer to a request not in flight"));
                }
                let t = &transfers[pos];
                let status = Status::from_u16(r.status)
                    .ok_or_else(|| protocol(endpoint, "unknown status code"))?;
                let expected_payload = if status == Status::Ok && t.op == TransferOp::Read {
                    t.length
                } else {
                    0
                };
                if r.payload_len != expected_payload {
                    return Err(protocol(endpoint, "answer payload length does not match"));
                }
                if expected_payload > 0 {
                    let mut guard = t
                        .local
                        .lock_write("local buffer", t.local_offset, t.length)
                        .await?;
                    reader
                        .read_exact(guard.as_mut_slice())
                        .await
                        .map_err(broken)?;
                }
                statuses[pos] = Some(transfer_result(status, endpoint, t));
            }
            Ok(())
        };
        tokio::try_join!(send, receive).map(|_| ())
    }
}

/// What the answer `status` of the peer at `endpoint` means for transfer `t`.
fn transfer_result(status: Status, endpoint: &str, t: &WireTransfer<'_>) -> Result<()> {
    match status {
        Status::Ok => Ok(()),
        Status::NotFound => Err(TransportError::SegmentNotFound {
            endpoint: endpoint.to_owned(),
            segment: t.segment_id.to_owned(),
        }),
        Status::OutOfRange => Err(TransportError::OutOfRange {
            what: format!("segment {}", t.segment_id),
            offset: t.remote_offset,
            length: t.length,
            size: t.segment_size,
        }),
        Status::Denied => Err(TransportError::PermissionDenied {
            endpoint: endpoint.to_owned(),
            segment: t.segment_id.to_owned(),
        }),
        Status::Invalid => Err(TransportError::InvalidArgument(format!(
            "{endpoint} refused a transfer on segment {}",
            t.segment_id
        ))),
    }
}

fn protocol(endpoint: &str, reason: &str) -> TransportError {
    TransportError::Protocol {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    }
}

//! The transfer listener every storage owner runs: serves reads and writes into its segments.
//!
//! One task per connection reads requests in order and answers each before reading the next;
//! the client pipelines, so the socket buffers keep both directions busy. Payloads move
//! straight between the socket and segment memory (under a range lock) with no staging copy;
//! the only per-connection buffers are the 64 KiB read/write buffers and a drain buffer, reused
//! for the connection's life.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tracing::{debug, info_span, warn, Instrument};

use super::protocol::{
    decode_hello, encode_hello_ack, HelloError, Op, RequestHeader, ResponseHeader, Status,
    HELLO_ACCEPTED, HELLO_BUSY, HELLO_LEN, HELLO_VERSION_UNSUPPORTED, REQUEST_HEADER_LEN, VERSION,
};
use super::segment_table::{register_local, unregister_local, Presented, SegmentTable};
use crate::error::{Result, TransportError};
use crate::grant::{Grant, GRANT_LEN};
use crate::memory::SegmentMemory;
use crate::metrics::TransportMetrics;
use crate::transport::{TransferOp, MAX_SEGMENT_ID_LEN};

const IO_BUFFER: usize = 64 * 1024;

/// Limits of the listener.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServerLimits {
    pub max_transfer_len: u64,
    /// Longest wait for a frame's remaining bytes or for the peer to take a response.
    pub io_timeout: Duration,
    /// Most connections served at once (more are answered HELLO_BUSY and closed).
    pub max_connections: usize,
    /// Closes a connection idle this long between requests; `None` never.
    pub idle_timeout: Option<Duration>,
}

/// A running transfer listener; stops (with all its connections) when dropped.
pub(crate) struct TcpTransferServer {
    local_addr: SocketAddr,
    accept_task: tokio::task::JoinHandle<()>,
}

impl TcpTransferServer {
    pub(crate) async fn bind(
        addr: &str,
        table: Arc<SegmentTable>,
        limits: ServerLimits,
        metrics: TransportMetrics,
    ) -> Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| TransportError::io(format!("binding transfer listener {addr}"), &e))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| TransportError::io("reading listener address", &e))?;
        register_local(local_addr, &table);
        let span = info_span!("transport.listener", %local_addr);
        let accept_task = tokio::spawn(
            async move {
                // Connection tasks live in this set, so aborting the accept task ends them too.
                let mut connections = JoinSet::new();
                let mut backoff = ACCEPT_BACKOFF_MIN;
                loop {
                    tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok((stream, _)) if connections.len() >= limits.max_connections => {
                                backoff = ACCEPT_BACKOFF_MIN;
                                metrics.record_protocol_violation("over_connection_limit");
                                let ack = encode_hello_ack(VERSION, HELLO_BUSY, table.epoch);
                                let _ = stream.try_write(&ack);
                            }
                            Ok((stream, peer)) => {
                                backoff = ACCEPT_BACKOFF_MIN;
                                let table = table.clone();
                                let metrics = metrics.clone();
                                let span = info_span!("transport.serve_connection", %peer);
                                connections.spawn(
                                    serve_connection(stream, table, limits, metrics).instrument(span),
                                );
                            }
                            Err(e) => {
                                // Out of descriptors or similar: back off (doubling) instead
                                // of spinning.
                                warn!(error = %e, "accept failed");
                                tokio::time::sleep(backoff).await;
                                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                            }
                        },
                        Some(_) = connections.join_next(), if !connections.is_empty() => {}
                    }
                }
            }
            .instrument(span),
        );
        Ok(Self {
            local_addr,
            accept_task,
        })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

impl Drop for TcpTransferServer {
    fn drop(&mut self) {
        self.accept_task.abort();
        unregister_local(&self.local_addr);
    }
}

/// First and longest wait after a failed accept.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

struct ConnectionCount(TransportMetrics);

impl Drop for ConnectionCount {
    fn drop(&mut self) {
        self.0.connection_closed();
    }
}

/// How a connection ended, for the debug log.
enum End {
    PeerClosed,
    Io(std::io::Error),
    Violation(&'static str),
    Timeout,
}

async fn serve_connection(
    stream: TcpStream,
    table: Arc<SegmentTable>,
    limits: ServerLimits,
    metrics: TransportMetrics,
) {
    metrics.connection_opened();
    let _count = ConnectionCount(metrics.clone());
    let end = run_connection(stream, &table, limits, &metrics).await;
    match end {
        End::PeerClosed => debug!("peer closed the connection"),
        End::Io(e) => debug!(error = %e, "connection failed"),
        End::Timeout => debug!("peer stalled mid-frame; connection closed"),
        End::Violation(reason) => {
            metrics.record_protocol_violation(reason);
            warn!(reason, "protocol violation; connection closed");
        }
    }
}

/// Runs `io` within the listener's IO timeout.
async fn timed<T>(
    limit: Duration,
    io: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, End> {
    match tokio::time::timeout(limit, io).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(End::Io(e)),
        Err(_) => Err(End::Timeout),
    }
}

/// A connection's buffered halves.
type Reader = BufReader<tokio::net::tcp::OwnedReadHalf>;
type Writer = BufWriter<tokio::net::tcp::OwnedWriteHalf>;

/// How a step of a connection went: on, or the connection ends.
type Step<T = ()> = std::result::Result<T, End>;

async fn run_connection(
    stream: TcpStream,
    table: &SegmentTable,
    limits: ServerLimits,
    metrics: &TransportMetrics,
) -> End {
    if let Err(e) = stream.set_nodelay(true) {
        return End::Io(e);
    }
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(IO_BUFFER, read_half);
    let mut writer = BufWriter::with_capacity(IO_BUFFER, write_half);
    if let Err(end) = handshake(&mut reader, &mut writer, table, limits).await {
        return end;
    }
    let mut drain = vec![0u8; IO_BUFFER];
    loop {
        let header = match next_request(&mut reader, &mut writer, limits).await {
            Ok(h) => h,
            Err(end) => return end,
        };
        let respond = ResponseHeader {
            request_id: header.request_id,
            status: Status::Ok as u16,
            handle: 0,
            payload_len: 0,
        };
        let io = (&mut reader, &mut writer);
        let served = match header.op {
            Op::Open => serve_open(io, &header, respond, table, limits).await,
            Op::Write => {
                serve_write(io, &header, respond, (table, metrics), limits, &mut drain).await
            }
            Op::Notify => serve_notify(io, &header, respond, (table, metrics), limits).await,
            Op::Read => serve_read(io, &header, respond, (table, metrics), limits).await,
        };
        if let Err(end) = served {
            return end;
        }
    }
}

/// The hello and its answer: the version both sides speak, or a precise refusal.
async fn handshake(
    reader: &mut Reader,
    writer: &mut Writer,
    table: &SegmentTable,
    limits: ServerLimits,
) -> Step {
    let mut hello = [0u8; HELLO_LEN];
    timed(limits.io_timeout, reader.read_exact(&mut hello)).await?;
    let version = match decode_hello(&hello) {
        Ok(version) => version,
        Err(HelloError::BadMagic) => return Err(End::Violation("bad_magic")),
        Err(HelloError::Version(_)) => {
            // Tell the peer which version we speak before closing, so its error is precise.
            let ack = encode_hello_ack(VERSION, HELLO_VERSION_UNSUPPORTED, table.epoch);
            let _ = timed(limits.io_timeout, writer.write_all(&ack)).await;
            let _ = timed(limits.io_timeout, writer.flush()).await;
            return Err(End::Violation("bad_version"));
        }
    };
    let ack = encode_hello_ack(version, HELLO_ACCEPTED, table.epoch);
    timed(limits.io_timeout, writer.write_all(&ack)).await?;
    Ok(())
}

/// The next request's header, once the answers of a pipelined run are flushed (together, once
/// no request is waiting).
async fn next_request(
    reader: &mut Reader,
    writer: &mut Writer,
    limits: ServerLimits,
) -> Step<RequestHeader> {
    if reader.buffer().is_empty() {
        timed(limits.io_timeout, writer.flush()).await?;
    }
    let mut raw = [0u8; REQUEST_HEADER_LEN];
    // An idle pooled connection may wait here (up to the idle timeout, when one is set).
    let next = reader.read_exact(&mut raw);
    let read = match limits.idle_timeout {
        Some(idle) => match tokio::time::timeout(idle, next).await {
            Ok(r) => r,
            Err(_) => return Err(End::Timeout),
        },
        None => next.await,
    };
    match read {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(End::PeerClosed),
        Err(e) => return Err(End::Io(e)),
    }
    RequestHeader::decode(&raw, limits.max_transfer_len).map_err(|e| End::Violation(e.label()))
}

/// OPEN: the segment's handle and size, or why not.
async fn serve_open(
    (reader, writer): (&mut Reader, &mut Writer),
    header: &RequestHeader,
    mut respond: ResponseHeader,
    table: &SegmentTable,
    limits: ServerLimits,
) -> Step {
    let mut name = [0u8; MAX_SEGMENT_ID_LEN];
    let name = &mut name[..header.length as usize];
    timed(limits.io_timeout, reader.read_exact(name)).await?;
    let opened = std::str::from_utf8(name).ok().map(|id| table.open(id));
    let size = match opened {
        None => {
            respond.status = Status::Invalid as u16;
            None
        }
        Some(None) => {
            respond.status = Status::NotFound as u16;
            None
        }
        Some(Some((handle, size))) => {
            respond.handle = handle;
            respond.payload_len = 8;
            Some(size)
        }
    };
    timed(limits.io_timeout, writer.write_all(&respond.encode())).await?;
    if let Some(size) = size {
        let bytes = size.to_le_bytes();
        timed(limits.io_timeout, writer.write_all(&bytes)).await?;
    }
    Ok(())
}

/// WRITE: the payload into the segment when the grant admits it, else consumed and dropped
/// (the stream stays in sync); then the status.
async fn serve_write(
    (reader, writer): (&mut Reader, &mut Writer),
    header: &RequestHeader,
    mut respond: ResponseHeader,
    (table, metrics): (&SegmentTable, &TransportMetrics),
    limits: ServerLimits,
    drain: &mut [u8],
) -> Step {
    let presented = read_grant(reader, header, limits).await?;
    let segment = admit(table, header, TransferOp::Write, &presented, metrics);
    let mut guard = match &segment {
        Err(status) => Err(*status),
        Ok(s) => s
            .lock_write("segment", header.offset, header.length)
            .await
            .map_err(|_| Status::OutOfRange),
    };
    let status = match &mut guard {
        Ok(guard) => {
            let dst = guard.as_mut_slice();
            timed(limits.io_timeout, reader.read_exact(dst)).await?;
            Status::Ok
        }
        Err(status) => {
            // Keep the stream in sync: consume the payload we will not store.
            let mut left = header.length;
            while left > 0 {
                let n = left.min(drain.len() as u64) as usize;
                let chunk = &mut drain[..n];
                timed(limits.io_timeout, reader.read_exact(chunk)).await?;
                left -= n as u64;
            }
            *status
        }
    };
    drop(guard);
    metrics.record_served(TransferOp::Write, status.label(), header.length);
    respond.status = status as u16;
    let head = respond.encode();
    timed(limits.io_timeout, writer.write_all(&head)).await
}

/// NOTIFY: the payload to the segment table's notify handler, then its answer.
async fn serve_notify(
    (reader, writer): (&mut Reader, &mut Writer),
    header: &RequestHeader,
    mut respond: ResponseHeader,
    (table, metrics): (&SegmentTable, &TransportMetrics),
    limits: ServerLimits,
) -> Step {
    // Grown as bytes arrive, not to the header's claim.
    let mut payload = Vec::new();
    let mut body = reader.take(header.length);
    match timed(limits.io_timeout, body.read_to_end(&mut payload)).await {
        Ok(n) if n as u64 == header.length => {}
        Ok(_) => return Err(End::PeerClosed),
        Err(end) => return Err(end),
    }
    let answer = table.notify(&payload);
    let status = answer.as_ref().err().copied().unwrap_or(Status::Ok);
    metrics.record_notify(status.label());
    respond.status = status as u16;
    let body = answer.unwrap_or_default();
    respond.payload_len = body.len() as u64;
    let send = async {
        writer.write_all(&respond.encode()).await?;
        writer.write_all(&body).await
    };
    timed(limits.io_timeout, send).await
}

/// READ: the status, then the bytes when the grant admits it.
async fn serve_read(
    (reader, writer): (&mut Reader, &mut Writer),
    header: &RequestHeader,
    mut respond: ResponseHeader,
    (table, metrics): (&SegmentTable, &TransportMetrics),
    limits: ServerLimits,
) -> Step {
    let presented = read_grant(reader, header, limits).await?;
    let segment = admit(table, header, TransferOp::Read, &presented, metrics);
    let guard = match &segment {
        Err(status) => Err(*status),
        Ok(s) => s
            .lock_read("segment", header.offset, header.length)
            .await
            .map_err(|_| Status::OutOfRange),
    };
    let status = guard.as_ref().err().copied().unwrap_or(Status::Ok);
    metrics.record_served(TransferOp::Read, status.label(), header.length);
    respond.status = status as u16;
    if guard.is_ok() {
        respond.payload_len = header.length;
    }
    let head = respond.encode();
    let send = async {
        writer.write_all(&head).await?;
        if let Ok(guard) = &guard {
            writer.write_all(guard.as_slice()).await?;
        }
        Ok(())
    };
    timed(limits.io_timeout, send).await
}

/// Reads the grant that follows a READ or WRITE header, if its flag says one does.
async fn read_grant<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut R,
    header: &RequestHeader,
    limits: ServerLimits,
) -> Result<Presented, End> {
    if !header.grant {
        return Ok(Presented::None);
    }
    let mut raw = [0u8; GRANT_LEN];
    timed(limits.io_timeout, reader.read_exact(&mut raw)).await?;
    Ok(Grant::decode(&raw).map_or(Presented::Malformed, Presented::Grant))
}

/// [`SegmentTable::admit`] for one request, counting a refused grant.
fn admit(
    table: &SegmentTable,
    header: &RequestHeader,
    op: TransferOp,
    presented: &Presented,
    metrics: &TransportMetrics,
) -> std::result::Result<Arc<SegmentMemory>, Status> {
    table
        .admit(header.handle, op, header.offset, header.length, presented)
        .map_err(|(status, refusal)| {
            if let Some(r) = refusal {
                metrics.record_grant_refusal(op, r.label());
                debug!(reason = r.label(), "transfer refused: data-plane grant");
            }
            status
        })
}

//! A bare-bones client of the RPC fast path over one connection, for the in-process RPC tests:
//! the handshake, raw frames (`send` / `recv`, for pipelining and protocol violations) and
//! `call` (one request, its decoded answer).

use std::net::SocketAddr;

use crescent_wire::rpc::{
    check_server_hello, client_hello, decode_body, encode_request, FrameHeader, RpcOp, RpcStatus,
    HANDSHAKE_LEN, HEADER_LEN,
};
use crescent_wire::ApiError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest body the tests' server and client accept.
pub const MAX_BODY: usize = 1 << 20;

pub struct Rpc {
    pub stream: TcpStream,
    next_id: u64,
}

impl Rpc {
    pub async fn connect(addr: SocketAddr) -> Rpc {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&client_hello()).await.unwrap();
        let mut hello = [0u8; HANDSHAKE_LEN];
        stream.read_exact(&mut hello).await.unwrap();
        check_server_hello(&hello).unwrap();
        Rpc { stream, next_id: 1 }
    }

    /// Sends one request without waiting; returns its request id.
    pub async fn send<B: Serialize>(&mut self, op: RpcOp, body: &B) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut buf = Vec::new();
        encode_request(&mut buf, op, id, body).unwrap();
        self.stream.write_all(&buf).await.unwrap();
        id
    }

    /// Reads one response: (status, request id, body).
    pub async fn recv(&mut self) -> (RpcStatus, u64, Vec<u8>) {
        let mut h = [0u8; HEADER_LEN];
        self.stream.read_exact(&mut h).await.unwrap();
        let h = FrameHeader::parse(&h, MAX_BODY).unwrap();
        let mut body = vec![0u8; h.body_len];
        self.stream.read_exact(&mut body).await.unwrap();
        (RpcStatus::from_u8(h.tag).unwrap(), h.request_id, body)
    }

    /// One request and its decoded answer (the answer must carry the request's id).
    pub async fn call<B: Serialize, T: DeserializeOwned>(
        &mut self,
        op: RpcOp,
        body: &B,
    ) -> Result<T, ApiError> {
        let id = self.send(op, body).await;
        let (status, got, body) = self.recv().await;
        assert_eq!(got, id, "answers carry the request id");
        match status {
            RpcStatus::Ok => Ok(decode_body(&body).unwrap()),
            RpcStatus::Error => Err(decode_body(&body).unwrap()),
        }
    }

    /// Whether the server has closed this connection (EOF within a second).
    pub async fn closed_by_server(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(
            tokio::time::timeout(std::time::Duration::from_secs(1), self.stream.read(&mut b)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

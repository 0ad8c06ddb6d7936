//! A bare-bones client of the RPC fast path over one connection, for the in-process RPC tests:
//! the handshake (version 2, with the connection's token), raw frames (`send` / `recv`, for pipelining and protocol violations) and
//! `call` (one request, its decoded answer).

use std::net::SocketAddr;

use crescent_wire::rpc::{
    check_server_hello_for, client_hello_v2, decode_body, encode_request, FrameHeader, RpcError,
    RpcOp, RpcStatus, HANDSHAKE_ERROR_REQUEST_ID, HANDSHAKE_LEN, HANDSHAKE_UNAUTHENTICATED,
    HEADER_LEN, RPC_VERSION,
};
use crescent_wire::ApiError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::TestNode;

/// Where `node`'s RPC fast path listens (started by the test).
fn listener(node: &TestNode) -> SocketAddr {
    node.rpc_address()
        .expect("the test started the RPC listener")
}

/// The largest body the tests' server and client accept.
pub const MAX_BODY: usize = 1 << 20;

pub struct Rpc {
    pub stream: TcpStream,
    next_id: u64,
}

impl Rpc {
    /// A connection to `node`'s RPC listener as a client of `tenant` (open mode: no token).
    pub async fn client(node: &TestNode, tenant: &str) -> Rpc {
        Self::connect(listener(node), node.client_token(tenant).as_deref()).await
    }

    /// A connection to `node`'s RPC listener as the owner `owner` (open mode: no token).
    pub async fn owner(node: &TestNode, owner: &str) -> Rpc {
        Self::connect(listener(node), node.owner_token(owner).as_deref()).await
    }

    /// Connects with a version 2 handshake presenting `token` (`None`: an empty one, as a
    /// client of an open node sends).
    pub async fn connect(addr: SocketAddr, token: Option<&str>) -> Rpc {
        Self::try_connect(addr, token)
            .await
            .unwrap_or_else(|(status, e)| panic!("handshake refused ({status}): {e:?}"))
    }

    /// [`Rpc::connect`], or the refused handshake's status and the error frame that follows
    /// an UNAUTHENTICATED one.
    pub async fn try_connect(
        addr: SocketAddr,
        token: Option<&str>,
    ) -> Result<Rpc, (u16, Option<ApiError>)> {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut hello = Vec::new();
        client_hello_v2(token, &mut hello).unwrap();
        stream.write_all(&hello).await.unwrap();
        let mut answer = [0u8; HANDSHAKE_LEN];
        stream.read_exact(&mut answer).await.unwrap();
        match check_server_hello_for(&answer, RPC_VERSION) {
            Ok(()) => Ok(Rpc { stream, next_id: 1 }),
            Err(RpcError::HandshakeRefused(HANDSHAKE_UNAUTHENTICATED)) => {
                let mut rpc = Rpc { stream, next_id: 1 };
                let (status, id, body) = rpc.recv().await;
                assert_eq!((status, id), (RpcStatus::Error, HANDSHAKE_ERROR_REQUEST_ID));
                Err((HANDSHAKE_UNAUTHENTICATED, Some(decode_body(&body).unwrap())))
            }
            Err(RpcError::HandshakeRefused(status)) => Err((status, None)),
            Err(e) => panic!("not a handshake answer: {e}"),
        }
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

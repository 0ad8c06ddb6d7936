//! The transfer plane's TCP frames (CRTP, transport-ffi/src/tcp/protocol.rs): both
//! handshakes, then request headers (server side) and response headers (client side), each
//! followed by the payload its header claims.

use crescent_transport::tcp::protocol::{
    self, Op, RequestHeader, ResponseHeader, HELLO_ACK_LEN, HELLO_LEN, REQUEST_HEADER_LEN,
    RESPONSE_HEADER_LEN,
};

use crescent_transport::grant::{Grant, GRANT_LEN};

use crate::selector;

/// Payloads a server reads after a request header (the segment's size bounds a real one).
const MAX_LENGTH: u64 = 64 << 20;

pub fn transfer_frame(data: &[u8]) {
    let (sel, rest) = selector(data);
    if sel & 1 == 0 {
        server_side(rest);
    } else {
        client_side(rest);
    }
}

fn server_side(data: &[u8]) {
    let Some((hello, mut rest)) = data.split_first_chunk::<HELLO_LEN>() else {
        return;
    };
    let _ = protocol::decode_hello(hello);
    while let Some((header, after)) = rest.split_first_chunk::<REQUEST_HEADER_LEN>() {
        let Ok(h) = RequestHeader::decode(header, MAX_LENGTH) else {
            return;
        };
        let after = match (h.grant, after.split_first_chunk::<GRANT_LEN>()) {
            (false, _) => after,
            (true, Some((grant, after))) => {
                let _ = Grant::decode(grant);
                after
            }
            (true, None) => return,
        };
        let carried = match h.op {
            Op::Write | Op::Notify => h.length,
            Op::Open | Op::Read => 0,
        };
        let Some(next) = usize::try_from(carried).ok().and_then(|n| after.get(n..)) else {
            return;
        };
        rest = next;
    }
}

fn client_side(data: &[u8]) {
    let Some((ack, mut rest)) = data.split_first_chunk::<HELLO_ACK_LEN>() else {
        return;
    };
    let _ = protocol::decode_hello_ack("127.0.0.1:1", ack);
    while let Some((header, after)) = rest.split_first_chunk::<RESPONSE_HEADER_LEN>() {
        let h = ResponseHeader::decode(header);
        let _ = protocol::Status::from_u16(h.status).map(|s| s.label());
        let Some(next) = usize::try_from(h.payload_len)
            .ok()
            .and_then(|n| after.get(n..))
        else {
            return;
        };
        rest = next;
    }
}

pub fn seeds() -> Vec<Vec<u8>> {
    let mut server = vec![0u8];
    server.extend_from_slice(&protocol::encode_hello());
    for (op, length) in [
        (Op::Open, 0),
        (Op::Write, 4),
        (Op::Read, 16),
        (Op::Notify, 2),
    ] {
        let h = RequestHeader {
            op,
            grant: false,
            handle: 1,
            request_id: 9,
            offset: 64,
            length,
        };
        server.extend_from_slice(&h.encode());
        if matches!(op, Op::Write | Op::Notify) {
            server.extend(std::iter::repeat_n(7u8, length as usize));
        }
    }
    let mut client = vec![1u8];
    client.extend_from_slice(&protocol::encode_hello_ack(
        protocol::VERSION,
        protocol::HELLO_ACCEPTED,
        3,
    ));
    let h = ResponseHeader {
        request_id: 9,
        status: 0,
        handle: 1,
        payload_len: 3,
    };
    client.extend_from_slice(&h.encode());
    client.extend_from_slice(b"abc");
    vec![server, client]
}

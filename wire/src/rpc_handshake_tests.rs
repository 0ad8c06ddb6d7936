use super::*;
use crate::rpc::{decode_body, encode_response, FrameHeader, RpcStatus, HEADER_LEN};
use crate::{ApiError, ErrorCode};

#[test]
fn version_1_hello_has_the_documented_layout_and_no_token() {
    let hello = client_hello();
    assert_eq!(&hello, b"CRPC\x01\x00\x00\x00");
    assert_eq!(
        check_client_hello(&hello).unwrap(),
        ClientHello {
            version: RPC_VERSION_1,
            token_len: 0
        }
    );
    // Version 1's last field is reserved: whatever it holds, no token follows.
    let mut odd = hello;
    odd[6] = 7;
    assert_eq!(check_client_hello(&odd).unwrap().token_len, 0);
    check_server_hello(&server_hello(RPC_VERSION_1, HANDSHAKE_OK)).unwrap();
}

#[test]
fn version_2_hello_carries_the_token_after_its_length() {
    let mut out = vec![0xAA]; // appends: earlier bytes stay
    client_hello_v2(Some("abc.def.ghi"), &mut out).unwrap();
    assert_eq!(out[0], 0xAA);
    let bytes = &out[1..];
    assert_eq!(&bytes[..4], b"CRPC");
    assert_eq!(&bytes[4..6], &2u16.to_le_bytes());
    assert_eq!(&bytes[6..8], &11u16.to_le_bytes());
    assert_eq!(&bytes[HANDSHAKE_LEN..], b"abc.def.ghi");
    let hello: [u8; HANDSHAKE_LEN] = bytes[..HANDSHAKE_LEN].try_into().unwrap();
    assert_eq!(
        check_client_hello(&hello).unwrap(),
        ClientHello {
            version: RPC_VERSION,
            token_len: 11
        }
    );

    let mut none = Vec::new();
    client_hello_v2(None, &mut none).unwrap();
    assert_eq!(
        none.len(),
        HANDSHAKE_LEN,
        "no token: length 0, nothing follows"
    );
    let hello: [u8; HANDSHAKE_LEN] = none[..].try_into().unwrap();
    assert_eq!(check_client_hello(&hello).unwrap().token_len, 0);
}

#[test]
fn a_token_too_long_for_the_length_field_is_refused_without_writing() {
    let long = "x".repeat(MAX_HANDSHAKE_TOKEN_BYTES + 1);
    let mut out = vec![1, 2];
    let e = client_hello_v2(Some(&long), &mut out).unwrap_err();
    assert!(matches!(e, RpcError::Encode(_)), "{e}");
    assert_eq!(out, vec![1, 2]);
    let longest = "x".repeat(MAX_HANDSHAKE_TOKEN_BYTES);
    client_hello_v2(Some(&longest), &mut out).unwrap();
    assert_eq!(out.len(), 2 + HANDSHAKE_LEN + MAX_HANDSHAKE_TOKEN_BYTES);
}

#[test]
fn unknown_versions_and_bad_magic_are_refused() {
    let mut bad = client_hello();
    bad[0] = b'X';
    assert!(matches!(
        check_client_hello(&bad),
        Err(RpcError::BadMagic(_))
    ));
    for v in [0u16, 3, 99] {
        let mut future = client_hello();
        future[4..6].copy_from_slice(&v.to_le_bytes());
        assert_eq!(
            check_client_hello(&future),
            Err(RpcError::UnsupportedVersion(v))
        );
    }
    // An HTTP request sent to the RPC port is refused at once.
    let http: [u8; HANDSHAKE_LEN] = *b"GET / HT";
    assert!(check_client_hello(&http).is_err());
}

#[test]
fn the_client_checks_status_then_the_version_it_sent() {
    check_server_hello_for(&server_hello(RPC_VERSION, HANDSHAKE_OK), RPC_VERSION).unwrap();
    assert_eq!(
        check_server_hello_for(&server_hello(RPC_VERSION_1, HANDSHAKE_OK), RPC_VERSION),
        Err(RpcError::UnsupportedVersion(RPC_VERSION_1))
    );
    for status in [
        HANDSHAKE_UNSUPPORTED_VERSION,
        HANDSHAKE_BUSY,
        HANDSHAKE_UNAUTHENTICATED,
    ] {
        let e = check_server_hello_for(&server_hello(RPC_VERSION, status), RPC_VERSION);
        assert_eq!(e, Err(RpcError::HandshakeRefused(status)));
        assert_ne!(handshake_status_name(status), "unknown status");
    }
    // A version 1 client reading a version 2 server's refusal sees the status first.
    assert_eq!(
        check_server_hello(&server_hello(RPC_VERSION, HANDSHAKE_UNSUPPORTED_VERSION)),
        Err(RpcError::HandshakeRefused(HANDSHAKE_UNSUPPORTED_VERSION))
    );
    assert!(RpcError::HandshakeRefused(HANDSHAKE_UNAUTHENTICATED)
        .to_string()
        .contains("credential refused"));
}

#[test]
fn an_unauthenticated_answer_is_the_status_then_an_error_frame() {
    // What crescentd writes on status 3, and how a client reads it back.
    let mut out = server_hello(RPC_VERSION, HANDSHAKE_UNAUTHENTICATED).to_vec();
    let error = ApiError::new(ErrorCode::Unauthenticated, "token expired");
    encode_response(
        &mut out,
        RpcStatus::Error,
        HANDSHAKE_ERROR_REQUEST_ID,
        &error,
    )
    .unwrap();
    let hello: [u8; HANDSHAKE_LEN] = out[..HANDSHAKE_LEN].try_into().unwrap();
    assert_eq!(
        check_server_hello_for(&hello, RPC_VERSION),
        Err(RpcError::HandshakeRefused(HANDSHAKE_UNAUTHENTICATED))
    );
    let frame = &out[HANDSHAKE_LEN..];
    let header: [u8; HEADER_LEN] = frame[..HEADER_LEN].try_into().unwrap();
    let h = FrameHeader::parse(&header, 4096).unwrap();
    assert_eq!(RpcStatus::from_u8(h.tag).unwrap(), RpcStatus::Error);
    assert_eq!(h.request_id, HANDSHAKE_ERROR_REQUEST_ID);
    let back: ApiError = decode_body(&frame[HEADER_LEN..]).unwrap();
    assert_eq!(back.code, ErrorCode::Unauthenticated);
    assert_eq!(back.message, "token expired");
}

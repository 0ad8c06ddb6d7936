use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::test_certs::TestPki;
use super::*;

/// A one-connection TLS echo of one byte on loopback, with `pki`'s server certificate; the
/// receiver gets the server's handshake failure reason, if it failed.
async fn serve_once(pki: &TestPki) -> (SocketAddr, tokio::sync::oneshot::Receiver<&'static str>) {
    let config = server_config(&pki.cert_file, &pki.key_file, &[]).unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        match acceptor.accept(tcp).await {
            Ok(mut tls) => {
                let mut b = [0u8; 1];
                if tls.read_exact(&mut b).await.is_ok() {
                    let _ = tls.write_all(&b).await;
                }
            }
            Err(e) => {
                let _ = tx.send(failure_reason(&e));
            }
        }
    });
    (addr, rx)
}

async fn connect(ca: &Path, addr: SocketAddr, name: &str) -> io::Result<u8> {
    let connector = TlsConnector::from(Arc::new(client_config(ca).unwrap()));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = connector.connect(server_name(name).unwrap(), tcp).await?;
    tls.write_all(&[7]).await?;
    let mut b = [0u8; 1];
    tls.read_exact(&mut b).await?;
    Ok(b[0])
}

#[tokio::test]
async fn handshakes_verify_the_ca_and_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::localhost(&dir.path().join("a"));
    let other = TestPki::generate(&dir.path().join("b"), "another CA", &["localhost"]);

    let (addr, _) = serve_once(&pki).await;
    assert_eq!(connect(&pki.ca_file, addr, "127.0.0.1").await.unwrap(), 7);

    let (addr, server) = serve_once(&pki).await;
    let e = connect(&other.ca_file, addr, "localhost")
        .await
        .unwrap_err();
    assert!(is_handshake_failure(&e), "{e}");
    assert_eq!(failure_reason(&e), "unknown_ca", "{e}");
    assert_eq!(server.await.unwrap(), "peer_refused_certificate");

    let (addr, server) = serve_once(&pki).await;
    let e = connect(&pki.ca_file, addr, "crescent.example")
        .await
        .unwrap_err();
    assert_eq!(failure_reason(&e), "bad_name", "{e}");
    assert_eq!(server.await.unwrap(), "peer_refused_certificate");

    // Plain bytes where a handshake is expected fail as not TLS, not a hang.
    let (addr, server) = serve_once(&pki).await;
    let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    plain.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        plain.read_to_end(&mut rest),
    )
    .await;
    assert!(closed.is_ok(), "the server must close a non-TLS connection");
    assert!(
        !rest.starts_with(b"HTTP"),
        "no plain answer over a TLS port"
    );
    assert_eq!(server.await.unwrap(), "not_tls");
}

#[test]
fn a_key_readable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::localhost(dir.path());
    assert!(server_config(&pki.cert_file, &pki.key_file, &[]).is_ok());
    std::fs::set_permissions(&pki.key_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = server_config(&pki.cert_file, &pki.key_file, &[]).unwrap_err();
    assert!(e.to_string().contains("chmod 600"), "{e}");
    // A certificate file that is not PEM, and a missing CA file, name their path.
    let e = load_certs(&pki.key_file).unwrap_err();
    assert!(e.to_string().contains("server.key"), "{e}");
    assert!(client_config(&dir.path().join("missing.pem")).is_err());
    assert!(server_name("[::1]").is_ok());
    assert!(server_name("bad name").is_err());
}

//! TLS for crescentd's control planes (HTTP, the RPC fast path, HA replication) and their
//! clients: PEM files into rustls configurations, and the classes of a failed handshake.
//!
//! One crypto provider for the whole tree: `ring`, which the token code already uses
//! (docs/security.md, "TLS"). Every configuration is built with it explicitly, so no
//! process-wide default provider has to be installed first.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
pub use rustls::{ClientConfig, ServerConfig};
pub use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};

pub mod frames;

/// Why TLS could not be set up from the configured files.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS file {}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("TLS configuration refused: {0}")]
    Config(String),
    #[error("{0:?} is not a valid TLS server name")]
    ServerName(String),
}

fn file_err(path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate of a PEM file (a chain: leaf first).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| file_err(path, e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(path, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(file_err(path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The private key of a PEM file, refusing a file readable by group or others (as the token
/// key: docs/security.md).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    crescent_auth::keys::check_private(path).map_err(|reason| file_err(path, reason))?;
    let bytes = std::fs::read(path).map_err(|e| file_err(path, e.to_string()))?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|e| file_err(path, format!("no PEM private key: {e}")))
}

/// A server configuration presenting the chain of `cert_file` with the key of `key_file`.
/// `alpn` lists the protocols offered (empty: none).
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
    alpn: &[&[u8]],
) -> Result<ServerConfig, TlsError> {
    let certs = load_certs(cert_file)?;
    let key = load_key(key_file)?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| file_err(key_file, format!("does not match the certificate: {e}")))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    // Clients do not resume sessions, and an idle pooled RPC connection must carry no bytes
    // but a close (frames::idle_peer_gone).
    config.send_tls13_tickets = 0;
    Ok(config)
}

/// The CA certificates of `ca_file` as a root store.
pub fn root_store(ca_file: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certs(ca_file)? {
        roots
            .add(cert)
            .map_err(|e| file_err(ca_file, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// A client configuration that trusts exactly the CAs of `ca_file`.
pub fn client_config(ca_file: &Path) -> Result<ClientConfig, TlsError> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(root_store(ca_file)?)
        .with_no_client_auth())
}

/// The name a server's certificate must carry for `host` (a DNS name or an IP address;
/// brackets of an IPv6 literal are dropped).
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|_| TlsError::ServerName(host.to_string()))
}

/// The rustls error inside an IO error, if the IO failed in TLS.
pub fn tls_cause(e: &io::Error) -> Option<&rustls::Error> {
    find_tls_error(e)
}

/// The rustls error anywhere under `err`. An IO error's `source` skips the error it wraps, so
/// IO errors are opened with `get_ref` (HTTP stacks wrap one IO error in another).
pub fn find_tls_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = err.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    if let Some(inner) = err.downcast_ref::<io::Error>().and_then(io::Error::get_ref) {
        if let Some(tls) = find_tls_error(inner) {
            return Some(tls);
        }
    }
    err.source().and_then(find_tls_error)
}

/// A bounded label for why a handshake failed (metrics: `crescent_tls_handshake_failures_total`).
pub fn failure_reason(e: &io::Error) -> &'static str {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match tls_cause(e) {
        Some(E::InvalidCertificate(C::UnknownIssuer | C::BadSignature)) => "unknown_ca",
        Some(E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. })) => {
            "bad_name"
        }
        Some(E::InvalidCertificate(C::Expired | C::ExpiredContext { .. })) => "expired",
        Some(E::InvalidCertificate(_)) => "bad_certificate",
        // A signature that does not verify under a CA of the same name arrives as
        // DecryptError.
        Some(E::AlertReceived(
            A::UnknownCA
            | A::BadCertificate
            | A::CertificateUnknown
            | A::CertificateExpired
            | A::DecryptError,
        )) => "peer_refused_certificate",
        Some(E::AlertReceived(_)) => "peer_alert",
        Some(E::InvalidMessage(_) | E::InappropriateMessage { .. }) => "not_tls",
        Some(_) => "protocol",
        None if e.kind() == io::ErrorKind::TimedOut => "timeout",
        None if e.kind() == io::ErrorKind::InvalidData => "not_tls",
        None => "io",
    }
}

/// Whether `e` is a failed TLS handshake rather than a network failure (so a client reports
/// the certificate problem, not "connection refused").
pub fn is_handshake_failure(e: &io::Error) -> bool {
    tls_cause(e).is_some()
}

#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "test-certs"))]
pub mod test_certs;

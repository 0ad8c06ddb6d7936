//! Counting and logging failed TLS handshakes on crescentd's own listeners (docs/security.md,
//! "TLS"). Labels are fixed sets: the listener and `crescent_tls::failure_reason`, never an
//! address.

use std::net::SocketAddr;

use crate::metrics::ServerMetrics;

/// Records a handshake on `listener` that failed with `e` (a scanner, a plain-text client, a
/// client that does not trust the certificate).
pub fn handshake_failed(
    metrics: &ServerMetrics,
    listener: &'static str,
    e: &std::io::Error,
    peer: SocketAddr,
) {
    let reason = crescent_tls::failure_reason(e);
    metrics
        .tls_handshake_failures
        .with_label_values(&[listener, reason])
        .inc();
    tracing::debug!(listener, reason, %peer, error = %e, "TLS handshake failed");
}

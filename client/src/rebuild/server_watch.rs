//! Telling an owner at once that crescentd restarted or the leader changed, so it heartbeats
//! right away (learning the new term and starting its replay) instead of at its next heartbeat,
//! up to a heartbeat interval (a quarter of the client TTL, 2.5 s by default) later.
//!
//! The watch keeps one idle connection to the leader's RPC listener: the handshake, then
//! nothing is sent (crescentd keeps an RPC connection until the peer closes it). When crescentd
//! dies the kernel closes the connection and the pending read returns; the watch then dials
//! again with a short backoff ([`WatchConfig`]: 5 ms doubling to 200 ms) and wakes the owner as
//! soon as crescentd accepts again, which is when it can answer with its new term. A leader
//! switch seen by the client's locator (the etcd leader key, a NOT_LEADER answer) wakes the
//! owner too. A server without an RPC listener cannot be watched this way; the watch then only
//! follows leader switches and looks again after [`WatchConfig::recheck_http_only`].
//!
//! A frozen crescentd (SIGSTOP) keeps the connection open: that case is the etcd leader watch's
//! (docs/ha.md), whose switch wakes the owner.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crescent_wire::rpc::RpcInfo;
use crescent_wire::ErrorCode;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};

use crate::error::ClientError;
use crate::leader::LeaderLocator;
use crate::metrics::RebuildMetrics;
use crate::rpc_connect::HandshakeFailure;
use crate::server_conn::ServerConn;

/// Timing of the server watch.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// First wait before dialling again after the connection was lost.
    pub min_backoff: Duration,
    /// Longest wait between dials while crescentd is away.
    pub max_backoff: Duration,
    /// Deadline of one dial (discovery, connect and handshake): a frozen server must not
    /// hold the watch.
    pub dial_timeout: Duration,
    /// How long a server without an RPC listener is left unwatched before asking again.
    pub recheck_http_only: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            min_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(200),
            dial_timeout: Duration::from_secs(1),
            recheck_http_only: Duration::from_secs(60),
        }
    }
}

/// Why the owner was woken (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wakeup {
    /// crescentd accepts connections again after the watch lost its connection.
    Reconnected,
    /// The locator moved to another leader.
    LeaderChanged,
}

impl Wakeup {
    fn label(self) -> &'static str {
        match self {
            Wakeup::Reconnected => "reconnected",
            Wakeup::LeaderChanged => "leader_changed",
        }
    }
}

/// Why a dial did not give a watch connection.
enum DialFailure {
    /// The server has no RPC listener: nothing to watch there.
    NoListener,
    /// Unreachable, refused, timed out or a bad handshake: crescentd is away.
    Away(String),
}

/// Runs the watch until aborted, calling `wake.notify_one()` whenever the owner should
/// heartbeat now. `Notify` keeps one permit, so a wake-up while the owner is busy is not lost.
pub(crate) async fn run_server_watch(
    locator: Arc<LeaderLocator>,
    wake: Arc<Notify>,
    metrics: RebuildMetrics,
    config: WatchConfig,
) {
    let mut epochs = locator.subscribe();
    let mut backoff = config.min_backoff;
    // Set once a watch connection was lost (or never made): the next one made wakes the owner.
    let mut lost = false;
    loop {
        epochs.borrow_and_update();
        let Some(current) = locator.current() else {
            if epochs.changed().await.is_err() {
                return; // the client is gone
            }
            signal(&wake, &metrics, Wakeup::LeaderChanged);
            continue;
        };
        let dial = tokio::time::timeout(config.dial_timeout, dial(&current.conn)).await;
        let pause = match dial {
            Ok(Ok(stream)) => {
                if lost {
                    signal(&wake, &metrics, Wakeup::Reconnected);
                    lost = false;
                }
                backoff = config.min_backoff;
                tokio::select! {
                    () = closed(stream) => {
                        tracing::debug!(server = current.conn.server(), "crescentd closed the watch connection");
                        lost = true;
                        Duration::ZERO
                    }
                    changed = epochs.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        signal(&wake, &metrics, Wakeup::LeaderChanged);
                        continue;
                    }
                }
            }
            Ok(Err(DialFailure::NoListener)) => config.recheck_http_only,
            Ok(Err(DialFailure::Away(why))) => {
                tracing::trace!(server = current.conn.server(), why, "watch dial failed");
                lost = true;
                let wait = backoff;
                backoff = (backoff * 2).min(config.max_backoff);
                wait
            }
            Err(_elapsed) => {
                lost = true;
                config.max_backoff
            }
        };
        if wait_or_leader_change(&mut epochs, pause).await {
            signal(&wake, &metrics, Wakeup::LeaderChanged);
        }
    }
}

fn signal(wake: &Notify, metrics: &RebuildMetrics, why: Wakeup) {
    tracing::debug!(reason = why.label(), "waking the owner's heartbeat");
    metrics
        .owner_wakeups
        .with_label_values(&[why.label()])
        .inc();
    wake.notify_one();
}

/// Sleeps `pause`, returning early (true) if the leader changed meanwhile.
async fn wait_or_leader_change(epochs: &mut watch::Receiver<u64>, pause: Duration) -> bool {
    if pause.is_zero() {
        return false;
    }
    tokio::select! {
        () = tokio::time::sleep(pause) => false,
        changed = epochs.changed() => changed.is_ok(),
    }
}

/// The watch's idle connection: plain, or TLS when the listener says so (boxed once, when
/// dialled).
type WatchStream = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

/// Finds the server's RPC listener and completes the handshake.
async fn dial(conn: &ServerConn) -> Result<WatchStream, DialFailure> {
    let info: RpcInfo = match conn.http.get(&conn.http.routes.rpc).await {
        Ok(info) => info,
        Err(ClientError::Api(e)) if e.code == ErrorCode::NotFound => {
            return Err(DialFailure::NoListener)
        }
        Err(e) => return Err(DialFailure::Away(e.to_string())),
    };
    let Some((host, port)) = listener_addr(&info.address, conn.server()) else {
        tracing::warn!(address = %info.address, "unusable RPC address; the owner is not watching crescentd");
        return Err(DialFailure::NoListener);
    };
    let away = |e: std::io::Error| DialFailure::Away(e.to_string());
    let stream = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(away)?;
    let version = crate::rpc_connect::version_for(info.version);
    let tls = match (info.tls, conn.tls.clone()) {
        (false, _) => None,
        (true, Some(config)) => {
            let host = conn.http.routes.healthz.host_str().unwrap_or_default();
            match crate::rpc_wire::RpcTls::new(config, host) {
                Some(tls) => Some(tls),
                None => return Err(DialFailure::NoListener),
            }
        }
        (true, None) => return Err(DialFailure::NoListener),
    };
    let shaken = match tls {
        None => {
            let mut stream = stream;
            crate::rpc_connect::handshake(&mut stream, version, conn.token.as_ref())
                .await
                .map(|()| Box::new(stream) as WatchStream)
        }
        Some(tls) => match tls.connector.connect(tls.name, stream).await {
            Ok(mut stream) => {
                crate::rpc_connect::handshake(&mut stream, version, conn.token.as_ref())
                    .await
                    .map(|()| Box::new(stream) as WatchStream)
            }
            Err(e) => Err(crate::rpc_connect::tls_connect_failure(e)),
        },
    };
    match shaken {
        Ok(stream) => Ok(stream),
        Err(HandshakeFailure::Io(e)) => Err(away(e)),
        // Dialling again would be refused again: look again later, as for a server without
        // a listener.
        Err(HandshakeFailure::Refused(e)) => {
            tracing::warn!(error = %e, "RPC credential refused; the owner is not watching crescentd");
            Err(DialFailure::NoListener)
        }
        Err(HandshakeFailure::Tls(e)) => {
            tracing::warn!(error = %e, "RPC TLS refused; the owner is not watching crescentd");
            Err(DialFailure::NoListener)
        }
    }
}

/// The advertised listener's host and port; an unspecified host means the host of `server`
/// (the address the HTTP API was reached on, `HOST:PORT` or a URL).
fn listener_addr(advertised: &str, server: &str) -> Option<(String, u16)> {
    let advertised: SocketAddr = advertised.parse().ok()?;
    if !advertised.ip().is_unspecified() {
        return Some((advertised.ip().to_string(), advertised.port()));
    }
    let authority = server
        .split_once("://")
        .map_or(server, |(_, rest)| rest)
        .split('/')
        .next()?;
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.parse::<u16>().is_ok() => h,
        _ => authority,
    }
    .trim_start_matches('[')
    .trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_string(), advertised.port()))
}

/// Returns when the peer closed the connection or it broke. crescentd sends nothing on an
/// idle connection; stray bytes are read and ignored.
async fn closed(mut stream: WatchStream) {
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_listener_host_is_the_http_host() {
        let a = |adv, server| listener_addr(adv, server).map(|(h, p)| format!("{h} {p}"));
        assert_eq!(
            a("10.0.0.5:7490", "127.0.0.1:7480").as_deref(),
            Some("10.0.0.5 7490")
        );
        assert_eq!(
            a("0.0.0.0:7490", "127.0.0.1:7480").as_deref(),
            Some("127.0.0.1 7490")
        );
        assert_eq!(
            a("0.0.0.0:7490", "http://192.168.1.2:7480/").as_deref(),
            Some("192.168.1.2 7490")
        );
        assert_eq!(a("[::]:7490", "[::1]:7480").as_deref(), Some("::1 7490"));
        assert_eq!(
            a("0.0.0.0:7490", "db.example:7480").as_deref(),
            Some("db.example 7490")
        );
        assert_eq!(
            a("0.0.0.0:7490", "db.example").as_deref(),
            Some("db.example 7490")
        );
        assert_eq!(a("not an address", "127.0.0.1:7480"), None);
    }
}

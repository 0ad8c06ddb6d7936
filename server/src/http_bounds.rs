//! `[net]`'s HTTP bounds (docs/configuration.md, "Network bounds"), applied alike to every
//! HTTP listener of crescentd: the node's and the one a standby serves while it follows.

/// How much of a request body is read, and for how long (`http.max_body_bytes`,
/// `net.http_body_timeout_ms`); registered as app data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub timeout: std::time::Duration,
}

impl Default for BodyLimits {
    fn default() -> Self {
        let net = crate::config::net::NetConfig::default();
        BodyLimits {
            max_bytes: crate::config::HttpConfig::default().max_body_bytes,
            timeout: net.http_body_timeout(),
        }
    }
}

impl BodyLimits {
    /// The bounds `config` sets.
    pub fn of(config: &crate::config::Config) -> Self {
        BodyLimits {
            max_bytes: config.http.max_body_bytes,
            timeout: config.net.http_body_timeout(),
        }
    }
}

/// `$server` (an `actix_web::HttpServer`) with `$workers` workers, the head timeout, the idle
/// keep-alive limit and the connection cap of `$net` (a [`crate::config::net::NetConfig`]);
/// actix counts the cap per worker, so the whole cap is split between them. The body limit and
/// body timeout are app data that the handlers read ([`BodyLimits`]).
/// (A macro: `HttpServer`'s type parameters name crates that crescentd does not depend on.)
macro_rules! bounded_http_server {
    ($server:expr, $net:expr, $workers:expr) => {{
        let net: &$crate::config::net::NetConfig = $net;
        let workers: usize = ($workers).max(1);
        $server
            .workers(workers)
            .client_request_timeout(net.http_head_timeout())
            .client_disconnect_timeout(::std::time::Duration::from_secs(1))
            .keep_alive(::std::time::Duration::from_secs(net.http_keep_alive_secs))
            .max_connections(net.http_max_connections.div_ceil(workers).max(1))
    }};
}

pub(crate) use bounded_http_server;

/// The HTTP listening socket on `addr`, bound once. An HA node binds it before its standby
/// phase and keeps it through promotion, so the port is never free in between: nothing else
/// (the active's own replication listener on an ephemeral port, say) can take it, and clients
/// that connect during promotion wait in the backlog instead of being refused.
pub(crate) fn bind_listener(
    addr: std::net::SocketAddr,
) -> Result<std::net::TcpListener, crate::error::ServerError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = (|| {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())?;
        // Connections beyond what the process accepts (the connection cap, or no descriptor
        // left) wait in the backlog: actix-web's own default when it binds.
        socket.listen(HTTP_BACKLOG)?;
        Ok(socket)
    })()
    .map_err(|source| crate::error::ServerError::Listen { addr, source })?;
    Ok(socket.into())
}

/// The HTTP listen backlog.
const HTTP_BACKLOG: i32 = 1024;

/// `$server` serving on a duplicate of `$listener` (a `&std::net::TcpListener`, see
/// [`bind_listener`]): the caller keeps the socket open when this server stops. TLS only with
/// `$tls` (a `Option<&LoadedTls>`, docs/security.md "TLS"; the handshake must finish within
/// `net.http_head_timeout_ms`), plain HTTP without.
macro_rules! listen_http {
    ($server:expr, $listener:expr, $tls:expr, $net:expr) => {{
        let listener: &::std::net::TcpListener = $listener;
        let tls: Option<&$crate::config::tls::LoadedTls> = $tls;
        let net: &$crate::config::net::NetConfig = $net;
        let addr = listener
            .local_addr()
            .unwrap_or_else(|_| ::std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
        listener
            .try_clone()
            .and_then(|listener| match tls {
                Some(tls) => $server
                    .tls_handshake_timeout(net.http_head_timeout())
                    .listen_rustls_0_23(listener, (*tls.server).clone()),
                None => $server.listen(listener),
            })
            .map_err(|source| $crate::error::ServerError::Listen { addr, source })
    }};
}

pub(crate) use listen_http;

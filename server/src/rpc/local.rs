//! The RPC fast path's local socket (docs/api.md, "Local socket"): a Unix stream socket beside
//! the TCP listener, serving the same handshake and frames to clients on this host. A loopback
//! TCP round trip costs the kernel about twice what a Unix socket's does, and a single put or
//! get is mostly round trips.
//!
//! The socket file lives where `store.rpc_local_socket` says (by default the data dir, which
//! this process holds: a file left there by a crescentd that was killed is removed before
//! binding). Mode 0660: the owner and its group may connect; with `[auth]` every connection
//! still presents a token in its handshake.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crescent_wire::rpc::{server_hello, HANDSHAKE_BUSY, RPC_VERSION};
use tokio::net::UnixListener;
use tokio::runtime::Handle;

use super::{connection, take_slot, ACCEPT_BACKOFF_MIN};
use crate::config::net::RpcLimits;
use crate::node::NodeState;

/// Mode of the socket file.
const SOCKET_MODE: u32 = 0o660;

/// A bound local socket; its file is removed when this is dropped, unless another listener
/// has replaced it since.
#[derive(Debug)]
pub(super) struct LocalSocket {
    path: PathBuf,
    /// Device and inode of the file this listener created.
    identity: (u64, u64),
}

impl LocalSocket {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LocalSocket {
    fn drop(&mut self) {
        if let Ok(meta) = std::fs::symlink_metadata(&self.path) {
            if (meta.dev(), meta.ino()) == self.identity {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Binds `path` and serves it on `threads`; `None` (logged) when it cannot be bound: the TCP
/// listener still serves every client, so a missing local socket costs speed, not service.
pub(super) fn start(
    state: &Arc<NodeState>,
    path: &Path,
    threads: &[Handle],
    limits: RpcLimits,
    open: Arc<AtomicUsize>,
) -> Option<LocalSocket> {
    let (listener, socket) = match bind(path) {
        Ok(bound) => bound,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "RPC local socket not listening; clients use TCP");
            return None;
        }
    };
    let listener = {
        let _guard = threads[0].enter();
        match UnixListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "RPC local socket not listening; clients use TCP");
                return None;
            }
        }
    };
    threads[0].spawn(accept_loop(
        listener,
        threads.to_vec(),
        state.clone(),
        limits,
        open,
    ));
    tracing::info!(path = %path.display(), "RPC local socket listening");
    Some(socket)
}

fn bind(path: &Path) -> std::io::Result<(std::os::unix::net::UnixListener, LocalSocket)> {
    match std::fs::symlink_metadata(path) {
        // Left by an earlier crescentd on this data dir (killed before it could remove it).
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way",
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))?;
    listener.set_nonblocking(true)?;
    let meta = std::fs::symlink_metadata(path)?;
    let socket = LocalSocket {
        path: path.to_path_buf(),
        identity: (meta.dev(), meta.ino()),
    };
    Ok((listener, socket))
}

async fn accept_loop(
    listener: UnixListener,
    threads: Vec<Handle>,
    state: Arc<NodeState>,
    limits: RpcLimits,
    open: Arc<AtomicUsize>,
) {
    let mut next = 0usize;
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                let Some(slot) = take_slot(&open, limits.max_connections) else {
                    refuse_busy(&state, &stream);
                    continue;
                };
                // Re-register the socket with the reactor of the thread that will serve it.
                let std_stream = match stream.into_std() {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "RPC local connection dropped at accept");
                        continue;
                    }
                };
                let state = state.clone();
                threads[next % threads.len()].spawn(async move {
                    let _slot = slot;
                    match tokio::net::UnixStream::from_std(std_stream) {
                        Ok(stream) => connection::serve_local(state, stream, limits).await,
                        Err(e) => tracing::warn!(error = %e, "RPC local connection dropped"),
                    }
                });
                next = next.wrapping_add(1);
            }
            Err(e) => backoff = super::accept_failed(&state, &e, backoff).await,
        }
    }
}

/// Answers a connection over `net.rpc_max_connections` with handshake status busy (as TCP's).
fn refuse_busy(state: &NodeState, stream: &tokio::net::UnixStream) {
    state
        .metrics
        .connections_closed
        .with_label_values(&["rpc", "over_limit"])
        .inc();
    let _ = stream.try_write(&server_hello(RPC_VERSION, HANDSHAKE_BUSY));
    tracing::debug!("RPC local connection refused: at net.rpc_max_connections");
}

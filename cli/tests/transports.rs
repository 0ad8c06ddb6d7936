//! The object operations take the RPC fast path when crescentd offers it (over its local socket
//! when the client runs on crescentd's host, else TCP), and fall back to HTTP when it does not
//! (an older server, or `--rpc-listen off`), with the same results.

mod common;

use common::{owner_and_writer, Server};
use crescent_client::CrescentClient;

/// Requests crescentd counted for `family` (summed over labels matching `filter`).
async fn counted(server: &Server, family: &str, filter: &str) -> u64 {
    let text = reqwest::get(format!("http://{}/metrics", server.server()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(family) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

async fn exercise(client: &CrescentClient) {
    let keys: Vec<String> = (0..10).map(|i| format!("t/{i}")).collect();
    let values: Vec<Vec<u8>> = (0..10).map(|i| vec![i as u8; 4096 + i]).collect();
    client.put("single", b"hello").await.unwrap();
    assert_eq!(client.get("single").await.unwrap(), b"hello");
    assert!(client.is_exist("single").await.unwrap());
    assert_eq!(client.get_size("single").await.unwrap(), 5);
    for r in client.put_batch(&keys, &values).await.unwrap() {
        r.unwrap();
    }
    let got = client.get_batch(&keys).await.unwrap();
    for (g, v) in got.into_iter().zip(&values) {
        assert_eq!(&g.unwrap(), v);
    }
    let exist = client.batch_is_exist(&["t/0", "nope"]).await.unwrap();
    assert!(*exist[0].as_ref().unwrap());
    assert!(!*exist[1].as_ref().unwrap());
    let e = client.get("nope").await.unwrap_err();
    assert_eq!(e.code_str(), "NOT_FOUND");
    client.remove_forced("single").await.unwrap();
    assert!(!client.is_exist("single").await.unwrap());
    // Keys never read (a read lease makes a plain remove BUSY).
    client.put("r/0", b"x").await.unwrap();
    client.put("r/1", b"y").await.unwrap();
    for r in client.remove_batch(&["r/0", "r/1"]).await.unwrap() {
        r.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_operations_use_the_rpc_fast_path() {
    let server = Server::start();
    let (o, client) = owner_and_writer(&server.server(), "transports-owner", 8 << 20).await;
    exercise(&client).await;
    let rpc = "crescent_rpc_requests_total";
    assert!(counted(&server, rpc, "op=\"put_start\"").await >= 1);
    // A new client's batch get goes as the compact op (feature compact_batch_v1).
    assert!(counted(&server, rpc, "op=\"batch_get_compact\"").await >= 1);
    assert_eq!(
        counted(&server, rpc, "code=\"NOT_FOUND\"").await,
        1,
        "the failed get"
    );
    let http = "crescent_http_requests_total";
    assert_eq!(
        counted(&server, http, "/objects/").await,
        0,
        "no object operation went over HTTP"
    );
    o.shutdown().await.unwrap();
}

/// RPC connections crescentd accepted on `socket` (`tcp` or `local`).
async fn accepted(server: &Server, socket: &str) -> u64 {
    let filter = format!("socket=\"{socket}\"");
    counted(server, "crescent_rpc_connections_accepted_total", &filter).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_the_host_uses_the_local_socket_across_a_kill_restart() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let server = Server::start();
    let socket = server.dir.path().join("data/rpc.sock");
    let meta = std::fs::symlink_metadata(&socket).expect("the socket is in the data dir");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    let (o, client) = owner_and_writer(&server.server(), "transports-owner", 8 << 20).await;
    exercise(&client).await;
    assert!(accepted(&server, "local").await >= 1);
    // The owner's restart watch (one idle connection, server_watch) dials TCP; every request
    // connection went to the local socket.
    assert!(accepted(&server, "tcp").await <= 1);
    assert_eq!(
        counted(&server, "crescent_http_requests_total", "/objects/").await,
        0
    );
    client.put("kept", b"across the restart").await.unwrap();
    // Killed, its socket file stays behind: the restarted node replaces it.
    let server = server.kill_and_restart();
    assert_eq!(client.get("kept").await.unwrap(), b"across the restart");
    assert!(accepted(&server, "local").await >= 1);
    assert!(accepted(&server, "tcp").await <= 1);
    o.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_local_socket_off_the_client_uses_tcp() {
    let server = Server::start_with(&["--rpc-local-socket", "off"]);
    assert!(!server.dir.path().join("data/rpc.sock").exists());
    let (o, client) = owner_and_writer(&server.server(), "transports-owner", 8 << 20).await;
    exercise(&client).await;
    assert!(accepted(&server, "tcp").await >= 1);
    assert_eq!(accepted(&server, "local").await, 0);
    assert!(counted(&server, "crescent_rpc_requests_total", "op=\"get\"").await >= 1);
    o.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_rpc_listener_everything_falls_back_to_http() {
    let server = Server::start_with(&["--rpc-listen", "off"]);
    let (o, client) = owner_and_writer(&server.server(), "transports-owner", 8 << 20).await;
    exercise(&client).await;
    assert_eq!(counted(&server, "crescent_rpc_requests_total", "").await, 0);
    assert!(
        counted(
            &server,
            "crescent_http_requests_total",
            "/objects/put_start"
        )
        .await
            >= 1
    );
    assert!(
        counted(
            &server,
            "crescent_http_requests_total",
            "/objects/batch/get"
        )
        .await
            >= 1
    );
    o.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_listener_is_found_again() {
    // The first server's RPC port dies with it; a client that knew it must neither hang nor
    // fail once the node is back at the same HTTP address (with a new RPC port).
    let server = Server::start();
    let (o, client) = owner_and_writer(&server.server(), "transports-owner", 8 << 20).await;
    client.put("before", b"1").await.unwrap();
    assert!(client.is_exist("before").await.unwrap());
    o.shutdown().await.unwrap();
    let http_addr = server.server();
    drop(server);
    let again = Server::start_at(&http_addr);
    // The old RPC port is gone: this call falls back to HTTP and forgets it...
    assert!(!client.is_exist("before").await.unwrap(), "a fresh node");
    assert_eq!(
        counted(&again, "crescent_http_requests_total", "/objects/exist").await,
        1
    );
    // ...and the next one has found the new listener.
    assert!(!client.is_exist("before").await.unwrap());
    assert_eq!(
        counted(&again, "crescent_rpc_requests_total", "op=\"exist\"").await,
        1
    );
}

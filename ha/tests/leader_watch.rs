//! Leader discovery against a real etcd.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};

use common::*;
use crescent_ha::{HaError, LeaderWatch};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_watch_follows_elections_and_resignations() {
    let cluster = cluster();
    let watch = LeaderWatch::connect(&[etcd_endpoint()], &cluster)
        .await
        .unwrap();
    assert!(matches!(
        watch.wait_for_leader(Duration::from_millis(300)).await,
        Err(HaError::NoLeader(_))
    ));
    assert_eq!(watch.current(), None);

    let a = start(&cluster, "a", 2).await;
    let first = watch
        .wait_for_leader(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(first.node, "a");
    assert_eq!(first.address, "a.example:7000");
    // The record is stamped in etcd just before the winner publishes its role.
    let mut a_rx = a.subscribe();
    let (role, _) = wait_role(&mut a_rx, Duration::from_secs(5), "leader", is_leader).await;
    assert_eq!(first.term, term_of(&role));

    let b = start_follower(&cluster, "b", 2).await;
    a.mark_in_sync("b", 3).await.unwrap();
    a.resign().await.unwrap();

    let second = watch
        .wait_for_new_leader(first.term, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(second.node, "b");
    assert_eq!(second.address, "b.example:7000");
    assert!(second.term > first.term);

    // After the last leader resigns there is none (its own claim lets only it come back).
    let mut rx = watch.subscribe();
    b.resign().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|l| l.is_none()))
        .await
        .expect("the watch sees the leader go")
        .unwrap();

    // A second watch started now reads the state without waiting for a change.
    let late = LeaderWatch::connect(&[etcd_endpoint()], &cluster)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(late.current(), None);
}

/// A loopback TCP proxy to etcd whose connections can be cut, to break the watch's stream.
struct CuttableProxy {
    port: u16,
    connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accepting: Arc<AtomicBool>,
}

impl CuttableProxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(Mutex::new(Vec::new()));
        let accepting = Arc::new(AtomicBool::new(true));
        let (conns, open) = (connections.clone(), accepting.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !open.load(Ordering::SeqCst) {
                    continue; // dropped: refused while "down"
                }
                let upstream = upstream.clone();
                conns.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                }));
            }
        });
        CuttableProxy {
            port,
            connections,
            accepting,
        }
    }

    fn cut(&self, down: bool) {
        self.accepting.store(!down, Ordering::SeqCst);
        for c in self.connections.lock().unwrap().drain(..) {
            c.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_watch_reconnects_and_catches_up_after_its_connection_breaks() {
    let endpoint = etcd_endpoint();
    let upstream = endpoint.trim_start_matches("http://").to_string();
    let proxy = CuttableProxy::start(upstream).await;
    let cluster = cluster();
    let watch = LeaderWatch::connect(&[format!("http://127.0.0.1:{}", proxy.port)], &cluster)
        .await
        .unwrap();

    let a = start(&cluster, "a", 2).await;
    let first = watch
        .wait_for_leader(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(first.node, "a");
    let b = start_follower(&cluster, "b", 2).await;
    let mut b_rx = b.subscribe();
    a.mark_in_sync("b", 1).await.unwrap();

    // Cut the watch off, change the leader while it is blind, then let it reconnect.
    proxy.cut(true);
    a.resign().await.unwrap();
    wait_role(&mut b_rx, Duration::from_secs(10), "leader", is_leader).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.cut(false);

    let second = watch
        .wait_for_new_leader(first.term, Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(second.node, "b");
    assert_eq!(Some(second.term), b.leader_term());
    b.resign().await.unwrap();

    // An endpoint nobody listens on: no leader, no panic, the watch keeps retrying.
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = LeaderWatch::connect(&[format!("http://127.0.0.1:{dead_port}")], "c")
        .await
        .unwrap();
    assert!(matches!(
        dead.wait_for_leader(Duration::from_millis(500)).await,
        Err(HaError::NoLeader(_))
    ));
}

//! The coordination conformance suite (tests/common/conformance.rs) against a redis-server
//! each test starts for itself, without persistence.

mod common;

use common::conformance as suite;
use common::servers::OwnedEtcd;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_elections_race() {
    let _serial = suite::SERIAL.lock().await;
    suite::elections_race(&OwnedEtcd::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_paused_leader() {
    let _serial = suite::SERIAL.lock().await;
    suite::paused_leader(&OwnedEtcd::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restart() {
    let _serial = suite::SERIAL.lock().await;
    suite::backend_restart(&mut OwnedEtcd::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_frozen() {
    let _serial = suite::SERIAL.lock().await;
    suite::backend_frozen(&OwnedEtcd::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stale_marker_write_is_fenced() {
    let _serial = suite::SERIAL.lock().await;
    suite::stale_marker_write_is_fenced(&OwnedEtcd::start()).await;
}

//! The coordination conformance suite (tests/common/conformance.rs) against a redis-server
//! each test starts for itself, without persistence.

mod common;

use common::conformance as suite;
use common::servers::OwnedRedis;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_elections_race() {
    let _serial = suite::SERIAL.lock().await;
    suite::elections_race(&OwnedRedis::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_leader() {
    let _serial = suite::SERIAL.lock().await;
    suite::paused_leader(&OwnedRedis::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_without_persistence() {
    let _serial = suite::SERIAL.lock().await;
    suite::backend_restart(&mut OwnedRedis::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen() {
    let _serial = suite::SERIAL.lock().await;
    suite::backend_frozen(&OwnedRedis::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stale_marker_write_is_fenced() {
    let _serial = suite::SERIAL.lock().await;
    suite::stale_marker_write_is_fenced(&OwnedRedis::start()).await;
}

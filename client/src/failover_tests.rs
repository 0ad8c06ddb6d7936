//! Leader following against scripted fake crescentd HTTP servers: static-list rotation,
//! NOT_LEADER hints, the rebuild gate, the deadline, and non-idempotent operations surfacing
//! FAILOVER_INTERRUPTED instead of running twice.

use std::time::Duration;

use super::*;
use crate::client_options::ClientOptions;
use crate::failover_metrics::LeaderSource;
use crate::fake_server::{Answer, FakeServer};

/// An address nothing listens on (connection refused).
fn dead_address() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    a.to_string()
}

async fn client(servers: &[String], timeout: Duration) -> CrescentClient {
    let options = ClientOptions::servers(&servers.join(",")).with_failover_timeout(timeout);
    CrescentClient::connect(options).await.unwrap()
}

const EXISTS: &str = r#"{"exists":true}"#;
const RPC_404: &str = "/v1/rpc";

#[tokio::test]
async fn a_dead_server_in_the_static_list_is_skipped() {
    let live = FakeServer::start(vec![Answer::Ok(EXISTS)]).await;
    let c = client(&[dead_address(), live.address()], Duration::from_secs(5)).await;
    assert!(c.is_exist("k").await.unwrap());
    assert_eq!(c.server(), live.address());
    let m = c.metrics().failover();
    assert_eq!(m.leader_changes(LeaderSource::Static), 1);
    assert!(m.retries(RetryReason::Connect) >= 1);
    // Later requests go straight to the live server.
    assert!(c.is_exist("k").await.unwrap());
    assert_eq!(m.leader_changes(LeaderSource::Static), 1);
    assert!(live.requests().iter().all(|p| p != RPC_404));
}

#[tokio::test]
async fn a_standby_naming_the_active_is_followed() {
    let active = FakeServer::start(vec![Answer::Ok(EXISTS)]).await;
    let standby = FakeServer::start(vec![Answer::NotLeader(Some(active.address()))]).await;
    let c = client(&[standby.address()], Duration::from_secs(5)).await;
    assert!(c.is_exist("k").await.unwrap());
    assert_eq!(c.server(), active.address());
    assert_eq!(
        c.metrics()
            .failover()
            .leader_changes(LeaderSource::NotLeader),
        1
    );
    // Not idempotent, but NOT_LEADER proves it did not run: sent again to the active.
    let removed = FakeServer::start(vec![Answer::Ok("{}")]).await;
    let standby2 = FakeServer::start(vec![Answer::NotLeader(Some(removed.address()))]).await;
    let c = client(&[standby2.address()], Duration::from_secs(5)).await;
    c.remove("k").await.unwrap();
    assert_eq!(removed.requests().len(), 1);
}

#[tokio::test]
async fn reads_wait_for_the_rebuild_gate() {
    let s = FakeServer::start(vec![
        Answer::Unavailable("REBUILDING: waiting for 2 owners"),
        Answer::Unavailable("REBUILDING: waiting for 1 owner"),
        Answer::Ok(EXISTS),
    ])
    .await;
    let c = client(&[s.address()], Duration::from_secs(5)).await;
    assert!(c.is_exist("k").await.unwrap());
    assert_eq!(s.requests().len(), 3);
    assert_eq!(c.metrics().failover().retries(RetryReason::NotRun), 2);
}

#[tokio::test]
async fn a_non_idempotent_operation_refused_before_running_is_retried_transparently() {
    // The message does not start with REBUILDING: the server's `not_run` flag alone says
    // nothing ran, so even a remove is sent again.
    let s = FakeServer::start(vec![
        Answer::Refused("object metadata is being rebuilt", "REBUILDING"),
        Answer::Refused("object metadata is being rebuilt", "REBUILDING"),
        Answer::Ok("{}"),
    ])
    .await;
    let c = client(&[s.address()], Duration::from_secs(5)).await;
    c.remove("k").await.unwrap();
    assert_eq!(s.requests().len(), 3);
    assert_eq!(c.metrics().failover().retries(RetryReason::NotRun), 2);
    assert_eq!(c.metrics().failover().interruptions("remove"), 0);
}

#[tokio::test]
async fn a_refusal_past_the_deadline_surfaces_as_unavailable_with_its_state() {
    for answer in [
        Answer::Refused("object metadata is being rebuilt", "REBUILDING"),
        // A server that predates the flag: the gate's message still identifies it.
        Answer::Unavailable("REBUILDING: object metadata is being rebuilt"),
    ] {
        let s = FakeServer::start(vec![answer]).await;
        let c = client(&[s.address()], Duration::from_millis(600)).await;
        let e = c.remove("k").await.unwrap_err();
        assert_eq!(e.code_str(), "UNAVAILABLE", "{e}");
        match &e {
            ClientError::Api(api) => {
                assert!(crescent_wire::rebuild::is_rebuilding(api), "{api:?}");
            }
            other => panic!("expected the server's error, got {other:?}"),
        }
        assert!(e.retryable());
        assert!(s.requests().len() >= 2, "retried: {:?}", s.requests());
        assert_eq!(c.metrics().failover().interruptions("remove"), 0);
    }
    // The flagged form carries the state itself.
    let s = FakeServer::start(vec![Answer::Refused("gate closed", "REBUILDING")]).await;
    let c = client(&[s.address()], Duration::from_millis(300)).await;
    match c.unmount_segment("seg").await.unwrap_err() {
        ClientError::Api(api) => {
            assert!(api.not_run);
            assert_eq!(api.state.as_deref(), Some("REBUILDING"));
        }
        other => panic!("expected UNAVAILABLE, got {other:?}"),
    }
}

#[tokio::test]
async fn a_remove_that_may_have_run_is_interrupted_not_repeated() {
    let s = FakeServer::start(vec![Answer::Drop, Answer::Ok("{}")]).await;
    let c = client(&[s.address()], Duration::from_secs(5)).await;
    let e = c.remove("k").await.unwrap_err();
    assert_eq!(e.code_str(), "FAILOVER_INTERRUPTED", "{e}");
    assert!(e.retryable());
    assert_eq!(s.requests().len(), 1, "sent once");
    assert_eq!(c.metrics().failover().interruptions("remove"), 1);
    // The same failure on a read is retried.
    let s = FakeServer::start(vec![Answer::Drop, Answer::Ok(EXISTS)]).await;
    let c = client(&[s.address()], Duration::from_secs(5)).await;
    assert!(c.is_exist("k").await.unwrap());
    assert_eq!(s.requests().len(), 2);
}

#[tokio::test]
async fn an_unavailable_remove_is_not_repeated_but_a_gated_one_is() {
    let s = FakeServer::start(vec![
        Answer::Unavailable("journal closed"),
        Answer::Ok("{}"),
    ])
    .await;
    let c = client(&[s.address()], Duration::from_secs(5)).await;
    let e = c.remove("k").await.unwrap_err();
    assert_eq!(e.code_str(), "FAILOVER_INTERRUPTED");
    assert_eq!(s.requests().len(), 1);
    let s = FakeServer::start(vec![Answer::Unavailable("REBUILDING: x"), Answer::Ok("{}")]).await;
    let c = client(&[s.address()], Duration::from_secs(5)).await;
    c.remove("k").await.unwrap();
    assert_eq!(s.requests().len(), 2);
}

#[tokio::test]
async fn retries_stop_at_the_deadline_with_the_last_error() {
    let c = client(
        &[dead_address(), dead_address()],
        Duration::from_millis(400),
    )
    .await;
    let started = std::time::Instant::now();
    let e = c.is_exist("k").await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.code_str(), "UNAVAILABLE", "{e}");
    assert!(took >= Duration::from_millis(400), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(c.metrics().failover().retries(RetryReason::Connect) >= 2);
}

#[tokio::test]
async fn other_errors_are_not_retried() {
    let s = FakeServer::start(vec![Answer::Ok("not json")]).await;
    let c = client(&[s.address()], Duration::from_secs(5)).await;
    let e = c.is_exist("k").await.unwrap_err();
    assert_eq!(e.code_str(), "INTERNAL");
    assert_eq!(s.requests().len(), 1);
}

#[tokio::test]
async fn the_second_phase_never_goes_to_another_leader() {
    let a = FakeServer::start(vec![Answer::Ok("{}")]).await;
    let b = FakeServer::start(vec![Answer::Ok("{}")]).await;
    let c = client(&[a.address(), b.address()], Duration::from_secs(5)).await;
    let at = c.locator.current().unwrap();
    let body = crescent_wire::store::PutEndRequest {
        id: crescent_wire::store::ObjectId::new("k"),
        put_id: 1,
    };
    let _: crescent_wire::store::Ack = c.call_pinned(&at, RpcOp::PutEnd, &body).await.unwrap();
    assert_eq!(a.requests().len(), 1);
    // The leader moves on: a put_end for the old one's put is not sent anywhere.
    assert!(c.locator.after_failure(&at, Some(&b.address())).is_some());
    let e = c
        .call_pinned::<_, crescent_wire::store::Ack>(&at, RpcOp::PutEnd, &body)
        .await
        .unwrap_err();
    assert_eq!(e.code_str(), "FAILOVER_INTERRUPTED");
    assert_eq!((a.requests().len(), b.requests().len()), (1, 0));
}

#[test]
fn failures_are_classified() {
    use crescent_wire::ApiError;
    let mut nl = ApiError::new(ErrorCode::NotLeader, "standby");
    nl.leader = Some("h:1".into());
    assert_eq!(
        classify(&ClientError::Api(nl)),
        Failure::NotRun {
            reason: RetryReason::NotLeader,
            hint: Some("h:1".into())
        }
    );
    let gate = ClientError::Api(ApiError::new(ErrorCode::Unavailable, "REBUILDING: x"));
    assert!(matches!(classify(&gate), Failure::NotRun { .. }));
    let flagged = ClientError::Api(
        ApiError::new(ErrorCode::Unavailable, "refused").refused_before_running(None),
    );
    assert_eq!(
        classify(&flagged),
        Failure::NotRun {
            reason: RetryReason::NotRun,
            hint: None
        }
    );
    let closed = ClientError::Api(ApiError::new(ErrorCode::Unavailable, "closed"));
    assert!(matches!(classify(&closed), Failure::MaybeRun { .. }));
    let fenced = ClientError::Api(ApiError::new(ErrorCode::Fenced, "term"));
    assert!(matches!(classify(&fenced), Failure::MaybeRun { .. }));
    for code in [ErrorCode::NotFound, ErrorCode::Conflict, ErrorCode::Busy] {
        assert_eq!(
            classify(&ClientError::Api(ApiError::new(code, "x"))),
            Failure::Final
        );
    }
    assert_eq!(
        classify(&ClientError::InvalidArgument("x".into())),
        Failure::Final
    );
    assert_eq!(retry_for(RpcOp::Get), Retry::Idempotent);
    assert_eq!(retry_for(RpcOp::PutStart), Retry::Idempotent);
    assert_eq!(retry_for(RpcOp::PutEnd), Retry::NotIdempotent);
    assert_eq!(retry_for(RpcOp::BatchRemove), Retry::NotIdempotent);
}

/// A client with no static list (etcd only) before etcd named a leader.
#[cfg(feature = "etcd")]
fn leaderless(timeout: Duration) -> CrescentClient {
    let metrics = crate::metrics::ClientMetrics::unregistered();
    CrescentClient {
        locator: crate::leader::LeaderLocator::new(
            Vec::new(),
            crate::server_conn::Connector::new(None).unwrap(),
            metrics.failover.clone(),
        )
        .unwrap(),
        failover: std::sync::Arc::new(FailoverConfig {
            timeout,
            ..FailoverConfig::default()
        }),
        scope: crate::options::Scope::default(),
        token_tenant: None,
        data: crate::dataplane::DataPlane::new(metrics, None),
        submission: std::sync::Arc::new(crate::batch::submission::Submission::new(
            &crate::ClientOptions::default(),
        )),
        cold_restore: std::sync::Arc::new(crate::cold_restore::LocalColdRestore::new(true)),
    }
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn a_request_waits_for_the_first_leader_etcd_names() {
    let s = FakeServer::start(vec![Answer::Ok(EXISTS)]).await;
    let c = leaderless(Duration::from_secs(5));
    let announce = {
        let (locator, address) = (c.locator.clone(), s.address());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            locator.observe_leader(&crescent_ha::LeaderInfo {
                node: "n1".into(),
                address,
                term: 7,
            });
        })
    };
    let started = std::time::Instant::now();
    assert!(c.is_exist("k").await.unwrap());
    assert!(started.elapsed() >= Duration::from_millis(150));
    announce.await.unwrap();
    assert_eq!(c.metrics().failover().leader_changes(LeaderSource::Etcd), 1);

    let none = leaderless(Duration::from_millis(200));
    let e = none.is_exist("k").await.unwrap_err();
    assert_eq!(e.code_str(), "NO_LEADER", "{e}");
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn an_idempotent_request_stuck_on_a_frozen_leader_moves_to_the_new_one() {
    // A server that accepts and never answers: a frozen (SIGSTOPped) active.
    let frozen = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let frozen_addr = frozen.local_addr().unwrap().to_string();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = frozen.accept().await {
            held.push(s);
        }
    });
    let next = FakeServer::start(vec![Answer::Ok(EXISTS)]).await;
    let c = client(&[frozen_addr], Duration::from_secs(5)).await;
    let switch = {
        let (locator, address) = (c.locator.clone(), next.address());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            locator.observe_leader(&crescent_ha::LeaderInfo {
                node: "n2".into(),
                address,
                term: 9,
            });
        })
    };
    let started = std::time::Instant::now();
    assert!(c.is_exist("k").await.unwrap());
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        c.metrics().failover().retries(RetryReason::LeaderChanged),
        1
    );
    switch.await.unwrap();
    hold.abort();
}

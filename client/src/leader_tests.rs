use super::*;
#[cfg(feature = "etcd")]
use crescent_ha::LeaderInfo;

fn locator(servers: &[&str]) -> Arc<LeaderLocator> {
    LeaderLocator::new(
        servers.iter().map(|s| s.to_string()).collect(),
        crate::server_conn::Connector::new(None).unwrap(),
        FailoverMetrics::unregistered(),
    )
    .unwrap()
}

#[cfg(feature = "etcd")]
fn leader(address: &str, term: u64) -> LeaderInfo {
    LeaderInfo {
        node: format!("n{term}"),
        address: address.to_string(),
        term,
    }
}

fn base(l: &LeaderLocator) -> String {
    l.current().unwrap().conn.base.clone()
}

#[test]
fn the_static_list_rotates_once_per_failure_epoch() {
    let l = locator(&["a:1", "b:2", "c:3"]);
    let first = l.current().unwrap();
    assert_eq!((first.conn.base.as_str(), first.epoch), ("http://a:1", 0));
    // Many requests fail on the same epoch: the client moves once.
    assert_eq!(l.after_failure(&first, None), Some(LeaderSource::Static));
    assert_eq!(l.after_failure(&first, None), None);
    assert_eq!(base(&l), "http://b:2");
    let second = l.current().unwrap();
    assert_eq!(second.epoch, 1);
    assert!(!l.is_current(first.epoch) && l.is_current(second.epoch));
    l.after_failure(&second, None);
    let third = l.current().unwrap();
    assert_eq!(base(&l), "http://c:3");
    l.after_failure(&third, None);
    assert_eq!(base(&l), "http://a:1", "wraps around");
    assert_eq!(l.metrics().leader_changes(LeaderSource::Static), 3);
}

#[test]
fn a_hint_wins_and_spellings_of_one_address_are_equal() {
    let l = locator(&["a:1", "b:2"]);
    let first = l.current().unwrap();
    assert_eq!(
        l.after_failure(&first, Some("http://z:9/")),
        Some(LeaderSource::NotLeader)
    );
    assert_eq!(base(&l), "http://z:9");
    // A hint naming the current server is no switch.
    let now = l.current().unwrap();
    assert!(!l.switch_to(Some(now.epoch), "z:9", LeaderSource::NotLeader));
    // From an address outside the list, rotation starts at the top.
    assert_eq!(l.after_failure(&now, None), Some(LeaderSource::Static));
    assert_eq!(base(&l), "http://a:1");
    // An unusable hint is ignored; rotation applies.
    let now = l.current().unwrap();
    assert_eq!(
        l.after_failure(&now, Some("  ")),
        Some(LeaderSource::Static)
    );
    assert_eq!(base(&l), "http://b:2");
}

#[test]
fn a_single_server_stays_put() {
    let l = locator(&["a:1"]);
    let first = l.current().unwrap();
    assert_eq!(l.after_failure(&first, None), None);
    assert_eq!(l.current().unwrap().epoch, 0);
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd_leaders_are_followed_by_term() {
    let l = locator(&[]);
    assert!(l.current().is_none());
    let mut epochs = l.subscribe();
    l.observe_leader(&leader("10.0.0.1:7480", 5));
    assert_eq!(base(&l), "http://10.0.0.1:7480");
    assert!(epochs.has_changed().unwrap());
    epochs.borrow_and_update();
    // An older record (a lagging watch) is ignored; a newer one is followed.
    l.observe_leader(&leader("10.0.0.2:7480", 4));
    assert_eq!(base(&l), "http://10.0.0.1:7480");
    assert!(!epochs.has_changed().unwrap());
    l.observe_leader(&leader("10.0.0.2:7480", 9));
    assert_eq!(base(&l), "http://10.0.0.2:7480");
    assert_eq!(l.metrics().leader_changes(LeaderSource::Etcd), 2);
    assert!(l.describe().is_empty(), "no etcd attached, no static list");
}

#[test]
fn bad_static_addresses_are_refused() {
    let e = LeaderLocator::new(
        vec!["a:1".into(), "http://[bad".into()],
        crate::server_conn::Connector::new(None).unwrap(),
        FailoverMetrics::unregistered(),
    )
    .unwrap_err();
    assert_eq!(e.code_str(), "INVALID_ARGUMENT");
}

#[test]
fn with_a_ca_file_bare_addresses_and_etcd_leaders_use_https() {
    let dir = tempfile::tempdir().unwrap();
    let pki = crescent_tls::test_certs::TestPki::localhost(dir.path());
    let connector = crate::server_conn::Connector::with_ca_file(None, Some(&pki.ca_file)).unwrap();
    let l = LeaderLocator::new(
        vec!["a:1".into(), "https://b:2/".into(), "http://c:3".into()],
        connector,
        FailoverMetrics::unregistered(),
    )
    .unwrap();
    assert_eq!(base(&l), "https://a:1");
    // The list still rotates: each address compares equal to its own normalized form.
    let first = l.current().unwrap();
    assert_eq!(l.after_failure(&first, None), Some(LeaderSource::Static));
    assert_eq!(base(&l), "https://b:2");
    let second = l.current().unwrap();
    l.after_failure(&second, None);
    assert_eq!(base(&l), "http://c:3", "an explicit scheme is kept");
    // A leader key with the scheme (an active with [tls]) and one without both get TLS.
    #[cfg(feature = "etcd")]
    {
        l.observe_leader(&leader("https://10.0.0.1:7480", 5));
        assert_eq!(base(&l), "https://10.0.0.1:7480");
        l.observe_leader(&leader("10.0.0.2:7480", 6));
        assert_eq!(base(&l), "https://10.0.0.2:7480");
    }
    // Without a CA the bare form stays http://, and a bad CA file is the caller's mistake.
    assert_eq!(base(&locator(&["a:1"])), "http://a:1");
    let bad = crate::server_conn::Connector::with_ca_file(None, Some(&dir.path().join("none")));
    assert_eq!(bad.unwrap_err().code_str(), "INVALID_ARGUMENT");
}

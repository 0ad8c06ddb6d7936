use super::*;

#[test]
fn defaults_are_valid_and_documented_values() {
    let c = Config::default();
    c.validate().unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:7480");
    assert_eq!(c.data_dir, PathBuf::from("./crescent-data"));
    assert_eq!(c.journal.backend, JournalBackendKind::File);
}

#[test]
fn unknown_key_is_refused_naming_it() {
    let err = Config::from_toml(Path::new("x.toml"), "listne = \"127.0.0.1:1\"\n").unwrap_err();
    assert!(err.to_string().contains("listne"), "{err}");
    let err =
        Config::from_toml(Path::new("x.toml"), "[journal]\nbackedn = \"file\"\n").unwrap_err();
    assert!(err.to_string().contains("backedn"), "{err}");
}

#[test]
fn out_of_range_values_fail_closed() {
    let c = Config::from_toml(Path::new("x.toml"), "[snapshot]\nretain = 0\n").unwrap();
    let err = c.validate().unwrap_err();
    assert!(err.to_string().contains("snapshot.retain"), "{err}");
    let c = Config::from_toml(Path::new("x.toml"), "[journal]\nsegment_bytes = 10\n").unwrap();
    assert!(c
        .validate()
        .unwrap_err()
        .to_string()
        .contains("journal.segment_bytes"));
}

#[test]
fn bad_types_and_enums_are_refused() {
    assert!(Config::from_toml(Path::new("x.toml"), "listen = 5\n").is_err());
    assert!(Config::from_toml(Path::new("x.toml"), "[journal]\nbackend = \"rocks\"\n").is_err());
    assert!(Config::from_toml(Path::new("x.toml"), "listen = \"nohost\"\n").is_err());
}

#[test]
fn partial_file_keeps_other_defaults() {
    let c = Config::from_toml(
        Path::new("x.toml"),
        "data_dir = \"/tmp/x\"\n[journal]\nbackend = \"sled\"\nrecovery_mode = \"absolute_consistency\"\n",
    )
    .unwrap();
    assert_eq!(c.journal.backend, JournalBackendKind::Sled);
    assert_eq!(c.journal.recovery_mode, RecoveryMode::AbsoluteConsistency);
    assert_eq!(c.snapshot, SnapshotConfig::default());
    // The sled backend is a build option: a build without it refuses the setting by name.
    let with_sled = cfg!(feature = "sled");
    match c.validate() {
        Ok(()) => assert!(with_sled, "sled accepted by a build without it"),
        Err(e) => {
            assert!(!with_sled, "{e}");
            assert!(e.to_string().contains("journal.backend"), "{e}");
        }
    }
}

#[test]
fn printed_config_round_trips() {
    let c = Config::default();
    let back = Config::from_toml(Path::new("x.toml"), &c.to_toml()).unwrap();
    assert_eq!(back, c);
}

#[test]
fn store_section_defaults_and_validation_name_the_key() {
    let c = Config::default();
    assert_eq!(c.store.embedded_segment_bytes, 1 << 30);
    assert_eq!(c.store.client_ttl_secs, 10);
    assert_eq!(c.store.transfer_listen, "127.0.0.1:0");
    let sc = c.store.store_config();
    sc.validate().unwrap();
    assert_eq!(sc.lease_ttl_ms, 10_000);
    assert_eq!(sc.discard_timeout_ms, 30_000);
    assert_eq!(sc.release_timeout_ms, 600_000);

    let c = Config::from_toml(
        Path::new("x.toml"),
        "[store]\nembedded_segment_bytes = 0\nclient_ttl_secs = 3\ndefault_placement = \"free_ratio_first\"\n",
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.store.embedded_segment_bytes, 0);
    assert_eq!(
        c.store.default_placement,
        crescent_wire::store::Placement::FreeRatioFirst
    );

    for (text, key) in [
        (
            "[store]\nembedded_segment_bytes = 10\n",
            "store.embedded_segment_bytes",
        ),
        (
            "[store]\ntransfer_listen = \"nowhere\"\n",
            "store.transfer_listen",
        ),
        ("[store]\nclient_ttl_secs = 0\n", "store.client_ttl_secs"),
        ("[store]\nhigh_watermark = 1.5\n", "store.high_watermark"),
        ("[store]\nevict_ratio = 0.0\n", "store.evict_ratio"),
        ("[store]\nmax_object_bytes = 0\n", "store.max_object_bytes"),
        (
            "[store]\ndiscard_timeout_secs = 100\nrelease_timeout_secs = 50\n",
            "store.release_timeout_secs",
        ),
        (
            "[store]\nlease_ttl_ms = 5000\nmax_lease_ms = 1000\n",
            "store.max_lease_ms",
        ),
        ("[store]\nrpc_listen = \"somewhere\"\n", "store.rpc_listen"),
        (
            "[store]\nrpc_local_socket = \"relative/rpc.sock\"\n",
            "store.rpc_local_socket",
        ),
        (
            "[store]\nrpc_busy_poll_us = 20000\n",
            "store.rpc_busy_poll_us",
        ),
    ] {
        let c = Config::from_toml(Path::new("x.toml"), text).unwrap();
        let err = c.validate().unwrap_err();
        assert!(err.to_string().contains(key), "{text}: {err}");
    }
    let err = Config::from_toml(Path::new("x.toml"), "[store]\nembeded = 1\n").unwrap_err();
    assert!(err.to_string().contains("embeded"), "{err}");
    assert!(Config::from_toml(
        Path::new("x.toml"),
        "[store]\ndefault_placement = \"nearest\"\n"
    )
    .is_err());
}

#[test]
fn rpc_listen_resolves_against_the_http_address() {
    let http: std::net::SocketAddr = "10.0.0.5:7480".parse().unwrap();
    let mut s = crate::config::StoreSettings::default();
    assert_eq!(s.rpc_listen, "auto");
    assert_eq!(s.rpc_listen_addr(http), Some("10.0.0.5:0".parse().unwrap()));
    s.rpc_listen = "off".into();
    assert_eq!(s.rpc_listen_addr(http), None);
    s.rpc_listen = "127.0.0.1:7481".into();
    assert_eq!(
        s.rpc_listen_addr(http),
        Some("127.0.0.1:7481".parse().unwrap())
    );
    let c = Config::from_toml(Path::new("x.toml"), "[store]\nrpc_listen = \"off\"\n").unwrap();
    c.validate().unwrap();
}

fn invalid_key(text: &str) -> &'static str {
    let c = Config::from_toml(Path::new("x.toml"), text).unwrap();
    match c.validate() {
        Err(ConfigError::Invalid { key, .. }) => key,
        other => panic!("expected an invalid config, got {other:?}"),
    }
}

#[test]
fn converted_values_are_range_checked_before_conversion() {
    // 18446744073709552 s is past u64::MAX ms: it must be refused, not wrap.
    let cases = [
        (
            "[store]\nrebuild_degraded_timeout_secs = 18446744073709552\n",
            "store.rebuild_degraded_timeout_secs",
        ),
        (
            "[store]\nrebuild_degraded_timeout_secs = 0\n",
            "store.rebuild_degraded_timeout_secs",
        ),
        (
            "[store]\nrebuild_degraded_timeout_secs = 86401\n",
            "store.rebuild_degraded_timeout_secs",
        ),
        (
            "[store]\nclient_ttl_secs = 18446744073709552\n",
            "store.client_ttl_secs",
        ),
        (
            "[store]\ndiscard_timeout_secs = 18446744073709552\n",
            "store.discard_timeout_secs",
        ),
        (
            "[store]\nrelease_timeout_secs = 18446744073709552\n",
            "store.release_timeout_secs",
        ),
        (
            "[snapshot]\nevery_secs = 9223372036854775807\n",
            "snapshot.every_secs",
        ),
        (
            "[http]\nshutdown_timeout_secs = 9223372036854775807\n",
            "http.shutdown_timeout_secs",
        ),
    ];
    for (text, key) in cases {
        assert_eq!(invalid_key(text), key, "{text}");
    }
    let c = Config::from_toml(
        Path::new("x.toml"),
        "[store]\nrebuild_degraded_timeout_secs = 86400\n[snapshot]\nevery_secs = 604800\n",
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.store.rebuild_degraded_timeout_ms(), 86_400_000);
}

#[test]
fn rpc_local_socket_resolves_against_the_data_dir() {
    let mut s = crate::config::StoreSettings::default();
    let dir = Path::new("/var/lib/crescent");
    assert_eq!(s.rpc_local_socket, "auto");
    assert_eq!(
        s.rpc_local_path(dir, false),
        Some(Path::new("/var/lib/crescent/rpc.sock").to_path_buf())
    );
    assert_eq!(s.rpc_local_path(dir, true), None, "auto is off with [tls]");
    let deep = Path::new("/").join("d".repeat(120));
    assert_eq!(
        s.rpc_local_path(&deep, false),
        None,
        "too long for sun_path: TCP only"
    );
    s.rpc_local_socket = "/run/crescent.sock".into();
    for tls in [false, true] {
        assert_eq!(
            s.rpc_local_path(dir, tls),
            Some(Path::new("/run/crescent.sock").to_path_buf())
        );
    }
    s.rpc_local_socket = "off".into();
    assert_eq!(s.rpc_local_path(dir, false), None);
    s.rpc_local_socket = format!("/{}", "x".repeat(120));
    let err = s.validate().unwrap_err();
    assert!(err.to_string().contains("store.rpc_local_socket"), "{err}");
}

#[test]
fn scheduling_and_tenant_weights_are_range_checked() {
    let c = Config::from_toml(
        Path::new("x.toml"),
        "[[tenants]]\nname = \"a\"\n[[tenants]]\nname = \"b\"\nweight = 4\n",
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!((c.tenants[0].weight, c.tenants[1].weight), (1, 4));
    assert_eq!(
        invalid_key("[[tenants]]\nname = \"a\"\nweight = 0\n"),
        "tenants.weight"
    );
    assert_eq!(
        invalid_key("[[tenants]]\nname = \"a\"\nweight = 1001\n"),
        "tenants.weight"
    );
    assert_eq!(
        invalid_key("[scheduling]\nmax_batch_bytes = 0\n"),
        "scheduling.max_batch_bytes"
    );
}

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
    c.validate().unwrap();
    assert_eq!(c.journal.backend, JournalBackendKind::Sled);
    assert_eq!(c.journal.recovery_mode, RecoveryMode::AbsoluteConsistency);
    assert_eq!(c.snapshot, SnapshotConfig::default());
}

#[test]
fn printed_config_round_trips() {
    let c = Config::default();
    let back = Config::from_toml(Path::new("x.toml"), &c.to_toml()).unwrap();
    assert_eq!(back, c);
}

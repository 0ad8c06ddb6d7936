//! `[cold]` and `[[cold.devices]]`: the one-device form, several devices, and the refusals.

use std::path::Path;

use crate::config::{Config, ConfigError};

fn parse(text: &str) -> Result<Config, ConfigError> {
    let c = Config::from_toml(Path::new("crescentd.toml"), text)?;
    c.validate()?;
    Ok(c)
}

fn invalid_key(text: &str) -> &'static str {
    match parse(text) {
        Err(ConfigError::Invalid { key, .. }) => key,
        other => panic!("expected an invalid config, got {other:?}"),
    }
}

#[test]
fn the_one_device_form_is_unchanged() {
    let c = parse("[cold]\ndevice_id = \"ssd0\"\ncapacity_bytes = 1000\n").unwrap();
    let specs = c.cold.device_specs(Path::new("/data"));
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0].device_id, "ssd0");
    assert_eq!(specs[0].root, Path::new("/data/cold/ssd0"));
    assert!(!specs[0].explicit_root);
    assert_eq!(specs[0].capacity_bytes, 1000);
    assert_eq!(specs[0].tags, vec!["local".to_string()]);
    assert!(specs[0].schedulable);
    // The default is the one `local0` device under the data dir.
    let d = Config::default().cold.device_specs(Path::new("/d"));
    assert_eq!(
        (d.len(), d[0].device_id.as_str(), d[0].root.as_path()),
        (1, "local0", Path::new("/d/cold/local0"))
    );
}

#[test]
fn several_devices_in_id_order_with_their_defaults() {
    let c = parse(
        r#"
[cold]
offload_mode = "passthrough"

[[cold.devices]]
id = "nvme1"
root = "/mnt/nvme1/crescent"
capacity_bytes = 2000
tags = ["ssd"]

[[cold.devices]]
id = "nfs0"
kind = "local_dir"
schedulable = false
"#,
    )
    .unwrap();
    let specs = c.cold.device_specs(Path::new("/data"));
    let ids: Vec<_> = specs.iter().map(|s| s.device_id.as_str()).collect();
    assert_eq!(ids, ["nfs0", "nvme1"]);
    assert_eq!(specs[0].root, Path::new("/data/cold/nfs0"));
    assert!(!specs[0].schedulable);
    assert_eq!(specs[0].capacity_bytes, 64 << 30);
    assert!(specs[0].tags.is_empty());
    assert_eq!(specs[1].root, Path::new("/mnt/nvme1/crescent"));
    assert!(specs[1].explicit_root);
    assert_eq!(specs[1].capacity_bytes, 2000);
    assert_eq!(specs[1].tags, vec!["ssd".to_string()]);
    // It serializes back to the same settings.
    let again = parse(&c.to_toml()).unwrap();
    assert_eq!(again.cold, c.cold);
}

#[test]
fn bad_device_lists_are_refused_with_the_key() {
    let dup = "[[cold.devices]]\nid = \"a\"\n[[cold.devices]]\nid = \"a\"\n";
    assert_eq!(invalid_key(dup), "cold.devices.id");
    let same_root =
        "[[cold.devices]]\nid = \"a\"\nroot = \"/x\"\n[[cold.devices]]\nid = \"b\"\nroot = \"/x\"\n";
    assert_eq!(invalid_key(same_root), "cold.devices.root");
    let kind = "[[cold.devices]]\nid = \"a\"\nkind = \"tape\"\n";
    assert_eq!(invalid_key(kind), "cold.devices.kind");
    let zero = "[[cold.devices]]\nid = \"a\"\ncapacity_bytes = 0\n";
    assert_eq!(invalid_key(zero), "cold.devices.capacity_bytes");
    let bad_id = "[[cold.devices]]\nid = \"\"\n";
    assert_eq!(invalid_key(bad_id), "cold.devices.id");
    let empty_tag = "[[cold.devices]]\nid = \"a\"\ntags = [\"\"]\n";
    assert_eq!(invalid_key(empty_tag), "cold.devices.tags");
    let both = "[cold]\nroot = \"/x\"\n[[cold.devices]]\nid = \"a\"\n";
    assert_eq!(invalid_key(both), "cold.devices");
    assert!(parse("[[cold.devices]]\nid = \"a\"\nsize = 3\n").is_err());
    // The one-device form keeps its own keys in errors.
    assert_eq!(
        invalid_key("[cold]\ncapacity_bytes = 0\n"),
        "cold.capacity_bytes"
    );
}

#[test]
fn durations_are_bounded_so_deadlines_cannot_overflow() {
    // The largest integer TOML holds.
    let huge = i64::MAX;
    let cases = [
        ("health_probe_interval_ms", "cold.health_probe_interval_ms"),
        ("retry_max_ms", "cold.retry_max_ms"),
        ("promotion_max_defer_ms", "cold.promotion_max_defer_ms"),
        ("prune_terminal_after_ms", "cold.prune_terminal_after_ms"),
    ];
    for (field, key) in cases {
        let text = format!("[cold]\nenabled = true\n{field} = {huge}\n");
        assert_eq!(invalid_key(&text), key, "{field}");
    }
    // The largest accepted values still start.
    parse(
        "[cold]\nenabled = true\nhealth_probe_interval_ms = 3600000\nretry_max_ms = 3600000\n\
         promotion_max_defer_ms = 3600000\nprune_terminal_after_ms = 31536000000\n",
    )
    .unwrap();
}

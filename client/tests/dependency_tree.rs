//! The client library stays embeddable: its normal dependency tree holds none of the server's
//! machinery (docs/architecture.md "Three client packages"): no CLI parser, no actor runtime, no
//! journal or sled, no log subscriber (an application installs its own). Checked with `cargo
//! tree`, with and without every feature, so a new dependency edge anywhere below
//! crescent-client fails here.

use std::path::Path;
use std::process::Command;

/// Crate families that must not appear (`clap` also covers `clap_builder`, `clap_derive`, ...).
const FORBIDDEN: &[&str] = &[
    "clap",
    "actix",
    "sled",
    "tracing-subscriber",
    "crescent-journal",
    "crescent-snapshot",
];

/// The package names in `cargo tree -p crescent-client -e normal` with the given extra flags.
fn normal_dependencies(extra: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let out = Command::new(cargo)
        .args(["tree", "--offline", "--manifest-path"])
        .arg(&manifest)
        .args(["-p", "crescent-client", "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}"])
        .args(extra)
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {extra:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = String::from_utf8(out.stdout)
        .expect("utf-8 cargo tree output")
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(
        names.iter().any(|n| n == "crescent-client") && names.len() > 10,
        "cargo tree {extra:?} printed no dependency tree: {names:?}"
    );
    names
}

fn is_forbidden(name: &str) -> bool {
    FORBIDDEN.iter().any(|family| {
        name == *family
            || name.starts_with(&format!("{family}-"))
            || name.starts_with(&format!("{family}_"))
    })
}

#[test]
fn forbidden_families_are_recognised() {
    for name in [
        "clap",
        "clap_builder",
        "actix",
        "actix-rt",
        "actix_derive",
        "sled",
    ] {
        assert!(is_forbidden(name), "{name}");
    }
    assert!(is_forbidden("tracing-subscriber"));
    assert!(is_forbidden("crescent-journal"));
    for name in [
        "tracing",
        "tracing-core",
        "sledge",
        "crescent-client",
        "tokio",
    ] {
        assert!(!is_forbidden(name), "{name}");
    }
}

#[test]
fn default_features_link_no_server_machinery() {
    let found: Vec<String> = normal_dependencies(&[])
        .into_iter()
        .filter(|n| is_forbidden(n))
        .collect();
    assert!(
        found.is_empty(),
        "crescent-client depends on {found:?}; see `cargo tree -p crescent-client -e normal -i NAME`"
    );
}

#[test]
fn all_features_link_no_server_machinery() {
    let found: Vec<String> = normal_dependencies(&["--all-features"])
        .into_iter()
        .filter(|n| is_forbidden(n))
        .collect();
    assert!(
        found.is_empty(),
        "crescent-client --all-features depends on {found:?}; see `cargo tree -p crescent-client \
         -e normal --all-features -i NAME`"
    );
}

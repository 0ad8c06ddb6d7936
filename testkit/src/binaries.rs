//! Where the workspace binaries under test live, building them when needed.
//!
//! Integration tests run from `TARGET/PROFILE/deps/`; the workspace's binaries sit one level up
//! in `TARGET/PROFILE/`. `cargo test -p crescent-tests` does not build other packages' binaries,
//! so [`ensure_workspace_binary`] runs `cargo build` for the one it needs (once per test
//! process); `CRESCENT_BIN_DIR` points at prebuilt binaries instead and disables building, and
//! `CRESCENTD_BIN` / `CRESCENT_BIN` name one binary each.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The directory holding the workspace binaries of the profile this test was built with.
pub fn workspace_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CRESCENT_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current test executable");
    let deps = exe.parent().expect("test executable has a parent dir");
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("deps dir has a parent")
    } else {
        deps
    };
    dir.to_path_buf()
}

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate lives inside the workspace")
        .to_path_buf()
}

/// Builds (if needed) and returns binary `bin` of workspace package `package`. Panics with the
/// build output when it cannot be built or is not where the build should have put it.
///
/// The build always runs (it is a no-op when up to date) so a test never drives a stale binary
/// left over from an older checkout. With `CRESCENT_BIN_DIR` set, nothing is built.
pub fn ensure_workspace_binary(package: &str, bin: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<(String, PathBuf)>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, path)) = built.iter().find(|(b, _)| b == bin) {
        return path.clone();
    }
    let dir = workspace_bin_dir();
    let path = dir.join(bin);
    if std::env::var_os("CRESCENT_BIN_DIR").is_none() {
        build_binary(package, bin, &dir);
    }
    assert!(
        path.is_file(),
        "binary {bin} (package {package}) not found at {}; build it with `cargo build -p \
         {package} --bin {bin}` or point CRESCENT_BIN_DIR at a directory holding it",
        path.display()
    );
    built.push((bin.to_string(), path.clone()));
    path
}

/// An optional companion binary next to the others: `Some(path)` if it exists, else `None`
/// (callers print a note and skip what needs it). Never builds.
pub fn optional_workspace_binary(bin: &str) -> Option<PathBuf> {
    let path = workspace_bin_dir().join(bin);
    path.is_file().then_some(path)
}

fn build_binary(package: &str, bin: &str, bin_dir: &Path) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "-p", package, "--bin", bin]);
    // Build with the profile this test was built with, into the same target dir.
    match bin_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(profile) => {
            cmd.args(["--profile", profile]);
        }
    }
    if let Some(target) = bin_dir.parent() {
        cmd.arg("--target-dir").arg(target);
    }
    eprintln!("building {bin}: {cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo:?} to build {bin}: {e}"));
    assert!(
        out.status.success(),
        "`cargo build -p {package} --bin {bin}` failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `crescent` binary a test process registered ([`use_crescent_bin`]).
static CRESCENT: OnceLock<PathBuf> = OnceLock::new();

/// Makes [`crescent_bin`] return `path` in this test process: the CLI's own tests pass the
/// binary cargo built for them (`CARGO_BIN_EXE_crescent`).
pub fn use_crescent_bin(path: &Path) {
    let _ = CRESCENT.set(path.to_path_buf());
}

/// The `crescent` CLI: `CRESCENT_BIN` (e.g. an older build, to show a reproduction fails
/// there), else the one registered with [`use_crescent_bin`], else, in the CLI's own tests run
/// by cargo (`CARGO_PKG_NAME` is set for the test process), the one cargo built for them, else
/// built into this profile's dir. The CLI's tests never build it again: a build with other
/// features would replace the binary under the tests running it.
pub fn crescent_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CRESCENT_BIN") {
        return PathBuf::from(p);
    }
    if let Some(p) = CRESCENT.get() {
        return p.clone();
    }
    let built_for_cli_tests = workspace_bin_dir().join("crescent");
    if std::env::var("CARGO_PKG_NAME").is_ok_and(|p| p == "crescent-cli")
        && built_for_cli_tests.is_file()
    {
        return built_for_cli_tests;
    }
    ensure_workspace_binary("crescent-cli", "crescent")
}

/// crescentd: `CRESCENTD_BIN`, else built (a no-op when up to date) into this profile's dir.
pub fn crescentd_bin() -> PathBuf {
    match std::env::var_os("CRESCENTD_BIN") {
        Some(p) => PathBuf::from(p),
        None => ensure_workspace_binary("crescent-server", "crescentd"),
    }
}

/// `crescent GLOBALS` (the CLI, built if needed) with no input and none of the caller's
/// `CRESCENT_*` settings, so only `globals` and the test's own arguments choose its target.
pub fn crescent_command(globals: &[&str]) -> Command {
    let mut cmd = Command::new(crescent_bin());
    cmd.args(globals)
        .env_remove("CRESCENT_SERVER")
        .env_remove("CRESCENT_ETCD")
        .env_remove("CRESCENT_REDIS")
        .env_remove("CRESCENT_CLUSTER")
        .env_remove("CRESCENT_MESH")
        .env_remove("CRESCENT_TENANT")
        .env_remove("CRESCENT_DOMAIN")
        .env_remove("CRESCENT_TOKEN")
        .env_remove("CRESCENT_CA_FILE")
        .stdin(Stdio::null());
    cmd
}

//! Building the bundled transfer engine (`c/`) with the system C compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `sources` into `dir/name` as a shared library.
pub fn compile(sources: &[&Path], dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    let status = Command::new("cc")
        .args([
            "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&out)
        .args(sources)
        .arg("-lpthread")
        .status()
        .expect("the system C compiler `cc` runs");
    assert!(status.success(), "cc failed on {sources:?}");
    out
}

/// The mini engine (both of its sources) as `dir/libmini_transfer_engine.so`.
pub fn mini_engine(dir: &Path) -> PathBuf {
    let c = Path::new(env!("CARGO_MANIFEST_DIR")).join("c");
    let sources = [
        c.join("mini_transfer_engine.c"),
        c.join("mini_transfer_engine_net.c"),
    ];
    let sources: Vec<&Path> = sources.iter().map(PathBuf::as_path).collect();
    compile(&sources, dir, "libmini_transfer_engine.so")
}

//! Turning crescentd's `[auth]` on in the real-binary tests: a key file both nodes of a pair
//! load, and tokens issued from it with `crescent token issue` (offline, as an operator would).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use crate::binaries::ensure_workspace_binary;

/// A signing key file (32 random bytes, mode 0600) in its own temporary directory.
#[derive(Debug)]
pub struct AuthKey {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl AuthKey {
    pub fn new() -> AuthKey {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("auth.key");
        let bytes: [u8; 32] = rand::random();
        std::fs::write(&path, bytes).expect("writing the key");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
        AuthKey { dir, path }
    }

    /// The `[auth]` section of a crescentd config using this key.
    pub fn config_section(&self) -> String {
        format!(
            "[auth]\nsecret_file = {:?}\n",
            self.path.display().to_string()
        )
    }

    /// `crescent token issue` for `role` (a client of `tenant`), valid `ttl_secs`.
    pub fn token(&self, role: &str, tenant: Option<&str>, ttl_secs: u64) -> String {
        let bin = ensure_workspace_binary("crescent-client", "crescent");
        let mut cmd = std::process::Command::new(bin);
        cmd.env_remove("CRESCENT_TENANT")
            .env_remove("CRESCENT_TOKEN");
        if let Some(t) = tenant {
            cmd.args(["--tenant", t]);
        }
        cmd.args(["token", "issue", "--role", role, "--secret-file"])
            .arg(&self.path)
            .args(["--ttl-secs", &ttl_secs.to_string()]);
        let out = cmd.output().expect("running crescent token issue");
        assert!(
            out.status.success(),
            "token issue: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("a token is text")
            .trim()
            .to_string()
    }
}

impl Default for AuthKey {
    fn default() -> Self {
        Self::new()
    }
}

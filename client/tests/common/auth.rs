//! Running crescentd with `[auth]` on, and issuing tokens for tests with `crescent token
//! issue` (the harness can put any test on auth with [`AuthKey::server_args`] and a token).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::crescent_bin;

/// A signing key file (mode 0600) in its own temporary directory.
#[derive(Debug)]
pub struct AuthKey {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl AuthKey {
    pub fn new() -> AuthKey {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.key");
        let bytes: Vec<u8> = (0..32u32).map(|i| (i * 37 + 11) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        AuthKey { dir, path }
    }

    /// crescentd arguments turning auth on with this key.
    pub fn server_args(&self) -> Vec<String> {
        vec!["--auth-secret-file".into(), self.path.display().to_string()]
    }

    /// `crescent token issue --json`: (token, token id).
    pub fn issue(&self, role: &str, tenant: Option<&str>, owner: Option<&str>) -> (String, String) {
        self.issue_for(role, tenant, owner, None)
    }

    /// [`AuthKey::issue`] with `--ttl-secs` (`None`: the default).
    pub fn issue_for(
        &self,
        role: &str,
        tenant: Option<&str>,
        owner: Option<&str>,
        ttl_secs: Option<u64>,
    ) -> (String, String) {
        let mut cmd = std::process::Command::new(crescent_bin());
        cmd.env_remove("CRESCENT_TENANT")
            .env_remove("CRESCENT_TOKEN")
            .args(["--json", "token", "issue", "--role", role, "--secret-file"])
            .arg(&self.path);
        if let Some(t) = tenant {
            cmd.args(["--tenant", t]);
        }
        if let Some(o) = owner {
            cmd.args(["--owner", o]);
        }
        if let Some(ttl) = ttl_secs {
            cmd.args(["--ttl-secs", &ttl.to_string()]);
        }
        let out = cmd.output().expect("running crescent token issue");
        assert!(
            out.status.success(),
            "token issue: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            v["token"].as_str().unwrap().to_string(),
            v["id"].as_str().unwrap().to_string(),
        )
    }

    /// A token for `role` (client of `tenant`, owner of `owner`).
    pub fn token(&self, role: &str, tenant: Option<&str>, owner: Option<&str>) -> String {
        self.issue(role, tenant, owner).0
    }
}

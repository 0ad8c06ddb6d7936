//! Turning crescentd's `[auth]` on in the real-binary tests (docs/security.md): a key file
//! (32 random bytes, mode 0600) in the test's temp dir, which both nodes of a pair load, and
//! tokens issued from it. The harness issues its tokens in-process with `crescent-auth` (the
//! same code as `crescent token issue`, without a process per token); [`AuthKey::token`] runs
//! the CLI for the tests whose subject is the CLI's issuing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crescent_auth::{Claims, KeySet, Role};

use crate::binaries::ensure_workspace_binary;

/// How long harness tokens live: longer than any test.
const HARNESS_TTL_SECS: u64 = 24 * 3600;

/// A signing key file and the key set loaded from it.
#[derive(Debug, Clone)]
pub struct AuthKey {
    pub path: PathBuf,
    keys: KeySet,
    /// The temporary directory holding the file, when the key made its own.
    _dir: Option<std::sync::Arc<tempfile::TempDir>>,
}

impl AuthKey {
    /// A fresh key in its own temporary directory.
    pub fn new() -> AuthKey {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut key = Self::at(&dir.path().join("auth.key"));
        key._dir = Some(std::sync::Arc::new(dir));
        key
    }

    /// The key file `path`: written (32 random bytes, mode 0600) when absent, else loaded, so
    /// a restart on the same dir and both nodes of a pair use the same key.
    pub fn at(path: &Path) -> AuthKey {
        if !path.exists() {
            let bytes: [u8; 32] = rand::random();
            std::fs::write(path, bytes).expect("writing the key");
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .expect("chmod 600");
        }
        let keys = KeySet::from_files(path, &[] as &[PathBuf])
            .unwrap_or_else(|e| panic!("loading the key {}: {e}", path.display()));
        AuthKey {
            path: path.to_path_buf(),
            keys,
            _dir: None,
        }
    }

    /// The `[auth]` section of a crescentd config using this key.
    pub fn config_section(&self) -> String {
        format!(
            "[auth]\nsecret_file = {:?}\n",
            self.path.display().to_string()
        )
    }

    /// An `admin` token: the harness's and operators' calls (segments, snapshots, metrics
    /// of protected routes, rebuild control).
    pub fn admin(&self) -> String {
        self.issue(Role::Admin, None, None)
    }

    /// A `client` token bound to `tenant`.
    pub fn client(&self, tenant: &str) -> String {
        self.issue(Role::Client, Some(tenant), None)
    }

    /// An `owner` token for owner id `owner`.
    pub fn owner(&self, owner: &str) -> String {
        self.issue(Role::Owner, None, Some(owner))
    }

    fn issue(&self, role: Role, tenant: Option<&str>, owner: Option<&str>) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs();
        let claims = Claims::new(
            role,
            tenant.map(str::to_string),
            owner.map(str::to_string),
            now,
            HARNESS_TTL_SECS,
            uuid::Uuid::new_v4().to_string(),
        )
        .expect("valid claims");
        crescent_auth::issue(&self.keys, &claims).expect("signing a token")
    }

    /// `crescent token issue` for `role` (a client of `tenant`), valid `ttl_secs`.
    pub fn token(&self, role: &str, tenant: Option<&str>, ttl_secs: u64) -> String {
        let bin = ensure_workspace_binary("crescent-cli", "crescent");
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

/// The tenant of clients that name none (the tests' objects live there unless they say).
pub const DEFAULT_TENANT: &str = crescent_wire::store::DEFAULT_TENANT;

/// `options` sending `token` with every request (open mode: none).
pub fn with_token(
    options: crescent_client::ClientOptions,
    token: Option<String>,
) -> crescent_client::ClientOptions {
    match token {
        Some(t) => options.with_token(crescent_client::BearerToken::new(t)),
        None => options,
    }
}

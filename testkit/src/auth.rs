//! Turning crescentd's `[auth]` on in the real-binary tests (docs/security.md): a key file
//! (32 random bytes, mode 0600) in the test's temp dir, which both nodes of a pair load, and
//! tokens issued from it. The harness issues its tokens in-process with `crescent-auth` (the
//! same code as `crescent token issue`, without a process per token); [`AuthKey::issue`] runs
//! the CLI for the tests whose subject is the CLI's issuing, and [`AuthKey::token_for_cli`]
//! picks the token a `crescent` command needs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crescent_auth::{Claims, KeySet, Role};

use crate::binaries::crescent_bin;

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

    /// Writes this key as the key file `path` (mode 0600): a node started again where a
    /// removed one listened takes the same key, so its clients' tokens stay valid.
    pub fn write_to(&self, path: &Path) {
        std::fs::write(path, self.keys.signing().secret()).expect("writing the key");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    }

    /// crescentd arguments turning `[auth]` on with this key.
    pub fn server_args(&self) -> Vec<String> {
        vec!["--auth-secret-file".into(), self.path.display().to_string()]
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
        self.sign(Role::Admin, None, None)
    }

    /// A `client` token bound to `tenant`.
    pub fn client(&self, tenant: &str) -> String {
        self.sign(Role::Client, Some(tenant), None)
    }

    /// An `owner` token for owner id `owner`.
    pub fn owner(&self, owner: &str) -> String {
        self.sign(Role::Owner, None, Some(owner))
    }

    fn sign(&self, role: Role, tenant: Option<&str>, owner: Option<&str>) -> String {
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
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("token issue JSON");
        let field = |name: &str| v[name].as_str().expect("a token and its id").to_string();
        (field("token"), field("id"))
    }

    /// A token for `role` (client of `tenant`, owner of `owner`), by `crescent token issue`.
    pub fn token(&self, role: &str, tenant: Option<&str>, owner: Option<&str>) -> String {
        self.issue(role, tenant, owner).0
    }

    /// The token the harness gives a `crescent ARGS` process: the owner's for `owner --id ID`,
    /// an admin's for operator commands, else a client's of the `--tenant` it names (or the
    /// default tenant).
    pub fn token_for_cli(&self, args: &[&str]) -> String {
        let value_of = |flag: &str| {
            args.iter()
                .position(|a| *a == flag)
                .and_then(|i| args.get(i + 1).copied())
        };
        match subcommand(args) {
            Some("owner") => match value_of("--id") {
                Some(id) => self.owner(id),
                None => self.admin(),
            },
            Some(
                "segments" | "cold" | "offload" | "evict" | "weights" | "token" | "bench" | "admin",
            ) => self.admin(),
            // Setting a quota and listing tenants are the admin's; showing one a client of that
            // tenant may do.
            Some("tenant") if args.contains(&"quota") || args.contains(&"ls") => self.admin(),
            _ => self.client(value_of("--tenant").unwrap_or(DEFAULT_TENANT)),
        }
    }
}

/// The `crescent` subcommand in `args` (global options and their values skipped).
fn subcommand<'a>(args: &[&'a str]) -> Option<&'a str> {
    const WITH_VALUE: [&str; 7] = [
        "--server",
        "--etcd",
        "--cluster",
        "--failover-timeout-ms",
        "--tenant",
        "--domain",
        "--token",
    ];
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if WITH_VALUE.contains(&a) {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            return Some(a);
        }
    }
    None
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

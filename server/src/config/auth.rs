//! `[auth]`: the token signing key and the open-mode guard (docs/security.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSettings {
    /// The signing key (>= 32 random bytes, not readable by group or others). Set: every route
    /// but `/healthz` and `/metrics` needs a token. Unset: crescentd runs open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// Verification-only keys: the previous ones during a key rotation.
    pub previous_secret_files: Vec<PathBuf>,
    /// Run open on a non-loopback address (`crescentd --insecure`). Never needed with a key.
    pub insecure: bool,
    /// How long a data-plane grant stays valid after crescentd minted it (docs/security.md
    /// "The data plane"): the window for the transfers of one put or one read.
    pub data_grant_ttl_secs: u64,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            secret_file: None,
            previous_secret_files: Vec::new(),
            insecure: false,
            data_grant_ttl_secs: 600,
        }
    }
}

impl AuthSettings {
    pub fn enabled(&self) -> bool {
        self.secret_file.is_some()
    }

    /// Without a key, every listener must be loopback unless `insecure` is set.
    pub fn validate(&self, listeners: &[SocketAddr]) -> Result<(), ConfigError> {
        if self.secret_file.is_none() && !self.previous_secret_files.is_empty() {
            return Err(invalid(
                "auth.previous_secret_files",
                "needs auth.secret_file (the key new tokens are signed with)",
            ));
        }
        if self.data_grant_ttl_secs == 0 {
            return Err(invalid(
                "auth.data_grant_ttl_secs",
                "must be at least 1 (a grant that is expired when minted opens nothing)",
            ));
        }
        if self.enabled() || self.insecure {
            return Ok(());
        }
        if let Some(open) = listeners.iter().find(|a| !a.ip().is_loopback()) {
            return Err(invalid(
                "auth.secret_file",
                format!(
                    "unset, so crescentd runs without authentication and refuses to listen on \
                     the non-loopback address {open}: set [auth] secret_file, or start with \
                     --insecure to run open anyway"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn open_mode_is_loopback_only_unless_insecure() {
        let open = AuthSettings::default();
        assert!(open.validate(&[addr("127.0.0.1:1")]).is_ok());
        assert!(open.validate(&[addr("[::1]:1")]).is_ok());
        let e = open
            .validate(&[addr("127.0.0.1:1"), addr("0.0.0.0:2")])
            .unwrap_err();
        assert!(e.to_string().contains("--insecure"), "{e}");
        let insecure = AuthSettings {
            insecure: true,
            ..AuthSettings::default()
        };
        assert!(insecure.validate(&[addr("0.0.0.0:2")]).is_ok());
        let keyed = AuthSettings {
            secret_file: Some("/k".into()),
            ..AuthSettings::default()
        };
        assert!(keyed.validate(&[addr("10.0.0.1:2")]).is_ok());
        let orphan = AuthSettings {
            previous_secret_files: vec!["/old".into()],
            ..AuthSettings::default()
        };
        assert!(orphan.validate(&[]).is_err());
    }
}

//! `[tls]`: the certificate and key crescentd's control planes present, and the CA it verifies
//! its peer with (docs/security.md, "TLS").

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSettings {
    /// The PEM chain (leaf first) presented on HTTP, RPC and replication. Set: those
    /// listeners speak TLS only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// The PEM private key of `cert_file`; refused if group or others may read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// The PEM CA a standby verifies the active with (and this node's own client calls).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// `[tls]` loaded: what the listeners accept with and what peer calls verify with.
#[derive(Clone)]
pub struct LoadedTls {
    pub server: Arc<crescent_tls::ServerConfig>,
    /// With `ca_file`: the client side of this node's calls to its peer.
    pub client: Option<Arc<crescent_tls::ClientConfig>>,
}

impl std::fmt::Debug for LoadedTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedTls")
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl TlsSettings {
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }

    /// Checks the combination and loads every file (so a bad file stops crescentd before
    /// anything is opened). `ha` says whether the node is one of an HA pair.
    pub fn validate(&self, ha: bool) -> Result<(), ConfigError> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => {
                return Err(invalid(
                    "tls.key_file",
                    "needs to be set with tls.cert_file",
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "tls.cert_file",
                    "needs to be set with tls.key_file",
                ))
            }
            (None, None) if self.ca_file.is_some() => {
                return Err(invalid(
                    "tls.ca_file",
                    "needs tls.cert_file and tls.key_file (both nodes of a pair serve TLS)",
                ))
            }
            _ => {}
        }
        if ha && self.enabled() && self.ca_file.is_none() {
            return Err(invalid(
                "tls.ca_file",
                "required with [tls] in an HA pair: the standby verifies the active with it",
            ));
        }
        self.load().map(|_| ())
    }

    /// The rustls configurations, or `None` without `[tls]`.
    pub fn load(&self) -> Result<Option<LoadedTls>, ConfigError> {
        let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) else {
            return Ok(None);
        };
        // HTTP offers http/1.1 by ALPN (the RPC and replication listeners offer none).
        let server = crescent_tls::server_config(cert, key, &[])
            .map_err(|e| invalid(key_of(&e, self), e.to_string()))?;
        let client = match &self.ca_file {
            Some(ca) => Some(Arc::new(
                crescent_tls::client_config(ca)
                    .map_err(|e| invalid("tls.ca_file", e.to_string()))?,
            )),
            None => None,
        };
        Ok(Some(LoadedTls {
            server: Arc::new(server),
            client,
        }))
    }
}

/// Which key a file error belongs to.
fn key_of(e: &crescent_tls::TlsError, s: &TlsSettings) -> &'static str {
    match e {
        crescent_tls::TlsError::File { path, .. } if Some(path) == s.key_file.as_ref() => {
            "tls.key_file"
        }
        _ => "tls.cert_file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_tls::test_certs::TestPki;

    #[test]
    fn files_are_checked_at_validation() {
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::localhost(dir.path());
        let full = TlsSettings {
            cert_file: Some(pki.cert_file.clone()),
            key_file: Some(pki.key_file.clone()),
            ca_file: Some(pki.ca_file.clone()),
        };
        assert!(full.validate(true).is_ok());
        assert!(TlsSettings::default().validate(true).is_ok());
        let no_ca = TlsSettings {
            ca_file: None,
            ..full.clone()
        };
        assert!(no_ca.validate(false).is_ok());
        let e = no_ca.validate(true).unwrap_err().to_string();
        assert!(e.contains("tls.ca_file"), "{e}");
        let no_key = TlsSettings {
            key_file: None,
            ..full.clone()
        };
        assert!(no_key
            .validate(false)
            .unwrap_err()
            .to_string()
            .contains("tls.key_file"));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pki.key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = full.validate(false).unwrap_err().to_string();
        assert!(e.contains("tls.key_file") && e.contains("chmod 600"), "{e}");
    }
}

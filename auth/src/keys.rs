//! Signing and verification keys, read from secret files.
//!
//! A key is the raw bytes of a file (at least [`MIN_SECRET_BYTES`] random bytes) that only its
//! owner may read. Its id (`kid`, in every token header) is derived from the bytes, so two nodes
//! loading the same file agree on it. Rotation: sign with the new key while the old one stays
//! in the verification set until every token it signed has expired (docs/security.md).

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::AuthError;

/// Shortest accepted secret.
pub const MIN_SECRET_BYTES: usize = 32;

/// One HMAC key and its id.
#[derive(Clone)]
pub struct Key {
    pub kid: String,
    secret: Vec<u8>,
}

// Never print the secret.
impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key").field("kid", &self.kid).finish()
    }
}

impl Key {
    /// A key from its bytes (refused when shorter than [`MIN_SECRET_BYTES`]).
    pub fn from_bytes(secret: Vec<u8>) -> Result<Key, String> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "{} bytes; at least {MIN_SECRET_BYTES} random bytes are needed",
                secret.len()
            ));
        }
        let kid = hex::encode(&Sha256::digest(&secret)[..8]);
        Ok(Key { kid, secret })
    }

    pub fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// Reads a secret file, refusing one readable by group or others.
    pub fn from_file(path: &Path) -> Result<Key, AuthError> {
        let err = |reason: String| AuthError::SecretFile {
            path: path.display().to_string(),
            reason,
        };
        check_private(path).map_err(err)?;
        let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        Key::from_bytes(bytes).map_err(err)
    }
}

/// Refuses a secret file (a signing key, a TLS private key) that group or others may read.
#[cfg(unix)]
pub fn check_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| e.to_string())?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "mode {:o} lets group or others read it; chmod 600 it",
            mode & 0o777
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
pub fn check_private(_path: &Path) -> Result<(), String> {
    Ok(())
}

/// The key new tokens are signed with, and every key a token may be verified with.
#[derive(Debug, Clone)]
pub struct KeySet {
    signing: Key,
    /// Verification-only keys (the previous ones during a rotation).
    previous: Vec<Key>,
}

impl KeySet {
    pub fn new(signing: Key, previous: Vec<Key>) -> Self {
        Self { signing, previous }
    }

    /// The signing key from `path`, the verification-only keys from `previous`.
    pub fn from_files(path: &Path, previous: &[impl AsRef<Path>]) -> Result<Self, AuthError> {
        let signing = Key::from_file(path)?;
        let previous = previous
            .iter()
            .map(|p| Key::from_file(p.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Self::new(signing, previous))
    }

    pub fn signing(&self) -> &Key {
        &self.signing
    }

    /// The verification key with id `kid`.
    pub fn verifying(&self, kid: &str) -> Option<&Key> {
        std::iter::once(&self.signing)
            .chain(&self.previous)
            .find(|k| k.kid == kid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_shared_secret_files_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, [7u8; 32]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Key::from_file(&path).unwrap_err();
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let key = Key::from_file(&path).unwrap();
        assert_eq!(key.kid.len(), 16);
        assert!(!format!("{key:?}").contains("0707"));
        std::fs::write(&path, [7u8; 31]).unwrap();
        assert!(Key::from_file(&path)
            .unwrap_err()
            .to_string()
            .contains("31 bytes"));
    }
}

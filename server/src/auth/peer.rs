//! The two nodes of an HA pair prove themselves to each other with `peer` tokens signed by the
//! key both load (docs/security.md, "Replication peers"): the standby mints one for each call
//! ([`peer_token`]), both for the HTTP lookup of the replication address and in the
//! replication Hello, and the active checks the Hello's with [`check_replication_peer`]
//! before it sends the standby anything but a refusal.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use crescent_auth::{authorize, AuthError, Claims, KeySet, Operation, Target};
use crescent_journal::replication::{refusal, PeerCheck, PeerRefusal};

use super::AuthState;
use crate::config::auth::AuthSettings;

/// How long a node's own peer token lives (minted afresh for each use).
const PEER_TOKEN_TTL_SECS: u64 = 60;

/// A short-lived `peer` token signed with this node's key, for calls to the other node of an
/// HA pair; `None` when auth is off (or the key cannot be read: the call then goes without,
/// and the refusal shows on the other node).
pub fn peer_token(settings: &AuthSettings) -> Option<String> {
    let path = settings.secret_file.as_ref()?;
    let keys = KeySet::from_files(path, &[] as &[std::path::PathBuf]).ok()?;
    let claims = Claims::new(
        crescent_auth::Role::Peer,
        None,
        None,
        now_secs(),
        PEER_TOKEN_TTL_SECS,
        uuid::Uuid::new_v4().to_string(),
    )
    .ok()?;
    crescent_auth::issue(&keys, &claims).ok()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The active's check of replication Hellos. Its [`AuthState`] (keys and the journaled
/// revocation list) exists only once the node state is restored, after the listener started:
/// until `auth` is set, standbys are refused `UNAVAILABLE` and try again.
pub fn replication_peer_check(auth: Arc<OnceLock<Arc<AuthState>>>) -> PeerCheck {
    PeerCheck::new(move |token, peer| {
        check_replication_peer(auth.get().map(|a| &**a), token, peer, now_secs())
    })
}

/// Whether a Hello's `token` proves a credential that may replicate (the authorization
/// table's `replication` class: `peer`, and `admin`, who may do everything). A refusal is
/// counted in `crescent_auth_refusals_total{class="replication", reason}` and logged at most
/// once per address per interval, never with the token.
pub fn check_replication_peer(
    auth: Option<&AuthState>,
    token: Option<&str>,
    peer: SocketAddr,
    now_secs: u64,
) -> Result<(), PeerRefusal> {
    let Some(auth) = auth else {
        tracing::debug!(%peer, "standby refused: credentials cannot be checked yet");
        return Err(PeerRefusal {
            code: refusal::UNAVAILABLE,
            message: "the active is still starting; try again".into(),
        });
    };
    let op = Operation::Replication;
    let refused = |reason: &'static str, code: &'static str, message: String| {
        auth.refused(op.as_str(), reason, Some(peer.ip()), &message);
        PeerRefusal { code, message }
    };
    let claims = auth.authenticate_token(token, now_secs).map_err(|e| {
        let message = match &e {
            AuthError::Missing => "no peer credential in the Hello: the standby needs the \
                                   pair's shared key in [auth] secret_file"
                .to_string(),
            other => other.to_string(),
        };
        refused(e.reason(), refusal::UNAUTHENTICATED, message)
    })?;
    authorize(&claims, op, Target::default())
        .map_err(|d| refused(d.reason(), refusal::PERMISSION_DENIED, d.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_auth::keys::Key;
    use crescent_auth::Role;
    use crescent_journal::memory::{MemoryBackend, MemoryStore};
    use crescent_journal::{Journal, JournalOptions};
    use std::os::unix::fs::PermissionsExt;

    const NOW: u64 = 1_000_000;

    /// An AuthState over a key file holding `secret`, with nothing revoked (in an actix system).
    fn auth_state(dir: &std::path::Path, secret: &[u8]) -> AuthState {
        let path = dir.join("auth.key");
        std::fs::write(&path, secret).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let settings = AuthSettings {
            secret_file: Some(path),
            ..AuthSettings::default()
        };
        let journal = Journal::open(
            Box::new(MemoryBackend::new(MemoryStore::new())),
            JournalOptions::default(),
        )
        .unwrap();
        let runtime = crescent_actors::Runtime::builder(journal).term(1).build();
        let world = crescent_domain::standard_world();
        AuthState::new(&settings, &runtime, &world, &prometheus::Registry::new()).unwrap()
    }

    fn token(secret: &[u8], role: Role, tenant: Option<&str>, ttl: u64) -> String {
        let keys = KeySet::new(Key::from_bytes(secret.to_vec()).unwrap(), vec![]);
        let claims =
            Claims::new(role, tenant.map(Into::into), None, NOW, ttl, "t-1".into()).unwrap();
        crescent_auth::issue(&keys, &claims).unwrap()
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:40000".parse().unwrap()
    }

    // The revocation registry's actor needs an actix system.
    #[actix_rt::test]
    async fn only_a_valid_peer_or_admin_credential_may_replicate_and_refusals_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let secret = [7u8; 32];
        let auth = auth_state(dir.path(), &secret);
        let check = |t: Option<&str>| check_replication_peer(Some(&auth), t, peer(), NOW);

        let ok = token(&secret, Role::Peer, None, 60);
        assert_eq!(check(Some(&ok)), Ok(()));
        assert_eq!(check(Some(&token(&secret, Role::Admin, None, 60))), Ok(()));

        let none = check(None).unwrap_err();
        assert_eq!(none.code, refusal::UNAUTHENTICATED);
        assert!(none.message.contains("secret_file"), "{}", none.message);
        assert_eq!(
            check(Some("  ")).unwrap_err().code,
            refusal::UNAUTHENTICATED
        );
        assert_eq!(auth.refusals("replication", "missing"), 2);

        let client = token(&secret, Role::Client, Some("acme"), 60);
        let denied = check(Some(&client)).unwrap_err();
        assert_eq!(denied.code, refusal::PERMISSION_DENIED);
        assert_eq!(auth.refusals("replication", "role"), 1);

        let foreign = token(&[8u8; 32], Role::Peer, None, 60);
        assert_eq!(
            check(Some(&foreign)).unwrap_err().code,
            refusal::UNAUTHENTICATED
        );
        let mut parts: Vec<&str> = ok.split('.').collect();
        let forged_sig = foreign.split('.').nth(2).unwrap();
        parts[2] = forged_sig;
        let forged = parts.join(".");
        assert_eq!(
            check(Some(&forged)).unwrap_err().code,
            refusal::UNAUTHENTICATED
        );
        assert_eq!(
            check(Some("garbage")).unwrap_err().code,
            refusal::UNAUTHENTICATED
        );
        assert_eq!(auth.refusals("replication", "invalid"), 3);

        let expired = token(&secret, Role::Peer, None, 1);
        let late = check_replication_peer(Some(&auth), Some(&expired), peer(), NOW + 1);
        assert_eq!(late.unwrap_err().code, refusal::UNAUTHENTICATED);
        assert_eq!(auth.refusals("replication", "expired"), 1);

        // The journaled revocation list applies to the replication stream as to HTTP.
        assert!(auth.revoke("t-1".into(), None).await.unwrap());
        assert_eq!(check(Some(&ok)).unwrap_err().code, refusal::UNAUTHENTICATED);
        assert_eq!(auth.refusals("replication", "revoked"), 1);
    }

    // The revocation registry's actor needs an actix system.
    #[actix_rt::test]
    async fn before_the_node_state_exists_standbys_are_told_to_try_again() {
        let r = check_replication_peer(None, Some("x"), peer(), NOW).unwrap_err();
        assert_eq!(r.code, refusal::UNAVAILABLE);
        let cell: Arc<OnceLock<Arc<AuthState>>> = Arc::default();
        let check = replication_peer_check(cell.clone());
        assert_eq!(
            (check.0)(None, peer()).unwrap_err().code,
            refusal::UNAVAILABLE
        );
        let dir = tempfile::tempdir().unwrap();
        let _ = cell.set(Arc::new(auth_state(dir.path(), &[9u8; 32])));
        assert_eq!(
            (check.0)(None, peer()).unwrap_err().code,
            refusal::UNAUTHENTICATED
        );
    }

    // The revocation registry's actor needs an actix system.
    #[actix_rt::test]
    async fn a_minted_peer_token_passes_the_check_of_a_node_with_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        let auth = auth_state(dir.path(), &[5u8; 32]);
        let settings = AuthSettings {
            secret_file: Some(dir.path().join("auth.key")),
            ..AuthSettings::default()
        };
        let minted = peer_token(&settings).expect("a token");
        assert_eq!(
            check_replication_peer(Some(&auth), Some(&minted), peer(), now_secs()),
            Ok(())
        );
        assert_eq!(peer_token(&AuthSettings::default()), None);
    }
}

//! Authentication and authorization of every request (docs/security.md).
//!
//! [`AuthState`] holds the key set (none: the node runs open), the journaled revocation list
//! and a copy of its ids that requests check without a round trip to the actor (updated only
//! after a revocation is committed), and the refusal metric. `crate::api::auth_guard` is the HTTP middleware;
//! the RPC fast path checks the same credential at its handshake and again at every request
//! (`crate::rpc::session`), against the same table ([`routes`]). [`peer`]: the tokens the
//! two nodes of a pair prove themselves with (HTTP and the replication handshake).

pub mod grants;
pub mod peer;
pub mod routes;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use crescent_actors::{AggregateRegistry, Runtime, World};
use crescent_auth::revocation::INSTANCE_ID;
use crescent_auth::{AuthError, Claims, KeySet, RevocationCommand, RevocationList};

pub use peer::peer_token;
use prometheus::{IntCounterVec, Opts, Registry};

use crate::config::auth::AuthSettings;
use crate::error::CommandFailed;
use crate::error::ServerError;

/// A refused client address is logged at most once per this interval.
const LOG_INTERVAL: Duration = Duration::from_secs(60);
/// Addresses remembered for the log limiter (older entries are dropped past this).
const MAX_LOGGED_PEERS: usize = 4096;

pub struct AuthState {
    keys: Option<KeySet>,
    /// Data-plane grants, signed under the signing key (with `[auth]` only).
    grants: Option<grants::DataGrants>,
    revocations: AggregateRegistry<RevocationList>,
    /// Revoked token ids and their tokens' expiry (seconds; `None`: unknown).
    revoked: RwLock<BTreeMap<String, Option<u64>>>,
    /// Bumped after every change of `revoked`: an open RPC connection re-checks its token id
    /// only when this moved since it last looked.
    revocation_generation: AtomicU64,
    /// `crescent_auth_refusals_total{class, reason}`: both labels bounded.
    refusals: IntCounterVec,
    last_logged: Mutex<HashMap<IpAddr, Instant>>,
}

impl AuthState {
    /// Loads the keys of `settings` and the revocations recovered in `world`.
    pub fn new(
        settings: &AuthSettings,
        runtime: &Runtime,
        world: &World,
        registry: &Registry,
    ) -> Result<Self, ServerError> {
        let keys = match &settings.secret_file {
            Some(path) => Some(
                KeySet::from_files(path, &settings.previous_secret_files)
                    .map_err(|e| ServerError::Recovery(format!("auth: {e}")))?,
            ),
            None => None,
        };
        let states: BTreeMap<String, RevocationList> = world
            .iter::<RevocationList>()
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        let revoked = states
            .get(INSTANCE_ID)
            .map(|s| s.revoked.clone())
            .unwrap_or_default();
        let revocations = AggregateRegistry::<RevocationList>::builder(runtime.clone())
            .recovered(states, world.last_seq())
            .build();
        let refusals = IntCounterVec::new(
            Opts::new(
                "crescent_auth_refusals_total",
                "Requests refused by authentication or authorization, by operation class and reason",
            ),
            &["class", "reason"],
        )
        .map_err(|e| ServerError::Recovery(format!("auth metrics: {e}")))?;
        registry
            .register(Box::new(refusals.clone()))
            .map_err(|e| ServerError::Recovery(format!("auth metrics: {e}")))?;
        let grants = keys.as_ref().map(|k| {
            grants::DataGrants::new(
                k.signing().secret(),
                settings.data_grant_ttl_secs.saturating_mul(1000),
            )
        });
        Ok(Self {
            keys,
            grants,
            revocations,
            revoked: RwLock::new(revoked),
            revocation_generation: AtomicU64::new(0),
            refusals,
            last_logged: Mutex::new(HashMap::new()),
        })
    }

    /// The data-plane grant minter (`None`: open mode, listeners require no grants).
    pub fn grants(&self) -> Option<&grants::DataGrants> {
        self.grants.as_ref()
    }

    /// Whether requests need a token.
    pub fn enabled(&self) -> bool {
        self.keys.is_some()
    }

    /// The claims of the token in an `Authorization` header value, if it is valid now.
    pub fn authenticate(&self, header: Option<&str>, now_secs: u64) -> Result<Claims, AuthError> {
        let token = header.and_then(|h| h.strip_prefix(crescent_wire::auth::AUTHORIZATION_SCHEME));
        self.authenticate_token(token, now_secs)
    }

    /// The claims of a bare token (as the RPC handshake and the replication Hello carry it;
    /// `None` or blank: none given), if it is valid now: signed by one of the keys,
    /// unexpired, not revoked.
    pub fn authenticate_token(
        &self,
        token: Option<&str>,
        now_secs: u64,
    ) -> Result<Claims, AuthError> {
        let Some(keys) = &self.keys else {
            return Err(AuthError::Invalid("authentication is off".into()));
        };
        let token = token
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(AuthError::Missing)?;
        let claims = crescent_auth::verify(keys, token, now_secs)?;
        if self.is_revoked(&claims.jti) {
            return Err(AuthError::Revoked);
        }
        Ok(claims)
    }

    /// Changes with every committed revocation (see [`AuthState::is_revoked`]).
    pub fn revocation_generation(&self) -> u64 {
        self.revocation_generation.load(Ordering::Acquire)
    }

    /// Whether `token_id` is revoked (committed revocations only).
    pub fn is_revoked(&self, token_id: &str) -> bool {
        self.revoked
            .read()
            .expect("revoked set lock")
            .contains_key(token_id)
    }

    /// Journals a revocation; true when it was new. Requests see it once it is committed.
    pub async fn revoke(
        &self,
        token_id: String,
        expires_secs: Option<u64>,
    ) -> Result<bool, RevocationsError> {
        let cmd = RevocationCommand::Revoke {
            token_id: token_id.clone(),
            expires_secs,
        };
        let done = self
            .revocations
            .execute(INSTANCE_ID, cmd)
            .await
            .map_err(CommandFailed::from)?;
        self.revoked
            .write()
            .expect("revoked set lock")
            .insert(token_id, expires_secs);
        self.revocation_generation.fetch_add(1, Ordering::AcqRel);
        Ok(!done.is_noop())
    }

    /// Forgets revocations whose tokens expired before `now_secs` (an expired token is refused
    /// without the list, so the list stays as long as the live revoked tokens, not all that
    /// were ever revoked): journals one prune when there is anything to drop, then drops it
    /// here. Returns how many entries went.
    pub async fn prune_revocations(&self, now_secs: u64) -> Result<usize, RevocationsError> {
        let expired = |exp: &Option<u64>| exp.is_some_and(|e| e < now_secs);
        if !self
            .revoked
            .read()
            .expect("revoked set lock")
            .values()
            .any(expired)
        {
            return Ok(0);
        }
        self.revocations
            .execute(INSTANCE_ID, RevocationCommand::Prune { now_secs })
            .await
            .map_err(CommandFailed::from)?;
        let mut revoked = self.revoked.write().expect("revoked set lock");
        let before = revoked.len();
        revoked.retain(|_, exp| !expired(exp));
        Ok(before - revoked.len())
    }

    /// Revoked token ids held (for tests and status).
    pub fn revoked_count(&self) -> usize {
        self.revoked.read().expect("revoked set lock").len()
    }

    /// Counts a refusal and logs it once per client address per [`LOG_INTERVAL`] (never the
    /// token).
    pub fn refused(&self, class: &str, reason: &str, peer: Option<IpAddr>, message: &str) {
        self.refusals.with_label_values(&[class, reason]).inc();
        let now = Instant::now();
        let mut logged = self.last_logged.lock().expect("refusal log lock");
        let key = peer.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        if logged
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < LOG_INTERVAL)
        {
            return;
        }
        if logged.len() >= MAX_LOGGED_PEERS {
            logged.retain(|_, at| now.duration_since(*at) < LOG_INTERVAL);
        }
        logged.insert(key, now);
        tracing::warn!(peer = ?peer, class, reason, %message, "request refused");
    }

    /// Refusals counted for (`class`, `reason`) (for tests).
    pub fn refusals(&self, class: &str, reason: &str) -> u64 {
        self.refusals.with_label_values(&[class, reason]).get()
    }
}

/// Says at startup whether requests need a token, and warns when the node runs open on a
/// non-loopback address (`--insecure`).
pub fn log_mode(config: &crate::config::Config) {
    let a = &config.auth;
    if a.enabled() {
        tracing::info!(
            previous_keys = a.previous_secret_files.len(),
            "authentication on: every route but /healthz and /metrics, and every RPC \
             connection, needs a token"
        );
    } else if !config.listen.ip().is_loopback() {
        tracing::warn!(listen = %config.listen,
            "authentication OFF on a non-loopback address (--insecure): anyone who reaches \
             this port can read, write and administer the store");
    } else {
        tracing::info!("authentication off (no [auth] secret_file): loopback only");
    }
}

/// Why a token revocation (or a prune of the list) was not journaled.
#[derive(Debug, thiserror::Error)]
pub enum RevocationsError {
    #[error(transparent)]
    Command(#[from] CommandFailed),
}

impl RevocationsError {
    pub fn code(&self) -> crescent_wire::ErrorCode {
        match self {
            RevocationsError::Command(e) => e.code,
        }
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;
    use crescent_error_class::coverage::assert_wire_map;
    use crescent_error_class::every_variant;
    use crescent_wire::ErrorCode;

    #[test]
    fn every_refusal_has_a_code_other_than_internal() {
        let all = every_variant!(RevocationsError {
            Command => RevocationsError::Command(CommandFailed {
                code: ErrorCode::DurabilityFailed,
                message: "m".into(),
            }),
        });
        assert_wire_map(&all, RevocationsError::code, &[]);
    }
}

//! `crescent token issue` (offline, with the key file) and `crescent token revoke` (admin).

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Subcommand;
use crescent_auth::{Claims, KeySet, Role};
use serde_json::json;

use crescent_client::ClientError;
use crescent_client::CrescentClient;

/// Default lifetime of an issued token.
pub const DEFAULT_TTL_SECS: u64 = 3600;

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a new signed token (one line). Offline: needs the key file, not a server. A
    /// client token's tenant is the global --tenant.
    Issue {
        /// The signing key file (crescentd's [auth] secret_file).
        #[arg(long)]
        secret_file: PathBuf,
        /// admin, owner, client or peer.
        #[arg(long)]
        role: String,
        /// The owner id an owner token may act for.
        #[arg(long)]
        owner: Option<String>,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = DEFAULT_TTL_SECS)]
        ttl_secs: u64,
    },
    /// Refuse token ID from now on (admin; journaled, survives restarts and failovers).
    Revoke {
        /// The token's id (`jti`, printed by `token issue`).
        id: String,
        /// When the token expires (seconds since the Unix epoch), so the entry can be pruned.
        #[arg(long)]
        expires_secs: Option<u64>,
    },
}

fn auth_err(e: crescent_auth::AuthError) -> ClientError {
    ClientError::InvalidArgument(e.to_string())
}

/// `token issue`: signs claims with the key file; returns the token and its claims.
pub fn issue(
    secret_file: &std::path::Path,
    role: &str,
    tenant: Option<String>,
    owner: Option<String>,
    ttl_secs: u64,
) -> Result<(String, Claims), ClientError> {
    let keys = KeySet::from_files(secret_file, &[] as &[PathBuf]).map_err(auth_err)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let role = Role::parse(role).map_err(auth_err)?;
    // Only the scope the role uses goes into the token.
    let tenant = tenant.filter(|_| role == Role::Client);
    let owner = owner.filter(|_| role == Role::Owner);
    let id = uuid::Uuid::new_v4().to_string();
    let claims = Claims::new(role, tenant, owner, now, ttl_secs, id).map_err(auth_err)?;
    let token = crescent_auth::issue(&keys, &claims).map_err(auth_err)?;
    Ok((token, claims))
}

/// Runs a `token` command that needs no server.
pub fn run_offline(
    command: &TokenCommand,
    tenant: Option<&str>,
    json: bool,
) -> Option<Result<u8, ClientError>> {
    let TokenCommand::Issue {
        secret_file,
        role,
        owner,
        ttl_secs,
    } = command
    else {
        return None;
    };
    let done = issue(
        secret_file,
        role,
        tenant.map(str::to_string),
        owner.clone(),
        *ttl_secs,
    )
    .map(|(token, claims)| {
        if json {
            println!(
                "{}",
                json!({"token": token, "id": claims.jti, "role": claims.role,
                    "tenant": claims.tenant, "owner": claims.owner, "expires_secs": claims.exp})
            );
        } else {
            println!("{token}");
        }
        0
    });
    Some(done)
}

/// Runs a `token` command that needs the server (`revoke`; `issue` never gets here).
pub async fn run(
    client: &CrescentClient,
    command: TokenCommand,
    json: bool,
) -> Result<u8, ClientError> {
    let TokenCommand::Revoke { id, expires_secs } = command else {
        return run_offline(&command, None, json).unwrap_or(Ok(0));
    };
    let newly = client.revoke_token(&id, expires_secs).await?;
    if json {
        println!("{}", json!({"id": id, "newly_revoked": newly}));
    } else if newly {
        println!("revoked {id}");
    } else {
        println!("{id} was already revoked");
    }
    Ok(0)
}

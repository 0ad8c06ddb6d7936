//! The mesh membership record in the coordination backend, `/crescent/mesh/<mesh>/membership`
//! (docs/scale-out.md, "Membership record"): read it, and replace it by compare-and-set after
//! [`crescent_mesh::apply_update`] has accepted the change.
//!
//! The compare is on the version read (etcd: the key's mod_revision; Redis: the whole stored
//! value, in a Lua script), so of two updates built from the same read exactly one lands; the
//! other gets `STALE_GENERATION` naming the generation that won, and re-reads.

use std::time::Duration;

use crescent_mesh::{apply_update, Membership, MeshError};
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};
use tracing::{debug, instrument};

use crate::coordination::CoordinationEndpoint;
use crate::error::HaError;
use crate::etcd::bounded;

/// The key of a mesh's membership record (the same string in etcd and in Redis).
pub fn membership_key(mesh: &str) -> String {
    format!("/crescent/mesh/{mesh}/membership")
}

/// What a compare-and-set compares: the record's version as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordVersion {
    /// etcd: the key's mod_revision.
    Etcd(i64),
    /// Redis: the stored bytes (a record is never written twice with equal bytes: each
    /// carries a new generation).
    Redis(Vec<u8>),
}

/// A membership record as read, with its version.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMembership {
    pub membership: Membership,
    pub version: RecordVersion,
}

/// Compare-and-set in Redis: `ARGV[1]` `1` if a record is expected (equal to `ARGV[2]`), `0`
/// if none is; writes `ARGV[3]` on a match. Answers `{1, ''}` written, or `{0, current}`
/// (`''`: no record).
const CAS_SCRIPT: &str = r#"
local cur = redis.call('GET', KEYS[1])
local matches
if ARGV[1] == '1' then matches = (cur == ARGV[2]) else matches = (cur == false) end
if matches then
  redis.call('SET', KEYS[1], ARGV[3])
  return {1, ''}
end
return {0, cur or ''}
"#;

enum Backend {
    /// Boxed: an etcd client is some kilobytes.
    Etcd(Box<Client>),
    Redis(ConnectionManager, Script),
}

/// The membership record of one mesh in etcd or Redis.
pub struct MembershipStore {
    backend: Backend,
    mesh: String,
    key: String,
    timeout: Duration,
}

impl std::fmt::Debug for MembershipStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MembershipStore")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl MembershipStore {
    /// The record of `mesh` at `endpoint`; every request is bounded by `timeout`. The
    /// connection is lazy: an unreachable backend shows up as errors of later requests.
    pub async fn connect(
        endpoint: &CoordinationEndpoint,
        mesh: &str,
        timeout: Duration,
    ) -> Result<MembershipStore, HaError> {
        crescent_mesh::validate_name("mesh", mesh)?;
        let backend = match endpoint {
            CoordinationEndpoint::Etcd(urls) => {
                Backend::Etcd(Box::new(crate::etcd::connect(urls).await?))
            }
            CoordinationEndpoint::Redis(url) => Backend::Redis(
                crate::redis_backend::connect_redis(url, timeout)?,
                Script::new(CAS_SCRIPT),
            ),
        };
        Ok(MembershipStore {
            backend,
            mesh: mesh.to_string(),
            key: membership_key(mesh),
            timeout,
        })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The etcd client, for watching the key (`None` on Redis).
    pub(crate) fn etcd_client(&self) -> Option<&Client> {
        match &self.backend {
            Backend::Etcd(client) => Some(client),
            Backend::Redis(..) => None,
        }
    }

    /// The record, or `None` if the mesh has none. A record this build cannot read is an error
    /// (`UNSUPPORTED_VERSION`, `MALFORMED`), never `None`.
    #[instrument(name = "mesh.read_membership", level = "debug", skip_all, fields(mesh = %self.mesh))]
    pub async fn read(&self) -> Result<Option<StoredMembership>, HaError> {
        Ok(self.read_at().await?.0)
    }

    /// [`Self::read`], with etcd's store revision at the time of the read (`None` on Redis):
    /// a watch from the next revision sees every change after the read, also when the record
    /// did not exist yet.
    pub(crate) async fn read_at(&self) -> Result<(Option<StoredMembership>, Option<i64>), HaError> {
        let (bytes, version, at) = match &self.backend {
            Backend::Etcd(client) => {
                let mut kv = client.kv_client();
                let resp = bounded(
                    "get mesh membership",
                    self.timeout,
                    kv.get(self.key.as_str(), None),
                )
                .await?;
                let at = resp.header().map(|h| h.revision());
                match resp.kvs().first() {
                    None => return Ok((None, at)),
                    Some(kv) => (
                        kv.value().to_vec(),
                        RecordVersion::Etcd(kv.mod_revision()),
                        at,
                    ),
                }
            }
            Backend::Redis(conn, _) => {
                let mut conn = conn.clone();
                let value: Option<Vec<u8>> = self
                    .redis_bounded("get mesh membership", conn.get(&self.key))
                    .await?;
                match value {
                    None => return Ok((None, None)),
                    Some(v) => (v.clone(), RecordVersion::Redis(v), None),
                }
            }
        };
        let stored = StoredMembership {
            membership: Membership::decode(&bytes)?,
            version,
        };
        Ok((Some(stored), at))
    }

    /// Replaces `current` (`None`: the mesh has no record yet) by `proposed`, if
    /// [`apply_update`] accepts the change and the record is still the one read. Refused with
    /// the update rule's error (nothing written), or with `STALE_GENERATION` naming the
    /// generation now stored (0: none) if another update landed first.
    #[instrument(
        name = "mesh.update_membership",
        level = "info",
        skip_all,
        fields(mesh = %self.mesh, generation = proposed.generation)
    )]
    pub async fn compare_and_set(
        &self,
        current: Option<&StoredMembership>,
        proposed: Membership,
    ) -> Result<StoredMembership, HaError> {
        let next = apply_update(current.map(|c| &c.membership), proposed)?;
        let bytes = next.encode();
        let outcome = match &self.backend {
            Backend::Etcd(client) => self.etcd_cas(client, current, &bytes).await?,
            Backend::Redis(conn, script) => self.redis_cas(conn, script, current, &bytes).await?,
        };
        match outcome {
            Ok(version) => Ok(StoredMembership {
                membership: next,
                version,
            }),
            Err(found) => {
                let found = match found {
                    Some(b) => Membership::decode(&b)?.generation,
                    None => 0,
                };
                debug!(found, "membership update lost a race");
                Err(MeshError::StaleGeneration {
                    current: found,
                    proposed: next.generation,
                }
                .into())
            }
        }
    }

    /// `Ok(Ok(version))` written; `Ok(Err(current bytes))` the record was not the one read.
    async fn etcd_cas(
        &self,
        client: &Client,
        current: Option<&StoredMembership>,
        bytes: &[u8],
    ) -> Result<Result<RecordVersion, Option<Vec<u8>>>, HaError> {
        let key = self.key.as_str();
        let compare = match current.map(|c| &c.version) {
            None => Compare::create_revision(key, CompareOp::Equal, 0),
            Some(RecordVersion::Etcd(rev)) => Compare::mod_revision(key, CompareOp::Equal, *rev),
            Some(RecordVersion::Redis(_)) => {
                return Err(HaError::InvalidArgument(
                    "a Redis version given to etcd".into(),
                ))
            }
        };
        let txn = Txn::new()
            .when([compare])
            .and_then([TxnOp::put(key, bytes, None)])
            .or_else([TxnOp::get(key, None)]);
        let mut kv = client.kv_client();
        let resp = bounded("update mesh membership", self.timeout, kv.txn(txn)).await?;
        if resp.succeeded() {
            let rev = resp.header().map_or(0, |h| h.revision());
            return Ok(Ok(RecordVersion::Etcd(rev)));
        }
        let found = resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        Ok(Err(found))
    }

    async fn redis_cas(
        &self,
        conn: &ConnectionManager,
        script: &Script,
        current: Option<&StoredMembership>,
        bytes: &[u8],
    ) -> Result<Result<RecordVersion, Option<Vec<u8>>>, HaError> {
        let expected: &[u8] = match current.map(|c| &c.version) {
            None => b"",
            Some(RecordVersion::Redis(v)) => v,
            Some(RecordVersion::Etcd(_)) => {
                return Err(HaError::InvalidArgument(
                    "an etcd version given to Redis".into(),
                ))
            }
        };
        let mut conn = conn.clone();
        let mut call = script.prepare_invoke();
        call.key(&self.key)
            .arg(if current.is_some() { "1" } else { "0" })
            .arg(expected)
            .arg(bytes);
        let (written, found): (i64, Vec<u8>) = self
            .redis_bounded("update mesh membership", call.invoke_async(&mut conn))
            .await?;
        Ok(match (written, found.is_empty()) {
            (1, _) => Ok(RecordVersion::Redis(bytes.to_vec())),
            (_, true) => Err(None),
            (_, false) => Err(Some(found)),
        })
    }

    async fn redis_bounded<T>(
        &self,
        op: &'static str,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, HaError> {
        crate::redis_backend::bounded(self.timeout, op, fut).await
    }
}

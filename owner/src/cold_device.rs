//! A cold device on a storage owner (`crescent owner --cold-device ID=DIR[,capacity=SIZE]`):
//! the owner opens the directory (stamped for the device id), registers it with crescentd,
//! then long-polls crescentd for the device's IO work and performs it here: writes (the
//! object's current content, read through this client, which reads the replica its own
//! segment holds first, checked against the route's length and CRC32C), verified reads,
//! deletes and scans. crescentd drives every state transition; see
//! `server/src/cold/owner_io.rs` for why the owner polls.
//!
//! The poll goes through the client's failover layer, so after a crescentd restart or
//! failover the owner simply finds the (new) leader, registers again when told it is unknown,
//! and its device's pending operations resume there.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crescent_cold::local_dir::LocalDirDevice;
use crescent_cold::{payload_checksum, ColdError, ColdOpId};
use crescent_crash::points;
use crescent_wire::cold_owner::{
    OwnerDevicePollRequest, OwnerIoError, OwnerIoOutcome, OwnerIoResult, OwnerIoWork,
    OwnerStagingRegion, RegisterOwnerDeviceRequest, ScannedPayloadInfo, OWNER_DEVICE_WIRE_VERSION,
    OWNER_STAGING_VERSION,
};
use crescent_wire::ErrorCode;
use tracing::Instrument;

use crescent_client::{ClientError, CrescentClient};

use crate::owner_staging::OwnerStaging;

/// How often the owner probes its device (write, sync, read back, delete).
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// Pause after a failed poll before the next.
const POLL_RETRY: Duration = Duration::from_millis(500);
/// One `--cold-device` of an owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerColdDeviceConfig {
    pub device_id: String,
    pub root: PathBuf,
    pub capacity: u64,
    pub tags: Vec<String>,
    pub schedulable: bool,
}

impl OwnerColdDeviceConfig {
    /// Parses `ID=DIR[,capacity=SIZE][,tags=a+b][,schedulable=false]` (SIZE with K/M/G
    /// suffixes, powers of 1024; default capacity 64 GiB).
    pub fn parse(arg: &str) -> Result<Self, String> {
        let mut parts = arg.split(',');
        let head = parts.next().unwrap_or_default();
        let (id, dir) = head
            .split_once('=')
            .ok_or_else(|| format!("{arg:?}: expected ID=DIR[,capacity=SIZE]"))?;
        crescent_cold::device::check_device_id(id).map_err(|e| format!("{arg:?}: {e}"))?;
        if dir.is_empty() {
            return Err(format!("{arg:?}: the directory is empty"));
        }
        let mut config = Self {
            device_id: id.to_string(),
            root: PathBuf::from(dir),
            capacity: 64 << 30,
            tags: Vec::new(),
            schedulable: true,
        };
        for part in parts {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{arg:?}: {part:?} is not KEY=VALUE"))?;
            match k {
                "capacity" => {
                    config.capacity = crescent_client::size::parse_size(v)?;
                    if config.capacity == 0 {
                        return Err(format!("{arg:?}: capacity must be positive"));
                    }
                }
                "tags" => config.tags = v.split('+').map(str::to_string).collect(),
                "schedulable" => {
                    config.schedulable = v
                        .parse()
                        .map_err(|_| format!("{arg:?}: schedulable is true or false"))?
                }
                _ => return Err(format!("{arg:?}: unknown option {k:?}")),
            }
        }
        Ok(config)
    }
}

/// A running owner device; dropping it stops serving (crescentd then sees the device's
/// owner silent and makes the device unavailable).
#[derive(Debug)]
pub struct OwnerColdDevice {
    device_id: String,
    task: tokio::task::JoinHandle<()>,
}

impl OwnerColdDevice {
    /// Opens (stamps) the directory, registers the device and starts serving its IO.
    pub async fn start(
        client: &CrescentClient,
        owner_id: &str,
        incarnation: u64,
        endpoint: &str,
        config: OwnerColdDeviceConfig,
    ) -> Result<Self, ClientError> {
        Self::start_with_staging(client, owner_id, incarnation, endpoint, config, None).await
    }

    /// [`OwnerColdDevice::start`], announcing the owner's staging region (served at
    /// `endpoint`): remote restores of this device's objects are then staged here and read
    /// from this owner, not carried through crescentd.
    pub async fn start_with_staging(
        client: &CrescentClient,
        owner_id: &str,
        incarnation: u64,
        endpoint: &str,
        config: OwnerColdDeviceConfig,
        staging: Option<Arc<OwnerStaging>>,
    ) -> Result<Self, ClientError> {
        let io = LocalDirDevice::open(&config.device_id, &config.root)
            .map_err(|e| ClientError::InvalidArgument(format!("cold device: {e}")))?;
        let root = std::fs::canonicalize(&config.root)
            .unwrap_or_else(|_| config.root.clone())
            .display()
            .to_string();
        let register = RegisterOwnerDeviceRequest {
            version: OWNER_DEVICE_WIRE_VERSION,
            owner_id: owner_id.to_string(),
            incarnation,
            endpoint: endpoint.to_string(),
            device_id: config.device_id.clone(),
            root,
            capacity: config.capacity,
            tags: config.tags.clone(),
            schedulable: config.schedulable,
            staging: staging.as_ref().map(|s| OwnerStagingRegion {
                version: OWNER_STAGING_VERSION,
                segment_id: s.segment_id().to_string(),
                capacity_bytes: s.capacity_bytes(),
            }),
        };
        client.register_owner_device(&register).await?;
        tracing::info!(device = %config.device_id, root = %register.root, "owner cold device registered");
        let task = tokio::spawn(serve(client.clone(), Arc::new(io), register, staging));
        Ok(Self {
            device_id: config.device_id,
            task,
        })
    }

    pub fn device_id(&self) -> &str {
        &self.device_id
    }
}

impl Drop for OwnerColdDevice {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Polls for work, performs it, and reports it on the next poll; registers again when
/// crescentd does not know this incarnation (it restarted or failed over and has not seen us).
async fn serve(
    client: CrescentClient,
    io: Arc<LocalDirDevice>,
    register: RegisterOwnerDeviceRequest,
    staging: Option<Arc<OwnerStaging>>,
) {
    let mut results: Vec<OwnerIoResult> = Vec::new();
    let mut probe_error: Option<String> = None;
    let mut probed: Option<Instant> = None;
    loop {
        if probed.is_none_or(|t| t.elapsed() >= PROBE_EVERY) {
            let dev = io.clone();
            probe_error = match tokio::task::spawn_blocking(move || dev.probe()).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(e) => Some(format!("probe task failed: {e}")),
            };
            probed = Some(Instant::now());
        }
        if let Some(staging) = &staging {
            // Fences the tokens of readers that never acked (at least once per poll wait).
            staging.expire(now_ms());
        }
        let req = OwnerDevicePollRequest {
            version: OWNER_DEVICE_WIRE_VERSION,
            owner_id: register.owner_id.clone(),
            incarnation: register.incarnation,
            device_id: register.device_id.clone(),
            probe_error: probe_error.clone(),
            results: std::mem::take(&mut results),
        };
        let polled = Instant::now();
        match client.poll_owner_device(&req).await {
            Ok(reply) => {
                tracing::debug!(
                    items = reply.items.len(),
                    took_ms = polled.elapsed().as_millis() as u64,
                    "cold device poll answered"
                );
                for item in reply.items {
                    let started = Instant::now();
                    let outcome = match perform_staging(staging.as_ref(), &io, &item.work).await {
                        Some(outcome) => outcome,
                        None => perform(&client, &io, item.work).await,
                    };
                    tracing::debug!(
                        took_ms = started.elapsed().as_millis() as u64,
                        "cold device work performed"
                    );
                    results.push(OwnerIoResult {
                        id: item.id,
                        outcome,
                    });
                }
            }
            Err(e) if e.code() == Some(ErrorCode::NotFound) => {
                tracing::warn!(error = %e, "crescentd does not know this cold device; registering again");
                if let Err(e) = client.register_owner_device(&register).await {
                    tracing::warn!(error = %e, "cold device registration failed");
                    tokio::time::sleep(POLL_RETRY).await;
                }
            }
            Err(e) => {
                // The results may not have arrived: send them again (an answer nobody waits
                // for is dropped by crescentd).
                results = req.results;
                tracing::debug!(error = %e, "cold device poll failed");
                tokio::time::sleep(POLL_RETRY).await;
            }
        }
    }
}

/// Performs one piece of work on the device.
async fn perform(
    client: &CrescentClient,
    io: &Arc<LocalDirDevice>,
    work: OwnerIoWork,
) -> OwnerIoOutcome {
    let span = tracing::debug_span!("owner.cold_io");
    let result = async move {
        match work {
            OwnerIoWork::Write {
                op_id,
                object,
                length,
                checksum,
                replicas,
            } => {
                let source = HotBytes {
                    object,
                    length,
                    checksum,
                    replicas,
                };
                let written = write(client, io, &op_id, source).await;
                if written.is_ok() {
                    crescent_crash::point(points::OWNER_COLD_AFTER_WRITE);
                }
                written
            }
            other => {
                let io = io.clone();
                match tokio::task::spawn_blocking(move || blocking_io(&io, other)).await {
                    Ok(r) => {
                        if matches!(r, Ok(OwnerIoOutcome::Deleted { .. })) {
                            crescent_crash::point(points::OWNER_COLD_AFTER_DELETE);
                        }
                        r
                    }
                    Err(e) => Err(ColdError::InvalidArgument {
                        field: "work",
                        reason: format!("the IO task failed: {e}"),
                    }),
                }
            }
        }
    }
    .instrument(span)
    .await;
    result.unwrap_or_else(|e| OwnerIoOutcome::Failed(error_to_wire(&e)))
}

/// What an offload writes: the object, as the route recorded it, and where its hot bytes are.
struct HotBytes {
    object: crescent_wire::store::ObjectId,
    length: u64,
    checksum: u32,
    /// With read grants; empty from an older crescentd (read with a get then).
    replicas: Vec<crescent_wire::store::ReplicaDesc>,
}

async fn write(
    client: &CrescentClient,
    io: &Arc<LocalDirDevice>,
    op_id: &str,
    source: HotBytes,
) -> Result<OwnerIoOutcome, ColdError> {
    let HotBytes {
        object,
        length,
        checksum,
        replicas,
    } = source;
    let op = uuid::Uuid::parse_str(op_id)
        .map(ColdOpId::new)
        .map_err(|e| ColdError::InvalidArgument {
            field: "op_id",
            reason: e.to_string(),
        })?;
    // Over the data plane with crescentd's read grants when it named the replicas: an owner
    // token may not get objects under `[auth]` (docs/security.md, "The data plane").
    let read = match replicas.is_empty() {
        true => client.get_object(object.clone()).await,
        false => {
            client
                .read_replicas(&object.key, &replicas, length, None)
                .await
        }
    };
    let payload = read.map_err(|e| ColdError::Io {
        path: object.key.clone(),
        kind: std::io::ErrorKind::Other,
        message: format!("reading the hot replica: {e}"),
    })?;
    if payload.len() as u64 != length || payload_checksum(&payload) != checksum {
        return Err(ColdError::Conflict {
            what: "object",
            id: object.key,
            reason: "its content changed since the offload was planned".into(),
        });
    }
    let dev = io.clone();
    let receipt = tokio::task::spawn_blocking(move || dev.write(op, &payload))
        .await
        .map_err(|e| ColdError::InvalidArgument {
            field: "work",
            reason: format!("the write task failed: {e}"),
        })??;
    Ok(OwnerIoOutcome::Written {
        locator: receipt.locator,
        length: receipt.length,
        checksum: receipt.checksum,
        fingerprint: receipt.fingerprint.0.to_vec(),
        already_present: receipt.already_present,
    })
}

fn blocking_io(io: &LocalDirDevice, work: OwnerIoWork) -> Result<OwnerIoOutcome, ColdError> {
    Ok(match work {
        OwnerIoWork::Read {
            locator,
            length,
            checksum,
        } => OwnerIoOutcome::Read {
            bytes: io.read(&locator, length, checksum)?,
        },
        OwnerIoWork::Delete { locator } => OwnerIoOutcome::Deleted {
            existed: io.delete(&locator)?,
        },
        OwnerIoWork::Scan => {
            let scan = io.scan()?;
            OwnerIoOutcome::Scanned {
                payloads: scan
                    .payloads
                    .into_iter()
                    .map(|p| ScannedPayloadInfo {
                        op_id: p.op_id.0.simple().to_string(),
                        locator: p.locator,
                        file_len: p.file_len,
                    })
                    .collect(),
                stale_temps: scan.stale_temps.len() as u64,
                unknown: scan.unknown.len() as u64,
            }
        }
        OwnerIoWork::RemoveStaleTemps => OwnerIoOutcome::TempsRemoved {
            count: io.remove_stale_temps()? as u64,
        },
        OwnerIoWork::Write { .. } => unreachable!("writes are performed by `write`"),
        // Sent only to an owner that registered a staging region (`perform_staging`).
        OwnerIoWork::Stage { .. } | OwnerIoWork::ReleaseStaged { .. } => {
            return Err(ColdError::InvalidArgument {
                field: "work",
                reason: "this owner has no staging region".into(),
            })
        }
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as u64)
}

/// Performs the staging work (`Stage`, `ReleaseStaged`) when this owner has a staging region;
/// `None` for any other work (and without a region: `perform` refuses it).
async fn perform_staging(
    staging: Option<&Arc<OwnerStaging>>,
    io: &Arc<LocalDirDevice>,
    work: &OwnerIoWork,
) -> Option<OwnerIoOutcome> {
    let staging = staging?.clone();
    match work {
        OwnerIoWork::Stage {
            locator,
            length,
            checksum,
        } => {
            let (io, locator, length, checksum) = (io.clone(), locator.clone(), *length, *checksum);
            let staged = tokio::task::spawn_blocking(move || {
                staging
                    .stage(&io, &locator, length, checksum, now_ms())
                    .map(|slot| OwnerIoOutcome::Staged {
                        segment_id: staging.segment_id().to_string(),
                        offset: slot.offset,
                        length: slot.length,
                        checksum,
                        token: slot.token,
                        expires_at_ms: slot.expires_at_ms as i64,
                    })
            })
            .await
            .unwrap_or_else(|e| {
                Err(ColdError::InvalidArgument {
                    field: "work",
                    reason: format!("the staging task failed: {e}"),
                })
            });
            Some(staged.unwrap_or_else(|e| OwnerIoOutcome::Failed(error_to_wire(&e))))
        }
        OwnerIoWork::ReleaseStaged { tokens } => Some(OwnerIoOutcome::StagedReleased {
            released: staging.release(tokens, now_ms()),
        }),
        _ => None,
    }
}

/// The report of a failed piece of IO (crescentd maps `kind` back to the same error).
pub fn error_to_wire(e: &ColdError) -> OwnerIoError {
    let (kind, locator, expected, actual) = match e {
        ColdError::ChecksumMismatch {
            locator,
            expected,
            actual,
        } => (
            "checksum_mismatch",
            locator.clone(),
            *expected as u64,
            *actual as u64,
        ),
        ColdError::LengthMismatch {
            locator,
            expected,
            actual,
        } => ("length_mismatch", locator.clone(), *expected, *actual),
        ColdError::CorruptFile { locator, .. } => ("corrupt_file", locator.clone(), 0, 0),
        ColdError::PayloadMissing { locator } => ("payload_missing", locator.clone(), 0, 0),
        ColdError::Conflict { id, .. } => ("conflict", id.clone(), 0, 0),
        ColdError::InvalidArgument { .. } => ("invalid_argument", String::new(), 0, 0),
        ColdError::Backpressure { .. } => ("busy", String::new(), 0, 0),
        _ => ("io", String::new(), 0, 0),
    };
    OwnerIoError {
        kind: kind.to_string(),
        message: e.to_string(),
        locator,
        expected,
        actual,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cold_device_arguments() {
        let c = OwnerColdDeviceConfig::parse("ob=/mnt/ssd,capacity=16M,tags=ssd+fast").unwrap();
        assert_eq!(c.device_id, "ob");
        assert_eq!(c.root, PathBuf::from("/mnt/ssd"));
        assert_eq!(c.capacity, 16 << 20);
        assert_eq!(c.tags, vec!["ssd".to_string(), "fast".to_string()]);
        assert!(c.schedulable);
        let d = OwnerColdDeviceConfig::parse("x=/d,schedulable=false").unwrap();
        assert_eq!((d.capacity, d.schedulable), (64 << 30, false));
        for bad in [
            "noequals",
            "=/d",
            "x=",
            "x=/d,capacity=0",
            "x=/d,color=red",
            "x=/d,cap",
        ] {
            assert!(OwnerColdDeviceConfig::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_keep_their_kind_on_the_wire() {
        let e = ColdError::ChecksumMismatch {
            locator: "l".into(),
            expected: 1,
            actual: 2,
        };
        let w = error_to_wire(&e);
        assert_eq!(
            (w.kind.as_str(), w.expected, w.actual),
            ("checksum_mismatch", 1, 2)
        );
        let w = error_to_wire(&ColdError::PayloadMissing {
            locator: "l".into(),
        });
        assert_eq!(
            (w.kind.as_str(), w.locator.as_str()),
            ("payload_missing", "l")
        );
    }

    /// A storage owner's cold device registers again when the leader answers its poll
    /// NOT_FOUND (a new active after a failover, or a restarted crescentd, that never saw it
    /// register), then polls on (tests/tests/ha_cold_owner.rs runs it across a real
    /// failover).
    #[tokio::test]
    async fn an_owner_device_registers_again_when_its_poll_is_not_found() {
        use crescent_client::fake_server::{Answer, FakeServer};
        use crescent_client::ClientOptions;
        use crescent_wire::cold_owner::routes;
        const REGISTERED: &str = r#"{"version":1,"device_id":"ob","poll_wait_ms":2000}"#;
        const NO_WORK: &str = r#"{"version":1,"items":[]}"#;
        let server = FakeServer::start(vec![
            Answer::Ok(REGISTERED),
            Answer::NotFound,
            Answer::Ok(REGISTERED),
            Answer::Ok(NO_WORK),
        ])
        .await;
        let options =
            ClientOptions::servers(&server.address()).with_failover_timeout(Duration::from_secs(5));
        let c = CrescentClient::connect(options).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = OwnerColdDeviceConfig::parse(&format!("ob={}", dir.path().display())).unwrap();
        let device = OwnerColdDevice::start(&c, "node-b", 7, "", config)
            .await
            .unwrap();
        let started = std::time::Instant::now();
        while server.requests().len() < 5 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{:?}",
                server.requests()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            server.requests()[..5],
            [
                routes::REGISTER,
                routes::POLL,
                routes::REGISTER,
                routes::POLL,
                routes::POLL
            ]
        );
        drop(device);
    }
}

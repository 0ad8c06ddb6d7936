//! Local restore of cold-only objects (docs/cold-tier.md, "Restore on read": "A local reader
//! resolves and reads a locally owned cold backend directly").
//!
//! A get asks with `accept_cold_backing`; for a cold-only object the server may answer with
//! the backing's location (`GetReply::cold_backing`: device id, device root, locator, length,
//! checksum) instead of reading the payload itself. This module then reads the file:
//!
//! - the root is trusted only if its `DEVICE` stamp names the backing's device id (opened
//!   read-only, nothing created; the check is cached per (device, root) and dropped on any
//!   failure, so a remounted or replaced directory is checked again);
//! - the file's header, the payload length and its CRC32C must equal the backing's before a
//!   byte is returned (`LocalDirDevice::read`, the same verified reader the server uses);
//! - on any failure (no such directory on this host, another device's stamp, a missing,
//!   damaged or different file, an unknown `ColdBackingRef` version) the client asks again
//!   without `accept_cold_backing`, and the server restores remotely (and answers with its
//!   own checksum error if the payload is damaged). No unverified byte is ever returned.
//!
//! Large payloads are read off the async scheduler (`block_in_place`, or the blocking pool
//! on a current-thread runtime), so the client's other tasks are not held by file IO; the
//! value's buffer is allocated on the caller's thread either way (warm memory, see `read`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crescent_cold::local_dir::LocalDirDevice;
use crescent_cold::ColdError;
use crescent_wire::cold::ColdBackingRef;
use crescent_wire::rpc::RpcOp;
use crescent_wire::segments::TransportKind;
use crescent_wire::store::{
    GetReply, GetRequest, ObjectId, ReplicaDesc, ReplicaState, STAGED_PAYLOAD_VERSION,
};
use prometheus::{IntCounterVec, Opts, Registry};
use tracing::Instrument;

use crate::client::CrescentClient;
use crate::cold_restore_target::{RestoreTarget, Restored};
use crate::error::ClientError;
use crate::lease::release_of;
use crate::store::inline_checked;

/// Outcomes of local restores (the `outcome` label): read and verified here, or fallen back
/// to the server's restore.
pub const LOCAL_RESTORE_OUTCOMES: [&str; 2] = ["local", "fallback"];
/// Outcomes of staged remote restores (the `outcome` label).
pub const STAGED_RESTORE_OUTCOMES: [&str; 2] = ["staged", "fallback"];

/// A client's local-restore state: on or off, and the device roots it has checked.
#[derive(Debug)]
pub struct LocalColdRestore {
    enabled: AtomicBool,
    /// Remote restores may answer through the server's staging pool (`GetReply::staged`).
    staged: AtomicBool,
    staged_reads: IntCounterVec,
    readers: Mutex<HashMap<(String, PathBuf), Arc<LocalDirDevice>>>,
    restores: IntCounterVec,
}

impl LocalColdRestore {
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled: AtomicBool::new(enabled),
            staged: AtomicBool::new(true),
            staged_reads: IntCounterVec::new(
                Opts::new(
                    "crescent_client_cold_staged_restores_total",
                    "Cold-only objects the server staged for this client, by outcome (staged: \
                     read from the staging pool and verified; fallback: refused or unreadable, \
                     read inline instead).",
                ),
                &["outcome"],
            )
            .expect("valid metric"),
            readers: Mutex::new(HashMap::new()),
            restores: IntCounterVec::new(
                Opts::new(
                    "crescent_client_cold_local_restores_total",
                    "Cold-only objects the server named for a local restore, by outcome (local: \
                     read and verified here; fallback: restored by the server instead).",
                ),
                &["outcome"],
            )
            .expect("valid metric"),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Local restores so far with `outcome` (one of [`LOCAL_RESTORE_OUTCOMES`]).
    pub fn count(&self, outcome: &str) -> u64 {
        self.restores.with_label_values(&[outcome]).get()
    }

    pub fn register(&self, registry: &Registry) -> Result<(), ClientError> {
        registry
            .register(Box::new(self.restores.clone()))
            .and_then(|()| registry.register(Box::new(self.staged_reads.clone())))
            .map_err(|e| ClientError::InvalidArgument(format!("client metrics: {e}")))
    }

    /// Whether remote restores may answer through the server's staging pool.
    pub fn staged_enabled(&self) -> bool {
        self.staged.load(Ordering::Relaxed)
    }

    pub fn set_staged_enabled(&self, enabled: bool) {
        self.staged.store(enabled, Ordering::Relaxed);
    }

    /// Staged restores so far with `outcome` (one of [`STAGED_RESTORE_OUTCOMES`]).
    pub fn staged_count(&self, outcome: &str) -> u64 {
        self.staged_reads.with_label_values(&[outcome]).get()
    }

    pub(crate) fn count_staged(&self, outcome: &str) {
        self.staged_reads.with_label_values(&[outcome]).inc();
    }

    /// Runs `read` with the checked reader of the backing's device directory; on any failure
    /// the check is dropped, so a remounted or replaced directory is checked again.
    pub(crate) fn with_reader<R>(
        &self,
        backing: &ColdBackingRef,
        read: impl FnOnce(&LocalDirDevice) -> Result<R, ColdError>,
    ) -> Result<R, ColdError> {
        let result = self.reader(backing).and_then(|r| read(&r));
        if result.is_err() {
            self.forget(backing);
        }
        result
    }

    /// The checked reader of the backing's device directory.
    fn reader(&self, backing: &ColdBackingRef) -> Result<Arc<LocalDirDevice>, ColdError> {
        let key = (backing.device_id.clone(), PathBuf::from(&backing.root));
        if let Some(r) = self.readers.lock().expect("cold readers").get(&key) {
            return Ok(r.clone());
        }
        let reader = Arc::new(LocalDirDevice::open_reader(&key.0, &key.1)?);
        self.readers
            .lock()
            .expect("cold readers")
            .insert(key, reader.clone());
        Ok(reader)
    }

    fn forget(&self, backing: &ColdBackingRef) {
        self.readers
            .lock()
            .expect("cold readers")
            .remove(&(backing.device_id.clone(), PathBuf::from(&backing.root)));
    }
}

/// A get's answer: the server's reply, and for a cold-only object its value, already
/// verified (read and checked here, or returned inline by the server and checked on arrival).
/// The value is moved out of the reply, so no caller copies it or checks it again.
#[derive(Debug)]
pub(crate) struct GetAnswer {
    pub reply: GetReply,
    pub value: Option<Restored>,
}

impl CrescentClient {
    /// A get's answer, with a cold-only object's value read here when the server named its
    /// backing, or the value the server restored inline; either way its length and CRC32C
    /// were checked exactly once before it is returned.
    pub(crate) async fn get_reply(
        &self,
        id: ObjectId,
        accept_staged: bool,
        target: &RestoreTarget,
    ) -> Result<GetAnswer, ClientError> {
        let local = self.cold_restore.enabled();
        let request = GetRequest {
            id: id.clone(),
            accept_cold_backing: local,
            accept_staged: accept_staged && self.cold_restore.staged_enabled(),
        };
        let mut reply: GetReply = self.call(RpcOp::Get, &request).await?;
        let Some(backing) = reply.cold_backing.take() else {
            return verified_inline(&id.key, reply);
        };
        // Checked before the read: a target region is written only with this object's bytes.
        let read = match matches_reply(&backing, &reply) {
            Ok(()) => {
                self.cold_restore
                    .read(&backing, target)
                    .instrument(tracing::debug_span!(
                        "client.cold_local_restore",
                        length = backing.length
                    ))
                    .await
            }
            Err(e) => Err(e),
        };
        match read {
            Ok(value) => {
                self.cold_restore
                    .restores
                    .with_label_values(&["local"])
                    .inc();
                Ok(GetAnswer {
                    reply,
                    value: Some(value),
                })
            }
            Err(e) => {
                tracing::debug!(key = %id.key, device = %backing.device_id, error = %e,
                    "local cold restore failed; restoring through the server");
                self.cold_restore
                    .restores
                    .with_label_values(&["fallback"])
                    .inc();
                self.release_lease(release_of(&id, &reply)).await;
                let remote = GetRequest {
                    id,
                    accept_cold_backing: false,
                    accept_staged: false,
                };
                let reply: GetReply = self.call(RpcOp::Get, &remote).await?;
                verified_inline(&remote.id.key, reply)
            }
        }
    }

    /// Turns the local restore of cold-only objects on or off (on by default unless
    /// [`crate::ClientOptions::no_local_cold_restore`]); shared by clones of this client.
    pub fn set_local_cold_restore(&self, enabled: bool) {
        self.cold_restore.set_enabled(enabled);
    }

    /// Turns remote restores through the server's staging pool on or off (on by default;
    /// off: a remote restore answers inline); shared by clones of this client.
    pub fn set_staged_cold_restore(&self, enabled: bool) {
        self.cold_restore.set_staged_enabled(enabled);
    }

    /// The client's local-restore counters.
    pub fn local_cold_restore(&self) -> &LocalColdRestore {
        &self.cold_restore
    }
}

/// A reply whose inline value (a cold-only object the server restored) is moved out after its
/// length and CRC32C are checked against the reply's; a reply without one passes unchanged.
fn verified_inline(key: &str, mut reply: GetReply) -> Result<GetAnswer, ClientError> {
    let value = match reply.inline.take() {
        Some(value) => {
            inline_checked(key, reply.size, reply.checksum, &value)?;
            Some(Restored::Value(value))
        }
        None => None,
    };
    Ok(GetAnswer { reply, value })
}

/// A reply whose payload the server staged, as a reply with one replica to read like any
/// hot one: the staged bytes, in the server's staging region (the data plane reads them into
/// the reader's own buffer; the caller checks their CRC32C against the staged checksum before
/// returning anything). Refused (the caller then asks for the bytes inline) when the staged
/// payload's layout version is unknown or it does not describe the object the reply does.
pub(crate) fn staged_as_replica(reply: &GetReply) -> Result<Option<GetReply>, ClientError> {
    let Some(staged) = &reply.staged else {
        return Ok(None);
    };
    let checksum_differs = reply.checksum.is_some_and(|c| c != staged.checksum);
    if staged.version != STAGED_PAYLOAD_VERSION || staged.length != reply.size || checksum_differs {
        return Err(ClientError::Protocol(format!(
            "staged payload v{} of {} bytes (CRC32C {:08x}) for an object of {} bytes ({:?})",
            staged.version, staged.length, staged.checksum, reply.size, reply.checksum
        )));
    }
    Ok(Some(GetReply {
        replicas: vec![ReplicaDesc {
            segment_id: staged.segment_id.clone(),
            owner_id: STAGING_OWNER.to_string(),
            endpoint: Some(staged.endpoint.clone()),
            transport: TransportKind::Tcp,
            offset: staged.offset,
            length: staged.length,
            state: ReplicaState::Complete,
            grant: staged.grant.clone(),
        }],
        checksum: Some(staged.checksum),
        inline: None,
        cold_backing: None,
        staged: None,
        ..reply.clone()
    }))
}

/// Owner id shown for a staged payload read as a replica (never sent anywhere).
const STAGING_OWNER: &str = "crescentd-staging";

/// The backing a server named must describe the object its reply describes (the reader
/// verified the file against the backing's length and checksum, so they carry over).
fn matches_reply(backing: &ColdBackingRef, reply: &GetReply) -> Result<(), ColdError> {
    let checksum_differs = reply.checksum.is_some_and(|c| c != backing.checksum);
    if backing.length != reply.size || checksum_differs {
        return Err(ColdError::InvalidArgument {
            field: "cold_backing",
            reason: format!(
                "names {} bytes (CRC32C {:08x}) for an object of {} bytes ({:?})",
                backing.length, backing.checksum, reply.size, reply.checksum
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "cold_restore_tests.rs"]
mod tests;

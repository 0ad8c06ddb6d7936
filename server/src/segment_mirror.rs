//! Keeps the object directory (in memory) in step with the journaled `SegmentRegistry`.
//!
//! Every segment command goes through [`SegmentMirror::execute`]: commands run one at a time,
//! so their committed events reach the directory in journal order (an unmount and a re-mount of
//! the same id can never be applied the other way round). Checks that only the directory can
//! make run before the command is journaled, so a refused command journals nothing:
//! a segment too small to allocate from is INVALID_ARGUMENT, and an unmount of a segment whose
//! replicas are read-leased is BUSY.

use std::sync::Arc;

use crescent_actors::runtime::{Executed, RuntimeError};
use crescent_actors::segment_registry::{
    SegmentRegistry, SegmentRegistryCommand, SegmentRegistryError, SegmentRegistryEvent,
    INSTANCE_ID,
};
use crescent_actors::AggregateRegistry;
use crescent_store::{MountSpec, ObjectDirectory, StoreError};

use crate::liveness::OwnerLiveness;

/// Why a segment command was refused.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error(transparent)]
    Registry(#[from] RuntimeError<SegmentRegistryError>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct SegmentMirror {
    registry: AggregateRegistry<SegmentRegistry>,
    directory: Arc<ObjectDirectory>,
    liveness: Arc<OwnerLiveness>,
    /// Serialises execute-then-mirror (see the module doc).
    serial: tokio::sync::Mutex<()>,
}

/// A segment's transport as the wire names it (the directory's routes carry it).
pub(crate) fn wire_transport(
    t: crescent_actors::segment_registry::TransportKind,
) -> crescent_wire::segments::TransportKind {
    use crescent_actors::segment_registry::TransportKind as Domain;
    use crescent_wire::segments::TransportKind;
    match t {
        Domain::Tcp => TransportKind::Tcp,
        Domain::TransferEngine => TransportKind::TransferEngine,
        Domain::Embedded => TransportKind::Embedded,
    }
}

impl SegmentMirror {
    pub fn new(
        registry: AggregateRegistry<SegmentRegistry>,
        directory: Arc<ObjectDirectory>,
        liveness: Arc<OwnerLiveness>,
    ) -> Self {
        Self {
            registry,
            directory,
            liveness,
            serial: tokio::sync::Mutex::new(()),
        }
    }

    fn now_ms(&self) -> i64 {
        self.registry.runtime().clock().now_ms()
    }

    /// At startup, before serving: mounts every recovered segment (their objects are gone
    /// until owners replay them) and gives every recovered owner a fresh TTL window.
    pub fn mirror_recovered(&self, state: &SegmentRegistry, now_ms: i64) {
        for (owner_id, owner) in state.owners() {
            self.liveness
                .registered(owner_id, owner.incarnation, now_ms);
        }
        for (segment_id, seg) in state.segments() {
            let endpoint = state.owner(&seg.owner_id).and_then(|o| o.endpoint.clone());
            let spec = MountSpec {
                segment_id: segment_id.clone(),
                owner_id: seg.owner_id.clone(),
                endpoint,
                transport: wire_transport(seg.transport),
                size: seg.size,
            };
            if let Err(e) = self.directory.mount_segment(spec, now_ms) {
                tracing::warn!(segment = %segment_id, error = %e,
                    "recovered segment cannot hold objects; it stays journaled but unused");
            }
        }
    }

    /// Runs a segment registry command and mirrors its committed events into the directory.
    pub async fn execute(
        &self,
        cmd: SegmentRegistryCommand,
    ) -> Result<Executed<SegmentRegistryEvent>, MirrorError> {
        let _serial = self.serial.lock().await;
        self.precheck(&cmd)?;
        let registering = match &cmd {
            SegmentRegistryCommand::RegisterOwner {
                owner_id,
                incarnation,
                ..
            } => Some((owner_id.clone(), *incarnation)),
            _ => None,
        };
        let done = self.registry.execute(INSTANCE_ID, cmd).await?;
        self.apply(&done.events).await;
        if let Some((owner_id, incarnation)) = registering {
            // Even an idempotent repeat proves the owner is alive.
            self.liveness
                .registered(&owner_id, incarnation, self.now_ms());
        }
        Ok(done)
    }

    /// Removes an owner that stopped heartbeating, unless it was heard from (or re-registered)
    /// since `expired` listed it. Returns whether it was removed.
    pub async fn expire_owner(
        &self,
        owner_id: &str,
        incarnation: u64,
        now_ms: i64,
    ) -> Result<bool, MirrorError> {
        let _serial = self.serial.lock().await;
        if !self.liveness.still_expired(owner_id, incarnation, now_ms) {
            return Ok(false);
        }
        // Drop the objects first so they are counted as lost to an expired owner (the journaled
        // unmounts applied below then find nothing left). The owner is silent past its TTL, so
        // its replicas are unreachable whatever the journal append does; and a failed append is
        // fatal for the whole process anyway.
        let report = self.directory.drop_owner(owner_id, now_ms);
        let cmd = SegmentRegistryCommand::RemoveOwner {
            owner_id: owner_id.to_string(),
            reason: "heartbeat timeout".into(),
        };
        match self.registry.execute(INSTANCE_ID, cmd).await {
            Ok(done) => self.apply(&done.events).await,
            // Already gone from the registry: only the in-memory side is left to clean.
            Err(RuntimeError::Domain(SegmentRegistryError::NotFound { .. })) => {
                self.liveness.removed(owner_id);
            }
            Err(e) => return Err(e.into()),
        }
        tracing::warn!(owner = %owner_id, incarnation, segments = report.segments,
            objects_dropped = report.objects_dropped, "owner expired (heartbeat timeout)");
        Ok(true)
    }

    fn precheck(&self, cmd: &SegmentRegistryCommand) -> Result<(), MirrorError> {
        match cmd {
            SegmentRegistryCommand::MountSegment { size, .. }
                if *size < crescent_store::allocator::SMALL_ALIGN && *size > 0 =>
            {
                Err(StoreError::InvalidArgument {
                    field: "size",
                    reason: format!(
                        "{size}: a segment holds at least {} bytes",
                        crescent_store::allocator::SMALL_ALIGN
                    ),
                }
                .into())
            }
            SegmentRegistryCommand::UnmountSegment { segment_id } => {
                // Atomic check-and-unmount in the directory: BUSY while leased. A segment the
                // directory does not know is left for the registry to judge (NOT_FOUND).
                match self
                    .directory
                    .unmount_segment(segment_id, false, self.now_ms())
                {
                    Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
            _ => Ok(()),
        }
    }

    async fn owner_endpoint(&self, owner_id: &str) -> Option<String> {
        let id = owner_id.to_string();
        self.registry
            .read(INSTANCE_ID, move |r: &SegmentRegistry| {
                r.owner(&id).and_then(|o| o.endpoint.clone())
            })
            .await
            .ok()
            .flatten()
    }

    /// Mounts `spec`; a segment already mounted with other parameters (its owner announced a
    /// new endpoint) is re-mounted: replicas that named the old endpoint could not be read.
    fn ensure_mounted(&self, spec: MountSpec, now_ms: i64) {
        let id = spec.segment_id.clone();
        match self.directory.mount_segment(spec.clone(), now_ms) {
            Ok(_) => {}
            Err(StoreError::Conflict { .. }) => {
                let dropped = self.directory.unmount_segment(&id, true, now_ms);
                tracing::warn!(segment = %id, ?dropped,
                    "segment re-mounted with its owner's new endpoint");
                if let Err(e) = self.directory.mount_segment(spec, now_ms) {
                    tracing::error!(segment = %id, error = %e, "re-mount refused");
                }
            }
            Err(e) => tracing::error!(segment = %id, error = %e,
                "journaled segment refused by the object directory"),
        }
    }

    async fn apply(&self, events: &[SegmentRegistryEvent]) {
        let now_ms = self.now_ms();
        for event in events {
            match event {
                SegmentRegistryEvent::OwnerRegistered(e) => {
                    self.liveness.registered(&e.owner_id, e.incarnation, now_ms);
                    if e.endpoint.is_none() {
                        continue;
                    }
                    let owner = e.owner_id.clone();
                    let segs = self
                        .registry
                        .read(INSTANCE_ID, move |r: &SegmentRegistry| {
                            r.segments_of(&owner)
                                .map(|(id, s)| (id.clone(), s.size, s.transport))
                                .collect::<Vec<_>>()
                        })
                        .await
                        .unwrap_or_default();
                    for (segment_id, size, transport) in segs {
                        let spec = MountSpec {
                            segment_id,
                            owner_id: e.owner_id.clone(),
                            endpoint: e.endpoint.clone(),
                            transport: wire_transport(transport),
                            size,
                        };
                        self.ensure_mounted(spec, now_ms);
                    }
                }
                SegmentRegistryEvent::SegmentMounted(e) => {
                    let spec = MountSpec {
                        segment_id: e.segment_id.clone(),
                        owner_id: e.owner_id.clone(),
                        endpoint: self.owner_endpoint(&e.owner_id).await,
                        transport: wire_transport(e.transport),
                        size: e.size,
                    };
                    self.ensure_mounted(spec, now_ms);
                }
                SegmentRegistryEvent::SegmentUnmounted(e) => {
                    // Forced: a requested unmount passed the lease check before journaling;
                    // a restarted or removed owner's memory is gone anyway.
                    match self.directory.unmount_segment(&e.segment_id, true, now_ms) {
                        Ok(_) | Err(StoreError::NotFound { .. }) => {}
                        Err(err) => tracing::error!(segment = %e.segment_id, error = %err,
                            "journaled unmount refused by the object directory"),
                    }
                }
                SegmentRegistryEvent::OwnerRemoved(e) => {
                    self.directory.drop_owner(&e.owner_id, now_ms);
                    self.liveness.removed(&e.owner_id);
                }
            }
        }
    }
}

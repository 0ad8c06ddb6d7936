//! Hot bytes for the cold tier: reading a replica to offload it, and writing a restored value
//! into a fresh hot slot. The embedded segment's memory is read and written directly; replicas
//! in storage owners' segments (`crescent owner` processes, in-process client owners) go over
//! the data-plane transport ([`super::dataplane`]) to the owner's transfer listener.

use std::sync::Arc;

use crescent_cold::device::ColdRoute;
use crescent_cold::driver::HotSource;
use crescent_cold::route::{ActiveColdBacking, HotReplica, ObjectRoute};
use crescent_cold::ColdError;
use crescent_transport::{Grant, RemoteSegment, TransferOp};
use crescent_wire::segments::TransportKind;

use super::context::ColdContext;
use super::dataplane::LazyDataPlane;

/// Who `ActiveColdBacking::owner` names for devices of this node.
pub const COLD_OWNER: &str = "crescentd";

/// The cold tier's client transport. One per process, like a client's: it holds no state of
/// any node (connections are per endpoint), and most processes never start it.
static DATA_PLANE: LazyDataPlane = LazyDataPlane::new();

fn unavailable(reason: impl Into<String>) -> ColdError {
    ColdError::Io {
        path: "hot replica".into(),
        kind: std::io::ErrorKind::NotFound,
        message: reason.into(),
    }
}

/// Hot reads and writes of this node's segments: the embedded one in memory, owners' ones
/// over the transport.
pub struct NodeHot<'a> {
    pub state: &'a ColdContext,
}

/// Where a replica's bytes are reachable from this process.
enum HotPlace {
    Embedded(Arc<crescent_transport::SegmentMemory>),
    /// An owner's segment, and the owner (whose key signs this node's grants for it).
    Remote(RemoteSegment, String),
}

impl NodeHot<'_> {
    fn embedded(&self) -> Option<(String, Arc<crescent_transport::SegmentMemory>)> {
        self.state.embedded.memory()
    }

    /// How to reach `replica` (`length` bytes): embedded memory, an owner's TCP listener, or
    /// the transfer engine serving its segment.
    fn place(&self, replica: &HotReplica, length: u64) -> Result<HotPlace, ColdError> {
        if let Some((id, memory)) = self.embedded() {
            if id == replica.segment_id {
                return Ok(HotPlace::Embedded(memory));
            }
        }
        let desc = self
            .state
            .directory
            .describe_hot_replica(replica, length)
            .ok_or_else(|| unavailable(format!("segment {} is not mounted", replica.segment_id)))?;
        if desc.transport == TransportKind::TransferEngine {
            if self.state.transfer_engine.is_none() {
                return Err(unavailable(format!(
                    "segment {} is served by a transfer engine and crescentd loaded none \
                     ([transport] transfer_engine_lib)",
                    replica.segment_id
                )));
            }
            // The engine resolves the segment by its id; the endpoint only names the owner.
            let endpoint = desc.endpoint.unwrap_or_default();
            return Ok(HotPlace::Remote(
                RemoteSegment::transfer_engine(endpoint, replica.segment_id.as_str()),
                desc.owner_id,
            ));
        }
        if desc.transport != TransportKind::Tcp {
            return Err(unavailable(format!(
                "segment {} is not served over TCP",
                replica.segment_id
            )));
        }
        let endpoint = desc.endpoint.ok_or_else(|| {
            unavailable(format!(
                "segment {} has no transfer endpoint",
                replica.segment_id
            ))
        })?;
        Ok(HotPlace::Remote(
            RemoteSegment::new(endpoint, replica.segment_id.as_str()),
            desc.owner_id,
        ))
    }

    /// This node's own grant for a transfer it runs against an owner's listener (with
    /// `[auth]`: the listener requires one from every peer, crescentd included).
    fn grant(
        &self,
        owner_id: &str,
        remote: &RemoteSegment,
        op: TransferOp,
        offset: u64,
        length: u64,
    ) -> Option<Grant> {
        self.state.auth.grants().map(|g| {
            g.mint(
                owner_id,
                &remote.segment_id,
                op,
                offset,
                length,
                self.state.now_ms(),
                [0; 16],
            )
        })
    }

    fn read_replica(&self, replica: &HotReplica, length: u64) -> Result<Vec<u8>, ColdError> {
        match self.place(replica, length)? {
            HotPlace::Embedded(memory) => {
                let mut buf = vec![0u8; length as usize];
                futures::executor::block_on(memory.read_at(replica.offset, &mut buf))
                    .map_err(|e| unavailable(format!("reading the embedded segment: {e}")))?;
                Ok(buf)
            }
            HotPlace::Remote(remote, owner) => {
                let grant = self.grant(&owner, &remote, TransferOp::Read, replica.offset, length);
                DATA_PLANE
                    .get(
                        &self.state.transport_metrics,
                        self.state.transfer_engine.as_ref(),
                    )?
                    .read(&remote, replica.offset, length, grant)
            }
        }
    }

    /// Reads `length` bytes at `offset` of the segment `segment_id` served at `endpoint` over
    /// the data plane (a storage owner's staging region, for a promotion).
    pub fn read_remote(
        &self,
        endpoint: &str,
        segment_id: &str,
        offset: u64,
        length: u64,
    ) -> Result<Vec<u8>, ColdError> {
        let remote = RemoteSegment::new(endpoint, segment_id);
        let owner = super::staging::staged_owner(segment_id);
        let grant = self.grant(owner, &remote, TransferOp::Read, offset, length);
        DATA_PLANE
            .get(
                &self.state.transport_metrics,
                self.state.transfer_engine.as_ref(),
            )?
            .read(&remote, offset, length, grant)
    }

    /// Writes `bytes` at `offset` of `segment_id` (a restore's promotion).
    pub fn write(&self, segment_id: &str, offset: u64, bytes: &[u8]) -> Result<(), ColdError> {
        let replica = HotReplica {
            segment_id: segment_id.to_string(),
            offset,
        };
        match self.place(&replica, bytes.len() as u64)? {
            HotPlace::Embedded(memory) => {
                futures::executor::block_on(memory.write_at(offset, bytes))
                    .map_err(|e| unavailable(format!("writing the embedded segment: {e}")))
            }
            HotPlace::Remote(remote, owner) => {
                let length = bytes.len() as u64;
                let grant = self.grant(&owner, &remote, TransferOp::Write, offset, length);
                DATA_PLANE
                    .get(
                        &self.state.transport_metrics,
                        self.state.transfer_engine.as_ref(),
                    )?
                    .write(&remote, offset, bytes, grant)
            }
        }
    }
}

impl HotSource for NodeHot<'_> {
    /// The first replica (embedded first) whose bytes verify against the route's checksum and
    /// length: a reused slot, or an owner gone since the route was read, is skipped.
    fn read_hot(&self, route: &ObjectRoute) -> Result<Vec<u8>, ColdError> {
        let _span = tracing::debug_span!("cold.read_hot", length = route.length).entered();
        let embedded = self.embedded().map(|(id, _)| id);
        let mut order: Vec<&HotReplica> = route.replicas.iter().collect();
        order.sort_by_key(|r| Some(&r.segment_id) != embedded.as_ref());
        let mut last = unavailable(format!("{} has no hot replica", route.key));
        for replica in order {
            let buf = match self.read_replica(replica, route.length) {
                Ok(buf) => buf,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            // The hot copy must still be the content the route names (a reused slot never is).
            let actual = crescent_cold::payload_checksum(&buf);
            if actual != route.checksum {
                last = ColdError::ChecksumMismatch {
                    locator: format!("{}@{}", replica.segment_id, replica.offset),
                    expected: route.checksum,
                    actual,
                };
                continue;
            }
            return Ok(buf);
        }
        Err(last)
    }
}

/// The cold-only route of a journaled cold route (restart, failover).
pub fn route_from_journal(route: &ColdRoute) -> ObjectRoute {
    ObjectRoute {
        key: route.object_key.clone(),
        version: route.route_version,
        content_op: route.content_op,
        length: route.length,
        checksum: route.checksum,
        replicas: Vec::new(),
        cold: Some(ActiveColdBacking::Materialized {
            cold_op: route.op_id,
            content_op: route.content_op,
            owner: COLD_OWNER.to_string(),
            device_id: route.device_id.clone(),
            locator: route.locator.clone(),
            length: route.length,
            checksum: route.checksum,
        }),
    }
}

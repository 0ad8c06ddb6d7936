//! Hot bytes for the cold tier: reading a replica to offload it, and writing a restored value
//! into a fresh hot slot. This node can reach the memory of its own embedded segment; replicas
//! in other owners' segments are not readable from here (their offloads fail retryably).

use std::sync::Arc;

use crescent_cold::device::ColdRoute;
use crescent_cold::driver::HotSource;
use crescent_cold::route::{ActiveColdBacking, ObjectRoute};
use crescent_cold::ColdError;

use crate::node::NodeState;

/// Who `ActiveColdBacking::owner` names for devices of this node.
pub const COLD_OWNER: &str = "crescentd";

fn unavailable(reason: impl Into<String>) -> ColdError {
    ColdError::Io {
        path: "hot replica".into(),
        kind: std::io::ErrorKind::NotFound,
        message: reason.into(),
    }
}

/// Hot reads from the embedded segment's memory.
pub struct EmbeddedHot<'a> {
    pub state: &'a NodeState,
}

impl EmbeddedHot<'_> {
    fn memory(&self) -> Option<(String, Arc<crescent_transport::SegmentMemory>)> {
        let guard = self.state.embedded.lock().expect("embedded mutex");
        guard
            .as_ref()
            .map(|e| (e.segment_id.clone(), e.memory().clone()))
    }

    /// Writes `bytes` at `offset` of the embedded segment (a restore's promotion).
    pub fn write(&self, segment_id: &str, offset: u64, bytes: &[u8]) -> Result<(), ColdError> {
        let (id, memory) = self
            .memory()
            .ok_or_else(|| unavailable("no embedded segment"))?;
        if id != segment_id {
            return Err(unavailable(format!(
                "segment {segment_id} is not this node's"
            )));
        }
        futures::executor::block_on(memory.write_at(offset, bytes))
            .map_err(|e| unavailable(format!("writing the embedded segment: {e}")))
    }
}

impl HotSource for EmbeddedHot<'_> {
    fn read_hot(&self, route: &ObjectRoute) -> Result<Vec<u8>, ColdError> {
        let (id, memory) = self
            .memory()
            .ok_or_else(|| unavailable("no embedded segment"))?;
        let replica = route
            .replicas
            .iter()
            .find(|r| r.segment_id == id)
            .ok_or_else(|| {
                unavailable(format!(
                    "{} has no replica in this node's memory",
                    route.key
                ))
            })?;
        let mut buf = vec![0u8; route.length as usize];
        futures::executor::block_on(memory.read_at(replica.offset, &mut buf))
            .map_err(|e| unavailable(format!("reading the embedded segment: {e}")))?;
        // The hot copy must still be the content the route names (a reused slot never is).
        let actual = crescent_cold::payload_checksum(&buf);
        if actual != route.checksum {
            return Err(ColdError::ChecksumMismatch {
                locator: format!("{}@{}", replica.segment_id, replica.offset),
                expected: route.checksum,
                actual,
            });
        }
        Ok(buf)
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

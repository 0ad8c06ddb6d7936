//! What the cold tier takes from its node: the object directory (the route authority), the
//! actor runtime (the devices' actors and the server clock), the metrics registry, the
//! transport metrics of its data plane, the grants it signs owner transfers with, the managed
//! weights it serves, and the embedded segment's memory. The node builds one [`ColdContext`]
//! and hands it to every part of the tier (docs/architecture.md, "Server modules").

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use crescent_actors::Runtime;
use crescent_cold::ColdDevice;
use crescent_store::ObjectDirectory;
use crescent_transport::{SegmentMemory, TransportMetrics};

use super::staging::StagedRestores;
use super::ColdTier;
use crate::auth::AuthState;
use crate::weights::WeightService;

/// Recovered `ColdDevice` states by device id, with the seq they were recovered through.
pub type ColdRecovered = Mutex<Option<(BTreeMap<String, ColdDevice>, u64)>>;

/// The embedded segment as the cold tier reaches it: the module that serves the segment
/// (`crate::embedded`) implements it, so the tier never depends on that module.
pub trait EmbeddedHot: Send + Sync {
    /// The segment's id and its memory, while this node serves one.
    fn memory(&self) -> Option<(String, Arc<SegmentMemory>)>;
    /// The remote-restore staging pool on the segment's listener, if one runs.
    fn staging(&self) -> Option<Arc<StagedRestores>>;
}

/// The node's parts the cold tier uses.
pub struct ColdContext {
    /// Object metadata and routes (in memory, not journaled).
    pub directory: Arc<ObjectDirectory>,
    /// The actor runtime: the devices' actors run on it and its clock is the server's.
    pub runtime: Runtime,
    /// Where the tier's metrics are registered.
    pub registry: prometheus::Registry,
    pub transport_metrics: TransportMetrics,
    /// The transfer engine the tier loads beside TCP to reach segments mounted with transport
    /// `transfer_engine` (`[transport]`, else the environment).
    pub transfer_engine: Option<crescent_transport::ffi::FfiConfig>,
    /// Credentials: the grants this node signs its transfers with.
    pub auth: Arc<AuthState>,
    /// Managed weight revisions, which migrate to and from the tier.
    pub weights: Arc<WeightService>,
    /// The tier, once [`super::start`] has reconciled it (the node shares the cell).
    pub cold: Arc<OnceLock<Arc<ColdTier>>>,
    /// The recovered `ColdDevice` states (and their seq), until the tier takes them.
    pub recovered: ColdRecovered,
    /// The embedded segment, while the node serves one.
    pub embedded: Arc<dyn EmbeddedHot>,
}

impl ColdContext {
    /// The server clock (ms since the Unix epoch): the one the aggregates' commands see.
    pub fn now_ms(&self) -> i64 {
        self.runtime.clock().now_ms()
    }

    /// The staging pool of this node's embedded segment, if it serves one.
    pub fn embedded_staging(&self) -> Option<Arc<StagedRestores>> {
        self.embedded.staging()
    }
}

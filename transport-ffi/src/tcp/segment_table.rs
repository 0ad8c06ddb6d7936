//! The segments one process serves (by id and by wire handle), the NOTIFY handler, and the
//! grant keys its listener checks transfers against (docs/security.md, "The data plane").

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock, Weak};

use tracing::{debug, warn};

use super::protocol::{Status, MAX_NOTIFY_LEN};
use crate::error::{Result, TransportError};
use crate::grant::{Grant, GrantKey, GrantKeys, GrantRefusal};
use crate::memory::SegmentMemory;
use crate::transport::{check_segment_id, TransferOp};

struct ServedSegment {
    id: Arc<str>,
    memory: Arc<SegmentMemory>,
}

#[derive(Default)]
struct TableInner {
    by_id: HashMap<Arc<str>, u32>,
    by_handle: HashMap<u32, ServedSegment>,
    /// With keys, every READ and WRITE needs a grant signed by one of them; without, the
    /// listener serves any transfer (docs/security.md, "The data plane"). Beside the
    /// segments so that a request takes one lock.
    grants: Option<GrantKeys>,
}

/// Answers a NOTIFY payload (`Err`: refused, answered with status INVALID). It runs on the
/// connection's task, so it must be quick and must not block.
pub type NotifyHandler = Arc<dyn Fn(&[u8]) -> std::result::Result<Vec<u8>, String> + Send + Sync>;

/// The segments one process serves, by id and by wire handle.
pub(crate) struct SegmentTable {
    pub(crate) epoch: u64,
    next_handle: AtomicU32,
    inner: RwLock<TableInner>,
    notify: RwLock<Option<NotifyHandler>>,
}

/// What a request carried in the grant position.
pub(crate) enum Presented {
    None,
    Malformed,
    Grant(Grant),
}

impl SegmentTable {
    pub(crate) fn new() -> Self {
        Self {
            epoch: rand::random(),
            next_handle: AtomicU32::new(1),
            inner: RwLock::default(),
            notify: RwLock::new(None),
        }
    }

    /// Makes `key` the newest grant key (requiring grants from now on); whether it is new.
    pub(crate) fn install_grant_key(&self, key: GrantKey) -> bool {
        self.write()
            .grants
            .get_or_insert_with(GrantKeys::default)
            .install(key)
    }

    pub(crate) fn grant_keys(&self) -> Option<GrantKeys> {
        self.read().grants.clone()
    }

    /// The segment behind `handle`, if a transfer of `op` on `[offset, offset+length)` with
    /// `presented` may touch it: NOT_FOUND for an unknown handle, PERMISSION_DENIED (with the
    /// reason) for a grant the listener does not accept. The range itself is checked by the
    /// segment's range lock.
    pub(crate) fn admit(
        &self,
        handle: u32,
        op: TransferOp,
        offset: u64,
        length: u64,
        presented: &Presented,
    ) -> std::result::Result<Arc<SegmentMemory>, (Status, Option<GrantRefusal>)> {
        let inner = self.read();
        let served = inner
            .by_handle
            .get(&handle)
            .ok_or((Status::NotFound, None))?;
        let Some(keys) = &inner.grants else {
            return Ok(served.memory.clone());
        };
        let refused = |r: GrantRefusal| (Status::Denied, Some(r));
        let grant = match presented {
            Presented::None => return Err(refused(GrantRefusal::Missing)),
            Presented::Malformed => return Err(refused(GrantRefusal::Malformed)),
            Presented::Grant(g) => g,
        };
        keys.verify(&served.id, op, offset, length, now_ms(), grant)
            .map_err(refused)?;
        Ok(served.memory.clone())
    }

    pub(crate) fn set_notify_handler(&self, handler: Option<NotifyHandler>) {
        *self.notify.write().unwrap_or_else(|p| p.into_inner()) = handler;
    }

    /// Runs the notification handler: `Ok(answer)`, or the status to answer with.
    pub(crate) fn notify(&self, payload: &[u8]) -> std::result::Result<Vec<u8>, Status> {
        let handler = self
            .notify
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(Status::NotFound)?;
        match handler(payload) {
            Ok(answer) if answer.len() as u64 <= MAX_NOTIFY_LEN => Ok(answer),
            Ok(answer) => {
                warn!(len = answer.len(), "notification answer too long; refused");
                Err(Status::Invalid)
            }
            Err(reason) => {
                debug!(%reason, "notification refused");
                Err(Status::Invalid)
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, TableInner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, TableInner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn insert(&self, id: &str, memory: Arc<SegmentMemory>) -> Result<()> {
        check_segment_id(id)?;
        let mut inner = self.write();
        if inner.by_id.contains_key(id) {
            return Err(TransportError::InvalidArgument(format!(
                "segment {id:?} is already served"
            )));
        }
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let id: Arc<str> = id.into();
        inner.by_id.insert(id.clone(), handle);
        inner.by_handle.insert(handle, ServedSegment { id, memory });
        Ok(())
    }

    pub(crate) fn remove(&self, id: &str, endpoint: &str) -> Result<Arc<SegmentMemory>> {
        let mut inner = self.write();
        let handle = inner
            .by_id
            .remove(id)
            .ok_or_else(|| TransportError::SegmentNotFound {
                endpoint: endpoint.to_owned(),
                segment: id.to_owned(),
            })?;
        let served = inner
            .by_handle
            .remove(&handle)
            .expect("by_id and by_handle agree");
        Ok(served.memory)
    }

    /// Handle and size of a served segment.
    pub(crate) fn open(&self, id: &str) -> Option<(u32, u64)> {
        let inner = self.read();
        let handle = *inner.by_id.get(id)?;
        Some((handle, inner.by_handle[&handle].memory.len() as u64))
    }

    pub(crate) fn by_id(&self, id: &str) -> Option<Arc<SegmentMemory>> {
        let inner = self.read();
        let handle = inner.by_id.get(id)?;
        inner.by_handle.get(handle).map(|s| s.memory.clone())
    }

    pub(crate) fn ids(&self) -> Vec<String> {
        self.read()
            .by_handle
            .values()
            .map(|s| s.id.to_string())
            .collect()
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Listeners of this process, for the same-process fast path (endpoint -> its segments).
static LOCAL_LISTENERS: LazyLock<Mutex<HashMap<SocketAddr, Weak<SegmentTable>>>> =
    LazyLock::new(Mutex::default);

/// The segment table behind a listener of this very process, if `endpoint` names one.
pub(crate) fn local_listener(endpoint: &str) -> Option<Arc<SegmentTable>> {
    let addr: SocketAddr = endpoint.parse().ok()?;
    LOCAL_LISTENERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&addr)?
        .upgrade()
}

/// Makes the listener at `addr` reachable by the same-process fast path.
pub(crate) fn register_local(addr: SocketAddr, table: &Arc<SegmentTable>) {
    LOCAL_LISTENERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(addr, Arc::downgrade(table));
}

pub(crate) fn unregister_local(addr: &SocketAddr) {
    LOCAL_LISTENERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(addr);
}

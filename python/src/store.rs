//! `crescent.Store`: a [`CrescentClient`] (optionally also a storage owner, like a Mooncake
//! client with a global segment), its single-key calls here, the batch forms in `batch.rs` and
//! the registered buffers in `buffers.rs`. Every network call releases the GIL.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crescent_client::{BearerToken, ClientOptions, CrescentClient, PutOptions};
use crescent_owner::{Owner, OwnerConfig};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMemoryView};

use crate::errors::{check, invalid};
use crate::runtime::block;

/// A handle on crescentd (or the active of an HA pair): put/get/exists/remove, batches,
/// zero-copy registered buffers. Thread-safe; share one between threads.
#[pyclass(frozen, module = "crescent._native")]
pub struct Store {
    pub(crate) client: Arc<CrescentClient>,
    /// The segment this process serves (`segment_size > 0`), shared with the stores
    /// [`Store::scoped`] makes; only the store that started it stops it.
    owner: Arc<Mutex<Option<Owner>>>,
    starts_owner: bool,
}

/// Every live store's client, for [`settle_all`] at interpreter exit.
static LIVE: Mutex<Vec<Weak<CrescentClient>>> = Mutex::new(Vec::new());

fn live(client: CrescentClient) -> Arc<CrescentClient> {
    let client = Arc::new(client);
    let mut all = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(&client));
    client
}

/// Sends every live store's queued lease releases and waits for their answers: a get's lease
/// is released without waiting (it rides on a later request), so a process that exits right
/// after a get would otherwise leave the lease until its TTL (remove, unmount answer BUSY).
/// `crescent/__init__.py` registers it with `atexit`.
#[pyfunction]
pub fn settle_all(py: Python<'_>) {
    let clients: Vec<Arc<CrescentClient>> = LIVE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    block(py, || async {
        for c in &clients {
            c.settle().await;
        }
    });
}

impl Drop for Store {
    /// A collected store settles too (see [`settle_all`]): `crescent.Store(addr).get(k)` in a
    /// short script must not leave `k` leased. Quick when nothing is queued.
    fn drop(&mut self) {
        crate::runtime::run(self.client.settle());
    }
}

/// The options of one put, from Python keyword arguments.
pub(crate) fn put_options(py: Python<'_>, replicas: u32, upsert: bool) -> PyResult<PutOptions> {
    if replicas == 0 {
        return Err(invalid(py, "replicas must be at least 1"));
    }
    Ok(PutOptions {
        replicas,
        upsert,
        ..PutOptions::default()
    })
}

/// The bytes of a value: `bytes` as they are (no copy), any other C-contiguous buffer
/// (bytearray, memoryview, numpy array) copied once.
pub(crate) fn value_bytes<'a>(value: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    let buffer = byte_buffer(value)?;
    Ok(Cow::Owned(buffer.to_vec(value.py())?))
}

/// A buffer-protocol object seen as bytes: typed arrays (numpy, torch) through a `memoryview`
/// cast to unsigned bytes, which also checks that the memory is C-contiguous.
pub(crate) fn byte_buffer(value: &Bound<'_, PyAny>) -> PyResult<PyBuffer<u8>> {
    if let Ok(b) = PyBuffer::<u8>::get(value) {
        if b.is_c_contiguous() {
            return Ok(b);
        }
    }
    let view = PyMemoryView::from(value)?.call_method1("cast", ("B",))?;
    PyBuffer::<u8>::get(&view)
}

#[pymethods]
impl Store {
    /// `server`: `HOST:PORT` of crescentd (or a comma-separated list, tried in order);
    /// `etcd` + `cluster`: follow the HA pair's leader through etcd instead (or as well).
    /// `tenant`/`domain`: the namespace keys live in. `token`: a bearer token when crescentd
    /// runs with `[auth]`. `segment_size > 0`: this process also serves a segment of that many
    /// bytes (a storage owner, its transfer listener on `local_hostname`); with `[auth]` it
    /// mounts with `owner_token` (an `owner` token, for `owner_id`) when the client token
    /// cannot. `resident=True` commits the whole segment's memory now rather than page by page
    /// on first write (no page fault on the write path; the full size is resident from the
    /// start: docs/python.md).
    #[new]
    #[pyo3(signature = (server=None, *, etcd=None, cluster=None, tenant=None, domain=None,
        token=None, ca_file=None, segment_size=0, local_hostname="127.0.0.1",
        failover_timeout=None, owner_token=None, owner_id=None, resident=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        server: Option<&str>,
        etcd: Option<&str>,
        cluster: Option<&str>,
        tenant: Option<&str>,
        domain: Option<&str>,
        token: Option<&str>,
        ca_file: Option<std::path::PathBuf>,
        segment_size: u64,
        local_hostname: &str,
        failover_timeout: Option<f64>,
        owner_token: Option<&str>,
        owner_id: Option<&str>,
        resident: bool,
    ) -> PyResult<Self> {
        let mut options = match (etcd, cluster) {
            (Some(e), Some(c)) => ClientOptions::etcd(e, c),
            (None, None) => ClientOptions::default(),
            _ => return Err(invalid(py, "etcd and cluster go together")),
        };
        options.servers = crescent_client::client_options::split_list(server.unwrap_or(""));
        options.token = token.map(BearerToken::new);
        options.ca_file = ca_file;
        if let Some(t) = failover_timeout {
            let t = Duration::try_from_secs_f64(t)
                .map_err(|_| invalid(py, "failover_timeout must be a positive number"))?;
            options = options.with_failover_timeout(t);
        }
        let client = check(py, block(py, || CrescentClient::connect(options)))?;
        let client = check(py, client.with_scope(tenant, domain))?;
        let owner = match segment_size {
            0 => None,
            size => {
                let config = OwnerConfig {
                    size,
                    listen: format!("{local_hostname}:0"),
                    owner_id: owner_id.map(str::to_string),
                    resident,
                    ..OwnerConfig::default()
                };
                // The same data plane either way: puts still find the segment as their own.
                let owner_client = match owner_token {
                    Some(t) => check(py, client.with_token(BearerToken::new(t)))?,
                    None => client.clone(),
                };
                Some(check(
                    py,
                    block(py, || Owner::start(&owner_client, config)),
                )?)
            }
        };
        Ok(Self {
            client: live(client),
            owner: Arc::new(Mutex::new(owner)),
            starts_owner: true,
        })
    }

    /// The same connection (and segment) working in another namespace.
    #[pyo3(signature = (tenant=None, domain=None))]
    fn scoped(&self, py: Python<'_>, tenant: Option<&str>, domain: Option<&str>) -> PyResult<Self> {
        Ok(Self {
            client: live(check(py, self.client.with_scope(tenant, domain))?),
            owner: self.owner.clone(),
            starts_owner: false,
        })
    }

    /// The tenant keys live in (`None`: `default`).
    #[getter]
    fn tenant(&self) -> Option<String> {
        self.client.scope().tenant().map(str::to_string)
    }

    /// The crescentd requests go to now.
    #[getter]
    fn server(&self) -> String {
        self.client.server()
    }

    /// The id of the segment this process serves, if any.
    #[getter]
    fn segment(&self) -> Option<String> {
        self.client.own_segment()
    }

    /// Stores `value` (bytes or any C-contiguous buffer) under `key`. Without `upsert` a key
    /// already holding other bytes is refused (CONFLICT); the same bytes again succeed.
    #[pyo3(signature = (key, value, *, replicas=1, upsert=false))]
    fn put(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        replicas: u32,
        upsert: bool,
    ) -> PyResult<()> {
        let opts = put_options(py, replicas, upsert)?;
        let bytes = value_bytes(value)?;
        let bytes: &[u8] = &bytes;
        check(py, block(py, || self.client.put_with(key, bytes, &opts)))?;
        Ok(())
    }

    /// The bytes stored under `key` (NotFoundError when there are none).
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyBytes>> {
        let value = check(py, block(py, || self.client.get(key)))?;
        Ok(PyBytes::new(py, &value))
    }

    /// Whether `key` holds a complete object.
    fn exists(&self, py: Python<'_>, key: &str) -> PyResult<bool> {
        check(py, block(py, || self.client.is_exist(key)))
    }

    /// [`Store::exists`] under the shorter name.
    fn exist(&self, py: Python<'_>, key: &str) -> PyResult<bool> {
        self.exists(py, key)
    }

    /// The size in bytes of the value under `key`.
    fn get_size(&self, py: Python<'_>, key: &str) -> PyResult<u64> {
        check(py, block(py, || self.client.get_size(key)))
    }

    /// Removes `key`; refused (BUSY) while a reader holds its lease unless `force`.
    #[pyo3(signature = (key, *, force=false))]
    fn remove(&self, py: Python<'_>, key: &str, force: bool) -> PyResult<()> {
        match force {
            true => check(py, block(py, || self.client.remove_forced(key))),
            false => check(py, block(py, || self.client.remove(key))),
        }
    }

    /// Removes every key starting with `prefix`; returns (removed, skipped), skipped being
    /// the leased, pinned or in-progress ones.
    fn remove_prefix(&self, py: Python<'_>, prefix: &str) -> PyResult<(u64, u64)> {
        let r = check(py, block(py, || self.client.remove_prefix(prefix)))?;
        Ok((r.removed, r.skipped))
    }

    /// The keys starting with `prefix`, sorted, as (key, size, complete) tuples.
    #[pyo3(signature = (prefix=""))]
    fn list(&self, py: Python<'_>, prefix: &str) -> PyResult<Vec<(String, u64, bool)>> {
        let all = check(py, block(py, || self.client.list_all(prefix)))?;
        Ok(all
            .into_iter()
            .map(|e| (e.key, e.size, e.complete))
            .collect())
    }

    /// Waits until crescentd has run the lease releases this store queued (gets release their
    /// leases without waiting). `close` and interpreter exit do it.
    fn settle(&self, py: Python<'_>) {
        block(py, || self.client.settle());
    }

    /// Settles, then stops serving this process's segment (unmounted; its objects go with
    /// it). Calls after `close` still work as a plain client. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py);
        if !self.starts_owner {
            return Ok(());
        }
        let owner = self.owner.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(owner) = owner {
            check(py, block(py, || owner.shutdown()))?;
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "Store(server={:?}, tenant={:?}, segment={:?})",
            self.client.server(),
            self.tenant(),
            self.segment()
        )
    }
}

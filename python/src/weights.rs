//! Managed weight revisions from Python (docs/weights.md): publish safetensors files as a READY
//! revision, load a revision's files back byte-identical, read its metadata. The revision's
//! tenant is the `Store`'s.

use crescent_client::WeightStore;
use crescent_wire::weights::{PreferredResidency, WeightId, WeightPolicy};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{check, invalid};
use crate::runtime::block;
use crate::store::{value_bytes, Store};

/// A serde value as the Python object `json.loads` makes of it.
fn to_python<'py, T: serde::Serialize>(py: Python<'py>, value: &T) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value).map_err(|e| invalid(py, e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

fn policy(py: Python<'_>, name: Option<&str>) -> PyResult<Option<WeightPolicy>> {
    let Some(name) = name else { return Ok(None) };
    let residency = match name.to_ascii_lowercase().as_str() {
        "hot" => PreferredResidency::Hot,
        "cold" => PreferredResidency::Cold,
        "mixed" => PreferredResidency::Mixed,
        other => {
            return Err(invalid(
                py,
                format!("unknown residency {other:?} (hot, cold, mixed)"),
            ))
        }
    };
    Ok(Some(WeightPolicy {
        preferred_residency: Some(residency),
        ..WeightPolicy::default()
    }))
}

impl Store {
    fn weight_id(
        &self,
        namespace: &str,
        resource_id: &str,
        revision: &str,
        generation: u64,
    ) -> WeightId {
        WeightId {
            tenant: self.client.scope().tenant().map(str::to_string),
            namespace: namespace.to_string(),
            resource_id: resource_id.to_string(),
            revision: revision.to_string(),
            generation,
        }
    }
}

#[pymethods]
impl Store {
    /// Publishes safetensors files as a READY revision: `files` maps each file name to its
    /// bytes (one payload object per tensor, so a load rebuilds them byte-identical).
    /// `residency`: "hot", "cold" or "mixed" (default: the cluster's). Returns the
    /// revision's metadata as a dict.
    #[pyo3(signature = (namespace, resource_id, revision, files, *, generation=1, residency=None))]
    #[allow(clippy::too_many_arguments)]
    fn weights_publish<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        resource_id: &str,
        revision: &str,
        files: &Bound<'py, PyDict>,
        generation: u64,
        residency: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let id = self.weight_id(namespace, resource_id, revision, generation);
        let policy = policy(py, residency)?;
        let named: Vec<(String, Bound<'py, PyAny>)> = files
            .iter()
            .map(|(k, v)| Ok((k.extract::<String>()?, v)))
            .collect::<PyResult<_>>()?;
        let bytes = named
            .iter()
            .map(|(name, v)| Ok((name.as_str(), value_bytes(v)?)))
            .collect::<PyResult<Vec<_>>>()?;
        let store = WeightStore::new(&self.client);
        let meta = block(py, || async {
            let mut writer = store.weight_put(id, policy).await?;
            for (name, file) in &bytes {
                writer.add_safetensors(name, file).await?;
            }
            writer.close().await
        });
        to_python(py, &check(py, meta)?)
    }

    /// The files of a revision, rebuilt byte-identical: `{file name: bytes}` (read under a
    /// lease held by `holder`, released before this returns).
    #[pyo3(signature = (namespace, resource_id, revision, *, generation=1, holder="crescent-py"))]
    fn weights_load<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        resource_id: &str,
        revision: &str,
        generation: u64,
        holder: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let id = self.weight_id(namespace, resource_id, revision, generation);
        let store = WeightStore::new(&self.client);
        let loaded = check(py, block(py, || store.weight_get(&id, holder)))?;
        let files = check(py, loaded.files())?;
        let out = PyDict::new(py);
        for (name, bytes) in files {
            out.set_item(name, PyBytes::new(py, &bytes))?;
        }
        Ok(out)
    }

    /// A revision's metadata as a dict (availability, residency, sizes, ...).
    #[pyo3(signature = (namespace, resource_id, revision, *, generation=1))]
    fn weights_metadata<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        resource_id: &str,
        revision: &str,
        generation: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let id = self.weight_id(namespace, resource_id, revision, generation);
        let store = WeightStore::new(&self.client);
        let meta = check(py, block(py, || store.weight_get_metadata(&id)))?;
        to_python(py, &meta)
    }
}

//! The batch forms of `crescent.Store`. Each returns one entry per key, in order: the item's
//! result (None for a put or remove, the bytes for a get, a bool for exists) or, for an item
//! that failed, its exception instance (not raised). A failure of the whole batch (crescentd
//! unreachable, a bad argument) raises.

use std::borrow::Cow;

use crescent_client::ClientError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{check, invalid, to_py};
use crate::runtime::block;
use crate::store::{put_options, value_bytes, Store};

thread_local! {
    /// Each thread's reused landing buffer for [`Store::get_batch`].
    static ARENA: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An arena larger than this (after a batch of large values) is freed rather than kept.
const MAX_KEPT_ARENA: usize = 8 << 20;

/// Per-item results as Python objects: `ok` for successes, exception instances for failures.
fn items<'py, T>(
    py: Python<'py>,
    results: Vec<Result<T, ClientError>>,
    ok: impl Fn(Python<'py>, T) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    results
        .into_iter()
        .map(|r| match r {
            Ok(v) => ok(py, v),
            Err(e) => Ok(to_py(py, e).into_value(py).into_bound(py).into_any()),
        })
        .collect()
}

#[pymethods]
impl Store {
    /// Stores `values[i]` under `keys[i]` in one round of requests.
    #[pyo3(signature = (keys, values, *, replicas=1, upsert=false))]
    fn put_batch<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<String>,
        values: Vec<Bound<'py, PyAny>>,
        replicas: u32,
        upsert: bool,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        if keys.len() != values.len() {
            return Err(invalid(
                py,
                format!("{} keys for {} values", keys.len(), values.len()),
            ));
        }
        let opts = put_options(py, replicas, upsert)?;
        let bytes: Vec<Cow<'_, [u8]>> = values.iter().map(value_bytes).collect::<PyResult<_>>()?;
        let results = check(
            py,
            block(py, || self.client.put_batch_with(&keys, &bytes, &opts)),
        )?;
        items(py, results, |py, _| Ok(py.None().into_bound(py)))
    }

    /// The values of `keys` (bytes, or the item's exception: NotFoundError for a missing key).
    fn get_batch<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<String>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        // The values land in one reused arena while the GIL is released, and become `bytes`
        // once it is held again: one copy into Python's memory and no allocation per item
        // beyond the `bytes` object itself.
        let mut arena = ARENA.with(|a| a.take());
        arena.clear();
        let results = block(py, || {
            self.client.get_batch_with(&keys, |value| {
                arena.extend_from_slice(value);
                arena.len() - value.len()..arena.len()
            })
        });
        let out = check(py, results).and_then(|results| {
            items(py, results, |py, range| {
                Ok(PyBytes::new(py, &arena[range]).into_any())
            })
        });
        if arena.capacity() <= MAX_KEPT_ARENA {
            ARENA.with(|a| a.replace(arena));
        }
        out
    }

    /// Whether each key holds a complete object.
    fn batch_exists<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<String>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let results = check(py, block(py, || self.client.batch_is_exist(&keys)))?;
        items(py, results, |py, v| {
            Ok(pyo3::types::PyBool::new(py, v).to_owned().into_any())
        })
    }

    /// Removes each key (an item is refused while read-leased).
    fn remove_batch<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<String>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let results = check(py, block(py, || self.client.remove_batch(&keys)))?;
        items(py, results, |py, _| Ok(py.None().into_bound(py)))
    }
}

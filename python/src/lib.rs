//! `crescent._native`: the extension module under the `crescent` Python package
//! (python/crescent/, docs/python.md). It wraps [`crescent_client::CrescentClient`] with a
//! tokio runtime of its own and releases the GIL around every network call.

mod batch;
mod buffers;
mod errors;
mod runtime;
mod store;
mod weights;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<store::Store>()?;
    m.add_class::<buffers::Buffer>()?;
    m.add_function(wrap_pyfunction!(store::settle_all, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

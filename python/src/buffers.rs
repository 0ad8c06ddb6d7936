//! Registered buffers: memory the client's transport moves bytes straight out of (`put_from`)
//! and into (`get_into`), with no copy through Python. A buffer is either a Python object's
//! memory (bytearray, writable memoryview, numpy array, ...), kept exported for as long as it
//! is registered, or a raw address and length the caller vouches for (Mooncake's
//! `register_buffer(ptr, size)`).

use std::sync::atomic::{AtomicBool, Ordering};

use crescent_client::{CrescentClient, RegisteredBuffer};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use crate::errors::{check, invalid, to_py};
use crate::runtime::{block, run};
use crate::store::{byte_buffer, put_options, Store};

/// A buffer registered with a [`Store`]'s transport. Unregistered by
/// `Store.unregister_buffer` or when garbage-collected.
#[pyclass(frozen, module = "crescent._native")]
pub struct Buffer {
    inner: RegisteredBuffer,
    client: CrescentClient,
    registered: AtomicBool,
    /// The exported Python object whose memory this is (None for a raw address). Dropped
    /// only after the registration is gone, so no transfer can touch freed memory.
    _export: Option<PyBuffer<u8>>,
}

impl Buffer {
    fn unregister(&self) -> Result<(), crescent_client::ClientError> {
        if self.registered.swap(false, Ordering::AcqRel) {
            return run(self.client.unregister_buffer(&self.inner));
        }
        Ok(())
    }

    fn live(&self, py: Python<'_>) -> PyResult<&RegisteredBuffer> {
        match self.registered.load(Ordering::Acquire) {
            true => Ok(&self.inner),
            false => Err(invalid(py, "the buffer was unregistered")),
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Err(e) = self.unregister() {
            report_unregister_failure(&e);
        }
    }
}

/// A failed unregistration at garbage collection has no caller to tell; it cannot leave the
/// memory in use (transfers completed before their calls returned).
fn report_unregister_failure(e: &crescent_client::ClientError) {
    eprintln!("crescent: unregistering a buffer at collection failed: {e}");
}

#[pymethods]
impl Buffer {
    /// The buffer's start address.
    #[getter]
    fn address(&self) -> usize {
        self.inner.as_ptr() as usize
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Buffer(address={:#x}, size={}, registered={})",
            self.address(),
            self.inner.len(),
            self.registered.load(Ordering::Acquire)
        )
    }
}

/// The byte range `[offset, offset+size)` of `buf`, `size` defaulting to the rest.
fn range(py: Python<'_>, buf: &Buffer, offset: usize, size: Option<usize>) -> PyResult<usize> {
    let len = buf.inner.len();
    match size {
        Some(s) if offset.checked_add(s).is_some_and(|end| end <= len) => Ok(s),
        None if offset <= len => Ok(len - offset),
        _ => Err(invalid(
            py,
            format!("range at {offset} of size {size:?} is outside the {len}-byte buffer"),
        )),
    }
}

#[pymethods]
impl Store {
    /// Registers a writable, C-contiguous buffer-protocol object (bytearray, numpy array,
    /// writable memoryview) for zero-copy `put_from`/`get_into`. The object stays exported
    /// (a bytearray cannot be resized) while registered.
    fn register_buffer(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let export = byte_buffer(obj)?;
        if export.readonly() {
            return Err(invalid(py, "a registered buffer must be writable"));
        }
        let (ptr, len) = (export.buf_ptr() as usize, export.len_bytes());
        self.register(py, ptr, len, Some(export))
    }

    /// Registers `size` bytes at address `ptr` (Mooncake's form). The caller keeps that memory
    /// valid and untouched by others while transfers run, until it is unregistered.
    fn register_buffer_ptr(&self, py: Python<'_>, ptr: usize, size: usize) -> PyResult<Buffer> {
        if ptr == 0 || size == 0 {
            return Err(invalid(py, "a buffer needs a non-null address and a size"));
        }
        self.register(py, ptr, size, None)
    }

    /// Forgets a registered buffer; later transfers naming it fail.
    fn unregister_buffer(&self, py: Python<'_>, buffer: &Buffer) -> PyResult<()> {
        check(py, py.detach(|| buffer.unregister()))
    }

    /// Stores `[offset, offset+size)` of a registered buffer under `key`, sent straight out
    /// of it.
    #[pyo3(signature = (key, buffer, offset=0, size=None, *, replicas=1, upsert=false))]
    #[allow(clippy::too_many_arguments)]
    fn put_from(
        &self,
        py: Python<'_>,
        key: &str,
        buffer: &Buffer,
        offset: usize,
        size: Option<usize>,
        replicas: u32,
        upsert: bool,
    ) -> PyResult<()> {
        let opts = put_options(py, replicas, upsert)?;
        let len = range(py, buffer, offset, size)?;
        let src = buffer.live(py)?;
        check(
            py,
            block(py, || self.client.put_from(key, src, offset, len, &opts)),
        )?;
        Ok(())
    }

    /// Reads the value of `key` into a registered buffer at `offset`; returns its size.
    #[pyo3(signature = (key, buffer, offset=0))]
    fn get_into(
        &self,
        py: Python<'_>,
        key: &str,
        buffer: &Buffer,
        offset: usize,
    ) -> PyResult<usize> {
        let dst = buffer.live(py)?;
        check(py, block(py, || self.client.get_into(key, dst, offset)))
    }

    /// `put_from` of each `(key, buffer, offset, size)` item in one released section; one
    /// entry per item: None or the item's exception instance.
    #[pyo3(signature = (keys, buffers, offsets, sizes, *, replicas=1, upsert=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_put_from<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<String>,
        buffers: Vec<PyRef<'py, Buffer>>,
        offsets: Vec<usize>,
        sizes: Vec<usize>,
        replicas: u32,
        upsert: bool,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let n = keys.len();
        if buffers.len() != n || offsets.len() != n || sizes.len() != n {
            return Err(invalid(
                py,
                "keys, buffers, offsets and sizes differ in length",
            ));
        }
        let opts = put_options(py, replicas, upsert)?;
        let mut srcs = Vec::with_capacity(n);
        for (b, (&o, &s)) in buffers.iter().zip(offsets.iter().zip(&sizes)) {
            range(py, b, o, Some(s))?;
            srcs.push((b.live(py)?, o, s));
        }
        let results = block(py, || async {
            let mut out = Vec::with_capacity(n);
            for (key, &(src, offset, len)) in keys.iter().zip(&srcs) {
                out.push(self.client.put_from(key, src, offset, len, &opts).await);
            }
            out
        });
        Ok(results
            .into_iter()
            .map(|r| match r {
                Ok(_) => py.None().into_bound(py),
                Err(e) => to_py(py, e).into_value(py).into_bound(py).into_any(),
            })
            .collect())
    }

    /// `get_into` of each `(key, buffer, offset)` item in one released section; one entry per
    /// item: the size read or the item's exception instance.
    fn batch_get_into<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<String>,
        buffers: Vec<PyRef<'py, Buffer>>,
        offsets: Vec<usize>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let n = keys.len();
        if buffers.len() != n || offsets.len() != n {
            return Err(invalid(py, "keys, buffers and offsets differ in length"));
        }
        let dsts: Vec<(&RegisteredBuffer, usize)> = buffers
            .iter()
            .zip(&offsets)
            .map(|(b, &o)| Ok((b.live(py)?, o)))
            .collect::<PyResult<_>>()?;
        let results = block(py, || async {
            let mut out = Vec::with_capacity(n);
            for (key, &(dst, offset)) in keys.iter().zip(&dsts) {
                out.push(self.client.get_into(key, dst, offset).await);
            }
            out
        });
        results
            .into_iter()
            .map(|r| match r {
                Ok(size) => Ok(size.into_pyobject(py)?.into_any()),
                Err(e) => Ok(to_py(py, e).into_value(py).into_bound(py).into_any()),
            })
            .collect()
    }
}

impl Store {
    fn register(
        &self,
        py: Python<'_>,
        ptr: usize,
        len: usize,
        export: Option<PyBuffer<u8>>,
    ) -> PyResult<Buffer> {
        // SAFETY: the memory is a Python object's exported buffer, held (and so neither freed
        // nor resized) until after it is unregistered (`Buffer`'s drop order), or an address
        // the caller vouched for (`register_buffer_ptr`'s contract, Mooncake's).
        #[allow(unsafe_code)]
        let registered = block(py, || async move {
            unsafe { self.client.register_buffer_raw(ptr as *mut u8, len).await }
        });
        Ok(Buffer {
            inner: check(py, registered)?,
            client: (*self.client).clone(),
            registered: AtomicBool::new(true),
            _export: export,
        })
    }
}

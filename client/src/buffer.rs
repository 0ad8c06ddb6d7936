//! Memory the data plane moves bytes from and into.
//!
//! - [`RegisteredBuffer`]: a caller's buffer registered once with the client's transport;
//!   `put_from` sends straight out of it and `get_into` lands straight in it (zero copy).
//! - `StagingPool`: registered scratch buffers for `put`/`get` of plain byte slices, reused
//!   across operations so the hot path allocates and registers nothing in steady state.

use std::sync::{Arc, Mutex};

use crescent_transport::{LocalHandle, SegmentMemory, Transport};

use crate::client::CrescentClient;
use crate::error::ClientError;

/// A buffer registered with a client's data plane. Cheap to clone; the memory stays
/// registered until [`crate::CrescentClient::unregister_buffer`].
#[derive(Debug, Clone)]
pub struct RegisteredBuffer {
    pub(crate) handle: LocalHandle,
    pub(crate) memory: Arc<SegmentMemory>,
}

impl RegisteredBuffer {
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// Never true: empty buffers cannot be registered.
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty()
    }

    /// Start address of the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.memory.as_ptr()
    }

    /// Copies `src` into the buffer at `offset` (waits for transfers on overlapping ranges).
    pub async fn write(&self, offset: usize, src: &[u8]) -> Result<(), ClientError> {
        Ok(self.memory.write_at(offset as u64, src).await?)
    }

    /// Copies `dst.len()` bytes out of the buffer at `offset`.
    pub async fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), ClientError> {
        Ok(self.memory.read_at(offset as u64, dst).await?)
    }

    /// Checks that `[offset, offset + len)` lies inside the buffer.
    pub(crate) fn check(&self, offset: usize, len: usize) -> Result<(), ClientError> {
        if offset.checked_add(len).is_some_and(|end| end <= self.len()) {
            return Ok(());
        }
        Err(ClientError::InvalidArgument(format!(
            "range [{offset}, {offset}+{len}) is outside the {}-byte registered buffer",
            self.len()
        )))
    }

    /// CRC32C of a range, computed in place under a shared range lock (no copy, no
    /// allocation; waits for a transfer still landing in the range).
    pub(crate) async fn crc32c(&self, offset: usize, len: usize) -> Result<u32, ClientError> {
        Ok(self
            .memory
            .with_read(offset as u64, len as u64, crescent_checksum::crc32c)
            .await?)
    }
}

impl CrescentClient {
    /// Registers an owned buffer (freed when unregistered and no transfer uses it).
    pub async fn register_buffer(&self, buffer: Vec<u8>) -> Result<RegisteredBuffer, ClientError> {
        let memory = SegmentMemory::from_boxed_slice(buffer.into_boxed_slice())?;
        self.register_memory(memory).await
    }

    /// Registers a buffer that lives for the whole program.
    pub async fn register_static_buffer(
        &self,
        buffer: &'static mut [u8],
    ) -> Result<RegisteredBuffer, ClientError> {
        // SAFETY: a `&'static mut` is valid for reads and writes for the rest of the program
        // and, being exclusive, is reachable only through the registration from now on.
        #[allow(unsafe_code)]
        let memory =
            unsafe { SegmentMemory::from_raw_parts(buffer.as_mut_ptr(), buffer.len(), None)? };
        self.register_memory(memory).await
    }

    /// Registers caller memory (e.g. a pinned or device-mapped region) for zero-copy transfers.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes until the buffer is unregistered
    /// and every transfer using it has completed, and nothing else may touch a range while a
    /// transfer on it runs.
    #[allow(unsafe_code)]
    pub async unsafe fn register_buffer_raw(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<RegisteredBuffer, ClientError> {
        // SAFETY: forwarded to the caller (see above).
        let memory = unsafe { SegmentMemory::from_raw_parts(ptr, len, None)? };
        self.register_memory(memory).await
    }

    pub(crate) async fn register_memory(
        &self,
        memory: SegmentMemory,
    ) -> Result<RegisteredBuffer, ClientError> {
        let memory = std::sync::Arc::new(memory);
        let handle = self.data.transport().await?.register(memory.clone())?;
        Ok(RegisteredBuffer { handle, memory })
    }

    /// Forgets a registered buffer; later transfers naming it fail.
    pub async fn unregister_buffer(&self, buffer: &RegisteredBuffer) -> Result<(), ClientError> {
        self.data.transport().await?.unregister(buffer.handle)?;
        Ok(())
    }
}

/// Smallest staging buffer allocated (covers a batch of 128 x 4 KiB values).
const MIN_STAGING: usize = 1 << 20;
/// Staging buffers kept for reuse.
const MAX_IDLE: usize = 8;
/// Larger staging buffers are freed after use instead of kept.
const MAX_POOLED: usize = 64 << 20;

/// Registered scratch buffers of one transport.
#[derive(Debug, Default)]
pub(crate) struct StagingPool {
    idle: Mutex<Vec<RegisteredBuffer>>,
}

impl StagingPool {
    /// A registered buffer of at least `len` bytes, back in the pool when the lease drops.
    pub(crate) fn take<'a>(
        &'a self,
        transport: &'a Arc<dyn Transport>,
        len: usize,
    ) -> Result<StagingLease<'a>, ClientError> {
        let want = len.max(1);
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.iter()
                .position(|b| b.len() >= want)
                .map(|at| idle.swap_remove(at))
        };
        let buffer = match reused {
            Some(b) => b,
            None => {
                let size = want.next_power_of_two().max(MIN_STAGING);
                let memory = Arc::new(SegmentMemory::allocate(size)?);
                let handle = transport.register(memory.clone())?;
                RegisteredBuffer { handle, memory }
            }
        };
        Ok(StagingLease {
            pool: self,
            transport,
            buffer: Some(buffer),
        })
    }

    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.idle.lock().unwrap().len()
    }
}

/// A staging buffer on loan.
pub(crate) struct StagingLease<'a> {
    pool: &'a StagingPool,
    transport: &'a Arc<dyn Transport>,
    buffer: Option<RegisteredBuffer>,
}

impl StagingLease<'_> {
    pub(crate) fn buffer(&self) -> &RegisteredBuffer {
        self.buffer.as_ref().expect("present until drop")
    }
}

impl Drop for StagingLease<'_> {
    fn drop(&mut self) {
        let Some(buffer) = self.buffer.take() else {
            return;
        };
        if buffer.len() <= MAX_POOLED {
            let mut idle = self.pool.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(buffer);
                return;
            }
        }
        // Not kept: forget the registration so the memory is freed with the last reference.
        let _ = self.transport.unregister(buffer.handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_transport::tcp::{TcpConfig, TcpTransport};
    use crescent_transport::TransportMetrics;

    #[tokio::test]
    async fn staging_buffers_are_reused_and_big_ones_are_released() {
        let transport: Arc<dyn Transport> = Arc::new(
            TcpTransport::start(TcpConfig::default(), TransportMetrics::unregistered())
                .await
                .unwrap(),
        );
        let pool = StagingPool::default();
        let first = {
            let lease = pool.take(&transport, 4096).unwrap();
            assert!(lease.buffer().len() >= MIN_STAGING);
            lease.buffer().handle
        };
        assert_eq!(pool.idle(), 1);
        {
            let lease = pool.take(&transport, 100).unwrap();
            assert_eq!(lease.buffer().handle, first, "reused, not re-registered");
            let other = pool.take(&transport, 100).unwrap();
            assert_ne!(other.buffer().handle, first);
        }
        assert_eq!(pool.idle(), 2);
        let big = {
            let lease = pool.take(&transport, MAX_POOLED + 1).unwrap();
            lease.buffer().handle
        };
        assert_eq!(pool.idle(), 2);
        assert!(transport.unregister(big).is_err(), "released on drop");
    }

    #[tokio::test]
    async fn registered_buffer_ranges_and_crc() {
        let memory = Arc::new(SegmentMemory::from_boxed_slice(vec![0u8; 40_000].into()).unwrap());
        let b = RegisteredBuffer {
            handle: LocalHandle(1),
            memory,
        };
        let data: Vec<u8> = (0..35_000u32).map(|i| (i * 7) as u8).collect();
        b.write(1000, &data).await.unwrap();
        assert_eq!(
            b.crc32c(1000, data.len()).await.unwrap(),
            crescent_checksum::crc32c(&data)
        );
        assert!(b.check(0, 40_000).is_ok());
        assert!(b.check(1, 40_000).is_err());
        assert!(b.check(usize::MAX, 2).is_err());
        let mut back = vec![0u8; 10];
        b.read(1000, &mut back).await.unwrap();
        assert_eq!(&back[..], &data[..10]);
    }
}

//! Where a local restore puts the value it reads, and the reads for each place.
//!
//! `get` hands the caller a new value: its buffer is allocated on the caller's thread (glibc
//! keeps freed memory warm per arena and gives each thread its own, so a buffer from the
//! blocking pool's arena was unmapped or `MADV_DONTNEED`ed once the caller freed a batch of
//! them, and every large get faulted in fresh pages: 1024 per 4 MiB). `get_into` has the
//! payload read straight into the caller's registered buffer: no value buffer and no copy,
//! the same single pass (file read, CRC32C as it goes) a plain read of the file makes.

use std::sync::Arc;

use crescent_cold::ColdError;
use crescent_transport::SegmentMemory;
use crescent_wire::cold::{ColdBackingRef, COLD_BACKING_REF_VERSION};

use crate::cold_restore::LocalColdRestore;

/// Payloads at least this long are read off the async scheduler.
pub(crate) const BLOCKING_READ_BYTES: u64 = 256 << 10;

/// Where a local restore puts the value it reads ([`LocalColdRestore::read`]).
#[derive(Debug, Clone)]
pub enum RestoreTarget {
    /// A new value handed to the caller (`get`).
    NewValue,
    /// Straight into `[offset, offset + length)` of a registered region (`get_into`).
    Region {
        memory: Arc<SegmentMemory>,
        offset: u64,
    },
}

/// A locally restored value, its length and CRC32C verified.
#[derive(Debug)]
pub enum Restored {
    /// In a new buffer of exactly its length.
    Value(Vec<u8>),
    /// Already in the target region; its length.
    InPlace(usize),
}

impl LocalColdRestore {
    /// Reads and verifies the backing's payload from its device directory into `target`.
    /// Large payloads are read off the async scheduler: on a multi-thread runtime in place
    /// (`block_in_place` hands this worker's other tasks to the other workers and saves the
    /// two thread switches of a blocking-pool hop), otherwise on the blocking pool. A region
    /// range that is outside the region, or that a transfer holds right now, gets a new value
    /// instead (the get then copies it in, or refuses it).
    pub async fn read(
        self: &Arc<Self>,
        backing: &ColdBackingRef,
        target: &RestoreTarget,
    ) -> Result<Restored, ColdError> {
        checked_kind(backing)?;
        if let RestoreTarget::Region { memory, offset } = target {
            let (me, b, memory, offset) = (self.clone(), backing.clone(), memory.clone(), *offset);
            let read = move || me.read_blocking_region(&b, &memory, offset);
            if let Some(length) = off_scheduler(backing.length, read).await? {
                return Ok(Restored::InPlace(length));
            }
        }
        let mut value = value_buffer(backing)?;
        let (me, b) = (self.clone(), backing.clone());
        let read = move || me.read_blocking_into(&b, &mut value).map(|()| value);
        off_scheduler(backing.length, read)
            .await
            .map(Restored::Value)
    }

    /// Reads and verifies the backing's payload from its device directory (blocking IO).
    pub fn read_blocking(&self, backing: &ColdBackingRef) -> Result<Vec<u8>, ColdError> {
        checked_kind(backing)?;
        let mut value = value_buffer(backing)?;
        self.read_blocking_into(backing, &mut value)?;
        Ok(value)
    }

    /// [`read_blocking`](Self::read_blocking) into `value`, a buffer from [`value_buffer`]
    /// (left empty on error, so no unverified byte is visible).
    fn read_blocking_into(
        &self,
        backing: &ColdBackingRef,
        value: &mut Vec<u8>,
    ) -> Result<(), ColdError> {
        self.with_reader(backing, |r| {
            r.read_into(&backing.locator, backing.length, backing.checksum, value)
        })
    }

    /// Reads and verifies the backing's payload straight into `[offset, offset + length)` of
    /// `memory`, under the range's exclusive lock (no transfer sees it half written); its
    /// length, or `None` when the range is outside the region or held by a transfer now. A
    /// failed check zeroes the range: no unverified byte stays visible.
    fn read_blocking_region(
        &self,
        backing: &ColdBackingRef,
        memory: &SegmentMemory,
        offset: u64,
    ) -> Result<Option<usize>, ColdError> {
        self.with_reader(backing, |reader| {
            let locked = memory.try_with_write(offset, backing.length, |dst| {
                let read = reader.read_into_slice(&backing.locator, backing.checksum, dst);
                if read.is_err() {
                    dst.fill(0);
                }
                read
            });
            match locked {
                Ok(Some(read)) => read.map(|()| Some(backing.length as usize)),
                Ok(None) | Err(_) => Ok(None),
            }
        })
    }
}

/// Runs a blocking read of a `length`-byte payload where it costs least: inline when small,
/// `block_in_place` on a multi-thread runtime, else on the blocking pool.
async fn off_scheduler<R: Send + 'static>(
    length: u64,
    read: impl FnOnce() -> Result<R, ColdError> + Send + 'static,
) -> Result<R, ColdError> {
    if length < BLOCKING_READ_BYTES {
        return read();
    }
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        return tokio::task::block_in_place(read);
    }
    tokio::task::spawn_blocking(read).await.unwrap_or_else(|e| {
        Err(ColdError::Backpressure {
            queue: "local restore",
            reason: format!("the read task ended: {e}"),
        })
    })
}

/// Refuses, before any IO, a backing this client does not read (unknown version or kind).
fn checked_kind(backing: &ColdBackingRef) -> Result<(), ColdError> {
    if backing.version != COLD_BACKING_REF_VERSION || backing.kind != "local_dir" {
        return Err(ColdError::InvalidArgument {
            field: "cold_backing",
            reason: format!(
                "version {} of kind {:?} is not read here",
                backing.version, backing.kind
            ),
        });
    }
    Ok(())
}

/// The empty buffer a backing's value is read into, with room for exactly its length (the
/// reader fills it without growing it). Refuses a length it cannot allocate (the get then
/// falls back to the server's restore instead of aborting the process).
fn value_buffer(backing: &ColdBackingRef) -> Result<Vec<u8>, ColdError> {
    let mut value = Vec::new();
    usize::try_from(backing.length)
        .map_err(|_| ())
        .and_then(|len| value.try_reserve_exact(len).map_err(|_| ()))
        .map_err(|()| ColdError::InvalidArgument {
            field: "cold_backing",
            reason: format!("a value of {} bytes cannot be allocated", backing.length),
        })?;
    Ok(value)
}

//! Memory that the data plane reads and writes: a storage owner's segment, or a client's
//! registered buffer.
//!
//! [`SegmentMemory`] owns (or borrows, for caller buffers) a contiguous region and hands out
//! access only through range locks (see `range_lock`), so concurrent transfers into disjoint
//! ranges proceed in parallel and overlapping ones are serialised instead of racing. All raw
//! pointer work of the crate's Rust side lives in this module.
#![allow(unsafe_code)]

use std::any::Any;
use std::ptr::NonNull;

use crate::error::{Result, TransportError};
use crate::range_lock::{RangeLockGuard, RangeLocks};

/// Who frees the region when the `SegmentMemory` is dropped.
enum Backing {
    /// An anonymous private mapping made here: page aligned, and zero pages are only backed
    /// by RAM once touched, so a large segment costs nothing until it is used.
    Mapped,
    /// A boxed slice given to us; rebuilt and dropped on drop.
    Boxed,
    /// Someone else's memory, kept alive by the optional owner object.
    External(#[allow(dead_code)] Option<Box<dyn Any + Send + Sync>>),
}

/// A contiguous memory region served to, or filled by, the data plane.
pub struct SegmentMemory {
    base: NonNull<u8>,
    len: usize,
    backing: Backing,
    locks: RangeLocks,
}

// SAFETY: the region is plain bytes with no thread affinity; every access goes through range
// locks that exclude a writer from any overlapping reader or writer, so sharing the handle
// between threads cannot create a data race.
unsafe impl Send for SegmentMemory {}
// SAFETY: see `Send` above; `&SegmentMemory` only exposes lock-guarded access.
unsafe impl Sync for SegmentMemory {}

impl std::fmt::Debug for SegmentMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentMemory")
            .field("base", &self.base)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// The system page size (falls back to 4 KiB if it cannot be read).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

impl SegmentMemory {
    /// Allocates `len` zeroed bytes aligned to the page size (an anonymous mapping: memory is
    /// committed page by page as it is written).
    pub fn allocate(len: usize) -> Result<Self> {
        Self::map(len, 0)
    }

    /// [`Self::allocate`], with every page committed now (`MAP_POPULATE`) instead of on its
    /// first write: a storage owner then takes no page fault (and no page zeroing) on the
    /// write path, which is most of the cost of writing a small value into fresh memory.
    /// The resident size is the whole region from the start. Best effort: if the kernel
    /// cannot commit it all now, the rest is committed on first write as usual.
    pub fn allocate_resident(len: usize) -> Result<Self> {
        Self::map(len, libc::MAP_POPULATE)
    }

    /// The region as plain bytes, for good: taking `self` by value means no registration
    /// (which holds an `Arc` of it), transfer or lock can reach it any more, so shared
    /// references to its bytes are safe from here on.
    pub fn freeze(self) -> crate::frozen::FrozenMemory {
        crate::frozen::FrozenMemory::new(self)
    }

    fn map(len: usize, extra_flags: libc::c_int) -> Result<Self> {
        if len == 0 {
            return Err(TransportError::InvalidArgument(
                "segment memory must not be empty".into(),
            ));
        }
        // SAFETY: a fresh anonymous private mapping: no address hint, no file, length > 0.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(TransportError::Io {
                context: format!("mapping {len} bytes of segment memory"),
                reason: std::io::Error::last_os_error().to_string(),
            });
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| TransportError::Io {
            context: format!("mapping {len} bytes of segment memory"),
            reason: "mmap returned a null address".into(),
        })?;
        Ok(Self {
            base,
            len,
            backing: Backing::Mapped,
            locks: RangeLocks::default(),
        })
    }

    /// Takes ownership of a caller buffer (freed when the region is dropped).
    pub fn from_boxed_slice(buffer: Box<[u8]>) -> Result<Self> {
        if buffer.is_empty() {
            return Err(TransportError::InvalidArgument(
                "a registered buffer must not be empty".into(),
            ));
        }
        let len = buffer.len();
        let base = NonNull::new(Box::into_raw(buffer).cast::<u8>())
            .expect("Box::into_raw never returns null");
        Ok(Self {
            base,
            len,
            backing: Backing::Boxed,
            locks: RangeLocks::default(),
        })
    }

    /// Wraps memory the caller owns, for zero-copy transfers straight into it.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes until this `SegmentMemory` (and
    /// every clone of the `Arc` it is put in) is dropped, and nothing else may access the
    /// region while a transfer runs on it. `owner`, if given, is dropped with the region, which
    /// is the easy way to tie the memory's lifetime to it.
    pub unsafe fn from_raw_parts(
        ptr: *mut u8,
        len: usize,
        owner: Option<Box<dyn Any + Send + Sync>>,
    ) -> Result<Self> {
        let base = NonNull::new(ptr).ok_or_else(|| {
            TransportError::InvalidArgument("a registered buffer must not be null".into())
        })?;
        if len == 0 {
            return Err(TransportError::InvalidArgument(
                "a registered buffer must not be empty".into(),
            ));
        }
        Ok(Self {
            base,
            len,
            backing: Backing::External(owner),
            locks: RangeLocks::default(),
        })
    }

    /// Size of the region in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (empty regions are refused); present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start address, for registering the region with a transfer engine. Writing through it
    /// outside a transfer is the caller's responsibility.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Whether `[offset, offset + length)` lies inside the region.
    pub fn in_bounds(&self, offset: u64, length: u64) -> bool {
        offset
            .checked_add(length)
            .is_some_and(|end| end <= self.len as u64)
    }

    /// Checks that `[offset, offset + length)` lies inside the region.
    pub fn check_range(&self, what: &str, offset: u64, length: u64) -> Result<()> {
        if self.in_bounds(offset, length) {
            return Ok(());
        }
        Err(TransportError::OutOfRange {
            what: what.to_owned(),
            offset,
            length,
            size: self.len as u64,
        })
    }

    /// Shared access to a range, waiting for overlapping writers to finish.
    pub(crate) async fn lock_read(
        &self,
        what: &str,
        offset: u64,
        length: u64,
    ) -> Result<ReadGuard<'_>> {
        self.check_range(what, offset, length)?;
        let lock = self.locks.lock(offset, offset + length, false).await;
        Ok(ReadGuard {
            memory: self,
            offset: offset as usize,
            length: length as usize,
            _lock: lock,
        })
    }

    /// Exclusive access to a range, waiting for overlapping readers and writers to finish.
    pub(crate) async fn lock_write(
        &self,
        what: &str,
        offset: u64,
        length: u64,
    ) -> Result<WriteGuard<'_>> {
        self.check_range(what, offset, length)?;
        let lock = self.locks.lock(offset, offset + length, true).await;
        Ok(WriteGuard {
            memory: self,
            offset: offset as usize,
            length: length as usize,
            _lock: lock,
        })
    }

    /// Shared access to a range if no writer holds an overlapping one (`Ok(None)` otherwise).
    pub(crate) fn try_lock_read(
        &self,
        what: &str,
        offset: u64,
        length: u64,
    ) -> Result<Option<ReadGuard<'_>>> {
        self.check_range(what, offset, length)?;
        Ok(self
            .locks
            .try_lock(offset, offset + length, false)
            .map(|lock| ReadGuard {
                memory: self,
                offset: offset as usize,
                length: length as usize,
                _lock: lock,
            }))
    }

    /// Exclusive access to a range if nobody holds an overlapping one (`Ok(None)` otherwise).
    pub(crate) fn try_lock_write(
        &self,
        what: &str,
        offset: u64,
        length: u64,
    ) -> Result<Option<WriteGuard<'_>>> {
        self.check_range(what, offset, length)?;
        Ok(self
            .locks
            .try_lock(offset, offset + length, true)
            .map(|lock| WriteGuard {
                memory: self,
                offset: offset as usize,
                length: length as usize,
                _lock: lock,
            }))
    }

    /// Copies `dst.len()` bytes starting at `offset` out of the region.
    pub async fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let guard = self.lock_read("region", offset, dst.len() as u64).await?;
        dst.copy_from_slice(guard.as_slice());
        Ok(())
    }

    /// The `length` bytes starting at `offset`, as a new vector (no zero-fill before the
    /// copy, unlike reading into a fresh `vec![0; length]`).
    pub async fn read_to_vec(&self, offset: u64, length: u64) -> Result<Vec<u8>> {
        let guard = self.lock_read("region", offset, length).await?;
        Ok(guard.as_slice().to_vec())
    }

    /// Runs `f` on `[offset, offset + length)` with shared access, waiting for overlapping
    /// writers (transfers landing there) to finish first. For a reader that only inspects the
    /// bytes (a checksum): no copy out of the region.
    pub async fn with_read<R>(
        &self,
        offset: u64,
        length: u64,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let guard = self.lock_read("region", offset, length).await?;
        Ok(f(guard.as_slice()))
    }

    /// Gives back the buffer a region was made from with [`Self::from_boxed_slice`], bytes
    /// and all (no copy); any other region comes back as `Err(self)`. Taking `self` by value
    /// means nothing (no transfer, no lock) can still hold the region.
    pub fn into_boxed_slice(self) -> std::result::Result<Box<[u8]>, Self> {
        if !matches!(self.backing, Backing::Boxed) {
            return Err(self);
        }
        let this = std::mem::ManuallyDrop::new(self);
        let slice = std::ptr::slice_from_raw_parts_mut(this.base.as_ptr(), this.len);
        // SAFETY: `base`/`len` came from `Box::<[u8]>::into_raw` in `from_boxed_slice`; `this`
        // is never dropped, so the box is rebuilt exactly once, here. The range locks hold no
        // guard (they borrow `self`, which we own by value) and own no memory besides their
        // own table, which is dropped below.
        let boxed = unsafe { Box::from_raw(slice) };
        // SAFETY: read out of the never-dropped `this` once, so it is dropped exactly once.
        drop(unsafe { std::ptr::read(&this.locks) });
        Ok(boxed)
    }

    /// Copies `src` into the region starting at `offset`.
    pub async fn write_at(&self, offset: u64, src: &[u8]) -> Result<()> {
        let mut guard = self.lock_write("region", offset, src.len() as u64).await?;
        guard.as_mut_slice().copy_from_slice(src);
        Ok(())
    }

    /// Runs `f` on `[offset, offset + length)` with exclusive access, if no transfer (or
    /// anything else) holds an overlapping range now; `Ok(None)` otherwise, without waiting.
    /// For a server filling part of a region it serves (a staging slot) straight from a file:
    /// no bounce buffer, and no transfer can see the range half written.
    pub fn try_with_write<R>(
        &self,
        offset: u64,
        length: u64,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<Option<R>> {
        Ok(self
            .try_lock_write("region", offset, length)?
            .map(|mut guard| f(guard.as_mut_slice())))
    }

    /// Whether nothing (no transfer) holds any part of `[offset, offset + length)` now; false
    /// also for a range outside the region. Never waits.
    pub fn range_idle(&self, offset: u64, length: u64) -> bool {
        self.try_with_write(offset, length, |_| ())
            .is_ok_and(|r| r.is_some())
    }

    /// Runs `f` on `[offset, offset + length)` with shared access, if no writer holds an
    /// overlapping range now; `Ok(None)` otherwise, without waiting.
    pub fn try_with_read<R>(
        &self,
        offset: u64,
        length: u64,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        Ok(self
            .try_lock_read("region", offset, length)?
            .map(|guard| f(guard.as_slice())))
    }

    /// Whether `self` and `other` are the same region.
    pub fn same_region(&self, other: &SegmentMemory) -> bool {
        self.base == other.base
    }
}

impl Drop for SegmentMemory {
    fn drop(&mut self) {
        match &self.backing {
            Backing::Mapped => {
                // SAFETY: `base`/`len` are exactly the mapping made in `allocate`, unmapped only
                // here, once; no reference into it outlives `self`.
                unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
            }
            Backing::Boxed => {
                let slice = std::ptr::slice_from_raw_parts_mut(self.base.as_ptr(), self.len);
                // SAFETY: `base`/`len` came from `Box::<[u8]>::into_raw` in `from_boxed_slice`
                // and are turned back into that box only here, once.
                drop(unsafe { Box::from_raw(slice) })
            }
            Backing::External(_) => {} // the owner object (if any) is dropped with `backing`
        }
    }
}

/// Shared access to a locked range.
#[derive(Debug)]
pub(crate) struct ReadGuard<'a> {
    memory: &'a SegmentMemory,
    offset: usize,
    length: usize,
    _lock: RangeLockGuard<'a>,
}

impl ReadGuard<'_> {
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the range is in bounds (checked when locking), the region lives as long as
        // the borrow of `memory`, and the shared range lock excludes writers to it.
        unsafe {
            std::slice::from_raw_parts(self.memory.base.as_ptr().add(self.offset), self.length)
        }
    }
}

/// Exclusive access to a locked range.
#[derive(Debug)]
pub(crate) struct WriteGuard<'a> {
    memory: &'a SegmentMemory,
    offset: usize,
    length: usize,
    _lock: RangeLockGuard<'a>,
}

impl WriteGuard<'_> {
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the range is in bounds (checked when locking), the region lives as long as
        // the borrow of `memory`, and the exclusive range lock excludes every other access to
        // it; `&mut self` prevents handing out two slices from one guard.
        unsafe {
            std::slice::from_raw_parts_mut(self.memory.base.as_ptr().add(self.offset), self.length)
        }
    }

    /// Raw start of the locked range, for an engine that copies into it while we hold the lock.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_slice().as_mut_ptr()
    }
}

impl ReadGuard<'_> {
    /// Raw start of the locked range, for an engine that copies out of it while we hold the lock.
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.as_slice().as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn try_with_write_is_exclusive_and_never_waits() {
        let m = SegmentMemory::allocate(8192).unwrap();
        let wrote = m
            .try_with_write(100, 4, |s| s.copy_from_slice(b"abcd"))
            .unwrap();
        assert_eq!(wrote, Some(()));
        let reader = m.try_lock_read("test", 102, 10).unwrap().unwrap();
        // Overlapping a reader: refused at once; disjoint: allowed.
        assert_eq!(m.try_with_write(100, 4, |_| ()).unwrap(), None);
        assert_eq!(m.try_with_write(0, 100, |_| ()).unwrap(), Some(()));
        assert_eq!(
            m.try_with_read(100, 4, |s| s.to_vec()).unwrap(),
            Some(b"abcd".to_vec())
        );
        drop(reader);
        assert_eq!(m.try_with_write(100, 4, |_| ()).unwrap(), Some(()));
        assert!(m.try_with_write(8190, 4, |_| ()).is_err(), "out of range");
    }

    #[test]
    fn allocation_is_page_aligned_and_zeroed() {
        let m = SegmentMemory::allocate(3 * page_size() + 5).unwrap();
        assert_eq!(m.as_ptr() as usize % page_size(), 0);
        assert_all_zero(&m);
    }

    /// Reads all of `m` (into a buffer that starts non-zero) and checks every byte is zero.
    fn assert_all_zero(m: &SegmentMemory) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut buf = vec![1u8; m.len()];
        rt.block_on(m.read_at(0, &mut buf)).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }

    /// Pages of `m` the kernel reports resident (`mincore`).
    fn resident_pages(m: &SegmentMemory) -> usize {
        let pages = m.len().div_ceil(page_size());
        let mut vec = vec![0u8; pages];
        // SAFETY: `m` is a live page-aligned mapping of `m.len()` bytes and `vec` holds one
        // byte per page of it.
        let rc = unsafe { libc::mincore(m.as_ptr().cast(), m.len(), vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[test]
    fn a_resident_allocation_is_committed_at_once_and_zeroed() {
        let len = 16 * page_size();
        let lazy = SegmentMemory::allocate(len).unwrap();
        assert_eq!(
            resident_pages(&lazy),
            0,
            "a lazy mapping commits nothing up front"
        );
        let m = SegmentMemory::allocate_resident(len).unwrap();
        assert_eq!(m.as_ptr() as usize % page_size(), 0);
        assert_eq!(resident_pages(&m), 16);
        assert_all_zero(&m);
        assert_eq!(
            SegmentMemory::allocate_resident(0).unwrap_err().code(),
            crescent_error_class::ErrorCode::InvalidArgument
        );
    }

    #[tokio::test]
    async fn read_to_vec_returns_exactly_the_range() {
        let m = SegmentMemory::from_boxed_slice(vec![0u8; 100].into_boxed_slice()).unwrap();
        m.write_at(10, &[1, 2, 3, 4]).await.unwrap();
        assert_eq!(m.read_to_vec(9, 6).await.unwrap(), vec![0, 1, 2, 3, 4, 0]);
        assert_eq!(m.read_to_vec(100, 0).await.unwrap(), Vec::<u8>::new());
        let err = m.read_to_vec(95, 6).await.unwrap_err();
        assert!(matches!(err, TransportError::OutOfRange { size: 100, .. }));
    }

    #[tokio::test]
    async fn a_boxed_region_gives_its_buffer_back_and_others_refuse() {
        let m = SegmentMemory::from_boxed_slice(vec![0u8; 64].into_boxed_slice()).unwrap();
        m.write_at(3, &[9, 8, 7]).await.unwrap();
        let crc = m.with_read(3, 3, crc_of).await.unwrap();
        assert_eq!(crc, crc_of(&[9, 8, 7]));
        assert!(m.with_read(62, 3, crc_of).await.is_err(), "out of range");
        let back = m.into_boxed_slice().unwrap();
        assert_eq!(back.len(), 64);
        assert_eq!(&back[2..7], &[0, 9, 8, 7, 0]);
        let mapped = SegmentMemory::allocate(4096).unwrap();
        assert_eq!(mapped.into_boxed_slice().unwrap_err().len(), 4096);
    }

    /// A stand-in for a checksum: something computed from the bytes in place.
    fn crc_of(bytes: &[u8]) -> u64 {
        bytes
            .iter()
            .fold(7u64, |h, &b| h.wrapping_mul(31).wrapping_add(b as u64))
    }

    #[test]
    fn empty_regions_are_refused() {
        assert_eq!(
            SegmentMemory::allocate(0).unwrap_err().code(),
            crescent_error_class::ErrorCode::InvalidArgument
        );
        assert!(SegmentMemory::from_boxed_slice(Vec::new().into_boxed_slice()).is_err());
    }

    #[tokio::test]
    async fn out_of_range_access_is_an_error_not_a_short_copy() {
        let m = SegmentMemory::from_boxed_slice(vec![0u8; 100].into_boxed_slice()).unwrap();
        let err = m.write_at(90, &[1u8; 11]).await.unwrap_err();
        assert_eq!(err.code(), crescent_error_class::ErrorCode::InvalidArgument);
        assert!(matches!(err, TransportError::OutOfRange { size: 100, .. }));
        let err = m.lock_read("x", u64::MAX, 2).await.unwrap_err();
        assert!(matches!(err, TransportError::OutOfRange { .. }));
        m.write_at(90, &[7u8; 10]).await.unwrap();
        let mut back = [0u8; 10];
        m.read_at(90, &mut back).await.unwrap();
        assert_eq!(back, [7u8; 10]);
    }

    #[test]
    fn concurrent_disjoint_writes_land_intact() {
        let m = Arc::new(SegmentMemory::allocate(8 * 65536).unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..8u8 {
                let m = m.clone();
                tasks.push(tokio::spawn(async move {
                    for _ in 0..50 {
                        m.write_at(i as u64 * 65536, &[i; 65536]).await.unwrap();
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            for i in 0..8u8 {
                let mut back = vec![0u8; 65536];
                m.read_at(i as u64 * 65536, &mut back).await.unwrap();
                assert!(back.iter().all(|&b| b == i));
            }
        });
    }
}

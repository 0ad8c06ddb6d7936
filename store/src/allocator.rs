//! Offset allocator of one segment: the free ranges, indexed by offset (for coalescing) and by
//! (length, offset) (for best fit). Both O(log n).
//!
//! Why not the `offset-allocator` crate: it has 32-bit offsets, preallocates a node per
//! possible allocation (`max_allocs`, fixed at creation) and keeps one node per live allocation.
//! Here only *free* ranges cost memory; a live allocation is just the (offset, size) already
//! stored in the object's replica, so a segment holding 50M small objects costs nothing extra.
//!
//! Alignment: values under 64 KiB take 64-byte aligned slots (a cache line; keeps small-value
//! waste under 64 bytes); from 64 KiB up, 4 KiB aligned slots (page aligned, so transports can
//! use direct I/O and page-granular registration). The slot length is derived from the value
//! size, so frees need only (offset, size).

use std::collections::{BTreeMap, BTreeSet};

use crate::error::StoreError;

pub const SMALL_ALIGN: u64 = 64;
pub const LARGE_ALIGN: u64 = 4096;
/// Values of at least this size get [`LARGE_ALIGN`].
pub const LARGE_VALUE_BYTES: u64 = 64 * 1024;

/// How candidate blocks that may not fit once aligned are tried before taking a block that
/// surely fits.
const BEST_FIT_PROBES: usize = 8;

pub fn alignment_for(size: u64) -> u64 {
    if size >= LARGE_VALUE_BYTES {
        LARGE_ALIGN
    } else {
        SMALL_ALIGN
    }
}

fn align_up(v: u64, a: u64) -> Option<u64> {
    v.checked_add(a - 1).map(|x| x & !(a - 1))
}

/// The slot a value of `size` bytes occupies.
pub fn slot_len(size: u64) -> u64 {
    align_up(size.max(1), alignment_for(size)).unwrap_or(!(LARGE_ALIGN - 1))
}

#[derive(Debug, Clone)]
pub struct FreeRangeAllocator {
    capacity: u64,
    free_bytes: u64,
    by_offset: BTreeMap<u64, u64>,
    by_len: BTreeSet<(u64, u64)>,
}

impl FreeRangeAllocator {
    /// An allocator over `[0, size)`, rounded down to the small alignment.
    pub fn new(size: u64) -> Self {
        let capacity = size & !(SMALL_ALIGN - 1);
        let mut a = Self {
            capacity,
            free_bytes: 0,
            by_offset: BTreeMap::new(),
            by_len: BTreeSet::new(),
        };
        if capacity > 0 {
            a.insert(0, capacity);
        }
        a
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    pub fn used_bytes(&self) -> u64 {
        self.capacity - self.free_bytes
    }

    /// Number of free ranges (a fragmentation measure).
    pub fn free_ranges(&self) -> usize {
        self.by_offset.len()
    }

    /// The largest free range.
    pub fn largest_free(&self) -> u64 {
        self.by_len.last().map(|&(l, _)| l).unwrap_or(0)
    }

    fn insert(&mut self, offset: u64, len: u64) {
        self.by_offset.insert(offset, len);
        self.by_len.insert((len, offset));
        self.free_bytes += len;
    }

    fn take(&mut self, offset: u64, len: u64) {
        self.by_offset.remove(&offset);
        self.by_len.remove(&(len, offset));
        self.free_bytes -= len;
    }

    /// Reserves a slot for a value of `size` bytes; returns its offset.
    pub fn allocate(&mut self, size: u64) -> Option<u64> {
        let len = slot_len(size);
        let align = alignment_for(size);
        let fits = |off: u64, blen: u64| {
            align_up(off, align)
                .and_then(|s| s.checked_add(len))
                .is_some_and(|end| end <= off + blen)
        };
        let mut chosen = self
            .by_len
            .range((len, 0)..)
            .take(BEST_FIT_PROBES)
            .find(|&&(l, o)| fits(o, l))
            .copied();
        if chosen.is_none() && align > SMALL_ALIGN {
            // Every block this long fits whatever its (64-aligned) start.
            let sure = len.checked_add(align - SMALL_ALIGN)?;
            chosen = self.by_len.range((sure, 0)..).next().copied();
        }
        let (blen, off) = chosen?;
        self.take(off, blen);
        let start = align_up(off, align)?;
        if start > off {
            self.insert(off, start - off);
        }
        let end = start + len;
        if end < off + blen {
            self.insert(end, off + blen - end);
        }
        Some(start)
    }

    /// Reserves exactly the slot of a `size`-byte value at `offset` (a replayed replica:
    /// the owner reports where the bytes already are). Refuses, changing nothing, unless the
    /// offset has the alignment an allocation of this size gets and the whole slot is free.
    pub fn reserve(&mut self, offset: u64, size: u64) -> Result<(), StoreError> {
        let len = slot_len(size);
        let align = alignment_for(size);
        if !offset.is_multiple_of(align) {
            return Err(StoreError::invalid(
                "offset",
                format!("{offset} is not {align}-byte aligned, as a {size}-byte value's slot is"),
            ));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.capacity)
            .ok_or_else(|| {
                StoreError::invalid(
                    "offset",
                    format!(
                        "[{offset}, +{len}) is beyond the capacity {}",
                        self.capacity
                    ),
                )
            })?;
        let (o, l) = self
            .by_offset
            .range(..=offset)
            .next_back()
            .map(|(&o, &l)| (o, l))
            .filter(|&(o, l)| o + l >= end)
            .ok_or_else(|| StoreError::Conflict {
                reason: format!("[{offset}, +{len}) is not entirely free"),
            })?;
        self.take(o, l);
        if offset > o {
            self.insert(o, offset - o);
        }
        if o + l > end {
            self.insert(end, o + l - end);
        }
        Ok(())
    }

    /// Free bytes inside `[offset, offset + len)`.
    pub fn free_within(&self, offset: u64, len: u64) -> u64 {
        let end = offset.saturating_add(len);
        let first = self
            .by_offset
            .range(..=offset)
            .next_back()
            .map_or(offset, |(&o, _)| o);
        self.by_offset
            .range(first..end)
            .map(|(&o, &l)| (o + l).min(end).saturating_sub(o.max(offset)))
            .sum()
    }

    /// Returns the slot of a `size`-byte value at `offset`, merging with free neighbours.
    /// Refuses (and changes nothing) if the range is not entirely allocated.
    pub fn free(&mut self, offset: u64, size: u64) -> Result<(), StoreError> {
        let len = slot_len(size);
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.capacity)
            .ok_or_else(|| StoreError::Internal {
                reason: format!(
                    "free of [{offset}, +{len}) beyond capacity {}",
                    self.capacity
                ),
            })?;
        let prev = self
            .by_offset
            .range(..=offset)
            .next_back()
            .map(|(&o, &l)| (o, l));
        let next = self.by_offset.range(offset..).next().map(|(&o, &l)| (o, l));
        if prev.is_some_and(|(o, l)| o + l > offset) || next.is_some_and(|(o, _)| o < end) {
            return Err(StoreError::Internal {
                reason: format!("free of [{offset}, +{len}) overlaps free space"),
            });
        }
        let mut start = offset;
        let mut stop = end;
        if let Some((o, l)) = prev.filter(|&(o, l)| o + l == offset) {
            self.take(o, l);
            start = o;
        }
        if let Some((o, l)) = next.filter(|&(o, _)| o == end) {
            self.take(o, l);
            stop = o + l;
        }
        self.insert(start, stop - start);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_aligned_slots_and_coalesces_back() {
        let mut a = FreeRangeAllocator::new(1 << 20);
        let x = a.allocate(1).unwrap();
        let y = a.allocate(100).unwrap();
        assert_eq!(x % 64, 0);
        assert_eq!(y % 64, 0);
        assert_ne!(x, y);
        let big = a.allocate(70_000).unwrap();
        assert_eq!(big % 4096, 0);
        assert_eq!(a.used_bytes(), 64 + 128 + slot_len(70_000));
        a.free(y, 100).unwrap();
        a.free(x, 1).unwrap();
        a.free(big, 70_000).unwrap();
        assert_eq!(a.free_bytes(), a.capacity());
        assert_eq!(a.free_ranges(), 1);
    }

    #[test]
    fn refuses_double_free_and_out_of_range() {
        let mut a = FreeRangeAllocator::new(4096);
        let x = a.allocate(64).unwrap();
        a.free(x, 64).unwrap();
        assert_eq!(a.free(x, 64).unwrap_err().code(), "INTERNAL");
        assert_eq!(a.free(4096, 64).unwrap_err().code(), "INTERNAL");
        assert_eq!(a.free_bytes(), 4096);
    }

    #[test]
    fn full_segment_refuses() {
        let mut a = FreeRangeAllocator::new(128);
        assert!(a.allocate(64).is_some());
        assert!(a.allocate(64).is_some());
        assert!(a.allocate(1).is_none());
        assert!(FreeRangeAllocator::new(0).allocate(1).is_none());
    }

    #[test]
    fn reserve_takes_exactly_the_slot_and_allocation_avoids_it() {
        let mut a = FreeRangeAllocator::new(1 << 16);
        a.reserve(128, 100).unwrap();
        assert_eq!(a.used_bytes(), 128);
        assert_eq!(a.free_within(0, 1 << 16), (1 << 16) - 128);
        assert_eq!(a.free_within(128, 128), 0);
        assert_eq!(a.free_within(64, 128), 64);
        // Taken, partly taken, misaligned, beyond capacity: refused, nothing changes.
        assert_eq!(a.reserve(128, 100).unwrap_err().code(), "CONFLICT");
        assert_eq!(a.reserve(192, 100).unwrap_err().code(), "CONFLICT");
        assert_eq!(a.reserve(65, 1).unwrap_err().code(), "INVALID_ARGUMENT");
        assert_eq!(
            a.reserve(1 << 16, 1).unwrap_err().code(),
            "INVALID_ARGUMENT"
        );
        assert_eq!(a.used_bytes(), 128);
        for _ in 0..((1 << 16) / 64 - 2) {
            let off = a.allocate(64).unwrap();
            assert!(
                off + 64 <= 128 || off >= 256,
                "{off} overlaps the reserved slot"
            );
        }
        assert!(a.allocate(64).is_none());
        a.free(128, 100).unwrap();
        assert_eq!(a.allocate(128), Some(128));
    }
}

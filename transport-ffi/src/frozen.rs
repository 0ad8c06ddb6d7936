//! [`FrozenMemory`]: a [`SegmentMemory`] that no transfer can reach any more, read as plain
//! bytes (`Deref<Target = [u8]>`), e.g. a load's landing region handed to its caller once
//! every read into it is done.
#![allow(unsafe_code)]

use std::ops::Deref;

use crate::memory::SegmentMemory;

/// Made by [`SegmentMemory::freeze`]; frees the region when dropped.
#[derive(Debug)]
pub struct FrozenMemory {
    memory: SegmentMemory,
}

impl FrozenMemory {
    pub(crate) fn new(memory: SegmentMemory) -> Self {
        Self { memory }
    }

    /// The region back as [`SegmentMemory`], to be registered and filled again (taking `self`
    /// by value ends every shared reference to its bytes first).
    pub fn thaw(self) -> SegmentMemory {
        self.memory
    }
}

impl Deref for FrozenMemory {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the region is `len` initialised bytes (zeroed when mapped, or the caller's
        // buffer) valid while `self.memory` lives. `FrozenMemory` owns the `SegmentMemory` by
        // value (`freeze` took it so): no registration holds an `Arc` of it, so no transfer
        // or range lock can write it while these shared references exist.
        unsafe { std::slice::from_raw_parts(self.memory.as_ptr(), self.memory.len()) }
    }
}

impl AsRef<[u8]> for FrozenMemory {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frozen_bytes_are_what_was_written_and_thaw_keeps_them() {
        let memory = SegmentMemory::allocate(3 << 20).unwrap();
        memory.write_at(5, b"weights").await.unwrap();
        memory.write_at((3 << 20) - 1, b"!").await.unwrap();
        let frozen = memory.freeze();
        assert_eq!(frozen.len(), 3 << 20);
        assert_eq!(&frozen[5..12], b"weights");
        assert_eq!(frozen[(3 << 20) - 1], b'!');
        assert!(frozen[12..(3 << 20) - 1].iter().all(|&b| b == 0));
        let thawed = frozen.thaw();
        let mut back = [0u8; 7];
        thawed.read_at(5, &mut back).await.unwrap();
        assert_eq!(&back, b"weights");
    }
}

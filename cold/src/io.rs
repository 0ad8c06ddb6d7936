//! [`ColdIo`]: the IO of one cold device, the seam between the driver (which decides, in
//! crescentd) and the place the bytes live. The driver runs every operation and reclaim the
//! same way whether the device is a directory crescentd opens itself ([`LocalDirDevice`]) or
//! a directory on a storage owner that performs the IO for it (the server's owner device):
//! one driver, two IO implementations.
//!
//! Every method is idempotent by its arguments (a write is keyed by the cold operation id and
//! lands at the deterministic locator of that id), so the driver may repeat any of them after
//! a crash, a timeout or a failover without changing the outcome.

use crate::error::ColdError;
use crate::ids::ColdOpId;
use crate::local_dir::{DeviceScan, LocalDirDevice, WriteReceipt};
use crate::route::ObjectRoute;

/// Reads the current content from a hot replica of `route`.
pub trait HotSource {
    fn read_hot(&self, route: &ObjectRoute) -> Result<Vec<u8>, ColdError>;
}

/// The IO of one cold device.
pub trait ColdIo: Send + Sync {
    fn device_id(&self) -> &str;

    /// Writes the current content of `route` (length and checksum as the route records
    /// them) as the payload of `op_id`: at the locator of `op_id`, crash-safe, verified.
    /// `hot` reads a hot replica where the IO runs in this process; an IO elsewhere reads
    /// the replica its own host holds.
    fn write_offload(
        &self,
        op_id: ColdOpId,
        route: &ObjectRoute,
        hot: &dyn HotSource,
    ) -> Result<WriteReceipt, ColdError>;

    /// The payload at `locator`, verified against the expected length and checksum (no
    /// unverified byte is ever returned).
    fn read(
        &self,
        locator: &str,
        expected_length: u64,
        expected_checksum: u32,
    ) -> Result<Vec<u8>, ColdError>;

    /// The payload at `locator`, read and verified into `dst` (whose length is the expected
    /// length). On error `dst` may hold unverified bytes: the caller must not expose them.
    /// The default reads through [`ColdIo::read`] and copies; an IO that can read in place
    /// (a local directory) does so.
    fn read_into_slice(
        &self,
        locator: &str,
        expected_checksum: u32,
        dst: &mut [u8],
    ) -> Result<(), ColdError> {
        let bytes = self.read(locator, dst.len() as u64, expected_checksum)?;
        dst.copy_from_slice(&bytes);
        Ok(())
    }

    /// Deletes the payload at `locator`; `Ok(false)` when it was already gone.
    fn delete(&self, locator: &str) -> Result<bool, ColdError>;

    /// Every payload file, stale temporary and stranger on the device.
    fn scan(&self) -> Result<DeviceScan, ColdError>;

    /// Removes the leftovers of interrupted writes; how many.
    fn remove_stale_temps(&self) -> Result<usize, ColdError>;

    /// A small write, sync, read-back and delete: is the device usable now?
    fn probe(&self) -> Result<(), ColdError>;
}

impl ColdIo for LocalDirDevice {
    fn device_id(&self) -> &str {
        LocalDirDevice::device_id(self)
    }

    fn write_offload(
        &self,
        op_id: ColdOpId,
        route: &ObjectRoute,
        hot: &dyn HotSource,
    ) -> Result<WriteReceipt, ColdError> {
        let payload = hot.read_hot(route)?;
        self.write(op_id, &payload)
    }

    fn read(
        &self,
        locator: &str,
        expected_length: u64,
        expected_checksum: u32,
    ) -> Result<Vec<u8>, ColdError> {
        LocalDirDevice::read(self, locator, expected_length, expected_checksum)
    }

    fn read_into_slice(
        &self,
        locator: &str,
        expected_checksum: u32,
        dst: &mut [u8],
    ) -> Result<(), ColdError> {
        LocalDirDevice::read_into_slice(self, locator, expected_checksum, dst)
    }

    fn delete(&self, locator: &str) -> Result<bool, ColdError> {
        LocalDirDevice::delete(self, locator)
    }

    fn scan(&self) -> Result<DeviceScan, ColdError> {
        LocalDirDevice::scan(self)
    }

    fn remove_stale_temps(&self) -> Result<usize, ColdError> {
        LocalDirDevice::remove_stale_temps(self)
    }

    fn probe(&self) -> Result<(), ColdError> {
        LocalDirDevice::probe(self)
    }
}

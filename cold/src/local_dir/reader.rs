//! Read-only opening of a device directory: a reader on the device's host restoring a
//! cold-only object itself (docs/cold-tier.md, "Restore on read").

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;

use super::format::device_tag;
use super::{LocalDirDevice, DEVICE_FILE, DEVICE_FILE_MAGIC};
use crate::error::ColdError;

impl LocalDirDevice {
    /// Opens a device directory to read from only (a reader on the device's host restoring
    /// locally): creates nothing, and refuses a root whose `DEVICE` stamp is missing
    /// (`NotFound`) or names another device (`Conflict`), so a path that is not this
    /// device's directory (another mount, another device) is never trusted.
    pub fn open_reader(device_id: &str, root: impl Into<PathBuf>) -> Result<Self, ColdError> {
        crate::device::check_device_id(device_id)?;
        let root = root.into();
        let stamp = root.join(DEVICE_FILE);
        let expected = format!("{DEVICE_FILE_MAGIC}\n{device_id}\n");
        match fs::read_to_string(&stamp) {
            Ok(found) if found == expected => Ok(Self {
                device_id: device_id.to_string(),
                tag: device_tag(device_id),
                root,
                temp_seq: AtomicU64::new(0),
            }),
            Ok(found) => Err(ColdError::Conflict {
                what: "device root",
                id: root.display().to_string(),
                reason: format!("stamped for another device: {:?}", found.trim_end()),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ColdError::NotFound {
                what: "device stamp",
                id: stamp.display().to_string(),
            }),
            Err(e) => Err(ColdError::io(&stamp, e)),
        }
    }
}

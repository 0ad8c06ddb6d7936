//! `local_dir` device IO: one file per cold operation under the device's root directory (a
//! directory on SSD or an NFS mount).
//!
//! - The path is a pure function of the cold operation id (`objects/<2 hex>/<32 hex>.cold`);
//!   the root is the device's own directory, stamped with its id in a `DEVICE` file.
//! - Writes are idempotent by operation id and crash-safe: temp file, fsync, rename, fsync of
//!   the directory. A crash leaves either no file or the complete file (plus a stale temp file
//!   that `remove_stale_temps` clears).
//! - Reads verify the header, the length and the CRC32C of the payload before returning a
//!   byte: a flipped byte anywhere is a `ChecksumMismatch` (or `CorruptFile` in the header).

pub mod format;
mod read_slice;
mod reader;
#[cfg(test)]
mod tests;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::ColdError;
use crate::ids::{payload_checksum, ColdOpId, PayloadFingerprint};

use format::{device_tag, FileHeader, HEADER_LEN};

const OBJECTS_DIR: &str = "objects";
const TMP_DIR: &str = "tmp";
const DEVICE_FILE: &str = "DEVICE";
const DEVICE_FILE_MAGIC: &str = "crescent-cold-device v1";
const SUFFIX: &str = ".cold";

/// What a write produced: the facts `RecordPayloadWritten` records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteReceipt {
    pub locator: String,
    pub length: u64,
    pub checksum: u32,
    pub fingerprint: PayloadFingerprint,
    /// The complete file was already there (a retried or resumed write).
    pub already_present: bool,
}

/// A payload file found by [`LocalDirDevice::scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedPayload {
    pub op_id: ColdOpId,
    pub locator: String,
    /// File size including the header.
    pub file_len: u64,
}

/// Everything on the device: payload files and leftovers of interrupted writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceScan {
    pub payloads: Vec<ScannedPayload>,
    pub stale_temps: Vec<PathBuf>,
    /// Files under `objects/` that are not payload files of this layout.
    pub unknown: Vec<PathBuf>,
}

#[derive(Debug)]
pub struct LocalDirDevice {
    device_id: String,
    root: PathBuf,
    tag: [u8; 8],
    temp_seq: AtomicU64,
}

/// The locator of an operation's payload (relative to the device root).
pub fn locator_for(op_id: ColdOpId) -> String {
    let hex = op_id.to_hex();
    format!("{OBJECTS_DIR}/{}/{hex}{SUFFIX}", &hex[..2])
}

/// The operation id a well-formed locator names; `None` for anything else (which also keeps
/// a locator from escaping the device root).
pub fn parse_locator(locator: &str) -> Option<ColdOpId> {
    let mut parts = locator.split('/');
    let (objects, shard, file) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || objects != OBJECTS_DIR {
        return None;
    }
    let hex = file.strip_suffix(SUFFIX)?;
    if hex.len() != 32
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    if shard != &hex[..2] {
        return None;
    }
    ColdOpId::parse(hex)
}

fn fsync_dir(dir: &Path) -> Result<(), ColdError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ColdError::io(dir, e))
}

impl LocalDirDevice {
    /// Opens (creating on first use) the device directory `root` for `device_id`. A root
    /// stamped with another device id is refused: its locators belong to that device.
    pub fn open(device_id: &str, root: impl Into<PathBuf>) -> Result<Self, ColdError> {
        crate::device::check_device_id(device_id)?;
        let root = root.into();
        for dir in [root.clone(), root.join(OBJECTS_DIR), root.join(TMP_DIR)] {
            fs::create_dir_all(&dir).map_err(|e| ColdError::io(&dir, e))?;
        }
        let stamp = root.join(DEVICE_FILE);
        let expected = format!("{DEVICE_FILE_MAGIC}\n{device_id}\n");
        match fs::read_to_string(&stamp) {
            Ok(found) if found == expected => {}
            Ok(found) => {
                return Err(ColdError::Conflict {
                    what: "device root",
                    id: root.display().to_string(),
                    reason: format!("stamped for another device: {:?}", found.trim_end()),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let tmp = root.join(TMP_DIR).join("DEVICE.tmp");
                write_synced(&tmp, expected.as_bytes())?;
                fs::rename(&tmp, &stamp).map_err(|e| ColdError::io(&stamp, e))?;
                fsync_dir(&root)?;
            }
            Err(e) => return Err(ColdError::io(&stamp, e)),
        }
        Ok(Self {
            device_id: device_id.to_string(),
            tag: device_tag(device_id),
            root,
            temp_seq: AtomicU64::new(0),
        })
    }

    /// Opens a device directory that must already be stamped for `device_id`: for a device
    /// the journal already knows, a missing stamp means this is not the device's directory
    /// (e.g. a shared mount that is not mounted), and opening it would create an empty device
    /// whose committed payloads all seem lost.
    pub fn open_existing(device_id: &str, root: impl Into<PathBuf>) -> Result<Self, ColdError> {
        let root = root.into();
        let stamp = root.join(DEVICE_FILE);
        match fs::metadata(&stamp) {
            Ok(_) => Self::open(device_id, root),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ColdError::NotFound {
                what: "device stamp",
                id: stamp.display().to_string(),
            }),
            Err(e) => Err(ColdError::io(&stamp, e)),
        }
    }

    /// The health probe: writes a small file under `tmp/`, fsyncs it, reads it back and
    /// removes it. An error means the device cannot take writes (or return them) right now.
    pub fn probe(&self) -> Result<(), ColdError> {
        let seq = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        let path = self
            .root
            .join(TMP_DIR)
            .join(format!("probe.{}.{seq}.tmp", std::process::id()));
        let body = format!("crescent-cold-probe {} {seq}\n", self.device_id);
        let result = write_synced(&path, body.as_bytes()).and_then(|()| {
            let back = fs::read(&path).map_err(|e| ColdError::io(&path, e))?;
            if back != body.as_bytes() {
                return Err(corrupt(
                    &path.display().to_string(),
                    "the probe read back other bytes",
                ));
            }
            Ok(())
        });
        let removed = fs::remove_file(&path).map_err(|e| ColdError::io(&path, e));
        result.and(removed)
    }

    pub fn device_id(&self) -> &str {
        &self.device_id
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path of a locator (checked to be one of this layout).
    pub fn path_of(&self, locator: &str) -> Result<PathBuf, ColdError> {
        parse_locator(locator)
            .map(|_| self.root.join(locator))
            .ok_or_else(|| {
                ColdError::invalid("locator", format!("{locator:?} is not a local_dir locator"))
            })
    }

    /// Writes `payload` for `op_id`, idempotently: if the complete file is already there with
    /// the same bytes, returns its receipt; with other bytes, refuses (an operation id is
    /// never reused for other content); a damaged file is replaced.
    pub fn write(&self, op_id: ColdOpId, payload: &[u8]) -> Result<WriteReceipt, ColdError> {
        let _span = tracing::debug_span!("cold_write", device = %self.device_id, op = %op_id, len = payload.len()).entered();
        let locator = locator_for(op_id);
        let path = self.root.join(&locator);
        let header = FileHeader {
            length: payload.len() as u64,
            checksum: payload_checksum(payload),
            op_id,
            fingerprint: PayloadFingerprint::of(payload),
            device_tag: self.tag,
        };
        let receipt = |already_present| WriteReceipt {
            locator: locator.clone(),
            length: header.length,
            checksum: header.checksum,
            fingerprint: header.fingerprint,
            already_present,
        };
        match self.read_header_and_verify(&locator, &path) {
            Ok(existing) if existing == header => return Ok(receipt(true)),
            Ok(existing) => {
                return Err(ColdError::Conflict {
                    what: "cold operation",
                    id: op_id.to_string(),
                    reason: format!(
                        "{locator} holds {} bytes with fingerprint {}, not this payload",
                        existing.length,
                        &existing.fingerprint.to_hex()[..16]
                    ),
                })
            }
            Err(ColdError::PayloadMissing { .. }) => {}
            Err(e @ ColdError::Io { .. }) => return Err(e),
            Err(e) => tracing::warn!(%locator, error = %e, "replacing a damaged cold payload file"),
        }
        let shard = path.parent().expect("locators have a shard directory");
        if !shard.exists() {
            fs::create_dir_all(shard).map_err(|e| ColdError::io(shard, e))?;
            fsync_dir(&self.root.join(OBJECTS_DIR))?;
        }
        let seq = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self.root.join(TMP_DIR).join(format!(
            "{}.{}.{seq}.tmp",
            op_id.to_hex(),
            std::process::id()
        ));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| ColdError::io(&tmp, e))?;
        let written = file
            .write_all(&header.encode())
            .and_then(|_| file.write_all(payload))
            .and_then(|_| file.sync_all());
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(ColdError::io(&tmp, e));
        }
        drop(file);
        fs::rename(&tmp, &path).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            ColdError::io(&path, e)
        })?;
        fsync_dir(shard)?;
        Ok(receipt(false))
    }

    /// Reads and verifies the payload at `locator`: header intact and of this device and
    /// operation, length and checksum equal to the expected ones and to the bytes read.
    pub fn read(
        &self,
        locator: &str,
        expected_length: u64,
        expected_checksum: u32,
    ) -> Result<Vec<u8>, ColdError> {
        let mut buf = Vec::new();
        self.read_into(locator, expected_length, expected_checksum, &mut buf)?;
        Ok(buf)
    }

    /// [`read`](Self::read) into a caller's buffer (cleared first; left empty on error, so no
    /// unverified byte is ever visible).
    pub fn read_into(
        &self,
        locator: &str,
        expected_length: u64,
        expected_checksum: u32,
        buf: &mut Vec<u8>,
    ) -> Result<(), ColdError> {
        let _span = tracing::debug_span!("cold_read", device = %self.device_id, locator).entered();
        buf.clear();
        let (mut file, header, path) =
            self.open_expected(locator, expected_length, expected_checksum)?;
        let result = read_payload(&mut file, &path, locator, &header, buf);
        if result.is_err() {
            buf.clear();
        }
        result
    }

    /// Deletes the payload at `locator`; `Ok(false)` if it was already gone.
    pub fn delete(&self, locator: &str) -> Result<bool, ColdError> {
        let _span =
            tracing::debug_span!("cold_delete", device = %self.device_id, locator).entered();
        let path = self.path_of(locator)?;
        match fs::remove_file(&path) {
            Ok(()) => {
                fsync_dir(path.parent().expect("locators have a shard directory"))?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(ColdError::io(&path, e)),
        }
    }

    /// Whether a complete payload file exists at `locator` (without verifying its bytes).
    pub fn exists(&self, locator: &str) -> Result<bool, ColdError> {
        let path = self.path_of(locator)?;
        path.try_exists().map_err(|e| ColdError::io(&path, e))
    }

    /// Lists payload files and leftovers, for reconciliation.
    pub fn scan(&self) -> Result<DeviceScan, ColdError> {
        let mut scan = DeviceScan::default();
        let objects = self.root.join(OBJECTS_DIR);
        for shard in read_dir(&objects)? {
            if !shard.is_dir() {
                scan.unknown.push(shard);
                continue;
            }
            for file in read_dir(&shard)? {
                let name = file
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default();
                let shard_name = shard
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default();
                let locator = format!("{OBJECTS_DIR}/{shard_name}/{name}");
                match parse_locator(&locator) {
                    Some(op_id) => {
                        let file_len = fs::metadata(&file)
                            .map_err(|e| ColdError::io(&file, e))?
                            .len();
                        scan.payloads.push(ScannedPayload {
                            op_id,
                            locator,
                            file_len,
                        });
                    }
                    None => scan.unknown.push(file),
                }
            }
        }
        scan.stale_temps = read_dir(&self.root.join(TMP_DIR))?;
        scan.payloads.sort_by_key(|p| p.op_id);
        Ok(scan)
    }

    /// Removes leftovers of interrupted writes. Call only when no write is in flight (at
    /// start, before the offload worker runs).
    pub fn remove_stale_temps(&self) -> Result<usize, ColdError> {
        let temps = read_dir(&self.root.join(TMP_DIR))?;
        for t in &temps {
            match fs::remove_file(t) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ColdError::io(t, e)),
            }
        }
        Ok(temps.len())
    }

    /// Opens the payload at `locator` for a read: its header must be intact, of this device
    /// and of the locator's operation, and record the expected length and checksum (the bytes
    /// themselves are checked by the caller as it reads them).
    fn open_expected(
        &self,
        locator: &str,
        expected_length: u64,
        expected_checksum: u32,
    ) -> Result<(File, FileHeader, PathBuf), ColdError> {
        let path = self.path_of(locator)?;
        let op_id = parse_locator(locator).expect("path_of checked the locator");
        let (file, header) = self.open_checked(locator, &path)?;
        if header.op_id != op_id {
            return Err(corrupt(
                locator,
                format!("holds operation {}", header.op_id),
            ));
        }
        if header.length != expected_length {
            return Err(ColdError::LengthMismatch {
                locator: locator.to_string(),
                expected: expected_length,
                actual: header.length,
            });
        }
        if header.checksum != expected_checksum {
            return Err(ColdError::ChecksumMismatch {
                locator: locator.to_string(),
                expected: expected_checksum,
                actual: header.checksum,
            });
        }
        Ok((file, header, path))
    }

    fn open_checked(&self, locator: &str, path: &Path) -> Result<(File, FileHeader), ColdError> {
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ColdError::PayloadMissing {
                    locator: locator.to_string(),
                })
            }
            Err(e) => return Err(ColdError::io(path, e)),
        };
        let mut raw = [0u8; HEADER_LEN];
        match file.read_exact(&mut raw) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(corrupt(locator, "shorter than its header"))
            }
            Err(e) => return Err(ColdError::io(path, e)),
        }
        let header = FileHeader::decode(&raw).map_err(|reason| corrupt(locator, reason))?;
        if header.device_tag != self.tag {
            return Err(corrupt(locator, "written by another device"));
        }
        Ok((file, header))
    }

    /// The header of the file at `locator` after a full verification of its payload.
    fn read_header_and_verify(&self, locator: &str, path: &Path) -> Result<FileHeader, ColdError> {
        let (mut file, header) = self.open_checked(locator, path)?;
        let mut buf = Vec::new();
        read_payload(&mut file, path, locator, &header, &mut buf)?;
        Ok(header)
    }
}

fn corrupt(locator: &str, reason: impl Into<String>) -> ColdError {
    ColdError::CorruptFile {
        locator: locator.to_string(),
        reason: reason.into(),
    }
}

/// Reads exactly `header.length` payload bytes (no more may follow) and checks their CRC32C.
fn read_payload(
    file: &mut File,
    path: &Path,
    locator: &str,
    header: &FileHeader,
    buf: &mut Vec<u8>,
) -> Result<(), ColdError> {
    let len =
        usize::try_from(header.length).map_err(|_| corrupt(locator, "length exceeds memory"))?;
    buf.reserve_exact(len);
    // `take(len + 1)` reads into the spare capacity without zeroing it first and notices a
    // file longer than its header claims.
    let read = file
        .take(header.length + 1)
        .read_to_end(buf)
        .map_err(|e| ColdError::io(path, e))?;
    if read as u64 != header.length {
        return Err(ColdError::LengthMismatch {
            locator: locator.to_string(),
            expected: header.length,
            actual: read as u64,
        });
    }
    verify_payload(locator, header, buf)
}

/// The CRC32C of payload bytes read must equal the one their header records.
fn verify_payload(locator: &str, header: &FileHeader, bytes: &[u8]) -> Result<(), ColdError> {
    checksum_matches(locator, header, payload_checksum(bytes))
}

/// The CRC32C computed over payload bytes read must equal the one their header records.
fn checksum_matches(locator: &str, header: &FileHeader, actual: u32) -> Result<(), ColdError> {
    if actual != header.checksum {
        return Err(ColdError::ChecksumMismatch {
            locator: locator.to_string(),
            expected: header.checksum,
            actual,
        });
    }
    Ok(())
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, ColdError> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(ColdError::io(dir, e)),
    };
    for entry in entries {
        out.push(entry.map_err(|e| ColdError::io(dir, e))?.path());
    }
    out.sort();
    Ok(out)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), ColdError> {
    let mut f = File::create(path).map_err(|e| ColdError::io(path, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| ColdError::io(path, e))
}

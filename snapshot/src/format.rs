//! The snapshot file format (version 1). All integers are little-endian.
//!
//! ```text
//! header   magic "CRSCSNAP" | format u32 | seq u64 | term u64 | digest [32] | created_ms i64
//!          | section_count u32 | header_crc32c u32 (over the preceding header bytes)
//! section  name_len u16 | name (UTF-8) | flags u8 (bit 0 = optional) | schema u32
//!          | body_len u64 | sha256(body) [32] | body
//! trailer  magic "CRSNPEND" | trailer_offset u64 | file_crc32c u32 (over every byte before it)
//! ```
//!
//! The trailer is written last, so a file cut short anywhere lacks it and reads as truncated.
//! Each section carries its own SHA-256 so damage is reported against the section it hit.

use std::path::Path;

use crescent_journal::Digest;
use sha2::{Digest as _, Sha256};

use crate::error::{Result, SnapshotError};

pub const MAGIC: [u8; 8] = *b"CRSCSNAP";
pub const TRAILER_MAGIC: [u8; 8] = *b"CRSNPEND";
/// The file format this binary writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
pub const FLAG_OPTIONAL: u8 = 0b0000_0001;
/// Longest section name, in bytes.
pub const MAX_SECTION_NAME: usize = 255;

const HEADER_LEN: usize = 8 + 4 + 8 + 8 + 32 + 8 + 4 + 4;
const TRAILER_LEN: usize = 8 + 8 + 4;
/// Length of the fixed header ([`decode_header_only`] needs this many bytes).
pub const HEADER_BYTES: usize = HEADER_LEN;
/// Length of the trailer at the end of every file.
pub const TRAILER_BYTES: usize = TRAILER_LEN;
const SECTION_FIXED_LEN: usize = 2 + 1 + 4 + 8 + 32;

/// One named, versioned part of a snapshot (in practice: one aggregate kind's table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    /// A reader that does not know an optional section ignores it; an unknown required section
    /// makes the snapshot unreadable.
    pub optional: bool,
    /// Schema version of `body`, owned by whoever writes the section.
    pub schema: u32,
    pub body: Vec<u8>,
}

/// The journal position a snapshot (or a replay state) stands at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    /// The last applied seq (0 = nothing applied).
    pub seq: u64,
    /// The term of that record (0 when none).
    pub term: u64,
    /// The chain digest after that record ([`crescent_journal::GENESIS_DIGEST`] when none).
    pub digest: Digest,
}

impl Position {
    pub const GENESIS: Position = Position {
        seq: 0,
        term: 0,
        digest: crescent_journal::GENESIS_DIGEST,
    };

    /// The position right after applying `rec`.
    pub fn of(rec: &crescent_journal::Record) -> Position {
        Position::of_ref(&rec.as_ref())
    }

    pub fn of_ref(rec: &crescent_journal::RecordRef<'_>) -> Position {
        Position {
            seq: rec.seq,
            term: rec.term,
            digest: *rec.digest,
        }
    }
}

impl Default for Position {
    fn default() -> Self {
        Self::GENESIS
    }
}

/// The decoded fixed header of a snapshot file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotHeader {
    pub format_version: u32,
    pub position: Position,
    /// Milliseconds since the Unix epoch when the snapshot was written.
    pub created_ms: i64,
    pub section_count: u32,
}

/// Serializes a whole snapshot file.
pub fn encode(position: &Position, created_ms: i64, sections: &[Section]) -> Result<Vec<u8>> {
    let mut names = std::collections::BTreeSet::new();
    for s in sections {
        if s.name.is_empty() {
            return Err(SnapshotError::InvalidSection(s.name.clone(), "empty"));
        }
        if s.name.len() > MAX_SECTION_NAME {
            return Err(SnapshotError::InvalidSection(
                s.name.clone(),
                "longer than 255 bytes",
            ));
        }
        if !names.insert(s.name.as_str()) {
            return Err(SnapshotError::InvalidSection(s.name.clone(), "duplicate"));
        }
    }
    let body_total: usize = sections
        .iter()
        .map(|s| SECTION_FIXED_LEN + s.name.len() + s.body.len())
        .sum();
    let mut out = Vec::with_capacity(HEADER_LEN + body_total + TRAILER_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&position.seq.to_le_bytes());
    out.extend_from_slice(&position.term.to_le_bytes());
    out.extend_from_slice(&position.digest);
    out.extend_from_slice(&created_ms.to_le_bytes());
    out.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    let header_crc = crescent_checksum::crc32c(&out);
    out.extend_from_slice(&header_crc.to_le_bytes());
    for s in sections {
        out.extend_from_slice(&(s.name.len() as u16).to_le_bytes());
        out.extend_from_slice(s.name.as_bytes());
        out.push(if s.optional { FLAG_OPTIONAL } else { 0 });
        out.extend_from_slice(&s.schema.to_le_bytes());
        out.extend_from_slice(&(s.body.len() as u64).to_le_bytes());
        let sha: [u8; 32] = Sha256::digest(&s.body).into();
        out.extend_from_slice(&sha);
        out.extend_from_slice(&s.body);
    }
    let trailer_offset = out.len() as u64;
    out.extend_from_slice(&TRAILER_MAGIC);
    out.extend_from_slice(&trailer_offset.to_le_bytes());
    let file_crc = crescent_checksum::crc32c(&out);
    out.extend_from_slice(&file_crc.to_le_bytes());
    Ok(out)
}

/// A cursor that reports running out of bytes against the section being read.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    fn arr32(&mut self) -> Option<[u8; 32]> {
        self.take(32).map(|b| b.try_into().expect("32 bytes"))
    }
}

/// The errors of one file's decoding, naming the file.
struct Errs<'a>(&'a Path);

impl Errs<'_> {
    fn corrupt(&self, section: &str, reason: String) -> SnapshotError {
        SnapshotError::Corrupt {
            file: self.0.to_path_buf(),
            section: section.to_string(),
            reason,
        }
    }

    fn truncated(&self, reason: String) -> SnapshotError {
        SnapshotError::Truncated {
            file: self.0.to_path_buf(),
            reason,
        }
    }
}

/// Parses and verifies the fixed header alone (format version first, then its CRC) from the
/// file's first [`HEADER_BYTES`] bytes: what a reseed offer and a streamed copy are checked by.
pub fn decode_header_only(file: &Path, bytes: &[u8]) -> Result<SnapshotHeader> {
    decode_header(&Errs(file), bytes)
}

/// Checks a file's trailer (its last [`TRAILER_BYTES`] bytes, the file being `len` bytes
/// long) and returns the file CRC32C it stores (over every byte before that CRC).
pub fn decode_trailer_only(file: &Path, trailer: &[u8], len: u64) -> Result<u32> {
    let errs = Errs(file);
    if trailer.len() != TRAILER_LEN || len < (HEADER_LEN + TRAILER_LEN) as u64 {
        return Err(errs.truncated("no room for the trailer".into()));
    }
    if trailer[..8] != TRAILER_MAGIC {
        return Err(
            errs.truncated("the file does not end with the trailer (an incomplete write?)".into())
        );
    }
    let offset = u64::from_le_bytes(trailer[8..16].try_into().expect("8 bytes"));
    if offset != len - TRAILER_LEN as u64 {
        return Err(errs.corrupt(
            "trailer",
            format!(
                "trailer says it starts at byte {offset}, found at {}",
                len - TRAILER_LEN as u64
            ),
        ));
    }
    Ok(u32::from_le_bytes(
        trailer[16..20].try_into().expect("4 bytes"),
    ))
}

/// Parses and verifies a whole snapshot file. `file` is only used to name errors.
pub fn decode(file: &Path, bytes: &[u8]) -> Result<(SnapshotHeader, Vec<Section>)> {
    let errs = Errs(file);
    let header = decode_header(&errs, bytes)?;
    let (trailer_at, stored_file_crc) = decode_trailer(&errs, bytes)?;
    let mut cur = Cursor {
        bytes: &bytes[..trailer_at],
        pos: HEADER_LEN,
    };
    let mut sections: Vec<Section> = Vec::with_capacity(header.section_count.min(1024) as usize);
    for index in 0..header.section_count {
        let section = decode_section(&errs, &mut cur, index)?;
        if sections.iter().any(|s| s.name == section.name) {
            return Err(errs.corrupt(&section.name, "section appears twice".into()));
        }
        sections.push(section);
    }
    if cur.pos != trailer_at {
        return Err(errs.corrupt(
            "trailer",
            format!(
                "{} unexplained bytes between the last section and the trailer",
                trailer_at - cur.pos
            ),
        ));
    }
    let file_crc = crescent_checksum::crc32c(&bytes[..bytes.len() - 4]);
    if file_crc != stored_file_crc {
        return Err(errs.corrupt(
            "trailer",
            format!("file CRC32C {file_crc:08x} != stored {stored_file_crc:08x}"),
        ));
    }
    Ok((header, sections))
}

/// The fixed header: magic, format version (checked first), position, section count, and
/// its own CRC.
fn decode_header(errs: &Errs, bytes: &[u8]) -> Result<SnapshotHeader> {
    if bytes.len() < MAGIC.len() + 4 {
        return Err(errs.truncated(format!("{} bytes, shorter than the header", bytes.len())));
    }
    if bytes[..8] != MAGIC {
        return Err(errs.corrupt("header", "bad magic: not a snapshot file".into()));
    }
    let format_version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    // Checked before anything else: a newer format may lay out everything after this field
    // differently, and must fail closed rather than be misread.
    if format_version > FORMAT_VERSION {
        return Err(SnapshotError::UnsupportedFormat {
            file: errs.0.to_path_buf(),
            found: format_version,
            supported: FORMAT_VERSION,
        });
    }
    if format_version == 0 {
        return Err(errs.corrupt("header", "format version 0".into()));
    }
    if bytes.len() < HEADER_LEN {
        return Err(errs.truncated(format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        )));
    }
    let mut cur = Cursor { bytes, pos: 12 };
    let seq = cur.u64().expect("length checked");
    let term = cur.u64().expect("length checked");
    let digest = cur.arr32().expect("length checked");
    let created_ms = cur.u64().expect("length checked") as i64;
    let section_count = cur.u32().expect("length checked");
    let stored_header_crc = cur.u32().expect("length checked");
    let header_crc = crescent_checksum::crc32c(&bytes[..HEADER_LEN - 4]);
    if header_crc != stored_header_crc {
        return Err(errs.corrupt(
            "header",
            format!("header CRC32C {header_crc:08x} != stored {stored_header_crc:08x}"),
        ));
    }
    Ok(SnapshotHeader {
        format_version,
        position: Position { seq, term, digest },
        created_ms,
        section_count,
    })
}

/// The trailer: where it starts (the end of the sections) and the stored file CRC.
fn decode_trailer(errs: &Errs, bytes: &[u8]) -> Result<(usize, u32)> {
    if bytes.len() < HEADER_LEN + TRAILER_LEN {
        return Err(errs.truncated("no room for the trailer".into()));
    }
    let trailer_at = bytes.len() - TRAILER_LEN;
    if bytes[trailer_at..trailer_at + 8] != TRAILER_MAGIC {
        return Err(
            errs.truncated("the file does not end with the trailer (an incomplete write?)".into())
        );
    }
    let mut tcur = Cursor {
        bytes,
        pos: trailer_at + 8,
    };
    let trailer_offset = tcur.u64().expect("length checked");
    let stored_file_crc = tcur.u32().expect("length checked");
    if trailer_offset != trailer_at as u64 {
        return Err(errs.corrupt(
            "trailer",
            format!("trailer says it starts at byte {trailer_offset}, found at {trailer_at}"),
        ));
    }
    Ok((trailer_at, stored_file_crc))
}

/// Section `index` at the cursor: its header, then its body checked against its SHA-256.
fn decode_section(errs: &Errs, cur: &mut Cursor, index: u32) -> Result<Section> {
    let label = format!("#{index}");
    let short = || {
        errs.corrupt(
            &label,
            "section header runs past the end of the file".into(),
        )
    };
    let name_len = cur.u16().ok_or_else(short)? as usize;
    let name = cur.take(name_len).ok_or_else(short)?;
    let name = std::str::from_utf8(name)
        .map_err(|_| errs.corrupt(&label, "section name is not UTF-8".into()))?
        .to_string();
    let flags = cur.take(1).ok_or_else(short)?[0];
    let schema = cur.u32().ok_or_else(short)?;
    let body_len = cur.u64().ok_or_else(short)?;
    let sha = cur.arr32().ok_or_else(short)?;
    if flags & !FLAG_OPTIONAL != 0 {
        return Err(errs.corrupt(&name, format!("unknown flag bits {flags:#04x}")));
    }
    let body = usize::try_from(body_len)
        .ok()
        .and_then(|n| cur.take(n))
        .ok_or_else(|| {
            errs.corrupt(
                &name,
                format!("body of {body_len} bytes runs past the end of the file"),
            )
        })?;
    let actual: [u8; 32] = Sha256::digest(body).into();
    if actual != sha {
        return Err(errs.corrupt(
            &name,
            format!(
                "body SHA-256 {} != stored {}",
                hex::encode(&actual[..8]),
                hex::encode(&sha[..8])
            ),
        ));
    }
    Ok(Section {
        name,
        optional: flags & FLAG_OPTIONAL != 0,
        schema,
        body: body.to_vec(),
    })
}

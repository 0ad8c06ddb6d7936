//! Field-by-field parse of a version-1 record body (the layout in the `codec` module docs),
//! borrowing strings and byte strings from the body.
//!
//! Replay parses millions of these, so this reads msgpack markers straight off the slice: serde's
//! generic dispatch was a fifth of replay time, and rmp's `Read`-based marker reader most of
//! what remained of this parse. Only the marker families a version-1 body may hold are
//! accepted: integers, str, bin and the outer array.

use super::FrameError;
use crate::record::{Digest, RecordRef};

pub(super) fn parse(body: &[u8]) -> Result<RecordRef<'_>, FrameError> {
    let mut rd = Reader { rest: body };
    let rd = &mut rd;
    let fields = rd.array_len()?;
    if fields != 10 {
        return Err(bad(format!("expected 10 fields, found {fields}")));
    }
    let _format_version: u8 = rd.int("format_version")?;
    let seq = rd.int("seq")?;
    let term = rd.int("term")?;
    let timestamp_ms = rd.int("timestamp_ms")?;
    let stream_kind = rd.str("stream_kind")?;
    let stream_id = rd.str("stream_id")?;
    let event_kind = rd.str("event_kind")?;
    let event_version = rd.int("event_version")?;
    let payload = rd.bin("payload")?;
    let digest = rd.bin("digest")?;
    let digest: &Digest = digest
        .try_into()
        .map_err(|_| FrameError::BadDigest(digest.len()))?;
    if !rd.rest.is_empty() {
        return Err(bad(format!(
            "{} trailing bytes after the body",
            rd.rest.len()
        )));
    }
    Ok(RecordRef {
        seq,
        term,
        timestamp_ms,
        stream_kind,
        stream_id,
        event_kind,
        event_version,
        payload,
        digest,
    })
}

fn bad(reason: String) -> FrameError {
    FrameError::BadBody(reason)
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize, field: &str) -> Result<&'a [u8], FrameError> {
        if self.rest.len() < len {
            return Err(bad(format!(
                "{field}: {len} bytes announced, {} left",
                self.rest.len()
            )));
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    fn marker(&mut self, field: &str) -> Result<u8, FrameError> {
        let (&m, tail) = self
            .rest
            .split_first()
            .ok_or_else(|| bad(format!("{field}: body ends before it")))?;
        self.rest = tail;
        Ok(m)
    }

    /// A big-endian unsigned integer of `N` bytes.
    fn be<const N: usize>(&mut self, field: &str) -> Result<u64, FrameError> {
        let raw: [u8; N] = self.take(N, field)?.try_into().expect("took N bytes");
        Ok(raw.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    /// Any msgpack integer, widened (i128 holds both the u64 and the i64 range).
    fn integer(&mut self, field: &str) -> Result<i128, FrameError> {
        let m = self.marker(field)?;
        Ok(match m {
            0x00..=0x7f => i128::from(m),
            0xe0..=0xff => i128::from(m as i8),
            0xcc => i128::from(self.be::<1>(field)?),
            0xcd => i128::from(self.be::<2>(field)?),
            0xce => i128::from(self.be::<4>(field)?),
            0xcf => i128::from(self.be::<8>(field)?),
            0xd0 => i128::from(self.be::<1>(field)? as u8 as i8),
            0xd1 => i128::from(self.be::<2>(field)? as u16 as i16),
            0xd2 => i128::from(self.be::<4>(field)? as u32 as i32),
            0xd3 => i128::from(self.be::<8>(field)? as i64),
            _ => {
                return Err(bad(format!(
                    "{field}: expected an integer, found marker {m:#04x}"
                )))
            }
        })
    }

    /// An integer field of type `T`, range-checked.
    fn int<T: TryFrom<i128>>(&mut self, field: &str) -> Result<T, FrameError> {
        let v = self.integer(field)?;
        T::try_from(v).map_err(|_| bad(format!("{field}: {v} is out of range")))
    }

    fn array_len(&mut self) -> Result<usize, FrameError> {
        let field = "body";
        let m = self.marker(field)?;
        Ok(match m {
            0x90..=0x9f => usize::from(m & 0x0f),
            0xdc => self.be::<2>(field)? as usize,
            0xdd => self.be::<4>(field)? as usize,
            _ => {
                return Err(bad(format!(
                    "{field}: expected an array, found marker {m:#04x}"
                )))
            }
        })
    }

    fn str(&mut self, field: &str) -> Result<&'a str, FrameError> {
        let m = self.marker(field)?;
        let len = match m {
            0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.be::<1>(field)? as usize,
            0xda => self.be::<2>(field)? as usize,
            0xdb => self.be::<4>(field)? as usize,
            _ => {
                return Err(bad(format!(
                    "{field}: expected a string, found marker {m:#04x}"
                )))
            }
        };
        let raw = self.take(len, field)?;
        std::str::from_utf8(raw).map_err(|e| bad(format!("{field}: {e}")))
    }

    fn bin(&mut self, field: &str) -> Result<&'a [u8], FrameError> {
        let m = self.marker(field)?;
        let len = match m {
            0xc4 => self.be::<1>(field)? as usize,
            0xc5 => self.be::<2>(field)? as usize,
            0xc6 => self.be::<4>(field)? as usize,
            _ => {
                return Err(bad(format!(
                    "{field}: expected bytes, found marker {m:#04x}"
                )))
            }
        };
        self.take(len, field)
    }
}

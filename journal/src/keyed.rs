//! Recovery shared by the record-keyed backends (memory and sled), where each stored value is
//! exactly one frame and its key is the record's seq.
//!
//! The recovery rule ([`crate::recovery::rule`], the file backend's, per record instead of per
//! byte), with what this scan sees:
//! - values are checked in key order: the frame must decode, carry the seq of its key, and the
//!   keys must be contiguous;
//! - the first bad value starts the *damaged region*; if any later value is a valid record with
//!   a higher seq, acknowledged data is damaged: [`JournalError::Corrupt`] naming
//!   `last_good + 1`, in every mode, and nothing is modified;
//! - otherwise the damaged region is a torn tail: `AbsoluteConsistency` refuses with
//!   [`JournalError::TailCorruption`], `TolerateTailCorruption` returns the keys to delete.

use std::path::Path;

use crate::backend::Recovered;
use crate::codec::{decode_exact, FrameError, FRAME_FORMAT_VERSION};
use crate::error::{JournalError, Result};
use crate::record::{Record, GENESIS_DIGEST};
use crate::recovery::{judge, FaultClass, RecoveryMode, Seen, TruncationReport, Verdict};

/// What a record-keyed backend must do after the scan.
#[derive(Debug)]
pub(crate) struct KeyedRecovery {
    pub recovered: Recovered,
    /// Keys of the damaged tail to delete (only under `TolerateTailCorruption`).
    pub drop_keys: Vec<u64>,
}

/// Maps a frame decoding failure to an error when it must not be treated as damage.
pub(crate) fn frame_error(e: FrameError, seq: u64, location: &Path) -> JournalError {
    match e {
        FrameError::UnsupportedVersion(v) => JournalError::UnsupportedVersion {
            location: location.to_path_buf(),
            found: v as u32,
            supported: FRAME_FORMAT_VERSION as u32,
        },
        other => JournalError::Corrupt {
            seq,
            location: location.to_path_buf(),
            reason: other.to_string(),
        },
    }
}

/// Decodes one keyed value, checking that it carries the seq of its key.
pub(crate) fn decode_keyed(key: u64, value: &[u8], location: &Path) -> Result<Record> {
    let record = decode_exact(value).map_err(|e| frame_error(e, key, location))?;
    if record.seq != key {
        return Err(JournalError::Corrupt {
            seq: key,
            location: location.to_path_buf(),
            reason: format!("value under key {key} holds seq {}", record.seq),
        });
    }
    Ok(record)
}

/// Scans `(key, value)` pairs in key order and applies the recovery rules above.
pub(crate) fn recover_keyed<I, V>(
    entries: I,
    location: &Path,
    mode: RecoveryMode,
) -> Result<KeyedRecovery>
where
    I: IntoIterator<Item = Result<(u64, V)>>,
    V: AsRef<[u8]>,
{
    let mut scan = KeyedScan {
        location,
        mode,
        first_key: None,
        last: None,
        max_term: 0,
        damage: None,
        drop_keys: Vec::new(),
        dropped_bytes: 0,
    };
    for entry in entries {
        let (key, value) = entry?;
        scan.visit(key, value.as_ref())?;
    }
    scan.finish()
}

/// The state of one [`recover_keyed`] pass over the values in key order.
struct KeyedScan<'a> {
    location: &'a Path,
    mode: RecoveryMode,
    first_key: Option<u64>,
    last: Option<Record>,
    max_term: u64,
    /// (seq expected at the damage, why it is damaged)
    damage: Option<(u64, String)>,
    drop_keys: Vec<u64>,
    dropped_bytes: u64,
}

impl KeyedScan<'_> {
    /// Checks the value under `key`: a newer frame format or a valid record after the damage
    /// or after a gap ends the scan with an error; anything else extends the intact prefix or
    /// the damaged region.
    fn visit(&mut self, key: u64, value: &[u8]) -> Result<()> {
        self.first_key.get_or_insert(key);
        let expected = self.last.as_ref().map_or(key, |r| r.seq + 1);
        let decoded = decode_exact(value);
        if let Err(FrameError::UnsupportedVersion(v)) = decoded {
            let first = self
                .damage
                .as_ref()
                .map_or(FaultClass::NewerFormat, |_| FaultClass::Frame);
            let seen = Seen {
                newer_format_after: true,
                ..Seen::at_end(first)
            };
            debug_assert_eq!(judge(seen, self.mode), Verdict::NewerFormat);
            return Err(frame_error(
                FrameError::UnsupportedVersion(v),
                key,
                self.location,
            ));
        }
        if let Some((bad_seq, reason)) = &self.damage {
            if matches!(&decoded, Ok(r) if r.seq == key && key >= *bad_seq) {
                let verdict = judge(Seen::followed_by_record(FaultClass::Frame), self.mode);
                debug_assert!(matches!(verdict, Verdict::Corrupt(_)));
                return Err(JournalError::Corrupt {
                    seq: *bad_seq,
                    location: self.location.to_path_buf(),
                    reason: format!("{reason}, yet a valid record with seq {key} follows"),
                });
            }
            self.count_damaged(key, value);
            return Ok(());
        }
        match decoded {
            Ok(r) if r.seq == key && key == expected => {
                self.max_term = self.max_term.max(r.term);
                self.last = Some(r);
            }
            Ok(r) if r.seq == key => {
                // A valid record after a gap: the missing records were acknowledged.
                let verdict = judge(Seen::followed_by_record(FaultClass::Frame), self.mode);
                debug_assert!(matches!(verdict, Verdict::Corrupt(_)));
                return Err(JournalError::Corrupt {
                    seq: expected,
                    location: self.location.to_path_buf(),
                    reason: format!("seq {expected} is missing but seq {key} follows"),
                });
            }
            Ok(r) => {
                self.damage = Some((expected, format!("key {key} holds seq {}", r.seq)));
                self.count_damaged(key, value);
            }
            Err(e) => {
                self.damage = Some((expected, format!("record {key}: {e}")));
                self.count_damaged(key, value);
            }
        }
        Ok(())
    }

    /// Counts the value under `key` into the damaged region.
    fn count_damaged(&mut self, key: u64, value: &[u8]) {
        self.drop_keys.push(key);
        self.dropped_bytes += value.len() as u64;
    }

    /// The verdict on the damaged region once every value was seen: none, a tail to cut, or
    /// an error (a refused tail, or damage no intact record continues).
    fn truncation(&mut self) -> Result<Option<TruncationReport>> {
        let Some((bad_seq, reason)) = self.damage.take() else {
            return Ok(None);
        };
        let last_good_seq = self.last.as_ref().map_or(0, |r| r.seq);
        let seen = Seen {
            // With no intact record left, the chain before the damage is unknown unless the
            // damage is at the journal's first seq.
            chain_continues: self.last.is_some() || self.first_key.is_none_or(|k| k <= 1),
            ..Seen::at_end(FaultClass::Frame)
        };
        match judge(seen, self.mode) {
            Verdict::CutTail => Ok(Some(TruncationReport {
                last_good_seq,
                dropped_bytes: self.dropped_bytes,
                reason,
                quarantine: None,
            })),
            Verdict::RefuseTail => Err(JournalError::TailCorruption {
                last_good_seq,
                dropped_bytes: self.dropped_bytes,
                reason,
            }),
            Verdict::Corrupt(_) | Verdict::NewerFormat => Err(JournalError::Corrupt {
                seq: bad_seq,
                location: self.location.to_path_buf(),
                reason: format!("{reason}; no intact record remains to continue the chain"),
            }),
        }
    }

    /// What the backend must do: the recovered position and the keys to delete.
    fn finish(mut self) -> Result<KeyedRecovery> {
        let truncated = self.truncation()?;
        if truncated.is_none() {
            self.drop_keys.clear();
        }
        let recovered = match &self.last {
            Some(r) => Recovered {
                first_seq: self.first_key.expect("a record was seen"),
                last_seq: r.seq,
                last_term: r.term,
                max_term: self.max_term,
                last_digest: r.digest,
                truncated,
                base: None,
            },
            None => Recovered {
                first_seq: 1,
                last_seq: 0,
                last_term: 0,
                max_term: 0,
                last_digest: GENESIS_DIGEST,
                truncated,
                base: None,
            },
        };
        Ok(KeyedRecovery {
            recovered,
            drop_keys: self.drop_keys,
        })
    }
}

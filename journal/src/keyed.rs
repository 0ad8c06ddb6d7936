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
    let mut first_key: Option<u64> = None;
    let mut last: Option<Record> = None;
    let mut max_term = 0;
    // (seq expected at the damage, why it is damaged)
    let mut damage: Option<(u64, String)> = None;
    let mut drop_keys = Vec::new();
    let mut dropped_bytes = 0u64;

    for entry in entries {
        let (key, value) = entry?;
        let value = value.as_ref();
        first_key.get_or_insert(key);
        let expected = last.as_ref().map_or(key, |r| r.seq + 1);
        let decoded = decode_exact(value);
        if let Err(FrameError::UnsupportedVersion(v)) = decoded {
            let first = damage
                .as_ref()
                .map_or(FaultClass::NewerFormat, |_| FaultClass::Frame);
            let seen = Seen {
                newer_format_after: true,
                ..Seen::at_end(first)
            };
            debug_assert_eq!(judge(seen, mode), Verdict::NewerFormat);
            return Err(frame_error(
                FrameError::UnsupportedVersion(v),
                key,
                location,
            ));
        }
        if let Some((bad_seq, reason)) = &damage {
            if matches!(&decoded, Ok(r) if r.seq == key && key >= *bad_seq) {
                let verdict = judge(Seen::followed_by_record(FaultClass::Frame), mode);
                debug_assert!(matches!(verdict, Verdict::Corrupt(_)));
                return Err(JournalError::Corrupt {
                    seq: *bad_seq,
                    location: location.to_path_buf(),
                    reason: format!("{reason}, yet a valid record with seq {key} follows"),
                });
            }
            drop_keys.push(key);
            dropped_bytes += value.len() as u64;
            continue;
        }
        match decoded {
            Ok(r) if r.seq == key && key == expected => {
                max_term = max_term.max(r.term);
                last = Some(r);
            }
            Ok(r) if r.seq == key => {
                // A valid record after a gap: the missing records were acknowledged.
                let verdict = judge(Seen::followed_by_record(FaultClass::Frame), mode);
                debug_assert!(matches!(verdict, Verdict::Corrupt(_)));
                return Err(JournalError::Corrupt {
                    seq: expected,
                    location: location.to_path_buf(),
                    reason: format!("seq {expected} is missing but seq {key} follows"),
                });
            }
            Ok(r) => {
                damage = Some((expected, format!("key {key} holds seq {}", r.seq)));
                drop_keys.push(key);
                dropped_bytes += value.len() as u64;
            }
            Err(e) => {
                damage = Some((expected, format!("record {key}: {e}")));
                drop_keys.push(key);
                dropped_bytes += value.len() as u64;
            }
        }
    }

    let last_good_seq = last.as_ref().map_or(0, |r| r.seq);
    let truncated = match damage {
        None => None,
        Some((bad_seq, reason)) => {
            let seen = Seen {
                // With no intact record left, the chain before the damage is unknown unless
                // the damage is at the journal's first seq.
                chain_continues: last.is_some() || first_key.is_none_or(|k| k <= 1),
                ..Seen::at_end(FaultClass::Frame)
            };
            match judge(seen, mode) {
                Verdict::CutTail => Some(TruncationReport {
                    last_good_seq,
                    dropped_bytes,
                    reason,
                    quarantine: None,
                }),
                Verdict::RefuseTail => {
                    return Err(JournalError::TailCorruption {
                        last_good_seq,
                        dropped_bytes,
                        reason,
                    })
                }
                Verdict::Corrupt(_) | Verdict::NewerFormat => {
                    return Err(JournalError::Corrupt {
                        seq: bad_seq,
                        location: location.to_path_buf(),
                        reason: format!("{reason}; no intact record remains to continue the chain"),
                    })
                }
            }
        }
    };
    if truncated.is_none() {
        drop_keys.clear();
    }
    let recovered = match &last {
        Some(r) => Recovered {
            first_seq: first_key.expect("a record was seen"),
            last_seq: r.seq,
            last_term: r.term,
            max_term,
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
        drop_keys,
    })
}

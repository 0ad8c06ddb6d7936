//! The one torn-tail/corruption rule, as a pure function over what a recovery scan saw. The
//! file backend's recovery, the record-keyed backends' recovery and `crescent-replay`'s walk
//! each describe their scan in these terms and act on the [`Verdict`]
//! (docs/journal-format.md, "Recovery modes").
//!
//! The rule: a newer format is never damage (opening refuses it as unsupported). Otherwise the
//! first damaged place decides:
//! - a broken structure (a segment header, its name or its continuation: written under a
//!   temporary name and renamed into place, so no crash leaves one) is corruption;
//! - a frame or value that failed to decode or its check, or garbage after the end-of-data
//!   marker, followed by a valid record at or above the damaged seq, is corruption of
//!   acknowledged data;
//! - so is damage after which the chain cannot continue (no intact record precedes it and it is
//!   not the journal's first seq);
//! - anything else is a damaged tail: refused under `AbsoluteConsistency`, cut under
//!   `TolerateTailCorruption`.
//!
//! Corruption fails the open in every mode and modifies nothing.

use super::RecoveryMode;

/// How one fault bears on the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultClass {
    /// Written by a newer format version than this build reads.
    NewerFormat,
    /// A structure that is written atomically (a segment header, its name, its continuation of
    /// the previous segment): no unfinished write leaves it broken.
    Structural,
    /// A frame or stored value that failed to decode or its check, a seq or chain break, or
    /// garbage after the end-of-data marker: possibly a write that did not finish.
    Frame,
}

/// What a recovery scan saw of the first damaged place, told either when a valid record
/// follows it or once the scan has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The class of the first fault.
    pub first: FaultClass,
    /// A newer-format fault was seen anywhere in the damaged region.
    pub newer_format_after: bool,
    /// A valid record with a seq at or above the damaged seq follows the damage.
    pub valid_record_after: bool,
    /// The chain continues from what is left: an intact record precedes the damage, the damage
    /// is at the journal's first seq, or a segment header carries the chain across it.
    pub chain_continues: bool,
}

impl Seen {
    /// A first fault of `first` at the end of what was scanned, with the chain continuing.
    pub fn at_end(first: FaultClass) -> Self {
        Self {
            first,
            newer_format_after: false,
            valid_record_after: false,
            chain_continues: true,
        }
    }

    /// A first fault of `first` with a valid record at or above its seq after it.
    pub fn followed_by_record(first: FaultClass) -> Self {
        Self {
            valid_record_after: true,
            ..Self::at_end(first)
        }
    }
}

/// Why damage is corruption rather than a tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorruptCause {
    /// A broken structure that no unfinished write leaves.
    Structural,
    /// A valid record follows the damage: acknowledged data is damaged.
    RecordFollows,
    /// Nothing intact remains to continue the chain from.
    ChainLost,
}

/// What recovery does about the damage it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Refuse: a newer format version.
    NewerFormat,
    /// Refuse in every mode, modifying nothing.
    Corrupt(CorruptCause),
    /// A damaged tail, refused under `AbsoluteConsistency`.
    RefuseTail,
    /// A damaged tail, cut (the file backend quarantines its bytes first).
    CutTail,
}

impl Verdict {
    /// Whether the damage is a tail after the last valid record (cut or refused by mode).
    pub fn is_tail(self) -> bool {
        matches!(self, Verdict::RefuseTail | Verdict::CutTail)
    }
}

/// The rule (module docs).
pub fn judge(seen: Seen, mode: RecoveryMode) -> Verdict {
    if seen.first == FaultClass::NewerFormat || seen.newer_format_after {
        return Verdict::NewerFormat;
    }
    if seen.first == FaultClass::Structural {
        return Verdict::Corrupt(CorruptCause::Structural);
    }
    if seen.valid_record_after {
        return Verdict::Corrupt(CorruptCause::RecordFollows);
    }
    if !seen.chain_continues {
        return Verdict::Corrupt(CorruptCause::ChainLost);
    }
    match mode {
        RecoveryMode::AbsoluteConsistency => Verdict::RefuseTail,
        RecoveryMode::TolerateTailCorruption => Verdict::CutTail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOLERATE: RecoveryMode = RecoveryMode::TolerateTailCorruption;
    const ABSOLUTE: RecoveryMode = RecoveryMode::AbsoluteConsistency;

    #[test]
    fn a_damaged_frame_at_the_end_is_a_tail_cut_or_refused_by_mode() {
        let seen = Seen::at_end(FaultClass::Frame);
        assert_eq!(judge(seen, TOLERATE), Verdict::CutTail);
        assert_eq!(judge(seen, ABSOLUTE), Verdict::RefuseTail);
        assert!(judge(seen, ABSOLUTE).is_tail());
    }

    #[test]
    fn a_valid_record_after_the_damage_is_corruption_in_every_mode() {
        for mode in [TOLERATE, ABSOLUTE] {
            let seen = Seen::followed_by_record(FaultClass::Frame);
            assert_eq!(
                judge(seen, mode),
                Verdict::Corrupt(CorruptCause::RecordFollows)
            );
            assert!(!judge(seen, mode).is_tail());
        }
    }

    #[test]
    fn a_broken_structure_is_corruption_even_at_the_end() {
        for mode in [TOLERATE, ABSOLUTE] {
            assert_eq!(
                judge(Seen::at_end(FaultClass::Structural), mode),
                Verdict::Corrupt(CorruptCause::Structural)
            );
        }
    }

    #[test]
    fn damage_the_chain_cannot_continue_past_is_corruption() {
        let seen = Seen {
            chain_continues: false,
            ..Seen::at_end(FaultClass::Frame)
        };
        assert_eq!(
            judge(seen, TOLERATE),
            Verdict::Corrupt(CorruptCause::ChainLost)
        );
    }

    #[test]
    fn a_newer_format_anywhere_is_refused_as_such() {
        assert_eq!(
            judge(Seen::at_end(FaultClass::NewerFormat), TOLERATE),
            Verdict::NewerFormat
        );
        let later = Seen {
            newer_format_after: true,
            ..Seen::followed_by_record(FaultClass::Frame)
        };
        assert_eq!(judge(later, ABSOLUTE), Verdict::NewerFormat);
    }
}

//! What the chaos soak knows about its keys: per key, the set of states it may be in.
//!
//! Writers work on disjoint keys, one operation at a time per key, so each key has a history
//! without concurrency. An acknowledged operation leaves exactly one acceptable state (the
//! value it wrote, or absent for a remove); an operation that failed or was cut (its writer
//! killed, crescentd down) may or may not have taken effect, so its outcome is added to the
//! states already acceptable. A read is acceptable when it is one of the states; anything else
//! is a loss (an acceptable value gone or wrong) or a resurrection (a key whose only
//! acceptable state is absent has a value again).
//!
//! Values are a pure function of (key index, version, length) ([`value_of`]), so nothing but
//! versions and lengths is kept.

use std::collections::BTreeMap;
use std::fmt;

use crate::store_e2e::object_value;

/// Operations of a key a violation names (the most recent).
const HISTORY_SHOWN: usize = 40;

/// One state a key can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KeyState {
    Absent,
    /// Version `version` of the key's value, `len` bytes ([`value_of`]).
    Value {
        version: u32,
        len: usize,
    },
}

/// The bytes of `version` of key `key_index`, `len` long.
pub fn value_of(key_index: u32, version: u32, len: usize) -> Vec<u8> {
    object_value(content_index(key_index, version), len)
}

/// The content index (see `store_e2e::object_value`) of a version of a key.
pub fn content_index(key_index: u32, version: u32) -> u64 {
    (u64::from(key_index) << 24) | u64::from(version)
}

/// The key name of key index `i`.
pub fn key_name(i: u32) -> String {
    format!("chaos/k{i:04}")
}

/// What a read of a key returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadBack {
    /// NOT_FOUND.
    Absent,
    /// NOT_READY: only a put that never completed is there (no complete version). Acceptable
    /// where absent is and a write was cut (its put may be what is there).
    Pending,
    Value(Vec<u8>),
}

/// A read that is not an acceptable state of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub key: String,
    /// "loss" or "resurrection".
    pub kind: &'static str,
    pub expected: Vec<KeyState>,
    pub got: String,
    /// Every operation on the key, oldest first.
    pub history: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} (expected one of {:?}, read {}); its operations: {}",
            self.key,
            self.kind,
            self.expected,
            self.got,
            self.history.join("; ")
        )
    }
}

/// Per-key acceptable states, and what the writers were acknowledged.
#[derive(Debug, Default)]
pub struct Model {
    states: BTreeMap<u32, Vec<KeyState>>,
    next_version: BTreeMap<u32, u32>,
    history: BTreeMap<u32, Vec<String>>,
    /// Every value any write of a key tried (acknowledged or not), to name what a read found.
    written: BTreeMap<u32, Vec<KeyState>>,
    pub objects_acked: u64,
    pub upserts_acked: u64,
    pub removes_acked: u64,
    pub uncertain: u64,
}

impl Model {
    /// The acceptable states of key `k` (absent before its first write).
    pub fn states(&self, k: u32) -> &[KeyState] {
        self.states
            .get(&k)
            .map(Vec::as_slice)
            .unwrap_or(&[KeyState::Absent])
    }

    /// A fresh version number for key `k`: each write has its own content.
    pub fn new_version(&mut self, k: u32) -> u32 {
        let v = self.next_version.entry(k).or_insert(1);
        let out = *v;
        *v += 1;
        out
    }

    /// Notes `event` (an operation and how it ended) in `k`'s history, for failure messages.
    pub fn note(&mut self, k: u32, event: String) {
        self.history.entry(k).or_default().push(event);
    }

    /// An acknowledged operation on `k` that left it in `state`. `upsert`: it was an upsert.
    pub fn acked(&mut self, k: u32, state: KeyState, upsert: bool) {
        self.written.entry(k).or_default().push(state);
        match state {
            KeyState::Absent => self.removes_acked += 1,
            KeyState::Value { .. } if upsert => {
                self.objects_acked += 1;
                self.upserts_acked += 1;
            }
            KeyState::Value { .. } => self.objects_acked += 1,
        }
        self.states.insert(k, vec![state]);
    }

    /// An operation on `k` that failed or was cut: it may have left `k` in `state`.
    pub fn uncertain(&mut self, k: u32, state: KeyState) {
        self.uncertain += 1;
        self.written.entry(k).or_default().push(state);
        let set = self
            .states
            .entry(k)
            .or_insert_with(|| vec![KeyState::Absent]);
        if !set.contains(&state) {
            set.push(state);
            set.sort();
        }
    }

    /// Checks a read of key `k` against its acceptable states.
    pub fn check(&self, k: u32, read: &ReadBack) -> Result<(), Violation> {
        let expected = self.states(k);
        let ok = match read {
            ReadBack::Absent => expected.contains(&KeyState::Absent),
            ReadBack::Pending => expected.contains(&KeyState::Absent) && expected.len() > 1,
            ReadBack::Value(bytes) => expected.iter().any(|s| match *s {
                KeyState::Absent => false,
                KeyState::Value { version, len } => {
                    bytes.len() == len && *bytes == value_of(k, version, len)
                }
            }),
        };
        if ok {
            return Ok(());
        }
        let got = match read {
            ReadBack::Absent => "absent (NOT_FOUND)".to_string(),
            ReadBack::Pending => "only a put in progress (NOT_READY)".to_string(),
            ReadBack::Value(b) => self.identify(k, b),
        };
        let kind = match (read, expected) {
            (ReadBack::Value(_), [KeyState::Absent]) => "resurrection",
            _ => "loss",
        };
        Err(Violation {
            key: key_name(k),
            kind,
            expected: expected.to_vec(),
            got,
            history: self.recent_history(k),
        })
    }

    /// The last [`HISTORY_SHOWN`] operations on `k`, after how many earlier ones there were.
    fn recent_history(&self, k: u32) -> Vec<String> {
        let all = self.history.get(&k).map(Vec::as_slice).unwrap_or_default();
        let skipped = all.len().saturating_sub(HISTORY_SHOWN);
        let mut shown = Vec::with_capacity(HISTORY_SHOWN + 1);
        if skipped > 0 {
            shown.push(format!("({skipped} earlier operations)"));
        }
        shown.extend(all[skipped..].iter().cloned());
        shown
    }

    /// Which versions of `k` (if any) `bytes` are (every empty one, for an empty read).
    fn identify(&self, k: u32, bytes: &[u8]) -> String {
        let matching: Vec<u32> = self
            .written
            .get(&k)
            .into_iter()
            .flatten()
            .filter_map(|s| match *s {
                KeyState::Value { version, len }
                    if len == bytes.len() && *bytes == value_of(k, version, len) =>
                {
                    Some(version)
                }
                _ => None,
            })
            .collect();
        match matching.as_slice() {
            [] => format!("{} bytes of no version ever written", bytes.len()),
            vs => format!("version {vs:?} ({} bytes)", bytes.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(version: u32, len: usize) -> KeyState {
        KeyState::Value { version, len }
    }

    #[test]
    fn acked_operations_leave_one_state_and_cut_ones_add_theirs() {
        let mut m = Model::default();
        assert!(m.check(1, &ReadBack::Absent).is_ok());
        m.acked(1, v(1, 10), false);
        assert!(m.check(1, &ReadBack::Value(value_of(1, 1, 10))).is_ok());
        let e = m.check(1, &ReadBack::Absent).unwrap_err();
        assert_eq!((e.kind, e.key.as_str()), ("loss", "chaos/k0001"));
        m.uncertain(1, v(2, 0));
        assert!(m.check(1, &ReadBack::Value(value_of(1, 1, 10))).is_ok());
        assert!(m.check(1, &ReadBack::Value(Vec::new())).is_ok());
        assert!(m.check(1, &ReadBack::Pending).is_err());
        m.uncertain(1, KeyState::Absent);
        assert!(m.check(1, &ReadBack::Absent).is_ok());
        assert!(m.check(1, &ReadBack::Pending).is_ok());
        m.acked(1, KeyState::Absent, false);
        assert!(m.check(1, &ReadBack::Pending).is_err());
        let e = m
            .check(1, &ReadBack::Value(value_of(1, 1, 10)))
            .unwrap_err();
        assert_eq!(e.kind, "resurrection");
        assert!(e.to_string().contains("chaos/k0001"), "{e}");
        m.acked(1, v(3, 5), true);
        assert_eq!(
            (m.objects_acked, m.upserts_acked, m.removes_acked),
            (2, 1, 1)
        );
    }

    #[test]
    fn wrong_bytes_and_other_keys_values_are_losses() {
        let mut m = Model::default();
        m.acked(2, v(1, 100), false);
        let mut bad = value_of(2, 1, 100);
        bad[50] ^= 1;
        assert_eq!(m.check(2, &ReadBack::Value(bad)).unwrap_err().kind, "loss");
        let other = value_of(3, 1, 100);
        assert!(m.check(2, &ReadBack::Value(other)).is_err());
        assert!(m.check(2, &ReadBack::Value(value_of(2, 1, 99))).is_err());
        assert_ne!(m.new_version(2), m.new_version(2));
        m.uncertain(2, v(3, 0));
        m.acked(2, v(4, 7), true);
        let e = m.check(2, &ReadBack::Value(Vec::new())).unwrap_err();
        assert!(e.got.contains("version [3] (0 bytes)"), "{e}");
        let e = m
            .check(2, &ReadBack::Value(value_of(2, 1, 100)))
            .unwrap_err();
        assert!(e.got.contains("version [1] (100 bytes)"), "{e}");
    }
}

//! The chaos soak's operations: what a writer does to one key, how it is planned from the
//! key's acceptable states, and the one-line form the library writer child reads
//! (`chaos-writer`, tests/src/bin/chaos_writer.rs) and answers.
//!
//! Child protocol, one line each: the parent writes `SEQ put|upsert|rm KEY_INDEX VERSION LEN`
//! lines on the child's stdin and closes it; the child runs them in order and prints
//! `ACK SEQ` once an operation is acknowledged, `ERR SEQ CODE` when it failed.

use rand::Rng;

use crate::chaos_model::{key_name, value_of, KeyState};

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A plain put (the key is absent).
    Put,
    /// Replace the key's content (or create it).
    Upsert,
    Remove,
}

impl OpKind {
    fn as_str(self) -> &'static str {
        match self {
            OpKind::Put => "put",
            OpKind::Upsert => "upsert",
            OpKind::Remove => "rm",
        }
    }
}

/// One operation on one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub seq: u64,
    pub kind: OpKind,
    pub key: u32,
    pub version: u32,
    pub len: usize,
}

impl Op {
    /// The state the key is in once this operation took effect.
    pub fn outcome(&self) -> KeyState {
        match self.kind {
            OpKind::Remove => KeyState::Absent,
            OpKind::Put | OpKind::Upsert => KeyState::Value {
                version: self.version,
                len: self.len,
            },
        }
    }

    pub fn key_name(&self) -> String {
        key_name(self.key)
    }

    /// The value a put or upsert writes.
    pub fn value(&self) -> Vec<u8> {
        value_of(self.key, self.version, self.len)
    }

    /// The operation, for failure messages: `upsert v4 (120 bytes)`, `rm (v5)`.
    pub fn describe(&self) -> String {
        match self.kind {
            OpKind::Remove => format!("rm (v{})", self.version),
            k => format!("{} v{} ({} bytes)", k.as_str(), self.version, self.len),
        }
    }

    /// The line sent to the library writer child.
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.seq,
            self.kind.as_str(),
            self.key,
            self.version,
            self.len
        )
    }

    /// Parses [`Op::line`].
    pub fn parse(line: &str) -> Result<Op, String> {
        let bad = || format!("malformed operation line {line:?}");
        let f: Vec<&str> = line.split_whitespace().collect();
        let [seq, kind, key, version, len] = f.as_slice() else {
            return Err(bad());
        };
        let kind = match *kind {
            "put" => OpKind::Put,
            "upsert" => OpKind::Upsert,
            "rm" => OpKind::Remove,
            _ => return Err(bad()),
        };
        Ok(Op {
            seq: seq.parse().map_err(|_| bad())?,
            kind,
            key: key.parse().map_err(|_| bad())?,
            version: version.parse().map_err(|_| bad())?,
            len: len.parse().map_err(|_| bad())?,
        })
    }
}

/// A child's answer to one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Ack(u64),
    Err(u64, String),
}

impl Reply {
    pub fn line(&self) -> String {
        match self {
            Reply::Ack(seq) => format!("ACK {seq}"),
            Reply::Err(seq, code) => format!("ERR {seq} {code}"),
        }
    }

    pub fn parse(line: &str) -> Result<Reply, String> {
        let bad = || format!("malformed reply line {line:?}");
        let mut f = line.split_whitespace();
        let (tag, seq) = (f.next(), f.next().and_then(|s| s.parse().ok()));
        match (tag, seq, f.next()) {
            (Some("ACK"), Some(seq), None) => Ok(Reply::Ack(seq)),
            (Some("ERR"), Some(seq), Some(code)) => Ok(Reply::Err(seq, code.to_string())),
            _ => Err(bad()),
        }
    }
}

/// The length of a new value: 1 in 16 empty, most up to 16 KiB, some up to 256 KiB.
pub fn value_len(rng: &mut impl Rng) -> usize {
    match rng.gen_range(0..16) {
        0 => 0,
        1..=11 => rng.gen_range(1..=16 << 10),
        _ => rng.gen_range(16 << 10..=256 << 10),
    }
}

/// The kind of the next operation on a key in `states`: a put when it is surely absent, an
/// upsert when it may be either, an upsert or a remove when it surely holds a value.
pub fn choose_kind(states: &[KeyState], rng: &mut impl Rng) -> OpKind {
    let absent = states.contains(&KeyState::Absent);
    match (absent, states.len()) {
        (true, 1) => OpKind::Put,
        (true, _) => OpKind::Upsert,
        (false, _) if rng.gen_ratio(2, 5) => OpKind::Remove,
        (false, _) => OpKind::Upsert,
    }
}

/// The error code in a `crescent` process's stderr (`crescent: CODE: message`), or
/// `EXIT_<code>` when there is none.
pub fn cli_error_code(stderr: &str, exit: Option<i32>) -> String {
    stderr
        .lines()
        .rev()
        .find_map(|l| {
            let rest = l.strip_prefix("crescent: ")?;
            let code = rest.split(':').next()?.trim();
            let is_code =
                !code.is_empty() && code.chars().all(|c| c.is_ascii_uppercase() || c == '_');
            is_code.then(|| code.to_string())
        })
        .unwrap_or_else(|| format!("EXIT_{}", exit.unwrap_or(-1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn lines_round_trip() {
        for kind in [OpKind::Put, OpKind::Upsert, OpKind::Remove] {
            let op = Op {
                seq: 7,
                kind,
                key: 12,
                version: 3,
                len: 0,
            };
            assert_eq!(Op::parse(&op.line()), Ok(op));
        }
        assert!(Op::parse("1 put 2 3").is_err());
        for r in [Reply::Ack(4), Reply::Err(5, "UNAVAILABLE".into())] {
            assert_eq!(Reply::parse(&r.line()), Ok(r));
        }
        assert!(Reply::parse("ACK x").is_err());
    }

    #[test]
    fn kinds_follow_the_states() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let v = KeyState::Value { version: 1, len: 3 };
        assert_eq!(choose_kind(&[KeyState::Absent], &mut rng), OpKind::Put);
        assert_eq!(
            choose_kind(&[KeyState::Absent, v], &mut rng),
            OpKind::Upsert
        );
        let kinds: Vec<_> = (0..50).map(|_| choose_kind(&[v], &mut rng)).collect();
        assert!(kinds.contains(&OpKind::Remove) && kinds.contains(&OpKind::Upsert));
        assert!(!kinds.contains(&OpKind::Put));
    }

    #[test]
    fn cli_codes_are_parsed() {
        let e = "crescent: NOT_FOUND: object \"k\" not found\n";
        assert_eq!(cli_error_code(e, Some(4)), "NOT_FOUND");
        assert_eq!(cli_error_code("boom", Some(2)), "EXIT_2");
    }
}

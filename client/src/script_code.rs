//! The code a failed client call reports to scripts (`crescent --json` output) and the one
//! map from it to the `crescent` CLI's exit status.

use crescent_wire::ErrorCode;

/// A wire code as the server sent it, or one only the client produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptCode {
    Wire(ErrorCode),
    /// The bytes read back do not match their checksum.
    ChecksumMismatch,
    /// A local file could not be read or written.
    IoError,
    /// A failover cut a non-idempotent call short.
    FailoverInterrupted,
    /// No leader answered within the wait.
    NoLeader,
    /// `crescent admin backup`'s own codes (docs/operations.md, "Backup and restore"); a
    /// local IO failure of the backup is [`ScriptCode::IoError`].
    Backup(&'static str),
    /// A refused mesh membership change: the mesh's own code (docs/scale-out.md, "Membership
    /// record").
    Mesh(&'static str),
}

impl ScriptCode {
    /// The code as scripts see it (`NOT_FOUND`, `CHECKSUM_MISMATCH`, `BACKUP_INVALID`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ScriptCode::Wire(code) => code.as_str(),
            ScriptCode::ChecksumMismatch => "CHECKSUM_MISMATCH",
            ScriptCode::IoError => "IO_ERROR",
            ScriptCode::FailoverInterrupted => "FAILOVER_INTERRUPTED",
            ScriptCode::NoLeader => "NO_LEADER",
            ScriptCode::Backup(code) | ScriptCode::Mesh(code) => code,
        }
    }

    /// The `crescent` CLI's exit status (0 is success; 1 is reserved for "answered no", e.g.
    /// `exist` of an absent key): 2 invalid argument, 3 unreachable/unavailable/misrouted, 4 not found,
    /// 5 conflict, 6 data integrity (checksum), 7 local IO, 8 capacity
    /// (quota/durability/policy), 9 other, 10 refused credentials. Every wire code is named,
    /// so a new one does not compile until it is placed.
    pub fn exit_code(self) -> u8 {
        match self {
            ScriptCode::Wire(code) => match code {
                ErrorCode::InvalidArgument => 2,
                ErrorCode::Unavailable
                | ErrorCode::NotLeader
                | ErrorCode::Busy
                | ErrorCode::NotReady
                | ErrorCode::WrongCluster => 3,
                ErrorCode::NotFound | ErrorCode::LeaseExpired => 4,
                ErrorCode::Conflict | ErrorCode::StaleGeneration | ErrorCode::Fenced => 5,
                ErrorCode::OutOfSpace
                | ErrorCode::QuotaExceeded
                | ErrorCode::DurabilityFailed
                | ErrorCode::PolicyUnsatisfiable => 8,
                ErrorCode::Unauthenticated | ErrorCode::PermissionDenied => 10,
                ErrorCode::Internal | ErrorCode::PayloadTooLarge | ErrorCode::RequestTimeout => 9,
            },
            ScriptCode::NoLeader | ScriptCode::FailoverInterrupted => 3,
            ScriptCode::ChecksumMismatch => 6,
            ScriptCode::IoError => 7,
            ScriptCode::Backup(_) => 9,
            ScriptCode::Mesh(_) => 2,
        }
    }
}

impl std::fmt::Display for ScriptCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_are_stable() {
        let expect = [
            ("INVALID_ARGUMENT", 2),
            ("NOT_FOUND", 4),
            ("NOT_READY", 3),
            ("CONFLICT", 5),
            ("STALE_GENERATION", 5),
            ("BUSY", 3),
            ("LEASE_EXPIRED", 4),
            ("DURABILITY_FAILED", 8),
            ("POLICY_UNSATISFIABLE", 8),
            ("QUOTA_EXCEEDED", 8),
            ("NOT_LEADER", 3),
            ("UNAVAILABLE", 3),
            ("FENCED", 5),
            ("INTERNAL", 9),
            ("PAYLOAD_TOO_LARGE", 9),
            ("REQUEST_TIMEOUT", 9),
            ("UNAUTHENTICATED", 10),
            ("PERMISSION_DENIED", 10),
            ("OUT_OF_SPACE", 8),
            ("WRONG_CLUSTER", 3),
        ];
        assert_eq!(expect.len(), ErrorCode::ALL.len());
        for (name, exit) in expect {
            let code = ScriptCode::Wire(ErrorCode::parse(name).unwrap());
            assert_eq!((code.as_str(), code.exit_code()), (name, exit));
        }
        for (code, name, exit) in [
            (ScriptCode::ChecksumMismatch, "CHECKSUM_MISMATCH", 6),
            (ScriptCode::IoError, "IO_ERROR", 7),
            (ScriptCode::FailoverInterrupted, "FAILOVER_INTERRUPTED", 3),
            (ScriptCode::NoLeader, "NO_LEADER", 3),
            (ScriptCode::Backup("BACKUP_INVALID"), "BACKUP_INVALID", 9),
            (
                ScriptCode::Mesh("LAST_SERVING_CLUSTER"),
                "LAST_SERVING_CLUSTER",
                2,
            ),
        ] {
            assert_eq!((code.as_str(), code.exit_code()), (name, exit));
        }
    }
}

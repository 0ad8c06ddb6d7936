//! Data-plane grants: the capability a transfer-plane READ or WRITE presents when the listener
//! requires one (docs/security.md, "The data plane").
//!
//! crescentd mints a grant for one operation on one range of one segment, valid until an
//! expiry, and hands it out with the put_start or get answer that placed or found the range.
//! The listener serving the segment verifies it with the key of the segment's owner, which
//! crescentd derives from its signing secret and gives the owner when it registers
//! ([`GrantKey::derive`]). A grant authorises any sub-range of its range, so a reader may fetch
//! part of an object (a tensor of a weight shard) with the grant of the whole replica.
//!
//! A grant is 80 bytes on the wire, little-endian:
//!
//! ```text
//!   0  1  version   u8 = 1
//!   1  1  op        u8: 1 = read, 2 = write
//!   2  2  reserved  u16 = 0
//!   4  4  key id    u32: which owner key signed it (first 4 bytes of the key's SHA-256)
//!   8  8  offset    u64: first byte of the granted range
//!  16  8  length    u64: bytes of the granted range
//!  24  8  expires   u64: ms since the Unix epoch (crescentd's clock) after which it is refused
//!  32 16  subject   what the range holds (a write: the put it belongs to; zero for a read)
//!  48 32  tag       HMAC-SHA256 over a domain string, bytes 0..48 and the segment id
//! ```
//!
//! The segment id is bound by the tag, not carried: the listener knows which segment a handle
//! names. The subject lets an owner check later that a notice about a replica names the put
//! the range was granted for ([`GrantKey::verify_notice`]).

use std::collections::VecDeque;

use crescent_wire::store::ObjectId;
use ring::{digest, hmac};

use subtle::ConstantTimeEq;

use crate::transport::TransferOp;

/// Bytes of an encoded grant.
pub const GRANT_LEN: usize = 80;
/// The grant layout this build writes and reads.
pub const GRANT_VERSION: u8 = 1;
/// Bytes of a grant's subject.
pub const SUBJECT_LEN: usize = 16;
/// Verification keys an owner keeps (the current one and the one before a rotation).
pub const MAX_KEYS: usize = 2;

const TAG_DOMAIN: &[u8] = b"crescent data-plane grant v1\0";
const KEY_DOMAIN: &[u8] = b"crescent data-plane owner key v1\0";
const SIGNED_LEN: usize = 48;

/// A grant, decoded.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Grant {
    pub op: TransferOp,
    pub key_id: u32,
    pub offset: u64,
    pub length: u64,
    pub expires_at_ms: u64,
    pub subject: [u8; SUBJECT_LEN],
    pub tag: [u8; 32],
}

impl std::fmt::Debug for Grant {
    // The tag is a credential: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("op", &self.op)
            .field("key_id", &self.key_id)
            .field("offset", &self.offset)
            .field("length", &self.length)
            .field("expires_at_ms", &self.expires_at_ms)
            .finish_non_exhaustive()
    }
}

/// Why a grant was refused (a bounded metric label each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrantRefusal {
    #[error("the transfer carries no grant")]
    Missing,
    #[error("the grant is malformed or of an unknown version")]
    Malformed,
    #[error("the grant is signed by a key this listener does not hold")]
    UnknownKey,
    #[error("the grant's signature does not match")]
    BadSignature,
    #[error("the grant is for another operation")]
    WrongOp,
    #[error("the transfer reaches outside the granted range")]
    OutsideRange,
    #[error("the grant has expired")]
    Expired,
}

impl GrantRefusal {
    pub fn label(self) -> &'static str {
        match self {
            GrantRefusal::Missing => "missing",
            GrantRefusal::Malformed => "malformed",
            GrantRefusal::UnknownKey => "unknown_key",
            GrantRefusal::BadSignature => "bad_signature",
            GrantRefusal::WrongOp => "wrong_op",
            GrantRefusal::OutsideRange => "outside_range",
            GrantRefusal::Expired => "expired",
        }
    }
}

fn op_byte(op: TransferOp) -> u8 {
    match op {
        TransferOp::Read => 1,
        TransferOp::Write => 2,
    }
}

impl Grant {
    /// The wire form.
    pub fn encode(&self) -> [u8; GRANT_LEN] {
        let mut b = [0u8; GRANT_LEN];
        b[..SIGNED_LEN].copy_from_slice(&self.signed_bytes());
        b[SIGNED_LEN..].copy_from_slice(&self.tag);
        b
    }

    /// Decodes the wire form; `None` for a wrong length, version, op or reserved field.
    pub fn decode(b: &[u8]) -> Option<Grant> {
        let b: &[u8; GRANT_LEN] = b.try_into().ok()?;
        if b[0] != GRANT_VERSION || b[2] != 0 || b[3] != 0 {
            return None;
        }
        let op = match b[1] {
            1 => TransferOp::Read,
            2 => TransferOp::Write,
            _ => return None,
        };
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Some(Grant {
            op,
            key_id: u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")),
            offset: u64_at(8),
            length: u64_at(16),
            expires_at_ms: u64_at(24),
            subject: b[32..48].try_into().expect("16 bytes"),
            tag: b[48..80].try_into().expect("32 bytes"),
        })
    }

    fn signed_bytes(&self) -> [u8; SIGNED_LEN] {
        let mut b = [0u8; SIGNED_LEN];
        b[0] = GRANT_VERSION;
        b[1] = op_byte(self.op);
        b[4..8].copy_from_slice(&self.key_id.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.length.to_le_bytes());
        b[24..32].copy_from_slice(&self.expires_at_ms.to_le_bytes());
        b[32..48].copy_from_slice(&self.subject);
        b
    }

    /// Whether `[offset, offset+length)` lies within the granted range.
    pub fn covers(&self, offset: u64, length: u64) -> bool {
        let end = self.offset.checked_add(self.length);
        let want = offset.checked_add(length);
        matches!((end, want), (Some(end), Some(want)) if offset >= self.offset && want <= end)
    }
}

/// The subject of a write grant: what the range is being written for (the caller's encoding of
/// an object version), hashed to [`SUBJECT_LEN`] bytes.
pub fn subject_of(parts: &[&[u8]]) -> [u8; SUBJECT_LEN] {
    let mut ctx = digest::Context::new(&digest::SHA256);
    for p in parts {
        ctx.update(&(p.len() as u64).to_le_bytes());
        ctx.update(p);
    }
    ctx.finish().as_ref()[..SUBJECT_LEN]
        .try_into()
        .expect("16 bytes")
}

/// The subject of a put's write grants: the object version (tenant, domain, key, put id;
/// absent scope parts as empty strings) the range is written for. crescentd binds it when it
/// mints; an owner checks a notice against it.
pub fn put_subject(id: &ObjectId, put_id: u64) -> [u8; SUBJECT_LEN] {
    subject_of(&[
        id.tenant.as_deref().unwrap_or("").as_bytes(),
        id.domain.as_deref().unwrap_or("").as_bytes(),
        id.key.as_bytes(),
        &put_id.to_le_bytes(),
    ])
}

/// One owner's grant key: signs grants (crescentd) and verifies them (the owner's listener).
#[derive(Clone)]
pub struct GrantKey {
    id: u32,
    bytes: [u8; 32],
    key: hmac::Key,
}

impl std::fmt::Debug for GrantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantKey").field("id", &self.id).finish()
    }
}

impl PartialEq for GrantKey {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.bytes == other.bytes
    }
}

impl GrantKey {
    /// The key of owner `owner_id` under crescentd's signing secret. Both nodes of an HA pair
    /// hold the same secret, so they derive the same keys.
    pub fn derive(secret: &[u8], owner_id: &str) -> GrantKey {
        let master = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let mut ctx = hmac::Context::with_key(&master);
        ctx.update(KEY_DOMAIN);
        ctx.update(owner_id.as_bytes());
        let bytes: [u8; 32] = ctx.sign().as_ref().try_into().expect("32 bytes");
        GrantKey::from_bytes(bytes)
    }

    /// A key from its 32 bytes (as handed to an owner).
    pub fn from_bytes(bytes: [u8; 32]) -> GrantKey {
        let hash = digest::digest(&digest::SHA256, &bytes);
        let id = u32::from_le_bytes(hash.as_ref()[..4].try_into().expect("4 bytes"));
        GrantKey {
            id,
            bytes,
            key: hmac::Key::new(hmac::HMAC_SHA256, &bytes),
        }
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// The key's bytes, to hand to its owner (a secret: never log it).
    pub fn bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    fn tag(&self, segment_id: &str, grant: &Grant) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(TAG_DOMAIN);
        ctx.update(&grant.signed_bytes());
        ctx.update(segment_id.as_bytes());
        ctx.sign()
    }

    /// A grant for `op` on `[offset, offset+length)` of `segment_id` until `expires_at_ms`.
    pub fn mint(
        &self,
        segment_id: &str,
        op: TransferOp,
        offset: u64,
        length: u64,
        expires_at_ms: u64,
        subject: [u8; SUBJECT_LEN],
    ) -> Grant {
        let mut grant = Grant {
            op,
            key_id: self.id,
            offset,
            length,
            expires_at_ms,
            subject,
            tag: [0; 32],
        };
        grant.tag = self
            .tag(segment_id, &grant)
            .as_ref()
            .try_into()
            .expect("32 bytes");
        grant
    }

    fn check_tag(&self, segment_id: &str, grant: &Grant) -> Result<(), GrantRefusal> {
        // The same tag `mint` computes, compared in constant time.
        match bool::from(self.tag(segment_id, grant).as_ref().ct_eq(&grant.tag)) {
            true => Ok(()),
            false => Err(GrantRefusal::BadSignature),
        }
    }
}

/// The keys a listener verifies grants with (the newest first, at most [`MAX_KEYS`]).
#[derive(Clone, Debug, Default)]
pub struct GrantKeys {
    keys: VecDeque<GrantKey>,
}

impl GrantKeys {
    /// A set holding one key.
    pub fn single(key: GrantKey) -> GrantKeys {
        let mut keys = GrantKeys::default();
        keys.install(key);
        keys
    }

    /// Makes `key` the newest; the oldest beyond [`MAX_KEYS`] is dropped. Installing the
    /// newest key again changes nothing. Returns whether the set changed.
    pub fn install(&mut self, key: GrantKey) -> bool {
        if self.keys.front() == Some(&key) {
            return false;
        }
        self.keys.retain(|k| k != &key);
        self.keys.push_front(key);
        self.keys.truncate(MAX_KEYS);
        true
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn key(&self, id: u32) -> Result<&GrantKey, GrantRefusal> {
        self.keys
            .iter()
            .find(|k| k.id == id)
            .ok_or(GrantRefusal::UnknownKey)
    }

    /// Checks that `grant` lets `op` touch `[offset, offset+length)` of `segment_id` at
    /// `now_ms`. The signature is checked first, so nothing about an unsigned grant is
    /// believed.
    pub fn verify(
        &self,
        segment_id: &str,
        op: TransferOp,
        offset: u64,
        length: u64,
        now_ms: u64,
        grant: &Grant,
    ) -> Result<(), GrantRefusal> {
        self.key(grant.key_id)?.check_tag(segment_id, grant)?;
        if grant.op != op {
            return Err(GrantRefusal::WrongOp);
        }
        if !grant.covers(offset, length) {
            return Err(GrantRefusal::OutsideRange);
        }
        if now_ms > grant.expires_at_ms {
            return Err(GrantRefusal::Expired);
        }
        Ok(())
    }

    /// Checks a write grant presented with a notice about a replica: signed by a held key,
    /// for writing exactly `[offset, offset+length)` of `segment_id`, for `subject`. Expiry
    /// is not checked: a notice may arrive after the transfer's window closed.
    pub fn verify_notice(
        &self,
        segment_id: &str,
        offset: u64,
        length: u64,
        subject: &[u8; SUBJECT_LEN],
        grant: &Grant,
    ) -> Result<(), GrantRefusal> {
        self.key(grant.key_id)?.check_tag(segment_id, grant)?;
        if grant.op != TransferOp::Write {
            return Err(GrantRefusal::WrongOp);
        }
        if grant.offset != offset || grant.length != length || &grant.subject != subject {
            return Err(GrantRefusal::OutsideRange);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "grant_tests.rs"]
mod tests;

//! Remote restore from a device on a storage owner through the OWNER's staging region (seed
//! 003 "Local and remote restore": "a remote reader asks the cold-backing owner to stage the
//! verified payload into bounded, transport-registered DRAM"). crescentd sends the owner a
//! `Stage` work item; the owner reads and verifies the payload into a slot of its region
//! (served by its own transfer listener) and answers where it lies and a token; crescentd
//! answers the reader with a staged payload naming the OWNER's endpoint, so the bytes move
//! straight from the owner to the reader. The reader's ack (its lease release) is forwarded
//! to the owner as `ReleaseStaged`.
//!
//! An owner that registered no staging region (older, or `--cold-staging-bytes 0`) keeps the
//! inline path (the payload in its poll body, bounded by crescentd's request body limit:
//! [`MAX_OWNER_INLINE_READ`]); beyond it the read is refused with POLICY_UNSATISFIABLE naming
//! the size, never failed obscurely at the body limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crescent_cold::io::ColdIo;
use crescent_cold::route::ObjectRoute;
use crescent_cold::{payload_checksum, ColdError};
use crescent_wire::cold_owner::{OwnerIoOutcome, OwnerIoWork, OwnerStagingRegion};
use crescent_wire::store::{StagedPayload, STAGED_PAYLOAD_VERSION};

use super::hot::NodeHot;
use super::owner_io::{error_from_wire, OwnerDeviceIo};
use super::ColdTier;

/// Largest payload an owner may carry inline in its poll body: crescentd's default
/// `http.max_body_bytes` (16 MiB) less room for the poll's other fields and the msgpack
/// framing. A fixed figure rather than the configured limit because the owner devices' IO is
/// built before (and without) the HTTP settings; a deployment that lowers the body limit
/// below it sees the owner's poll refused for payloads in between (documented).
pub const MAX_OWNER_INLINE_READ: u64 = (16 << 20) - (64 << 10);

/// Owner tokens crescentd remembers (so that it can forward a reader's ack), at most.
const MAX_REMEMBERED_TOKENS: usize = 4096;
/// How long past its deadline an owner token is remembered (a late ack is still forwarded:
/// the owner answers it fenced, counted there).
const TOKEN_GRACE_MS: i64 = 60_000;

/// What crescentd knows of an owner's staging region, and the tokens it handed out.
#[derive(Debug, Default)]
pub struct OwnerStagingLink {
    target: Mutex<Option<StagingTarget>>,
    /// Live owner tokens of this device -> their deadline (owner clock, ms).
    tokens: Mutex<HashMap<u64, i64>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct StagingTarget {
    endpoint: String,
    segment_id: String,
    capacity_bytes: u64,
}

impl OwnerStagingLink {
    /// The owner (re)registered: with a staging region at `endpoint`, or without one. The
    /// tokens of an earlier incarnation are forgotten (its memory is gone).
    pub fn set(&self, endpoint: &str, region: Option<&OwnerStagingRegion>) {
        let target = region.map(|r| StagingTarget {
            endpoint: endpoint.to_string(),
            segment_id: r.segment_id.clone(),
            capacity_bytes: r.capacity_bytes,
        });
        let mut current = self.target.lock().expect("owner staging target");
        if *current != target {
            tracing::info!(staging = ?target, "owner staging region");
        }
        *current = target;
        self.tokens.lock().expect("owner staging tokens").clear();
    }

    /// Whether a payload of `length` bytes can be staged by the owner (it has a region large
    /// enough).
    pub fn can_stage(&self, length: u64) -> bool {
        self.target
            .lock()
            .expect("owner staging target")
            .as_ref()
            .is_some_and(|t| length <= t.capacity_bytes)
    }

    fn target(&self) -> Option<StagingTarget> {
        self.target.lock().expect("owner staging target").clone()
    }

    fn remember(&self, token: u64, deadline_ms: i64, now_ms: i64) {
        let mut tokens = self.tokens.lock().expect("owner staging tokens");
        if tokens.len() >= MAX_REMEMBERED_TOKENS {
            tokens.retain(|_, deadline| *deadline + TOKEN_GRACE_MS >= now_ms);
        }
        if tokens.len() < MAX_REMEMBERED_TOKENS {
            tokens.insert(token, deadline_ms);
        }
    }

    /// Takes `token` if this device's owner issued it.
    pub fn take(&self, token: u64) -> bool {
        self.tokens
            .lock()
            .expect("owner staging tokens")
            .remove(&token)
            .is_some()
    }
}

/// A materialized backing its device's storage owner can stage, with that owner's IO.
pub(crate) struct OwnerBacking<'r> {
    pub owner: Arc<OwnerDeviceIo>,
    pub locator: &'r str,
    pub length: u64,
    pub checksum: u32,
}

impl ColdTier {
    /// The backing of `route` when its device's owner can stage it into its region (for a
    /// remote reader, or the background promotion). `None` when the backing is not
    /// materialized, not on a storage owner's device, smaller than `staging_min_bytes` (one
    /// poll round trip carries it for less than a stage, a transfer and a release) or larger
    /// than the owner's region. UNAVAILABLE when the device is not readable, as the inline
    /// read would be.
    pub(crate) fn owner_stageable<'r>(
        &self,
        route: &'r ObjectRoute,
    ) -> Result<Option<OwnerBacking<'r>>, ColdError> {
        let Some(m) = route.materialized() else {
            return Ok(None);
        };
        let Some(owner) = self
            .device(m.device_id)
            .ok()
            .and_then(|d| d.owner_io.clone())
        else {
            return Ok(None);
        };
        if m.length < self.restore.staging.min_bytes || !owner.staging().can_stage(m.length) {
            return Ok(None);
        }
        self.readable_io(m.device_id)?;
        Ok(Some(OwnerBacking {
            owner,
            locator: m.locator,
            length: m.length,
            checksum: m.checksum,
        }))
    }
}

impl OwnerDeviceIo {
    /// Asks the owner to read and verify the payload at `locator` into its staging region for
    /// one reader. `Backpressure` (BUSY) when the owner's region is saturated; the payload's
    /// own error (checksum, length, missing) when it is damaged: never staged.
    pub fn stage(
        &self,
        locator: &str,
        length: u64,
        checksum: u32,
        now_ms: i64,
    ) -> Result<StagedPayload, ColdError> {
        let Some(target) = self.staging.target() else {
            return Err(ColdError::InvalidArgument {
                field: "device",
                reason: format!("the owner of {} has no staging region", self.device_id()),
            });
        };
        let work = OwnerIoWork::Stage {
            locator: locator.to_string(),
            length,
            checksum,
        };
        match self.call_work(work)? {
            OwnerIoOutcome::Staged {
                segment_id,
                offset,
                length: staged_length,
                checksum: staged_checksum,
                token,
                expires_at_ms,
            } => {
                // The owner checked the payload against these; a reply describing anything
                // else is refused (the reader would refuse its bytes anyway).
                if staged_length != length
                    || staged_checksum != checksum
                    || segment_id != target.segment_id
                {
                    self.release_staged(vec![token]);
                    return Err(ColdError::Io {
                        path: format!("{}:{locator}", self.device_id()),
                        kind: std::io::ErrorKind::InvalidData,
                        message: format!(
                            "the owner staged {staged_length} bytes ({staged_checksum:08x}) in \
                             {segment_id:?} for {length} bytes ({checksum:08x})"
                        ),
                    });
                }
                self.staging.remember(token, expires_at_ms, now_ms);
                Ok(StagedPayload {
                    version: STAGED_PAYLOAD_VERSION,
                    endpoint: target.endpoint,
                    segment_id,
                    offset,
                    length,
                    checksum,
                    token,
                    expires_at_ms,
                    grant: None,
                })
            }
            OwnerIoOutcome::Failed(e) => Err(error_from_wire(self.device_id(), e)),
            other => Err(ColdError::Io {
                path: self.device_id().to_string(),
                kind: std::io::ErrorKind::InvalidData,
                message: format!("the owner answered a stage with {other:?}"),
            }),
        }
    }

    /// The verified payload at `locator`, read for crescentd itself (the background
    /// promotion) through the owner's staging region: the owner stages it, crescentd pulls
    /// the slot over its data plane and releases the token at once (no reader holds it), then
    /// checks length and CRC32C. No byte rides the owner's poll, so the inline limit does not
    /// apply. `Backpressure` when the owner's region is saturated.
    pub(crate) fn read_staged(
        &self,
        hot: &NodeHot<'_>,
        locator: &str,
        length: u64,
        checksum: u32,
        now_ms: i64,
    ) -> Result<Vec<u8>, ColdError> {
        let _span = tracing::debug_span!("cold.read_owner_staged", length).entered();
        let staged = self.stage(locator, length, checksum, now_ms)?;
        // Released here, not by a reader's ack: crescentd need not remember it.
        self.staging.take(staged.token);
        let pulled = hot.read_remote(
            &staged.endpoint,
            &staged.segment_id,
            staged.offset,
            staged.length,
        );
        self.release_staged(vec![staged.token]);
        let bytes = pulled?;
        check_arrived(locator, &bytes, length, checksum)?;
        Ok(bytes)
    }

    /// Forwards readers' acks of staged tokens to the owner (no wait: the owner releases the
    /// pins on its next poll; a release lost with the owner is covered by its expiry).
    pub fn release_staged(&self, tokens: Vec<u64>) {
        if !tokens.is_empty() {
            self.post_work(OwnerIoWork::ReleaseStaged { tokens });
        }
    }
}

/// Checks a payload that arrived from an owner (in its poll, or pulled from its staging
/// region) against the route's length and CRC32C: the owner verified it before sending, this
/// keeps a byte damaged on the way from ever reaching a reader or a hot slot.
pub(crate) fn check_arrived(
    locator: &str,
    bytes: &[u8],
    expected_length: u64,
    expected_checksum: u32,
) -> Result<(), ColdError> {
    if bytes.len() as u64 != expected_length {
        return Err(ColdError::LengthMismatch {
            locator: locator.to_string(),
            expected: expected_length,
            actual: bytes.len() as u64,
        });
    }
    let actual = payload_checksum(bytes);
    if actual != expected_checksum {
        return Err(ColdError::ChecksumMismatch {
            locator: locator.to_string(),
            expected: expected_checksum,
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_wire::cold_owner::OwnerIoError;
    use std::sync::Arc;
    use std::time::Duration;

    fn owner_io() -> Arc<OwnerDeviceIo> {
        let counter = prometheus::IntCounterVec::new(
            prometheus::Opts::new("owner_io_total", "test"),
            &["work", "outcome"],
        )
        .unwrap();
        Arc::new(OwnerDeviceIo::new("dev", "node-b", counter))
    }

    fn staged_outcome(token: u64) -> OwnerIoOutcome {
        OwnerIoOutcome::Staged {
            segment_id: "o/staging0".into(),
            offset: 65536,
            length: 40 << 20,
            checksum: 9,
            token,
            expires_at_ms: 5_000,
        }
    }

    /// Stages through the mailbox, the owner answering the `Stage` item with `answer`.
    fn stage_answered(
        io: &Arc<OwnerDeviceIo>,
        answer: OwnerIoOutcome,
    ) -> Result<StagedPayload, ColdError> {
        let caller = {
            let io = io.clone();
            std::thread::spawn(move || io.stage("objects/aa/x.cold", 40 << 20, 9, 1_000))
        };
        let items = io
            .poll(1, None, Vec::new(), Duration::from_secs(5))
            .unwrap();
        assert_eq!(
            items[0].work,
            OwnerIoWork::Stage {
                locator: "objects/aa/x.cold".into(),
                length: 40 << 20,
                checksum: 9
            }
        );
        io.poll(1, None, vec![(items[0].id, answer)], Duration::ZERO)
            .unwrap();
        caller.join().unwrap()
    }

    #[test]
    fn a_stage_answers_a_staged_payload_naming_the_owner_and_its_ack_is_forwarded() {
        let io = owner_io();
        io.connect(1);
        io.staging().set("10.0.0.2:7000", Some(&region(64 << 20)));
        let staged = stage_answered(&io, staged_outcome((1 << 63) + 5)).unwrap();
        assert_eq!(
            staged,
            StagedPayload {
                version: STAGED_PAYLOAD_VERSION,
                endpoint: "10.0.0.2:7000".into(),
                segment_id: "o/staging0".into(),
                offset: 65536,
                length: 40 << 20,
                checksum: 9,
                token: (1 << 63) + 5,
                expires_at_ms: 5_000,
                grant: None,
            }
        );
        assert!(io.staging().take((1 << 63) + 5));
        io.release_staged(vec![(1 << 63) + 5]);
        let items = io.poll(1, None, Vec::new(), Duration::ZERO).unwrap();
        assert_eq!(
            items[0].work,
            OwnerIoWork::ReleaseStaged {
                tokens: vec![(1 << 63) + 5]
            }
        );
    }

    #[test]
    fn a_busy_owner_is_backpressure_and_a_mismatched_slot_is_refused_and_released() {
        let io = owner_io();
        io.connect(1);
        io.staging().set("e", Some(&region(64 << 20)));
        let busy = OwnerIoOutcome::Failed(OwnerIoError {
            kind: "busy".into(),
            message: "40 of 48 MiB in use".into(),
            locator: String::new(),
            expected: 0,
            actual: 0,
        });
        assert_eq!(
            stage_answered(&io, busy).unwrap_err().code(),
            crescent_wire::ErrorCode::Busy
        );
        let mut other = staged_outcome((1 << 63) + 6);
        if let OwnerIoOutcome::Staged { checksum, .. } = &mut other {
            *checksum = 10;
        }
        let err = stage_answered(&io, other).unwrap_err();
        assert_eq!(err.code(), crescent_wire::ErrorCode::Unavailable, "{err}");
        assert!(!io.staging().take((1 << 63) + 6), "not handed to a reader");
        let items = io.poll(1, None, Vec::new(), Duration::ZERO).unwrap();
        assert_eq!(
            items[0].work,
            OwnerIoWork::ReleaseStaged {
                tokens: vec![(1 << 63) + 6]
            },
            "the owner's slot is released at once"
        );
    }

    #[test]
    fn an_inline_read_beyond_the_body_limit_is_refused_naming_the_size() {
        let io = owner_io();
        let err = io
            .read("objects/aa/x.cold", MAX_OWNER_INLINE_READ + 1, 0)
            .unwrap_err();
        assert_eq!(
            err.code(),
            crescent_wire::ErrorCode::PolicyUnsatisfiable,
            "{err}"
        );
        assert!(
            err.to_string()
                .contains(&format!("{} bytes", MAX_OWNER_INLINE_READ + 1)),
            "{err}"
        );
        // Within it: the usual path (here: not connected).
        assert_eq!(
            io.read("objects/aa/x.cold", 10, 0).unwrap_err().code(),
            crescent_wire::ErrorCode::Unavailable
        );
        // Without a region the owner is never asked to stage.
        assert_eq!(
            io.stage("l", 10, 0, 0).unwrap_err().code(),
            crescent_wire::ErrorCode::InvalidArgument
        );
    }

    fn region(capacity_bytes: u64) -> OwnerStagingRegion {
        OwnerStagingRegion {
            version: 1,
            segment_id: "o/staging0".into(),
            capacity_bytes,
        }
    }

    #[test]
    fn a_link_stages_only_what_fits_the_owners_region() {
        let link = OwnerStagingLink::default();
        assert!(!link.can_stage(1), "no region registered");
        link.set("127.0.0.1:9", Some(&region(64 << 20)));
        assert!(link.can_stage(40 << 20));
        assert!(!link.can_stage((64 << 20) + 1));
        link.set("127.0.0.1:9", None);
        assert!(!link.can_stage(1), "re-registered without a region");
    }

    #[test]
    fn tokens_are_taken_once_and_forgotten_on_reregistration() {
        let link = OwnerStagingLink::default();
        link.set("e", Some(&region(1 << 20)));
        link.remember(7, 1_000, 0);
        link.remember(8, 1_000, 0);
        assert!(link.take(7));
        assert!(!link.take(7), "taken once");
        link.set("e", Some(&region(1 << 20)));
        assert!(!link.take(8), "a new incarnation's memory is new");
    }

    #[test]
    fn remembered_tokens_are_bounded_and_expired_ones_go_first() {
        let link = OwnerStagingLink::default();
        for t in 0..MAX_REMEMBERED_TOKENS as u64 {
            link.remember(t, 0, 0);
        }
        // Full, nothing expired yet: the new token is not remembered (its ack is then
        // answered unknown by crescentd, and the owner's expiry frees the slot).
        link.remember(u64::MAX, 10, 0);
        assert!(!link.take(u64::MAX));
        // Past the grace: the expired ones are dropped to make room.
        link.remember(u64::MAX, 10, TOKEN_GRACE_MS + 1);
        assert!(link.take(u64::MAX));
        assert!(!link.take(0));
    }
}

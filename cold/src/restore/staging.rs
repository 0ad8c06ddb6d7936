//! The bounded staging pool of remote restores (docs/cold-tier.md, "Restore on read"): the
//! cold-backing owner reads and verifies a payload into a slot of a fixed-capacity,
//! transport-registered region; a remote reader pulls the bytes from the slot and acks.
//!
//! This is the pool's bookkeeping only, a pure state machine (no IO, no clock: every call that
//! depends on time takes `now_ms`). The server holds it behind a lock, owns the memory and the
//! transport, and turns the outcomes returned here into serving and withdrawing slots.
//!
//! A slot lives through:
//!
//! - [`StagingPool::reserve`]: a contiguous run of allocation units, `Filling`, held by the
//!   owner (who writes the verified payload into it); saturation is an explicit
//!   [`StagingRefusal::Busy`], never a wait;
//! - [`StagingPool::publish`] (or [`StagingPool::abort`] if the read or the check failed);
//! - [`StagingPool::admit_reader`]: one reader token per remote reader, each with its own
//!   reader pin, transfer pin and deadline (a ready slot of the same payload may be shared);
//! - [`StagingPool::release_owner`]: the owner's hold ends once its readers are admitted;
//! - [`StagingPool::ack`] releases a reader pin, [`StagingPool::transfer_terminal`] its
//!   transfer pin (the server calls it once no transfer can still touch the slot through that
//!   token), [`StagingPool::pin_promotion`] / [`StagingPool::unpin_promotion`] hold the slot
//!   while the promotion copies from it;
//! - [`StagingPool::expire`] fences the tokens past their deadline: their reader pin is
//!   released, a late ack is answered [`AckOutcome::Fenced`] (idempotent, no effect), and the
//!   server must stop serving the token before it reports the transfer terminal.
//!
//! A slot is recycled (its units free again) only when the owner's hold, every reader and
//! transfer pin and every promotion pin are released.

use std::collections::{BTreeMap, HashMap};

/// Identifies one staged payload (a slot while it is allocated; never reused).
pub type SlotId = u64;
/// Identifies one reader's claim on a slot (what the reader acks; never reused).
pub type StagingToken = u64;

/// The pool's fixed geometry and reader deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingConfig {
    /// Bytes of the registered region (a multiple of `unit_bytes`).
    pub capacity_bytes: u64,
    /// Allocation granularity: a payload takes `ceil(length / unit_bytes)` contiguous units.
    pub unit_bytes: u64,
    /// How long a reader may take between its admission and its ack.
    pub reader_ttl_ms: u64,
}

impl StagingConfig {
    fn units(&self) -> usize {
        (self.capacity_bytes / self.unit_bytes.max(1)) as usize
    }
}

/// Where a reserved payload lies in the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub slot: SlotId,
    pub offset: u64,
    pub length: u64,
}

/// Why nothing was reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StagingRefusal {
    /// No run of free units is long enough now: explicit backpressure (retry, or read inline).
    Busy,
    /// The payload can never fit the region (or is empty): use another path.
    NotStageable,
}

/// A call that does not fit the slot's state (a bug in the caller, or a stale id).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StagingMisuse {
    #[error("staging slot {0} is not allocated")]
    UnknownSlot(SlotId),
    #[error("staging slot {0} is not filling")]
    NotFilling(SlotId),
    #[error("staging slot {0} is not ready")]
    NotReady(SlotId),
    #[error("the owner no longer holds staging slot {0}")]
    NotHeld(SlotId),
    #[error("staging slot {0} has no promotion pin")]
    NoPromotionPin(SlotId),
    #[error("staging token {0} is not live")]
    UnknownToken(StagingToken),
}

/// What a reader's ack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// The reader pin was released now.
    Released,
    /// This token was acked before (repeat: no effect).
    AlreadyAcked,
    /// The token expired and was fenced before the ack (late: no effect).
    Fenced,
    /// No such token (already retired, or from another run of the owner): no effect.
    Unknown,
}

impl AckOutcome {
    /// The metric label of the outcome.
    pub fn label(self) -> &'static str {
        match self {
            AckOutcome::Released => "released",
            AckOutcome::AlreadyAcked => "repeat",
            AckOutcome::Fenced => "fenced",
            AckOutcome::Unknown => "unknown",
        }
    }
}

/// Whether a release let the slot go back to the free units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Other pins (or the owner) still hold the slot.
    Held,
    /// Every pin is gone: the slot's units are free again.
    Recycled(SlotId),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ReaderPins {
    slot: SlotId,
    deadline_ms: u64,
    /// Held until the reader acks or the token is fenced.
    reader: bool,
    /// Held until the server reports that no transfer can touch the slot through this token.
    transfer: bool,
    fenced: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    first_unit: usize,
    units: usize,
    length: u64,
    ready: bool,
    owner_hold: bool,
    readers: usize,
    promotion_pins: u32,
}

/// The pool (see the module docs).
#[derive(Debug, Clone)]
pub struct StagingPool {
    config: StagingConfig,
    /// Which slot holds each unit.
    units: Vec<Option<SlotId>>,
    slots: BTreeMap<SlotId, Slot>,
    tokens: HashMap<StagingToken, ReaderPins>,
    next_id: u64,
    used_units: usize,
}

impl StagingPool {
    /// An empty pool. Slot ids and tokens count up from `first_id`: the server seeds it with
    /// something unique to its run, so a token from an earlier run is [`AckOutcome::Unknown`]
    /// rather than someone else's.
    pub fn new(config: StagingConfig, first_id: u64) -> Self {
        Self {
            config,
            units: vec![None; config.units()],
            slots: BTreeMap::new(),
            tokens: HashMap::new(),
            next_id: first_id.max(1),
            used_units: 0,
        }
    }

    pub fn config(&self) -> &StagingConfig {
        &self.config
    }

    /// Bytes of allocated units (occupancy, including slots waiting for pins).
    pub fn used_bytes(&self) -> u64 {
        self.used_units as u64 * self.config.unit_bytes
    }

    /// Slots allocated now.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Reader tokens not yet retired (acked or fenced but still waiting for their transfer
    /// pin count here).
    pub fn live_tokens(&self) -> usize {
        self.tokens.len()
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A `Filling` slot of `length` bytes held by the owner: the first run of free units long
    /// enough (first fit).
    pub fn reserve(&mut self, length: u64) -> Result<Placement, StagingRefusal> {
        let unit = self.config.unit_bytes.max(1);
        let needed = length.div_ceil(unit) as usize;
        if length == 0 || needed > self.units.len() {
            return Err(StagingRefusal::NotStageable);
        }
        let mut run = 0;
        let mut first = None;
        for (i, u) in self.units.iter().enumerate() {
            if u.is_some() {
                run = 0;
                continue;
            }
            run += 1;
            if run == needed {
                first = Some(i + 1 - needed);
                break;
            }
        }
        let first_unit = first.ok_or(StagingRefusal::Busy)?;
        let slot = self.take_id();
        for u in &mut self.units[first_unit..first_unit + needed] {
            *u = Some(slot);
        }
        self.used_units += needed;
        self.slots.insert(
            slot,
            Slot {
                first_unit,
                units: needed,
                length,
                ready: false,
                owner_hold: true,
                readers: 0,
                promotion_pins: 0,
            },
        );
        Ok(Placement {
            slot,
            offset: first_unit as u64 * unit,
            length,
        })
    }

    fn slot_mut(&mut self, slot: SlotId) -> Result<&mut Slot, StagingMisuse> {
        self.slots
            .get_mut(&slot)
            .ok_or(StagingMisuse::UnknownSlot(slot))
    }

    /// The payload in a `Filling` slot is written and verified: readers may be admitted.
    pub fn publish(&mut self, slot: SlotId) -> Result<(), StagingMisuse> {
        let s = self.slot_mut(slot)?;
        if s.ready {
            return Err(StagingMisuse::NotFilling(slot));
        }
        s.ready = true;
        Ok(())
    }

    /// The read or the check of a `Filling` slot failed: the slot is recycled at once (nobody
    /// else ever saw it).
    pub fn abort(&mut self, slot: SlotId) -> Result<Release, StagingMisuse> {
        let s = self.slot_mut(slot)?;
        if s.ready {
            return Err(StagingMisuse::NotFilling(slot));
        }
        s.owner_hold = false;
        Ok(self.recycle_if_free(slot))
    }

    /// A reader of a ready slot: a new token with its reader and transfer pins, valid until
    /// `now_ms + reader_ttl_ms`. Returns the token and its deadline.
    pub fn admit_reader(
        &mut self,
        slot: SlotId,
        now_ms: u64,
    ) -> Result<(StagingToken, u64), StagingMisuse> {
        let s = self.slot_mut(slot)?;
        if !s.ready {
            return Err(StagingMisuse::NotReady(slot));
        }
        s.readers += 1;
        let token = self.take_id();
        let deadline_ms = now_ms.saturating_add(self.config.reader_ttl_ms);
        self.tokens.insert(
            token,
            ReaderPins {
                slot,
                deadline_ms,
                reader: true,
                transfer: true,
                fenced: false,
            },
        );
        Ok((token, deadline_ms))
    }

    /// The owner's hold on a slot ends (its readers are admitted, or it staged for nobody).
    pub fn release_owner(&mut self, slot: SlotId) -> Result<Release, StagingMisuse> {
        let s = self.slot_mut(slot)?;
        if !s.owner_hold {
            return Err(StagingMisuse::NotHeld(slot));
        }
        s.owner_hold = false;
        Ok(self.recycle_if_free(slot))
    }

    /// The reader is done with its token (it read the bytes, or gave up): its reader pin is
    /// released. Idempotent; late (after expiry) and unknown tokens change nothing.
    pub fn ack(&mut self, token: StagingToken) -> AckOutcome {
        match self.tokens.get_mut(&token) {
            None => AckOutcome::Unknown,
            Some(t) if t.fenced => AckOutcome::Fenced,
            Some(t) if !t.reader => AckOutcome::AlreadyAcked,
            Some(t) => {
                t.reader = false;
                self.retire_if_done(token);
                AckOutcome::Released
            }
        }
    }

    /// Retires a token whose reader and transfer pins are both released (and recycles its
    /// slot if nothing else holds it).
    fn retire_if_done(&mut self, token: StagingToken) -> Release {
        let slot = match self.tokens.get(&token) {
            Some(t) if !t.reader && !t.transfer => t.slot,
            _ => return Release::Held,
        };
        self.tokens.remove(&token);
        match self.slots.get_mut(&slot) {
            Some(s) => {
                s.readers -= 1;
                self.recycle_if_free(slot)
            }
            None => Release::Held,
        }
    }

    /// No transfer can touch the slot through `token` any more (the server stopped serving it
    /// and no transfer through it is running): its transfer pin is released. When the reader
    /// pin is gone too the token is retired, and the slot recycled if nothing else holds it.
    /// A token whose reader pin is still held stays live (the reader may still ack).
    pub fn transfer_terminal(&mut self, token: StagingToken) -> Result<Release, StagingMisuse> {
        let t = self
            .tokens
            .get_mut(&token)
            .ok_or(StagingMisuse::UnknownToken(token))?;
        t.transfer = false;
        Ok(self.retire_if_done(token))
    }

    /// Fences every token whose deadline is before `now_ms` and whose reader has not acked:
    /// its reader pin is released and later acks answer [`AckOutcome::Fenced`]. Returns the
    /// fenced tokens whose transfer pin is still held, in order: the server must stop serving
    /// each and then report [`transfer_terminal`](Self::transfer_terminal) (a token whose
    /// transfer was already terminal retires here).
    pub fn expire(&mut self, now_ms: u64) -> Vec<StagingToken> {
        let mut fenced: Vec<StagingToken> = self
            .tokens
            .iter_mut()
            .filter(|(_, t)| t.reader && !t.fenced && t.deadline_ms < now_ms)
            .map(|(token, t)| {
                t.reader = false;
                t.fenced = true;
                *token
            })
            .collect();
        fenced.sort_unstable();
        fenced.retain(|token| {
            let transfer_held = self.tokens.get(token).is_some_and(|t| t.transfer);
            if !transfer_held {
                self.retire_if_done(*token);
            }
            transfer_held
        });
        fenced
    }

    /// A promotion pin on a ready slot (the promotion copies from it): where the payload lies.
    pub fn pin_promotion(&mut self, slot: SlotId) -> Result<Placement, StagingMisuse> {
        let unit = self.config.unit_bytes.max(1);
        let s = self.slot_mut(slot)?;
        if !s.ready {
            return Err(StagingMisuse::NotReady(slot));
        }
        s.promotion_pins += 1;
        Ok(Placement {
            slot,
            offset: s.first_unit as u64 * unit,
            length: s.length,
        })
    }

    /// The promotion finished copying (or gave up).
    pub fn unpin_promotion(&mut self, slot: SlotId) -> Result<Release, StagingMisuse> {
        let s = self.slot_mut(slot)?;
        if s.promotion_pins == 0 {
            return Err(StagingMisuse::NoPromotionPin(slot));
        }
        s.promotion_pins -= 1;
        Ok(self.recycle_if_free(slot))
    }

    /// Where an allocated slot lies.
    pub fn placement(&self, slot: SlotId) -> Option<Placement> {
        self.slots.get(&slot).map(|s| Placement {
            slot,
            offset: s.first_unit as u64 * self.config.unit_bytes.max(1),
            length: s.length,
        })
    }

    /// Where the slot a live token reads lies (a token keeps its slot allocated).
    pub fn token_placement(&self, token: StagingToken) -> Option<Placement> {
        self.tokens.get(&token).and_then(|t| self.placement(t.slot))
    }

    /// Settles fenced tokens (as [`expire`](Self::expire) returned them): the transfer pin of
    /// each whose range `idle` reports no transfer reading is released
    /// ([`transfer_terminal`](Self::transfer_terminal)). A transfer that starts later reads
    /// whatever the slot then holds, and its reader's checksum check refuses it. Returns the
    /// tokens still read (to settle again later) and the releases made.
    pub fn settle_fenced(
        &mut self,
        fenced: Vec<StagingToken>,
        mut idle: impl FnMut(Placement) -> bool,
    ) -> (Vec<StagingToken>, Vec<Release>) {
        let mut still = Vec::new();
        let mut released = Vec::new();
        for token in fenced {
            let Some(placement) = self.token_placement(token) else {
                continue;
            };
            if !idle(placement) {
                still.push(token);
                continue;
            }
            if let Ok(r) = self.transfer_terminal(token) {
                released.push(r);
            }
        }
        (still, released)
    }

    /// Whether a slot is allocated and ready (a reader of the same payload may share it).
    pub fn is_ready(&self, slot: SlotId) -> bool {
        self.slots.get(&slot).is_some_and(|s| s.ready)
    }

    fn recycle_if_free(&mut self, slot: SlotId) -> Release {
        let Some(s) = self.slots.get(&slot) else {
            return Release::Held;
        };
        if s.owner_hold || s.readers > 0 || s.promotion_pins > 0 {
            return Release::Held;
        }
        let (first, n) = (s.first_unit, s.units);
        self.slots.remove(&slot);
        for u in &mut self.units[first..first + n] {
            *u = None;
        }
        self.used_units -= n;
        Release::Recycled(slot)
    }
}

#[cfg(test)]
#[path = "staging_tests.rs"]
mod tests;

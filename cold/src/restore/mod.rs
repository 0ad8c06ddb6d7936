//! Restore coordination: single-flight of concurrent restores of one backing, and grouping of
//! batch restores by owner and device. Plain data structures; the server's restore path holds
//! them behind its own lock and delivers results to the waiters it gets back.

pub mod staging;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use crate::error::ColdError;
use crate::ids::ColdOpId;

/// The identity of one restore: a cold backing at one route version. Payloads are never
/// shared across route versions or backings (a restore of a newer version starts its own
/// flight).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RestoreKey {
    pub device_id: String,
    pub cold_op: ColdOpId,
    pub locator: String,
    pub route_version: u64,
}

/// Whether the caller runs the restore or waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// First for this key: read, verify, then [`SingleFlight::complete`].
    Leader,
    /// A restore of this key is running: wait for its result.
    Follower,
}

/// Concurrent restores of one key share one read. `W` is whatever the server uses to hand a
/// result to a waiter (a oneshot sender, a request id).
#[derive(Debug)]
pub struct SingleFlight<K, W> {
    flights: HashMap<K, Vec<W>>,
    max_flights: usize,
    max_waiters: usize,
}

impl<K: Eq + Hash + Clone, W> SingleFlight<K, W> {
    /// At most `max_flights` distinct restores and `max_waiters` waiters on one at a time.
    pub fn new(max_flights: usize, max_waiters: usize) -> Self {
        Self {
            flights: HashMap::new(),
            max_flights: max_flights.max(1),
            max_waiters: max_waiters.max(1),
        }
    }

    /// Registers `waiter` for `key`. Backpressure when the table or the flight is full.
    pub fn join(&mut self, key: &K, waiter: W) -> Result<Joined, ColdError> {
        if let Some(waiters) = self.flights.get_mut(key) {
            if waiters.len() >= self.max_waiters {
                return Err(ColdError::Backpressure {
                    queue: "restore single-flight",
                    reason: format!("{} waiters on one restore", waiters.len()),
                });
            }
            waiters.push(waiter);
            return Ok(Joined::Follower);
        }
        if self.flights.len() >= self.max_flights {
            return Err(ColdError::Backpressure {
                queue: "restore single-flight",
                reason: format!("{} restores in flight", self.flights.len()),
            });
        }
        self.flights.insert(key.clone(), vec![waiter]);
        Ok(Joined::Leader)
    }

    /// Ends the flight of `key`: every waiter (the leader's first) to deliver the result to.
    pub fn complete(&mut self, key: &K) -> Vec<W> {
        self.flights.remove(key).unwrap_or_default()
    }

    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    pub fn waiters(&self, key: &K) -> usize {
        self.flights.get(key).map_or(0, Vec::len)
    }
}

/// One object of a batch restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreRequest {
    pub object_key: String,
    pub owner: String,
    pub key: RestoreKey,
    pub length: u64,
    pub checksum: u32,
}

/// The requests of a batch that one owner serves from one device, in locator order (the
/// order a directory-backed device reads best), duplicates of one backing merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreGroup {
    pub owner: String,
    pub device_id: String,
    /// Distinct backings to read.
    pub reads: Vec<RestoreRequest>,
    /// For each request of the batch in this group (by its index in the batch): the index in
    /// `reads` whose payload answers it.
    pub answers: Vec<(usize, usize)>,
}

/// The distinct backings of one (owner, device) group, each with the batch indexes asking.
type GroupReads = BTreeMap<RestoreKey, (RestoreRequest, Vec<usize>)>;

/// Groups a batch by (owner, device), merging requests for the same backing.
pub fn group_by_device(batch: &[RestoreRequest]) -> Vec<RestoreGroup> {
    let mut groups: BTreeMap<(String, String), GroupReads> = BTreeMap::new();
    for (i, req) in batch.iter().enumerate() {
        groups
            .entry((req.owner.clone(), req.key.device_id.clone()))
            .or_default()
            .entry(req.key.clone())
            .or_insert_with(|| (req.clone(), Vec::new()))
            .1
            .push(i);
    }
    groups
        .into_iter()
        .map(|((owner, device_id), by_key)| {
            let mut entries: Vec<(RestoreRequest, Vec<usize>)> = by_key.into_values().collect();
            entries.sort_by(|a, b| a.0.key.locator.cmp(&b.0.key.locator));
            let mut reads = Vec::with_capacity(entries.len());
            let mut answers = Vec::new();
            for (read_index, (req, askers)) in entries.into_iter().enumerate() {
                answers.extend(askers.into_iter().map(|i| (i, read_index)));
                reads.push(req);
            }
            answers.sort_unstable();
            RestoreGroup {
                owner,
                device_id,
                reads,
                answers,
            }
        })
        .collect()
}

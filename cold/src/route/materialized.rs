//! A route's materialized backing, borrowed: what every reader of a cold payload needs
//! (where it is, how long, its checksum), without matching the backing enum at each reader.

use super::{ActiveColdBacking, ObjectRoute};
use crate::error::ColdError;
use crate::ids::ColdOpId;
use crate::restore::RestoreKey;

/// The materialized backing of a route at one route version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Materialized<'a> {
    pub cold_op: ColdOpId,
    pub owner: &'a str,
    pub device_id: &'a str,
    pub locator: &'a str,
    pub length: u64,
    pub checksum: u32,
    /// The version of the route this backing was read from.
    pub route_version: u64,
}

impl Materialized<'_> {
    /// The single-flight key of a restore of this backing (per backing and route version).
    pub fn restore_key(&self) -> RestoreKey {
        RestoreKey {
            device_id: self.device_id.to_string(),
            cold_op: self.cold_op,
            locator: self.locator.to_string(),
            route_version: self.route_version,
        }
    }
}

impl ObjectRoute {
    /// The route's materialized backing (`None`: no backing, or still pending).
    pub fn materialized(&self) -> Option<Materialized<'_>> {
        match &self.cold {
            Some(ActiveColdBacking::Materialized {
                cold_op,
                owner,
                device_id,
                locator,
                length,
                checksum,
                ..
            }) => Some(Materialized {
                cold_op: *cold_op,
                owner,
                device_id,
                locator,
                length: *length,
                checksum: *checksum,
                route_version: self.version,
            }),
            _ => None,
        }
    }

    /// [`materialized`](Self::materialized), or NOT_FOUND for a reader that needs it.
    pub fn require_materialized(&self) -> Result<Materialized<'_>, ColdError> {
        self.materialized().ok_or_else(|| ColdError::NotFound {
            what: "materialized cold backing of",
            id: self.key.clone(),
        })
    }
}

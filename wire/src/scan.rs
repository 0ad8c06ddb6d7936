//! `POST /v1/objects/scan` (admin): every object a cluster holds, across every tenant and
//! domain, page by page (docs/api.md, "Scanning every object"). What `crescent mesh drain`
//! moves (docs/scale-out.md, "Draining a cluster").

use serde::{Deserialize, Serialize};

/// The version of [`ScanRequest`] and [`ScanReply`]. A server refuses a request of another
/// version (INVALID_ARGUMENT) rather than guess at its cursor.
pub const SCAN_WIRE_VERSION: u32 = 1;
/// Most objects one page holds.
pub const MAX_SCAN_PAGE: u32 = 1000;
/// Objects per page when the request names no limit.
pub const DEFAULT_SCAN_PAGE: u32 = 200;

/// The route (POST, admin only).
pub const SCAN_ROUTE: &str = "/v1/objects/scan";

/// Where a scan goes on: after `key` of scope `scope` in directory shard `shard`. Opaque to
/// callers, meaningful only to the process that answered it (scopes are numbered per
/// process): a scan resumed on another process, or after a restart, starts over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanCursor {
    pub shard: u32,
    pub scope: u32,
    pub after: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanRequest {
    /// [`SCAN_WIRE_VERSION`].
    #[serde(default = "scan_wire_version")]
    pub version: u32,
    /// The previous page's `next`; absent for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<ScanCursor>,
    /// Page size, 1..=[`MAX_SCAN_PAGE`] (default [`DEFAULT_SCAN_PAGE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

fn scan_wire_version() -> u32 {
    SCAN_WIRE_VERSION
}

impl ScanRequest {
    pub fn page(cursor: Option<ScanCursor>, limit: Option<u32>) -> ScanRequest {
        ScanRequest {
            version: SCAN_WIRE_VERSION,
            cursor,
            limit,
        }
    }
}

/// One object: its full identity and size. `complete: false` is a put in progress (its size
/// the size being put), which cannot be read yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanEntry {
    pub tenant: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub key: String,
    pub size: u64,
    pub complete: bool,
    /// The complete version's replicas (0 for one held only in the cold tier). Wire
    /// addition: absent from older servers (0).
    #[serde(default)]
    pub replicas: u32,
    /// Wire addition: absent from older servers (`kvcache`).
    #[serde(default)]
    pub data_type: crate::store::DataType,
    /// Kept out of eviction for good. Wire addition: absent from older servers (false).
    #[serde(default)]
    pub hard_pin: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanReply {
    /// [`SCAN_WIRE_VERSION`].
    pub version: u32,
    pub objects: Vec<ScanEntry>,
    /// Pass as `cursor` for the next page; absent once the scan has passed every shard. A
    /// full page may be followed by an empty last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<ScanCursor>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_without_a_version_is_version_1() {
        let req: ScanRequest = serde_json::from_str(r#"{"limit":5}"#).unwrap();
        assert_eq!(req, ScanRequest::page(None, Some(5)));
        let text = serde_json::to_string(&ScanRequest::page(
            Some(ScanCursor {
                shard: 3,
                scope: 1,
                after: "k".into(),
            }),
            None,
        ))
        .unwrap();
        assert_eq!(
            text,
            r#"{"version":1,"cursor":{"shard":3,"scope":1,"after":"k"}}"#
        );
    }
}

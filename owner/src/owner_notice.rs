//! What a storage owner's transfer listener takes from others: writers' owner notices
//! (docs/rebuild.md), checked against their write grants when crescentd runs with `[auth]`,
//! and the data-plane key crescentd hands the owner (docs/security.md, "The data plane").

use std::sync::{Arc, Weak};

use crescent_transport::grant::put_subject;
use crescent_transport::tcp::{NotifyHandler, TcpTransport};
use crescent_transport::{Grant, GrantKey, GrantKeys};
use crescent_wire::rebuild::{
    check_version, OwnerNotice, OwnerNoticeReply, ReplayEntry, REBUILD_WIRE_VERSION,
};

use crescent_client::ClientError;
use crescent_client::OwnershipTable;

/// The owner's answer to NOTIFY: notices from writers that committed replicas in our segment.
pub(crate) fn notice_handler(
    owner_id: &str,
    table: Arc<OwnershipTable>,
    transport: Weak<TcpTransport>,
) -> NotifyHandler {
    let owner_id = owner_id.to_string();
    Arc::new(move |payload: &[u8]| {
        let notice: OwnerNotice =
            rmp_serde::from_slice(payload).map_err(|e| format!("undecodable notice: {e}"))?;
        check_version(notice.version).map_err(|e| e.to_string())?;
        if notice.owner_id != owner_id {
            return Err(format!(
                "notice for owner {:?}, this is {owner_id:?}",
                notice.owner_id
            ));
        }
        if notice.entries.len() > crescent_wire::rebuild::MAX_REPLAY_BATCH {
            return Err("too many entries in one notice".into());
        }
        // With `[auth]` a notice entry counts only with the write grant crescentd issued for
        // its range and put: anyone can reach this listener, and a recorded entry is replayed
        // into crescentd's directory after a restart.
        let keys = transport.upgrade().and_then(|t| t.grant_keys());
        let outcomes = match keys {
            None => table.accept_notice(&notice.entries),
            Some(keys) => {
                table.accept_notice_checked(&notice.entries, |e| notice_granted(&keys, e))
            }
        };
        let reply = OwnerNoticeReply {
            version: REBUILD_WIRE_VERSION,
            outcomes,
        };
        rmp_serde::to_vec_named(&reply).map_err(|e| e.to_string())
    })
}

/// Whether `e` carries the write grant of its range and put, signed by one of `keys`.
fn notice_granted(keys: &GrantKeys, e: &ReplayEntry) -> bool {
    let Some(grant) = e.grant.as_deref().and_then(Grant::decode) else {
        return false;
    };
    let subject = put_subject(&e.id, e.put_id);
    let checked = keys.verify_notice(&e.segment_id, e.offset, e.length, &subject, &grant);
    if let Err(reason) = checked {
        tracing::debug!(
            reason = reason.label(),
            "notice entry refused: data-plane grant"
        );
    }
    checked.is_ok()
}

/// Makes the listener require grants signed by `key` (crescentd with `[auth]`); `None` (an
/// open crescentd) leaves it serving any transfer. A key of the wrong size is refused rather
/// than leaving the segment open.
pub(crate) fn install_data_key(
    transport: &TcpTransport,
    key: Option<&[u8]>,
) -> Result<(), ClientError> {
    let Some(key) = key else {
        return Ok(());
    };
    let bytes: [u8; 32] = key.try_into().map_err(|_| {
        ClientError::Protocol(format!(
            "crescentd sent a {}-byte data-plane key; 32 expected",
            key.len()
        ))
    })?;
    if transport.install_grant_key(GrantKey::from_bytes(bytes)) {
        tracing::info!("transfer listener requires data-plane grants (new key installed)");
    }
    Ok(())
}

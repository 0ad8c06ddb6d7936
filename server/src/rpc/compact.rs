//! The compact batch ops (`crescent_wire::rpc_compact`): the same operations as the classic
//! batch get and batch put_start ([`crate::api::ops`]: rebuild gate, cold restore, placement
//! default and every per-item rule), with the request's shared scope and options spread over
//! the items and the answer folded into a segment table and positional items. The compact
//! batch put_end likewise runs the classic batch put_end (rebuild gate, cold-backed items,
//! every check and error code) and only shortens its answer.

use crescent_wire::rpc_compact::{
    check_version, CompactAckReply, CompactGetItem, CompactGetReply, CompactItemError,
    CompactKeysRequest, CompactPutEndRequest, CompactPutStartReply, CompactPutStartRequest,
    CompactPutStarted, CompactReplica, SegmentTableBuilder, COMPACT_VERSION,
};
use crescent_wire::store::{
    BatchRequest, ItemResult, ObjectId, ObjectRequest, PutEndRequest, PutStartRequest,
    ReplicaState, MAX_BATCH,
};
use crescent_wire::ApiError;

use crate::api::ops;
use crate::node::NodeState;

/// Unpacks the part every compact request shares: checks its format version and item count,
/// and gives each item the request's one scope. `split` takes an item apart into its key and
/// the rest; the answer pairs each item's object id with that rest, in request order.
fn scoped_items<T, R>(
    v: u16,
    tenant: Option<String>,
    domain: Option<String>,
    items: Vec<T>,
    split: impl Fn(T) -> (String, R),
) -> Result<impl Iterator<Item = (ObjectId, R)>, ApiError> {
    check_version(v).map_err(|e| ApiError::invalid(e.to_string()))?;
    if items.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "{} items; a batch holds at most {MAX_BATCH}",
            items.len()
        )));
    }
    Ok(items.into_iter().map(move |item| {
        let (key, rest) = split(item);
        let id = ObjectId {
            tenant: tenant.clone(),
            domain: domain.clone(),
            key,
        };
        (id, rest)
    }))
}

pub(super) fn batch_get(
    state: &NodeState,
    req: CompactKeysRequest,
) -> Result<CompactGetReply, ApiError> {
    let items = scoped_items(req.v, req.tenant, req.domain, req.keys, |key| (key, ()))?
        .map(|(id, ())| ObjectRequest { id })
        .collect();
    let classic = ops::batch_get(state, BatchRequest { items })?;
    let mut segments = SegmentTableBuilder::default();
    let items = classic
        .items
        .into_iter()
        .map(|item| match item {
            ItemResult::Ok(r) => {
                let replicas = r
                    .replicas
                    .iter()
                    .map(|d| CompactReplica(segments.index_of(d), d.offset, d.grant.clone()))
                    .collect();
                ItemResult::Ok(CompactGetItem(
                    r.size,
                    r.put_id,
                    r.data_type,
                    r.checksum,
                    r.lease_until_ms,
                    replicas,
                    r.inline,
                ))
            }
            ItemResult::Err { code, message } => ItemResult::Err { code, message },
        })
        .collect();
    Ok(CompactGetReply {
        v: COMPACT_VERSION,
        segments: segments.finish(),
        items,
    })
}

pub(super) fn batch_put_start(
    state: &NodeState,
    req: CompactPutStartRequest,
) -> Result<CompactPutStartReply, ApiError> {
    let o = req.options;
    let items = scoped_items(req.v, req.tenant, req.domain, req.items, |item| {
        (item.0, (item.1, item.2))
    })?
    .map(|(id, (size, checksum))| PutStartRequest {
        id,
        size,
        replicas: o.replicas,
        placement: o.placement,
        preferred_segment: o.preferred_segment.clone(),
        data_type: o.data_type,
        checksum,
        upsert: o.upsert,
        soft_pin_secs: o.soft_pin_secs,
        hard_pin: o.hard_pin,
    })
    .collect();
    let classic = ops::batch_put_start(state, BatchRequest { items })?;
    let mut segments = SegmentTableBuilder::default();
    let items = classic
        .items
        .into_iter()
        .map(|item| match item {
            ItemResult::Ok(r) => {
                // Every replica of one put is allocated together and shares its state.
                let state = r
                    .replicas
                    .first()
                    .map_or(ReplicaState::Processing, |d| d.state);
                let replicas = r
                    .replicas
                    .iter()
                    .map(|d| CompactReplica(segments.index_of(d), d.offset, d.grant.clone()))
                    .collect();
                ItemResult::Ok(CompactPutStarted(
                    r.put_id,
                    r.already_exists,
                    replicas,
                    state,
                ))
            }
            ItemResult::Err { code, message } => ItemResult::Err { code, message },
        })
        .collect();
    Ok(CompactPutStartReply {
        v: COMPACT_VERSION,
        segments: segments.finish(),
        items,
    })
}

pub(super) fn batch_put_end(
    state: &NodeState,
    req: CompactPutEndRequest,
) -> Result<CompactAckReply, ApiError> {
    let items = scoped_items(req.v, req.tenant, req.domain, req.items, |item| {
        (item.0, item.1)
    })?
    .map(|(id, put_id)| PutEndRequest { id, put_id })
    .collect();
    let classic = ops::batch_put_end(state, BatchRequest { items })?;
    let items = classic
        .items
        .into_iter()
        .map(|item| match item {
            ItemResult::Ok(_) => None,
            ItemResult::Err { code, message } => Some(CompactItemError(code, message)),
        })
        .collect();
    Ok(CompactAckReply {
        v: COMPACT_VERSION,
        items,
    })
}

//! Storage owners and segments: journaled through the `SegmentRegistry` aggregate.

use std::sync::Arc;

use actix_web::web;
use crescent_actors::runtime::Executed;
use crescent_actors::segment_registry::{
    self as registry, SegmentRegistryCommand, SegmentRegistryEvent, INSTANCE_ID,
};
use crescent_actors::DomainEvent;
use crescent_wire::segments::{
    CommandReply, MountSegmentRequest, OwnerInfo, RegisterOwnerReply, RegisterOwnerRequest,
    SegmentInfo, SegmentList, TransportKind, UnmountSegmentRequest,
};

use super::error::HttpError;
use super::wire::{Reply, Wire};
use crate::node::NodeState;

type State = web::Data<Arc<NodeState>>;

pub(crate) fn transport_to_domain(t: TransportKind) -> registry::TransportKind {
    match t {
        TransportKind::Tcp => registry::TransportKind::Tcp,
        TransportKind::TransferEngine => registry::TransportKind::TransferEngine,
        TransportKind::Embedded => registry::TransportKind::Embedded,
    }
}

fn command_reply(done: Executed<SegmentRegistryEvent>) -> CommandReply {
    CommandReply {
        events: done.events.iter().map(|e| e.kind().to_string()).collect(),
        first_seq: done.seqs.as_ref().map(|r| *r.start()),
        last_seq: done.last_seq(),
    }
}

/// Every command goes through the segment mirror, which keeps the object directory in step.
async fn execute(state: &State, cmd: SegmentRegistryCommand) -> Result<CommandReply, HttpError> {
    let done = state.mirror.execute(cmd).await?;
    Ok(command_reply(done))
}

pub async fn register_owner(
    state: State,
    Wire(req): Wire<RegisterOwnerRequest>,
) -> Result<Reply<RegisterOwnerReply>, HttpError> {
    let owner_id = req.owner_id.clone();
    let cmd = SegmentRegistryCommand::RegisterOwner {
        owner_id: req.owner_id,
        endpoint: req.endpoint,
        incarnation: req.incarnation,
    };
    let done = state.mirror.execute(cmd).await?;
    // A higher incarnation unmounted the old process's segments: that process, and the memory
    // a rebuild was waiting for it to replay, are gone. The gate stops waiting for it, as when
    // an owner expires (it can then open at best DEGRADED); otherwise the new process, which
    // has nothing to replay, would hold it REBUILDING until the degraded timeout, because its
    // heartbeats keep the owner id from ever expiring.
    let restarted = done.events.iter().any(|e| {
        matches!(e, SegmentRegistryEvent::SegmentUnmounted(u)
            if u.reason == registry::UnmountReason::OwnerRestarted)
    });
    if restarted {
        tracing::info!(owner = %owner_id, "owner restarted; a rebuild stops waiting for its old process");
        state.rebuild.owner_lost(&owner_id, state.now_ms());
    }
    let command = command_reply(done);
    Ok(Reply(RegisterOwnerReply {
        events: command.events,
        first_seq: command.first_seq,
        last_seq: command.last_seq,
        data_key: crate::api::ops::owner_data_key(&state, &owner_id),
    }))
}

pub async fn mount(
    state: State,
    Wire(req): Wire<MountSegmentRequest>,
) -> Result<Reply<CommandReply>, HttpError> {
    let cmd = SegmentRegistryCommand::MountSegment {
        segment_id: req.segment_id,
        owner_id: req.owner_id,
        base: req.base,
        size: req.size,
        transport: transport_to_domain(req.transport),
    };
    Ok(Reply(execute(&state, cmd).await?))
}

pub async fn unmount(
    state: State,
    Wire(req): Wire<UnmountSegmentRequest>,
) -> Result<Reply<CommandReply>, HttpError> {
    let cmd = SegmentRegistryCommand::UnmountSegment {
        segment_id: req.segment_id,
    };
    Ok(Reply(execute(&state, cmd).await?))
}

pub async fn list(state: State) -> Result<Reply<SegmentList>, HttpError> {
    let list = state
        .segments
        .read(INSTANCE_ID, |r: &registry::SegmentRegistry| SegmentList {
            owners: r
                .owners()
                .iter()
                .map(|(id, o)| OwnerInfo {
                    owner_id: id.clone(),
                    endpoint: o.endpoint.clone(),
                    incarnation: o.incarnation,
                    registered_at_ms: o.registered_at_ms,
                })
                .collect(),
            segments: r
                .segments()
                .map(|(id, s)| SegmentInfo {
                    segment_id: id.clone(),
                    owner_id: s.owner_id.clone(),
                    base: s.base,
                    size: s.size,
                    transport: crate::segment_mirror::wire_transport(s.transport),
                    mounted_at_ms: s.mounted_at_ms,
                })
                .collect(),
        })
        .await
        .map_err(super::error::from_runtime)?;
    Ok(Reply(list))
}

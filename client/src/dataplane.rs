//! The client's side of the data plane: one transport (started on first use: TCP, and beside
//! it the transfer engine when one is configured, docs/transport.md "Transfer-engine
//! segments"), the staging pool, and — when this process is also a storage owner — which segment is its own, so puts
//! place there by default, gets read the local replica first, and commits land in the
//! ownership table.

use std::sync::{Arc, RwLock, Weak};

use crescent_transport::ffi::{FfiConfig, FfiTransport};
use crescent_transport::tcp::{TcpConfig, TcpTransport};
use crescent_transport::{
    Grant, RemoteSegment, RoutedTransport, SegmentMemory, Transport, TransportError,
};
use crescent_wire::rebuild::{OwnerNotice, OwnerNoticeReply, ReplayEntry};
use crescent_wire::segments::{TransportKind, EMBEDDED_OWNER_ID};
use crescent_wire::store::{DataType, ObjectId, ReplicaDesc, ReplicaState};
use futures::future::BoxFuture;
use tokio::sync::OnceCell;

use crate::buffer::StagingPool;
use crate::error::ClientError;
use crate::metrics::ClientMetrics;
use crate::ownership::{OwnedReplica, OwnershipTable};
use crate::rebuild::{
    NoticeSender, NoticeTarget, Notifier, NotifyConfig, SendFailure, TaggedEntries,
};

/// This process's own segment (set while a storage owner of the crescent-owner package runs
/// on this client, see [`crate::CrescentClient::attach_own_segment`]).
#[derive(Debug, Clone)]
pub struct LocalSegment {
    /// Where its transfer listener serves it.
    pub remote: RemoteSegment,
    /// Its ownership table, where this client records its committed replicas there.
    pub table: Arc<OwnershipTable>,
    /// The segment's memory, for the batch paths that read and write their own replicas in
    /// place (range-locked like every transfer, so they never race one). `None` leaves every
    /// access to the transport.
    pub memory: Option<Arc<SegmentMemory>>,
}

pub(crate) struct DataPlane {
    tcp: OnceCell<Arc<TcpTransport>>,
    transport: OnceCell<Arc<dyn Transport>>,
    /// The transfer engine for segments mounted with transport `transfer_engine`.
    engine: Option<FfiConfig>,
    pub staging: StagingPool,
    local: RwLock<Option<LocalSegment>>,
    pub metrics: ClientMetrics,
    /// Has other owners record the replicas this process writes into their segments.
    pub notifier: Notifier,
}

/// What a committed put was, for the ownership table and owner notices.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Committed<'a> {
    pub id: &'a ObjectId,
    pub put_id: u64,
    pub checksum: Option<u32>,
    pub data_type: DataType,
}

/// Sends owner notices over this client's TCP transport (NOTIFY, docs/transport.md).
struct TransportNoticeSender {
    data: Weak<DataPlane>,
}

impl NoticeSender for TransportNoticeSender {
    fn send<'a>(
        &'a self,
        endpoint: &'a str,
        notice: &'a OwnerNotice,
    ) -> BoxFuture<'a, Result<OwnerNoticeReply, SendFailure>> {
        Box::pin(async move {
            let data = self
                .data
                .upgrade()
                .ok_or_else(|| SendFailure::Refused("the client is gone".into()))?;
            let tcp = data
                .tcp()
                .await
                .map_err(|e| SendFailure::Retryable(e.to_string()))?;
            let body = rmp_serde::to_vec_named(notice)
                .map_err(|e| SendFailure::Refused(format!("cannot encode a notice: {e}")))?;
            let answer = tcp.notify(endpoint, &body).await.map_err(|e| match e {
                TransportError::SegmentNotFound { .. } | TransportError::InvalidArgument(_) => {
                    SendFailure::Refused(e.to_string())
                }
                other => SendFailure::Retryable(other.to_string()),
            })?;
            let reply: OwnerNoticeReply = rmp_serde::from_slice(&answer)
                .map_err(|e| SendFailure::Refused(format!("undecodable notice answer: {e}")))?;
            crescent_wire::rebuild::check_version(reply.version)
                .map_err(|e| SendFailure::Refused(e.to_string()))?;
            Ok(reply)
        })
    }
}

impl std::fmt::Debug for DataPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataPlane")
            .field("started", &self.transport.initialized())
            .field("local", &self.local())
            .finish_non_exhaustive()
    }
}

impl DataPlane {
    /// A data plane (inside its `Arc`: the notice sender refers back to it weakly), with the
    /// transfer engine `engine` beside TCP when given.
    pub fn new(metrics: ClientMetrics, engine: Option<FfiConfig>) -> Arc<Self> {
        Arc::new_cyclic(|weak| {
            let sender = Arc::new(TransportNoticeSender { data: weak.clone() });
            Self {
                tcp: OnceCell::new(),
                transport: OnceCell::new(),
                engine,
                staging: StagingPool::default(),
                local: RwLock::new(None),
                notifier: Notifier::new(NotifyConfig::default(), sender, metrics.rebuild.clone()),
                metrics,
            }
        })
    }

    async fn tcp(&self) -> Result<&Arc<TcpTransport>, ClientError> {
        self.tcp
            .get_or_try_init(|| async {
                let t = TcpTransport::start(TcpConfig::default(), self.metrics.transport.clone())
                    .await?;
                Ok::<_, ClientError>(Arc::new(t))
            })
            .await
    }

    /// The client's transport: TCP without a listener of its own (owners serve through
    /// theirs). Transfers to a listener of this same process are copied in memory by the
    /// transport's same-process fast path. With a transfer engine configured, a
    /// [`RoutedTransport`] sends the transfers of engine-served segments through it.
    pub async fn transport(&self) -> Result<&Arc<dyn Transport>, ClientError> {
        let tcp = self.tcp().await?;
        self.transport
            .get_or_try_init(|| async {
                let Some(config) = &self.engine else {
                    return Ok(tcp.clone() as Arc<dyn Transport>);
                };
                let engine = FfiTransport::load(config.clone(), self.metrics.transport.clone())?;
                let routed = RoutedTransport::new(tcp.clone(), Arc::new(engine));
                Ok::<_, ClientError>(Arc::new(routed) as Arc<dyn Transport>)
            })
            .await
    }

    /// The transfer engine this data plane loads beside TCP, if one is configured.
    pub fn engine_config(&self) -> Option<&FfiConfig> {
        self.engine.as_ref()
    }

    /// Before put_end: every owner of another process that holds one of these puts'
    /// replicas records it in its ownership table, and answers (docs/rebuild.md, "Owners
    /// record before the ack"). Returns, per put (by position), why it could not be recorded:
    /// such a put must be revoked, not ended. Replicas in our own segment are recorded after
    /// put_end ([`Self::committed_all`]): they live and die with this process.
    pub async fn record_at_owners<'a>(
        &self,
        puts: impl IntoIterator<Item = (Committed<'a>, &'a [ReplicaDesc])>,
    ) -> std::collections::HashMap<usize, ClientError> {
        let own = self.own_segment_id();
        let mut entries = TaggedEntries::new();
        for (tag, (put, replicas)) in puts.into_iter().enumerate() {
            for r in replicas {
                if own.as_deref() == Some(r.segment_id.as_str()) {
                    continue;
                }
                if let Some(target) = notice_target(r) {
                    entries
                        .entry(target)
                        .or_default()
                        .push((tag, entry_of(&put, r)));
                }
            }
        }
        if entries.is_empty() {
            return Default::default();
        }
        self.notifier
            .record(entries)
            .await
            .into_iter()
            .map(|(tag, why)| {
                let e = ClientError::Api(crescent_wire::ApiError::new(
                    crescent_wire::ErrorCode::DurabilityFailed,
                    format!(
                        "storage owner {} ({}) did not record the put, so it was not \
                         acknowledged: {}",
                        why.owner_id, why.endpoint, why.detail
                    ),
                ));
                (tag, e)
            })
            .collect()
    }

    /// After put_end succeeded: records the replica in our own segment, if it holds one.
    pub fn committed(&self, put: Committed<'_>, replicas: &[ReplicaDesc]) {
        self.committed_all([(put, replicas)]);
    }

    /// [`Self::committed`] for many puts (a batch): the ownership table is locked once for
    /// all of our own replicas, and the own segment is looked up once. (Replicas in other
    /// owners' segments were recorded by them before put_end: [`Self::record_at_owners`].)
    pub fn committed_all<'a>(
        &self,
        puts: impl IntoIterator<Item = (Committed<'a>, &'a [ReplicaDesc])>,
    ) {
        let Some(local) = self.local() else {
            return;
        };
        let own = &local.remote.segment_id;
        let mut owned: Vec<OwnedReplica> = Vec::new();
        for (put, replicas) in puts {
            for r in replicas.iter().filter(|r| **own == *r.segment_id) {
                owned.push(OwnedReplica {
                    id: put.id.clone(),
                    put_id: put.put_id,
                    segment_id: own.clone(),
                    offset: r.offset,
                    length: r.length,
                    checksum: put.checksum,
                    data_type: put.data_type,
                });
            }
        }
        if !owned.is_empty() {
            local.table.record_all(owned);
        }
    }

    pub fn local(&self) -> Option<LocalSegment> {
        self.local.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn own_segment_id(&self) -> Option<Arc<str>> {
        self.local
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|l| l.remote.segment_id.clone())
    }

    pub fn attach(&self, local: LocalSegment) {
        *self.local.write().unwrap_or_else(|p| p.into_inner()) = Some(local);
    }

    /// Detaches the owner of `segment_id` (no-op if another one has been attached since).
    pub fn detach(&self, segment_id: &str) {
        let mut local = self.local.write().unwrap_or_else(|p| p.into_inner());
        if local
            .as_ref()
            .is_some_and(|l| &*l.remote.segment_id == segment_id)
        {
            *local = None;
        }
    }
}

/// Where to send a replica's transfer. The own segment reuses its prepared
/// [`RemoteSegment`] (no allocation).
pub(crate) fn remote_for(
    replica: &ReplicaDesc,
    local: Option<&LocalSegment>,
) -> Result<RemoteSegment, ClientError> {
    if let Some(l) = local {
        if *l.remote.segment_id == *replica.segment_id {
            return Ok(l.remote.clone());
        }
    }
    if replica.transport == TransportKind::TransferEngine {
        // The engine finds the segment by its id; without one loaded, the TCP transport
        // refuses the transfer with INVALID_ARGUMENT.
        let endpoint = replica.endpoint.as_deref().unwrap_or_default();
        return Ok(RemoteSegment::transfer_engine(
            endpoint,
            replica.segment_id.as_str(),
        ));
    }
    let endpoint = replica.endpoint.as_deref().ok_or_else(|| {
        ClientError::Protocol(format!(
            "replica on segment {} has no transfer endpoint",
            replica.segment_id
        ))
    })?;
    Ok(RemoteSegment::new(endpoint, replica.segment_id.as_str()))
}

/// The data-plane grant crescentd attached to replica `r` (with `[auth]`), for its transfers.
/// A malformed one is dropped: the listener then refuses the transfer with PERMISSION_DENIED.
pub(crate) fn grant_of(r: &ReplicaDesc) -> Option<Grant> {
    r.grant.as_deref().and_then(Grant::decode)
}

/// The owner to notify of replica `r`, if its segment's owner takes notices
/// (docs/rebuild.md, "Owners record before the ack"): an owner of a TCP segment, and an owner
/// of a transfer-engine segment that registered an endpoint (`crescent owner --transport
/// transfer-engine` answers notices on its TCP listener there; the bytes went through the
/// engine). Embedded segments take none: crescentd itself holds their directory, and they die
/// with it. An engine owner with no endpoint (mounted without registering, or registered with
/// an empty one) runs no listener to notify.
fn notice_target(r: &ReplicaDesc) -> Option<NoticeTarget> {
    let takes_notices = match r.transport {
        TransportKind::Tcp | TransportKind::TransferEngine => r.owner_id != EMBEDDED_OWNER_ID,
        TransportKind::Embedded => false,
    };
    let endpoint = r
        .endpoint
        .as_deref()
        .filter(|e| takes_notices && !e.is_empty())?;
    Some(NoticeTarget {
        endpoint: Arc::from(endpoint),
        owner_id: Arc::from(r.owner_id.as_str()),
    })
}

fn entry_of(put: &Committed<'_>, r: &ReplicaDesc) -> ReplayEntry {
    ReplayEntry {
        id: put.id.clone(),
        put_id: put.put_id,
        segment_id: r.segment_id.clone(),
        offset: r.offset,
        length: r.length,
        checksum: put.checksum,
        data_type: put.data_type,
        grant: r.grant.clone(),
    }
}

/// The complete replicas of a get, in the order to try them: our own segment first, then the
/// server's preference order.
pub(crate) fn read_order<'a>(
    replicas: &'a [ReplicaDesc],
    local: Option<&LocalSegment>,
) -> Vec<&'a ReplicaDesc> {
    let mut order: Vec<&ReplicaDesc> = replicas
        .iter()
        .filter(|r| r.state == ReplicaState::Complete)
        .collect();
    if let Some(l) = local {
        if let Some(at) = order
            .iter()
            .position(|r| *r.segment_id == *l.remote.segment_id)
        {
            let own = order.remove(at);
            order.insert(0, own);
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::IntGauge;

    fn replica(seg: &str, endpoint: Option<&str>, state: ReplicaState) -> ReplicaDesc {
        ReplicaDesc {
            segment_id: seg.into(),
            owner_id: "o".into(),
            endpoint: endpoint.map(str::to_string),
            transport: TransportKind::Tcp,
            offset: 0,
            length: 1,
            state,
            grant: None,
        }
    }

    fn local(seg: &str) -> LocalSegment {
        LocalSegment {
            remote: RemoteSegment::new("127.0.0.1:9", seg),
            table: Arc::new(OwnershipTable::new(IntGauge::new("g", "g").unwrap())),
            memory: None,
        }
    }

    #[test]
    fn local_replica_is_read_first_and_incomplete_ones_never() {
        let reps = vec![
            replica("a", Some("h:1"), ReplicaState::Complete),
            replica("b", Some("h:2"), ReplicaState::Processing),
            replica("mine", Some("h:3"), ReplicaState::Complete),
        ];
        let l = local("mine");
        let order: Vec<_> = read_order(&reps, Some(&l))
            .iter()
            .map(|r| r.segment_id.as_str())
            .collect();
        assert_eq!(order, vec!["mine", "a"]);
        let order: Vec<_> = read_order(&reps, None)
            .iter()
            .map(|r| r.segment_id.as_str())
            .collect();
        assert_eq!(order, vec!["a", "mine"]);
    }

    #[test]
    fn remote_for_uses_own_endpoint_routes_engine_segments_and_refuses_unreachable_ones() {
        let l = local("mine");
        let r = remote_for(&replica("mine", None, ReplicaState::Complete), Some(&l)).unwrap();
        assert_eq!(&*r.endpoint, "127.0.0.1:9");
        let r = remote_for(&replica("x", Some("h:1"), ReplicaState::Complete), Some(&l)).unwrap();
        assert_eq!((&*r.endpoint, &*r.segment_id), ("h:1", "x"));
        assert!(remote_for(&replica("x", None, ReplicaState::Complete), None).is_err());
        let mut te = replica("x", None, ReplicaState::Complete);
        te.transport = TransportKind::TransferEngine;
        let r = remote_for(&te, None).unwrap();
        assert_eq!(r.via, crescent_transport::TransportKind::Ffi);
        assert_eq!(&*r.segment_id, "x");
    }

    #[test]
    fn owners_of_tcp_and_engine_segments_with_an_endpoint_take_notices() {
        let target = |r: &ReplicaDesc| notice_target(r).map(|t| t.endpoint.to_string());
        let tcp = replica("a", Some("h:1"), ReplicaState::Complete);
        assert_eq!(target(&tcp).as_deref(), Some("h:1"));
        let mut te = replica("b", Some("h:2"), ReplicaState::Complete);
        te.transport = TransportKind::TransferEngine;
        assert_eq!(target(&te).as_deref(), Some("h:2"));
        // An engine owner without a listener to notify: nothing is sent.
        te.endpoint = None;
        assert_eq!(target(&te), None);
        te.endpoint = Some(String::new());
        assert_eq!(target(&te), None);
        // crescentd's embedded segment, by transport or by owner id.
        let mut embedded = replica("c", Some("h:3"), ReplicaState::Complete);
        embedded.transport = TransportKind::Embedded;
        assert_eq!(target(&embedded), None);
        let mut embedded = replica("c", Some("h:3"), ReplicaState::Complete);
        embedded.owner_id = EMBEDDED_OWNER_ID.into();
        assert_eq!(target(&embedded), None);
    }
}

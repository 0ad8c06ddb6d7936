//! Batch operations: one control-plane round trip per phase for the whole batch and one
//! transport submission for all its transfers. One bad item never fails the others; the
//! outer `Result` is for the batch as a whole (server unreachable, malformed answer).
//! Batches longer than the wire limit are split into several requests.

mod get;
mod put;
mod put_end;
mod put_start;
pub(crate) mod submission;

use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{
    Ack, BatchReply, BatchRequest, ExistReply, ItemResult, ObjectId, ObjectRequest, RemoveRequest,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::client::CrescentClient;
use crate::error::ClientError;
use crate::leader::Current;

pub(crate) type ItemResults<T> = Vec<Result<T, ClientError>>;

fn item<T>(r: ItemResult<T>) -> Result<T, ClientError> {
    match r {
        ItemResult::Ok(v) => Ok(v),
        ItemResult::Err { code, message } => Err(ClientError::item(code, message)),
    }
}

/// Scopes every key; `Err` entries are items refused before anything is sent.
fn object_ids<K: AsRef<str>>(
    client: &CrescentClient,
    keys: &[K],
) -> Vec<Result<ObjectId, ClientError>> {
    keys.iter()
        .map(|k| client.scope.object_id(k.as_ref()))
        .collect()
}

impl CrescentClient {
    /// Sends `items` (at most `MAX_BATCH`, or the client's `max_batch_items_per_tenant`, per
    /// request) and returns one answer per item.
    pub(crate) async fn batch_call<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        op: RpcOp,
        items: Vec<Req>,
    ) -> Result<Vec<ItemResult<Rep>>, ClientError> {
        self.batch_call_to(op, items, None).await.map(|(v, _)| v)
    }

    /// [`Self::batch_call`] to the leader (`pinned` `None`, following failovers) or only to
    /// the leader `pinned` (the second phase of a put). Also returns the leader that answered
    /// every request, or `None` if the leader changed between the requests of a long batch.
    pub(crate) async fn batch_call_to<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        op: RpcOp,
        items: Vec<Req>,
        pinned: Option<&Current>,
    ) -> Result<(Vec<ItemResult<Rep>>, Option<Current>), ClientError> {
        let mut out = Vec::with_capacity(items.len());
        let mut rest = items;
        let mut answered: Option<Current> = pinned.cloned();
        let mut one_leader = true;
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(self.submission.max_items()));
            let sent = rest.len();
            let body = BatchRequest { items: rest };
            let reply: BatchReply<Rep> = match pinned {
                Some(at) => self.call_pinned(at, op, &body).await?,
                None => {
                    let (reply, at) = self.call_at(op, &body).await?;
                    match &answered {
                        Some(first) if first.epoch != at.epoch => one_leader = false,
                        Some(_) => {}
                        None => answered = Some(at),
                    }
                    reply
                }
            };
            if reply.items.len() != sent {
                return Err(ClientError::Protocol(format!(
                    "batch of {sent} items answered with {}",
                    reply.items.len()
                )));
            }
            out.extend(reply.items);
            rest = tail;
        }
        Ok((out, answered.filter(|_| one_leader)))
    }

    /// Whether each key holds a complete object.
    pub async fn batch_is_exist<K: AsRef<str>>(
        &self,
        keys: &[K],
    ) -> Result<ItemResults<bool>, ClientError> {
        let operation = self.simple_batch(
            RpcOp::BatchExist,
            keys,
            |id| ObjectRequest { id },
            |r: ExistReply| r.exists,
        );
        self.data
            .metrics
            .metered("batch_exist", operation, |_| 0)
            .await
    }

    /// Removes each key (refused per item while read-leased).
    pub async fn remove_batch<K: AsRef<str>>(
        &self,
        keys: &[K],
    ) -> Result<ItemResults<()>, ClientError> {
        let operation = async {
            let items = self
                .simple_batch(
                    RpcOp::BatchRemove,
                    keys,
                    |id| RemoveRequest { id, force: false },
                    |_: Ack| (),
                )
                .await?;
            if let Some(local) = self.data.local() {
                for (k, r) in keys.iter().zip(&items) {
                    if r.is_ok() {
                        if let Ok(id) = self.scope.object_id(k.as_ref()) {
                            local.table.forget(&id);
                        }
                    }
                }
            }
            Ok(items)
        };
        self.data
            .metrics
            .metered("remove_batch", operation, |_| 0)
            .await
    }

    async fn simple_batch<K, Req, Rep, T>(
        &self,
        op: RpcOp,
        keys: &[K],
        request: impl Fn(ObjectId) -> Req,
        answer: impl Fn(Rep) -> T,
    ) -> Result<ItemResults<T>, ClientError>
    where
        K: AsRef<str>,
        Req: Serialize,
        Rep: DeserializeOwned,
    {
        let mut results: Vec<Option<Result<T, ClientError>>> =
            (0..keys.len()).map(|_| None).collect();
        let mut asked = Vec::with_capacity(keys.len());
        let mut requests = Vec::with_capacity(keys.len());
        for (i, id) in object_ids(self, keys).into_iter().enumerate() {
            match id {
                Ok(id) => {
                    asked.push(i);
                    requests.push(request(id));
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let replies: Vec<ItemResult<Rep>> = self.batch_call(op, requests).await?;
        for (pos, r) in replies.into_iter().enumerate() {
            results[asked[pos]] = Some(item(r).map(&answer));
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every item gets a result"))
            .collect())
    }
}

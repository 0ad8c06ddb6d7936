//! The object API of a [`MeshClient`]: each request sent to its authority cluster's leader; a
//! batch split by cluster, the parts sent in parallel and the answers put back in order. A
//! WRONG_CLUSTER answer (or batch item) waits for the generation it names and is retried
//! once; a second redirect is returned as it is.

use std::collections::BTreeMap;
use std::future::Future;

use crescent_wire::store::ObjectId;
use crescent_wire::{ApiError, ErrorCode, Redirect};
use tracing::Instrument;

use super::{previous_authority, route, MeshClient};
use crate::batch::ItemResults;
use crate::client::CrescentClient;
use crate::error::ClientError;
use crate::options::PutOptions;
use crate::store::PutOutcome;

/// The generation a WRONG_CLUSTER error names, if `e` is one.
fn redirected(e: &ClientError) -> Option<u64> {
    match e {
        ClientError::Api(api) if api.code == ErrorCode::WrongCluster => Some(
            api.redirect
                .as_ref()
                .map(|r| r.generation)
                .or_else(|| Redirect::parse(&api.message).map(|r| r.generation))
                .unwrap_or(0),
        ),
        _ => None,
    }
}

/// One item's copy of an error that failed a whole part of a batch (its cluster could not be
/// reached, say): the same stable code where it is a wire code, the same words.
fn item_copy(e: &ClientError) -> ClientError {
    let code = ErrorCode::parse(e.code_str()).unwrap_or(ErrorCode::Unavailable);
    ClientError::Api(ApiError::new(code, e.to_string()))
}

impl MeshClient {
    /// Runs `op` with the client of `key`'s authority; once more after a redirect.
    async fn routed<T, F, Fut>(&self, key: &str, op: F) -> Result<T, ClientError>
    where
        F: Fn(CrescentClient) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let id = self.scope.object_id(key)?;
        let mut attempt = 0;
        loop {
            let routing = self.routing();
            let cluster = route(&routing, &id)?;
            let client = self.client_for(&routing, cluster)?;
            let span = tracing::debug_span!("client.mesh_route", cluster = %cluster,
                generation = routing.membership.generation);
            let result = op(client).instrument(span).await;
            match result.as_ref().err().and_then(redirected) {
                Some(generation) if attempt == 0 => {
                    tracing::debug!(key, generation, "redirected; refreshing the membership");
                    self.refresh(generation).await;
                    attempt += 1;
                }
                _ => return result,
            }
        }
    }

    pub async fn put(&self, key: &str, value: &[u8]) -> Result<PutOutcome, ClientError> {
        self.put_with(key, value, &PutOptions::default()).await
    }

    pub async fn put_with(
        &self,
        key: &str,
        value: &[u8],
        opts: &PutOptions,
    ) -> Result<PutOutcome, ClientError> {
        self.routed(key, |c| async move { c.put_with(key, value, opts).await })
            .await
    }

    /// `op` at the cluster that held `key` before the newest membership change, after its
    /// authority missed it; `None` when there is none or it does not answer with the object.
    async fn at_previous<T, F, Fut>(&self, key: &str, op: F) -> Option<T>
    where
        F: FnOnce(CrescentClient) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let id = self.scope.object_id(key).ok()?;
        let routing = self.routing();
        let previous = previous_authority(&routing, &id)?;
        let client = self.client_for(&routing, &previous).ok()?;
        let span = tracing::debug_span!("client.mesh_previous", cluster = %previous);
        op(client).instrument(span).await.ok()
    }

    /// The value of `key`: from its authority, or (a miss there) from the cluster that held
    /// it before the newest membership change.
    pub async fn get(&self, key: &str) -> Result<Vec<u8>, ClientError> {
        match self.routed(key, |c| async move { c.get(key).await }).await {
            Err(e) if e.code() == Some(ErrorCode::NotFound) => self
                .at_previous(key, |c| async move { c.get(key).await })
                .await
                .ok_or(e),
            other => other,
        }
    }

    /// Whether `key` exists at its authority or at the cluster that held it before.
    pub async fn is_exist(&self, key: &str) -> Result<bool, ClientError> {
        match self
            .routed(key, |c| async move { c.is_exist(key).await })
            .await
        {
            Ok(false) => Ok(self
                .at_previous(key, |c| async move { c.is_exist(key).await })
                .await
                .unwrap_or(false)),
            other => other,
        }
    }

    pub async fn get_size(&self, key: &str) -> Result<u64, ClientError> {
        self.routed(key, |c| async move { c.get_size(key).await })
            .await
    }

    /// Removes `key` at its authority or, a miss there, at the cluster that held it before
    /// the newest membership change.
    pub async fn remove(&self, key: &str) -> Result<(), ClientError> {
        self.remove_inner(key, false).await
    }

    pub async fn remove_forced(&self, key: &str) -> Result<(), ClientError> {
        self.remove_inner(key, true).await
    }

    async fn remove_inner(&self, key: &str, force: bool) -> Result<(), ClientError> {
        let op = |c: CrescentClient| async move {
            match force {
                true => c.remove_forced(key).await,
                false => c.remove(key).await,
            }
        };
        match self.routed(key, op).await {
            Err(e) if e.code() == Some(ErrorCode::NotFound) => {
                self.at_previous(key, op).await.ok_or(e)
            }
            other => other,
        }
    }

    /// Runs `op` once per authority cluster with the positions of its keys, in parallel;
    /// items redirected are routed again (after refreshing) and retried once.
    async fn routed_batch<K, T, F, Fut>(
        &self,
        keys: &[K],
        op: F,
    ) -> Result<ItemResults<T>, ClientError>
    where
        K: AsRef<str>,
        F: Fn(CrescentClient, Vec<usize>) -> Fut,
        Fut: Future<Output = Result<ItemResults<T>, ClientError>>,
    {
        let mut out: Vec<Option<Result<T, ClientError>>> = (0..keys.len()).map(|_| None).collect();
        let mut ids = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            match self.scope.object_id(k.as_ref()) {
                Ok(id) => {
                    ids.insert(i, id);
                }
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        let mut pending: Vec<usize> = ids.keys().copied().collect();
        for attempt in 0..2 {
            let (again, newest) = self
                .send_parts(&ids, &pending, &op, attempt == 0, &mut out)
                .await;
            if again.is_empty() {
                break;
            }
            tracing::debug!(
                items = again.len(),
                generation = newest,
                "batch items redirected"
            );
            self.refresh(newest).await;
            pending = again;
        }
        Ok(out
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Err(ClientError::Protocol("a batch item got no answer".into())))
            })
            .collect())
    }

    /// One round of [`Self::routed_batch`]: the `pending` positions grouped by authority, one
    /// `op` per group in parallel, answers into `out`. With `retry`, redirected items are
    /// left out and returned, with the newest generation their redirects name.
    async fn send_parts<T, F, Fut>(
        &self,
        ids: &BTreeMap<usize, ObjectId>,
        pending: &[usize],
        op: &F,
        retry: bool,
        out: &mut [Option<Result<T, ClientError>>],
    ) -> (Vec<usize>, u64)
    where
        F: Fn(CrescentClient, Vec<usize>) -> Fut,
        Fut: Future<Output = Result<ItemResults<T>, ClientError>>,
    {
        let routing = self.routing();
        let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &i in pending {
            match route(&routing, &ids[&i]) {
                Ok(c) => groups.entry(c).or_default().push(i),
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        let parts = groups.into_iter().map(|(cluster, positions)| {
            let client = self.client_for(&routing, cluster);
            async move {
                let result = match client {
                    Ok(c) => op(c, positions.clone()).await,
                    Err(e) => Err(e),
                };
                (positions, result)
            }
        });
        let (mut again, mut newest) = (Vec::new(), 0);
        for (positions, result) in futures::future::join_all(parts).await {
            let items = match result {
                Ok(items) => items,
                Err(e) => positions.iter().map(|_| Err(item_copy(&e))).collect(),
            };
            for (i, item) in positions.into_iter().zip(items) {
                match item.as_ref().err().and_then(redirected) {
                    Some(g) if retry => {
                        newest = newest.max(g);
                        again.push(i);
                    }
                    _ => out[i] = Some(item),
                }
            }
        }
        (again, newest)
    }

    pub async fn put_batch<K: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        keys: &[K],
        values: &[V],
    ) -> Result<ItemResults<PutOutcome>, ClientError> {
        self.put_batch_with(keys, values, &PutOptions::default())
            .await
    }

    pub async fn put_batch_with<K: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        keys: &[K],
        values: &[V],
        opts: &PutOptions,
    ) -> Result<ItemResults<PutOutcome>, ClientError> {
        if keys.len() != values.len() {
            return Err(ClientError::InvalidArgument(format!(
                "{} keys and {} values",
                keys.len(),
                values.len()
            )));
        }
        self.routed_batch(keys, |c, at| {
            let ks: Vec<&str> = at.iter().map(|&i| keys[i].as_ref()).collect();
            let vs: Vec<&[u8]> = at.iter().map(|&i| values[i].as_ref()).collect();
            async move { c.put_batch_with(&ks, &vs, opts).await }
        })
        .instrument(tracing::debug_span!(
            "client.mesh_put_batch",
            items = keys.len()
        ))
        .await
    }

    pub async fn get_batch<K: AsRef<str>>(
        &self,
        keys: &[K],
    ) -> Result<ItemResults<Vec<u8>>, ClientError> {
        let mut items = self
            .routed_batch(keys, |c, at| {
                let ks: Vec<&str> = at.iter().map(|&i| keys[i].as_ref()).collect();
                async move { c.get_batch(&ks).await }
            })
            .instrument(tracing::debug_span!(
                "client.mesh_get_batch",
                items = keys.len()
            ))
            .await?;
        let missed: Vec<usize> = (0..items.len())
            .filter(|&i| matches!(&items[i], Err(e) if e.code() == Some(ErrorCode::NotFound)))
            .collect();
        let found = futures::future::join_all(missed.iter().map(|&i| {
            let key = keys[i].as_ref();
            self.at_previous(key, move |c| async move { c.get(key).await })
        }))
        .await;
        for (i, value) in missed.into_iter().zip(found) {
            if let Some(v) = value {
                items[i] = Ok(v);
            }
        }
        Ok(items)
    }

    pub async fn batch_is_exist<K: AsRef<str>>(
        &self,
        keys: &[K],
    ) -> Result<ItemResults<bool>, ClientError> {
        let mut items = self
            .routed_batch(keys, |c, at| {
                let ks: Vec<&str> = at.iter().map(|&i| keys[i].as_ref()).collect();
                async move { c.batch_is_exist(&ks).await }
            })
            .await?;
        let missed: Vec<usize> = (0..items.len())
            .filter(|&i| matches!(items[i], Ok(false)))
            .collect();
        let found = futures::future::join_all(missed.iter().map(|&i| {
            let key = keys[i].as_ref();
            self.at_previous(key, move |c| async move { c.is_exist(key).await })
        }))
        .await;
        for (i, exists) in missed.into_iter().zip(found) {
            items[i] = Ok(exists.unwrap_or(false));
        }
        Ok(items)
    }

    pub async fn remove_batch<K: AsRef<str>>(
        &self,
        keys: &[K],
    ) -> Result<ItemResults<()>, ClientError> {
        let mut items = self
            .routed_batch(keys, |c, at| {
                let ks: Vec<&str> = at.iter().map(|&i| keys[i].as_ref()).collect();
                async move { c.remove_batch(&ks).await }
            })
            .await?;
        let missed: Vec<usize> = (0..items.len())
            .filter(|&i| matches!(&items[i], Err(e) if e.code() == Some(ErrorCode::NotFound)))
            .collect();
        let removed = futures::future::join_all(missed.iter().map(|&i| {
            let key = keys[i].as_ref();
            self.at_previous(key, move |c| async move { c.remove(key).await })
        }))
        .await;
        for (i, done) in missed.into_iter().zip(removed) {
            if done.is_some() {
                items[i] = Ok(());
            }
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_is_read_from_the_body_or_an_item_message() {
        let r = Redirect {
            generation: 9,
            cluster: "b".into(),
        };
        let whole = ClientError::Api(ApiError::wrong_cluster(r.clone()));
        assert_eq!(redirected(&whole), Some(9));
        let item = ClientError::item(ErrorCode::WrongCluster, r.message());
        assert_eq!(redirected(&item), Some(9));
        let other = ClientError::item(ErrorCode::NotFound, r.message());
        assert_eq!(redirected(&other), None);
    }

    #[test]
    fn a_part_failure_is_copied_to_each_item_with_its_code() {
        let e = ClientError::NoLeader {
            waited: std::time::Duration::from_secs(1),
            detail: "gone".into(),
        };
        let copy = item_copy(&e);
        assert_eq!(copy.code_str(), "UNAVAILABLE");
        assert!(copy.to_string().contains("gone"), "{copy}");
        let busy = ClientError::item(ErrorCode::Busy, "x".into());
        assert_eq!(item_copy(&busy).code(), Some(ErrorCode::Busy));
    }
}

//! What `crescent bench` times its phases against: one cluster ([`CrescentClient`]) or a mesh
//! of clusters ([`MeshClient`], each request routed to its authority; docs/scale-out.md,
//! "Clients"). Static dispatch: the single-cluster bench calls the client as it always did.

use crescent_client::{ClientError, CrescentClient, MeshClient, PutOutcome};

/// The answers of a batch, one per key, in request order.
pub(crate) type Items<T> = Vec<Result<T, ClientError>>;

/// The object operations the five phases issue.
pub(crate) trait BenchTarget {
    async fn put(&self, key: &str, value: &[u8]) -> Result<PutOutcome, ClientError>;
    async fn get(&self, key: &str) -> Result<Vec<u8>, ClientError>;
    async fn is_exist(&self, key: &str) -> Result<bool, ClientError>;
    async fn put_batch(
        &self,
        keys: &[String],
        values: &[&[u8]],
    ) -> Result<Items<PutOutcome>, ClientError>;
    async fn get_batch(&self, keys: &[String]) -> Result<Items<Vec<u8>>, ClientError>;
}

impl BenchTarget for CrescentClient {
    async fn put(&self, key: &str, value: &[u8]) -> Result<PutOutcome, ClientError> {
        CrescentClient::put(self, key, value).await
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, ClientError> {
        CrescentClient::get(self, key).await
    }

    async fn is_exist(&self, key: &str) -> Result<bool, ClientError> {
        CrescentClient::is_exist(self, key).await
    }

    async fn put_batch(
        &self,
        keys: &[String],
        values: &[&[u8]],
    ) -> Result<Items<PutOutcome>, ClientError> {
        CrescentClient::put_batch(self, keys, values).await
    }

    async fn get_batch(&self, keys: &[String]) -> Result<Items<Vec<u8>>, ClientError> {
        CrescentClient::get_batch(self, keys).await
    }
}

impl BenchTarget for MeshClient {
    async fn put(&self, key: &str, value: &[u8]) -> Result<PutOutcome, ClientError> {
        MeshClient::put(self, key, value).await
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, ClientError> {
        MeshClient::get(self, key).await
    }

    async fn is_exist(&self, key: &str) -> Result<bool, ClientError> {
        MeshClient::is_exist(self, key).await
    }

    async fn put_batch(
        &self,
        keys: &[String],
        values: &[&[u8]],
    ) -> Result<Items<PutOutcome>, ClientError> {
        MeshClient::put_batch(self, keys, values).await
    }

    async fn get_batch(&self, keys: &[String]) -> Result<Items<Vec<u8>>, ClientError> {
        MeshClient::get_batch(self, keys).await
    }
}

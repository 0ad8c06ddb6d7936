//! Where a get delivers the value it reads: `get` returns a new `Vec`, `get_into` writes into
//! the caller's registered buffer. One get loop (`CrescentClient::get_with`: the get, the
//! staged read and its inline retry, the lease release) serves both through this trait.

use std::future::Future;

use crescent_wire::store::GetReply;

use crate::buffer::RegisteredBuffer;
use crate::client::CrescentClient;
use crate::cold_restore_target::{RestoreTarget, Restored};
use crate::error::ClientError;

/// Where a get puts the value it delivers (`get`: a `Vec`; `get_into`: a registered buffer).
pub(super) trait Destination: Sync {
    /// What the get returns.
    type Output: Send;

    /// Where a local restore of a cold-only object puts the value.
    fn restore_target(&self) -> RestoreTarget;

    /// Delivers a cold-only value restored and verified already.
    fn restored(
        &self,
        client: &CrescentClient,
        value: Restored,
    ) -> impl Future<Output = Result<Self::Output, ClientError>> + Send;

    /// Reads the value from the replicas `reply` names, checked as it is read.
    fn read(
        &self,
        client: &CrescentClient,
        key: &str,
        reply: &GetReply,
    ) -> impl Future<Output = Result<Self::Output, ClientError>> + Send;
}

/// `get`: the value as a new `Vec`.
pub(super) struct IntoValue;

impl Destination for IntoValue {
    type Output = Vec<u8>;

    fn restore_target(&self) -> RestoreTarget {
        RestoreTarget::NewValue
    }

    async fn restored(&self, _: &CrescentClient, value: Restored) -> Result<Vec<u8>, ClientError> {
        match value {
            Restored::Value(value) => Ok(value),
            // Never asked for (`restore_target` names no region).
            Restored::InPlace(_) => Err(ClientError::Protocol(
                "a value restored in place has no bytes to return".into(),
            )),
        }
    }

    async fn read(
        &self,
        client: &CrescentClient,
        key: &str,
        reply: &GetReply,
    ) -> Result<Vec<u8>, ClientError> {
        client.read_object(key, reply).await
    }
}

/// `get_into`: the value written into `dst` at `offset`; returns its size.
pub(super) struct IntoBuffer<'a> {
    pub dst: &'a RegisteredBuffer,
    pub offset: usize,
}

impl Destination for IntoBuffer<'_> {
    type Output = usize;

    /// Straight into the caller's buffer: no value buffer, no copy.
    fn restore_target(&self) -> RestoreTarget {
        RestoreTarget::Region {
            memory: self.dst.memory.clone(),
            offset: self.offset as u64,
        }
    }

    async fn restored(
        &self,
        client: &CrescentClient,
        value: Restored,
    ) -> Result<usize, ClientError> {
        match value {
            Restored::InPlace(length) => Ok(length),
            Restored::Value(value) => client.restored_into(&value, self.dst, self.offset).await,
        }
    }

    async fn read(
        &self,
        client: &CrescentClient,
        key: &str,
        reply: &GetReply,
    ) -> Result<usize, ClientError> {
        // Straight into the caller's buffer, checked there before returning.
        client
            .read_object_into(key, reply, self.dst, self.offset)
            .await
    }
}

//! Batch forms: each item succeeds or fails on its own; a batch over [`MAX_BATCH`] items is
//! refused whole (INVALID_ARGUMENT) before any item runs.

use crescent_wire::store::{
    GetReply, ItemResult, ObjectId, PutEndRequest, PutStartReply, PutStartRequest, ReleaseRequest,
    MAX_BATCH,
};

use crate::directory::ObjectDirectory;
use crate::error::StoreError;

fn run<T, R>(
    items: &[T],
    mut f: impl FnMut(&T) -> Result<R, StoreError>,
) -> Result<Vec<ItemResult<R>>, StoreError> {
    if items.len() > MAX_BATCH {
        return Err(StoreError::invalid(
            "items",
            format!("{} items; a batch holds at most {MAX_BATCH}", items.len()),
        ));
    }
    Ok(items
        .iter()
        .map(|item| match f(item) {
            Ok(v) => ItemResult::Ok(v),
            Err(e) => e.into(),
        })
        .collect())
}

impl ObjectDirectory {
    pub fn batch_put_start(
        &self,
        items: &[PutStartRequest],
        now_ms: i64,
    ) -> Result<Vec<ItemResult<PutStartReply>>, StoreError> {
        run(items, |r| self.put_start(r, now_ms))
    }

    pub fn batch_put_end(
        &self,
        items: &[PutEndRequest],
        now_ms: i64,
    ) -> Result<Vec<ItemResult<()>>, StoreError> {
        run(items, |r| self.put_end(r, now_ms))
    }

    pub fn batch_put_revoke(
        &self,
        items: &[PutEndRequest],
        now_ms: i64,
    ) -> Result<Vec<ItemResult<()>>, StoreError> {
        run(items, |r| self.put_revoke(r, now_ms))
    }

    pub fn batch_get(
        &self,
        items: &[ObjectId],
        now_ms: i64,
    ) -> Result<Vec<ItemResult<GetReply>>, StoreError> {
        run(items, |id| self.get(id, now_ms))
    }

    pub fn batch_release(
        &self,
        items: &[ReleaseRequest],
        now_ms: i64,
    ) -> Result<Vec<ItemResult<bool>>, StoreError> {
        run(items, |r| self.release(r, now_ms))
    }

    pub fn batch_exist(
        &self,
        items: &[ObjectId],
        now_ms: i64,
    ) -> Result<Vec<ItemResult<bool>>, StoreError> {
        run(items, |id| self.exist(id, now_ms))
    }

    pub fn batch_get_size(&self, items: &[ObjectId]) -> Result<Vec<ItemResult<u64>>, StoreError> {
        run(items, |id| self.get_size(id))
    }

    pub fn batch_remove(
        &self,
        items: &[ObjectId],
        force: bool,
        now_ms: i64,
    ) -> Result<Vec<ItemResult<()>>, StoreError> {
        run(items, |id| self.remove(id, force, now_ms))
    }
}

//! Batches in a mesh: the items another cluster is the authority of are answered
//! WRONG_CLUSTER each, the rest run as one batch, and the answers are put back in request
//! order.

use crescent_wire::store::{ItemResult, ObjectId};
use crescent_wire::ApiError;

use super::MeshRole;

/// The items of a batch refused before it ran, by position in the request.
#[derive(Debug, Default)]
pub struct Split {
    refused: Vec<(usize, ApiError)>,
}

impl Split {
    /// Keeps the items this cluster is the authority of in `mesh`. Outside a mesh (`None`):
    /// every item, and nothing else is done.
    pub fn items<T>(
        mesh: Option<&MeshRole>,
        items: Vec<T>,
        id: impl Fn(&T) -> &ObjectId,
    ) -> (Vec<T>, Split) {
        Self::keep(mesh, |_| false, items, id)
    }

    /// [`Split::items`] for reads and removes: also keeps the items this cluster still holds
    /// (`holds`, as `NodeState::read_authority`).
    pub fn reads<T>(
        mesh: Option<&MeshRole>,
        holds: impl Fn(&ObjectId) -> bool,
        items: Vec<T>,
        id: impl Fn(&T) -> &ObjectId,
    ) -> (Vec<T>, Split) {
        Self::keep(mesh, holds, items, id)
    }

    fn keep<T>(
        mesh: Option<&MeshRole>,
        held: impl Fn(&ObjectId) -> bool,
        items: Vec<T>,
        id: impl Fn(&T) -> &ObjectId,
    ) -> (Vec<T>, Split) {
        let Some(mesh) = mesh else {
            return (items, Split::default());
        };
        let mut kept = Vec::with_capacity(items.len());
        let mut refused = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let checked = mesh.check(id(&item));
            let checked = match checked {
                Err(_) if held(id(&item)) => Ok(()),
                other => other,
            };
            match checked {
                Ok(()) => kept.push(item),
                Err(e) => refused.push((i, e)),
            }
        }
        (kept, Split { refused })
    }

    /// The answers of the kept items with the refused ones put back in their places.
    pub fn merge<R>(self, done: Vec<ItemResult<R>>) -> Vec<ItemResult<R>> {
        if self.refused.is_empty() {
            return done;
        }
        let mut out = Vec::with_capacity(done.len() + self.refused.len());
        let mut done = done.into_iter();
        for (at, e) in self.refused {
            while out.len() < at {
                match done.next() {
                    Some(d) => out.push(d),
                    None => break,
                }
            }
            out.push(ItemResult::Err {
                code: e.code,
                message: e.message,
            });
        }
        out.extend(done);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_wire::ErrorCode;

    #[test]
    fn refused_items_go_back_to_their_places() {
        let refused = |at: usize| (at, ApiError::new(ErrorCode::WrongCluster, format!("r{at}")));
        let split = Split {
            refused: vec![refused(0), refused(2), refused(5)],
        };
        let done: Vec<ItemResult<u32>> =
            vec![ItemResult::Ok(1), ItemResult::Ok(3), ItemResult::Ok(4)];
        let merged = split.merge(done);
        let shown: Vec<String> = merged
            .iter()
            .map(|r| match r {
                ItemResult::Ok(v) => v.to_string(),
                ItemResult::Err { message, .. } => message.clone(),
            })
            .collect();
        assert_eq!(shown, ["r0", "1", "r2", "3", "4", "r5"]);
        let none = Split::default().merge(vec![ItemResult::<u32>::Ok(7)]);
        assert_eq!(none.len(), 1);
    }
}

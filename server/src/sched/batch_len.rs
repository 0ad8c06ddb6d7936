//! The item count of an undecoded RPC batch body, without decoding it: the thread turns
//! (`thread_turns`) charge every store request, and a full decode per request would cost the
//! fast path more than the request itself does (docs/tenants.md, "Fair scheduling of
//! requests").
//!
//! A batch body is a msgpack map by field name whose list (`items`, or `keys` in the compact
//! forms) follows at most a few scalar fields. The scan reads the map's keys in order, skips
//! scalar values, and stops at the first list field; anything else (another shape, a nested
//! value before the list, a truncated body) counts as one item.

/// Items in `body`'s `items` or `keys` list, or 1.
pub fn batch_items(body: &[u8]) -> u64 {
    scan(body).unwrap_or(1).max(1)
}

fn scan(body: &[u8]) -> Option<u64> {
    let mut at = Reader { bytes: body };
    let fields = at.map_len()?;
    for _ in 0..fields {
        let name = at.str()?;
        if name == b"items" || name == b"keys" {
            return at.array_len();
        }
        at.skip_scalar()?;
    }
    None
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.bytes.split_at_checked(n)?;
        self.bytes = rest;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    /// A big-endian length of `n` bytes.
    fn len(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .fold(0, |acc, b| acc << 8 | u64::from(*b)),
        )
    }

    fn map_len(&mut self) -> Option<u64> {
        match self.byte()? {
            m @ 0x80..=0x8f => Some(u64::from(m & 0x0f)),
            0xde => self.len(2),
            0xdf => self.len(4),
            _ => None,
        }
    }

    fn array_len(&mut self) -> Option<u64> {
        match self.byte()? {
            m @ 0x90..=0x9f => Some(u64::from(m & 0x0f)),
            0xdc => self.len(2),
            0xdd => self.len(4),
            _ => None,
        }
    }

    fn str(&mut self) -> Option<&'a [u8]> {
        let len = match self.byte()? {
            m @ 0xa0..=0xbf => u64::from(m & 0x1f),
            0xd9 => self.len(1)?,
            0xda => self.len(2)?,
            0xdb => self.len(4)?,
            _ => return None,
        };
        self.take(usize::try_from(len).ok()?)
    }

    /// Skips an integer, float, nil, bool or string; `None` for anything else.
    fn skip_scalar(&mut self) -> Option<()> {
        let width = match self.bytes.first()? {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 0,
            0xcc | 0xd0 => 1,
            0xcd | 0xd1 => 2,
            0xce | 0xd2 | 0xca => 4,
            0xcf | 0xd3 | 0xcb => 8,
            _ => return self.str().map(|_| ()),
        };
        self.take(1 + width).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crescent_wire::rpc_compact::CompactKeysRequest;
    use crescent_wire::store::{BatchRequest, ObjectId};

    fn named<T: serde::Serialize>(v: &T) -> Vec<u8> {
        rmp_serde::to_vec_named(v).unwrap()
    }

    #[test]
    fn counts_the_items_of_batch_and_compact_bodies() {
        let batch = BatchRequest {
            items: (0..300).map(|i| ObjectId::new(format!("k{i}"))).collect(),
        };
        assert_eq!(batch_items(&named(&batch)), 300);
        let compact = CompactKeysRequest {
            v: 1,
            tenant: Some("t".repeat(40)),
            domain: None,
            keys: (0..17).map(|i| format!("k{i}")).collect(),
        };
        assert_eq!(batch_items(&named(&compact)), 17);
    }

    #[test]
    fn anything_else_counts_one() {
        assert_eq!(batch_items(&named(&ObjectId::new("k"))), 1);
        let empty: BatchRequest<ObjectId> = BatchRequest { items: vec![] };
        assert_eq!(batch_items(&named(&empty)), 1);
        assert_eq!(batch_items(b""), 1);
        assert_eq!(batch_items(b"\xc1"), 1);
        let whole = named(&BatchRequest {
            items: vec![ObjectId::new("k")],
        });
        for cut in 0..whole.len() {
            assert!(batch_items(&whole[..cut]) <= 1, "truncated at {cut}");
        }
    }
}

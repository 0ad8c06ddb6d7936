//! Where replay reads records from: the journal, or an in-memory buffer for tests and tools.

use std::sync::{Arc, Mutex};

use crescent_journal::{Journal, JournalError, Record, RecordIter, RecordVisitor, Watermark};

/// The part of the journal that restore and the snapshotter use.
pub trait JournalSource: Send + Sync + 'static {
    /// The first seq still held.
    fn first_seq(&self) -> u64;
    /// The durable watermark (records up to it are readable).
    fn durable(&self) -> Watermark;
    /// Durable records from `seq` on.
    fn read_from(&self, seq: u64) -> crescent_journal::Result<RecordIter>;
    /// Durable records `from..=upto` handed to `visit` as borrowed views (the replay path;
    /// a journal decodes them in place).
    fn visit_range(
        &self,
        from: u64,
        upto: u64,
        visit: &mut RecordVisitor<'_>,
    ) -> crescent_journal::Result<()> {
        for rec in self.read_from(from)? {
            let rec = rec?;
            if rec.seq > upto {
                break;
            }
            visit(rec.as_ref())?;
        }
        Ok(())
    }
    /// Drops records before `keep_from`.
    fn truncate_prefix(&self, keep_from: u64) -> crescent_journal::Result<()>;
}

impl JournalSource for Journal {
    fn first_seq(&self) -> u64 {
        Journal::first_seq(self)
    }
    fn durable(&self) -> Watermark {
        Journal::durable(self)
    }
    fn read_from(&self, seq: u64) -> crescent_journal::Result<RecordIter> {
        Journal::read_from(self, seq)
    }
    fn visit_range(
        &self,
        from: u64,
        upto: u64,
        visit: &mut RecordVisitor<'_>,
    ) -> crescent_journal::Result<()> {
        Journal::visit_range(self, from, upto, visit)
    }
    fn truncate_prefix(&self, keep_from: u64) -> crescent_journal::Result<()> {
        Journal::truncate_prefix(self, keep_from)
    }
}

impl<J: JournalSource> JournalSource for Arc<J> {
    fn first_seq(&self) -> u64 {
        (**self).first_seq()
    }
    fn durable(&self) -> Watermark {
        (**self).durable()
    }
    fn read_from(&self, seq: u64) -> crescent_journal::Result<RecordIter> {
        (**self).read_from(seq)
    }
    fn visit_range(
        &self,
        from: u64,
        upto: u64,
        visit: &mut RecordVisitor<'_>,
    ) -> crescent_journal::Result<()> {
        (**self).visit_range(from, upto, visit)
    }
    fn truncate_prefix(&self, keep_from: u64) -> crescent_journal::Result<()> {
        (**self).truncate_prefix(keep_from)
    }
}

/// Records held in memory, already durable: for tests, and for tools that have records from
/// elsewhere. Cheap to clone; clones share the records.
#[derive(Debug, Clone)]
pub struct RecordBuffer {
    records: Arc<Mutex<Vec<Record>>>,
    durable: Watermark,
}

impl Default for RecordBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordBuffer {
    pub fn new() -> Self {
        Self {
            records: Arc::new(Mutex::new(Vec::new())),
            durable: Watermark::new(0),
        }
    }

    /// Appends records, which must continue the seq order (checked), and makes them durable.
    pub fn push(&self, recs: impl IntoIterator<Item = Record>) -> Result<(), JournalError> {
        let mut guard = self.records.lock().expect("record buffer poisoned");
        let mut last = self.durable.get();
        for rec in recs {
            if rec.seq != last + 1 {
                return Err(JournalError::OutOfRange {
                    seq: rec.seq,
                    first: last + 1,
                    last: last + 1,
                });
            }
            last = rec.seq;
            guard.push(rec);
        }
        drop(guard);
        self.durable.advance(last);
        Ok(())
    }

    /// Closes the durable watermark (like a journal shutdown).
    pub fn close(&self) {
        self.durable.close();
    }

    pub fn len(&self) -> usize {
        self.records.lock().expect("record buffer poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl JournalSource for RecordBuffer {
    fn first_seq(&self) -> u64 {
        let g = self.records.lock().expect("record buffer poisoned");
        g.first().map_or(self.durable.get() + 1, |r| r.seq)
    }

    fn durable(&self) -> Watermark {
        self.durable.clone()
    }

    fn read_from(&self, seq: u64) -> crescent_journal::Result<RecordIter> {
        let g = self.records.lock().expect("record buffer poisoned");
        let first = g.first().map_or(self.durable.get() + 1, |r| r.seq);
        if seq < first {
            return Err(JournalError::OutOfRange {
                seq,
                first,
                last: self.durable.get(),
            });
        }
        let out: Vec<_> = g.iter().filter(|r| r.seq >= seq).cloned().map(Ok).collect();
        Ok(Box::new(out.into_iter()))
    }

    fn truncate_prefix(&self, keep_from: u64) -> crescent_journal::Result<()> {
        let mut g = self.records.lock().expect("record buffer poisoned");
        g.retain(|r| r.seq >= keep_from);
        Ok(())
    }
}

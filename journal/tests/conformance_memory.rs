//! The conformance suite against the memory backend.

crescent_journal::conformance_tests!(crescent_journal::memory::MemoryFactory::new());

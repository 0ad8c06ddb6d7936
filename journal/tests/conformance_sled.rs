//! The conformance suite against the sled backend (in a fresh temp dir per case).

crescent_journal::conformance_tests!(
    crescent_journal::sled_backend::SledFactory::in_tempdir().expect("tempdir")
);

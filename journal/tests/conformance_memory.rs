//! The conformance suite against the memory backend.

use crescent_journal::conformance;
use crescent_journal::memory::MemoryFactory;

fn factory() -> MemoryFactory {
    MemoryFactory::new()
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            conformance::$name(&factory());
        }
    )*};
}

cases!(
    ordering,
    chain_verifies,
    durability_across_reopen,
    torn_tail_tolerated,
    torn_tail_absolute,
    corrupt_middle_record,
    fencing,
    prefix_truncation,
    empty_journal,
    large_record,
    concurrent_appenders,
    fatal_write_failure,
);

#[test]
fn run_all_covers_every_case() {
    assert_eq!(conformance::CASES.len(), 12);
    conformance::run_all(&|| Box::new(factory()));
}

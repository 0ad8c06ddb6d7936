//! Allocator properties: live allocations never overlap, stay in range and aligned, and all
//! space comes back after every free (coalesced into one range).

use crescent_store::allocator::{alignment_for, slot_len, FreeRangeAllocator};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Alloc(u64),
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop_oneof![1u64..2000, 60_000u64..200_000].prop_map(Op::Alloc),
        2 => any::<usize>().prop_map(Op::Free),
    ]
}

proptest! {
    #[test]
    fn no_overlap_and_all_space_returns(ops in prop::collection::vec(op(), 1..300)) {
        let cap = 4 << 20;
        let mut a = FreeRangeAllocator::new(cap);
        let mut live: Vec<(u64, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc(size) => {
                    if let Some(off) = a.allocate(size) {
                        prop_assert_eq!(off % alignment_for(size), 0);
                        let end = off + slot_len(size);
                        prop_assert!(end <= cap);
                        for &(o, s) in &live {
                            let e = o + slot_len(s);
                            prop_assert!(end <= o || off >= e, "overlap [{off},{end}) with [{o},{e})");
                        }
                        live.push((off, size));
                    }
                }
                Op::Free(i) if !live.is_empty() => {
                    let (o, s) = live.swap_remove(i % live.len());
                    a.free(o, s).unwrap();
                }
                Op::Free(_) => {}
            }
            let used: u64 = live.iter().map(|&(_, s)| slot_len(s)).sum();
            prop_assert_eq!(a.used_bytes(), used);
        }
        for (o, s) in live.drain(..) {
            a.free(o, s).unwrap();
        }
        prop_assert_eq!(a.free_bytes(), cap);
        prop_assert_eq!(a.free_ranges(), 1);
    }
}

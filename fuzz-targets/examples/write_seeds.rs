//! Writes every target's seeds to `DIR/<target>/seed-N` (scripts/fuzz.sh's starting corpus).

fn main() {
    let dir = std::env::args().nth(1).expect("usage: write_seeds DIR");
    for (name, _) in crescent_fuzz_targets::TARGETS {
        let target_dir = std::path::Path::new(&dir).join(name);
        std::fs::create_dir_all(&target_dir).expect("corpus dir");
        for (i, seed) in crescent_fuzz_targets::seeds(name).iter().enumerate() {
            std::fs::write(target_dir.join(format!("seed-{i}")), seed).expect("seed");
        }
    }
}

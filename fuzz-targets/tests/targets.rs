//! Every fuzz target over its regression inputs (`regressions/<target>/`: each a crash a
//! fuzzer found, fixed in the decoder), its seeds, and a few thousand seeded random and
//! mutated inputs. Deterministic: the generator's seed is fixed (a failure names the input).

use std::path::PathBuf;

use crescent_fuzz_targets::{seeds, TARGETS};

/// xorshift64*: enough randomness to shake decoders, no dependency, same inputs every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// A random input, or a seed with a few bytes changed, cut, duplicated or extended.
fn input(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if seeds.is_empty() || rng.below(4) == 0 {
        // Mostly short; some up to a megabyte (a length claim larger than what follows).
        let len = match rng.below(200) {
            0 => rng.below(1 << 20),
            1..=60 => rng.below(4096),
            _ => rng.below(64),
        };
        return rng.bytes(len);
    }
    let mut v = seeds[rng.below(seeds.len())].clone();
    for _ in 0..=rng.below(4) {
        if v.is_empty() {
            break;
        }
        let at = rng.below(v.len());
        match rng.below(5) {
            0 => v[at] = rng.next() as u8,
            1 => v[at] ^= 1 << rng.below(8),
            2 => v.truncate(at),
            3 => {
                let tail = v[at..].to_vec();
                v.extend_from_slice(&tail);
            }
            _ => {
                let n = rng.below(8);
                v.splice(at..at, rng.bytes(n));
            }
        }
    }
    v
}

fn regressions(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("regressions")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .map(|e| e.expect("regression entry").path())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("regression input");
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_target_survives_its_regressions_seeds_and_random_inputs() {
    let runs: usize = std::env::var("CRESCENT_FUZZ_TEST_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    for (name, target) in TARGETS {
        for (path, bytes) in regressions(name) {
            eprintln!("{name}: {}", path.display());
            target(&bytes);
        }
        let seeds = seeds(name);
        assert!(!seeds.is_empty(), "{name} has seeds");
        for s in &seeds {
            target(s);
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
        for i in 0..runs {
            let data = input(&mut rng, &seeds);
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(
                outcome.is_ok(),
                "{name} panicked on random input {i}: {:02x?}",
                &data[..data.len().min(256)]
            );
        }
    }
}

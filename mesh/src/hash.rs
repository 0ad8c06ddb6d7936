//! The stable arithmetic of rendezvous routing (docs/scale-out.md, "Hashing").
//!
//! Every client and every cluster of a mesh must pick the same authority for the same key, on
//! every platform and in every release that speaks route format 1. So everything here is fixed:
//!
//! - the hash is **XXH3-64** (`xxhash-rust`), whose output the XXH3 specification fixes for
//!   all platforms and versions since XXH3 0.8.0; the seeds are fixed below;
//! - a route key is encoded as a tag byte and length-prefixed components, so no two keys of
//!   different kinds or splits share an encoding;
//! - the natural logarithm is [`ln`] below (fdlibm's `__ieee754_log`), computed with IEEE-754
//!   additions, multiplications and divisions only. Those are correctly rounded everywhere and
//!   Rust never contracts them into fused operations, so the score is bit-identical on every
//!   platform; `f64::ln` calls the platform's libm, which may differ in the last bit.
//!
//! Changing any of this moves keys between clusters: it needs a new route format version.

use xxhash_rust::xxh3::{xxh3_64_with_seed, Xxh3Default};

/// Seed of the per-cluster seed: `xxh3_64_with_seed(b"crescent-mesh/cluster/v1/" ++ name, 0)`.
const CLUSTER_TAG: &[u8] = b"crescent-mesh/cluster/v1/";

/// Tag bytes of the three kinds of route key.
pub(crate) const TAG_OBJECT: u8 = 1;
pub(crate) const TAG_REVISION: u8 = 2;
pub(crate) const TAG_TENANT: u8 = 3;

/// The per-cluster seed, computed once per membership: hashing a key against a cluster then
/// costs one 8-byte XXH3 with its seed term precomputed (docs/scale-out.md, "Routing cost").
pub fn cluster_seed(name: &str) -> u64 {
    let mut h = Xxh3Default::new();
    h.update(CLUSTER_TAG);
    h.update(name.as_bytes());
    h.digest()
}

/// Hashes a route key given as its tag and components: `tag` then, per component, its length
/// (u32 little-endian) and bytes; absent optional components are encoded by the caller.
pub(crate) fn key_hash(tag: u8, parts: &[&[u8]]) -> u64 {
    let mut h = Xxh3Default::new();
    h.update(&[tag]);
    for part in parts {
        // Components are bounded far below 4 GiB (keys 4 KiB, names 64..256 bytes).
        h.update(&(part.len() as u32).to_le_bytes());
        h.update(part);
    }
    h.digest()
}

/// The 64-bit hash of (cluster, key): XXH3-64 of the key hash's 8 little-endian bytes, seeded
/// with the cluster's seed. The definition; [`pair_hash_keyed`] computes the same faster.
pub fn pair_hash(cluster_seed: u64, key_hash: u64) -> u64 {
    xxh3_64_with_seed(&key_hash.to_le_bytes(), cluster_seed)
}

/// XXH3's default secret, bytes 8..16 and 16..24 read little-endian (the XXH3 specification,
/// `kSecret`): all an 8-byte input uses of it.
const SECRET_8: u64 = 0x1cad_21f7_2c81_017c;
const SECRET_16: u64 = 0xdb97_9083_e96d_d4de;

/// The seed-dependent term of XXH3's 4-to-8-byte path ("bitflip"), computed once per cluster
/// for [`pair_hash_keyed`].
pub fn cluster_key(cluster_seed: u64) -> u64 {
    let seed = cluster_seed ^ (u64::from((cluster_seed as u32).swap_bytes()) << 32);
    (SECRET_8 ^ SECRET_16).wrapping_sub(seed)
}

/// [`pair_hash`] with its per-cluster part precomputed ([`cluster_key`]): XXH3's 4-to-8-byte
/// path inlined for an 8-byte input, which reads the input as its two 32-bit halves swapped,
/// and ends in XXH3's `rrmxmx` avalanche. Equal to [`pair_hash`] for every input (tested).
#[inline]
pub fn pair_hash_keyed(cluster_key: u64, key_hash: u64) -> u64 {
    let mut v = key_hash.rotate_left(32) ^ cluster_key;
    v ^= v.rotate_left(49) ^ v.rotate_left(24);
    v = v.wrapping_mul(0x9FB2_1C65_1E98_DF25);
    v ^= (v >> 35).wrapping_add(8);
    v = v.wrapping_mul(0x9FB2_1C65_1E98_DF25);
    v ^ (v >> 28)
}

/// Maps a hash to (0, 1): the top 52 bits plus one half, times 2^-52. Every step is exact, so
/// the result lies in [2^-53, 1 - 2^-53] and is never 0 or 1 (ln stays finite and non-zero).
#[inline]
pub fn unit(h: u64) -> f64 {
    // 1 + m * 2^-52 by its bits, minus (1 - 2^-53): exact (Sterbenz), and the same value as
    // (m + 0.5) * 2^-52 without an integer-to-float conversion.
    f64::from_bits(0x3ff0_0000_0000_0000 | (h >> 12)) - (1.0 - 1.0 / 9_007_199_254_740_992.0)
}

/// The weighted rendezvous score `weight / -ln(u)` (the logarithmic method of Schindelhauer
/// and Schomaker): with `u` uniform on (0, 1), `-ln(u) / weight` is exponential with rate
/// `weight`, so the cluster with the highest score wins a key with probability
/// `weight / total weight`, and a change of one cluster's weight or presence only moves keys
/// to or from that cluster.
#[inline]
pub fn score(weight: f64, h: u64) -> f64 {
    weight / -ln(unit(h))
}

/// A weight inflated by 2^-40 for [`beaten`]: the margin that lets the bound test multiply
/// instead of divide and still never rule out a cluster that could win.
#[inline]
pub fn bound_weight(weight: f64) -> f64 {
    weight * (1.0 + 1.0 / 1_099_511_627_776.0)
}

/// `true` only if `score(weight, h) < top`, decided without a logarithm or a division
/// (`bound_weight` from [`bound_weight`]): `-ln(u) >= 1 - u`, so the score is at most
/// `weight / (1 - u)`, which is below `top` when `weight < top * (1 - u)`.
///
/// Exact, not approximate: [`ln`] is faithful (error below one ulp), so its result never
/// drops below `1 - u` (computed exactly for `u >= 1/2`; below, the two differ by more than
/// 0.19). The 2^-40 margin in `bound_weight` covers the rounding of the products here and of
/// the division in [`score`] (each at most 2^-53 relative). So `false` answers "maybe", and
/// `true` only for a cluster that cannot even tie.
#[inline]
pub fn beaten(bound_weight: f64, h: u64, top: f64) -> bool {
    bound_weight < top * (1.0 - unit(h))
}

// fdlibm's constants, by their bits (the values its source gives in decimal and hex).
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000); // 0.6931471803691238
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76); // 1.9082149292705877e-10
const LG1: f64 = f64::from_bits(0x3fe5_5555_5555_5593); // 0.6666666666666735
const LG2: f64 = f64::from_bits(0x3fd9_9999_9997_fa04); // 0.3999999999940942
const LG3: f64 = f64::from_bits(0x3fd2_4924_9422_9359); // 0.2857142874366239
const LG4: f64 = f64::from_bits(0x3fcc_71c5_1d8e_78af); // 0.22222198432149784
const LG5: f64 = f64::from_bits(0x3fc7_4664_96cb_03de); // 0.1818357216161805
const LG6: f64 = f64::from_bits(0x3fc3_9a09_d078_c69f); // 0.15313837699209373
const LG7: f64 = f64::from_bits(0x3fc2_f112_df3e_5244); // 0.14798198605116586
const THIRD: f64 = f64::from_bits(0x3fd5_5555_5555_5555); // 0.3333333333333333

/// Natural logarithm of a positive normal `x` (fdlibm 5.3 `e_log.c`, error below 1 ulp),
/// with IEEE-754 basic operations only, so bit-identical on every platform. [`unit()`] only
/// produces positive normal numbers; zero, negative, subnormal and non-finite inputs are not
/// handled.
pub fn ln(x: f64) -> f64 {
    debug_assert!(x.is_normal() && x > 0.0, "ln of {x}");
    let bits = x.to_bits();
    let mut hx = (bits >> 32) as i32;
    let lx = bits as u32;
    let mut k: i32 = (hx >> 20) - 1023;
    hx &= 0x000f_ffff;
    let i = (hx + 0x95f64) & 0x0010_0000;
    // Normalize x or x/2 into [sqrt(2)/2, sqrt(2)).
    let x = f64::from_bits((((hx | (i ^ 0x3ff0_0000)) as u64) << 32) | lx as u64);
    k += i >> 20;
    let f = x - 1.0;
    let dk = k as f64;
    if (0x000f_ffff & (2 + hx)) < 3 {
        // |f| < 2^-20
        if f == 0.0 {
            return dk * LN2_HI + dk * LN2_LO;
        }
        let r = f * f * (0.5 - THIRD * f);
        return if k == 0 {
            f - r
        } else {
            dk * LN2_HI - ((r - dk * LN2_LO) - f)
        };
    }
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    let r = t2 + t1;
    if ((hx - 0x6147a) | (0x6b851 - hx)) > 0 {
        let hfsq = 0.5 * f * f;
        if k == 0 {
            f - (hfsq - s * (hfsq + r))
        } else {
            dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f)
        }
    } else if k == 0 {
        f - s * (f - r)
    } else {
        dk * LN2_HI - ((s * (f - r) - dk * LN2_LO) - f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two finite doubles of one sign.
    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    #[test]
    fn ln_agrees_with_the_platform_within_one_ulp() {
        // A walk over the whole range unit() produces, plus its ends and exact points.
        let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut worst = 0;
        for _ in 0..200_000 {
            h = h.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let x = unit(h);
            worst = worst.max(ulps(ln(x), x.ln()));
        }
        for x in [
            unit(0),
            unit(u64::MAX),
            0.5,
            0.25,
            1.0 - 1e-9,
            1e-12,
            0.999_999,
        ] {
            worst = worst.max(ulps(ln(x), x.ln()));
        }
        assert!(worst <= 1, "ln differs from the platform by {worst} ulps");
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(ln(2.0), std::f64::consts::LN_2);
    }

    #[test]
    fn unit_is_the_top_52_bits_plus_a_half() {
        let mut h: u64 = 3;
        for _ in 0..100_000 {
            h = h.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            assert_eq!(unit(h), ((h >> 12) as f64 + 0.5) * 2f64.powi(-52));
        }
    }

    #[test]
    fn unit_stays_inside_the_open_interval() {
        assert_eq!(unit(0), 2f64.powi(-53));
        assert_eq!(unit(u64::MAX), 1.0 - 2f64.powi(-53));
        assert!(score(1.0, u64::MAX).is_finite());
        assert!(score(1.0, 0) > 0.0);
    }

    /// `beaten` never rules out a cluster whose score reaches `top`, at the closest calls:
    /// `top` equal to the score and one ulp either side.
    #[test]
    fn beaten_never_rules_out_a_possible_winner() {
        let mut h: u64 = 1;
        let mut ruled_out = 0u32;
        let hashes = (0..200_000)
            .map(|_| {
                h = h
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                h
            })
            .chain([u64::MAX, u64::MAX - 4096, 1 << 63, 0]);
        for h in hashes {
            for w in [0.001, 1.0, 3.0, 1e6, 1e9] {
                let s = score(w, h);
                let below = f64::from_bits(s.to_bits() - 1);
                let above = f64::from_bits(s.to_bits() + 1);
                for top in [below, s, above, s * 2.0] {
                    let out = beaten(bound_weight(w), h, top);
                    assert!(!(out && s >= top), "h {h:#x} w {w} top {top}");
                    ruled_out += u32::from(out);
                }
            }
        }
        // It does rule clusters out: that is its purpose.
        assert!(ruled_out > 100_000, "{ruled_out}");
    }

    #[test]
    fn the_keyed_pair_hash_is_xxh3() {
        let mut h: u64 = 7;
        for i in 0..100_000u64 {
            h = h
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(i | 1);
            let seed = h.rotate_left(17) ^ i;
            assert_eq!(pair_hash_keyed(cluster_key(seed), h), pair_hash(seed, h));
        }
        for (seed, key) in [(0, 0), (u64::MAX, 0), (0, u64::MAX), (cluster_seed("a"), 1)] {
            assert_eq!(
                pair_hash_keyed(cluster_key(seed), key),
                pair_hash(seed, key)
            );
        }
    }

    /// XXH3 test vectors from the reference implementation: the hash is the published one.
    #[test]
    fn xxh3_is_the_published_function() {
        assert_eq!(xxhash_rust::xxh3::xxh3_64(b""), 0x2D06_8005_38D3_94C2);
        assert_eq!(xxh3_64_with_seed(b"", 0), 0x2D06_8005_38D3_94C2);
    }
}

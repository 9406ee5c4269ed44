//! Seeded, reproducible fault decisions.
//!
//! Every decision is a pure function of the fault seed, the operation's sequence number
//! and a salt (a counter-based generator: the SplitMix64 finalizer over the three), so the
//! same seed and the same sequence of operations give the same failures, and a decision
//! never depends on how many random numbers some other decision consumed.

/// Mix three words into a well-distributed 64-bit value (SplitMix64 finalizer).
#[inline]
pub(crate) fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut z = seed
        ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ b.wrapping_mul(0xD1B5_4A32_D192_ED03).rotate_left(17);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in [0, 1).
#[inline]
pub(crate) fn uniform(seed: u64, a: u64, b: u64) -> f64 {
    (mix(seed, a, b) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Draw a Poisson count with mean `lambda` from a uniform `u` by inverting the CDF.
/// Bit errors in a sector are Binomial(bits, rber), which Poisson(bits * rber) matches
/// closely at the tiny rates of flash. The reads draw through [`poisson_from`]; this is
/// its definition, which the tests check.
#[cfg(test)]
fn poisson(lambda: f64, u: f64) -> u32 {
    if lambda <= 0.0 {
        return 0;
    }
    poisson_from((-lambda).exp(), lambda, u)
}

/// [`poisson`] with `p0 = exp(-lambda)` computed by the caller (once for the sectors of a
/// read, which share their block's rate: the exponential was the one transcendental call
/// per sector on a scan's read path). `lambda > 0`.
#[inline]
pub(crate) fn poisson_from(p0: f64, lambda: f64, u: f64) -> u32 {
    let mut p = p0;
    let mut cum = p;
    let mut k = 0u32;
    while u > cum && k < 10_000 {
        k += 1;
        p *= lambda / k as f64;
        cum += p;
        if p < 1e-300 {
            break;
        }
    }
    k
}

/// Salts that keep the decisions of different kinds independent.
pub(crate) mod salt {
    pub const FACTORY_BAD: u64 = 1;
    pub const PROGRAM_FAIL: u64 = 2;
    pub const ERASE_FAIL: u64 = 3;
    pub const BIT_ERRORS: u64 = 4;
    pub const TORN: u64 = 5;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_deterministic_and_spread() {
        assert_eq!(mix(1, 2, 3), mix(1, 2, 3));
        assert_ne!(mix(1, 2, 3), mix(2, 2, 3));
        let n = 100_000;
        let mean: f64 = (0..n).map(|i| uniform(7, i, 0)).sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
    }

    #[test]
    fn poisson_has_the_right_mean() {
        let n = 200_000u64;
        for lambda in [0.01, 0.5, 3.0, 20.0] {
            let s: u64 = (0..n)
                .map(|i| poisson(lambda, uniform(9, i, 1)) as u64)
                .sum();
            let m = s as f64 / n as f64;
            assert!(
                (m - lambda).abs() < 0.03 * lambda.max(1.0),
                "lambda {lambda} mean {m}"
            );
        }
        assert_eq!(poisson(0.0, 0.9), 0);
    }
}

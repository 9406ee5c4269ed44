//! Key and offset distributions of workloads: uniform, YCSB's scrambled zipfian, and
//! hot/cold. One implementation for every workload generator (the fio-style engine, YCSB).
//!
//! Choices made here:
//! * Zipfian ranks are drawn with `rand_distr`'s rejection-inversion sampler over the
//!   item count and scrambled with FNV-1a (64-bit) before the modulo, as YCSB's
//!   `ScrambledZipfianGenerator` does, so the popular items are spread over the key space
//!   instead of clustered at its start. Theta 0.99 is YCSB's default.
//! * `hotcold:H/C` sends H% of the accesses uniformly to the first C% of the items and
//!   the rest uniformly to the others.

use rand::{Rng, RngExt};
use rand_distr::{Distribution, Zipf};

/// A distribution over `0..n` items.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Dist {
    /// Every item equally likely.
    #[default]
    Uniform,
    /// Scrambled zipfian with exponent `theta` (YCSB: 0.99).
    Zipf {
        /// The skew: item of rank r is chosen with probability proportional to r^-theta.
        theta: f64,
    },
    /// `hot_access_pct`% of the accesses go to the first `hot_items_pct`% of the items.
    HotCold {
        /// Share of accesses to the hot set, percent.
        hot_access_pct: f64,
        /// Size of the hot set, percent of the items.
        hot_items_pct: f64,
    },
}

/// YCSB's default zipfian constant.
pub const YCSB_THETA: f64 = 0.99;

impl Dist {
    /// Parse `uniform`, `zipf`, `zipf:THETA` or `hotcold:H/C` (percentages).
    pub fn parse(s: &str) -> Result<Dist, String> {
        let bad = || {
            format!(
                "`{s}` is not a distribution; use uniform, zipf, zipf:THETA (e.g. zipf:0.99) or hotcold:H/C (e.g. hotcold:80/20)"
            )
        };
        let (name, arg) = s.split_once(':').map_or((s, None), |(a, b)| (a, Some(b)));
        match (name, arg) {
            ("uniform", None) => Ok(Dist::Uniform),
            ("zipf", None) => Ok(Dist::Zipf { theta: YCSB_THETA }),
            ("zipf", Some(x)) => {
                let theta: f64 = x.parse().map_err(|_| bad())?;
                if !(theta.is_finite() && theta > 0.0) {
                    return Err(format!("zipf theta {theta} must be a positive number"));
                }
                Ok(Dist::Zipf { theta })
            }
            ("hotcold", Some(x)) => {
                let (h, c) = x.split_once('/').ok_or_else(bad)?;
                let h: f64 = h.parse().map_err(|_| bad())?;
                let c: f64 = c.parse().map_err(|_| bad())?;
                if !((0.0..=100.0).contains(&h) && c > 0.0 && c < 100.0) {
                    return Err(format!(
                        "hotcold:{h}/{c}: the access share must be 0..=100 and the hot set 0<C<100 percent"
                    ));
                }
                Ok(Dist::HotCold {
                    hot_access_pct: h,
                    hot_items_pct: c,
                })
            }
            _ => Err(bad()),
        }
    }

    /// A sampler over `0..n` (`n` at least 1).
    pub fn sampler(&self, n: u64) -> Sampler {
        let n = n.max(1);
        let zipf = match *self {
            Dist::Zipf { theta } => Zipf::new(n as f64, theta).ok(),
            _ => None,
        };
        Sampler {
            dist: *self,
            n,
            zipf,
        }
    }
}

impl std::fmt::Display for Dist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dist::Uniform => write!(f, "uniform"),
            Dist::Zipf { theta } => write!(f, "zipf:{theta}"),
            Dist::HotCold {
                hot_access_pct,
                hot_items_pct,
            } => write!(f, "hotcold:{hot_access_pct}/{hot_items_pct}"),
        }
    }
}

/// Draws items of a [`Dist`] over `0..n`.
#[derive(Debug, Clone)]
pub struct Sampler {
    dist: Dist,
    n: u64,
    zipf: Option<Zipf<f64>>,
}

/// FNV-1a, 64-bit, of the little-endian bytes of `x` (YCSB's `fnvhash64`).
pub fn fnv1a64(x: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in x.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

impl Sampler {
    /// The item count.
    pub fn items(&self) -> u64 {
        self.n
    }

    /// One item in `0..n`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match self.dist {
            Dist::Uniform => rng.random_range(0..self.n),
            Dist::Zipf { .. } => {
                let rank = self.zipf.as_ref().map_or(1.0, |z| z.sample(rng)) as u64;
                fnv1a64(rank.saturating_sub(1)) % self.n
            }
            Dist::HotCold {
                hot_access_pct,
                hot_items_pct,
            } => {
                let hot = ((self.n as f64 * hot_items_pct / 100.0) as u64).clamp(1, self.n);
                let to_hot = rng.random::<f64>() * 100.0 < hot_access_pct;
                if to_hot || hot == self.n {
                    rng.random_range(0..hot)
                } else {
                    rng.random_range(hot..self.n)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn parse_and_display_round_trip() {
        for s in ["uniform", "zipf:0.99", "zipf:1.2", "hotcold:80/20"] {
            assert_eq!(Dist::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(Dist::parse("zipf").unwrap(), Dist::Zipf { theta: 0.99 });
        for bad in [
            "",
            "zip",
            "zipf:x",
            "zipf:-1",
            "hotcold:80",
            "hotcold:120/20",
            "hotcold:80/0",
        ] {
            assert!(Dist::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn samples_stay_in_range_and_have_the_skew_asked_for() {
        let mut rng = SmallRng::seed_from_u64(7);
        let n = 10_000;
        let count = |d: Dist, rng: &mut SmallRng| {
            let s = d.sampler(n);
            let mut c = vec![0u32; n as usize];
            for _ in 0..200_000 {
                let x = s.sample(rng);
                assert!(x < n);
                c[x as usize] += 1;
            }
            c.sort_unstable_by(|a, b| b.cmp(a));
            // Share of accesses to the 1% most popular items.
            c[..(n / 100) as usize].iter().sum::<u32>() as f64 / 200_000.0
        };
        let uniform = count(Dist::Uniform, &mut rng);
        let zipf = count(Dist::Zipf { theta: 0.99 }, &mut rng);
        let hot = count(
            Dist::HotCold {
                hot_access_pct: 90.0,
                hot_items_pct: 1.0,
            },
            &mut rng,
        );
        assert!(uniform < 0.03, "uniform top-1% share {uniform}");
        assert!(zipf > 0.4, "zipf top-1% share {zipf}");
        assert!((hot - 0.9).abs() < 0.02, "hotcold top-1% share {hot}");
    }

    #[test]
    fn scrambling_spreads_the_popular_items() {
        // The most popular zipfian items are not the first keys.
        let mut rng = SmallRng::seed_from_u64(1);
        let s = Dist::Zipf { theta: 0.99 }.sampler(1_000_000);
        let low = (0..10_000).filter(|_| s.sample(&mut rng) < 1000).count();
        assert!(
            low < 500,
            "{low} of 10000 draws fell in the first 0.1% of keys"
        );
    }
}

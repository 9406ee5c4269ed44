//! Figures measured in rounds, for the benches that compare csd with a peer on this
//! shared machine (`csd bench serve`, `csd bench tpch --compare duckdb`). One engine's wall
//! time moves by up to 2x from one minute to the next here, so a bench runs both engines
//! in each round, close together in time, takes their ratio within the round, and reports
//! the median of those ratios with their range: a slow minute slows both sides of one
//! ratio instead of one side of the comparison.

/// The median of `v` (the mean of the two middle values for an even count; 0 if empty).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One engine's figure over another's, taken within each round, over the rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ratio {
    /// The median of the rounds' ratios.
    pub(crate) median: f64,
    /// The smallest round's ratio.
    pub(crate) min: f64,
    /// The largest round's ratio.
    pub(crate) max: f64,
}

impl Ratio {
    /// The ratios `a[r] / b[r]` of each round `r` (a zero or negative denominator is taken
    /// as `floor`, so a failed peer shows as a large ratio rather than infinity).
    pub(crate) fn within_rounds(a: &[f64], b: &[f64], floor: f64) -> Ratio {
        debug_assert_eq!(a.len(), b.len(), "one figure per round on each side");
        let v: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y.max(floor)).collect();
        Ratio {
            median: median(v.clone()),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(0.0, f64::max),
        }
    }

    /// `1.23x`, or with more than one round `1.23x (1.10-1.40)`: the median and range.
    pub(crate) fn shown(&self, rounds: usize) -> String {
        if rounds > 1 {
            format!("{:.2}x ({:.2}-{:.2})", self.median, self.min, self.max)
        } else {
            format!("{:.2}x", self.median)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Ratio, median};

    #[test]
    fn median_of_odd_even_and_empty_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }

    #[test]
    fn ratios_are_taken_within_rounds_not_between_medians() {
        // Both sides slow down together in the second round: every ratio is 2 or 3,
        // while the ratio of the medians (30 / 10) would be 3.
        let a = [20.0, 60.0, 30.0];
        let b = [10.0, 20.0, 15.0];
        let r = Ratio::within_rounds(&a, &b, 1e-9);
        assert_eq!((r.median, r.min, r.max), (2.0, 2.0, 3.0));
        assert_eq!(r.shown(3), "2.00x (2.00-3.00)");
        assert_eq!(r.shown(1), "2.00x");
        let zero = Ratio::within_rounds(&[5.0], &[0.0], 1.0);
        assert_eq!(zero.median, 5.0);
    }
}

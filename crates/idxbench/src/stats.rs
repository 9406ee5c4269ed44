//! Latency accounting for the harness: exact count / mean / standard deviation / maximum
//! (Welford's running moments, merged across worker threads with Chan's formula) plus an
//! HDR histogram (3 significant digits, nanoseconds) for percentiles and distribution
//! plots. The paper reports average, variance and worst case (§5, "we measure (a)
//! average, (b) variance, and (c) worst-case"); percentiles are added from the histogram.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Running latency statistics of one metric (R_p or R_q) of one request kind.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    count: u64,
    mean_ns: f64,
    m2: f64,
    max_ns: u64,
    hist: Histogram<u64>,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        // Auto-resizing histogram: any latency fits, at 3 significant digits.
        // `new(3)` only fails for more than 5 significant digits.
        let mut hist = Histogram::new(3).expect("3 significant digits is a valid precision");
        hist.auto(true);
        Self {
            count: 0,
            mean_ns: 0.0,
            m2: 0.0,
            max_ns: 0,
            hist,
        }
    }

    /// Records one latency in nanoseconds.
    pub fn record(&mut self, ns: u64) {
        self.count += 1;
        let x = ns as f64;
        let d = x - self.mean_ns;
        self.mean_ns += d / self.count as f64;
        self.m2 += d * (x - self.mean_ns);
        self.max_ns = self.max_ns.max(ns);
        // Recording 0 is allowed; an auto-resizing histogram accepts any u64.
        let _ = self.hist.record(ns);
    }

    /// Adds the samples of `other`.
    pub fn merge(&mut self, other: &LatencyRecorder) {
        if other.count == 0 {
            return;
        }
        let (na, nb) = (self.count as f64, other.count as f64);
        let n = na + nb;
        let d = other.mean_ns - self.mean_ns;
        self.mean_ns += d * nb / n;
        self.m2 += other.m2 + d * d * na * nb / n;
        self.count += other.count;
        self.max_ns = self.max_ns.max(other.max_ns);
        let _ = self.hist.add(&other.hist);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The histogram (nanoseconds).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// Summary in milliseconds (all zero when empty).
    pub fn summary(&self) -> LatencySummary {
        if self.count == 0 {
            return LatencySummary::default();
        }
        let ms = |ns: f64| ns / 1e6;
        let q = |p: f64| ms(self.hist.value_at_quantile(p) as f64);
        LatencySummary {
            count: self.count,
            avg_ms: ms(self.mean_ns),
            // Population standard deviation over the whole workload.
            std_ms: ms((self.m2 / self.count as f64).max(0.0).sqrt()),
            max_ms: ms(self.max_ns as f64),
            p50_ms: q(0.5),
            p90_ms: q(0.9),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
        }
    }

    /// Percentile-distribution points `(percentile in [0, 100), latency ms)`, the usual
    /// HDR plot data; the last point is the maximum, placed at the largest percentile
    /// below 100 that the sample count resolves.
    pub fn distribution(&self) -> Vec<(f64, f64)> {
        if self.count == 0 {
            return Vec::new();
        }
        let mut pts: Vec<(f64, f64)> = self
            .hist
            .iter_quantiles(2)
            .map(|v| {
                (
                    v.quantile_iterated_to() * 100.0,
                    v.value_iterated_to() as f64 / 1e6,
                )
            })
            .filter(|(p, ms)| *p < 100.0 && *ms > 0.0)
            .collect();
        let top = 100.0 * (1.0 - 1.0 / (self.count as f64 + 1.0));
        if self.max_ns > 0 && pts.last().is_none_or(|l| l.0 < top) {
            pts.push((top, self.max_ns as f64 / 1e6));
        }
        pts
    }

    /// Counts of samples in equi-width buckets of `bucket_ms` (paper Figure 6(f): 2.5 ms
    /// buckets, 400 of them); samples beyond the last bucket are added to it.
    pub fn equiwidth_buckets(&self, bucket_ms: f64, buckets: usize) -> Vec<u64> {
        let mut out = vec![0u64; buckets];
        if buckets == 0 || bucket_ms.is_nan() || bucket_ms <= 0.0 {
            return out;
        }
        let width_ns = (bucket_ms * 1e6) as u64;
        for v in self.hist.iter_recorded() {
            let b = ((v.value_iterated_to() / width_ns.max(1)) as usize).min(buckets - 1);
            out[b] += v.count_at_value();
        }
        out
    }
}

/// Average, standard deviation, worst case and percentiles of one metric, in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Number of measured requests.
    pub count: u64,
    /// Mean.
    pub avg_ms: f64,
    /// Population standard deviation.
    pub std_ms: f64,
    /// Worst case.
    pub max_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_and_merge() {
        let mut a = LatencyRecorder::new();
        let mut b = LatencyRecorder::new();
        let xs: Vec<u64> = (1..=1000).map(|i| i * 1_000_000).collect();
        for (i, &x) in xs.iter().enumerate() {
            if i % 3 == 0 { a.record(x) } else { b.record(x) }
        }
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s.count, 1000);
        assert!((s.avg_ms - 500.5).abs() < 1e-9);
        let var: f64 = xs
            .iter()
            .map(|&x| (x as f64 / 1e6 - 500.5).powi(2))
            .sum::<f64>()
            / 1000.0;
        assert!((s.std_ms - var.sqrt()).abs() < 1e-6);
        assert_eq!(s.max_ms, 1000.0);
        assert!((s.p50_ms - 500.0).abs() / 500.0 < 0.01);
        assert!((s.p99_ms - 990.0).abs() / 990.0 < 0.01);
        let d = a.distribution();
        assert!(d.len() > 5 && d.iter().all(|&(p, v)| p < 100.0 && v > 0.0));
        let bk = a.equiwidth_buckets(100.0, 5);
        assert_eq!(bk.iter().sum::<u64>(), 1000);
        assert!(bk[4] > 500, "overflow goes to the last bucket: {bk:?}");
    }

    #[test]
    fn empty_summary_is_zero() {
        let r = LatencyRecorder::new();
        assert_eq!(r.summary(), LatencySummary::default());
        assert!(r.distribution().is_empty());
    }
}

//! The outcome of one benchmark run: per request kind the paper's latency metrics
//! `R_p`, `R_q` and `R_o` (§5: average, variance as standard deviation, worst case; plus
//! HDR percentiles), the run's total time and throughput, and the counters the harness
//! kept. Every number here comes from timestamps and counters taken while
//! the run executed.
//!
//! JSON is flat for the headline numbers (`insert_rp_max_ms`, `lookup_rq_avg_ms`,
//! `throughput_rps`, `total_s`, …) so that scripts can pick fields without knowing the
//! nesting; distributions and the configuration are nested objects.

use crate::BenchIndex;
use crate::harness::{BenchConfig, RunOutput};
use crate::scheme::Scheme;
use crate::stats::LatencySummary;
use crate::workload::{Generator, OpKind, Workload, WorkloadSpec};
use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use csd_plot::{LatencyChart, Series};
use serde::{Deserialize, Serialize};

use crate::machine::Contention;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// Which latency metric of the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Latency {
    /// `R_p`: dequeue → completion (processing time).
    Rp,
    /// `R_q`: placement in the queue → completion (queueing + processing).
    Rq,
    /// `R_o`: arrival → completion (also the wait for a slot in a full queue).
    Ro,
}

impl Latency {
    /// All three, in the paper's order.
    pub const ALL: [Latency; 3] = [Latency::Rp, Latency::Rq, Latency::Ro];

    /// `rp`, `rq` or `ro` (JSON key part).
    pub fn key(self) -> &'static str {
        match self {
            Latency::Rp => "rp",
            Latency::Rq => "rq",
            Latency::Ro => "ro",
        }
    }

    /// `R_p`, `R_q` or `R_o` (display).
    pub fn label(self) -> &'static str {
        match self {
            Latency::Rp => "R_p",
            Latency::Rq => "R_q",
            Latency::Ro => "R_o",
        }
    }
}

/// Latency results of one request kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpResult {
    /// `R_p` summary (ms).
    pub rp: LatencySummary,
    /// `R_q` summary (ms).
    pub rq: LatencySummary,
    /// `R_o` summary (ms).
    #[serde(default)]
    pub ro: LatencySummary,
    /// `R_p` percentile distribution `(percentile, ms)`.
    pub rp_distribution: Vec<(f64, f64)>,
    /// `R_q` percentile distribution `(percentile, ms)`.
    pub rq_distribution: Vec<(f64, f64)>,
    /// `R_o` percentile distribution `(percentile, ms)`.
    #[serde(default)]
    pub ro_distribution: Vec<(f64, f64)>,
    /// `R_p` equi-width histogram, 400 buckets of 2.5 ms, overflow in the last bucket
    /// (the paper's Figure 6(f)).
    pub rp_buckets_2_5ms: Vec<u64>,
}

impl OpResult {
    /// The summary of `which`.
    pub fn summary(&self, which: Latency) -> &LatencySummary {
        match which {
            Latency::Rp => &self.rp,
            Latency::Rq => &self.rq,
            Latency::Ro => &self.ro,
        }
    }

    /// The distribution of `which`.
    pub fn distribution(&self, which: Latency) -> &[(f64, f64)] {
        match which {
            Latency::Rp => &self.rp_distribution,
            Latency::Rq => &self.rq_distribution,
            Latency::Ro => &self.ro_distribution,
        }
    }
}

/// Everything one run measured. Serializes to flat JSON (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct BenchResult {
    /// The index's [`BenchIndex::scheme`] (serialized as its name, e.g. `FD+FC`).
    pub scheme: Scheme,
    /// The workload's generator (JSON: `G_R` or `G_T`).
    pub generator: Generator,
    /// The workload's parameters (JSON and tables: their one line, see
    /// [`WorkloadSpec`]'s `Display`).
    pub workload: WorkloadSpec,
    /// Generator seed.
    pub seed: u64,
    /// Nominal lookup ratio `W_l` of the spec (G_T: the derived 8/93).
    pub w_lookup: f64,
    /// The configuration that was run.
    pub config: BenchConfig,
    /// Requests executed (all, including warm-up).
    pub requests: u64,
    /// Requests measured (after warm-up).
    pub measured_requests: u64,
    /// Keys preloaded.
    pub preload_keys: u64,
    /// Fractions of the generated requests that are lookups / insertions / deletions.
    pub fractions: [f64; 3],
    /// Slots of `Q_r`.
    pub q_r_slots: usize,
    /// Slots of `Q_w`.
    pub q_w_slots: usize,
    /// Preload wall time (s).
    pub preload_s: f64,
    /// Time of the whole run, first injection to last completion (s): wall time, or
    /// modeled time in a virtual run ([`BenchResult::virtual_time`]).
    pub total_s: f64,
    /// The run's timestamps are modeled time: its threads ran as actors of virtual time
    /// ([`crate::BenchIndex::virtual_start`]); otherwise wall-clock time.
    pub virtual_time: bool,
    /// All requests / `total_s`.
    pub throughput_rps: f64,
    /// Insertions.
    pub insert: OpResult,
    /// Deletions.
    pub delete: OpResult,
    /// Lookups.
    pub lookup: OpResult,
    /// Lookups that found their key.
    pub lookup_hits: u64,
    /// Deletions that found no key.
    pub delete_misses: u64,
    /// Writes that waited for an earlier write to the same key (see the harness docs).
    pub ordering_waits: u64,
    /// Requests not executed exactly once (0 unless the harness is broken).
    pub not_executed_once: u64,
    /// The index's own counters ([`BenchIndex::extra_stats`]) after the run.
    pub extra: Vec<(String, f64)>,
    /// What other processes (and the hypervisor) used of the machine's CPUs during the
    /// timed run ([`crate::machine`]); `None` where the kernel's counters cannot be read.
    /// A wall-clock run's timestamps depend on it; a virtual run's do not.
    pub machine: Option<Contention>,
}

impl BenchResult {
    pub(crate) fn assemble(
        index: &dyn BenchIndex,
        workload: &Workload,
        cfg: &BenchConfig,
        preload: Duration,
        out: RunOutput,
        machine: Option<Contention>,
    ) -> Self {
        let n = workload.requests.len() as u64;
        let c = workload.counts();
        let frac = |x: u64| if n == 0 { 0.0 } else { x as f64 / n as f64 };
        let total_s = out.total.as_secs_f64();
        let w_lookup = if workload.generator == cfg.workload.generator() {
            cfg.workload.nominal_lookup_fraction()
        } else {
            frac(c[OpKind::Lookup.index()])
        };
        Self {
            scheme: index.scheme(),
            generator: workload.generator,
            workload: workload.spec.clone(),
            seed: workload.seed,
            w_lookup,
            config: cfg.clone(),
            requests: n,
            measured_requests: n.saturating_sub(cfg.warmup),
            preload_keys: workload.preload.len(),
            fractions: [frac(c[2]), frac(c[0]), frac(c[1])],
            q_r_slots: out.q_r_slots,
            q_w_slots: out.q_w_slots,
            preload_s: preload.as_secs_f64(),
            total_s,
            virtual_time: out.virtual_time,
            throughput_rps: if total_s > 0.0 {
                n as f64 / total_s
            } else {
                0.0
            },
            insert: OpResult::from_recorders(&out.rec[OpKind::Insert.index()]),
            delete: OpResult::from_recorders(&out.rec[OpKind::Delete.index()]),
            lookup: OpResult::from_recorders(&out.rec[OpKind::Lookup.index()]),
            lookup_hits: out.lookup_hits,
            delete_misses: out.delete_misses,
            ordering_waits: out.ordering_waits,
            not_executed_once: out.not_executed_once,
            extra: index.extra_stats(),
            machine,
        }
    }

    /// Results of one request kind.
    pub fn op(&self, op: OpKind) -> &OpResult {
        match op {
            OpKind::Insert => &self.insert,
            OpKind::Delete => &self.delete,
            OpKind::Lookup => &self.lookup,
        }
    }

    /// The flat JSON object (what `Serialize` produces).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("scheme".into(), json!(self.scheme));
        m.insert("generator".into(), json!(self.generator));
        m.insert("workload".into(), json!(self.workload.to_string()));
        m.insert("seed".into(), json!(self.seed));
        m.insert("w_lookup".into(), json!(self.w_lookup));
        m.insert("requests".into(), json!(self.requests));
        m.insert("measured_requests".into(), json!(self.measured_requests));
        m.insert("preload_keys".into(), json!(self.preload_keys));
        m.insert("lookup_fraction".into(), json!(self.fractions[0]));
        m.insert("insert_fraction".into(), json!(self.fractions[1]));
        m.insert("delete_fraction".into(), json!(self.fractions[2]));
        m.insert("readers".into(), json!(self.config.readers));
        m.insert("writers".into(), json!(self.config.writers));
        m.insert("q_r_slots".into(), json!(self.q_r_slots));
        m.insert("q_w_slots".into(), json!(self.q_w_slots));
        m.insert("preload_s".into(), json!(self.preload_s));
        m.insert("total_s".into(), json!(self.total_s));
        m.insert("virtual_time".into(), json!(self.virtual_time));
        m.insert("throughput_rps".into(), json!(self.throughput_rps));
        for op in OpKind::ALL {
            let r = self.op(op);
            m.insert(format!("{}_count", op.name()), json!(r.rp.count));
            for which in Latency::ALL {
                let s = r.summary(which);
                let p = format!("{}_{}", op.name(), which.key());
                for (k, v) in [
                    ("avg", s.avg_ms),
                    ("std", s.std_ms),
                    ("max", s.max_ms),
                    ("p50", s.p50_ms),
                    ("p90", s.p90_ms),
                    ("p99", s.p99_ms),
                    ("p999", s.p999_ms),
                ] {
                    m.insert(format!("{p}_{k}_ms"), json!(v));
                }
            }
        }
        m.insert("lookup_hits".into(), json!(self.lookup_hits));
        m.insert("delete_misses".into(), json!(self.delete_misses));
        m.insert("ordering_waits".into(), json!(self.ordering_waits));
        m.insert("not_executed_once".into(), json!(self.not_executed_once));
        m.insert(
            "others_cpu_cores".into(),
            json!(self.machine.map(|c| c.others_cores)),
        );
        m.insert(
            "steal_cpu_cores".into(),
            json!(self.machine.map(|c| c.steal_cores)),
        );
        let extra: Map<String, Value> = self
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        m.insert("extra".into(), Value::Object(extra));
        let dist: Map<String, Value> = OpKind::ALL
            .iter()
            .map(|&op| {
                let r = self.op(op);
                (
                    op.name().to_string(),
                    json!({
                        "rp_percentiles": r.rp_distribution,
                        "rq_percentiles": r.rq_distribution,
                        "ro_percentiles": r.ro_distribution,
                        "rp_buckets_2_5ms": r.rp_buckets_2_5ms,
                    }),
                )
            })
            .collect();
        m.insert("distributions".into(), Value::Object(dist));
        m.insert(
            "config".into(),
            serde_json::to_value(&self.config).unwrap_or(Value::Null),
        );
        Value::Object(m)
    }

    /// The latency table: one row per request kind and metric (kinds with no measured
    /// requests are left out), in milliseconds.
    pub fn table(&self) -> Table {
        let mut t = Table::new();
        t.load_style(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_header(vec![
                "request", "metric", "count", "avg ms", "std ms", "p50 ms", "p90 ms", "p99 ms",
                "p99.9 ms", "max ms",
            ]);
        for op in OpKind::ALL {
            let r = self.op(op);
            if r.rp.count == 0 {
                continue;
            }
            for which in Latency::ALL {
                let s = r.summary(which);
                t.add_row(vec![
                    op.name().to_string(),
                    which.label().to_string(),
                    s.count.to_string(),
                    fmt_ms(s.avg_ms),
                    fmt_ms(s.std_ms),
                    fmt_ms(s.p50_ms),
                    fmt_ms(s.p90_ms),
                    fmt_ms(s.p99_ms),
                    fmt_ms(s.p999_ms),
                    fmt_ms(s.max_ms),
                ]);
            }
        }
        t
    }

    /// The run summary as a two-column table (scheme, workload, threads, queues, total time,
    /// throughput, counters, the index's extra counters).
    pub fn summary_table(&self) -> Table {
        let mut t = Table::new();
        t.load_style(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_header(vec!["field", "value"]);
        let rows: Vec<(String, String)> = vec![
            ("scheme".into(), self.scheme.to_string()),
            ("workload".into(), self.workload.to_string()),
            (
                "request mix (l/i/d)".into(),
                format!(
                    "{:.1}% / {:.1}% / {:.1}%",
                    self.fractions[0] * 100.0,
                    self.fractions[1] * 100.0,
                    self.fractions[2] * 100.0
                ),
            ),
            (
                "threads T_r / T_w".into(),
                format!("{} / {}", self.config.readers, self.config.writers),
            ),
            (
                "queue slots Q_r / Q_w".into(),
                format!("{} / {}", self.q_r_slots, self.q_w_slots),
            ),
            (
                "requests (measured)".into(),
                format!(
                    "{} ({} after {} warm-up)",
                    self.requests, self.measured_requests, self.config.warmup
                ),
            ),
            (
                "preload".into(),
                format!("{} keys in {:.2} s", self.preload_keys, self.preload_s),
            ),
            (
                "total time".into(),
                format!(
                    "{:.3} s ({})",
                    self.total_s,
                    if self.virtual_time {
                        "modeled: threads ran as actors of virtual time"
                    } else {
                        "wall clock"
                    }
                ),
            ),
            (
                "throughput".into(),
                if self.total_s > 0.0 {
                    format!("{:.0} requests/s", self.throughput_rps)
                } else {
                    // Modeled time with free host work: no request waited for anything.
                    "unbounded (the run took no time; JSON: 0)".into()
                },
            ),
            (
                "lookup hits".into(),
                format!(
                    "{} of {}",
                    self.lookup_hits,
                    self.lookup.rp.count.max(self.lookup_hits)
                ),
            ),
            (
                "deletes of absent keys".into(),
                self.delete_misses.to_string(),
            ),
            (
                "per-key write-order waits".into(),
                self.ordering_waits.to_string(),
            ),
        ];
        for (k, v) in rows {
            t.add_row(vec![k, v]);
        }
        for (k, v) in &self.extra {
            t.add_row(vec![format!("index: {k}"), format!("{v}")]);
        }
        t
    }

    /// The full text report: summary, latency table, then the configuration, the seed and
    /// the command that reproduces the run (`reproduce`).
    pub fn report_text(&self, reproduce: &str) -> String {
        format!(
            "{}\n{}\nconfig: {}\nseed: {}  reproduce: {}\n",
            self.summary_table(),
            self.table(),
            serde_json::to_string(&self.config).unwrap_or_default(),
            self.seed,
            reproduce
        )
    }

    /// Percentile-distribution chart of this run: one series per request kind and
    /// metric that has measurements.
    pub fn histogram_chart(&self) -> LatencyChart {
        let mut c = LatencyChart::new(
            format!(
                "{} {}: latency distribution (W_l = {:.2})",
                self.scheme, self.generator, self.w_lookup
            ),
            "latency (ms)",
        );
        let mut color = 0;
        for op in OpKind::ALL {
            for which in Latency::ALL {
                let d = self.op(op).distribution(which);
                if !d.is_empty() {
                    c.series.push(
                        Series::solid(format!("{} {}", op.name(), which.label()), d.to_vec())
                            .with_color(color),
                    );
                }
                color += 1;
            }
        }
        c
    }
}

/// Percentile-distribution chart of `op`'s `which` across runs: one series per result,
/// named by scheme (and `W_l` when several results share a scheme). Results without
/// measurements of `op` are left out.
pub fn latency_chart(results: &[BenchResult], op: OpKind, which: Latency) -> LatencyChart {
    let mut c = LatencyChart::new(
        format!("{} {} percentile distribution", op.name(), which.label()),
        format!("{} (ms)", which.label()),
    );
    for (i, r) in results.iter().enumerate() {
        let d = r.op(op).distribution(which);
        if d.is_empty() {
            continue;
        }
        let shared = results.iter().filter(|x| x.scheme == r.scheme).count() > 1;
        let name = if shared {
            format!("{} W_l={:.2}", r.scheme, r.w_lookup)
        } else {
            r.scheme.to_string()
        };
        c.series.push(Series::solid(name, d.to_vec()).with_color(i));
    }
    c
}

impl Serialize for BenchResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

/// Milliseconds with a precision that suits the magnitude.
pub fn fmt_ms(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

//! One comparison of a figure csd measured with the figure a paper published, for every
//! reproduction (scan paper, smart-ssd, FD+tree, batch-io, FLIXR) and the scoreboard of
//! `csd repro all`.
//!
//! A [`Comparison`] holds the headline's name, the paper's value ([`PaperValue`]: one
//! number, a range, or a direction such as "above 1"), csd's value, and any
//! [`Measured`] explanations: the same figure re-run in this run with one parameter set
//! to the paper's value, or at a larger scale. Its [`Status`] follows from these numbers
//! alone:
//! * [`Status::Within`]: csd's value is within [`TOLERANCE`] (20%) of the paper's value
//!   (inside the range widened by 20%; on the paper's side of a direction);
//! * [`Status::Explained`]: it is not, but one of the measured re-runs is: the named
//!   parameter accounts for the difference, as measured;
//! * [`Status::Miss`]: neither of the two.
//!
//! A comparison may also carry *sweep* points ([`Comparison::sweep`]): the figure re-run
//! with a parameter the paper does not report set to other values (e.g. how much of a
//! B+tree its host caches). They never change the status, since any value could be
//! chosen to fit; they show what the figure depends on and where it would meet the
//! paper ([`Comparison::reached_by_sweep`]).
//!
//! There is no free-text explanation: whatever explains a miss is a number this run
//! computed. [`markdown`] and [`json`] render a list of comparisons.

#![warn(missing_docs)]

use serde::Serialize;
use std::fmt::Write as _;

/// How far (relative) csd's value may be from the paper's and still count as a match.
pub const TOLERANCE: f64 = 0.20;

/// What the paper published for a headline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PaperValue {
    /// One number.
    Value {
        /// The number.
        value: f64,
    },
    /// A range of numbers (several configurations, or "between").
    Range {
        /// Lower end.
        low: f64,
        /// Upper end.
        high: f64,
    },
    /// A direction: csd's value must be above this bound ("faster", "higher", "x >= 20").
    Above {
        /// The bound.
        bound: f64,
    },
    /// A direction: csd's value must be below this bound ("slower", "lower").
    Below {
        /// The bound.
        bound: f64,
    },
}

impl PaperValue {
    /// One number.
    pub fn value(v: f64) -> PaperValue {
        PaperValue::Value { value: v }
    }

    /// A range; the ends may come in either order.
    pub fn range(a: f64, b: f64) -> PaperValue {
        PaperValue::Range {
            low: a.min(b),
            high: a.max(b),
        }
    }

    /// csd's value must be above `bound`.
    pub fn above(bound: f64) -> PaperValue {
        PaperValue::Above { bound }
    }

    /// csd's value must be below `bound`.
    pub fn below(bound: f64) -> PaperValue {
        PaperValue::Below { bound }
    }

    /// The relative deviation of `v` from the paper's value: 0 inside a range or on the
    /// right side of a direction, else the distance to the nearest end relative to it
    /// (`v / paper - 1`, signed). `None` for a value that is not a finite number.
    pub fn deviation(&self, v: f64) -> Option<f64> {
        if !v.is_finite() {
            return None;
        }
        let rel = |to: f64| {
            if to == 0.0 {
                if v == 0.0 { 0.0 } else { v.signum() }
            } else {
                (v - to) / to.abs()
            }
        };
        Some(match *self {
            PaperValue::Value { value } => rel(value),
            PaperValue::Range { low, high } => {
                if v < low {
                    rel(low)
                } else if v > high {
                    rel(high)
                } else {
                    0.0
                }
            }
            PaperValue::Above { bound } => {
                if v > bound {
                    0.0
                } else {
                    rel(bound)
                }
            }
            PaperValue::Below { bound } => {
                if v < bound {
                    0.0
                } else {
                    rel(bound)
                }
            }
        })
    }

    /// Whether `v` matches: within [`TOLERANCE`] of a value or range, strictly on the
    /// paper's side of a direction.
    pub fn matches(&self, v: f64) -> bool {
        match (*self, self.deviation(v)) {
            (_, None) => false,
            (PaperValue::Above { bound }, Some(_)) => v > bound,
            (PaperValue::Below { bound }, Some(_)) => v < bound,
            (_, Some(d)) => d.abs() <= TOLERANCE + 1e-12,
        }
    }

    /// The value as the paper states it: `1.75`, `1.11–1.91`, `> 1`, `< 1`.
    pub fn label(&self) -> String {
        match *self {
            PaperValue::Value { value } => num(value),
            PaperValue::Range { low, high } => format!("{}–{}", num(low), num(high)),
            PaperValue::Above { bound } => format!("> {}", num(bound)),
            PaperValue::Below { bound } => format!("< {}", num(bound)),
        }
    }
}

/// A number with 3 significant decimals for small values and no exponent noise.
fn num(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e6).contains(&a) {
        format!("{v:.3e}")
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// A measured explanation: the headline's figure re-run in this run with one parameter
/// changed (to the paper's setting, or along a scale), or one point of a sweep of a
/// parameter the paper does not report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    /// The parameter changed (a preset field or an option, e.g. `--host-cache-kib`).
    pub parameter: String,
    /// The setting it was re-run at (e.g. `all index nodes in memory`, `SF 0.1`).
    pub setting: String,
    /// The headline's figure in that re-run.
    pub value: f64,
    /// Whether the setting is the paper's (or a scale towards it), which may explain a
    /// miss, or a point of a sweep, which never does.
    pub kind: MeasuredKind,
}

/// What a [`Measured`] re-run set its parameter to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MeasuredKind {
    /// The paper's setting, or the scale trend towards it: may explain a miss.
    #[default]
    PaperSetting,
    /// A value of a parameter the paper does not report: shows the dependence only.
    Sweep,
}

/// Where a headline stands against the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Within 20% of the paper's value (or on its side of a direction).
    Within,
    /// Off by more, but a measured re-run with one parameter at the paper's setting is
    /// within.
    Explained,
    /// Off by more, and no measured re-run accounts for it.
    Miss,
}

impl Status {
    /// The status as the scoreboard prints it.
    pub fn label(self) -> &'static str {
        match self {
            Status::Within => "within 20%",
            Status::Explained => "explained",
            Status::Miss => "miss",
        }
    }
}

/// One headline of a paper set beside csd's figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The paper (reproduction) it belongs to, e.g. `flixr`.
    pub paper_name: String,
    /// The headline, e.g. `FLIXR-HS Scan (Fig. 9)`.
    pub headline: String,
    /// What the paper published.
    pub paper: PaperValue,
    /// What csd measured in this run (NaN when the run did not happen).
    pub csd: f64,
    /// Unit of both values (empty for ratios).
    pub unit: String,
    /// Re-runs in this run that may account for a difference.
    pub measured: Vec<Measured>,
}

impl Comparison {
    /// A comparison with no explanation yet.
    pub fn new(
        paper_name: impl Into<String>,
        headline: impl Into<String>,
        paper: PaperValue,
        csd: f64,
    ) -> Comparison {
        Comparison {
            paper_name: paper_name.into(),
            headline: headline.into(),
            paper,
            csd,
            unit: String::new(),
            measured: Vec::new(),
        }
    }

    /// With a unit.
    pub fn unit(mut self, unit: impl Into<String>) -> Comparison {
        self.unit = unit.into();
        self
    }

    /// With one more measured re-run at the paper's setting (or scale).
    pub fn explain(
        self,
        parameter: impl Into<String>,
        setting: impl Into<String>,
        value: f64,
    ) -> Comparison {
        self.with(
            MeasuredKind::PaperSetting,
            parameter.into(),
            setting.into(),
            value,
        )
    }

    /// With one more point of a sweep of a parameter the paper does not report (never
    /// changes the status).
    pub fn sweep(
        self,
        parameter: impl Into<String>,
        setting: impl Into<String>,
        value: f64,
    ) -> Comparison {
        self.with(MeasuredKind::Sweep, parameter.into(), setting.into(), value)
    }

    fn with(mut self, kind: MeasuredKind, parameter: String, setting: String, value: f64) -> Self {
        self.measured.push(Measured {
            parameter,
            setting,
            value,
            kind,
        });
        self
    }

    /// csd's relative deviation from the paper (see [`PaperValue::deviation`]).
    pub fn deviation(&self) -> Option<f64> {
        self.paper.deviation(self.csd)
    }

    /// Within, explained or miss, from the numbers alone.
    pub fn status(&self) -> Status {
        if self.paper.matches(self.csd) {
            Status::Within
        } else if self.explaining().is_some() {
            Status::Explained
        } else {
            Status::Miss
        }
    }

    /// The first measured re-run at the paper's setting that matches the paper, if any.
    pub fn explaining(&self) -> Option<&Measured> {
        self.measured
            .iter()
            .find(|m| m.kind == MeasuredKind::PaperSetting && self.paper.matches(m.value))
    }

    /// For a headline that is neither within nor explained: the first sweep point that
    /// meets the paper within [`TOLERANCE`], if any (the parameter value at which it
    /// would; not a status).
    pub fn reached_by_sweep(&self) -> Option<&Measured> {
        if self.status() != Status::Miss {
            return None;
        }
        self.measured
            .iter()
            .find(|m| m.kind == MeasuredKind::Sweep && self.paper.matches(m.value))
    }

    /// Whether the headline's direction holds: csd's value is on the same side of 1 as
    /// the paper's (for ratios: "faster", "more"), or on the paper's side of a direction;
    /// a paper value of exactly 1 ("converges", "ties") holds within 20%.
    /// The direction tests assert this.
    pub fn direction_holds(&self) -> bool {
        if !self.csd.is_finite() {
            return false;
        }
        match self.paper {
            PaperValue::Above { .. } | PaperValue::Below { .. } => self.paper.matches(self.csd),
            // "Converges", "ties": no side to keep, the value itself must match.
            PaperValue::Value { value: 1.0 } => self.paper.matches(self.csd),
            PaperValue::Value { value } => side(value) == side(self.csd),
            PaperValue::Range { low, high } => {
                side(low) == side(high) && side(low) == side(self.csd)
            }
        }
    }

    /// The "measured" column: each re-run as `parameter = setting: value`.
    fn measured_text(&self) -> String {
        self.measured
            .iter()
            .map(|m| {
                format!(
                    "{}{} = {}: {}{}",
                    match m.kind {
                        MeasuredKind::PaperSetting => "",
                        MeasuredKind::Sweep => "sweep ",
                    },
                    m.parameter,
                    m.setting,
                    num(m.value),
                    match self.paper.deviation(m.value) {
                        Some(d) if d != 0.0 => format!(" ({:+.0}%)", d * 100.0),
                        _ => String::new(),
                    }
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// One row of the markdown table.
    pub fn row(&self) -> Vec<String> {
        vec![
            self.headline.clone(),
            format!("{}{}", self.paper.label(), self.unit),
            format!("{}{}", num(self.csd), self.unit),
            match self.deviation() {
                Some(d) => format!("{:+.0}%", d * 100.0),
                None => "n/a".into(),
            },
            self.status().label().into(),
            self.measured_text(),
        ]
    }

    /// The comparison as JSON, with its deviation and status.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "paper_name": self.paper_name,
            "headline": self.headline,
            "paper": self.paper,
            "paper_label": self.paper.label(),
            "csd": if self.csd.is_finite() { serde_json::json!(self.csd) } else { serde_json::Value::Null },
            "unit": self.unit,
            "deviation": self.deviation(),
            "status": self.status(),
            "measured": self.measured,
            "direction_holds": self.direction_holds(),
        })
    }
}

impl std::fmt::Display for Comparison {
    /// `[status] headline: paper P, csd C (deviation)`, then the measured re-runs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.row();
        write!(
            f,
            "[{}] {}: paper {}, csd {} ({})",
            r[4], r[0], r[1], r[2], r[3]
        )?;
        if !self.measured.is_empty() {
            write!(f, "; measured: {}", r[5])?;
        }
        Ok(())
    }
}

/// Which side of 1 a ratio is on (1 itself counts as its own side).
fn side(v: f64) -> std::cmp::Ordering {
    v.partial_cmp(&1.0).unwrap_or(std::cmp::Ordering::Equal)
}

/// The header of [`markdown`]'s table.
pub const HEADER: [&str; 6] = [
    "headline",
    "paper",
    "csd",
    "deviation",
    "status",
    "measured re-runs (parameter = paper's setting: figure; sweep: a value the paper does not give)",
];

/// How many misses a sweep point brings within [`TOLERANCE`] of the paper
/// ([`Comparison::reached_by_sweep`]).
pub fn reached_by_sweeps(cs: &[Comparison]) -> usize {
    cs.iter().filter(|c| c.reached_by_sweep().is_some()).count()
}

/// Counts of each status: (within, explained, miss).
pub fn tally(cs: &[Comparison]) -> (usize, usize, usize) {
    cs.iter().fold((0, 0, 0), |(w, e, m), c| match c.status() {
        Status::Within => (w + 1, e, m),
        Status::Explained => (w, e + 1, m),
        Status::Miss => (w, e, m + 1),
    })
}

/// The comparisons as one markdown table, with a line of totals.
pub fn markdown(cs: &[Comparison]) -> String {
    let mut s = format!(
        "| {} |\n|{}\n",
        HEADER.join(" | "),
        "---|".repeat(HEADER.len())
    );
    for c in cs {
        let _ = writeln!(
            s,
            "| {} |",
            c.row()
                .iter()
                .map(|x| x.replace('|', "\\|"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    let (w, e, m) = tally(cs);
    let _ = writeln!(
        s,
        "\n{w} of {} headlines within 20% of the paper, {e} explained by a measured parameter, {m} missed.",
        cs.len()
    );
    let r = reached_by_sweeps(cs);
    if r > 0 {
        let _ = writeln!(
            s,
            "{r} of the misses meet the paper at some swept value of a parameter the paper does not give (listed as sweep points; not counted as explained)."
        );
    }
    s
}

/// The comparisons as a JSON array.
pub fn json(cs: &[Comparison]) -> serde_json::Value {
    serde_json::Value::Array(cs.iter().map(Comparison::to_json).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn value_within_explained_and_miss() {
        let c = Comparison::new("p", "h", PaperValue::value(2.0), 2.3);
        assert_eq!(c.status(), Status::Within);
        assert!((c.deviation().unwrap_or(0.0) - 0.15).abs() < 1e-12);
        let c = Comparison::new("p", "h", PaperValue::value(2.0), 3.0);
        assert_eq!(c.status(), Status::Miss);
        let c = c.explain("--cache", "paper", 2.2);
        assert_eq!(c.status(), Status::Explained);
        assert_eq!(c.explaining().map(|m| m.value), Some(2.2));
        // A re-run that does not reach the paper explains nothing.
        let c = Comparison::new("p", "h", PaperValue::value(2.0), 3.0).explain("x", "y", 2.9);
        assert_eq!(c.status(), Status::Miss);
    }

    #[test]
    fn a_sweep_point_never_changes_the_status() {
        // A miss whose sweep reaches the paper stays a miss, and says where it met it.
        let c = Comparison::new("p", "h", PaperValue::value(2.0), 3.0)
            .sweep("cache", "far", 2.9)
            .sweep("cache", "near", 2.1);
        assert_eq!(c.status(), Status::Miss);
        assert_eq!(c.explaining(), None);
        assert_eq!(
            c.reached_by_sweep().map(|m| m.setting.as_str()),
            Some("near")
        );
        assert!(
            c.row()[5].contains("sweep cache = near: 2.100 (+5%)"),
            "{}",
            c.row()[5]
        );
        // Within or explained: no sweep is reported as reaching it.
        let w = Comparison::new("p", "h", PaperValue::value(2.0), 2.1).sweep("c", "s", 2.0);
        assert_eq!((w.status(), w.reached_by_sweep()), (Status::Within, None));
        let e = Comparison::new("p", "h", PaperValue::value(2.0), 3.0)
            .sweep("c", "s", 2.0)
            .explain("k", "paper", 2.2);
        assert_eq!(e.status(), Status::Explained);
        assert_eq!(e.explaining().map(|m| m.value), Some(2.2));
        assert_eq!(e.reached_by_sweep(), None);
        let md = markdown(&[c.clone(), w, e]);
        assert!(
            md.contains("1 of the misses meet the paper at some swept value"),
            "{md}"
        );
        assert_eq!(json(&[c])[0]["measured"][1]["kind"], "sweep");
    }

    #[test]
    fn ranges_and_directions() {
        let r = PaperValue::range(1.91, 1.11);
        assert_eq!(
            r,
            PaperValue::Range {
                low: 1.11,
                high: 1.91
            }
        );
        assert_eq!(r.deviation(1.5), Some(0.0));
        assert!(r.matches(1.0)); // 1.0 is 10% below 1.11
        assert!(!r.matches(0.8));
        let a = PaperValue::above(1.0);
        assert!(a.matches(1.01) && !a.matches(1.0) && !a.matches(0.5));
        assert!(PaperValue::below(1.0).matches(0.5));
        assert_eq!(a.label(), "> 1.000");
        assert!(!PaperValue::value(1.0).matches(f64::NAN));
        assert_eq!(PaperValue::value(1.0).deviation(f64::INFINITY), None);
    }

    #[test]
    fn direction_is_the_side_of_one() {
        let c = |p: PaperValue, v: f64| Comparison::new("p", "h", p, v).direction_holds();
        assert!(c(PaperValue::value(1.75), 1.2));
        assert!(!c(PaperValue::value(1.75), 0.9));
        assert!(c(PaperValue::value(0.92), 0.5));
        assert!(!c(PaperValue::value(0.92), 1.5));
        assert!(c(PaperValue::range(1.11, 1.91), 3.0));
        assert!(!c(PaperValue::above(20.0), 19.0));
        assert!(!c(PaperValue::value(2.0), f64::NAN));
        assert!(c(PaperValue::value(1.0), 1.1));
        assert!(!c(PaperValue::value(1.0), 1.4));
    }

    #[test]
    fn markdown_and_json_carry_every_headline() {
        let cs = vec![
            Comparison::new("p", "a | b", PaperValue::value(1.0), 1.0),
            Comparison::new("p", "c", PaperValue::value(1.0), 2.0).explain("k", "v", 1.1),
            Comparison::new("p", "d", PaperValue::value(1.0), f64::NAN),
        ];
        let md = markdown(&cs);
        assert!(md.contains("a \\| b"));
        assert!(md.contains("1 of 3 headlines within 20% of the paper, 1 explained"));
        assert!(md.contains("k = v: 1.100"));
        let j = json(&cs);
        assert_eq!(j[1]["status"], "explained");
        assert_eq!(j[2]["status"], "miss");
        assert!(j[2]["csd"].is_null());
        assert_eq!(tally(&cs), (1, 1, 1));
        assert_eq!(
            cs[1].to_string(),
            "[explained] c: paper 1.000, csd 2.000 (+100%); measured: k = v: 1.100 (+10%)"
        );
    }

    proptest! {
        /// The status agrees with the deviation: within iff |deviation| <= 20% (values
        /// and ranges); an explanation never turns a match into anything else.
        #[test]
        fn status_agrees_with_deviation(paper in 0.01f64..100.0, csd in 0.0f64..200.0, rerun in 0.0f64..200.0) {
            let c = Comparison::new("p", "h", PaperValue::value(paper), csd);
            let d = c.deviation().unwrap_or(f64::INFINITY);
            prop_assert_eq!(c.status() == Status::Within, d.abs() <= TOLERANCE + 1e-12);
            let e = c.clone().explain("k", "v", rerun);
            if c.status() == Status::Within {
                prop_assert_eq!(e.status(), Status::Within);
            } else {
                prop_assert_eq!(e.status() == Status::Explained, PaperValue::value(paper).matches(rerun));
            }
        }

        /// A range contains every value between its ends at deviation 0.
        #[test]
        fn range_inside_is_zero(a in -50.0f64..50.0, b in -50.0f64..50.0, t in 0.0f64..1.0) {
            let r = PaperValue::range(a, b);
            let v = a.min(b) + t * (a.max(b) - a.min(b));
            prop_assert_eq!(r.deviation(v), Some(0.0));
        }
    }
}

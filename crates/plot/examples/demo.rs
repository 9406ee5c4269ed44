//! Writes one chart of each kind into the directory given as the first argument
//! (default `target/plot-demo`), to look at the house style:
//! `cargo run -p csd-plot --example demo -- /tmp/plots`.

use csd_plot::{BarChart, LatencyChart, LineChart, Series};
use std::path::PathBuf;

fn main() -> Result<(), csd_plot::PlotError> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/plot-demo".into()),
    );
    let wl = [0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0];
    let fc: Vec<(f64, f64)> = wl.iter().map(|&w| (w, 800.0 + 3000.0 * w)).collect();
    let xm: Vec<(f64, f64)> = wl.iter().map(|&w| (w, 600.0 + 2400.0 * w)).collect();
    let f = LineChart::new(
        "Throughput vs lookup ratio (G_R)",
        "lookup ratio W_l",
        "throughput (requests/s)",
    )
    .with_series(Series::solid("FD+FC", fc).with_color(0))
    .with_series(Series::solid("FD+XM", xm).with_color(1))
    .with_series(
        Series::dashed(
            "paper FD+XM worst (33-38 s)",
            vec![(0.0, 2000.0), (1.0, 2000.0)],
        )
        .with_color(1),
    )
    .write(&dir, "line")?;
    println!("{}", f.png.display());
    let mut l = LineChart::new("log-log", "x", "y");
    l.log_x = true;
    l.log_y = true;
    l.series.push(Series::solid(
        "x^2",
        (1..50).map(|i| (i as f64, (i * i) as f64)).collect(),
    ));
    l.write(&dir, "loglog")?;
    BarChart::new(
        "Worst insertion R_p",
        "ms",
        wl.iter().map(|w| format!("W_l={w}")).collect(),
    )
    .with_group("FD+XM", wl.iter().map(|w| 30_000.0 + 1000.0 * w).collect())
    .with_group("FD+FC", wl.iter().map(|w| 900.0 + 100.0 * w).collect())
    .write(&dir, "bars")?;
    let pts = |s: f64| -> Vec<(f64, f64)> {
        (0..60)
            .map(|i| {
                let p = 100.0 * (1.0 - 0.8f64.powi(i));
                (p, s * (1.0 + i as f64).powf(1.5))
            })
            .collect()
    };
    LatencyChart::new("Lookup R_q percentile distribution", "R_q (ms)")
        .with_series(Series::solid("FD+FC", pts(0.05)))
        .with_series(Series::solid("FD+XM", pts(0.2)))
        .write(&dir, "latency")?;
    Ok(())
}

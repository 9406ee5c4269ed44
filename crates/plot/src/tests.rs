//! Tests: every chart kind writes a real PNG and SVG; bad input gives errors.

use super::*;

fn check_files(f: &PlotFiles) {
    let png = std::fs::read(&f.png).expect("png written");
    assert!(png.len() > 1000, "png too small: {}", png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG magic");
    let svg = std::fs::read_to_string(&f.svg).expect("svg written");
    assert!(svg.contains("<svg"), "svg header");
}

fn line() -> LineChart {
    LineChart::new("throughput vs lookup ratio", "W_l", "requests/s")
        .with_series(
            Series::solid("FD+FC", vec![(0.0, 1000.0), (0.5, 2000.0), (1.0, 4000.0)]).with_color(0),
        )
        .with_series(
            Series::dashed("paper FD+FC", vec![(0.0, 1100.0), (1.0, 3900.0)]).with_color(0),
        )
}

#[test]
fn line_chart_linear_and_log() {
    let dir = tempfile::tempdir().unwrap();
    check_files(&line().write(dir.path(), "lin").unwrap());
    let mut c = line();
    c.series[0].points[0].0 = 0.1;
    c.series[1].points[0].0 = 0.1;
    c.log_x = true;
    c.log_y = true;
    check_files(&c.write(&dir.path().join("sub"), "log").unwrap());
}

#[test]
fn single_point_and_constant_series() {
    let dir = tempfile::tempdir().unwrap();
    let c = LineChart::new("one", "x", "y").with_series(Series::solid("a", vec![(1.0, 5.0)]));
    check_files(&c.write(dir.path(), "one").unwrap());
    let mut c = c;
    c.log_y = true;
    check_files(&c.write(dir.path(), "one_log").unwrap());
}

#[test]
fn bar_chart_writes() {
    let dir = tempfile::tempdir().unwrap();
    let c = BarChart::new(
        "worst insert R_p",
        "ms",
        vec!["0.2".into(), "0.5".into(), "0.8".into()],
    )
    .with_group("FD+XM", vec![30.0, 33.0, 38.0])
    .with_group("FD+FC", vec![1.0, 0.9, 1.1]);
    check_files(&c.write(dir.path(), "bars").unwrap());
    let mut c = c;
    c.log_y = true;
    check_files(&c.write(dir.path(), "bars_log").unwrap());
}

#[test]
fn latency_chart_writes() {
    let dir = tempfile::tempdir().unwrap();
    let pts = |scale: f64| -> Vec<(f64, f64)> {
        [0.0, 50.0, 90.0, 99.0, 99.9, 99.99]
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, scale * (i as f64 + 1.0)))
            .collect()
    };
    let c = LatencyChart::new("lookup R_q", "ms")
        .with_series(Series::solid("FD+FC", pts(0.1)))
        .with_series(Series::solid("FD+XM", pts(1.0)));
    check_files(&c.write(dir.path(), "lat").unwrap());
}

#[test]
fn bad_input_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let e = LineChart::new("t", "x", "y").write(p, "a").unwrap_err();
    assert!(matches!(e, PlotError::Empty { .. }), "{e}");
    let e = LineChart::new("t", "x", "y")
        .with_series(Series::solid("s", vec![]))
        .write(p, "a")
        .unwrap_err();
    assert!(matches!(e, PlotError::EmptySeries { .. }), "{e}");
    let e = LineChart::new("t", "x", "y")
        .with_series(Series::solid("s", vec![(1.0, f64::NAN)]))
        .write(p, "a")
        .unwrap_err();
    assert!(matches!(e, PlotError::NonFinite { index: 0, .. }), "{e}");
    let mut c =
        LineChart::new("t", "x", "y").with_series(Series::solid("s", vec![(1.0, 1.0), (2.0, 0.0)]));
    c.log_y = true;
    let e = c.write(p, "a").unwrap_err();
    assert!(
        matches!(
            e,
            PlotError::NonPositiveOnLogAxis {
                index: 1,
                axis: "y",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("logarithmic"));
    let mut c = LineChart::new("t", "x", "y").with_series(Series::solid("s", vec![(0.0, 1.0)]));
    c.log_x = true;
    assert!(matches!(
        c.write(p, "a").unwrap_err(),
        PlotError::NonPositiveOnLogAxis { axis: "x", .. }
    ));
    let e = BarChart::new("b", "y", vec![]).write(p, "b").unwrap_err();
    assert!(matches!(e, PlotError::Empty { .. }));
    let e = BarChart::new("b", "y", vec!["a".into()])
        .write(p, "b")
        .unwrap_err();
    assert!(matches!(e, PlotError::Empty { .. }));
    let e = BarChart::new("b", "y", vec!["a".into()])
        .with_group("g", vec![1.0, 2.0])
        .write(p, "b")
        .unwrap_err();
    assert!(matches!(
        e,
        PlotError::GroupLength {
            got: 2,
            expected: 1,
            ..
        }
    ));
    let e = BarChart::new("b", "y", vec!["a".into()])
        .with_group("g", vec![f64::INFINITY])
        .write(p, "b")
        .unwrap_err();
    assert!(matches!(e, PlotError::NonFinite { .. }));
    let mut b = BarChart::new("b", "y", vec!["a".into()]).with_group("g", vec![-1.0]);
    b.log_y = true;
    assert!(matches!(
        b.write(p, "b").unwrap_err(),
        PlotError::NonPositiveOnLogAxis { .. }
    ));
    let e = LatencyChart::new("l", "ms")
        .with_series(Series::solid("s", vec![(100.0, 1.0)]))
        .write(p, "l")
        .unwrap_err();
    assert!(matches!(e, PlotError::NonFinite { .. }));
    let e = LatencyChart::new("l", "ms")
        .with_series(Series::solid("s", vec![(50.0, 0.0)]))
        .write(p, "l")
        .unwrap_err();
    assert!(matches!(e, PlotError::NonPositiveOnLogAxis { .. }));
    assert!(matches!(
        line().write(p, "").unwrap_err(),
        PlotError::BadStem(_)
    ));
    assert!(matches!(
        line().write(p, "a/b").unwrap_err(),
        PlotError::BadStem(_)
    ));
    let mut c = line();
    c.size = (0, 10);
    assert!(matches!(
        c.write(p, "a").unwrap_err(),
        PlotError::BadSize { .. }
    ));
    // Nothing was written for the failed charts.
    assert!(!p.join("a.png").exists());
}

#[test]
fn tick_formatting() {
    assert_eq!(fmt_num(0.0), "0");
    assert_eq!(fmt_num(2.5), "2.5");
    assert_eq!(fmt_num(1500.0), "1500");
    assert_eq!(fmt_num(0.25), "0.25");
    assert_eq!(fmt_num(2.0e7), "2.0e7");
    assert_eq!(fmt_percentile(10.0), "90%");
    assert_eq!(fmt_percentile(1000.0), "99.9%");
    assert_eq!(fmt_percentile(1.0), "0%");
}

//! Small, reusable charts for csd reports, each written as both a PNG and an SVG file.
//!
//! Every `csd bench` / `csd repro` report writes its figures through this crate so that
//! all plots look alike (see docs/architecture.md, "Conventions": reports print a table and write
//! plots). Three chart kinds cover the papers' figures:
//!
//! * [`LineChart`] — one or more series of `(x, y)` points, optional log axes. A series
//!   can be [`LineStyle::Dashed`]: by convention a dashed series is a *paper reference*
//!   (numbers read from a paper), a solid one is measured.
//! * [`BarChart`] — grouped bars: one group of bars per category, one bar per series.
//! * [`LatencyChart`] — the usual HDR-histogram "percentile distribution" plot: latency
//!   (log scale) against percentile, where the x axis is `1 / (1 - p)` on a log scale so
//!   that 90 %, 99 %, 99.9 % … are equally spaced.
//!
//! Choices made:
//! * Plotting is done with plotters 0.3.7 without its system-font feature; PNG text is
//!   rendered with DejaVu Sans, shipped in `assets/` (see `assets/README.md` for its
//!   licence) and registered once as the `sans-serif` family. SVG output needs no font.
//! * Bad input never panics: empty charts, empty series, non-finite values and values
//!   `<= 0` on a log axis give a [`PlotError`] that names the series and the point.
//! * Charts are 900 x 600 pixels unless `size` is changed.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// DejaVu Sans, used for all text in PNG output.
static FONT_BYTES: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Default chart size in pixels (width, height).
pub const DEFAULT_SIZE: (u32, u32) = (900, 600);

/// Errors from building or writing a chart.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// A report file would overwrite something csd did not write.
    #[error(transparent)]
    Refused(#[from] OutputRefused),
    /// The chart has nothing to draw (no series, or no categories/groups for a bar chart).
    #[error("chart '{chart}' has no data to plot: {what}")]
    Empty {
        /// Chart title.
        chart: String,
        /// What is missing.
        what: String,
    },
    /// A series without points.
    #[error("chart '{chart}': series '{series}' has no points")]
    EmptySeries {
        /// Chart title.
        chart: String,
        /// Series name.
        series: String,
    },
    /// A NaN or infinite coordinate.
    #[error("chart '{chart}': series '{series}' point {index} has a non-finite value ({value})")]
    NonFinite {
        /// Chart title.
        chart: String,
        /// Series (or bar group) name.
        series: String,
        /// Index of the point (or category) in the series.
        index: usize,
        /// The offending value.
        value: f64,
    },
    /// A value `<= 0` on a logarithmic axis.
    #[error(
        "chart '{chart}': series '{series}' point {index} has {axis} = {value}, but the {axis} axis is logarithmic and needs values > 0"
    )]
    NonPositiveOnLogAxis {
        /// Chart title.
        chart: String,
        /// Series (or bar group) name.
        series: String,
        /// Index of the point (or category).
        index: usize,
        /// `"x"` or `"y"`.
        axis: &'static str,
        /// The offending value.
        value: f64,
    },
    /// A bar group whose number of values differs from the number of categories.
    #[error(
        "chart '{chart}': bar group '{group}' has {got} values but there are {expected} categories"
    )]
    GroupLength {
        /// Chart title.
        chart: String,
        /// Group name.
        group: String,
        /// Number of values in the group.
        got: usize,
        /// Number of categories.
        expected: usize,
    },
    /// Width or height of zero.
    #[error("chart '{chart}': size {width}x{height} is invalid (both must be at least 100)")]
    BadSize {
        /// Chart title.
        chart: String,
        /// Width in pixels.
        width: u32,
        /// Height in pixels.
        height: u32,
    },
    /// An empty or unusable file stem.
    #[error("invalid file stem '{0}': it must be non-empty and contain no path separator")]
    BadStem(String),
    /// Creating the output directory failed.
    #[error("cannot create directory {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The plotting library failed while drawing or encoding.
    #[error("drawing {path} failed: {message}")]
    Draw {
        /// The output file.
        path: PathBuf,
        /// The library's message.
        message: String,
    },
}

/// The two files written for one chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotFiles {
    /// The raster image.
    pub png: PathBuf,
    /// The vector image.
    pub svg: PathBuf,
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LineStyle {
    /// A solid line with point markers: a measured series.
    #[default]
    Solid,
    /// A dashed line: by convention a reference series read from a paper.
    Dashed,
}

/// One named series of `(x, y)` points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// The points, drawn in the given order.
    pub points: Vec<(f64, f64)>,
    /// Solid (measured) or dashed (paper reference).
    pub style: LineStyle,
    /// Palette index; `None` uses the series' position. Give a measured series and its
    /// paper reference the same index so they share a colour.
    pub color: Option<usize>,
}

impl Series {
    /// A solid (measured) series.
    pub fn solid(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            style: LineStyle::Solid,
            color: None,
        }
    }

    /// A dashed (paper reference) series.
    pub fn dashed(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            style: LineStyle::Dashed,
            color: None,
        }
    }

    /// Sets the palette index (see [`Series::color`]).
    pub fn with_color(mut self, index: usize) -> Self {
        self.color = Some(index);
        self
    }
}

/// A line chart of one or more series.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// Title drawn above the plot.
    pub title: String,
    /// X axis description.
    pub x_label: String,
    /// Y axis description.
    pub y_label: String,
    /// Logarithmic x axis (all x must be > 0).
    pub log_x: bool,
    /// Logarithmic y axis (all y must be > 0).
    pub log_y: bool,
    /// The series.
    pub series: Vec<Series>,
    /// Size in pixels (width, height); [`DEFAULT_SIZE`] by default.
    pub size: (u32, u32),
}

impl LineChart {
    /// A chart with linear axes, no series and the default size.
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Self {
        Self {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            log_x: false,
            log_y: false,
            series: Vec::new(),
            size: DEFAULT_SIZE,
        }
    }

    /// Adds a series.
    pub fn with_series(mut self, s: Series) -> Self {
        self.series.push(s);
        self
    }

    /// Checks the data and writes `dir/stem.png` and `dir/stem.svg` (creating `dir`).
    pub fn write(&self, dir: &Path, stem: &str) -> Result<PlotFiles, PlotError> {
        self.validate()?;
        write_both(dir, stem, self.size, self)
    }

    fn validate(&self) -> Result<(), PlotError> {
        check_size(&self.title, self.size)?;
        validate_series(&self.title, &self.series, self.log_x, self.log_y)
    }
}

impl Draw for LineChart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let (x0, x1) = axis_range(
            self.series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0)),
            self.log_x,
            false,
        );
        let (y0, y1) = axis_range(
            self.series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1)),
            self.log_y,
            true,
        );
        let lx = &self.x_label;
        let ly = &self.y_label;
        let fmt = &|v: &f64| fmt_num(*v);
        match (self.log_x, self.log_y) {
            (false, false) => {
                draw_lines(root, &self.title, lx, ly, x0..x1, y0..y1, &self.series, fmt)
            }
            (true, false) => draw_lines(
                root,
                &self.title,
                lx,
                ly,
                (x0..x1).log_scale(),
                y0..y1,
                &self.series,
                fmt,
            ),
            (false, true) => draw_lines(
                root,
                &self.title,
                lx,
                ly,
                x0..x1,
                (y0..y1).log_scale(),
                &self.series,
                fmt,
            ),
            (true, true) => draw_lines(
                root,
                &self.title,
                lx,
                ly,
                (x0..x1).log_scale(),
                (y0..y1).log_scale(),
                &self.series,
                fmt,
            ),
        }
    }
}

/// A latency percentile-distribution chart (the usual HDR histogram plot).
///
/// Each series holds `(percentile, latency)` points with the percentile in `[0, 100)`
/// (for example from `hdrhistogram::Histogram::iter_quantiles`). The x axis shows
/// `1 / (1 - p/100)` on a log scale, labelled as percentiles, so that the tail
/// (99 %, 99.9 %, …) gets as much room as the body; the y axis (latency) is logarithmic.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyChart {
    /// Title drawn above the plot.
    pub title: String,
    /// Y axis description, e.g. `"R_p (ms)"`.
    pub y_label: String,
    /// One series per scheme or request type; points are `(percentile, latency)`.
    pub series: Vec<Series>,
    /// Size in pixels (width, height); [`DEFAULT_SIZE`] by default.
    pub size: (u32, u32),
}

impl LatencyChart {
    /// An empty chart with the default size.
    pub fn new(title: impl Into<String>, y_label: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            y_label: y_label.into(),
            series: Vec::new(),
            size: DEFAULT_SIZE,
        }
    }

    /// Adds a series of `(percentile, latency)` points.
    pub fn with_series(mut self, s: Series) -> Self {
        self.series.push(s);
        self
    }

    /// Checks the data and writes `dir/stem.png` and `dir/stem.svg` (creating `dir`).
    pub fn write(&self, dir: &Path, stem: &str) -> Result<PlotFiles, PlotError> {
        check_size(&self.title, self.size)?;
        validate_series(&self.title, &self.series, false, true)?;
        for s in &self.series {
            for (i, &(p, _)) in s.points.iter().enumerate() {
                if !(0.0..100.0).contains(&p) {
                    return Err(PlotError::NonFinite {
                        chart: self.title.clone(),
                        series: format!("{} (percentile must be in [0, 100))", s.name),
                        index: i,
                        value: p,
                    });
                }
            }
        }
        // Transform percentiles to 1/(1-p) for a log x axis.
        let series: Vec<Series> = self
            .series
            .iter()
            .map(|s| Series {
                points: s
                    .points
                    .iter()
                    .map(|&(p, v)| (1.0 / (1.0 - p / 100.0), v))
                    .collect(),
                ..s.clone()
            })
            .collect();
        write_both(
            dir,
            stem,
            self.size,
            &LatencyDraw {
                chart: self,
                series,
            },
        )
    }
}

/// A [`LatencyChart`] with its x values already transformed to `1/(1-p)`.
struct LatencyDraw<'a> {
    chart: &'a LatencyChart,
    series: Vec<Series>,
}

impl Draw for LatencyDraw<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let series = &self.series;
        {
            let (_, x1) = axis_range(
                series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
                true,
                false,
            );
            let x1 = x1.max(10.0);
            let (y0, y1) = axis_range(
                series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
                true,
                true,
            );
            let fmt = &|v: &f64| fmt_percentile(*v);
            draw_lines(
                root,
                &self.chart.title,
                "percentile",
                &self.chart.y_label,
                (1.0..x1).log_scale(),
                (y0..y1).log_scale(),
                series,
                fmt,
            )
        }
    }
}

/// A grouped bar chart: for each category one bar per group.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// Title drawn above the plot.
    pub title: String,
    /// Y axis description.
    pub y_label: String,
    /// Logarithmic y axis (all values must be > 0).
    pub log_y: bool,
    /// Category names along the x axis.
    pub categories: Vec<String>,
    /// `(group name, one value per category)`; each group is a legend entry.
    pub groups: Vec<(String, Vec<f64>)>,
    /// Size in pixels (width, height); [`DEFAULT_SIZE`] by default.
    pub size: (u32, u32),
}

impl BarChart {
    /// An empty chart with a linear y axis and the default size.
    pub fn new(
        title: impl Into<String>,
        y_label: impl Into<String>,
        categories: Vec<String>,
    ) -> Self {
        Self {
            title: title.into(),
            y_label: y_label.into(),
            log_y: false,
            categories,
            groups: Vec::new(),
            size: DEFAULT_SIZE,
        }
    }

    /// Adds a group (one value per category).
    pub fn with_group(mut self, name: impl Into<String>, values: Vec<f64>) -> Self {
        self.groups.push((name.into(), values));
        self
    }

    /// Checks the data and writes `dir/stem.png` and `dir/stem.svg` (creating `dir`).
    pub fn write(&self, dir: &Path, stem: &str) -> Result<PlotFiles, PlotError> {
        self.validate()?;
        write_both(dir, stem, self.size, self)
    }

    fn validate(&self) -> Result<(), PlotError> {
        check_size(&self.title, self.size)?;
        let empty = |what: &str| PlotError::Empty {
            chart: self.title.clone(),
            what: what.to_string(),
        };
        if self.categories.is_empty() {
            return Err(empty("no categories"));
        }
        if self.groups.is_empty() {
            return Err(empty("no bar groups"));
        }
        for (name, values) in &self.groups {
            if values.len() != self.categories.len() {
                return Err(PlotError::GroupLength {
                    chart: self.title.clone(),
                    group: name.clone(),
                    got: values.len(),
                    expected: self.categories.len(),
                });
            }
            for (i, &v) in values.iter().enumerate() {
                check_value(&self.title, name, i, "y", v, self.log_y)?;
            }
        }
        Ok(())
    }
}

impl Draw for BarChart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let (y0, y1) = axis_range(
            self.groups.iter().flat_map(|g| g.1.iter().copied()),
            self.log_y,
            true,
        );
        let n = self.categories.len() as f64;
        if self.log_y {
            self.draw_bars(root, 0.0..n, (y0..y1).log_scale(), y0)
        } else {
            self.draw_bars(root, 0.0..n, y0..y1, 0.0f64.max(y0))
        }
    }
}

impl BarChart {
    fn draw_bars<DB, YR>(
        &self,
        root: &DrawingArea<DB, Shift>,
        xr: std::ops::Range<f64>,
        yr: YR,
        base: f64,
    ) -> Result<(), String>
    where
        DB: DrawingBackend,
        YR: AsRangedCoord<Value = f64>,
        YR::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(xr, yr)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .x_label_formatter(&|_| String::new())
            .y_desc(self.y_label.as_str())
            .y_label_formatter(&|v| fmt_num(*v))
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|e| e.to_string())?;
        let ng = self.groups.len() as f64;
        let width = 0.8 / ng;
        for (gi, (name, values)) in self.groups.iter().enumerate() {
            let color = palette(gi);
            chart
                .draw_series(values.iter().enumerate().map(|(ci, &v)| {
                    let left = ci as f64 + 0.1 + gi as f64 * width;
                    Rectangle::new([(left, base), (left + width * 0.95, v)], color.filled())
                }))
                .map_err(|e| e.to_string())?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
                });
        }
        // Category labels centred under each group, drawn in pixel coordinates.
        for (ci, cat) in self.categories.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(ci as f64 + 0.5, base));
            let style = TextStyle::from(("sans-serif", 14).into_font())
                .color(&BLACK)
                .pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Top,
                ));
            root.draw(&Text::new(cat.clone(), (px, py + 8), style))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Colour number `i` of a fixed, colour-blind-friendly palette (cycles after 8).
fn palette(i: usize) -> RGBColor {
    const P: [RGBColor; 8] = [
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(230, 159, 0),
        RGBColor(86, 180, 233),
        RGBColor(120, 120, 120),
        RGBColor(0, 0, 0),
    ];
    P[i % P.len()]
}

/// Formats a tick value compactly: plain for ordinary magnitudes, scientific otherwise.
pub fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        return format!("{v:.1e}");
    }
    let s = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Label for the `1/(1-p)` axis of a [`LatencyChart`]: the percentile it stands for.
fn fmt_percentile(x: f64) -> String {
    if x <= 1.0 {
        return "0%".to_string();
    }
    let p = 100.0 * (1.0 - 1.0 / x);
    let s = format!("{p:.4}");
    format!("{}%", s.trim_end_matches('0').trim_end_matches('.'))
}

fn check_size(chart: &str, (width, height): (u32, u32)) -> Result<(), PlotError> {
    if width < 100 || height < 100 {
        return Err(PlotError::BadSize {
            chart: chart.to_string(),
            width,
            height,
        });
    }
    Ok(())
}

fn check_value(
    chart: &str,
    series: &str,
    index: usize,
    axis: &'static str,
    value: f64,
    log: bool,
) -> Result<(), PlotError> {
    if !value.is_finite() {
        return Err(PlotError::NonFinite {
            chart: chart.to_string(),
            series: series.to_string(),
            index,
            value,
        });
    }
    if log && value <= 0.0 {
        return Err(PlotError::NonPositiveOnLogAxis {
            chart: chart.to_string(),
            series: series.to_string(),
            index,
            axis,
            value,
        });
    }
    Ok(())
}

fn validate_series(
    chart: &str,
    series: &[Series],
    log_x: bool,
    log_y: bool,
) -> Result<(), PlotError> {
    if series.is_empty() {
        return Err(PlotError::Empty {
            chart: chart.to_string(),
            what: "no series".to_string(),
        });
    }
    for s in series {
        if s.points.is_empty() {
            return Err(PlotError::EmptySeries {
                chart: chart.to_string(),
                series: s.name.clone(),
            });
        }
        for (i, &(x, y)) in s.points.iter().enumerate() {
            check_value(chart, &s.name, i, "x", x, log_x)?;
            check_value(chart, &s.name, i, "y", y, log_y)?;
        }
    }
    Ok(())
}

/// Axis range covering `values` (which are finite, and > 0 on a log axis), padded so that
/// points do not sit on the frame. A linear value axis (`value_axis`) starts at 0 when
/// all values are positive.
fn axis_range(values: impl Iterator<Item = f64>, log: bool, value_axis: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() || !hi.is_finite() {
        return if log { (0.1, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        if hi / lo < 1.5 {
            (lo / 2.0, hi * 2.0)
        } else {
            (lo / 1.3, hi * 1.3)
        }
    } else {
        if value_axis && lo > 0.0 {
            lo = 0.0;
        }
        if value_axis && hi < 0.0 {
            hi = 0.0;
        }
        let span = hi - lo;
        if span <= 0.0 {
            let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo - d, hi + d)
        } else if value_axis {
            (
                if lo < 0.0 { lo - span * 0.05 } else { lo },
                hi + span * 0.08,
            )
        } else {
            (lo, hi)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn draw_lines<DB, XR, YR>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    xr: XR,
    yr: YR,
    series: &[Series],
    x_fmt: &dyn Fn(&f64) -> String,
) -> Result<(), String>
where
    DB: DrawingBackend,
    XR: AsRangedCoord<Value = f64>,
    YR: AsRangedCoord<Value = f64>,
    XR::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    YR::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        // Room on the right for the last x tick label (wide numbers like 400000).
        .margin_right(40)
        .x_label_area_size(50)
        .y_label_area_size(75)
        .build_cartesian_2d(xr, yr)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(x_fmt)
        .y_label_formatter(&|v| fmt_num(*v))
        .label_style(("sans-serif", 14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in series.iter().enumerate() {
        let color = palette(s.color.unwrap_or(i));
        match s.style {
            LineStyle::Solid => {
                let style = ShapeStyle::from(&color).stroke_width(2);
                chart
                    .draw_series(LineSeries::new(s.points.iter().copied(), style))
                    .map_err(|e| e.to_string())?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
                chart
                    .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(|e| e.to_string())?;
            }
            LineStyle::Dashed => {
                let style = ShapeStyle::from(&color).stroke_width(2);
                chart
                    .draw_series(DashedLineSeries::new(s.points.iter().copied(), 8, 5, style))
                    .map_err(|e| e.to_string())?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new(vec![(0, 0), (7, 0)], style)
                            + PathElement::new(vec![(12, 0), (20, 0)], style)
                    });
                chart
                    .draw_series(s.points.iter().map(|&p| Cross::new(p, 4, style)))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Registers the bundled font once for PNG text rendering.
fn ensure_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, FONT_BYTES)
                .map_err(|_| "the bundled DejaVuSans.ttf could not be parsed".to_string())
        })
        .clone()
}

/// Something that can draw itself on any plotters backend.
/// csd refuses to write a report file over this path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refusing to write {path}: {why}")]
pub struct OutputRefused {
    /// The path.
    pub path: PathBuf,
    /// Why.
    pub why: String,
}

/// The first bytes of every csd device image.
const IMAGE_MAGIC: &[u8; 8] = b"CSDNAND\0";

/// May a report, plot or data file be written at `path`? Not over a csd device image, a
/// directory or other non-regular file, nor over an existing file whose extension is not
/// one of `extensions` (the kinds of file csd writes there). A path that does not exist
/// is fine.
pub fn guard_output(path: &Path, extensions: &[&str]) -> Result<(), OutputRefused> {
    let refuse = |why: String| {
        Err(OutputRefused {
            path: path.to_path_buf(),
            why,
        })
    };
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.is_file() {
        return refuse("it exists and is not a regular file".into());
    }
    let mut head = [0u8; 8];
    if let Ok(f) = std::fs::File::open(path) {
        use std::io::Read;
        let n = f.take(8).read(&mut head).unwrap_or(0);
        if n == head.len() && &head == IMAGE_MAGIC {
            return refuse("it is a csd device image".into());
        }
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    if !extensions.contains(&ext.as_str()) {
        return refuse(format!(
            "it exists and is not a kind of file csd writes here ({})",
            extensions.join(", ")
        ));
    }
    Ok(())
}

trait Draw {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Writes the chart twice, through the bitmap and the SVG backend.
fn write_both<C: Draw>(
    dir: &Path,
    stem: &str,
    size: (u32, u32),
    chart: &C,
) -> Result<PlotFiles, PlotError> {
    if stem.is_empty() || stem.contains('/') || stem.contains('\\') || stem == "." || stem == ".." {
        return Err(PlotError::BadStem(stem.to_string()));
    }
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    guard_output(&png, &["png"])?;
    guard_output(&svg, &["svg"])?;
    let draw_err = |path: &Path, message: String| PlotError::Draw {
        path: path.to_path_buf(),
        message,
    };
    ensure_font().map_err(|m| draw_err(&png, m))?;
    {
        let root = BitMapBackend::new(&png, size).into_drawing_area();
        chart.draw(&root).map_err(|m| draw_err(&png, m))?;
        root.present().map_err(|e| draw_err(&png, e.to_string()))?;
    }
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        chart.draw(&root).map_err(|m| draw_err(&svg, m))?;
        root.present().map_err(|e| draw_err(&svg, e.to_string()))?;
    }
    Ok(PlotFiles { png, svg })
}

#[cfg(test)]
mod tests;

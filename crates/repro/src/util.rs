//! Small helpers the reproductions share with the CLI: where a device config comes from
//! (`--preset`, `--config`, `--set`), progress bars, terminal tables, list and clock
//! option parsing, and the guard that never overwrites a file csd did not write.

use crate::ReproError;
use clap::Args;
use csd_sim::config::DEFAULT_PRESET;
use csd_sim::{ClockMode, DeviceConfig};
use std::path::{Path, PathBuf};

/// Where a device config comes from.
#[derive(Args, Clone, Default, Debug)]
pub struct ConfigSource {
    /// Built-in preset (default: nvme-tlc).
    #[arg(long, conflicts_with = "config")]
    pub preset: Option<String>,
    /// Device config TOML file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override a config field, e.g. --set channel.rate_mt_s=400 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

impl ConfigSource {
    /// Whether any of --preset, --config or --set was given.
    pub fn given(&self) -> bool {
        self.preset.is_some() || self.config.is_some() || !self.set.is_empty()
    }

    /// The config: the file, or the preset (default nvme-tlc), with the overrides applied.
    pub fn load(&self) -> Result<DeviceConfig, ReproError> {
        let text = match (&self.preset, &self.config) {
            (_, Some(path)) => std::fs::read_to_string(path).map_err(|e| ReproError::Io {
                path: path.clone(),
                source: e,
            })?,
            (Some(p), None) => DeviceConfig::preset_toml(p)?.to_string(),
            (None, None) => DeviceConfig::preset_toml(DEFAULT_PRESET)?.to_string(),
        };
        Ok(DeviceConfig::from_toml_with_overrides(&text, &self.set)?)
    }

    /// The options as a command line would give them (for `reproduce:` lines).
    pub fn describe(&self) -> String {
        let mut s = match (&self.preset, &self.config) {
            (_, Some(p)) => format!("--config {}", p.display()),
            (Some(p), None) => format!("--preset {p}"),
            (None, None) => format!("--preset {DEFAULT_PRESET}"),
        };
        for o in &self.set {
            s.push_str(&format!(" --set {o}"));
        }
        s
    }
}

/// Parses `--clock`: `virtual`, `paced` or `paced:SCALE` (a mode with a payload, so a
/// value parser rather than a `ValueEnum`).
pub fn parse_clock(s: &str) -> Result<ClockMode, String> {
    ClockMode::parse(s)
        .ok_or_else(|| format!("`{s}` is not a clock; use virtual, paced or paced:SCALE"))
}

/// A list as a command line gives it: the items' names joined by commas.
pub fn comma_list<T: std::fmt::Display>(v: &[T]) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(",")
}

/// A terminal table with csd's style.
pub fn table(header: &[&str]) -> comfy_table::Table {
    use comfy_table::presets::UTF8_FULL_CONDENSED;
    let mut t = comfy_table::Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    t
}

/// A progress bar over `len` items (a spinner when the length is unknown).
pub fn progress_bar(len: Option<u64>, unit: &str) -> indicatif::ProgressBar {
    let pb = len.map_or_else(
        indicatif::ProgressBar::new_spinner,
        indicatif::ProgressBar::new,
    );
    pb.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {{msg}} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb
}

/// Human byte count.
pub fn bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// One line describing the array and links.
pub fn geometry_line(c: &DeviceConfig) -> String {
    format!(
        "{} ({} raw); {} MT/s channels; {} {:.0} MB/s",
        c.geometry,
        bytes(c.geometry.raw_capacity()),
        c.channel.rate_mt_s,
        c.host_link.kind,
        c.host_link.bandwidth_mb_s
    )
}

/// Refuses to write `path` when it exists and is not a file csd wrote (by extension).
pub fn guard_output(path: &Path, extensions: &[&str]) -> Result<(), ReproError> {
    csd_plot::guard_output(path, extensions).map_err(|e| ReproError::Usage(e.to_string()))
}

/// How a reproduction's scans placed their commands in modeled time, in words, and the
/// event core's counters summed over `reports` (`None` on calendars).
pub fn time_model_text<'a>(
    time_model: csd_sim::events::TimeModel,
    reports: impl IntoIterator<Item = &'a csd_host::QueryReport>,
) -> (String, Option<csd_sim::events::Counters>) {
    use csd_sim::events::{Counters, TimeModel};
    match time_model {
        TimeModel::Calendar => (
            "Time model: calendar (each resource books an operation when code asks).".into(),
            None,
        ),
        TimeModel::Events => {
            let mut sum = Counters::default();
            for c in reports.into_iter().filter_map(|r| r.event_core.as_ref()) {
                sum.add(c);
            }
            (
                format!(
                    "Time model: events (every scan on the event core: every resource \
                     first-come first-served in modeled-arrival order; loads on calendars): {}.",
                    sum.sentence()
                ),
                Some(sum),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_source_describes_itself_and_loads() {
        let s = ConfigSource {
            preset: Some("tiny".into()),
            config: None,
            set: vec!["channel.rate_mt_s=400".into()],
        };
        assert!(s.given());
        assert_eq!(s.describe(), "--preset tiny --set channel.rate_mt_s=400");
        assert!(s.load().is_ok());
        assert!(!ConfigSource::default().given());
        let bad = ConfigSource {
            preset: Some("no-such-preset".into()),
            ..ConfigSource::default()
        };
        assert!(bad.load().is_err());
        assert_eq!(comma_list(&[1, 2, 3]), "1,2,3");
        assert!(parse_clock("paced:2").is_ok());
        assert!(parse_clock("fast").is_err());
    }
}

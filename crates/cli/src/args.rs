//! Options shared by several commands, each parsed once by clap into a typed value:
//! where a device config comes from (`--preset`, `--config`, `--set`), the page layout,
//! the access pattern and the clock mode. Fixed sets of names are `ValueEnum`s with a
//! `Display` that prints the name back (for `reproduce:` lines); options that carry a
//! payload (`paced:SCALE`) have a value parser.

use clap::ValueEnum;
use csd_device::workload::Rw;
use csd_host::Strategy;
use csd_sql::Choice;
use csd_table::page::Layout;

/// Where a device config comes from (shared with the reproduction library).
pub(crate) use csd_repro::util::ConfigSource;

/// The option groups many commands flatten: `--json`, `--seed`, `--image` (shared with
/// the reproduction library, which defines them).
pub(crate) use csd_repro::args::{ImageFile, IndexSeed, JsonFlag, Seed};

/// Parses `--rw` (clap value parser; the pattern carries no payload but its names
/// come from the device crate, so it is not a `ValueEnum` here).
pub(crate) fn parse_rw(s: &str) -> Result<Rw, String> {
    Rw::parse(s).ok_or_else(|| {
        format!("`{s}` is not a pattern; use read, write, randread, randwrite or randrw")
    })
}

/// Parses `--clock` (shared with the reproduction library).
pub(crate) use csd_repro::util::parse_clock;

/// `--layout`: how a table's rows are laid out in its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum LayoutArg {
    /// N-ary storage model: whole rows in a slotted page.
    Nsm,
    /// Partition attributes across: one minipage per column.
    #[default]
    Pax,
}

impl LayoutArg {
    /// The table crate's layout.
    pub(crate) fn layout(self) -> Layout {
        match self {
            LayoutArg::Nsm => Layout::Nsm,
            LayoutArg::Pax => Layout::Pax,
        }
    }
}

impl std::fmt::Display for LayoutArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LayoutArg::Nsm => "nsm",
            LayoutArg::Pax => "pax",
        })
    }
}

/// `--strategy` of commands that run one fixed strategy or the model's choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum ChoiceArg {
    /// In-host processing: the device returns pages, the host filters.
    Ihp,
    /// The device's embedded cores run the scan.
    CpuIsp,
    /// The device's per-channel filter hardware runs the scan.
    HwIsp,
    /// Per scan, the strategy the analytic model says is fastest.
    #[default]
    Auto,
}

impl ChoiceArg {
    /// The SQL layer's choice.
    pub(crate) fn choice(self) -> Choice {
        match self {
            ChoiceArg::Ihp => Choice::Fixed(Strategy::Ihp),
            ChoiceArg::CpuIsp => Choice::Fixed(Strategy::CpuIsp),
            ChoiceArg::HwIsp => Choice::Fixed(Strategy::HwIsp),
            ChoiceArg::Auto => Choice::Auto,
        }
    }
}

impl std::fmt::Display for ChoiceArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.choice().name())
    }
}

/// One value of a `--strategy` list: a scan strategy, `auto`, or `all` (the three
/// strategies side by side).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum StrategySel {
    /// In-host processing: the device returns pages, the host filters.
    Ihp,
    /// The device's embedded cores run the scan.
    CpuIsp,
    /// The device's per-channel filter hardware runs the scan.
    HwIsp,
    /// Per scan, the strategy the analytic model says is fastest.
    Auto,
    /// ihp, cpu-isp and hw-isp, one after the other (results must agree).
    All,
}

impl StrategySel {
    /// The SQL layer's choices a list of values asks for, in order (`all` expanded).
    pub(crate) fn choices(list: &[StrategySel]) -> Vec<Choice> {
        list.iter()
            .flat_map(|s| match s {
                StrategySel::Ihp => vec![Choice::Fixed(Strategy::Ihp)],
                StrategySel::CpuIsp => vec![Choice::Fixed(Strategy::CpuIsp)],
                StrategySel::HwIsp => vec![Choice::Fixed(Strategy::HwIsp)],
                StrategySel::Auto => vec![Choice::Auto],
                StrategySel::All => Strategy::ALL.into_iter().map(Choice::Fixed).collect(),
            })
            .collect()
    }
}

impl std::fmt::Display for StrategySel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_possible_value() {
            Some(v) => f.write_str(v.get_name()),
            None => Ok(()),
        }
    }
}

/// Parses a count of at least 1 (threads, devices).
pub(crate) fn parse_count(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{s}` is not a count (1 or more)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_repro::util::comma_list;
    use csd_sim::config::DEFAULT_PRESET;

    #[test]
    fn layout_names_round_trip_through_display() {
        for l in LayoutArg::value_variants() {
            let back = LayoutArg::from_str(&l.to_string(), false).expect("own name parses");
            assert_eq!(back, *l);
        }
        assert_eq!(LayoutArg::Nsm.layout(), Layout::Nsm);
        assert_eq!(LayoutArg::Pax.layout(), Layout::Pax);
    }

    #[test]
    fn strategy_choices_are_the_sql_layers_names() {
        for c in ChoiceArg::value_variants() {
            assert_eq!(Choice::parse(&c.to_string()), Some(c.choice()));
        }
        for c in StrategySel::value_variants() {
            let back = StrategySel::from_str(&c.to_string(), false).expect("own name parses");
            assert_eq!(back, *c);
        }
        use StrategySel::*;
        assert_eq!(StrategySel::choices(&[All]).len(), 3);
        assert_eq!(
            StrategySel::choices(&[HwIsp, Auto]),
            vec![Choice::Fixed(Strategy::HwIsp), Choice::Auto]
        );
    }

    #[test]
    fn bad_clock_and_pattern_get_a_message_naming_the_choices() {
        let e = parse_clock("fast").expect_err("not a clock");
        assert!(e.contains("virtual, paced or paced:SCALE"), "{e}");
        let e = parse_rw("sideways").expect_err("not a pattern");
        assert!(e.contains("randrw"), "{e}");
        assert_eq!(parse_rw("randread"), Ok(Rw::RandRead));
        assert_eq!(parse_count(" 4"), Ok(4));
        assert!(parse_count("0").is_err() && parse_count("two").is_err());
    }

    /// `ConfigSource` is csd-repro's (its own tests cover a given source); here, what the
    /// CLI relies on: no option names the default preset.
    #[test]
    fn config_source_describes_itself_as_options() {
        assert_eq!(
            ConfigSource::default().describe(),
            format!("--preset {DEFAULT_PRESET}")
        );
        assert_eq!(comma_list(&[LayoutArg::Nsm, LayoutArg::Pax]), "nsm,pax");
    }
}

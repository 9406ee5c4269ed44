//! `csd config show | list | validate`: the device configurations (docs/architecture.md,
//! "Device configs": presets named after the papers' devices, TOML files, `--set` overrides).

use crate::{CliError, report};
use clap::Subcommand;
use csd_sim::DeviceConfig;
use csd_sim::config::PRESETS;
use std::path::{Path, PathBuf};

/// `csd config` subcommands.
#[derive(Subcommand)]
pub(crate) enum ConfigCmd {
    /// Print a preset as TOML (with its source comments), after any --set overrides.
    ///
    /// Example: csd config show isp-ch8 --set channel.rate_mt_s=400
    Show {
        /// Preset name (see `csd config list`).
        preset: String,
        /// Override a field, e.g. --set host_link.bandwidth_mb_s=750 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// List the built-in presets.
    List,
    /// Check a device config file and print a summary or every problem found.
    ///
    /// Example: csd config validate my-device.toml
    Validate {
        /// TOML file.
        file: PathBuf,
    },
}

/// `csd config ...`.
pub(crate) fn run(c: ConfigCmd) -> Result<(), CliError> {
    match c {
        ConfigCmd::Show { preset, set } => show(&preset, &set),
        ConfigCmd::List => list(),
        ConfigCmd::Validate { file } => validate(&file),
    }
}

/// `csd config show`: the preset file itself (comments and all), or the config after
/// the overrides.
fn show(preset: &str, set: &[String]) -> Result<(), CliError> {
    let text = DeviceConfig::preset_toml(preset)?;
    if set.is_empty() {
        print!("{text}");
    } else {
        let cfg = DeviceConfig::from_toml_with_overrides(text, set)?;
        println!("# preset {preset} with {}", set.join(", "));
        print!("{}", cfg.to_toml());
    }
    Ok(())
}

/// `csd config list`: every preset with its geometry and modeled sequential read.
fn list() -> Result<(), CliError> {
    let mut t = report::table(&["preset", "description", "geometry", "model seq. read MB/s"]);
    for (name, _) in PRESETS {
        let cfg = DeviceConfig::preset(name)?;
        t.add_row(vec![
            name.to_string(),
            cfg.description.clone(),
            report::geometry_line(&cfg),
            format!("{:.0}", report::model_seq_read_mb_s(&cfg)),
        ]);
    }
    println!("{t}");
    Ok(())
}

/// `csd config validate`: parse and check a config file.
fn validate(file: &Path) -> Result<(), CliError> {
    let text = std::fs::read_to_string(file).map_err(|e| CliError::Io {
        path: file.to_path_buf(),
        source: e,
    })?;
    let cfg = DeviceConfig::from_toml(&text)?;
    println!("{}: valid", file.display());
    println!("{cfg}");
    Ok(())
}

//! Option groups that many commands share, each defined once and flattened into the
//! commands' argument structs with `#[command(flatten)]` (the CLI's commands and the
//! reproductions alike): `--json`, `--seed` and a required `--image`.
//!
//! A command whose flag means something more specific keeps the group and only rewords
//! the help, e.g. `#[command(mut_arg("json", |a| a.help("Print the manifest as JSON.")))]`
//! on its argument struct.
//!
//! Each group says `about = None`: clap would otherwise take a flattened struct's doc
//! comment as the `about` of a command that has none of its own.

use clap::Args;
use std::path::{Path, PathBuf};

/// `--json`: print the report as JSON instead of text.
#[derive(Args, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[command(about = None, long_about = None)]
pub struct JsonFlag {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--seed`: the seed of the command's random choices, 1 unless given.
#[derive(Args, Clone, Copy, Debug, PartialEq, Eq)]
#[command(about = None, long_about = None)]
pub struct Seed {
    /// Seed of everything the command draws at random (the same seed, the same run).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl Default for Seed {
    fn default() -> Self {
        Seed { seed: 1 }
    }
}

/// `--seed` of the index benchmarks (FD+tree and FLIXR): their harness's seed, 42 unless
/// given.
#[derive(Args, Clone, Copy, Debug, PartialEq, Eq)]
#[command(about = None, long_about = None)]
pub struct IndexSeed {
    /// Seed of everything the command draws at random (the same seed, the same run).
    #[arg(long, default_value_t = csd_idxbench::harness::DEFAULT_SEED)]
    pub seed: u64,
}

impl Default for IndexSeed {
    fn default() -> Self {
        IndexSeed {
            seed: csd_idxbench::harness::DEFAULT_SEED,
        }
    }
}

/// `--image PATH`: the device image file a command works on.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
#[command(about = None, long_about = None)]
pub struct ImageFile {
    /// Image file.
    #[arg(long)]
    pub image: PathBuf,
}

impl ImageFile {
    /// The image's path.
    pub fn path(&self) -> &Path {
        &self.image
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    // A command that flattens every group, as the CLI's commands do (no doc comment: the
    // test checks that no group lends it an `about`).
    #[derive(Parser, Debug)]
    #[command(name = "t")]
    struct All {
        #[command(flatten)]
        json: JsonFlag,
        #[command(flatten)]
        seed: Seed,
        #[command(flatten)]
        image: ImageFile,
    }

    /// A command with the index benchmarks' seed and a reworded `--json` help.
    #[derive(Parser, Debug)]
    #[command(name = "u", mut_arg("json", |a| a.help("Print the manifest as JSON.")))]
    struct Reworded {
        #[command(flatten)]
        json: JsonFlag,
        #[command(flatten)]
        seed: IndexSeed,
    }

    #[test]
    fn groups_parse_their_flags_and_defaults() {
        let a = All::try_parse_from(["t", "--image", "dev.img"]).expect("parses");
        assert_eq!(a.json, JsonFlag::default());
        assert_eq!(a.seed, Seed::default());
        assert_eq!(a.image.path(), Path::new("dev.img"));
        let a =
            All::try_parse_from(["t", "--json", "--seed", "7", "--image", "x"]).expect("parses");
        assert!(a.json.json);
        assert_eq!(a.seed.seed, 7);
        let r = Reworded::try_parse_from(["u"]).expect("parses");
        assert_eq!(r.seed, IndexSeed::default());
        assert_eq!(r.seed.seed, csd_idxbench::harness::DEFAULT_SEED);
        assert!(!r.json.json);
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        let e = All::try_parse_from(["t"]).expect_err("--image is required");
        assert!(e.to_string().contains("--image"), "{e}");
        let e = All::try_parse_from(["t", "--image", "x", "--seed", "one"]).expect_err("not a u64");
        assert!(e.to_string().contains("--seed"), "{e}");
        let e = All::try_parse_from(["t", "--image", "x", "--json=yes"]).expect_err("a flag");
        assert!(e.to_string().contains("--json"), "{e}");
    }

    #[test]
    fn help_names_each_flag_once_and_rewording_keeps_the_flag() {
        let help = All::command().render_help().to_string();
        assert_eq!(help.matches("--json").count(), 1, "{help}");
        assert_eq!(help.matches("--seed").count(), 1, "{help}");
        assert!(help.contains("[default: 1]"), "{help}");
        let help = Reworded::command().render_help().to_string();
        assert!(help.contains("Print the manifest as JSON."), "{help}");
        assert!(!help.contains("instead of text"), "{help}");
        assert!(help.contains("[default: 42]"), "{help}");
        // No group lends its doc comment to the command as an `about`.
        assert!(All::command().get_about().is_none());
    }
}

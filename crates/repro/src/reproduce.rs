//! The `reproduce:` line of a report, generated once from the parsed command line
//! instead of retyped by each command (a retyped copy drifts silently when a flag is
//! added).
//!
//! The line names the subcommand path and, in the order the command defines them, every
//! option that has a value: typed on the command line or taken from its default, so the
//! line reruns the same configuration even if a default changes later. Flags (`--json`,
//! `--write-back` …) appear when given; positional arguments come last. Values are quoted
//! for a POSIX shell when they need it.

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};
use std::sync::OnceLock;

static LINE: OnceLock<String> = OnceLock::new();

/// Records the line of this process's command line (`main` calls it once after parsing).
pub(crate) fn record(cmd: &Command, matches: &ArgMatches) {
    let _ = LINE.set(render(cmd, matches));
}

/// The `reproduce:` line of this run (`csd` alone when nothing was recorded, as in unit
/// tests that call a command function directly).
pub(crate) fn line() -> String {
    LINE.get().cloned().unwrap_or_else(|| "csd".into())
}

/// The command line `matches` stands for, as `csd sub ... --flag value ... positional`.
pub(crate) fn render(cmd: &Command, matches: &ArgMatches) -> String {
    let mut words = vec![cmd.get_name().to_string()];
    let (mut cmd, mut matches) = (cmd, matches);
    loop {
        push_args(cmd, matches, &mut words);
        let Some((name, sub_matches)) = matches.subcommand() else {
            break;
        };
        let Some(sub) = cmd.find_subcommand(name) else {
            break;
        };
        words.push(name.to_string());
        cmd = sub;
        matches = sub_matches;
    }
    words.join(" ")
}

/// The options of one (sub)command level, then its positionals.
fn push_args(cmd: &Command, matches: &ArgMatches, words: &mut Vec<String>) {
    let mut positionals = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(source) = matches.value_source(id) else {
            continue;
        };
        match arg.get_action() {
            ArgAction::SetTrue | ArgAction::SetFalse => {
                if source == ValueSource::CommandLine
                    && let Some(long) = arg.get_long()
                {
                    words.push(format!("--{long}"));
                }
                continue;
            }
            ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version => {
                continue;
            }
            _ => {}
        }
        let Some(raw) = matches.get_raw(id) else {
            continue;
        };
        let values: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
        if values.is_empty() {
            continue;
        }
        let Some(long) = arg.get_long() else {
            positionals.extend(values.iter().map(|v| quote(v)));
            continue;
        };
        let joined = match (arg.get_action(), arg.get_value_delimiter()) {
            (ArgAction::Append, None) => {
                for v in &values {
                    words.push(format!("--{long}"));
                    words.push(quote(v));
                }
                continue;
            }
            (_, Some(delimiter)) => values.join(&delimiter.to_string()),
            (_, None) => values.join(" "),
        };
        words.push(format!("--{long}"));
        words.push(quote(&joined));
    }
    words.extend(positionals);
}

/// `value` as one POSIX shell word: unchanged when it holds only safe characters,
/// otherwise in single quotes.
fn quote(value: &str) -> String {
    let safe = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,:/=+@%".contains(c));
    if safe {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, value_parser};

    fn cli() -> Command {
        Command::new("csd").subcommand(
            Command::new("bench").subcommand(
                Command::new("query")
                    .arg(Arg::new("sql").required(true))
                    .arg(Arg::new("sf").long("sf").default_value("0.2"))
                    .arg(
                        Arg::new("layouts")
                            .long("layouts")
                            .value_delimiter(',')
                            .default_value("nsm,pax"),
                    )
                    .arg(Arg::new("set").long("set").action(ArgAction::Append))
                    .arg(
                        Arg::new("threads")
                            .long("threads")
                            .value_parser(value_parser!(usize)),
                    )
                    .arg(Arg::new("json").long("json").action(ArgAction::SetTrue)),
            ),
        )
    }

    fn line_of(args: &[&str]) -> String {
        let mut cmd = cli();
        let m = cmd.try_get_matches_from_mut(args).expect("parses");
        render(&cmd, &m)
    }

    #[test]
    fn defaults_are_spelled_out_and_absent_options_left_out() {
        assert_eq!(
            line_of(&["csd", "bench", "query", "q6"]),
            "csd bench query --sf 0.2 --layouts nsm,pax q6"
        );
    }

    #[test]
    fn given_values_flags_and_repeated_options_are_kept_in_definition_order() {
        assert_eq!(
            line_of(&[
                "csd",
                "bench",
                "query",
                "--json",
                "--set",
                "a=1",
                "--layouts",
                "pax",
                "--set",
                "b=2",
                "--threads",
                "4",
                "q1"
            ]),
            "csd bench query --sf 0.2 --layouts pax --set a=1 --set b=2 --threads 4 --json q1"
        );
    }

    #[test]
    fn values_that_a_shell_would_split_are_quoted() {
        assert_eq!(
            line_of(&["csd", "bench", "query", "select * from t where s = 'x'"]),
            r"csd bench query --sf 0.2 --layouts nsm,pax 'select * from t where s = '\''x'\'''"
        );
        assert_eq!(quote(""), "''");
        assert_eq!(quote("dev.img"), "dev.img");
    }

    #[test]
    fn the_recorded_line_is_the_fallback_before_recording() {
        // Unit tests never call `record`: the line is the bare program name.
        assert!(line().starts_with("csd"));
    }
}

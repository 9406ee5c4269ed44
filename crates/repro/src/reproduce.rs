//! The `reproduce:` line of a report, generated once from the parsed command line
//! instead of retyped by each command (a retyped copy drifts silently when a flag is
//! added). The CLI's commands and the reproductions both take their line from here.
//!
//! The line names the subcommand path and, in the order the command defines them, every
//! option that has a value: typed on the command line or taken from its default, so the
//! line reruns the same configuration even if a default changes later. Flags (`--json`,
//! `--write-back` …) appear when given; positional arguments come last. Values are quoted
//! for a POSIX shell when they need it; [`words`] splits a line back into its words.
//!
//! Where the line comes from: `csd`'s `main` records the process's command line once
//! ([`record`]); a caller that builds a reproduction's arguments itself (`csd repro all`
//! runs every paper at its defaults, the Python package parses its own list) renders
//! that run's line and runs it inside [`scoped`], so [`line`] names the run, not the
//! process.

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};
use std::cell::RefCell;
use std::sync::OnceLock;

static LINE: OnceLock<String> = OnceLock::new();

thread_local! {
    /// The line of the run in progress on this thread, when a caller set one.
    static SCOPED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records the line of this process's command line (`main` calls it once after parsing).
pub fn record(cmd: &Command, matches: &ArgMatches) {
    let _ = LINE.set(render(cmd, matches));
}

/// The `reproduce:` line of this run: the innermost [`scoped`] line on this thread, else
/// the recorded process line, else `csd` (unit tests that call a command directly).
pub fn line() -> String {
    SCOPED
        .with(|s| s.borrow().clone())
        .or_else(|| LINE.get().cloned())
        .unwrap_or_else(|| "csd".into())
}

/// Runs `f` with `line` as this thread's `reproduce:` line, then restores the previous
/// one (also when `f` panics).
pub fn scoped<R>(line: String, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<String>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            SCOPED.with(|s| *s.borrow_mut() = previous);
        }
    }
    let _restore = Restore(SCOPED.with(|s| s.borrow_mut().replace(line)));
    f()
}

/// The command line `matches` stands for, as `NAME sub ... --flag value ... positional`
/// where NAME is the command's name.
pub fn render(cmd: &Command, matches: &ArgMatches) -> String {
    render_as(cmd.get_name(), cmd, matches)
}

/// The command line `matches` stands for, with `program` as its first words (e.g.
/// `csd repro flixr` for a reproduction's own argument struct).
pub fn render_as(program: &str, cmd: &Command, matches: &ArgMatches) -> String {
    let mut words = vec![program.to_string()];
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

/// The words of a line [`render`] made, its quoting undone (`None` for an unterminated
/// quote). Only the quoting `render` writes is understood: single quotes and `'\''`.
pub fn words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut in_word, mut quoted) = (false, false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            '\\' if !quoted => {
                word.push(chars.next()?);
                in_word = true;
            }
            ' ' if !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            _ => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quoted {
        return None;
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// `value` as one POSIX shell word: unchanged when it holds only safe characters,
/// otherwise in single quotes.
pub fn quote(value: &str) -> String {
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
        assert_eq!(line(), "csd");
    }

    #[test]
    fn a_scoped_line_names_the_run_and_is_restored_after_it() {
        let inner = scoped("csd repro flixr --out a".into(), || {
            let nested = scoped("csd repro fd-tree".into(), line);
            assert_eq!(nested, "csd repro fd-tree");
            line()
        });
        assert_eq!(inner, "csd repro flixr --out a");
        assert_eq!(line(), "csd");
        let caught = std::panic::catch_unwind(|| scoped("x".into(), || panic!("run failed")));
        assert!(caught.is_err());
        assert_eq!(line(), "csd", "restored after a panic");
    }

    #[test]
    fn words_undo_the_quoting_of_a_rendered_line() {
        for args in [
            &["csd", "bench", "query", "q6"][..],
            &["csd", "bench", "query", "select * from t where s = 'x'"],
            &[
                "csd",
                "bench",
                "query",
                "--set",
                "a=it's",
                "--set",
                "b= two  spaces",
                "q",
            ],
        ] {
            let line = line_of(args);
            let back = words(&line).expect("balanced quotes");
            let mut cmd = cli();
            let again = cmd.try_get_matches_from_mut(&back).expect("reparses");
            assert_eq!(render(&cmd, &again), line, "{args:?}");
        }
        assert_eq!(
            words("a 'b c' d\\ e"),
            Some(vec!["a".into(), "b c".into(), "d e".into()])
        );
        assert_eq!(words("'open"), None);
        assert_eq!(words("''"), Some(vec![String::new()]));
    }

    #[test]
    fn render_as_replaces_the_program_name() {
        let mut cmd = cli();
        let m = cmd
            .try_get_matches_from_mut(["csd", "bench", "query", "q6"])
            .expect("parses");
        assert_eq!(
            render_as("csd2", &cmd, &m),
            "csd2 bench query --sf 0.2 --layouts nsm,pax q6"
        );
    }
}

//! Helpers shared by the CLI's end-to-end tests.

use std::process::{Command, Output};

/// Run the `csd` binary built for these tests with `args`.
pub fn csd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_csd"))
        .args(args)
        .output()
        .expect("run csd")
}

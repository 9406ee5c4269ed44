//! Helpers shared by the CLI's end-to-end tests.

#![allow(dead_code)] // each test crate uses its own share of them

use std::process::{Command, Output};

/// Run the `csd` binary built for these tests with `args`.
pub fn csd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_csd"))
        .args(args)
        .output()
        .expect("run csd")
}

/// The standard output of a run that must have succeeded (both streams in the failure).
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

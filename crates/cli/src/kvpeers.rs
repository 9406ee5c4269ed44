//! Peers of `csd bench ycsb --compare`: other key-value stores under the same YCSB
//! driver on a real file, timed on the wall clock.

use crate::CliError;
use crate::kvbench::{BenchYcsbArgs, Outcome};
use csd_kv::ycsb::PhaseResult;
use serde_json::json;

/// One peer's run.
pub(crate) struct PeerOutcome {
    pub name: String,
    pub run: PhaseResult,
}

impl PeerOutcome {
    pub(crate) fn to_json(&self, csd: &Outcome) -> serde_json::Value {
        json!({
            "name": self.name,
            "run": crate::kvbench::phase_json(&self.run),
            "csd_wall_ops_over_peer": csd.run.wall_ops_per_s() / self.run.wall_ops_per_s().max(1e-9),
        })
    }
}

/// Run the peers `a.compare` names.
pub(crate) fn run_peers(
    a: &BenchYcsbArgs,
    _bar: &indicatif::ProgressBar,
) -> Result<Vec<PeerOutcome>, CliError> {
    match a.compare.first() {
        None => Ok(Vec::new()),
        Some(p) => Err(CliError::Usage(format!(
            "--compare {p}: no peer of that name is built in"
        ))),
    }
}

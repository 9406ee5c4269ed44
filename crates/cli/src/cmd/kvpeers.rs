//! Peers of `csd bench ycsb --compare`: other key-value stores under the same YCSB
//! driver on a real file, timed on the wall clock.

use crate::CliError;
use crate::cmd::bench_ycsb::{BenchYcsbArgs, Outcome};
use csd_kv::ycsb::{self, KvTarget, Limit, PhaseResult, YcsbConfig};
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
            "run": crate::cmd::bench_ycsb::phase_json(&self.run),
            "csd_wall_ops_over_peer": csd.run.wall_ops_per_s() / self.run.wall_ops_per_s().max(1e-9),
        })
    }
}

/// Run the peers `a.compare` names on files in a fresh temporary directory, each with
/// the same records, workload, key distribution and seed as csd's run and as many
/// operations as csd did (`csd_ops`).
pub(crate) fn run_peers(
    a: &BenchYcsbArgs,
    csd_ops: u64,
    bar: &indicatif::ProgressBar,
) -> Result<Vec<PeerOutcome>, CliError> {
    if a.compare.is_empty() {
        return Ok(Vec::new());
    }
    let dir = std::env::temp_dir().join(format!("csd-kvpeers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| CliError::Io {
        path: dir.clone(),
        source,
    })?;
    let r = run_in(a, csd_ops, bar, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn run_in(
    a: &BenchYcsbArgs,
    csd_ops: u64,
    bar: &indicatif::ProgressBar,
    dir: &std::path::Path,
) -> Result<Vec<PeerOutcome>, CliError> {
    let kv = |e: csd_kv::KvError| CliError::Usage(format!("peer: {e}"));
    let mut out = Vec::new();
    for name in &a.compare {
        let mut target: Box<dyn KvTarget> = match name.as_str() {
            "redb" => Box::new(csd_kvpeers::Redb::create(&dir.join("ycsb.redb")).map_err(kv)?),
            "fjall" => Box::new(csd_kvpeers::Fjall::create(&dir.join("fjall")).map_err(kv)?),
            other => {
                return Err(CliError::Usage(format!(
                    "--compare {other}: use redb and/or fjall"
                )));
            }
        };
        bar.set_length(a.records);
        bar.set_position(0);
        bar.set_message(format!("{name} load"));
        ycsb::load(target.as_mut(), a.records, &mut |n| bar.set_position(n)).map_err(kv)?;
        let cfg = YcsbConfig {
            records: a.records,
            workload: a.workload,
            dist: a.dist,
            limit: Limit::Ops(csd_ops),
            seed: a.rng.seed,
        };
        bar.set_length(1000);
        bar.set_message(format!("{name} {}", a.workload.name()));
        let run = ycsb::run(target.as_mut(), &cfg, &mut |f| {
            bar.set_position((f * 1000.0) as u64)
        })
        .map_err(kv)?;
        if run.ops.read_misses > 0 {
            return Err(CliError::Usage(format!(
                "{name}: {} reads found no record",
                run.ops.read_misses
            )));
        }
        out.push(PeerOutcome {
            name: name.clone(),
            run,
        });
    }
    bar.finish_and_clear();
    Ok(out)
}

//! Runs a small Figure-6 sweep against two in-memory mock indexes and writes the report
//! into the directory given as first argument (default `target/idxbench-demo`):
//! `cargo run -p csd-idxbench --example mock_sweep -- /tmp/idxbench`.
//!
//! "mock-XM" sleeps 20 ms under its write lock every 2000 insertions (a stop-the-world
//! merge); "mock-FC" never blocks. This shows the report format without an FD+tree.

use csd_idxbench::*;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

struct Mock {
    scheme: Scheme,
    map: RwLock<BTreeMap<u64, u64>>,
    merge_every: u64,
    inserts: AtomicU64,
}

impl BenchIndex for Mock {
    fn insert(&self, k: u64, v: u64) -> Result<(), IndexError> {
        let n = self.inserts.fetch_add(1, Ordering::Relaxed) + 1;
        let mut g = self.map.write().map_err(|_| IndexError::new("poisoned"))?;
        g.insert(k, v);
        if self.merge_every > 0 && n.is_multiple_of(self.merge_every) {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
    fn delete(&self, k: u64) -> Result<bool, IndexError> {
        Ok(self
            .map
            .write()
            .map_err(|_| IndexError::new("poisoned"))?
            .remove(&k)
            .is_some())
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>, IndexError> {
        Ok(self
            .map
            .read()
            .map_err(|_| IndexError::new("poisoned"))?
            .get(&k)
            .copied())
    }
    fn scheme(&self) -> Scheme {
        self.scheme
    }
}

fn main() -> Result<(), BenchError> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/idxbench-demo".into()),
    );
    let cfg = BenchConfig::small(0.8);
    let ratios = [0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0];
    let mut all = Vec::new();
    for (scheme, merge_every) in [(Scheme::FdFc, 0), (Scheme::FdXm, 2000)] {
        let make = |_w: f64| -> Result<Arc<dyn BenchIndex>, IndexError> {
            Ok(Arc::new(Mock {
                scheme,
                map: RwLock::new(BTreeMap::new()),
                merge_every,
                inserts: AtomicU64::new(0),
            }))
        };
        all.extend(sweep(&ratios, make, &cfg, &|w, p| {
            if p.done == p.total {
                eprintln!("{scheme} W_l={w} {:?} done", p.phase);
            }
        })?);
    }
    println!(
        "{}",
        all[4].report_text("cargo run -p csd-idxbench --example mock_sweep")
    );
    let files = write_report(
        &all,
        &paper::figure6(),
        &dir,
        "cargo run -p csd-idxbench --example mock_sweep",
    )?;
    println!("report: {}", files.markdown.display());
    Ok(())
}

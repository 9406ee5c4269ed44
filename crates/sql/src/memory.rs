//! The same tables held in host memory as Arrow batches and queried by DataFusion with
//! the session's configuration: the engine's own floor for a query, without a device.
//! `csd bench tpch --compare datafusion` runs it beside csd, so the difference between
//! the two columns is what storage emulation (page reads, the device program, the
//! conversion of pages into Arrow arrays) costs in wall time.
//!
//! Choices: every table is read once through the device with `SELECT *` (so the rows
//! are exactly the device's); its batches are dealt round-robin into as many
//! partitions as the session has threads, so DataFusion scans them in parallel as it
//! does a device table.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

use crate::{Answer, SqlError, SqlSession, execute, new_context, query_error};

/// A DataFusion session over in-memory copies of a device session's tables.
pub struct MemorySession {
    ctx: SessionContext,
    runtime: tokio::runtime::Runtime,
    tables: Vec<String>,
}

impl std::fmt::Debug for MemorySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemorySession(tables {:?})", self.tables)
    }
}

impl MemorySession {
    /// Reads every table of `session` (one full scan each, through the device) into
    /// memory and registers it under the same name, in a context with `threads`
    /// partitions.
    pub fn snapshot(session: &SqlSession, threads: usize) -> Result<MemorySession, SqlError> {
        let threads = threads.max(1);
        let (ctx, runtime) = new_context(threads)?;
        for name in session.tables() {
            let ans = session.run(&format!("SELECT * FROM \"{name}\""))?;
            let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new(); threads];
            for (i, b) in ans.batches.into_iter().enumerate() {
                parts[i % threads].push(b);
            }
            let table = MemTable::try_new(ans.schema, parts).map_err(|e| query_error(e, &[]))?;
            ctx.register_table(name.as_str(), Arc::new(table))
                .map_err(|e| query_error(e, &[]))?;
        }
        Ok(MemorySession {
            ctx,
            runtime,
            tables: session.tables().to_vec(),
        })
    }

    /// Plans and runs `sql` over the in-memory tables (no device scans).
    pub fn run(&self, sql: &str) -> Result<Answer, SqlError> {
        execute(&self.ctx, &self.runtime, sql, &self.tables)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ScanSettings;
    use csd_device::NvmeDevice;
    use csd_ftl::{Ftl, FtlConfig};
    use csd_host::{Catalog, Client};
    use csd_nand::Nand;
    use csd_sim::DeviceConfig;
    use csd_table::Layout;
    use csd_table::datagen::{TpchGenerator, TpchTable};

    #[test]
    fn memory_tables_answer_as_the_device_does() {
        let cfg = DeviceConfig::preset("tiny").expect("preset");
        let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
        let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
        let mut c = Client::new(NvmeDevice::new(ftl)).expect("client");
        for t in [TpchTable::Nation, TpchTable::Region] {
            let g = TpchGenerator::new(t, 0.01).expect("generator");
            Catalog::load(&mut c, t.name(), g, Layout::Pax, &mut |_| {}).expect("load");
        }
        let s = SqlSession::new(c, cfg, ScanSettings::new(crate::Choice::Auto)).expect("session");
        let m = MemorySession::snapshot(&s, 2).expect("snapshot");
        let q = "SELECT r_name, count(*) FROM nation JOIN region ON n_regionkey = r_regionkey \
                 GROUP BY r_name ORDER BY r_name";
        let dev = s.run(q).expect("device").rows().expect("rows");
        let mem = m.run(q).expect("memory");
        assert!(mem.scans.is_empty(), "no device scan in the memory session");
        assert_eq!(mem.rows().expect("rows"), dev);
        assert_eq!(dev.len(), 5);
        let err = m.run("SELECT * FROM nope").expect_err("unknown table");
        assert!(err.to_string().contains("nation"), "{err}");
    }
}

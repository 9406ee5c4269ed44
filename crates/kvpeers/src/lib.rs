//! Peers of the batch-io key-value store: [redb] (a copy-on-write B-tree) and [fjall]
//! (an LSM tree), each on a real file, behind the same YCSB driver
//! ([`csd_kv::ycsb::KvTarget`]) so that `csd bench ycsb --compare redb,fjall` prints their
//! wall-clock ops/s beside the emulator's.
//!
//! Durability is matched to the store's: an update is acknowledged once it is in the
//! engine (redb: a write transaction committed with `Durability::None`; fjall: the
//! journal buffer), and [`KvTarget::sync`] makes everything durable (redb: an empty
//! transaction committed with `Durability::Immediate`; fjall: `persist(SyncAll)`).

use csd_kv::KvError;
use csd_kv::ycsb::KvTarget;
use std::path::Path;

fn err(what: &str, e: impl std::fmt::Display) -> KvError {
    KvError::Config(format!("{what}: {e}"))
}

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("ycsb");

/// redb on a file.
pub struct Redb {
    db: redb::Database,
}

impl Redb {
    /// Create (or truncate) the database file at `path`.
    pub fn create(path: &Path) -> Result<Redb, KvError> {
        let _ = std::fs::remove_file(path);
        let db = redb::Database::create(path).map_err(|e| err("redb create", e))?;
        Ok(Redb { db })
    }

    fn write(
        &mut self,
        durable: bool,
        f: impl FnOnce(&mut redb::Table<&[u8], &[u8]>) -> Result<(), redb::StorageError>,
    ) -> Result<(), KvError> {
        let mut txn = self
            .db
            .begin_write()
            .map_err(|e| err("redb begin_write", e))?;
        let d = if durable {
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        };
        txn.set_durability(d)
            .map_err(|e| err("redb durability", e))?;
        {
            let mut t = txn
                .open_table(TABLE)
                .map_err(|e| err("redb open_table", e))?;
            f(&mut t).map_err(|e| err("redb write", e))?;
        }
        txn.commit().map_err(|e| err("redb commit", e))
    }
}

impl KvTarget for Redb {
    fn label(&self) -> String {
        "redb".into()
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        use redb::ReadableDatabase;
        let txn = self
            .db
            .begin_read()
            .map_err(|e| err("redb begin_read", e))?;
        let t = match txn.open_table(TABLE) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(err("redb open_table", e)),
        };
        let v = t.get(key).map_err(|e| err("redb get", e))?;
        Ok(v.map(|v| v.value().to_vec()))
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.write(false, |t| t.insert(key, value).map(|_| ()))
    }
    fn scan(&mut self, start: &[u8], n: usize) -> Result<usize, KvError> {
        use redb::ReadableDatabase;
        let txn = self
            .db
            .begin_read()
            .map_err(|e| err("redb begin_read", e))?;
        let t = txn
            .open_table(TABLE)
            .map_err(|e| err("redb open_table", e))?;
        let mut k = 0;
        for r in t.range(start..).map_err(|e| err("redb range", e))?.take(n) {
            r.map_err(|e| err("redb range", e))?;
            k += 1;
        }
        Ok(k)
    }
    fn sync(&mut self) -> Result<(), KvError> {
        self.write(true, |_| Ok(()))
    }
}

/// fjall on a directory.
pub struct Fjall {
    db: fjall::Database,
    ks: fjall::Keyspace,
}

impl Fjall {
    /// Create (or empty) the database directory at `path`.
    pub fn create(path: &Path) -> Result<Fjall, KvError> {
        let _ = std::fs::remove_dir_all(path);
        let db = fjall::Database::builder(path)
            .open()
            .map_err(|e| err("fjall open", e))?;
        let ks = db
            .keyspace("ycsb", fjall::KeyspaceCreateOptions::default)
            .map_err(|e| err("fjall keyspace", e))?;
        Ok(Fjall { db, ks })
    }
}

impl KvTarget for Fjall {
    fn label(&self) -> String {
        "fjall".into()
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let v = self.ks.get(key).map_err(|e| err("fjall get", e))?;
        Ok(v.map(|v| v.to_vec()))
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.ks
            .insert(key, value)
            .map_err(|e| err("fjall insert", e))
    }
    fn scan(&mut self, start: &[u8], n: usize) -> Result<usize, KvError> {
        let mut k = 0;
        for g in self.ks.range(start.to_vec()..).take(n) {
            g.key().map_err(|e| err("fjall range", e))?;
            k += 1;
        }
        Ok(k)
    }
    fn sync(&mut self) -> Result<(), KvError> {
        self.db
            .persist(fjall::PersistMode::SyncAll)
            .map_err(|e| err("fjall persist", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_kv::ycsb::{self, KeyDist, Limit, Workload, YcsbConfig};

    fn check(t: &mut dyn KvTarget) {
        ycsb::load(t, 2000, &mut |_| {}).unwrap();
        for w in [Workload::ReadHeavy, Workload::E] {
            let c = YcsbConfig {
                records: 2000,
                workload: w,
                dist: KeyDist::Zipfian(0.99),
                limit: Limit::Ops(2000),
                seed: 1,
            };
            let r = ycsb::run(t, &c, &mut |_| {}).unwrap();
            assert_eq!(r.ops.total(), 2000);
            assert_eq!(r.ops.read_misses, 0, "{}", t.label());
        }
        assert_eq!(
            t.get(&ycsb::record_key(5)).unwrap().map(|v| v.len()),
            Some(100)
        );
    }

    #[test]
    fn redb_and_fjall_run_ycsb_and_find_every_record() {
        let dir = tempfile::tempdir().unwrap();
        check(&mut Redb::create(&dir.path().join("r.redb")).unwrap());
        check(&mut Fjall::create(&dir.path().join("f")).unwrap());
    }
}

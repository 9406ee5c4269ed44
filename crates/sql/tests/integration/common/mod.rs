//! Helpers shared by the SQL tests: a table of `(k, v)` rows and its load, a device with
//! MAP-entry extension bytes for per-page indexes, a session (`index.rs`, `join.rs`,
//! `dml.rs`), and an Arrow batch and its load through the importer (`types.rs`,
//! `index_types.rs`, `hw_compare.rs`).

#![allow(dead_code)]

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::Client;
use csd_nand::Nand;
use csd_sim::DeviceConfig;
use csd_sql::{Choice, ScanSettings, SqlSession};
use csd_table::datagen::RowSource;
use csd_table::{Column, ColumnType, Layout, Schema};

/// Rows `(k INT64, v INT32)` of table `name` from a vector, with a constant
/// `note CHAR(4)` column after them when asked (a column an index must refuse).
pub struct Rows {
    schema: Schema,
    rows: Vec<(i64, i32)>,
    note: bool,
    next: usize,
}

impl Rows {
    /// `(k, v)` rows.
    pub fn new(name: &str, rows: Vec<(i64, i32)>) -> Rows {
        Rows::build(name, rows, false)
    }

    /// `(k, v, note)` rows, `note` always `abcd`.
    pub fn with_note(name: &str, rows: Vec<(i64, i32)>) -> Rows {
        Rows::build(name, rows, true)
    }

    fn build(name: &str, rows: Vec<(i64, i32)>, note: bool) -> Rows {
        let mut cols = vec![
            Column::new("k", ColumnType::Int64),
            Column::new("v", ColumnType::Int32),
        ];
        if note {
            cols.push(Column::new("note", ColumnType::Char(4)));
        }
        Rows {
            schema: Schema::new(name, cols).expect("schema"),
            rows,
            note,
            next: 0,
        }
    }
}

impl RowSource for Rows {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        let Some(&(k, v)) = self.rows.get(self.next) else {
            return false;
        };
        self.next += 1;
        row.clear();
        row.extend_from_slice(&k.to_le_bytes());
        row.extend_from_slice(&v.to_le_bytes());
        if self.note {
            row.extend_from_slice(b"abcd");
        }
        true
    }

    fn remaining_rows(&self) -> Option<u64> {
        Some((self.rows.len() - self.next) as u64)
    }
}

/// An in-memory device of `preset` with 24 extension bytes per MAP entry.
pub fn client(preset: &str) -> (Client, DeviceConfig) {
    let cfg = DeviceConfig::preset(preset).expect("preset");
    let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
    let ftl = Ftl::format(
        nand,
        FtlConfig {
            ext_bytes: 24,
            ..FtlConfig::default()
        },
    )
    .expect("format");
    (Client::new(NvmeDevice::new(ftl)).expect("client"), cfg)
}

/// Loads `rows` as its table in `layout`.
pub fn load(c: &mut Client, rows: Rows, layout: Layout) {
    let name = rows.schema.name().to_string();
    csd_host::Catalog::load(c, &name, rows, layout, &mut |_| {})
        .unwrap_or_else(|e| panic!("load {name}: {e}"));
}

/// A SQL session over the device, scans in-host unless a query says otherwise.
pub fn session(c: Client, cfg: DeviceConfig) -> SqlSession {
    SqlSession::new(
        c,
        cfg,
        ScanSettings::new(Choice::Fixed(csd_host::Strategy::Ihp)),
    )
    .expect("session")
}

/// A tiny deterministic generator (a table's seed), for the randomized tables.
pub struct Gen(pub u64);

impl Gen {
    /// The next value (an LCG step, high bits).
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 17
    }

    /// A value in `0..n` (`0` for `n = 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One record batch of the named columns, every column nullable but `id`.
pub fn batch_of(
    cols: Vec<(&str, datafusion::arrow::array::ArrayRef)>,
) -> (
    datafusion::arrow::datatypes::SchemaRef,
    datafusion::arrow::array::RecordBatch,
) {
    use datafusion::arrow::datatypes::{Field, Schema as ArrowSchema};
    let schema = std::sync::Arc::new(ArrowSchema::new(
        cols.iter()
            .map(|(name, a)| Field::new(*name, a.data_type().clone(), *name != "id"))
            .collect::<Vec<_>>(),
    ));
    let batch = datafusion::arrow::array::RecordBatch::try_new(
        schema.clone(),
        cols.into_iter().map(|(_, a)| a).collect(),
    )
    .expect("batch");
    (schema, batch)
}

/// Loads `batch` as table `name` in `layout` through the importer (Arrow types one to
/// one, as `csd load parquet` maps them).
pub fn load_arrow(
    c: &mut Client,
    name: &str,
    schema: &datafusion::arrow::datatypes::SchemaRef,
    batch: &datafusion::arrow::array::RecordBatch,
    layout: Layout,
) {
    let rows = csd_sql::import::to_rows(
        name,
        schema,
        std::slice::from_ref(batch),
        &csd_sql::import::ImportOptions::default(),
        false,
        std::path::Path::new("<test>"),
    )
    .expect("import");
    csd_host::Catalog::load(c, name, rows, layout, &mut |_| {})
        .unwrap_or_else(|e| panic!("load {name}: {e}"));
}

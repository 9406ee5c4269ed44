//! A device partial aggregation with more groups than its session arena holds (smart-ssd
//! §3.2: a session gets a fixed arena, no malloc): the device emits the groups it has as a
//! chunk, starts an empty group table and goes on; the host merges every chunk, as partial
//! aggregates always merge. 100K groups of a GROUP BY through every strategy (IHP on the
//! host, the embedded-CPU ISP and the hardware ISP) must give the reference answer.

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_host::{Catalog, Client, HostError, ScanOptions, Strategy, TableInfo, run_scan};
use csd_nand::Nand;
use csd_query::{AccView, AggFunc, Aggregate, Aggregation, DataType, Expr, PartialResult, Plan};
use csd_sim::DeviceConfig;
use csd_table::datagen::RowSource;
use csd_table::{Column, ColumnType, Layout, Schema};
use std::collections::HashMap;

/// Distinct grouping keys.
const GROUPS: u64 = 100_000;
/// Rows: every key three times, spread over the table (so one key comes back in several
/// device chunks and must be merged on the host).
const ROWS: u64 = 3 * GROUPS;

/// `(k INT, v INT)`: row `i` has key `i * 7919 mod GROUPS` and value `i mod 1000`.
struct Keyed {
    schema: Schema,
    next: u64,
}

impl Keyed {
    fn new() -> Keyed {
        let schema = Schema::new(
            "g",
            vec![
                Column::new("k", ColumnType::Int32),
                Column::new("v", ColumnType::Int32),
            ],
        )
        .expect("schema");
        Keyed { schema, next: 0 }
    }

    fn key(i: u64) -> i32 {
        ((i * 7919) % GROUPS) as i32
    }

    fn value(i: u64) -> i32 {
        (i % 1000) as i32
    }
}

impl RowSource for Keyed {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn next_row(&mut self, row: &mut Vec<u8>) -> bool {
        if self.next >= ROWS {
            return false;
        }
        let i = self.next;
        self.next += 1;
        row.clear();
        row.extend_from_slice(&Keyed::key(i).to_le_bytes());
        row.extend_from_slice(&Keyed::value(i).to_le_bytes());
        true
    }

    fn remaining_rows(&self) -> Option<u64> {
        Some(ROWS - self.next)
    }
}

/// The answer computed directly from the rows: key -> (count, sum of v).
fn reference() -> HashMap<i32, (u64, i128)> {
    let mut m: HashMap<i32, (u64, i128)> = HashMap::new();
    for i in 0..ROWS {
        let e = m.entry(Keyed::key(i)).or_default();
        e.0 += 1;
        e.1 += i128::from(Keyed::value(i));
    }
    m
}

/// `SELECT k, COUNT(*), SUM(v) FROM g GROUP BY k` as a device partial aggregation.
fn plan(info: &TableInfo) -> Plan {
    let v = Expr::column(&info.schema, 1).expect("v");
    let agg = Aggregation {
        group_by: vec![0],
        aggregates: vec![
            Aggregate {
                func: AggFunc::CountStar,
                arg: None,
                ty: DataType::Int,
            },
            Aggregate {
                func: AggFunc::Sum,
                arg: Some(v),
                ty: DataType::Int,
            },
        ],
    };
    Plan::aggregation(&info.name, &info.schema, agg, None)
}

/// key -> (count, sum) of a merged state.
fn groups(r: &PartialResult) -> HashMap<i32, (u64, i128)> {
    let PartialResult::Aggregate(st) = r else {
        panic!("not an aggregation")
    };
    let Some(AccView::Sum(sum)) = st.accumulator(1) else {
        panic!("no sum")
    };
    (0..st.group_count())
        .map(|g| {
            let k = i32::from_le_bytes(st.key_bytes(g, 0).try_into().expect("4-byte key"));
            (k, (st.group_rows()[g], sum[g]))
        })
        .collect()
}

#[test]
fn a_group_by_beyond_the_session_arena_hands_its_overflow_to_the_host() {
    // The tiny preset's 1 MiB session arena holds 1 MiB / (4 + 2 x 24 + 8) B = 17,476
    // groups: the device has to hand its groups over several times.
    let cfg = DeviceConfig::preset("tiny").expect("tiny");
    let per_group = 4 + 2 * 24 + 8;
    let arena_groups = cfg.isp.session_arena_kib as u64 * 1024 / per_group;
    assert!(
        GROUPS > 4 * arena_groups,
        "the test must overflow the arena"
    );
    let want = reference();
    assert_eq!(want.len() as u64, GROUPS);
    for layout in [Layout::Pax, Layout::Nsm] {
        let nand = Nand::new_in_memory(cfg.clone()).expect("nand");
        let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
        let mut c = Client::new(NvmeDevice::new(ftl)).expect("client");
        Catalog::load(&mut c, "g", Keyed::new(), layout, &mut |_| {}).expect("load");
        let info = Catalog::read(&mut c)
            .expect("catalog")
            .get("g")
            .expect("g")
            .clone();
        let p = plan(&info);
        for s in Strategy::ALL {
            let mut all = PartialResult::new(&p);
            let mut chunks = 0u32;
            let rep = run_scan(
                &mut c,
                &info,
                &p,
                &cfg,
                &ScanOptions::new(s),
                &mut |chunk| {
                    chunks += 1;
                    all.merge(chunk)
                        .map_err(|e| HostError::Invalid(e.to_string()))
                },
            )
            .unwrap_or_else(|e| panic!("{s} over {layout}: {e}"));
            let got = groups(&all);
            assert_eq!(got.len() as u64, GROUPS, "{s} over {layout}: groups");
            assert!(
                got == want,
                "{s} over {layout}: the groups differ from the reference"
            );
            assert_eq!(rep.work.rows_selected, ROWS, "{s} over {layout}");
            if s != Strategy::Ihp {
                // The device handed its groups over in several chunks, each within the
                // arena, and the overflowing groups reached the host.
                assert!(
                    chunks as u64 >= GROUPS.div_ceil(arena_groups),
                    "{s} over {layout}: {chunks} chunks for {GROUPS} groups of which the \
                     arena holds {arena_groups}"
                );
                assert!(rep.result_rows >= GROUPS, "{s} over {layout}");
            }
        }
    }
}

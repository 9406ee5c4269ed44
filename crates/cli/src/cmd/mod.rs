//! One module per command (or family of subcommands), each holding its clap options and
//! its body. `main.rs` only names them in the command tree and dispatches.
//!
//! | command | module |
//! |---|---|
//! | `csd demo` | [`demo`] |
//! | `csd config show / list / validate` | [`config`] |
//! | `csd device create / smart / info` | [`device`]; `device check`: [`check`] |
//! | `csd io` | [`io`] |
//! | `csd torture` | [`torture`] |
//! | `csd model scan` | [`model`] |
//! | `csd serve` | [`serve`] |
//! | `csd kv serve` | [`kv_serve`] |
//! | `csd load ...`, `csd tables` | [`tables`] |
//! | `csd index create / list / drop` | [`index`] |
//! | `csd query` (and the demo's query step; SQL helpers the others share) | [`query`] |
//! | `csd bench query` | [`bench_query`] |
//! | `csd sql` | [`sql`] |
//! | `csd array ...`, `csd bench array` | [`array`] |
//! | `csd bench recovery` | [`bench_recovery`] |
//! | `csd bench tpch` | [`bench_tpch`] |
//! | `csd bench fdtree` | [`bench_fdtree`] |
//! | `csd bench oneshot` | [`bench_oneshot`] |
//! | `csd bench open` | [`bench_open`] |
//! | `csd bench serve` | [`bench_serve`] |
//! | `csd bench flixr` | [`bench_flixr`] |
//! | `csd bench ycsb` | [`bench_ycsb`]; its `--compare` peers: [`kvpeers`] |
//! | `csd worker` | [`worker`] |
//!
//! The paper reproductions (`csd repro ...`) are in [`crate::repro`]; they call into
//! [`query`], [`bench_fdtree`], [`bench_flixr`] and [`bench_ycsb`] for the runs those
//! commands also do. Commands share options through [`crate::args`], open devices
//! through [`crate::image`] and print through [`crate::report`]; no command calls back
//! into `main`.

pub(crate) mod array;
pub(crate) mod bench_fdtree;
pub(crate) mod bench_flixr;
pub(crate) mod bench_oneshot;
pub(crate) mod bench_open;
pub(crate) mod bench_query;
pub(crate) mod bench_recovery;
pub(crate) mod bench_serve;
pub(crate) mod bench_tpch;
pub(crate) mod bench_ycsb;
pub(crate) mod check;
pub(crate) mod config;
pub(crate) mod demo;
pub(crate) mod device;
pub(crate) mod index;
pub(crate) mod io;
pub(crate) mod kv_serve;
pub(crate) mod kvpeers;
pub(crate) mod model;
pub(crate) mod query;
pub(crate) mod serve;
pub(crate) mod sql;
pub(crate) mod tables;
pub(crate) mod torture;
pub(crate) mod worker;

//! csd-sql's integration tests, one test binary (one link of DataFusion and csd instead of
//! one per file: the workspace's clean test build and CI spend most of their time
//! compiling and linking such binaries). Each module is one subject; run one with
//! `cargo test -p csd-sql --test integration <module>::`.

mod common;

mod array;
mod dml;
mod hw_compare;
mod index;
mod index_types;
mod join;
mod selection;
mod shared;
mod tpch;
mod types;

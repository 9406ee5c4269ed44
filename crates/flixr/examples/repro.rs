//! `csd repro flixr` without the CLI (which links DataFusion): the same report, for a
//! release build of this crate alone.
//!
//! `cargo run --release -p csd-flixr --example repro -- [out-dir] [sf] [queries] [tpcc-txns]
//! [trend-sf,...] [trend-warehouses,...] [workload,...] [sweeps]` (the trend as `csd repro
//! flixr`'s `--trend-sf` and `--trend-warehouses`: SF 0.03 and 0.1 and 3 warehouses by
//! default, `-` for none; the workloads as its `--workloads`, `all` by default;
//! the sweeps of what the paper does not report by their default rule, `-` for none).

use csd_flixr::{Setup, Workload};

/// Exits with a usage error naming `what` and the value given.
fn usage(what: &str, v: &str) -> ! {
    eprintln!(
        "error: {what} {v:?}; usage: repro [out-dir] [sf] [queries] [tpcc-txns] \
         [trend-sf,...|-] [trend-warehouses,...|-] [workload,...] [sweeps|-]"
    );
    std::process::exit(2);
}

/// Argument `i` parsed as a number, if given.
fn number<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Option<T> {
    let v = args.get(i)?;
    Some(v.parse().unwrap_or_else(|_| usage(what, v)))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = args
        .first()
        .cloned()
        .unwrap_or_else(|| "repro/flixr".into());
    if out.starts_with('-') {
        // `--help`, `--version`: an output directory never starts with a dash here.
        usage("an output directory, not an option:", &out);
    }
    let mut s = Setup::default();
    if let Some(v) = number(&args, 1, "scale factor") {
        s.sf = v;
    }
    if let Some(v) = number(&args, 2, "query count") {
        s.queries = v;
    }
    if let Some(v) = number(&args, 3, "TPC-C transaction count") {
        s.tpcc_txns = v;
    }
    let list = |i: usize, default: &str| -> String {
        args.get(i).cloned().unwrap_or_else(|| default.into())
    };
    let (tsf, tw) = (list(4, "0.03,0.1"), list(5, "3"));
    let ws = list(6, "all");
    let sweeps = list(7, "default");
    let sens = if sweeps == "-" {
        csd_flixr::repro::Sensitivity::none()
    } else {
        csd_flixr::repro::Sensitivity::default()
    };
    let mut workloads = Vec::new();
    for w in ws.split(',') {
        match (w, Workload::parse(w)) {
            ("all", _) => workloads.extend(Workload::ALL),
            (_, Some(w)) => workloads.push(w),
            (_, None) => {
                eprintln!(
                    "error: unknown workload {w:?}; one of all, {}",
                    Workload::ALL.map(|w| w.name()).join(", ")
                );
                std::process::exit(2);
            }
        }
    }
    let trend = csd_flixr::repro::Trend {
        sf: tsf.split(',').filter_map(|v| v.parse().ok()).collect(),
        warehouses: tw.split(',').filter_map(|v| v.parse().ok()).collect(),
    };
    let cmd = format!(
        "cargo run --release -p csd-flixr --example repro -- {out} {} {} {} {tsf} {tw} {ws} {sweeps}",
        s.sf, s.queries, s.tpcc_txns
    );
    let r = csd_flixr::repro::run(
        &s,
        &workloads,
        &[4, 64, 16 << 10],
        &trend,
        &sens,
        cmd,
        |m| eprintln!("{m}"),
    );
    match r.and_then(|r| csd_flixr::repro::write_report(&r, std::path::Path::new(&out))) {
        Ok(md) => println!("{md}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

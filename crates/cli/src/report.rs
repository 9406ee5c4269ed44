//! Tables and JSON for the CLI's reports, and its progress bars. Every number printed
//! here comes from an `IoReport` or the device's own counters. Commands call into this
//! module; it calls no command.

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use csd_device::IoReport;
use csd_nand::{BlockId, Nand};
use serde_json::{Map, Value};
use std::path::Path;

/// A table with a header row.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    t
}

/// Human byte count, and a device's geometry in one line (shared with the reproduction
/// library).
pub use csd_repro::util::{bytes, geometry_line};

/// `csd device info --json`: the image's device, geometry and wear.
#[derive(serde::Serialize)]
struct DeviceInfo<'a> {
    image: String,
    device: &'a str,
    description: &'a str,
    channels: u32,
    ways: u32,
    dies_per_chip: u32,
    planes_per_die: u32,
    blocks_per_plane: u32,
    pages_per_block: u32,
    page_size_bytes: u32,
    sector_size_bytes: u32,
    oob_per_sector_bytes: u32,
    raw_capacity_bytes: u64,
    blocks: u64,
    factory_bad_blocks: u32,
    programmed_pages: u64,
    erase_count_min: u32,
    erase_count_avg: f64,
    erase_count_max: u32,
    image_apparent_bytes: Option<u64>,
    model_seq_read_mb_s: f64,
}

/// `csd device info`.
pub fn device_info(path: &Path, nand: &Nand, json_out: bool) {
    let c = nand.config();
    let g = c.geometry;
    let (pe_min, pe_max, pe_avg, bad, pages) = wear_summary(nand);
    let disk = std::fs::metadata(path).ok();
    if json_out {
        let v = DeviceInfo {
            image: path.display().to_string(),
            device: &c.name,
            description: &c.description,
            channels: g.channels,
            ways: g.ways,
            dies_per_chip: g.dies_per_chip,
            planes_per_die: g.planes_per_die,
            blocks_per_plane: g.blocks_per_plane,
            pages_per_block: g.pages_per_block,
            page_size_bytes: g.page_size,
            sector_size_bytes: g.sector_size,
            oob_per_sector_bytes: g.oob_per_sector,
            raw_capacity_bytes: g.raw_capacity(),
            blocks: g.total_blocks(),
            factory_bad_blocks: bad,
            programmed_pages: pages,
            erase_count_min: pe_min,
            erase_count_avg: pe_avg,
            erase_count_max: pe_max,
            image_apparent_bytes: disk.as_ref().map(|m| m.len()),
            model_seq_read_mb_s: model_seq_read_mb_s(c),
        };
        match serde_json::to_value(&v) {
            Ok(v) => println!("{v:#}"),
            Err(e) => eprintln!("error: the report could not be written as JSON: {e}"),
        }
        return;
    }
    let mut t = table(&["field", "value"]);
    let rows: Vec<(&str, String)> = vec![
        ("image", path.display().to_string()),
        ("device", format!("{} — {}", c.name, c.description)),
        ("geometry", geometry_line(c)),
        (
            "sector / OOB",
            format!(
                "{} B sectors, {} B OOB each",
                g.sector_size, g.oob_per_sector
            ),
        ),
        (
            "flash",
            format!(
                "{:?}, tR {:?} us, tPROG {:?} us, tBERS {} us, endurance {}",
                c.flash.cell,
                c.flash.t_read_us,
                c.flash.t_prog_us,
                c.flash.t_erase_us,
                c.flash.endurance
            ),
        ),
        (
            "controller",
            format!(
                "{} cores @ {} MHz, DRAM {} MiB @ {} MT/s x {} bit",
                c.cpu.cores,
                c.cpu.clock_mhz,
                c.dram.size_mib,
                c.dram.rate_mt_s,
                c.dram.bus_width_bits
            ),
        ),
        (
            "blocks",
            format!("{} ({} factory bad)", g.total_blocks(), bad),
        ),
        (
            "programmed pages",
            format!("{pages} of {}", g.total_pages()),
        ),
        (
            "erase count min/avg/max",
            format!("{pe_min} / {pe_avg:.2} / {pe_max}"),
        ),
        (
            "model seq. read",
            format!("{:.0} MB/s", model_seq_read_mb_s(c)),
        ),
        ("source", c.source.clone()),
    ];
    for (k, v) in rows {
        t.add_row(vec![k.to_string(), v]);
    }
    println!("{t}");
}

/// `csd io` as tables.
pub fn print_io(r: &IoReport, cmd: &str) {
    let s = &r.spec;
    println!(
        "{} on {}: bs={} iodepth={} ops={} ({} reads, {} writes){}",
        s.rw,
        r.device,
        s.bs,
        s.iodepth,
        r.ops,
        r.reads,
        r.writes,
        match (r.errors, r.bad_block_reads) {
            (0, _) => String::new(),
            (e, 0) => format!(", {e} media errors"),
            (e, b) if b == e => format!(
                ", {e} media errors (reads of factory-bad blocks: a raw array does not map around them)"
            ),
            (e, b) => format!(
                ", {e} media errors ({b} of them reads of factory-bad blocks: a raw array does not map around them)"
            ),
        }
    );
    let mut t = table(&["modeled", "value"]);
    t.add_row(vec!["IOPS".into(), format!("{:.0}", r.iops())]);
    t.add_row(vec![
        "bandwidth".into(),
        format!("{:.1} MB/s", r.bandwidth_mb_s()),
    ]);
    t.add_row(vec![
        "modeled time".into(),
        format!("{:.6} s", r.modeled_ns as f64 / 1e9),
    ]);
    println!("{t}");
    let mut t = table(&["latency (us)", "mean", "p50", "p99", "p99.9", "max"]);
    for (name, l) in [
        ("all", &r.latency),
        ("read", &r.read_latency),
        ("write", &r.write_latency),
    ] {
        if l.count > 0 {
            t.add_row(vec![
                name.into(),
                format!("{:.1}", l.mean_us),
                format!("{:.1}", l.p50_us),
                format!("{:.1}", l.p99_us),
                format!("{:.1}", l.p999_us),
                format!("{:.1}", l.max_us),
            ]);
        }
    }
    println!("{t}");
    let mut t = table(&[
        "resource",
        "count",
        "mean util.",
        "max util.",
        "waits behind later arrivals",
        "their share of waiting",
    ]);
    for u in &r.utilization {
        let mark = if Some(u.class) == r.bottleneck {
            " <- bottleneck"
        } else {
            ""
        };
        t.add_row(vec![
            format!("{}{mark}", u.class),
            u.members.to_string(),
            format!("{:.1}%", u.mean * 100.0),
            format!("{:.1}%", u.max * 100.0),
            u.inversions.to_string(),
            u.inversion_wait_share()
                .map_or("-".into(), |x| format!("{:.1}%", x * 100.0)),
        ]);
    }
    println!("{t}");
    if r.spec.time_model == csd_sim::events::TimeModel::Events {
        println!(
            "time model: events (the event core served every resource first-come first-served \
             in modeled arrival order; docs/time-model.md)"
        );
    }
    let mut t = table(&["energy", "joules"]);
    for (k, v) in r.energy.components() {
        t.add_row(vec![
            k.trim_end_matches("_j").to_string(),
            format!("{v:.4}"),
        ]);
    }
    t.add_row(vec![
        "device total".into(),
        format!("{:.4}", r.energy.device_j()),
    ]);
    t.add_row(vec![
        "host total".into(),
        format!("{:.4}", r.energy.host_total_j()),
    ]);
    t.add_row(vec!["total".into(), format!("{:.4}", r.energy.total_j())]);
    println!("{t}");
    println!(
        "emulator: {:.3} s wall-clock, {:.0} ops/s ({:.2}x real time); {:.3} CPU s, {:.0} ops per CPU second",
        r.wall_s,
        r.wall_ops_per_s(),
        (r.modeled_ns as f64 / 1e9) / r.wall_s.max(1e-9),
        r.cpu_s,
        r.cpu_ops_per_s()
    );
    println!(
        "device: {}  seed: {}  clock: {:?}",
        r.device, s.seed, s.clock
    );
    println!("reproduce: {cmd}");
}

/// A report's JSON object with the keys a command adds to it (`command`, `image`).
#[derive(serde::Serialize)]
struct Extended<'a, T: serde::Serialize> {
    #[serde(flatten)]
    report: T,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<String>,
}

/// `csd io --json`: one object, snake_case keys with units.
pub fn io_json(r: &IoReport, cmd: &str) -> Value {
    let v = Extended {
        report: r.to_json(),
        command: Some(cmd),
        image: None,
    };
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The demo's comparison table.
pub fn print_demo(runs: &[(String, IoReport)]) {
    let mut t = table(&[
        "workload",
        "IOPS",
        "MB/s",
        "p50 us",
        "p99 us",
        "bottleneck",
        "energy J",
        "emulator ops/s",
    ]);
    for (name, r) in runs {
        t.add_row(vec![
            name.clone(),
            format!("{:.0}", r.iops()),
            format!("{:.0}", r.bandwidth_mb_s()),
            format!("{:.1}", r.latency.p50_us),
            format!("{:.1}", r.latency.p99_us),
            r.bottleneck.map_or("-".into(), |b| b.to_string()),
            format!("{:.3}", r.energy.total_j()),
            format!("{:.0}", r.wall_ops_per_s()),
        ]);
    }
    println!("{t}");
}

/// FTL figures after a block-mode run (counters of the measured window).
pub fn print_ftl(f: &csd_ftl::Ftl) {
    let st = f.stats();
    let gb = st.gc_bytes(f.page_size() as u64, f.lba_size() as u64);
    let (mn, avg, mx) = f.erase_counts();
    let mut t = table(&["FTL", "value"]);
    let mut rows: Vec<(&str, String)> = vec![
        (
            "write amplification (user+GC)/user",
            format!("{:.3}", gb.write_amplification()),
        ),
        (
            "physical write amplification (all programs)",
            format!(
                "{:.3}",
                st.physical_write_amplification(f.sectors_per_page())
            ),
        ),
        (
            "read amplification (user+GC)/user",
            format!("{:.3}", gb.read_amplification()),
        ),
        (
            "GC overhead (read+write)/reclaimed",
            format!("{:.3}", gb.gc_overhead()),
        ),
        (
            "GC victims / erases",
            format!("{} / {}", st.gc_victims, st.erases),
        ),
        (
            "flash programs user / GC / meta",
            format!(
                "{} / {} / {}",
                st.user_programs, st.gc_programs, st.meta_programs
            ),
        ),
        (
            "flash reads user / GC",
            format!("{} / {}", st.user_reads, st.gc_reads),
        ),
        (
            "sectors read never written (no flash read)",
            st.unwritten_read_sectors.to_string(),
        ),
        ("padding sectors", st.padding_sectors.to_string()),
        (
            "MAP cache hit rate",
            format!(
                "{:.2}% ({} MAP pages cached at most)",
                st.map_hit_rate() * 100.0,
                f.map_cache_pages()
            ),
        ),
        ("checkpoints", st.checkpoints.to_string()),
        ("free blocks", f.free_blocks().to_string()),
        ("bad blocks", f.bad_blocks().to_string()),
        (
            "erase count min / avg / max",
            format!("{mn} / {avg:.2} / {mx}"),
        ),
        ("logical capacity", bytes(f.lbas() * f.lba_size() as u64)),
    ];
    let pb = f.page_buffer();
    if pb.capacity_pages > 0 {
        rows.push((
            "page buffer hits / misses since open",
            format!(
                "{} / {} ({} of {} flash pages held)",
                pb.hits, pb.misses, pb.pages, pb.capacity_pages
            ),
        ));
    }
    for (k, v) in rows {
        t.add_row(vec![k.to_string(), v]);
    }
    println!("{t}");
}

/// Prints `v` as one line of JSON (what the commands' `--json` prints): typed reports
/// are turned into JSON here, at the edge.
/// Keys come out sorted, as in every JSON object csd prints.
pub fn print_json(v: &impl serde::Serialize) {
    match serde_json::to_value(v) {
        Ok(v) => println!("{v}"),
        Err(e) => eprintln!("error: the report could not be written as JSON: {e}"),
    }
}

/// The FTL's figures of a run, as `csd io --json` and `csd device info --json` print
/// them (the key names are the field names).
#[derive(Debug, Clone, serde::Serialize)]
pub struct FtlFigures {
    /// `(user write + GC write) / user write` (batch-io §8.2.3).
    pub write_amplification: f64,
    /// Flash sectors programmed (padding, metadata and log included) per host sector
    /// written.
    pub physical_write_amplification: f64,
    /// `(user read + GC read) / user read` (batch-io §8.2.3).
    pub read_amplification: f64,
    /// `(host + GC-moved sectors) / host sectors`.
    pub gc_write_amplification: f64,
    /// `(GC read + GC write) / reclaimed space` (batch-io §8.2.3).
    pub gc_overhead: f64,
    /// User bytes read.
    pub user_read_bytes: u64,
    /// User bytes written.
    pub user_write_bytes: u64,
    /// Bytes GC read.
    pub gc_read_bytes: u64,
    /// Bytes GC wrote.
    pub gc_write_bytes: u64,
    /// Bytes GC reclaimed.
    pub reclaimed_bytes: u64,
    /// Blocks GC chose as victims.
    pub gc_victims: u64,
    /// Block erases.
    pub erases: u64,
    /// Hit rate of the MAP page cache.
    pub map_cache_hit_rate: f64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Free blocks now.
    pub free_blocks: u32,
    /// Retired blocks.
    pub bad_blocks: u32,
    /// Lowest erase count of a block.
    pub erase_count_min: u32,
    /// Mean erase count.
    pub erase_count_avg: f64,
    /// Highest erase count of a block.
    pub erase_count_max: u32,
    /// Logical capacity in bytes.
    pub logical_capacity_bytes: u64,
    /// Sectors the host read that were never written (zeros from the MAP, no flash read).
    pub unwritten_read_sectors: u64,
}

impl FtlFigures {
    /// The figures `f` has counted so far.
    pub fn of(f: &csd_ftl::Ftl) -> FtlFigures {
        let st = f.stats();
        let gb = st.gc_bytes(f.page_size() as u64, f.lba_size() as u64);
        let (erase_count_min, erase_count_avg, erase_count_max) = f.erase_counts();
        FtlFigures {
            write_amplification: gb.write_amplification(),
            physical_write_amplification: st.physical_write_amplification(f.sectors_per_page()),
            read_amplification: gb.read_amplification(),
            gc_write_amplification: st.gc_write_amplification(),
            gc_overhead: gb.gc_overhead(),
            user_read_bytes: gb.user_read,
            user_write_bytes: gb.user_write,
            gc_read_bytes: gb.gc_read,
            gc_write_bytes: gb.gc_write,
            reclaimed_bytes: gb.reclaimed,
            gc_victims: st.gc_victims,
            erases: st.erases,
            map_cache_hit_rate: st.map_hit_rate(),
            checkpoints: st.checkpoints,
            free_blocks: f.free_blocks(),
            bad_blocks: f.bad_blocks(),
            erase_count_min,
            erase_count_avg,
            erase_count_max,
            logical_capacity_bytes: f.lbas() * f.lba_size() as u64,
            unwritten_read_sectors: st.unwritten_read_sectors,
        }
    }
}

/// FTL figures ([`FtlFigures`]) as JSON keys of `m`.
pub fn ftl_json(f: &csd_ftl::Ftl, m: &mut Map<String, Value>) {
    if let Ok(Value::Object(figures)) = serde_json::to_value(FtlFigures::of(f)) {
        m.extend(figures);
    }
}

/// The SMART log as a JSON object (what `csd device smart --json` prints and what
/// `csd serve` writes to its stats file): the log's fields plus the image path.
pub fn smart_json(path: &Path, l: &csd_device::SmartLog) -> Value {
    let v = Extended {
        report: l,
        command: None,
        image: Some(path.display().to_string()),
    };
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The SMART log back from [`smart_json`]'s object (`None` if a field is missing).
pub fn smart_from_json(v: &Value) -> Option<csd_device::SmartLog> {
    serde_json::from_value(v.clone()).ok()
}

/// SMART's critical-warning byte in words.
fn critical_warning(w: u8) -> String {
    let mut v = Vec::new();
    for (bit, name) in [
        (csd_ftl::WARN_SPARE, "spare below threshold"),
        (csd_ftl::WARN_RELIABILITY, "reliability degraded"),
        (csd_ftl::WARN_READ_ONLY, "read-only"),
    ] {
        if w & bit != 0 {
            v.push(name);
        }
    }
    if v.is_empty() {
        "none".to_string()
    } else {
        format!("{w:#04x} ({})", v.join(", "))
    }
}

/// `csd device smart`.
pub fn print_smart(path: &Path, l: &csd_device::SmartLog, json_out: bool) {
    if json_out {
        let v = smart_json(path, l);
        println!("{v:#}");
        return;
    }
    let mut t = table(&["SMART", "value"]);
    let split = |s: &csd_device::FlashSplit| format!("{} / {} / {}", s.user, s.gc, s.meta);
    let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.3} ms", v * 1e3));
    for (k, v) in [
        ("image", path.display().to_string()),
        ("critical warning", critical_warning(l.critical_warning)),
        (
            "available spare / threshold",
            format!("{}% / {}%", l.available_spare_pct, l.spare_threshold_pct),
        ),
        ("percentage used", format!("{}%", l.percentage_used)),
        (
            "read-only",
            l.read_only.clone().unwrap_or_else(|| "no".to_string()),
        ),
        (
            "media / data-integrity errors",
            format!("{} / {}", l.media_errors, l.integrity_errors),
        ),
        (
            "lost sectors / read retries",
            format!("{} / {}", l.lost_sectors, l.read_retries),
        ),
        (
            "user bytes read / written",
            format!(
                "{} / {}",
                bytes(l.host_read_bytes),
                bytes(l.host_written_bytes)
            ),
        ),
        (
            "GC bytes read / written / reclaimed",
            format!(
                "{} / {} / {}",
                bytes(l.gc_read_bytes),
                bytes(l.gc_written_bytes),
                bytes(l.reclaimed_bytes)
            ),
        ),
        ("flash reads user / GC / metadata", split(&l.flash_reads)),
        (
            "flash programs user / GC / metadata",
            split(&l.flash_programs),
        ),
        ("flash erases user / GC / metadata", split(&l.flash_erases)),
        (
            "read amplification (user+GC)/user",
            format!("{:.3}", l.read_amplification),
        ),
        (
            "write amplification (user+GC)/user",
            format!("{:.3}", l.write_amplification),
        ),
        (
            "GC overhead (read+write)/reclaimed",
            format!("{:.3}", l.gc_overhead),
        ),
        (
            "physical write amplification (all programs)",
            format!("{:.3}", l.physical_write_amplification),
        ),
        (
            "erase count min / avg / max",
            format!(
                "{} / {:.2} / {}",
                l.erase_count_min, l.erase_count_avg, l.erase_count_max
            ),
        ),
        ("bad blocks", l.bad_blocks.to_string()),
        ("free blocks", l.free_blocks.to_string()),
        (
            "map cache hit rate",
            format!("{:.2}%", l.map_cache_hit_rate * 100.0),
        ),
        ("checkpoints", l.checkpoints.to_string()),
        (
            "last recovery modeled / wall",
            format!(
                "{} / {}",
                opt(l.last_recovery_modeled_s),
                opt(l.last_recovery_wall_s)
            ),
        ),
    ] {
        t.add_row(vec![k.to_string(), v]);
    }
    println!("{t}");
}

/// A progress bar of `len` items (a spinner when unknown) counting `unit`, with the
/// house style: `{spinner} {msg} [bar] pos/len unit (rate, eta)`.
pub fn progress_bar(len: Option<u64>, unit: &str) -> indicatif::ProgressBar {
    let pb = len.map_or_else(
        indicatif::ProgressBar::new_spinner,
        indicatif::ProgressBar::new,
    );
    pb.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {{msg}} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb
}

/// The scan paper's model of sustained sequential read for `c` (equation 1 bounded by
/// the DRAM and the host link), MB/s: csd's one analytic bandwidth formula.
pub(crate) fn model_seq_read_mb_s(c: &csd_sim::DeviceConfig) -> f64 {
    csd_model::scan::ScanParams::from_device(c).seq_read_bytes_per_s() / 1e6
}

/// Used by `device info`: wear and bad-block summary over every block.
fn wear_summary(nand: &Nand) -> (u32, u32, f64, u32, u64) {
    let blocks = nand.addr().blocks();
    let (mut min, mut max, mut sum, mut bad, mut pages) = (u32::MAX, 0u32, 0u64, 0u32, 0u64);
    for b in 0..blocks {
        if let Ok(i) = nand.block_info(BlockId(b)) {
            min = min.min(i.pe_cycles);
            max = max.max(i.pe_cycles);
            sum += i.pe_cycles as u64;
            bad += i.factory_bad as u32;
            pages += i.next_page as u64;
        }
    }
    (
        min.min(max),
        max,
        sum as f64 / blocks.max(1) as f64,
        bad,
        pages,
    )
}

/// For a device in memory whose flash is larger than its memory limit: a notice saying
/// where it turns read-only and how to get more (`None` when the flash fits, or no limit).
pub fn memory_limit_notice(nand: &Nand) -> Option<String> {
    let limit = nand.memory_limit()?;
    let g = nand.geometry();
    let flash = g.total_blocks() * g.block_bytes();
    let size = |b: u64| {
        if b >= 1 << 30 {
            format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
        } else {
            format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
        }
    };
    let source = if std::env::var_os("CSD_MEMORY_LIMIT").is_some() {
        "CSD_MEMORY_LIMIT"
    } else {
        "three quarters of this machine's available memory; CSD_MEMORY_LIMIT sets it"
    };
    (flash > limit).then(|| {
        format!(
            "note: the device's flash ({}) is larger than its memory limit ({}: {source}); \
             once the blocks it has written reach the limit it turns read-only (a log-structured FTL \
             writes every block before its GC erases one). --image keeps more.",
            size(flash),
            size(limit)
        )
    })
}

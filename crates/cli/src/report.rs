//! Tables and JSON for the CLI's reports, and its progress bars. Every number printed
//! here comes from an `IoReport` or the device's own counters. Commands call into this
//! module; it calls no command.

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use csd_device::IoReport;
use csd_nand::{BlockId, Nand};
use serde_json::{Map, Value, json};
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

/// `csd device info`.
pub fn device_info(path: &Path, nand: &Nand, json_out: bool) {
    let c = nand.config();
    let g = c.geometry;
    let (pe_min, pe_max, pe_avg, bad, pages) = wear_summary(nand);
    let disk = std::fs::metadata(path).ok();
    if json_out {
        let v = json!({
            "image": path.display().to_string(),
            "device": c.name,
            "description": c.description,
            "channels": g.channels, "ways": g.ways, "dies_per_chip": g.dies_per_chip,
            "planes_per_die": g.planes_per_die, "blocks_per_plane": g.blocks_per_plane,
            "pages_per_block": g.pages_per_block, "page_size_bytes": g.page_size,
            "sector_size_bytes": g.sector_size, "oob_per_sector_bytes": g.oob_per_sector,
            "raw_capacity_bytes": g.raw_capacity(),
            "blocks": g.total_blocks(),
            "factory_bad_blocks": bad,
            "programmed_pages": pages,
            "erase_count_min": pe_min, "erase_count_avg": pe_avg, "erase_count_max": pe_max,
            "image_apparent_bytes": disk.as_ref().map(|m| m.len()),
            "model_seq_read_mb_s": model_seq_read_mb_s(c),
        });
        println!("{v:#}");
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
        if r.errors > 0 {
            format!(", {} media errors", r.errors)
        } else {
            String::new()
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
        ]);
    }
    println!("{t}");
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

/// `csd io --json`: one object, snake_case keys with units.
pub fn io_json(r: &IoReport, cmd: &str) -> Value {
    let mut v = r.to_json();
    if let Some(m) = v.as_object_mut() {
        m.insert("command".into(), json!(cmd));
    }
    v
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
    let rows: Vec<(&str, String)> = vec![
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
    for (k, v) in rows {
        t.add_row(vec![k.to_string(), v]);
    }
    println!("{t}");
}

/// FTL figures as JSON keys.
pub fn ftl_json(f: &csd_ftl::Ftl, m: &mut Map<String, Value>) {
    let st = f.stats();
    let gb = st.gc_bytes(f.page_size() as u64, f.lba_size() as u64);
    let (mn, avg, mx) = f.erase_counts();
    m.insert(
        "write_amplification".into(),
        json!(gb.write_amplification()),
    );
    m.insert(
        "physical_write_amplification".into(),
        json!(st.physical_write_amplification(f.sectors_per_page())),
    );
    m.insert("read_amplification".into(), json!(gb.read_amplification()));
    m.insert(
        "gc_write_amplification".into(),
        json!(st.gc_write_amplification()),
    );
    m.insert("gc_overhead".into(), json!(gb.gc_overhead()));
    m.insert("user_read_bytes".into(), json!(gb.user_read));
    m.insert("user_write_bytes".into(), json!(gb.user_write));
    m.insert("gc_read_bytes".into(), json!(gb.gc_read));
    m.insert("gc_write_bytes".into(), json!(gb.gc_write));
    m.insert("reclaimed_bytes".into(), json!(gb.reclaimed));
    m.insert("gc_victims".into(), json!(st.gc_victims));
    m.insert("erases".into(), json!(st.erases));
    m.insert("map_cache_hit_rate".into(), json!(st.map_hit_rate()));
    m.insert("checkpoints".into(), json!(st.checkpoints));
    m.insert("free_blocks".into(), json!(f.free_blocks()));
    m.insert("bad_blocks".into(), json!(f.bad_blocks()));
    m.insert("erase_count_min".into(), json!(mn));
    m.insert("erase_count_avg".into(), json!(avg));
    m.insert("erase_count_max".into(), json!(mx));
    m.insert(
        "logical_capacity_bytes".into(),
        json!(f.lbas() * f.lba_size() as u64),
    );
}

/// The SMART log as a JSON object (what `csd device smart --json` prints and what
/// `csd serve` writes to its stats file): the log's fields plus the image path.
pub fn smart_json(path: &Path, l: &csd_device::SmartLog) -> Value {
    let mut v = serde_json::to_value(l).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("image".into(), json!(path.display().to_string()));
    }
    v
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

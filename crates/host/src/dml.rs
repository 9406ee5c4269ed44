//! INSERT, UPDATE and DELETE on catalog tables (flixr §4.3 and §4.6: a page rewritten
//! in place through WRITE_IDX gets its per-page index entry recomputed by the firmware;
//! §6.1's Insert and Delete microbenchmarks), for `csd sql` (crate `csd-sql` plans the
//! statements with DataFusion and evaluates WHERE and SET there; this module changes the
//! pages).
//!
//! A statement is a set of page images: pages of the table rewritten (rows deleted,
//! updated or added) and pages appended after the table's last page. Page logic is
//! [`crate::slotted`]'s, the one the FLIXR row store uses: pages are parsed to rows and
//! rebuilt whole, in the table's layout (NSM or PAX: both are rebuilt alike, so both are
//! supported) and page size.
//!
//! # Choices
//! * **Where rows go.** INSERT fills pages that may have room first — the table's
//!   free-space hints (pages DELETE left with room, at most
//!   [`crate::catalog::MAX_FREE_HINTS`], kept in the catalog) and its last page, each
//!   read to learn its true row count — then appends pages.
//! * **How a table grows.** A table's extent has a capacity in pages (`TableInfo::capacity`).
//!   Pages within it are appended in place. Beyond it, the last table of the device grows
//!   in place (nothing follows it); any other table is *relocated*: copied with its
//!   changes to a new extent after the last table with twice the pages it needs, and the
//!   old extent trimmed once the catalog names the new one (a vector's amortized growth:
//!   a table is copied O(log n) times while it grows to n pages). Tables stay one
//!   contiguous extent, so every scan path (IHP, ISP sessions, READ_IDX) is unchanged.
//! * **Which pages are read.** INSERT reads only the pages it fills. DELETE and UPDATE
//!   read every page, MDTS at a time, or — when the table has a FLIXR index and the
//!   statement's WHERE constrains its column — read them with READ_IDX under the rule the
//!   WHERE implies, so pages whose entry rules out a match are never read (flixr §4.4).
//! * **Index entries.** Pages of a table with a FLIXR index are written with WRITE_IDX
//!   (the firmware recomputes their entries, §4.3); others with plain writes. Pages
//!   emptied by DELETE stay in the table as empty pages (their entry is "empty", which
//!   every rule skips); the table never shrinks.
//! * **Atomicity and crash safety** (a small redo log, §4.6's idea on the host):
//!   1. appended pages and relocated copies go to LBAs no catalog names yet;
//!   2. the new images of rewritten pages go to the statement log, a region at the top
//!      of the device's LBAs (`Catalog::log_lbas`, grown as statements need), and
//!      everything is flushed;
//!   3. **commit**: the new catalog (row count, pages, capacity, free-space hints) with
//!      a redo record naming the rewritten pages is written as one atomic batch;
//!   4. the images are written in place (WRITE_IDX or Write) and flushed;
//!   5. the catalog is written again without the record, and the log LBAs trimmed.
//!
//!   A power cut before 3 leaves the old table (nothing it names changed); after 3 the
//!   statement is committed and [`crate::Catalog::read`] on a writable device finishes it
//!   ([`finish`]: step 4 again, then 5 — idempotent, so a cut during recovery is fine).
//!   So a statement is all or nothing, every page is old or new, the catalog agrees with
//!   the pages, and a statement that returned is durable. A device opened read-only
//!   cannot finish a committed statement: reading its catalog is then
//!   [`HostError::Unfinished`] (the CLI finishes it with a read-write open).
//!   Cost: each rewritten page is written twice (log and place), as a full-page-write
//!   WAL does; appended pages once.
//! * **Types** are the schema's: a value that does not encode (wrong type, CHAR too
//!   long) is an error naming the column, raised before anything is written.
//! * The statement's own figures come from the device's counters (telemetry before and
//!   after) and the host's: modeled time, flash reads and programs, bytes per link,
//!   energy. Commands are issued one after the other (MDTS-sized runs of pages).

use crate::catalog::{Catalog, Redo, TableInfo, same_name};
use crate::client::{CommandIssuer, HostError};
use crate::slotted;
use csd_device::{Command, Payload, Telemetry};
use csd_sim::{DeviceConfig, EnergyCounters, EnergyReport};
use csd_table::Value;
use csd_table::page::Layout;
use std::collections::BTreeMap;
use std::time::Instant;

/// Which statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmlOp {
    /// INSERT.
    Insert,
    /// UPDATE.
    Update,
    /// DELETE.
    Delete,
}

impl DmlOp {
    /// `inserted`, `updated` or `deleted`.
    pub fn past(self) -> &'static str {
        match self {
            DmlOp::Insert => "inserted",
            DmlOp::Update => "updated",
            DmlOp::Delete => "deleted",
        }
    }
}

/// What a statement did and cost.
#[derive(Debug, Clone, PartialEq)]
pub struct DmlReport {
    /// The statement.
    pub op: DmlOp,
    /// The table.
    pub table: String,
    /// The table's page layout.
    pub layout: Layout,
    /// Rows inserted, updated or deleted.
    pub rows: u64,
    /// Rows in the table afterwards.
    pub table_rows: u64,
    /// Table pages read by the host.
    pub pages_read: u64,
    /// Table pages READ_IDX ruled out (the WHERE constrains the indexed column).
    pub pages_skipped: u64,
    /// Table pages rewritten in place.
    pub pages_rewritten: u64,
    /// Pages appended to the table.
    pub pages_appended: u64,
    /// Pages copied because the table was relocated to grow (0: it grew in place).
    pub pages_relocated: u64,
    /// Page images written to the statement log (the redo images).
    pub log_pages: u64,
    /// Table pages were written with WRITE_IDX (the table has a FLIXR index).
    pub write_idx: bool,
    /// Modeled elapsed time, ns.
    pub modeled_ns: u64,
    /// Flash page reads.
    pub flash_reads: u64,
    /// Flash page programs (data, log, catalog and FTL metadata).
    pub flash_programs: u64,
    /// Bytes over the flash channels.
    pub channel_bytes: u64,
    /// Bytes through controller DRAM.
    pub dram_bytes: u64,
    /// Bytes over the host link.
    pub host_link_bytes: u64,
    /// Embedded-CPU cycles (index entries).
    pub device_cpu_cycles: u64,
    /// Host-CPU cycles (rows parsed and built).
    pub host_cpu_cycles: u64,
    /// Commands issued.
    pub commands: u64,
    /// Energy per component.
    pub energy: EnergyReport,
    /// Wall-clock seconds.
    pub wall_s: f64,
}

impl DmlReport {
    /// Modeled seconds.
    pub fn modeled_s(&self) -> f64 {
        self.modeled_ns as f64 / 1e9
    }

    /// `N rows inserted` (or updated / deleted).
    pub fn summary(&self) -> String {
        format!(
            "{} row{} {}",
            self.rows,
            if self.rows == 1 { "" } else { "s" },
            self.op.past()
        )
    }
}

/// New rows for the pages of one chunk: `None` leaves a page as it is. With it, the
/// rows the chunk's edit inserted, updated or deleted.
pub type PageEdits = (Vec<Option<Vec<Vec<Value>>>>, u64);

/// The edit [`modify`] applies: the rows of each page of a chunk in, [`PageEdits`] out.
pub type PageEditor<'a> = dyn FnMut(&[Vec<Vec<Value>>]) -> Result<PageEdits, HostError> + 'a;

fn telemetry(c: &mut impl CommandIssuer) -> Result<Telemetry, HostError> {
    match c
        .exec(Command::GetLogPage(csd_device::LogPage::Telemetry))?
        .payload
    {
        Payload::Telemetry(t) => Ok(t),
        _ => Err(HostError::Invalid("telemetry log page missing".into())),
    }
}

/// The measurement around a statement.
struct Meter {
    before: Telemetry,
    t0: csd_sim::SimTime,
    wall: Instant,
    host_cycles: f64,
    commands0: u64,
}

impl Meter {
    fn start(c: &mut impl CommandIssuer) -> Result<Meter, HostError> {
        let before = telemetry(c)?;
        Ok(Meter {
            before,
            t0: c.now(),
            wall: Instant::now(),
            host_cycles: 0.0,
            commands0: 0,
        })
    }

    /// Charge host CPU work (the host clock moves on).
    fn host(&mut self, c: &mut impl CommandIssuer, cfg: &DeviceConfig, cycles: f64) {
        self.host_cycles += cycles;
        let ns = (cycles / (cfg.host.clock_mhz * 1e6) * 1e9).round() as u64;
        let t = c.now().after(ns);
        c.wait_until(t);
    }

    fn finish(
        self,
        c: &mut impl CommandIssuer,
        cfg: &DeviceConfig,
        mut r: DmlReport,
    ) -> Result<DmlReport, HostError> {
        let end = c.now();
        let after = telemetry(c)?;
        let b = &self.before.counters;
        let a = &after.counters;
        let modeled_ns = end.since(self.t0).max(1);
        let counters = EnergyCounters {
            page_reads: a.page_reads - b.page_reads,
            page_programs: a.page_programs - b.page_programs,
            block_erases: a.block_erases - b.block_erases,
            channel_bytes: a.channel_bytes - b.channel_bytes,
            dram_bytes: (a.dram_bytes - b.dram_bytes)
                .saturating_sub(csd_device::command::TELEMETRY_BYTES),
            host_link_bytes: (a.host_link_bytes - b.host_link_bytes)
                .saturating_sub(csd_device::command::TELEMETRY_BYTES),
            cpu_cycles: a.cpu_cycles - b.cpu_cycles,
            host_cpu_cycles: self.host_cycles.round() as u64,
        };
        r.modeled_ns = modeled_ns;
        r.flash_reads = counters.page_reads;
        r.flash_programs = counters.page_programs;
        r.channel_bytes = counters.channel_bytes;
        r.dram_bytes = counters.dram_bytes;
        r.host_link_bytes = counters.host_link_bytes;
        r.device_cpu_cycles = counters.cpu_cycles;
        r.host_cpu_cycles = counters.host_cpu_cycles;
        r.commands = self.commands0;
        r.energy = EnergyReport::compute(&cfg.energy, &counters, modeled_ns);
        r.wall_s = self.wall.elapsed().as_secs_f64();
        Ok(r)
    }
}

/// A table's geometry on this device.
struct Geo {
    lpp: u64,
    mdts_pages: u64,
    lbas: u64,
    cap: usize,
}

fn geo(c: &impl CommandIssuer, t: &TableInfo) -> Result<Geo, HostError> {
    let id = c.identify();
    let lpp = t.lbas_per_page(id.lba_size).max(1);
    let cap = csd_table::page::capacity_for(&t.schema, t.layout, t.page_bytes as usize)?;
    Ok(Geo {
        lpp,
        mdts_pages: (id.mdts_blocks as u64 / lpp).max(1),
        lbas: id.lbas,
        cap,
    })
}

fn find(cat: &Catalog, table: &str) -> Result<usize, HostError> {
    cat.tables
        .iter()
        .position(|t| same_name(&t.name, table))
        .ok_or_else(|| {
            HostError::Invalid(format!(
                "no table {table} on the device; tables: {}",
                cat.tables
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// Consecutive runs of the sorted keys of `pages`, each at most `max` long.
fn runs<V>(pages: &BTreeMap<u64, V>, max: u64) -> Vec<(u64, u64)> {
    let keys: Vec<u64> = pages.keys().copied().collect();
    crate::rowstore::runs(&keys, max)
}

/// Writes `images` (page -> bytes) of a table whose page 0 is at `first_lba`, as
/// MDTS-sized runs: WRITE_IDX under `flixr`, plain Writes otherwise. Returns commands.
fn write_pages(
    c: &mut impl CommandIssuer,
    g: &Geo,
    first_lba: u64,
    flixr: Option<u8>,
    images: &BTreeMap<u64, Vec<u8>>,
) -> Result<u64, HostError> {
    let mut n = 0;
    for (p, k) in runs(images, g.mdts_pages) {
        let mut data = Vec::new();
        for q in p..p + k {
            if let Some(img) = images.get(&q) {
                data.extend_from_slice(img);
            }
        }
        let lba = first_lba + p * g.lpp;
        c.exec(match flixr {
            Some(table) => Command::WriteIdx { table, lba, data },
            None => Command::Write { lba, data },
        })?;
        n += 1;
    }
    Ok(n)
}

/// Reads pages `pages` (sorted) of the table at `first_lba` as MDTS-sized runs.
fn read_pages(
    c: &mut impl CommandIssuer,
    g: &Geo,
    first_lba: u64,
    pages: &[u64],
) -> Result<Vec<(u64, Vec<u8>)>, HostError> {
    let mut out = Vec::with_capacity(pages.len());
    for (p, k) in crate::rowstore::runs(pages, g.mdts_pages) {
        let d = c.read(first_lba + p * g.lpp, (k * g.lpp) as u32)?;
        let bytes = (d.len() as u64 / k.max(1)) as usize;
        for (i, chunk) in d.chunks(bytes.max(1)).enumerate() {
            out.push((p + i as u64, chunk.to_vec()));
        }
    }
    Ok(out)
}

/// Inserts `rows` into `table` (checked against its schema first: nothing is written
/// when a row does not fit it).
pub fn insert(
    dev: &mut impl CommandIssuer,
    cfg: &DeviceConfig,
    table: &str,
    rows: &[Vec<Value>],
) -> Result<DmlReport, HostError> {
    let cat = Catalog::read(dev)?;
    let t = cat.tables[find(&cat, table)?].clone();
    for r in rows {
        t.schema
            .encode_row_vec(r)
            .map_err(|e| HostError::Invalid(format!("INSERT INTO {}: {e}", t.name)))?;
    }
    let mut m = Meter::start(dev)?;
    let g = geo(dev, &t)?;
    let mut report = empty_report(DmlOp::Insert, &t);
    if rows.is_empty() {
        return m.finish(dev, cfg, report);
    }
    let (edited, used_hints, mut next) =
        fill_free_pages(dev, cfg, (&t, &g), rows, &mut m, &mut report)?;
    let left = rows.len() - next;
    let plan = slotted::plan_insert([], left, g.cap, t.pages, u64::MAX)
        .ok_or_else(|| HostError::Invalid("a row does not fit a page".into()))?;
    let mut appended: BTreeMap<u64, Vec<Vec<Value>>> = BTreeMap::new();
    for (p, k) in plan {
        appended.insert(p, rows[next..next + k].to_vec());
        next += k;
    }
    m.host(dev, cfg, rows.len() as f64 * cfg.isp.host_cycles_per_record);
    // Hints: the ones read leave when full (the rest stay).
    let mut hints: Vec<u64> = t
        .free_hints
        .iter()
        .copied()
        .filter(|p| !used_hints.contains(p) || edited.get(p).is_some_and(|r| r.len() < g.cap))
        .collect();
    if let Some((&p, r)) = appended.iter().next_back()
        && r.len() < g.cap
    {
        hints.push(p);
    }
    report.rows = rows.len() as u64;
    let build = |m: BTreeMap<u64, Vec<Vec<Value>>>| -> Result<BTreeMap<u64, Vec<u8>>, HostError> {
        m.into_iter()
            .map(|(p, r)| Ok((p, page_image(&t, &r)?)))
            .collect()
    };
    let (edited, appended) = (build(edited)?, build(appended)?);
    apply(
        dev,
        cfg,
        cat,
        &t,
        &g,
        edited,
        appended,
        hints,
        rows.len() as i64,
        &mut m,
        &mut report,
    )?;
    m.finish(dev, cfg, report)
}

/// Rows by page number.
type RowsByPage = BTreeMap<u64, Vec<Vec<Value>>>;

/// INSERT's first step: the rows that fit the pages with room. Candidates are the
/// free-space hints, then the last page; each is read for its rows and filled. Returns
/// the filled pages' rows, the candidates read and how many of `rows` went in.
fn fill_free_pages(
    c: &mut impl CommandIssuer,
    cfg: &DeviceConfig,
    (t, g): (&TableInfo, &Geo),
    rows: &[Vec<Value>],
    m: &mut Meter,
    report: &mut DmlReport,
) -> Result<(RowsByPage, Vec<u64>, usize), HostError> {
    let mut candidates: Vec<u64> = t
        .free_hints
        .iter()
        .copied()
        .filter(|&p| p < t.pages)
        .collect();
    if t.pages > 0 && !candidates.contains(&(t.pages - 1)) {
        candidates.push(t.pages - 1);
    }
    let mut left = rows.len();
    let mut edited: BTreeMap<u64, Vec<Vec<Value>>> = BTreeMap::new();
    let mut next = 0;
    let mut used_hints = Vec::new();
    for &p in &candidates {
        if left == 0 {
            break;
        }
        let page = read_pages(c, g, t.first_lba, &[p])?;
        m.commands0 += 1;
        report.pages_read += 1;
        used_hints.push(p);
        let Some((_, bytes)) = page.into_iter().next() else {
            continue;
        };
        let mut have = slotted::parse_rows(&t.schema, &bytes);
        m.host(
            c,
            cfg,
            cfg.isp.host_cycles_per_page + have.len() as f64 * cfg.isp.host_cycles_per_record,
        );
        let free = g.cap.saturating_sub(have.len());
        if free == 0 {
            continue;
        }
        let k = free.min(left);
        have.extend_from_slice(&rows[next..next + k]);
        next += k;
        left -= k;
        edited.insert(p, have);
    }
    Ok((edited, used_hints, next))
}

/// Changes rows of `table` page by page: `edit` gets the rows of a chunk of pages and
/// returns, per page, its new rows (`None`: unchanged) and how many rows it updated or
/// deleted. Pages are read MDTS at a time; with `rule` (what the statement's WHERE
/// implies on the column of the table's FLIXR index, `csd_host::index::rule_for`) they
/// are read with READ_IDX, and pages whose entry rules out every matching row are not
/// read at all (flixr §4.4). The changed pages are written back as [`insert`] does.
pub fn modify(
    dev: &mut impl CommandIssuer,
    cfg: &DeviceConfig,
    table: &str,
    op: DmlOp,
    rule: Option<csd_device::IndexRule>,
    edit: &mut PageEditor<'_>,
) -> Result<DmlReport, HostError> {
    let cat = Catalog::read(dev)?;
    let t = cat.tables[find(&cat, table)?].clone();
    let mut m = Meter::start(dev)?;
    let g = geo(dev, &t)?;
    let mut report = empty_report(op, &t);
    let rule = match (rule, &t.index) {
        (Some(r), Some(ix)) => match dev
            .exec(Command::SendIdxIcr {
                table: ix.flixr_table,
                rule: r,
            })?
            .payload
        {
            Payload::FlixrRule(id) => Some((ix.flixr_table, id)),
            _ => return Err(HostError::Invalid("SendIdxIcr returned no rule id".into())),
        },
        _ => None,
    };
    let r = modify_pages(dev, cfg, &t, &g, op, rule, edit, &mut m, &mut report);
    // The rule is statement state: released whatever happened.
    let (edited, hints, delta) = match rule {
        Some((table, rule)) => {
            let dropped = dev.exec(Command::DropIdxIcr { table, rule });
            let r = r?;
            dropped?;
            r
        }
        None => r?,
    };
    apply(
        dev,
        cfg,
        cat,
        &t,
        &g,
        edited,
        BTreeMap::new(),
        hints,
        delta,
        &mut m,
        &mut report,
    )?;
    m.finish(dev, cfg, report)
}

/// What [`modify_pages`] found: the changed page images, the free-space hints and the
/// change in rows.
type Found = (BTreeMap<u64, Vec<u8>>, Vec<u64>, i64);

/// Reads the pages of `t` (under `rule` when given) and edits them.
#[allow(clippy::too_many_arguments)]
fn modify_pages(
    c: &mut impl CommandIssuer,
    cfg: &DeviceConfig,
    t: &TableInfo,
    g: &Geo,
    op: DmlOp,
    rule: Option<(u8, u16)>,
    edit: &mut PageEditor<'_>,
    m: &mut Meter,
    report: &mut DmlReport,
) -> Result<Found, HostError> {
    // Changed pages are kept as page images (not rows) until the statement commits.
    let mut edited: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut roomy: Vec<u64> = Vec::new();
    let mut affected = 0u64;
    let mut delta = 0i64;
    let mut p = 0;
    while p < t.pages {
        let k = g.mdts_pages.min(t.pages - p);
        let read = match rule {
            None => {
                let pages: Vec<u64> = (p..p + k).collect();
                m.commands0 += 1;
                read_pages(c, g, t.first_lba, &pages)?
            }
            Some(rule) => read_under_rule(c, t, g, rule, (p, k), m, report)?,
        };
        let pages: Vec<u64> = read.iter().map(|x| x.0).collect();
        report.pages_read += pages.len() as u64;
        let rows: Vec<Vec<Vec<Value>>> = read
            .iter()
            .map(|(_, b)| slotted::parse_rows(&t.schema, b))
            .collect();
        let examined: usize = rows.iter().map(Vec::len).sum();
        m.host(
            c,
            cfg,
            pages.len() as f64 * cfg.isp.host_cycles_per_page
                + examined as f64 * cfg.isp.host_cycles_per_record,
        );
        let (new, n) = edit(&rows)?;
        if new.len() != rows.len() {
            return Err(HostError::Invalid(format!(
                "the edit answered for {} pages of {}",
                new.len(),
                rows.len()
            )));
        }
        affected += n;
        for ((page, old), new) in pages.iter().zip(&rows).zip(new) {
            if let Some(new) = new {
                check_page_rows(t, g, op, *page, &new)?;
                delta += new.len() as i64 - old.len() as i64;
                if new.len() < g.cap {
                    roomy.push(*page);
                }
                edited.insert(*page, page_image(t, &new)?);
            }
        }
        p += k;
    }
    report.rows = affected;
    let mut hints = t.free_hints.clone();
    hints.extend(roomy);
    Ok((edited, hints, delta))
}

/// Pages `p..p + k` of `t` read with READ_IDX under FLIXR `(table, rule)`: whole pages
/// only (a page of which only some LBAs came back is read again); the pages skipped are
/// counted in `report`.
fn read_under_rule(
    c: &mut impl CommandIssuer,
    t: &TableInfo,
    g: &Geo,
    (table, rule): (u8, u16),
    (p, k): (u64, u64),
    m: &mut Meter,
    report: &mut DmlReport,
) -> Result<Vec<(u64, Vec<u8>)>, HostError> {
    m.commands0 += 1;
    let lba = t.first_lba + p * g.lpp;
    let reply = c.exec(Command::ReadIdx {
        table,
        rule,
        lba,
        blocks: (k * g.lpp) as u32,
    })?;
    let Payload::IndexRead(r) = reply.payload else {
        return Err(HostError::Invalid("ReadIdx returned no pages".into()));
    };
    let ls = c.identify().lba_size as usize;
    let mut by_page: BTreeMap<u64, Vec<(u64, &[u8])>> = BTreeMap::new();
    for (i, &l) in r.lbas.iter().enumerate() {
        let d = r.data.get(i * ls..(i + 1) * ls).unwrap_or_default();
        by_page
            .entry((l - t.first_lba) / g.lpp)
            .or_default()
            .push((l, d));
    }
    let mut out = Vec::with_capacity(by_page.len());
    for (q, parts) in by_page {
        if parts.len() as u64 == g.lpp {
            out.push((q, parts.iter().flat_map(|x| x.1.iter().copied()).collect()));
        } else {
            m.commands0 += 1;
            out.extend(read_pages(c, g, t.first_lba, &[q])?);
        }
    }
    report.pages_skipped += k - out.len() as u64;
    Ok(out)
}

/// The rows an edit gave page `page` of `t`: at most a page's worth, each of the
/// table's schema.
fn check_page_rows(
    t: &TableInfo,
    g: &Geo,
    op: DmlOp,
    page: u64,
    new: &[Vec<Value>],
) -> Result<(), HostError> {
    if new.len() > g.cap {
        return Err(HostError::Invalid(format!(
            "page {page} of {} would hold {} rows, at most {}",
            t.name,
            new.len(),
            g.cap
        )));
    }
    for r in new {
        t.schema.encode_row_vec(r).map_err(|e| {
            HostError::Invalid(format!(
                "{} {}: {e}",
                if op == DmlOp::Update {
                    "UPDATE"
                } else {
                    "DELETE FROM"
                },
                t.name
            ))
        })?;
    }
    Ok(())
}

fn empty_report(op: DmlOp, t: &TableInfo) -> DmlReport {
    DmlReport {
        op,
        table: t.name.clone(),
        layout: t.layout,
        rows: 0,
        table_rows: t.rows,
        pages_read: 0,
        pages_skipped: 0,
        pages_rewritten: 0,
        pages_appended: 0,
        pages_relocated: 0,
        log_pages: 0,
        write_idx: t.index.is_some(),
        modeled_ns: 0,
        flash_reads: 0,
        flash_programs: 0,
        channel_bytes: 0,
        dram_bytes: 0,
        host_link_bytes: 0,
        device_cpu_cycles: 0,
        host_cpu_cycles: 0,
        commands: 0,
        energy: EnergyReport::default(),
        wall_s: 0.0,
    }
}

/// A page of table `t` holding `rows`.
fn page_image(t: &TableInfo, rows: &[Vec<Value>]) -> Result<Vec<u8>, HostError> {
    Ok(slotted::build_page(
        &t.schema,
        t.layout,
        t.page_bytes as usize,
        rows,
    )?)
}

/// Writes a statement: `rewrites` (new images of existing pages) and `appends` (new
/// pages after the last), then commits the catalog (see the module doc).
#[allow(clippy::too_many_arguments)]
fn apply(
    dev: &mut impl CommandIssuer,
    cfg: &DeviceConfig,
    cat: Catalog,
    t: &TableInfo,
    geometry: &Geo,
    rewrites: BTreeMap<u64, Vec<u8>>,
    appends: BTreeMap<u64, Vec<u8>>,
    mut hints: Vec<u64>,
    delta_rows: i64,
    meter: &mut Meter,
    report: &mut DmlReport,
) -> Result<(), HostError> {
    if rewrites.is_empty() && appends.is_empty() {
        return Ok(());
    }
    meter.host(
        dev,
        cfg,
        (rewrites.len() + appends.len()) as f64 * cfg.isp.host_cycles_per_page,
    );
    let flixr = t.index.as_ref().map(|i| i.flixr_table);
    let pos = find(&cat, &t.name)?;
    let new_pages = appends
        .keys()
        .next_back()
        .map_or(t.pages, |&p| (p + 1).max(t.pages));
    let limit = cat.log_first_lba(geometry.lbas);
    let lba_size = dev.identify().lba_size;
    let is_last = t.end_lba(lba_size) >= cat.next_free_lba(lba_size);
    let mut info = t.clone();
    info.pages = new_pages;
    info.rows = (t.rows as i64 + delta_rows).max(0) as u64;
    if let Some(bounds) = &mut info.bounds {
        // The values written may lie outside what the load saw: widen (an estimate,
        // never narrowed, so a DELETE leaves it as it was).
        for page in rewrites.values().chain(appends.values()) {
            for row in slotted::parse_rows(&t.schema, page) {
                for (b, v) in bounds.iter_mut().zip(&row) {
                    if let Some(x) = v.as_i64() {
                        crate::stats::widen(b, x);
                    }
                }
            }
        }
    }
    hints.retain(|&p| p < new_pages);
    hints.sort_unstable();
    hints.dedup();
    hints.truncate(crate::catalog::MAX_FREE_HINTS);
    info.free_hints = hints;
    report.table_rows = info.rows;
    report.pages_appended = appends.len() as u64;
    let relocate = new_pages > t.capacity.max(t.pages) && !is_last;
    let change = Change {
        table: t,
        geometry,
        pos,
        flixr,
        limit,
        lba_size,
        rewrites,
        appends,
    };
    if relocate {
        relocate_table(dev, cat, change, info, meter, report)
    } else {
        in_place(dev, cat, change, info, meter, report)
    }
}

/// A statement's page images, ready to be written: what [`apply`] hands its two ways
/// of writing them.
struct Change<'a> {
    /// The table as it was before the statement.
    table: &'a TableInfo,
    /// Its geometry (LBAs per page, device LBAs).
    geometry: &'a Geo,
    /// The table's position in the catalog.
    pos: usize,
    /// The table's FLIXR id, if it has a per-page index.
    flixr: Option<u8>,
    /// The first LBA tables may not use (the statement log's).
    limit: u64,
    lba_size: u32,
    rewrites: BTreeMap<u64, Vec<u8>>,
    appends: BTreeMap<u64, Vec<u8>>,
}

/// The table stays in its extent: appended pages go where no catalog looks yet; changed
/// pages go through the statement log (redo images, the catalog's redo record, in place,
/// the record removed).
fn in_place(
    dev: &mut impl CommandIssuer,
    mut cat: Catalog,
    change: Change,
    mut info: TableInfo,
    meter: &mut Meter,
    report: &mut DmlReport,
) -> Result<(), HostError> {
    let (t, g) = (change.table, change.geometry);
    let new_pages = info.pages;
    if t.first_lba + new_pages * g.lpp > change.limit {
        return Err(HostError::Invalid(format!(
            "table {} cannot grow to {new_pages} pages: the device has {} LBAs for tables",
            t.name, change.limit
        )));
    }
    info.capacity = t.capacity.max(new_pages);
    // 1. Appended pages go where no catalog looks yet.
    meter.commands0 += write_pages(dev, g, t.first_lba, change.flixr, &change.appends)?;
    if change.rewrites.is_empty() {
        dev.flush()?;
        cat.tables[change.pos] = info;
        cat.seq += 1;
        cat.write(dev)?;
        meter.commands0 += 2;
        return Ok(());
    }
    // 2. The redo images into the statement log.
    let rewrites = &change.rewrites;
    grow_log(
        &mut cat,
        t,
        g,
        (rewrites.len() as u64, new_pages),
        change.lba_size,
    )?;
    let log_first = cat.log_first_lba(g.lbas);
    let log_images: BTreeMap<u64, Vec<u8>> = rewrites
        .values()
        .enumerate()
        .map(|(i, img)| (i as u64, img.clone()))
        .collect();
    meter.commands0 += write_pages(dev, g, log_first, None, &log_images)?;
    dev.flush()?;
    report.log_pages = rewrites.len() as u64;
    // 3. Commit: the new catalog with the redo record.
    let keys: Vec<u64> = rewrites.keys().copied().collect();
    cat.tables[change.pos] = info;
    cat.seq += 1;
    cat.redo = Some(Redo {
        table: t.name.clone(),
        pages: crate::rowstore::runs(&keys, u64::MAX),
    });
    cat.write(dev)?;
    meter.commands0 += 2;
    // 4 and 5: in place, then the record goes.
    report.pages_rewritten = rewrites.len() as u64;
    meter.commands0 += apply_redo(dev, &mut cat, Some(rewrites))?;
    Ok(())
}

/// Make the statement log hold `pages` redo images of table `t` (growing to `new_pages`
/// pages): at least double it (and 256 pages), within the free LBAs after the tables.
fn grow_log(
    cat: &mut Catalog,
    t: &TableInfo,
    g: &Geo,
    (pages, new_pages): (u64, u64),
    lba_size: u32,
) -> Result<(), HostError> {
    let need = pages * g.lpp;
    if cat.log_lbas >= need {
        return Ok(());
    }
    let want = need.max(cat.log_lbas * 2).max(256 * g.lpp);
    let floor = cat
        .next_free_lba(lba_size)
        .max(t.first_lba + new_pages * g.lpp);
    let room = g.lbas.saturating_sub(floor);
    if need > room {
        return Err(HostError::Invalid(format!(
            "the statement rewrites {pages} pages of {}: its redo log needs {need} LBAs, the device has {room} free",
            t.name
        )));
    }
    cat.log_lbas = want.min(room);
    Ok(())
}

/// Relocation: the table with its changes into a new extent after the last table, the
/// catalog switched to it, the old extent trimmed.
fn relocate_table(
    dev: &mut impl CommandIssuer,
    mut cat: Catalog,
    change: Change,
    mut info: TableInfo,
    meter: &mut Meter,
    report: &mut DmlReport,
) -> Result<(), HostError> {
    let (t, g) = (change.table, change.geometry);
    let new_pages = info.pages;
    let lpp = g.lpp;
    let first = cat.next_free_lba(change.lba_size).div_ceil(lpp) * lpp;
    let room = change.limit.saturating_sub(first) / lpp;
    if room < new_pages {
        return Err(HostError::Invalid(format!(
            "table {} cannot grow to {new_pages} pages: {room} pages are free after the last table",
            t.name
        )));
    }
    info.first_lba = first;
    info.capacity = (new_pages * 2).min(room).max(new_pages);
    let mut p = 0;
    while p < t.pages {
        let k = g.mdts_pages.min(t.pages - p);
        let list: Vec<u64> = (p..p + k).collect();
        let mut chunk: BTreeMap<u64, Vec<u8>> = read_pages(dev, g, t.first_lba, &list)?
            .into_iter()
            .collect();
        for (q, img) in chunk.iter_mut() {
            if let Some(new) = change.rewrites.get(q) {
                img.clone_from(new);
            }
        }
        meter.commands0 += 1 + write_pages(dev, g, first, change.flixr, &chunk)?;
        p += k;
    }
    meter.commands0 += write_pages(dev, g, first, change.flixr, &change.appends)?;
    dev.flush()?;
    report.pages_relocated = t.pages;
    report.pages_rewritten = change.rewrites.len() as u64;
    cat.tables[change.pos] = info;
    cat.seq += 1;
    cat.write(dev)?;
    let n = t.end_lba(change.lba_size) - t.first_lba;
    if n > 0 {
        dev.exec(Command::Trim {
            lba: t.first_lba,
            blocks: n,
        })?;
    }
    meter.commands0 += 3;
    Ok(())
}

fn apply_redo(
    c: &mut impl CommandIssuer,
    cat: &mut Catalog,
    images: Option<&BTreeMap<u64, Vec<u8>>>,
) -> Result<u64, HostError> {
    let Some(redo) = cat.redo.clone() else {
        return Ok(0);
    };
    let t = cat.tables[find(cat, &redo.table)?].clone();
    let g = geo(c, &t)?;
    let flixr = t.index.as_ref().map(|i| i.flixr_table);
    let log_first = cat.log_first_lba(g.lbas);
    let mut commands = 0;
    let list: Vec<u64> = redo.page_list().collect();
    if list.iter().any(|&p| p >= t.pages) || list.len() as u64 * g.lpp > cat.log_lbas {
        return Err(HostError::Catalog(format!(
            "the redo record of table {} names pages outside the table or the log",
            t.name
        )));
    }
    let mut i = 0u64;
    for chunk in list.chunks(g.mdts_pages as usize) {
        let imgs: BTreeMap<u64, Vec<u8>> = match images {
            Some(all) => chunk
                .iter()
                .filter_map(|p| all.get(p).map(|b| (*p, b.clone())))
                .collect(),
            None => {
                let logp: Vec<u64> = (i..i + chunk.len() as u64).collect();
                commands += 1;
                read_pages(c, &g, log_first, &logp)?
                    .into_iter()
                    .zip(chunk)
                    .map(|((_, b), &p)| (p, b))
                    .collect()
            }
        };
        commands += write_pages(c, &g, t.first_lba, flixr, &imgs)?;
        i += chunk.len() as u64;
    }
    c.flush()?;
    cat.redo = None;
    cat.seq += 1;
    cat.write(c)?;
    c.exec(Command::Trim {
        lba: log_first,
        blocks: (list.len() as u64 * g.lpp).max(1),
    })?;
    Ok(commands + 3)
}

/// Finishes the statement a power cut interrupted after its commit (the catalog's redo
/// record): writes its page images in place and drops the record. On a device that
/// refuses writes it is [`HostError::Unfinished`].
pub fn finish(dev: &mut impl CommandIssuer, cat: &mut Catalog) -> Result<(), HostError> {
    let Some(redo) = cat.redo.clone() else {
        return Ok(());
    };
    apply_redo(dev, cat, None).map(|_| ()).map_err(|e| match e {
        HostError::Catalog(_) => e,
        other => HostError::Unfinished {
            table: redo.table.clone(),
            pages: redo.len(),
            cause: other.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Client;
    use csd_device::NvmeDevice;
    use csd_ftl::{Ftl, FtlConfig};
    use csd_nand::Nand;
    use csd_table::Layout;
    use csd_table::datagen::{SyntheticGenerator, SyntheticSpec};

    /// INSERT and UPDATE widen the catalog's column bounds to what they wrote; DELETE
    /// never narrows them (an estimate for the planner, never a result).
    #[test]
    fn inserts_and_updates_widen_the_column_bounds() {
        let cfg = DeviceConfig::preset("tiny").unwrap();
        let nand = Nand::new_in_memory(cfg.clone()).unwrap();
        let ftl = Ftl::format(nand, FtlConfig::default()).unwrap();
        let mut c = Client::new(NvmeDevice::new(ftl)).unwrap();
        let spec = SyntheticSpec::synthetic4(3_000, 1).unwrap();
        let g = SyntheticGenerator::new(spec).unwrap();
        Catalog::load(&mut c, "s4", g, Layout::Nsm, &mut |_| {}).unwrap();
        let bounds = |c: &mut Client| Catalog::read(c).unwrap().tables[0].bounds.clone();
        let before = bounds(&mut c).expect("the load measured bounds");
        let (lo, hi) = before[0].expect("numeric key");
        // A row past the greatest key: the key's bounds grow, the others hold it.
        let cat = Catalog::read(&mut c).unwrap();
        let mut row = slotted::parse_rows(
            &cat.tables[0].schema,
            &Catalog::read_page(&mut c, &cat.tables[0], 0).unwrap(),
        )[0]
        .clone();
        row[0] = match row[0] {
            Value::Int32(_) => Value::Int32(i32::try_from(hi + 1_000).unwrap()),
            _ => Value::Int64(hi + 1_000),
        };
        insert(&mut c, &cfg, "s4", std::slice::from_ref(&row)).unwrap();
        let grown = bounds(&mut c).unwrap();
        assert_eq!(grown[0], Some((lo, hi + 1_000)));
        assert_eq!(grown[1..], before[1..]);
        // An UPDATE to below the least key widens the other end.
        let key = row[0].clone();
        let mut to_low = |pages: &[Vec<Vec<Value>>]| -> Result<PageEdits, HostError> {
            let mut n = 0;
            let out = pages
                .iter()
                .map(|rows| {
                    let hit = rows.iter().any(|r| r[0] == key);
                    hit.then(|| {
                        n += 1;
                        let mut rows = rows.clone();
                        for r in rows.iter_mut().filter(|r| r[0] == key) {
                            r[0] = match r[0] {
                                Value::Int32(_) => Value::Int32(i32::try_from(lo - 7).unwrap()),
                                _ => Value::Int64(lo - 7),
                            };
                        }
                        rows
                    })
                })
                .collect();
            Ok((out, n))
        };
        modify(&mut c, &cfg, "s4", DmlOp::Update, None, &mut to_low).unwrap();
        assert_eq!(bounds(&mut c).unwrap()[0], Some((lo - 7, hi + 1_000)));
        // Deleting every row leaves them.
        let mut all = |pages: &[Vec<Vec<Value>>]| -> Result<PageEdits, HostError> {
            let n = pages.iter().map(Vec::len).sum::<usize>() as u64;
            Ok((pages.iter().map(|_| Some(Vec::new())).collect(), n))
        };
        modify(&mut c, &cfg, "s4", DmlOp::Delete, None, &mut all).unwrap();
        let cat = Catalog::read(&mut c).unwrap();
        assert_eq!(cat.tables[0].rows, 0);
        assert_eq!(
            cat.tables[0].bounds.clone().unwrap()[0],
            Some((lo - 7, hi + 1_000))
        );
    }

    /// One random statement of the bounds' model test: INSERT rows with these first
    /// columns, UPDATE the first column of rows below a value to another, or DELETE
    /// rows below a value.
    #[derive(Debug, Clone)]
    enum Stmt {
        Insert(Vec<i32>),
        Update(i32, i32),
        Delete(i32),
    }

    fn stmt() -> impl proptest::strategy::Strategy<Value = Stmt> {
        use proptest::prelude::*;
        let v = -5_000i32..8_000;
        prop_oneof![
            proptest::collection::vec(v.clone(), 1..40).prop_map(Stmt::Insert),
            (v.clone(), v.clone()).prop_map(|(a, b)| Stmt::Update(a, b)),
            v.prop_map(Stmt::Delete),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]
        /// Model: the catalog's bounds are the load's, widened by every value an INSERT
        /// or UPDATE wrote and never narrowed; so they always hold every stored value.
        #[test]
        fn bounds_follow_every_value_written(stmts in proptest::collection::vec(stmt(), 1..7)) {
            let cfg = DeviceConfig::preset("tiny").unwrap();
            let nand = Nand::new_in_memory(cfg.clone()).unwrap();
            let ftl = Ftl::format(nand, FtlConfig::default()).unwrap();
            let mut c = Client::new(NvmeDevice::new(ftl)).unwrap();
            let spec = SyntheticSpec::synthetic4(600, 3).unwrap();
            let g = SyntheticGenerator::new(spec).unwrap();
            Catalog::load(&mut c, "s4", g, Layout::Pax, &mut |_| {}).unwrap();
            let cat = Catalog::read(&mut c).unwrap();
            let t = cat.tables[0].clone();
            let mut model = t.bounds.clone().expect("measured");
            let template = slotted::parse_rows(&t.schema, &Catalog::read_page(&mut c, &t, 0).unwrap())[0].clone();
            let key = |v: &Value| v.as_i64().unwrap_or(0) as i32;
            for s in &stmts {
                match s {
                    Stmt::Insert(keys) => {
                        let rows: Vec<Vec<Value>> = keys.iter().map(|&k| {
                            let mut r = template.clone();
                            r[0] = Value::Int32(k);
                            r
                        }).collect();
                        insert(&mut c, &cfg, "s4", &rows).unwrap();
                        for r in &rows {
                            for (b, v) in model.iter_mut().zip(r) {
                                if let Some(x) = v.as_i64() {
                                    crate::stats::widen(b, x);
                                }
                            }
                        }
                    }
                    Stmt::Update(below, to) => {
                        let mut hit = false;
                        let mut edit = |pages: &[Vec<Vec<Value>>]| -> Result<PageEdits, HostError> {
                            let mut n = 0;
                            let out = pages.iter().map(|rows| {
                                let mut rows = rows.clone();
                                let mut changed = false;
                                for r in rows.iter_mut().filter(|r| key(&r[0]) < *below) {
                                    r[0] = Value::Int32(*to);
                                    (n, changed) = (n + 1, true);
                                }
                                changed.then_some(rows)
                            }).collect();
                            hit |= n > 0;
                            Ok((out, n))
                        };
                        modify(&mut c, &cfg, "s4", DmlOp::Update, None, &mut edit).unwrap();
                        if hit {
                            crate::stats::widen(&mut model[0], i64::from(*to));
                        }
                    }
                    Stmt::Delete(below) => {
                        let mut edit = |pages: &[Vec<Vec<Value>>]| -> Result<PageEdits, HostError> {
                            let mut n = 0;
                            let out = pages.iter().map(|rows| {
                                let kept: Vec<_> = rows.iter().filter(|r| key(&r[0]) >= *below).cloned().collect();
                                n += (rows.len() - kept.len()) as u64;
                                (kept.len() < rows.len()).then_some(kept)
                            }).collect();
                            Ok((out, n))
                        };
                        modify(&mut c, &cfg, "s4", DmlOp::Delete, None, &mut edit).unwrap();
                    }
                }
                let cat = Catalog::read(&mut c).unwrap();
                let t = &cat.tables[0];
                let got = t.bounds.clone().expect("kept");
                proptest::prop_assert_eq!(&got, &model, "after {:?}", s);
                // Every stored value lies within them.
                for p in 0..t.pages {
                    for r in slotted::parse_rows(&t.schema, &Catalog::read_page(&mut c, t, p).unwrap()) {
                        for (b, v) in got.iter().zip(&r) {
                            if let (Some((lo, hi)), Some(x)) = (b, v.as_i64()) {
                                proptest::prop_assert!(*lo <= x && x <= *hi, "{} outside {:?}", x, b);
                            }
                        }
                    }
                }
            }
        }
    }

    /// A committed statement whose pages were not yet written in place (the catalog
    /// names a redo record): a read-only open refuses with `Unfinished` and changes
    /// nothing; a read-write open finishes it.
    #[test]
    fn a_committed_statement_is_finished_by_a_writable_open_only() {
        let cfg = DeviceConfig::preset("tiny").unwrap();
        let mut c = Client::new(NvmeDevice::new(
            Ftl::format(
                Nand::new_in_memory(cfg.clone()).unwrap(),
                FtlConfig::default(),
            )
            .unwrap(),
        ))
        .unwrap();
        let spec = SyntheticSpec::synthetic4(3_000, 1).unwrap();
        Catalog::load(
            &mut c,
            "s4",
            SyntheticGenerator::new(spec).unwrap(),
            Layout::Nsm,
            &mut |_| {},
        )
        .unwrap();
        let mut cat = Catalog::read(&mut c).unwrap();
        let t = cat.tables[0].clone();
        let g = geo(&c, &t).unwrap();
        let old = Catalog::read_page(&mut c, &t, 1).unwrap();
        let rows = slotted::parse_rows(&t.schema, &old);
        let new = page_image(&t, &rows[..10]).unwrap();
        // Steps 2 and 3 of a DELETE that keeps 10 rows of page 1: the image in the log,
        // the catalog with the record. Then power fails.
        cat.log_lbas = 4 * g.lpp;
        let log = BTreeMap::from([(0u64, new.clone())]);
        write_pages(&mut c, &g, cat.log_first_lba(g.lbas), None, &log).unwrap();
        c.flush().unwrap();
        cat.tables[0].rows -= (rows.len() - 10) as u64;
        cat.redo = Some(Redo {
            table: "s4".into(),
            pages: vec![(1, 1)],
        });
        cat.seq += 1;
        cat.write(&mut c).unwrap();
        let nand = c.into_device().into_block().into_ftl().crash();
        let mut nand = nand;
        nand.power_on();
        let ro = Ftl::open_read_only(nand, FtlConfig::default())
            .unwrap_or_else(|e| panic!("{}", e.error));
        let mut c = Client::new(NvmeDevice::new(ro)).unwrap();
        match Catalog::read(&mut c) {
            Err(HostError::Unfinished { table, pages, .. }) => {
                assert_eq!((table.as_str(), pages), ("s4", 1));
            }
            other => panic!("expected Unfinished, got {other:?}"),
        }
        assert!(Catalog::read_raw(&mut c).unwrap().redo.is_some());
        assert_eq!(Catalog::read_page(&mut c, &t, 1).unwrap(), old);
        let nand = c.into_device().into_block().into_ftl().crash();
        let mut nand = nand;
        nand.power_on();
        let rw =
            Ftl::try_recover(nand, FtlConfig::default()).unwrap_or_else(|e| panic!("{}", e.error));
        let mut c = Client::new(NvmeDevice::new(rw)).unwrap();
        let cat = Catalog::read(&mut c).unwrap();
        assert!(cat.redo.is_none());
        assert!(Catalog::read_raw(&mut c).unwrap().redo.is_none());
        assert_eq!(Catalog::read_page(&mut c, &t, 1).unwrap(), new);
        assert_eq!(cat.tables[0].rows, t.rows - (rows.len() - 10) as u64);
    }
}

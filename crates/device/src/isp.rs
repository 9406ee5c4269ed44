//! The in-storage processing runtime: sessions that scan a table inside the device
//! (smart-ssd paper §3; scan paper §4.2 embedded-CPU ISP and §4.3 hardware ISP).
//!
//! # Protocol (smart-ssd §3.1)
//! * [`Command::IspOpen`](crate::Command::IspOpen) grants a session its fixed resources
//!   (a memory arena of `isp.session_arena_kib`, up to `isp.max_pinned_pages` pinned page
//!   buffers out of the runtime's `isp.runtime_dram_mib`, §3.2 "no malloc") and returns
//!   its id, or [`Status::SessionResources`](crate::Status::SessionResources) when the
//!   device cannot grant them (all `isp.max_sessions` in use, DRAM pinned by others, an
//!   aggregation whose group table cannot fit the arena). The smallest free id is used,
//!   so a closed id is recycled.
//! * [`Command::IspGet`](crate::Command::IspGet) returns the session's status and the
//!   result chunks ready by then, merged, up to `isp.get_max_kib` of transfer; `more`
//!   says whether another chunk is ready now. Chunk data was staged in DRAM when the
//!   program wrote it, so the GET moves it over the link only.
//! * [`Command::IspClose`](crate::Command::IspClose) terminates the program if it runs,
//!   frees its buffers and arena, and returns its final counters. Any command naming an
//!   id that is not open gets [`Status::InvalidSession`](crate::Status::InvalidSession).
//!
//! # Execution model
//! A session streams its table's pages (each one flash page, `lbas_per_page` LBAs)
//! through a pipeline of pinned buffers: page `i` is issued when a buffer is free (the
//! page `i - P` has been processed and unpinned), read by the FTL (dies and channels in
//! parallel: consecutive table pages lie on different channels), then:
//! * `Cpu` (embedded-CPU ISP, scan §4.2): the page is staged in DRAM and an embedded core
//!   runs the shared [`Evaluator`] on it. The core is charged, at the bus clock
//!   (`cpu.clock_mhz / isp.cycle_clock_divisor`), `isp.page_cycles` per page, `t_comp`
//!   cycles per record examined (per predicate evaluated when there are several),
//!   `t_result` per result record written (scan Table 2), `isp.agg_cycles_per_update`
//!   per aggregate update, and
//!   `isp.dram_access_cycles` per DRAM access of the cache-less core: NSM pays one access
//!   per value read plus one per record for its slot, PAX one per `isp.ldm_bytes` of a
//!   minipage (the LDM instruction of smart-ssd §4.2.1). That is what makes PAX faster.
//! * `Hw` (hardware ISP, scan §4.3 and its Figure 3): per-channel compare logic filters
//!   records as they leave the flash controller, and no embedded-CPU time is spent. The
//!   evaluator runs here too (so the results are the same), but its work is charged to
//!   the FMC's logic, which keeps pace with the inbound stream:
//!   - a projection writes the matching records to DRAM and they cross the link
//!     (`rows_selected × row width` bytes, scan eq. 7–8, plus the bytes of the
//!     records' variable-length values, `selected_var_bytes`: a `VARCHAR` record is its
//!     slots and its strings); the host folds them, which the host side charges at its
//!     own costs;
//!   - the compare logic compares a fixed-width attribute (CHAR, numbers, dates) in the
//!     beat it streams by, so such predicates add no time to the page. A
//!     variable-length value (VARCHAR / VARBINARY) lies in the page's heap at the offset
//!     its slot names, not in the record stream, so the logic compares it from the
//!     FMC's page buffer once the page has arrived, one byte per channel beat: the page
//!     leaves the FMC `var_bytes_compared / channel rate` after its transfer, where
//!     `var_bytes_compared` counts the bytes the evaluator actually compared (up to
//!     the first difference, the prefix of a `LIKE 'p%'`, the whole value of a
//!     search). The delay holds the page's buffer (it is charged as the page's latency
//!     in the FMC; the page's channel transfer is booked by the read);
//!   - an aggregation is folded by the FMC's aggregation logic as records stream by
//!     (Figure 3: "it triggers the update of the aggregate value"): the accumulators of
//!     up to [`HW_AGG_REGISTER_GROUPS`] groups are registers of the logic, so nothing per
//!     record reaches DRAM (an ungrouped aggregate, TPC-H Q1's four groups); a `GROUP BY`
//!     with more groups keeps its group table in the session arena in DRAM, and every
//!     matching record of a page that ends with more groups reads and writes its group's
//!     entry (key + 24 bytes per aggregate + a row count). Only the aggregation state
//!     crosses the link.
//!
//! An aggregation's state crosses the link as its wire bytes
//! ([`PartialResult::wire_bytes`]) in either mode; a projection's chunks as their result
//! rows (`Cpu`) or the matching records (`Hw`).
//!
//! Sessions run "in the background": before every command the device advances all open
//! sessions to the command's submission instant, taking page steps in the order of their
//! issue instants across sessions, so concurrent sessions share cores, DRAM and channels
//! through the same resource reservations as everything else. Projection results are cut
//! into chunks of `isp.result_chunk_kib`; ready chunks wait in the session's arena, and a
//! session whose arena is full of unfetched chunks stops issuing pages until a GET drains
//! it (so a host that polls too slowly stalls the scan, and an adaptive poll interval
//! matters, §3.1). An aggregation's state lives in the arena and is returned as one chunk
//! at the end; when a page could add more groups than the arena holds, the groups so far
//! are sealed as a chunk first (the host merges partial states) and the table restarts
//! empty, so an aggregation with more groups than the device can hold still completes,
//! its overflow handed to the host.
//!
//! A session opened with a FLIXR rule (`IspOpen::index`, flixr §4.4) scans only the
//! pages whose per-page index entry may match it: the controller compares the entries at
//! OPEN (`Flixr::select_pages`, charged like READ_IDX's comparisons) and the session
//! streams the kept pages in order; its replies count the pages skipped.
//!
//! A page that fails to read (uncorrectable) or is not a page of the session's table
//! ends the session in the `Failed` state with a message naming the LBA; GET reports it.

use crate::ahead::{Ahead, Done, pin_pages};
use crate::block::BlockDevice;
use crate::workload::TargetResources;
use csd_ftl::FtlError;
use csd_query::{Evaluator, MinipageHints, PartialResult, Plan, WorkCounters};
use csd_sim::events::Watch;
use csd_sim::{IspConfig, Rate, SimTime};
use csd_table::{Layout, PageView};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Groups whose accumulators the hardware ISP's aggregation logic holds in registers
/// (scan paper Figure 3 draws registers and aggregation logic in each FMC, without a
/// size): beyond this, a `GROUP BY`'s group table lives in DRAM. A design choice: 64
/// entries of key + accumulators is a few KiB of registers per FMC.
pub const HW_AGG_REGISTER_GROUPS: usize = 64;

/// Where the filter runs inside the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IspMode {
    /// Embedded cores evaluate pages staged in DRAM (scan paper §4.2).
    Cpu,
    /// Per-channel hardware compare and aggregation logic before DRAM (scan paper §4.3,
    /// Figure 3).
    Hw,
}

impl IspMode {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            IspMode::Cpu => "cpu-isp",
            IspMode::Hw => "hw-isp",
        }
    }
}

/// Where a table lies on the device: `pages` table pages of `lbas_per_page` LBAs each,
/// from `first_lba` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TableExtent {
    /// First LBA of page 0.
    pub first_lba: u64,
    /// Number of table pages.
    pub pages: u64,
    /// LBAs per table page (a table page is one flash page).
    pub lbas_per_page: u32,
}

/// The program and parameters of [`Command::IspOpen`](crate::Command::IspOpen): a scan
/// of `table` evaluating `plan` in `mode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IspOpen {
    /// The query plan (the shared evaluator's program).
    pub plan: Plan,
    /// Embedded CPU or hardware filter.
    pub mode: IspMode,
    /// The table's pages.
    pub table: TableExtent,
    /// A FLIXR comparison rule `(table id, rule id)` (flixr §4.4): the firmware compares
    /// the per-page index entries of the table's pages with it at OPEN and scans only
    /// the pages that may match. `None`: every page.
    pub index: Option<(u8, u16)>,
}

impl IspOpen {
    /// Bytes the OPEN command carries over the link: a fixed header plus the program
    /// (plan) encoded as its columns and expressions; 1 KiB is generous for the subset.
    pub const WIRE_BYTES: u64 = 1024;
}

/// A session's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionState {
    /// Pages are still being processed (or results wait to be fetched).
    Running,
    /// Every page was processed; fetch the remaining chunks, then CLOSE.
    Done,
    /// The program stopped on an error.
    Failed(String),
}

/// What [`Command::IspGet`](crate::Command::IspGet) and
/// [`Command::IspClose`](crate::Command::IspClose) return.
#[derive(Debug, Clone, PartialEq)]
pub struct IspReply {
    /// The session.
    pub session: u32,
    /// Its state at the command's submission instant.
    pub state: SessionState,
    /// Pages processed by the command's submission instant.
    pub pages_done: u64,
    /// Pages in the table.
    pub pages_total: u64,
    /// A ready result chunk (rows, or the final aggregation state), if any.
    pub chunk: Option<PartialResult>,
    /// Bytes that chunk stands for on the host link (an aggregation's state; a
    /// projection's rows, or under `Hw` the matching records).
    pub chunk_link_bytes: u64,
    /// Rows that passed the filter in the pages behind this chunk (the host folds them
    /// under `Hw` projections; a `Hw` aggregation folded them in the controller).
    pub chunk_rows_selected: u64,
    /// Another chunk is ready now: GET again without waiting.
    pub more: bool,
    /// Table pages the session's FLIXR rule ruled out (never read from flash).
    pub pages_skipped: u64,
    /// Index-cache misses of that comparison.
    pub index_misses: u64,
    /// The evaluator's work so far (all pages processed).
    pub work: WorkCounters,
}

impl IspReply {
    /// Bytes of the reply besides the chunk (status, counters).
    pub const HEADER_BYTES: u64 = 64;
}

/// Why the runtime refused a command: mapped to a [`Status`](crate::Status) by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IspRefusal {
    /// Out of sessions, buffers or arena.
    Resources(String),
    /// No such open session.
    NoSession(String),
    /// The OPEN's parameters are wrong.
    Invalid(String),
}

struct Chunk {
    ready_at: SimTime,
    result: PartialResult,
    link_bytes: u64,
    rows_selected: u64,
    arena_bytes: u64,
}

struct Session {
    /// Which opening of the runtime this is (a closed session's index is reused).
    serial: u64,
    mode: IspMode,
    /// The table's schema (pages are parsed against it).
    schema: csd_table::Schema,
    /// An empty result of the plan, cloned to start each chunk.
    empty: PartialResult,
    aggregate: bool,
    table: TableExtent,
    eval: Evaluator,
    row_width: u64,
    /// The rate at which the hardware compare logic reads variable-length values from
    /// the FMC's page buffer: the channel's (one byte per beat).
    compare_rate: Rate,
    /// Next page to issue.
    next_page: u64,
    /// Completion (unpin) instants of pages in flight.
    inflight: Inflight,
    /// Event core: pages of `inflight` whose completion the runtime's watch reported
    /// while the session had a free buffer (their buffers are reused only once it is
    /// full: `step` pops the earliest), with that completion; the earliest is watched
    /// again when it is.
    dormant: Dormant,
    pinned: u32,
    /// Earliest instant the next page may be issued.
    cursor: SimTime,
    /// Groups the arena holds (aggregations): when a page could add more, the groups so
    /// far are handed to the host as a chunk (which merges them) and the table restarts.
    group_limit: usize,
    /// Bytes of one group's entry in the arena's group table (aggregations with a
    /// `GROUP BY`; 0 for an ungrouped aggregate, whose accumulators are registers).
    group_entry_bytes: u64,
    /// The chunk being filled.
    out: PartialResult,
    out_link_bytes: u64,
    out_rows_selected: u64,
    out_ready: SimTime,
    ready: VecDeque<Chunk>,
    ready_bytes: u64,
    arena_bytes: u64,
    chunk_bytes: u64,
    pages_done: u64,
    done_at: Option<SimTime>,
    failed: Option<String>,
    work: WorkCounters,
    /// Bytes of one table page.
    page_bytes: u64,
    /// The pages to scan when a FLIXR rule selected them (page numbers, ascending).
    page_list: Option<Vec<u64>>,
    /// Pages the rule ruled out, and the index-cache misses of the comparison.
    pages_skipped: u64,
    index_misses: u64,
    /// The columns the program reads (what the cache hints bring in).
    hint_columns: Vec<usize>,
    /// Where those columns' minipages lie on the table's pages, once a page was seen
    /// (`Some(None)`: NSM, nothing to hint).
    minipages: Option<Option<MinipageHints>>,
    /// The sectors of a page whose bytes the program reads, once a page was seen
    /// ([`PageView::pieces_read`]); until then, every sector.
    crc_sectors: Option<u64>,
    /// Pages evaluated ahead on the host's other cores (no modeled effect).
    ahead: Ahead,
}

impl Session {
    /// The `i`-th page this session scans (in the rule's page list, if any).
    fn page_at(&self, i: u64) -> Option<u64> {
        page_in(self.page_list.as_deref(), self.table.pages, i)
    }

    /// Host-CPU cache hints for the pages after the one being scanned (an emulator
    /// speed-up with no modeled effect: nothing is read, counted or charged). The
    /// scan's time goes to the first touch of each page's minipages, pages far apart in
    /// memory that no hardware prefetcher predicts. Two stages: the header and the OOB
    /// bytes (the TAGs the read checks) of the page two ahead, and the minipages the
    /// program reads of the page one ahead (whose header the previous step brought in).
    /// While pages are evaluated ahead (`minipages` false), the evaluating threads hint
    /// their pages themselves and this only hints the OOB bytes.
    fn hint_ahead(&mut self, dev: &BlockDevice, minipages: bool) {
        let bytes = self.page_bytes as usize;
        let lba_of = |p: u64| self.table.first_lba + p * self.table.lbas_per_page as u64;
        let ftl = dev.ftl();
        if let Some(p2) = self.page_at(self.next_page + 1)
            && let Some((b, oob)) = ftl.peek_page_in_place(lba_of(p2), bytes)
        {
            if !minipages {
                // Evaluated ahead: this thread reads only the TAGs; towards the outer
                // caches (its `prefetcht0` waited on full miss buffers: 2% of Q6's CPU).
                csd_nand::prefetch_lines_l2(oob);
                return;
            }
            csd_nand::prefetch_lines(&b[..b.len().min(128)]);
            csd_nand::prefetch_lines(oob);
        }
        if !minipages {
            return;
        }
        let Some(b) = self
            .page_at(self.next_page)
            .and_then(|p1| ftl.peek_in_place(lba_of(p1), bytes))
        else {
            return;
        };
        if self.minipages.is_none()
            && let Ok(v) = PageView::parse_unverified(b, &self.schema)
        {
            self.minipages = Some(MinipageHints::of(&v, &self.hint_columns));
        }
        if let Some(Some(m)) = &self.minipages {
            m.hint(csd_nand::prefetch_lines, b);
        }
    }

    /// The `i`-th page's evaluation if it was (or now is) done ahead (`None`: the step
    /// evaluates it), and its CRCs if the thread that evaluated it found them matching.
    /// See [`crate::ahead`].
    fn evaluated_ahead(
        &mut self,
        dev: &BlockDevice,
        i: u64,
    ) -> (Option<Done>, Option<csd_ftl::SectorCrcs>) {
        if !self.ahead.enabled() {
            return (None, None);
        }
        let ftl = dev.ftl();
        let total = self.total();
        let (first, per) = (self.table.first_lba, self.table.lbas_per_page as u64);
        let page_bytes = self.page_bytes as usize;
        let page_list = self.page_list.as_deref();
        let table_pages = self.table.pages;
        let lba_of = |k: u64| page_in(page_list, table_pages, k).map(|p| first + p * per);
        let crc = self.crc_sectors.unwrap_or(csd_ftl::ALL_SECTORS);
        self.ahead
            .take(i, ftl.content_epoch(), total, &self.schema, |j, n| {
                pin_pages(ftl, page_bytes, n, lba_of, j, crc)
            })
    }

    /// Pages the session scans (all of the table's, or those its rule selected).
    fn total(&self) -> u64 {
        self.page_list
            .as_ref()
            .map_or(self.table.pages, |l| l.len() as u64)
    }

    /// Whether the session has a page to issue: it has not failed, pages are left, and
    /// its arena is not full of unfetched chunks (then it waits for a GET).
    fn can_issue(&self) -> bool {
        self.failed.is_none()
            && self.next_page < self.total()
            && self.ready_bytes < self.arena_bytes
    }

    /// Whether every pinned buffer holds a page in flight.
    fn full(&self) -> bool {
        self.inflight.len() as u32 >= self.pinned
    }

    /// When the next page can be issued, if it can be at all (on calendars).
    fn next_issue(&self) -> Option<SimTime> {
        if !self.can_issue() {
            return None;
        }
        if !self.full() {
            Some(self.cursor)
        } else {
            self.inflight.earliest().map(|t| t.max(self.cursor))
        }
    }

    /// Pages whose processing ended by `at` (the model may have run pages whose
    /// completion lies in `at`'s future; only the last `pinned` can). `by(t, at)`
    /// decides whether `t` ends by `at`.
    fn pages_done_by(&self, at: SimTime, by: &mut impl FnMut(SimTime, SimTime) -> bool) -> u64 {
        let pending = self.inflight.iter().filter(|&t| !by(t, at)).count() as u64;
        self.pages_done.saturating_sub(pending)
    }

    /// The state as seen at instant `at` (the last page may be processed in the
    /// model's future).
    fn state(&self, at: SimTime, by: &mut impl FnMut(SimTime, SimTime) -> bool) -> SessionState {
        match (&self.failed, self.done_at) {
            (Some(m), _) => SessionState::Failed(m.clone()),
            (None, Some(d)) if by(d, at) => SessionState::Done,
            _ => SessionState::Running,
        }
    }

    /// Replace every instant the session keeps by `settle(instant)` (the event core's
    /// renaming at compaction, and final values when a recording ends).
    fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        self.cursor = settle(self.cursor);
        self.out_ready = settle(self.out_ready);
        self.done_at = self.done_at.map(&mut *settle);
        self.inflight.settle(settle);
        for c in &mut self.ready {
            c.ready_at = settle(c.ready_at);
        }
    }

    /// A report of the session at `at` with `chunk` (and its link bytes and rows).
    fn reply(
        &self,
        id: u32,
        at: SimTime,
        by: &mut impl FnMut(SimTime, SimTime) -> bool,
        chunk: (Option<PartialResult>, u64, u64),
        more: bool,
    ) -> IspReply {
        IspReply {
            session: id,
            state: self.state(at, by),
            pages_done: self.pages_done_by(at, by),
            pages_total: self.total(),
            chunk: chunk.0,
            chunk_link_bytes: chunk.1,
            chunk_rows_selected: chunk.2,
            more,
            work: self.work,
            pages_skipped: self.pages_skipped,
            index_misses: self.index_misses,
        }
    }

    /// Before an aggregation takes a page of `page_rows` rows read at `t_flash`: when the
    /// arena could overflow on it, emit the groups so far (the host merges partial
    /// states) and go on with an empty table.
    fn seal_if_arena_may_overflow(&mut self, page_rows: usize, t_flash: SimTime) {
        if self.aggregate && self.out.len().saturating_add(page_rows) > self.group_limit {
            self.out_ready = self.out_ready.max(t_flash);
            self.seal_chunk();
        }
    }

    /// An empty chunk; a projection's with room for the rows that fill one (a chunk is
    /// sealed once its rows' wire bytes, or the DRAM bytes the FMC stages for them,
    /// `link_row_bytes` per row, reach `chunk_bytes`), plus some: the page that fills it
    /// is added whole.
    fn fresh_chunk(empty: &PartialResult, chunk_bytes: u64, link_row_bytes: u64) -> PartialResult {
        let mut c = empty.clone();
        if let PartialResult::Rows(r) = &mut c {
            let row = (r.row_wire_bytes() as u64).max(link_row_bytes).max(1);
            r.reserve((chunk_bytes / row).min(1 << 20) as usize + 256);
        }
        c
    }

    /// Move the chunk being filled to the ready queue.
    fn seal_chunk(&mut self) {
        let link_row = link_row_bytes(self.mode, self.row_width);
        let fresh = Session::fresh_chunk(&self.empty, self.chunk_bytes, link_row);
        let result = std::mem::replace(&mut self.out, fresh);
        let arena = result.wire_bytes().max(self.out_link_bytes);
        // An aggregation's state crosses the link as its wire bytes.
        let link_bytes = if self.aggregate {
            result.wire_bytes()
        } else {
            self.out_link_bytes
        };
        self.ready.push_back(Chunk {
            ready_at: self.out_ready,
            result,
            link_bytes,
            rows_selected: self.out_rows_selected,
            arena_bytes: arena,
        });
        self.ready_bytes += arena;
        self.out_link_bytes = 0;
        self.out_rows_selected = 0;
    }
}

/// The runtime: every open session.
pub(crate) struct Runtime {
    cfg: IspConfig,
    page_bytes: u64,
    sessions: Vec<Option<Session>>,
    pinned_total: u64,
    /// Sessions opened so far (the serial of the last).
    opened: u64,
    /// The targets of [`Runtime::advance_events`], kept between its calls while the
    /// recording's graph is the one of `watch_graph` (not compacted or replaced since):
    /// what of each session they hold (by its serial), the session's pages in flight
    /// (or its cursor) and nothing else.
    watch: Watch,
    watching: Vec<(u64, Watched)>,
    watch_graph: Option<u64>,
}

impl Runtime {
    pub(crate) fn new(cfg: IspConfig, page_bytes: u64) -> Runtime {
        Runtime {
            cfg,
            page_bytes,
            sessions: Vec::new(),
            pinned_total: 0,
            opened: 0,
            watch: Watch::new(),
            watching: Vec::new(),
            watch_graph: None,
        }
    }

    fn budget_pages(&self) -> u64 {
        self.cfg.runtime_dram_mib as u64 * (1 << 20) / self.page_bytes.max(1)
    }

    /// Open a session (after the caller has advanced to `at`).
    /// `selected`: the pages a FLIXR rule kept and the index-cache misses it had.
    pub(crate) fn open(
        &mut self,
        dev: &BlockDevice,
        args: IspOpen,
        selected: Option<(Vec<u64>, u64)>,
        at: SimTime,
    ) -> Result<u32, IspRefusal> {
        let t = args.table;
        Self::check_extent(dev, &t, self.page_bytes)?;
        let pinned = self.grant_pages()?;
        let arena_bytes = self.cfg.session_arena_kib as u64 * 1024;
        let (group_limit, group_entry_bytes) = self.group_table(&args, arena_bytes)?;
        let id = match self.sessions.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.sessions.push(None);
                self.sessions.len() - 1
            }
        };
        let chunk_bytes = (self.cfg.result_chunk_kib as u64 * 1024).min(arena_bytes);
        let (page_list, index_misses) = match selected {
            Some((l, m)) => (Some(l), m),
            None => (None, 0),
        };
        let total = page_list.as_ref().map_or(t.pages, |l| l.len() as u64);
        let pages_skipped = t.pages - total;
        let out = PartialResult::with_group_limit(&args.plan, group_limit);
        let row_width = args.plan.schema.row_width() as u64;
        self.pinned_total += pinned as u64;
        let empty = out.clone();
        let link_row = link_row_bytes(args.mode, row_width);
        let out = Session::fresh_chunk(&empty, chunk_bytes, link_row);
        self.opened += 1;
        self.sessions[id] = Some(Session {
            serial: self.opened,
            mode: args.mode,
            schema: args.plan.schema.clone(),
            empty,
            aggregate: args.plan.is_aggregate(),
            table: t,
            eval: Evaluator::new(&args.plan),
            row_width,
            compare_rate: dev.ftl().nand().config().channel.rate(),
            next_page: 0,
            inflight: Inflight::new(),
            dormant: Dormant::default(),
            pinned,
            cursor: at,
            group_limit,
            group_entry_bytes,
            out,
            out_link_bytes: 0,
            out_rows_selected: 0,
            out_ready: at,
            ready: VecDeque::new(),
            ready_bytes: 0,
            arena_bytes,
            chunk_bytes,
            pages_done: 0,
            done_at: if total == 0 { Some(at) } else { None },
            failed: None,
            work: WorkCounters::default(),
            page_bytes: self.page_bytes,
            page_list,
            pages_skipped,
            index_misses,
            hint_columns: args.plan.referenced_columns(),
            minipages: None,
            crc_sectors: None,
            ahead: Ahead::new(&args.plan, csd_query::scan_threads()),
        });
        if total == 0
            && let Some(s) = self.sessions[id].as_mut()
        {
            s.seal_chunk();
        }
        Ok(id as u32 + 1)
    }

    /// A session's table: pages of one flash page each, inside the device.
    fn check_extent(dev: &BlockDevice, t: &TableExtent, page_bytes: u64) -> Result<(), IspRefusal> {
        let ls = dev.ftl().lba_size() as u64;
        if t.lbas_per_page == 0 || t.lbas_per_page as u64 * ls != page_bytes {
            return Err(IspRefusal::Invalid(format!(
                "a table page must be one flash page ({} bytes = {} LBAs), not {} LBAs",
                page_bytes,
                page_bytes / ls.max(1),
                t.lbas_per_page
            )));
        }
        let end = t
            .pages
            .checked_mul(t.lbas_per_page as u64)
            .and_then(|n| n.checked_add(t.first_lba));
        match end {
            Some(e) if e <= dev.ftl().lbas() => Ok(()),
            _ => Err(IspRefusal::Invalid(format!(
                "table of {} pages at LBA {} runs past the device's {} LBAs",
                t.pages,
                t.first_lba,
                dev.ftl().lbas()
            ))),
        }
    }

    /// A new session's fixed resources: a session slot and its pinned page buffers
    /// (returned), refused when either is exhausted.
    fn grant_pages(&self) -> Result<u32, IspRefusal> {
        let open = self.sessions.iter().filter(|s| s.is_some()).count() as u32;
        if open >= self.cfg.max_sessions {
            return Err(IspRefusal::Resources(format!(
                "all {} sessions are open: CLOSE one (or raise isp.max_sessions)",
                self.cfg.max_sessions
            )));
        }
        let free = self.budget_pages().saturating_sub(self.pinned_total);
        let pinned = (self.cfg.max_pinned_pages as u64).min(free) as u32;
        if pinned == 0 {
            return Err(IspRefusal::Resources(format!(
                "no page buffers left: the runtime's {} MiB are pinned by open sessions",
                self.cfg.runtime_dram_mib
            )));
        }
        Ok(pinned)
    }

    /// The group table of an aggregation in the session arena: how many groups it holds
    /// and the bytes of one entry (key bytes, 24 bytes of accumulator per aggregate and
    /// a row count; 0 without GROUP BY). Refused when it cannot hold one page's rows.
    fn group_table(&self, args: &IspOpen, arena_bytes: u64) -> Result<(usize, u64), IspRefusal> {
        let csd_query::Output::Aggregate(a) = &args.plan.output else {
            return Ok((usize::MAX, 0));
        };
        let key: usize = a
            .group_by
            .iter()
            .filter_map(|&g| args.plan.schema.columns().get(g))
            .map(|c| c.ty.width())
            .sum();
        let per_group = (key + 24 * a.aggregates.len() + 8).max(1) as u64;
        let limit = arena_bytes / per_group;
        // A page adds at most its row count of groups, so the group table holds one
        // page's worth before the session hands its groups to the host.
        let page_rows = csd_table::page::rows_per_page(
            Layout::Pax,
            args.plan.schema.row_width(),
            self.page_bytes as usize,
        ) as u64;
        if limit < page_rows.max(1) {
            return Err(IspRefusal::Resources(format!(
                "the group table of this aggregation needs {per_group} bytes per group \
                 and room for one page's {page_rows} rows ({} bytes), more than the \
                 session arena of {arena_bytes} bytes (isp.session_arena_kib)",
                per_group * page_rows.max(1)
            )));
        }
        let entry = if a.group_by.is_empty() { 0 } else { per_group };
        Ok((limit as usize, entry))
    }

    fn session(&mut self, id: u32) -> Result<&mut Session, IspRefusal> {
        (id as usize)
            .checked_sub(1)
            .and_then(|i| self.sessions.get_mut(i))
            .and_then(Option::as_mut)
            .ok_or_else(|| {
                IspRefusal::NoSession(format!(
                    "session {id} is not open (never opened, or closed): OPEN a new one"
                ))
            })
    }

    /// GET: status and every chunk ready by `at` (an instant the event core has fixed:
    /// see [`Runtime::advance`]), merged, up to `get_max_bytes` of link transfer (at least
    /// one chunk).
    pub(crate) fn get(
        &mut self,
        dev: &mut BlockDevice,
        id: u32,
        at: SimTime,
    ) -> Result<IspReply, IspRefusal> {
        let max = self.cfg.get_max_kib as u64 * 1024;
        let mut by = ends_by(dev);
        let s = self.session(id)?;
        let stalled = s.ready_bytes >= s.arena_bytes;
        let (mut result, mut link, mut rows) = (None::<PartialResult>, 0u64, 0u64);
        // The chunks ready by `at`, as many as fit `max` bytes of link (at least one);
        // the first makes room for all their rows at once, not growing chunk by chunk.
        let (mut package, mut package_link) = (0usize, 0u64);
        for c in &s.ready {
            if (package > 0 && package_link + c.link_bytes > max) || !by(c.ready_at, at) {
                break;
            }
            package_link += c.link_bytes;
            package += 1;
        }
        let package_rows: usize = s.ready.iter().take(package).map(|c| c.result.len()).sum();
        for _ in 0..package {
            let Some(c) = s.ready.pop_front() else { break };
            s.ready_bytes -= c.arena_bytes;
            link += c.link_bytes;
            rows += c.rows_selected;
            match result.as_mut() {
                None => {
                    // Chunks are only packaged together for the link here: the
                    // session's group bound was applied when each was sealed.
                    let mut r = c.result;
                    r.lift_group_limit();
                    r.reserve_rows(package_rows.saturating_sub(r.len()));
                    result = Some(r);
                }
                Some(r) => {
                    if let Err(e) = r.merge(c.result) {
                        s.failed = Some(format!("merging result chunks: {e}"));
                        break;
                    }
                }
            }
        }
        // A stalled session (arena full of unfetched chunks) goes on from now.
        if stalled && s.ready_bytes < s.arena_bytes {
            s.cursor = s.cursor.max(at);
        }
        let more = s.ready.front().is_some_and(|c| by(c.ready_at, at));
        Ok(s.reply(id, at, &mut by, (result, link, rows), more))
    }

    /// CLOSE: drop the session and free its buffers (`at` as for [`Runtime::get`]).
    pub(crate) fn close(
        &mut self,
        dev: &mut BlockDevice,
        id: u32,
        at: SimTime,
    ) -> Result<IspReply, IspRefusal> {
        let mut by = ends_by(dev);
        let s = self.session(id)?;
        let reply = s.reply(id, at, &mut by, (None, 0, 0), false);
        let pinned = s.pinned as u64;
        self.sessions[id as usize - 1] = None;
        self.pinned_total -= pinned;
        Ok(reply)
    }

    /// Open sessions.
    pub(crate) fn open_sessions(&self) -> usize {
        self.sessions.iter().filter(|s| s.is_some()).count()
    }

    /// Replace every instant the open sessions keep by `settle(instant)`.
    pub(crate) fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        for s in self.sessions.iter_mut().flatten() {
            s.settle_instants(settle);
        }
    }

    /// Run every session's page steps whose issue instant is at or before `until`;
    /// `until`'s value, final on the event core (see [`Runtime::advance_events`]).
    pub(crate) fn advance(&mut self, dev: &mut BlockDevice, until: SimTime) -> SimTime {
        if csd_sim::events::recording() {
            return self.advance_events(dev, &[until]).map_or(until, |(_, t)| t);
        }
        loop {
            let next = self
                .sessions
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.as_ref().and_then(|s| s.next_issue().map(|t| (t, i))))
                .min();
            match next {
                Some((t, i)) if t <= until => {
                    let cfg = self.cfg;
                    if let Some(s) = self.sessions[i].as_mut() {
                        step(s, dev, &cfg, t);
                    }
                }
                _ => return until,
            }
        }
    }

    /// [`Runtime::advance`] on the event core, up to the first of `untils`: the earliest
    /// of them (the first of equal ones) and its final value, `None` for none. The
    /// instants a session waits for (its pages' completions) and `untils` may not be
    /// fixed yet. Each round asks the core which comes first of `untils` and every
    /// session's possible next issue (a session with a free buffer issues at its cursor,
    /// a full one when the first of its pages in flight completes), booking stages only
    /// up to the winner (`Graph::earliest`): no step still to be recorded can then issue
    /// before a booked stage arrived, so every resource keeps serving in arrival order.
    /// The calendars' choice, decided exactly: a page is issued at `max(cursor, first
    /// completion)` when that is at or before `until`; ties go to the sessions, lowest
    /// first. Host code that waits for an instant while sessions are open goes through
    /// here (`NvmeDevice::resolve`), so the steps issued before it are recorded first.
    pub(crate) fn advance_events(
        &mut self,
        dev: &mut BlockDevice,
        untils: &[SimTime],
    ) -> Option<(usize, SimTime)> {
        let cfg = self.cfg;
        // The targets live in a watch (each evaluated when added and again only when the
        // stage it waits for is booked): re-evaluating every page in flight of every
        // session each round was most of TPC-H's time on the core, and adding them all
        // again at each call (one per GET) a third of what was left. Keys order ties as
        // the rule above: sessions by index, a session's pages by issue, `untils` last.
        let mut watch = std::mem::take(&mut self.watch);
        let mut watching = std::mem::take(&mut self.watching);
        let graph = csd_sim::events::generation();
        if graph.is_none() || graph != self.watch_graph {
            // A new recording, or a compaction renamed the instants: start again.
            watch.clear();
            watching.clear();
        }
        watching.resize(self.sessions.len(), (0, Watched::Nothing));
        for (i, s) in self.sessions.iter_mut().enumerate() {
            // Between calls a session may have opened, closed, or got room (a GET) or
            // failed; its pages and cursor change only here.
            let now = s
                .as_ref()
                .map_or((0, Watched::Nothing), |s| (s.serial, Watched::of(s)));
            if watching[i] != now {
                if watching[i].1 != Watched::Nothing {
                    forget_session(&mut watch, i);
                }
                if let Some(s) = s.as_mut() {
                    s.dormant.clear();
                }
                Self::watch_session(s.as_ref(), i, &mut watch);
                watching[i] = now;
            }
        }
        debug_assert_eq!(
            {
                let mut kept: Vec<u64> = watch.keys().collect();
                kept.sort_unstable();
                kept
            },
            self.targets(),
            "the kept watch holds what a fresh one would"
        );
        for (j, &t) in untils.iter().enumerate() {
            csd_sim::events::watch(&mut watch, UNTIL_KEY + j as u64, t);
        }
        let found = loop {
            let Some((key, t)) = csd_sim::events::next_done(&mut watch, &mut TargetResources(dev))
            else {
                break None; // nothing in flight, nothing to wait for
            };
            if key >= UNTIL_KEY {
                break Some(((key - UNTIL_KEY) as usize, t)); // one of `untils` comes first
            }
            let i = (key >> SESSION_SHIFT) as usize;
            let number = key & CURSOR_KEY;
            let Some(s) = self.sessions.get_mut(i).and_then(Option::as_mut) else {
                debug_assert!(false, "a watched session is open");
                break None;
            };
            let was = watching[i].1;
            let stepped = if number == CURSOR_KEY {
                step(s, dev, &cfg, t);
                true
            } else if was == Watched::Cursor {
                // A page done while the session has a free buffer changes nothing yet:
                // its buffer is reused once the session is full (the calendars' rule).
                s.dormant.report(number, t);
                continue;
            } else {
                // That page's buffer is free at `t`: the session issues its next page
                // then, or at its cursor if that is later.
                s.dormant.done(number);
                s.inflight.remove_numbered(number);
                s.cursor <= t && {
                    step(s, dev, &cfg, t);
                    true
                }
            };
            // The watch follows the session by what changed: a step issued one page, a
            // free buffer adds the cursor (the one just reached is out of the watch), a
            // session full again has its earliest dormant page back (the others end no
            // earlier: each is watched once the one before it is done, so a page costs
            // one report while the session is free, not one per change between full and
            // free). Only a session that can no longer issue is looked for in the whole
            // watch, which costs a pass over it.
            let now = Watched::of(s);
            if now == Watched::Nothing {
                forget_session(&mut watch, i);
                s.dormant.clear();
            } else {
                if let (true, Some((n, unpin))) = (stepped, s.inflight.last()) {
                    csd_sim::events::watch(&mut watch, session_key(i, n), unpin);
                }
                if now == Watched::Cursor && (number == CURSOR_KEY || was == Watched::Pages) {
                    csd_sim::events::watch(&mut watch, session_key(i, CURSOR_KEY), s.cursor);
                }
                if now == Watched::Pages
                    && let Some((n, t)) = s.dormant.next_to_watch()
                {
                    csd_sim::events::watch(&mut watch, session_key(i, n), t);
                }
            }
            watching[i] = (s.serial, now);
        };
        // The untils not reached are the caller's, not the sessions'.
        if untils.len() > usize::from(found.is_some()) {
            watch.retain(|k| k < UNTIL_KEY);
        }
        self.watch = watch;
        self.watching = watching;
        self.watch_graph = graph;
        found
    }

    /// The keys of every session's targets (what [`Runtime::watch_session`] adds),
    /// sorted: a check of the watch kept between calls.
    fn targets(&self) -> Vec<u64> {
        let mut keys = Vec::new();
        for (i, s) in self.sessions.iter().enumerate() {
            let Some(s) = s else { continue };
            let what = Watched::of(s);
            if what == Watched::Cursor {
                keys.push(session_key(i, CURSOR_KEY));
            }
            if what != Watched::Nothing {
                keys.extend(
                    s.inflight
                        .numbered()
                        .filter(|&(n, _)| !s.dormant.unwatched(n))
                        .map(|(n, _)| session_key(i, n)),
                );
            }
        }
        keys.sort_unstable();
        keys
    }

    /// Add session `i`'s targets to `watch` (its pages in flight, and its cursor when it
    /// has a free buffer; nothing when it cannot issue); which it added. With a free
    /// buffer its pages matter only once it is full again, but watching them meanwhile
    /// (each reported one set aside as dormant) spares the watch a pass over all its
    /// entries at every change between full and free, once per page of a scan whose
    /// cursor runs behind its completions.
    fn watch_session(s: Option<&Session>, i: usize, watch: &mut Watch) -> Watched {
        let Some(s) = s else {
            return Watched::Nothing;
        };
        let what = Watched::of(s);
        if what == Watched::Cursor {
            csd_sim::events::watch(watch, session_key(i, CURSOR_KEY), s.cursor);
        }
        if what != Watched::Nothing {
            for (n, t) in s.inflight.numbered() {
                csd_sim::events::watch(watch, session_key(i, n), t);
            }
        }
        what
    }
}

/// A session's dormant pages on the event core (see [`Session`]): sorted by completion,
/// then issue number (the watch's order for one session's keys), and which of them, if
/// any, is in the watch again (at most one: the earliest, while the session is full).
#[derive(Debug, Default)]
struct Dormant {
    pages: VecDeque<(u64, SimTime)>,
    watched: Option<u64>,
}

impl Dormant {
    fn clear(&mut self) {
        self.pages.clear();
        self.watched = None;
    }

    /// Page `n`, done at `t`, was reported while the session had a free buffer.
    fn report(&mut self, n: u64, t: SimTime) {
        if self.watched == Some(n) {
            // Watched again while full and reported again after the session got a free
            // buffer: it is still the earliest dormant page.
            self.watched = None;
            return;
        }
        let key = (t.ns(), n);
        let at = self.pages.partition_point(|&(m, u)| (u.ns(), m) < key);
        self.pages.insert(at, (n, t));
    }

    /// Page `n` was reported while the session was full: its buffer is reused.
    fn done(&mut self, n: u64) {
        if self.watched == Some(n) {
            self.watched = None;
            if let Some(at) = self.pages.iter().position(|&(m, _)| m == n) {
                self.pages.remove(at);
            }
        }
    }

    /// The page to watch again now that the session is full: the earliest, unless one
    /// is watched already.
    fn next_to_watch(&mut self) -> Option<(u64, SimTime)> {
        if self.watched.is_some() {
            return None;
        }
        let &(n, t) = self.pages.front()?;
        self.watched = Some(n);
        Some((n, t))
    }

    /// Whether page `n` is dormant and out of the watch.
    fn unwatched(&self, n: u64) -> bool {
        self.watched != Some(n) && self.pages.iter().any(|&(m, _)| m == n)
    }
}

/// Drop every target of session `i` from `watch` (a pass over the whole watch).
fn forget_session(watch: &mut Watch, i: usize) {
    watch.retain(|k| k >= UNTIL_KEY || (k >> SESSION_SHIFT) as usize != i);
}

/// Bits of a watch key below the session's index ([`Runtime::advance_events`]).
const SESSION_SHIFT: u32 = 40;
/// The key of a session's cursor (a page number it never reaches).
const CURSOR_KEY: u64 = (1 << SESSION_SHIFT) - 1;
/// Keys of the instants a caller waits for: above every session's.
const UNTIL_KEY: u64 = 1 << 63;

fn session_key(i: usize, number: u64) -> u64 {
    debug_assert!(number <= CURSOR_KEY && (i as u64) < (UNTIL_KEY >> SESSION_SHIFT));
    ((i as u64) << SESSION_SHIFT) | number
}

/// What of a session [`Runtime::advance_events`] watches: the next issue of a session
/// with a free buffer is its cursor; a full one's is the first completion of its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watched {
    Nothing,
    Cursor,
    Pages,
}

impl Watched {
    fn of(s: &Session) -> Watched {
        if !s.can_issue() {
            Watched::Nothing
        } else if s.full() {
            Watched::Pages
        } else {
            Watched::Cursor
        }
    }
}

/// Whether an instant ends by a fixed instant: a plain comparison on calendars, a
/// bounded decision of the event core while it records (`Graph::at_or_before`: it books
/// only stages arriving by the bound).
fn ends_by(dev: &mut BlockDevice) -> impl FnMut(SimTime, SimTime) -> bool + '_ {
    move |t, bound| csd_sim::events::at_or_before(t, bound, &mut TargetResources(&mut *dev))
}

/// Completion (unpin) instants of a session's pages in flight: a heap, earliest first,
/// on calendars; a list on the event core, which decides their order
/// ([`Runtime::advance_events`]) and whose instants' values may still rise. The list
/// names each page by its issue number in the session (a key of the core's [`Watch`]).
enum Inflight {
    Heap(BinaryHeap<Reverse<SimTime>>),
    /// Numbered in issue order and kept in it (pages complete about in that order, so
    /// a completion is removed near the front: a `Vec` moved the whole list each time).
    List {
        pages: VecDeque<(u64, SimTime)>,
        issued: u64,
    },
}

impl Inflight {
    fn new() -> Inflight {
        if csd_sim::events::recording() {
            Inflight::List {
                pages: VecDeque::new(),
                issued: 0,
            }
        } else {
            Inflight::Heap(BinaryHeap::new())
        }
    }

    fn len(&self) -> usize {
        match self {
            Inflight::Heap(h) => h.len(),
            Inflight::List { pages, .. } => pages.len(),
        }
    }

    fn push(&mut self, t: SimTime) {
        match self {
            Inflight::Heap(h) => h.push(Reverse(t)),
            Inflight::List { pages, issued } => {
                pages.push_back((*issued, t));
                *issued += 1;
            }
        }
    }

    /// The pages in flight with their issue numbers, in issue order (none on calendars).
    fn numbered(&self) -> impl Iterator<Item = (u64, SimTime)> + '_ {
        let pages = match self {
            Inflight::Heap(_) => None,
            Inflight::List { pages, .. } => Some(pages),
        };
        pages.into_iter().flatten().copied()
    }

    /// The page issued last, with its number (none on calendars).
    fn last(&self) -> Option<(u64, SimTime)> {
        match self {
            Inflight::Heap(_) => None,
            Inflight::List { pages, .. } => pages.back().copied(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = SimTime> + '_ {
        let (h, l) = match self {
            Inflight::Heap(h) => (Some(h), None),
            Inflight::List { pages, .. } => (None, Some(pages)),
        };
        let heap = h.into_iter().flat_map(|h| h.iter().map(|r| r.0));
        heap.chain(l.into_iter().flat_map(|l| l.iter().map(|&(_, t)| t)))
    }

    /// The earliest completion (final values: calendars, or a list settled after its
    /// recording).
    fn earliest(&self) -> Option<SimTime> {
        match self {
            Inflight::Heap(h) => h.peek().map(|r| r.0),
            Inflight::List { pages, .. } => pages.iter().map(|&(_, t)| t).min(),
        }
    }

    /// Free the buffer of the earliest completion (final values, as [`Inflight::earliest`]).
    fn pop_earliest(&mut self) {
        match self {
            Inflight::Heap(h) => {
                h.pop();
            }
            Inflight::List { pages, .. } => {
                if let Some((k, _)) = pages.iter().enumerate().min_by_key(|&(k, p)| (p.1, k)) {
                    pages.remove(k);
                }
            }
        }
    }

    /// Free the buffer of the page numbered `number` (the event core chose it).
    fn remove_numbered(&mut self, number: u64) {
        if let Inflight::List { pages, .. } = self
            && let Ok(k) = pages.binary_search_by_key(&number, |&(n, _)| n)
        {
            pages.remove(k);
        }
        debug_assert!(
            matches!(self, Inflight::List { .. }),
            "pages are chosen by number only on the event core"
        );
    }

    fn settle(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        match self {
            Inflight::Heap(h) => {
                let v: Vec<_> = std::mem::take(h)
                    .into_iter()
                    .map(|r| Reverse(settle(r.0)))
                    .collect();
                *h = BinaryHeap::from(v);
            }
            Inflight::List { pages, .. } => pages.iter_mut().for_each(|p| p.1 = settle(p.1)),
        }
    }
}

/// What each selected row of a projection adds to its chunk's link bytes besides its
/// wire bytes: hw-isp stages whole records of `row_width` bytes.
fn link_row_bytes(mode: IspMode, row_width: u64) -> u64 {
    match mode {
        IspMode::Hw => row_width,
        IspMode::Cpu => 0,
    }
}

/// When the hardware compare logic is done with a page that left the channel at
/// `t_flash` and whose evaluation did the work `c`: fixed-width attributes are compared
/// as they stream by (no delay), variable-length values from the FMC's page buffer at
/// `rate` per byte actually compared (see the module docs).
fn hw_compared(rate: Rate, c: WorkCounters, t_flash: SimTime) -> SimTime {
    t_flash.after(rate.transfer_ns(c.var_bytes_compared))
}

/// The table page a session of `pages` table pages scans `i`-th: of `list` if its rule
/// selected pages, else the `i`-th.
fn page_in(list: Option<&[u64]>, pages: u64, i: u64) -> Option<u64> {
    match list {
        Some(l) => l.get(i as usize).copied(),
        None => (i < pages).then_some(i),
    }
}

/// Process one page of `s`, issued at `t`.
fn step(s: &mut Session, dev: &mut BlockDevice, cfg: &IspConfig, t: SimTime) {
    if s.full() {
        s.inflight.pop_earliest();
    }
    let (ahead, crcs) = s.evaluated_ahead(dev, s.next_page);
    if let Some(c) = &crcs {
        // Hashed by the thread that evaluated the page: the read checks only its TAGs.
        dev.ftl_mut().note_crcs_matched(c);
    }
    let page = s.page_at(s.next_page).unwrap_or(s.table.pages);
    s.next_page += 1;
    s.cursor = t;
    let lba = s.table.first_lba + page * s.table.lbas_per_page as u64;
    let page_bytes = s.page_bytes;
    s.hint_ahead(dev, ahead.is_none());
    // The firmware scans the page where the read put it: no copy (`Ftl::read_ref`); the
    // end-to-end check hashes the sectors the program reads.
    let crc = s.crc_sectors.unwrap_or(csd_ftl::ALL_SECTORS);
    let sector_size = dev.ftl().nand().geometry().sector_size as usize;
    let (t_flash, page_buf) =
        match dev
            .ftl_mut()
            .read_ref_checking(lba, page_bytes as usize, t, crc)
        {
            Ok(r) => r,
            Err(FtlError::Uncorrectable { lba }) => {
                s.failed = Some(format!(
                    "table page {page}: LBA {lba} is unreadable (uncorrectable)"
                ));
                return;
            }
            Err(e) => {
                s.failed = Some(format!("table page {page} at LBA {lba}: {e}"));
                return;
            }
        };
    if s.crc_sectors.is_none() {
        // This page was checked whole: its layout says where the program's bytes lie.
        s.crc_sectors = Some(
            PageView::parse_unverified(page_buf, &s.schema)
                .ok()
                .and_then(|v| v.pieces_read(&s.hint_columns, sector_size))
                .unwrap_or(csd_ftl::ALL_SECTORS),
        );
    }
    let (c, layout) = match ahead {
        Some(d) => match merge_ahead(s, d, t_flash) {
            Ok(r) => r,
            Err(e) => {
                s.failed = Some(format!("table page {page} at LBA {lba}: {e}"));
                return;
            }
        },
        None => match eval_in_step(s, page_buf, t_flash) {
            Ok(r) => r,
            Err(e) => {
                s.failed = Some(format!("table page {page} at LBA {lba}{e}"));
                return;
            }
        },
    };
    charge(s, dev, cfg, c, layout, t_flash, page_bytes);
}

/// Adds a page evaluated ahead to the chunk being filled, sealing first where the
/// sequential step would: its result is the step's own.
fn merge_ahead(
    s: &mut Session,
    d: Done,
    t_flash: SimTime,
) -> Result<(WorkCounters, Layout), csd_query::EvalError> {
    s.seal_if_arena_may_overflow(d.work.records_examined as usize, t_flash);
    let layout = d.layout;
    d.out.merge_to(&mut s.out)?;
    s.ahead.recycle(d.out);
    Ok((d.work, layout))
}

/// Evaluates the page the step read (`page_buf`) into the chunk being filled; the error
/// is the end of "table page N at LBA L…".
fn eval_in_step(
    s: &mut Session,
    page_buf: &[u8],
    t_flash: SimTime,
) -> Result<(WorkCounters, Layout), String> {
    // The FTL checked the sectors of this page the program reads against its end-to-end
    // CRC on the way in (every sector's TAG), so the page's own checksum is not hashed
    // again (all structural checks stay).
    let page_rows = PageView::parse_unverified(page_buf, &s.schema)
        .map_err(|e| format!(" is not a page of `{}`: {e}", s.eval.plan().table))?
        .row_count();
    s.seal_if_arena_may_overflow(page_rows, t_flash);
    // Parsed again (a header check, no copy): sealing needed the session mutably.
    let view = PageView::parse_unverified(page_buf, &s.schema)
        .map_err(|_| " changed while parsed".to_string())?;
    let c = s
        .eval
        .eval_page(&view, &mut s.out)
        .map_err(|e| format!(": {e}"))?;
    Ok((c, view.layout()))
}

/// Charges a page's work (`c`, counted on a page of `layout` read at `t_flash`) to the
/// FMC logic or the embedded cores, and seals the chunk when the page fills it or ends
/// the scan.
fn charge(
    s: &mut Session,
    dev: &mut BlockDevice,
    cfg: &IspConfig,
    c: WorkCounters,
    layout: Layout,
    t_flash: SimTime,
    page_bytes: u64,
) {
    s.work += c;
    let ctrl = dev.controller_mut();
    let unpin = match s.mode {
        IspMode::Hw if s.aggregate => {
            let t_flash = hw_compared(s.compare_rate, c, t_flash);
            // The FMC's aggregation logic folds the matching records in flight; a GROUP
            // BY with more groups than its registers hold reads and writes each record's
            // group entry in the arena.
            let bytes = if s.out.len() > HW_AGG_REGISTER_GROUPS {
                2 * c.rows_selected * s.group_entry_bytes
            } else {
                0
            };
            if bytes > 0 {
                ctrl.dram(t_flash, bytes)
            } else {
                t_flash
            }
        }
        IspMode::Hw => {
            let t_flash = hw_compared(s.compare_rate, c, t_flash);
            // Whole records: their fixed-width slots and their variable-length values.
            let bytes = c.rows_selected * s.row_width + c.selected_var_bytes;
            s.out_link_bytes += bytes;
            ctrl.dram(t_flash, bytes)
        }
        IspMode::Cpu => {
            let staged = ctrl.dram(t_flash, page_bytes);
            let accesses = match layout {
                Layout::Nsm => c.values_touched + c.records_examined,
                Layout::Pax => c.bytes_touched.div_ceil(cfg.ldm_bytes.max(1) as u64),
            };
            let bus_cycles = cfg.page_cycles
                + cfg.comp_cycles_per_record
                    * c.records_examined.max(c.predicates_evaluated) as f64
                + cfg.result_cycles_per_record * c.results_written as f64
                + cfg.agg_cycles_per_update * c.agg_updates as f64
                + cfg.dram_access_cycles * accesses as f64;
            let cycles = (bus_cycles * cfg.cycle_clock_divisor).round() as u64;
            // The core's loads and its result writes also occupy the DRAM bus.
            ctrl.dram(staged, c.bytes_touched + c.result_bytes);
            let done = ctrl.cpu(staged, cycles);
            s.out_link_bytes += c.result_bytes;
            done
        }
    };
    s.out_rows_selected += c.rows_selected;
    s.out_ready = s.out_ready.max(unpin);
    s.inflight.push(unpin);
    s.pages_done += 1;
    if s.next_page >= s.total() {
        let done = SimTime::latest(s.inflight.iter()).unwrap_or(unpin);
        s.out_ready = s.out_ready.max(done);
        s.done_at = Some(done);
        s.seal_chunk();
    } else if !s.aggregate && s.out.wire_bytes().max(s.out_link_bytes) >= s.chunk_bytes {
        s.seal_chunk();
    }
}

#[cfg(test)]
mod dormant_tests {
    use super::Dormant;
    use csd_sim::SimTime;
    use proptest::prelude::*;

    /// Random reports (page, completion), buffers reused (`done`) and re-watches against
    /// a reference: the dormant pages as a plain list, and at most one of them watched,
    /// always the least by (completion, page) when it was chosen.
    #[derive(Debug, Clone)]
    enum Op {
        Report(u64, u64),
        Done(u64),
        Watch,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..16, 0u64..8).prop_map(|(n, t)| Op::Report(n, t)),
            (0u64..16).prop_map(Op::Done),
            Just(Op::Watch),
        ]
    }

    proptest! {
        #[test]
        fn dormant_pages_follow_a_reference(ops in proptest::collection::vec(op(), 1..60)) {
            let mut d = Dormant::default();
            let mut pages: Vec<(u64, u64)> = Vec::new(); // (page, completion)
            let mut watched: Option<u64> = None;
            for op in ops {
                match op {
                    Op::Report(n, t) => {
                        // A page is reported once while dormant (the watch holds each key
                        // once), or again when it is the one watched.
                        if pages.iter().any(|&(m, _)| m == n) && watched != Some(n) {
                            continue;
                        }
                        d.report(n, SimTime::from_ns(t));
                        if watched == Some(n) {
                            watched = None;
                        } else {
                            pages.push((n, t));
                        }
                    }
                    Op::Done(n) => {
                        d.done(n);
                        if watched == Some(n) {
                            watched = None;
                            pages.retain(|&(m, _)| m != n);
                        }
                    }
                    Op::Watch => {
                        let got = d.next_to_watch().map(|(n, t)| (n, t.ns()));
                        let want = if watched.is_some() {
                            None
                        } else {
                            pages.iter().map(|&(n, t)| (t, n)).min().map(|(t, n)| (n, t))
                        };
                        prop_assert_eq!(got, want);
                        if let Some((n, _)) = want {
                            watched = Some(n);
                        }
                    }
                }
                for &(n, _) in &pages {
                    prop_assert_eq!(d.unwatched(n), watched != Some(n));
                }
                prop_assert_eq!(d.pages.len(), pages.len());
            }
        }
    }
}

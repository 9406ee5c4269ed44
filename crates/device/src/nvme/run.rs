//! The executor's dispatch (docs/architecture.md, "command interface"): one arm per [`Command`]
//! variant, each naming the method that does the work, grouped by family: block I/O and
//! the batch interface (batch-io §3, `io.rs`), in-storage sessions (scan paper §4) and
//! admin commands (here), FLIXR's registry and index reads (flixr Table 1) and the
//! in-SSD B+tree (flixr §5 baseline, `index.rs`).
//!
//! Choices made here: a refused command completes at its submission instant with the
//! refusal's status ([`Failed`]); the argument checks several families share (MDTS,
//! the filtered-read range) live here so each family checks alike.

use super::{MAX_QUEUE_DEPTH, MAX_QUEUE_PAIRS, NvmeDevice};
use crate::block::CommandError;
use crate::command::{
    Command, IDENTIFY_BYTES, IdentifyInfo, LogPage, Payload, SMART_LOG_BYTES, SmartLog, Status,
    TELEMETRY_BYTES, Telemetry,
};
use crate::flixr::{FlixrError, MAX_INDEX_SCAN};
use crate::isp::{IspOpen, IspReply};
use crate::workload::IoTarget;
use csd_sim::SimTime;
use csd_sim::wire::BatchDesc;

/// A failed command: its status and completion instant.
pub(super) type Failed = (Status, SimTime);

/// What running a command yields: its payload and completion instant, or the refusal.
pub(super) type Ran = Result<(Payload, SimTime), Failed>;

/// A device-side failure: its status, completed when the device gave up.
pub(super) fn failed(e: CommandError) -> Failed {
    (Status::from(e.error), e.done)
}

/// A FLIXR read's range: 1..=[`MAX_INDEX_SCAN`] LBAs (what it returns is bounded by MDTS).
pub(super) fn check_scan(what: &str, blocks: u32, at: SimTime) -> Result<(), Failed> {
    if blocks == 0 || blocks as u64 > MAX_INDEX_SCAN {
        return Err((
            Status::InvalidField(format!(
                "{what} of {blocks} blocks: a filtered read examines 1..={MAX_INDEX_SCAN} LBAs"
            )),
            at,
        ));
    }
    Ok(())
}

/// A FLIXR registration refused: nothing registered, completed at submission.
pub(super) fn refused(e: FlixrError, at: SimTime) -> Failed {
    (Status::InvalidField(e.to_string()), at)
}

impl NvmeDevice {
    /// The command's work: the one place a new command variant is wired in.
    pub(super) fn run(&mut self, cmd: Command, at: SimTime) -> Ran {
        match cmd {
            // Block I/O and the batch interface (io.rs).
            Command::Read { lba, blocks } => self.read(lba, blocks, at),
            Command::ReadPinned {
                lba,
                blocks,
                unit,
                check,
            } => self.read_pinned(lba, blocks, unit, check, at),
            Command::Write { lba, data } => self.write(lba, data, at),
            Command::Trim { lba, blocks } => self.trim(lba, blocks, at),
            Command::Flush => self.flush(at),
            Command::FlushBatch { buffer } => self.flush_batch(buffer, at),
            Command::ReadLpids { lpids } => self.read_lpids(lpids, at),
            // In-storage sessions and admin commands (here).
            Command::IspOpen(args) => self.isp_open(*args, at),
            Command::IspGet { session } => self.isp_get(session, at),
            Command::IspClose { session } => self.isp_close(session, at),
            Command::GetLogPage(page) => Ok(self.log_page(page, at)),
            Command::Identify => {
                let info = self.identify();
                let t = self.dev.receive(at, 0);
                Ok((Payload::Identify(info), self.dev.respond(t, IDENTIFY_BYTES)))
            }
            // FLIXR and the in-SSD B+tree (index.rs).
            Command::SendTblCol(format) => self.send_tbl_col(format, at),
            Command::SendIdxEnc { table, spec } => self.send_idx_enc(table, spec, at),
            Command::SendIdxIcr { table, rule } => self.send_idx_icr(table, rule, at),
            Command::SendIdxIcrKeys { table, terms } => self.send_idx_icr_keys(table, terms, at),
            Command::SendTidxEnc { table, spec } => self.send_tidx_enc(table, spec, at),
            Command::SendTidxIcr { table, tia } => self.send_tidx_icr(table, tia, at),
            Command::DropIdxIcr { table, rule } => {
                self.unregister(16, at, |f, _| f.drop_rule(table, rule))
            }
            Command::DropIdxEnc { table, column } => {
                let bytes = 16 + column.len() as u64;
                self.unregister(bytes, at, |f, d| f.drop_encoding(d, table, &column))
            }
            Command::DropTidxEnc { tia } => self.unregister(16, at, |f, _| f.drop_table_index(tia)),
            Command::DropTidxIcr { table, rule } => {
                self.unregister(16, at, |f, _| f.drop_join_rule(table, rule))
            }
            Command::DropTblCol { table } => self.unregister(16, at, |f, d| f.drop_table(d, table)),
            Command::WriteIdx { table, lba, data } => self.write_idx(table, lba, data, at),
            Command::ReadIdx {
                table,
                rule,
                lba,
                blocks,
            } => self.index_read("ReadIdx", blocks, at, |f, d| {
                f.read_idx(d, table, rule, lba, blocks, at)
            }),
            Command::ReadIdxJoin1 {
                table,
                rule,
                tia,
                reset,
                lba,
                blocks,
            } => self.index_read("ReadIdxJoin1", blocks, at, |f, d| {
                f.read_idx_join1(d, table, rule, tia, reset, lba, blocks, at)
            }),
            Command::ReadIdxJoin2 {
                table,
                rule,
                lba,
                blocks,
            } => self.index_read("ReadIdxJoin2", blocks, at, |f, d| {
                f.read_idx_join2(d, table, rule, lba, blocks, at)
            }),
            Command::UpdateHostIndex { table, lba } => self.update_host_index(table, lba, at),
            Command::SsdIdxCreate {
                first,
                lbas,
                node_bytes,
                pairs,
            } => self.ssd_idx_create((first, lbas), node_bytes, pairs, at),
            Command::SsdIdxUpdate {
                index,
                insert,
                remove,
            } => self.ssd_idx_update(index, &insert, &remove, at),
            Command::SsdIdxRead {
                index,
                lo,
                hi,
                from,
            } => self.ssd_idx_read(index, (lo, hi), from, at),
        }
    }

    /// Largest transfer in LBAs.
    pub(super) fn mdts(&self) -> u32 {
        self.dev.ftl().config().mdts_sectors
    }

    /// Refuse a transfer of `blocks` LBAs that is empty or over MDTS.
    pub(super) fn check_transfer(
        &self,
        what: &str,
        blocks: u64,
        at: SimTime,
    ) -> Result<(), Failed> {
        let mdts = self.mdts();
        if blocks == 0 || blocks > mdts as u64 {
            return Err((
                Status::InvalidField(format!(
                    "{what} of {blocks} blocks: a transfer is 1..={mdts} blocks (MDTS)"
                )),
                at,
            ));
        }
        Ok(())
    }

    /// ISP OPEN: receive the arguments; under a FLIXR rule, compare the entries first
    /// (flixr §4.4) so the session streams only the pages kept; then open the session.
    fn isp_open(&mut self, args: IspOpen, at: SimTime) -> Ran {
        let mut t = self.dev.receive(at, IspOpen::WIRE_BYTES);
        let selected = match args.index {
            Some(rule) => {
                let x = &args.table;
                let (kept, misses, tt) = self
                    .flixr
                    .select_pages(
                        &mut self.dev,
                        rule,
                        (x.first_lba, x.pages, x.lbas_per_page as u64),
                        t,
                    )
                    .map_err(failed)?;
                t = tt;
                Some((kept, misses))
            }
            None => None,
        };
        let id = self
            .isp
            .open(&self.dev, args, selected, t)
            .map_err(|r| (r.into(), at))?;
        Ok((Payload::IspSession(id), self.dev.respond(t, 16)))
    }

    /// ISP GET: the next chunk of a session's results, sent from controller DRAM.
    fn isp_get(&mut self, session: u32, at: SimTime) -> Ran {
        let t = self.dev.receive(at, 0);
        // The firmware looks at the ready chunks once it has the command (`t`): the
        // sessions' background steps issued by then have run (they ran up to `at`).
        let t = self.isp.advance(&mut self.dev, t);
        let reply = self
            .isp
            .get(&mut self.dev, session, t)
            .map_err(|r| (r.into(), at))?;
        let done = self
            .dev
            .respond_with(t, IspReply::HEADER_BYTES, reply.chunk_link_bytes);
        Ok((Payload::Isp(Box::new(reply)), done))
    }

    /// ISP CLOSE: end a session and report its totals.
    fn isp_close(&mut self, session: u32, at: SimTime) -> Ran {
        let mut t = self.dev.receive(at, 0);
        if csd_sim::events::recording() {
            // On the event core the state is decided at a fixed instant, as GET's: the
            // steps issued by then run first (on calendars they ran up to `at`).
            t = self.isp.advance(&mut self.dev, t);
        }
        let reply = self
            .isp
            .close(&mut self.dev, session, t)
            .map_err(|r| (r.into(), at))?;
        Ok((
            Payload::Isp(Box::new(reply)),
            self.dev.respond(t, IspReply::HEADER_BYTES),
        ))
    }

    /// Get Log Page: telemetry (busy time per resource class and energy counters) or the
    /// SMART / health log, built in DRAM and sent to the host.
    fn log_page(&mut self, page: LogPage, at: SimTime) -> (Payload, SimTime) {
        let at = self.dev.receive(at, 0);
        match page {
            LogPage::Telemetry => {
                let log = Telemetry {
                    busy: IoTarget::utilization(&self.dev, 1),
                    counters: IoTarget::energy_counters(&self.dev),
                    now: IoTarget::now(&self.dev),
                };
                (
                    Payload::Telemetry(log),
                    self.dev.respond(at, TELEMETRY_BYTES),
                )
            }
            LogPage::Smart => {
                let log = SmartLog::from_ftl(self.dev.ftl());
                (Payload::Smart(log), self.dev.respond(at, SMART_LOG_BYTES))
            }
        }
    }

    /// The Identify data structure.
    fn identify(&self) -> IdentifyInfo {
        let ftl = self.dev.ftl();
        let ls = ftl.lba_size();
        let batch = (ftl.config().max_batch_pages as usize).min(BatchDesc::capacity(ls));
        IdentifyInfo {
            name: ftl.nand().config().name.clone(),
            lbas: ftl.lbas(),
            lba_size: ls as u32,
            mdts_blocks: ftl.config().mdts_sectors,
            flash_page_bytes: ftl.nand().geometry().page_size,
            max_batch_pages: batch as u32,
            max_queue_pairs: MAX_QUEUE_PAIRS,
            max_queue_depth: MAX_QUEUE_DEPTH,
        }
    }
}

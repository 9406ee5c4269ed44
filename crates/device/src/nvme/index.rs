//! The index commands: FLIXR's registry (SEND_TBL_COL, SEND_IDX_ENC, SEND_IDX_ICR,
//! SEND_TIDX_ENC, SEND_TIDX_ICR and their drops, flixr Table 1 and §4.2), WRITE_IDX
//! (§4.3) and the filtered reads READ_IDX and READ_IDX_JOIN1/2 (§4.4, §4.5), and the
//! in-SSD B+tree's range read (flixr §5 baseline).
//!
//! Choices made here: a registry command is answered after the firmware accepted it:
//! its arguments cross the host link and are staged in DRAM (their wire size is modeled
//! from the arguments), then a 16-byte reply returns; a refusal registers nothing and
//! completes at submission with Invalid Field. A filtered read examines
//! 1..=`MAX_INDEX_SCAN` LBAs and returns what the firmware kept.

use super::NvmeDevice;
use super::run::{Failed, Ran, check_scan, failed, refused};
use crate::block::{BlockDevice, CommandError};
use crate::command::{Payload, Status};
use crate::flixr::{
    Flixr, FlixrError, IndexEncoding, IndexRead, IndexRule, IndexSpec, JoinIndexSpec, RuleTerm,
    TableFormat,
};
use csd_sim::SimTime;

/// Wire bytes of a comparison rule's values.
fn rule_bytes(rule: &IndexRule) -> u64 {
    match rule {
        IndexRule::Between { .. } => 16,
        IndexRule::In(v) => 8 * v.len() as u64,
    }
}

impl NvmeDevice {
    /// Run a registry command of `bytes` argument bytes: the firmware's `op` first (a
    /// refusal completes at `at`), then the arguments' staging and a 16-byte reply, sent
    /// once a registry change the command made is durable (its log force, from `at`).
    pub(super) fn registry<T>(
        &mut self,
        bytes: u64,
        at: SimTime,
        op: impl FnOnce(&mut Flixr, &mut BlockDevice) -> Result<T, FlixrError>,
    ) -> Result<(T, SimTime), Failed> {
        self.flixr.begin_command(at);
        let v = op(&mut self.flixr, &mut self.dev).map_err(|e| refused(e, at))?;
        let t = self.dev.receive(at, bytes).max(self.flixr.durable_at());
        Ok((v, self.dev.respond(t, 16)))
    }

    /// A registry command that returns nothing (the drops).
    pub(super) fn unregister(
        &mut self,
        bytes: u64,
        at: SimTime,
        op: impl FnOnce(&mut Flixr, &mut BlockDevice) -> Result<(), FlixrError>,
    ) -> Ran {
        let ((), t) = self.registry(bytes, at, op)?;
        Ok((Payload::None, t))
    }

    /// SEND_TBL_COL: register a table's row format; returns its table id.
    pub(super) fn send_tbl_col(&mut self, format: TableFormat, at: SimTime) -> Ran {
        let names: u64 = format.columns.iter().map(|c| c.name.len() as u64 + 4).sum();
        let (id, t) = self.registry(64 + names, at, |f, d| f.register_table(d, format))?;
        Ok((Payload::FlixrTable(id), t))
    }

    /// SEND_IDX_ENC: register a per-page index encoding on one of a table's columns.
    pub(super) fn send_idx_enc(&mut self, table: u8, spec: IndexSpec, at: SimTime) -> Ran {
        let bytes = 64
            + match &spec.encoding {
                IndexEncoding::Range => 0,
                IndexEncoding::Bitmap { bounds } => 8 * bounds.len() as u64,
            };
        self.unregister(bytes, at, |f, d| f.register_encoding(d, table, spec))
    }

    /// SEND_IDX_ICR: register a comparison rule on a table's first key.
    pub(super) fn send_idx_icr(&mut self, table: u8, rule: IndexRule, at: SimTime) -> Ran {
        let bytes = 32 + rule_bytes(&rule);
        let (id, t) = self.registry(bytes, at, |f, _| f.register_rule(table, rule))?;
        Ok((Payload::FlixrRule(id), t))
    }

    /// SEND_IDX_ICR over several keys: a conjunction of per-column terms.
    pub(super) fn send_idx_icr_keys(
        &mut self,
        table: u8,
        terms: Vec<RuleTerm>,
        at: SimTime,
    ) -> Ran {
        let bytes = 32
            + terms
                .iter()
                .map(|t| 4 + t.column.len() as u64 + rule_bytes(&t.rule))
                .sum::<u64>();
        let (id, t) = self.registry(bytes, at, |f, _| f.register_rule_terms(table, terms))?;
        Ok((Payload::FlixrRule(id), t))
    }

    /// SEND_TIDX_ENC: register a per-table join-key index (the TIRA).
    pub(super) fn send_tidx_enc(&mut self, table: u8, spec: JoinIndexSpec, at: SimTime) -> Ran {
        let bytes = 32 + 8 * spec.bounds.len() as u64;
        let (id, t) = self.registry(bytes, at, |f, d| f.register_table_index(d, table, spec))?;
        Ok((Payload::FlixrRule(id), t))
    }

    /// SEND_TIDX_ICR: pair `table` (bitmap-indexed) with per-table index `tia`.
    pub(super) fn send_tidx_icr(&mut self, table: u8, tia: u16, at: SimTime) -> Ran {
        let (id, t) = self.registry(32, at, |f, _| f.register_join_rule(table, tia))?;
        Ok((Payload::FlixrRule(id), t))
    }

    /// UPDATE_HOST_INDEX: the range entry of the page at `lba`, for the host's tree.
    pub(super) fn update_host_index(&mut self, table: u8, lba: u64, at: SimTime) -> Ran {
        let (v, t) = self
            .flixr
            .host_index(&mut self.dev, table, lba, at)
            .map_err(failed)?;
        Ok((Payload::HostIndex(v), t))
    }

    /// WRITE_IDX: write whole table pages and compute their per-page index entries.
    pub(super) fn write_idx(&mut self, table: u8, lba: u64, data: Vec<u8>, at: SimTime) -> Ran {
        self.flixr
            .check_writable(&self.dev, table)
            .map_err(|e| refused(e, at))?;
        self.check_write_idx(table, lba, data.len(), at)?;
        let t = self
            .flixr
            .write_idx(&mut self.dev, table, lba, &data, at)
            .map_err(failed)?;
        Ok((Payload::None, t))
    }

    /// WRITE_IDX's transfer: 1..=MDTS whole LBAs, whole table pages at a page boundary,
    /// inside the device.
    fn check_write_idx(&self, table: u8, lba: u64, len: usize, at: SimTime) -> Result<(), Failed> {
        let ls = self.dev.ftl().lba_size();
        let mdts = self.mdts() as usize;
        if len == 0 || !len.is_multiple_of(ls) || len > mdts * ls {
            return Err((
                Status::InvalidField(format!(
                    "WriteIdx of {len} bytes: a transfer is 1..={mdts} whole {ls}-byte LBAs (one table page each)"
                )),
                at,
            ));
        }
        let n = (len / ls) as u64;
        let k = self.flixr.page_lbas(table).unwrap_or(1).max(1) as u64;
        if k > 1 && (!lba.is_multiple_of(k) || !n.is_multiple_of(k)) {
            return Err((
                Status::InvalidField(format!(
                    "WriteIdx of {n} LBAs at {lba}: table {table}'s pages are {k} LBAs, so a transfer is whole pages at a multiple of {k}"
                )),
                at,
            ));
        }
        let cap = self.dev.ftl().lbas();
        if lba.checked_add(n).is_none_or(|e| e > cap) {
            return Err((
                Status::LbaOutOfRange(format!(
                    "WriteIdx of LBAs {lba}..{} on a device of {cap} LBAs",
                    lba.saturating_add(n)
                )),
                at,
            ));
        }
        Ok(())
    }

    /// A filtered read (READ_IDX, READ_IDX_JOIN1/2) of `blocks` LBAs: the range check,
    /// then the firmware's `op`.
    pub(super) fn index_read(
        &mut self,
        what: &str,
        blocks: u32,
        at: SimTime,
        op: impl FnOnce(&mut Flixr, &mut BlockDevice) -> Result<(IndexRead, SimTime), CommandError>,
    ) -> Ran {
        check_scan(what, blocks, at)?;
        let (reply, t) = op(&mut self.flixr, &mut self.dev).map_err(failed)?;
        Ok((Payload::IndexRead(Box::new(reply)), t))
    }

    /// SsdIdxCreate: an in-SSD B+tree of `node_bytes` nodes (0: an LBA) over `lbas` LBAs
    /// from `first`, bulk-loaded with `pairs`.
    pub(super) fn ssd_idx_create(
        &mut self,
        (first, lbas): (u64, u64),
        node_bytes: u32,
        pairs: Vec<(i64, u64)>,
        at: SimTime,
    ) -> Ran {
        let (id, t) = self
            .ssd_btree
            .create(&mut self.dev, (first, lbas), node_bytes, pairs, at)
            .map_err(failed)?;
        Ok((Payload::SsdIndex(id), t))
    }

    /// SsdIdxUpdate: insert and remove `(key, value)` entries of an in-SSD B+tree.
    pub(super) fn ssd_idx_update(
        &mut self,
        index: u16,
        insert: &[(i64, u64)],
        remove: &[(i64, u64)],
        at: SimTime,
    ) -> Ran {
        let t = self
            .ssd_btree
            .update(&mut self.dev, index, insert, remove, at)
            .map_err(failed)?;
        Ok((Payload::None, t))
    }

    /// SsdIdxRead: the in-SSD B+tree's entries with keys in `lo..=hi`, from `from` on.
    pub(super) fn ssd_idx_read(
        &mut self,
        index: u16,
        (lo, hi): (i64, i64),
        from: u64,
        at: SimTime,
    ) -> Ran {
        if lo > hi {
            return Err((
                Status::InvalidField(format!("SsdIdxRead of an empty range {lo}..={hi}")),
                at,
            ));
        }
        let (reply, t) = self
            .ssd_btree
            .read(&mut self.dev, index, lo, hi, from, at)
            .map_err(failed)?;
        Ok((Payload::IndexRead(Box::new(reply)), t))
    }
}

//! Insertions and deletions (§2.2): the L0 update, the redo log record that makes it
//! durable, and the triggers of merges (overflow, underflow, log space).

use super::*;

impl Inner {
    // ------------------------------------------------------- modifications (§2.2)

    /// Insert (`Some(v)`) or delete (`None`) `key`. Returns whether the key existed.
    pub(super) fn modify(self: &Arc<Self>, key: u64, val: Option<u64>) -> Result<bool, FdError> {
        let _x = (self.cfg.scheme == Scheme::Xm)
            .then(|| self.xm.write().unwrap_or_else(|p| p.into_inner()));
        let mut log = lock(&self.log);
        // Wait for room in L0 and the log (a DS merge frees it when it ends).
        let mut waited: Option<Instant> = None;
        let (cur, generation) = loop {
            let mut top = lock(&self.top);
            Self::check_usable(&top)?;
            if !self.blocking(&top, &log) {
                break (top.l0.map.get(&key).copied(), top.generation);
            }
            if top.merging {
                waited.get_or_insert_with(Instant::now);
                self.counters.waiting.fetch_add(1, Ordering::Relaxed);
                top = self.cv.wait(top).unwrap_or_else(|p| p.into_inner());
                self.counters.waiting.fetch_sub(1, Ordering::Relaxed);
                drop(top);
                continue;
            }
            drop(top);
            self.start_merge(&log)?;
        };
        if let Some(w) = waited {
            let c = &self.counters;
            c.room_waits.fetch_add(1, Ordering::Relaxed);
            c.max_room_wait_ns
                .fetch_max(w.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        // Whether the key exists below L0 (new). The levels may switch meanwhile (a
        // merge ends) but their content does not change, and no other modification
        // runs (the log mutex serializes them).
        let (slot, existed) = match (cur, val) {
            (Some(s), Some(v)) => (
                Slot {
                    del: s.del,
                    ins: Some(v),
                },
                s.ins.is_some(),
            ),
            (Some(s), None) => (
                Slot {
                    del: s.del,
                    ins: None,
                },
                s.ins.is_some(),
            ),
            (None, Some(v)) => {
                let b = self.lookup_inner(key, true)?.is_some();
                (
                    Slot {
                        del: b,
                        ins: Some(v),
                    },
                    b,
                )
            }
            (None, None) => {
                let b = self.lookup_inner(key, true)?.is_some();
                (Slot { del: b, ins: None }, b)
            }
        };
        if cur.unwrap_or_default() == slot {
            return Ok(existed);
        }
        if self.cfg.durable {
            self.append_log(&mut log, generation, key, slot)?;
        }
        let trigger = {
            let mut top = lock(&self.top);
            top.l0.set(key, slot);
            !top.merging && self.triggered(&top, &log)
        };
        if trigger {
            self.start_merge(&log)?;
        }
        Ok(existed)
    }

    pub(super) fn log_used_lbas(&self, log: &LogState) -> u64 {
        let start = self.log_start.load(Ordering::Acquire);
        log.next_lsn / self.geo.rpl - start / self.geo.rpl + 1
    }

    /// Entries charged to the L0 budget: L0 (new), L0 old while a DS or FC merge runs
    /// (they share one `l0_bytes` budget; FC frees L0 old progressively, §4.4, DS only
    /// when the merge ends, §3), and the fences kept in L0.
    pub(super) fn l0_charge(&self, top: &Top) -> u64 {
        let old = top.l0_old.as_ref().map_or(0, |o| o.entries());
        top.l0.entries() + old + top.levels.top_fences.len() as u64 + 2
    }

    /// A modification must wait (L0 or log full).
    pub(super) fn blocking(&self, top: &Top, log: &LogState) -> bool {
        self.l0_charge(top) > self.geo.c0
            || (self.cfg.durable && self.log_used_lbas(log) + 1 >= self.geo.log_lbas)
    }

    /// A merge should start: L0 past `merge_at` of its budget (default 15/16, so that DS
    /// and FC can take modifications while it runs), underflow, or the log half full.
    pub(super) fn triggered(&self, top: &Top, log: &LogState) -> bool {
        self.l0_charge(top) as f64 > self.geo.c0 as f64 * self.cfg.merge_at
            || self.blocking(top, log)
            || self.underflow(top)
            || (self.cfg.durable && self.log_used_lbas(log) * 2 >= self.geo.log_lbas)
    }

    pub(super) fn underflow(&self, top: &Top) -> bool {
        let old_i = top.l0_old.as_ref().map_or(0, |o| o.ins);
        let old_d = top.l0_old.as_ref().map_or(0, |o| o.del);
        let np = top.l0.ins + old_i + top.levels.inserts();
        let nm = top.l0.del + old_d + top.levels.deletes();
        2 * nm > np
    }

    pub(super) fn append_log(
        &self,
        log: &mut LogState,
        generation: u64,
        key: u64,
        slot: Slot,
    ) -> Result<(), FdError> {
        let lsn = log.next_lsn;
        let i = (lsn % self.geo.rpl) as usize;
        if i == 0 {
            log.tail.iter_mut().for_each(|b| *b = 0);
        }
        LogRecord {
            lsn,
            generation,
            key,
            del: slot.del,
            ins: slot.ins,
        }
        .encode(&mut log.tail[i * LOG_RECORD_BYTES..(i + 1) * LOG_RECORD_BYTES]);
        let lba = self.geo.log_lba + (lsn / self.geo.rpl) % self.geo.log_lbas;
        let mut h = self.cache.handle()?;
        h.get().write(lba, &log.tail)?;
        h.get().flush()?;
        self.counters
            .clock
            .fetch_max(h.get().now().ns(), Ordering::Relaxed);
        log.next_lsn += 1;
        self.counters.log_records.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

//! Programs and erases (batch-io §2.1): a page is programmed only when erased and the
//! pages of a block in order; erase is per block and counts a P/E cycle. Timing: a
//! program takes the channel for the transfer in, then the die for tPROG; an erase the
//! die for tBERS. Program and erase failures are drawn from counter-based hashes of the
//! seed, and a power cut tears a program after its first k sectors.

use super::*;

impl Nand {
    /// Program page `p` with `data` (one page) and `oob` (`oob_per_page` bytes, or empty
    /// for all-`0xFF`). Starts no earlier than `at`; returns the completion instant.
    pub fn program(
        &mut self,
        p: Ppa,
        data: &[u8],
        oob: &[u8],
        at: SimTime,
    ) -> Result<SimTime, NandError> {
        let mut meta = self.check_program(p, data, oob)?;
        let b = p.block.0 as usize;
        let page_size = self.sectors as usize * self.sector_size;
        let oob_page = self.sectors as usize * self.oob_sector;
        // Reserve the block's bytes before anything changes: a full file system is an
        // error and the page stays erased.
        let upto = self.layout.page_end(p.page);
        self.prepare_program(b, upto)?;
        self.op_seq += 1;
        self.content_epoch += 1;
        let die = self.map.die_of(p.block);
        let ch = self.map.channel_of(die) as usize;
        let xfer = (page_size + oob_page) as u64;
        let (_, ch_end) = self.channels[ch].reserve(at, self.ch_rate.transfer_ns(xfer));
        let t_p = self.t_prog[p.page as usize % self.t_prog.len()];
        let (_, done) = self.dies[die.0 as usize].reserve(ch_end, t_p);
        self.stats.programs += 1;
        self.stats.channel_bytes += xfer;
        let seq = self.op_seq;
        if self.cut_strikes(done) {
            return Err(self.tear_program(p, data, meta, seq));
        }
        let fail_p = if self.worn(&meta) {
            self.faults.worn_program_fail_prob
        } else {
            self.faults.program_fail_prob
        };
        let failed = fail_p > 0.0 && uniform(self.faults.seed, seq, salt::PROGRAM_FAIL) < fail_p;
        // The write pointer moves before the commit point, so after a crash it is never
        // behind a committed page.
        meta.next_page = p.page + 1;
        self.store.set_meta(b, meta);
        let state = if failed {
            PAGE_PROGRAM_FAILED
        } else {
            PAGE_PROGRAMMED
        };
        self.store_page(b, p.page, data, oob, state)?;
        if failed {
            self.stats.program_failures += 1;
            return Err(NandError::ProgramFailed { ppa: p, done });
        }
        self.stats.bytes_programmed += page_size as u64;
        Ok(done)
    }

    /// A program's arguments and the page's state: powered, in range, whole buffers, a
    /// good block, an erased page, the block's next page. Returns the block's metadata.
    #[inline]
    fn check_program(&self, p: Ppa, data: &[u8], oob: &[u8]) -> Result<BlockMeta, NandError> {
        self.check_power()?;
        self.check_ppa(p)?;
        let page_size = self.sectors as usize * self.sector_size;
        if data.len() != page_size {
            return Err(NandError::BufferSize {
                what: "program data",
                expected: page_size,
                got: data.len(),
            });
        }
        let oob_page = self.sectors as usize * self.oob_sector;
        if !oob.is_empty() && oob.len() != oob_page {
            return Err(NandError::BufferSize {
                what: "program OOB",
                expected: oob_page,
                got: oob.len(),
            });
        }
        let meta = self.store.meta(p.block.0 as usize);
        if meta.flags & BLOCK_FACTORY_BAD != 0 {
            return Err(NandError::BadBlock { block: p.block });
        }
        if self.state_of(p) != PageState::Erased {
            return Err(NandError::ProgramNotErased { ppa: p });
        }
        if p.page != meta.next_page {
            return Err(NandError::ProgramOutOfOrder {
                ppa: p,
                expected: meta.next_page,
            });
        }
        Ok(meta)
    }

    /// A power cut tears the program of `p` (operation `seq`): only the first k sectors
    /// made it and sector k holds garbage; the write pointer moves before the commit
    /// point (the state byte), which records k. Returns the error to report.
    fn tear_program(&mut self, p: Ppa, data: &[u8], mut meta: BlockMeta, seq: u64) -> NandError {
        let b = p.block.0 as usize;
        let ss = self.sector_size;
        let k = (mix(self.faults.seed, seq, salt::TORN) % self.sectors as u64) as usize;
        meta.next_page = p.page + 1;
        self.store.set_meta(b, meta);
        let slot_range = self.layout.data_range(p.page);
        let bytes = match self.block_bytes_mut(b, self.layout.page_end(p.page)) {
            Ok(bytes) => bytes,
            Err(e) => return e,
        };
        let slot = &mut bytes[slot_range];
        slot[..k * ss].copy_from_slice(&data[..k * ss]);
        for (i, x) in slot[k * ss..(k + 1) * ss].iter_mut().enumerate() {
            *x = data[k * ss + i] ^ 0xA5;
        }
        bytes[p.page as usize] = PAGE_TORN_BASE + k as u8;
        NandError::PowerLoss
    }

    /// Erase block `blk`. Starts no earlier than `at`; returns the completion instant.
    pub fn erase(&mut self, blk: BlockId, at: SimTime) -> Result<SimTime, NandError> {
        self.check_power()?;
        self.check_block(blk)?;
        let b = blk.0 as usize;
        let mut meta = self.store.meta(b);
        if meta.flags & BLOCK_FACTORY_BAD != 0 {
            return Err(NandError::BadBlock { block: blk });
        }
        // An erase destroys what the block holds: whatever superseded it (the moved
        // copies, the log records, the checkpoint naming the block free) reaches the
        // host's disk first, so a host crash never finds the old contents gone and the
        // new ones missing.
        self.store.persist()?;
        self.store.begin_change()?;
        self.op_seq += 1;
        self.content_epoch += 1;
        let die = self.map.die_of(blk);
        let (_, done) = self.dies[die.0 as usize].reserve(at, self.t_erase);
        self.stats.erases += 1;
        let seq = self.op_seq;
        let pages = self.layout.pages;
        let worn = self.worn(&meta);
        meta.pe_cycles = meta.pe_cycles.saturating_add(1);
        if self.cut_strikes(done) {
            self.store.set_meta(b, meta);
            if let Ok(bytes) = self.block_bytes_mut(b, pages) {
                bytes[..pages].fill(PAGE_ERASE_TORN);
            }
            meta.next_page = pages as u32;
            self.store.set_meta(b, meta);
            return Err(NandError::PowerLoss);
        }
        let fail_p = if worn {
            self.faults.worn_erase_fail_prob
        } else {
            self.faults.erase_fail_prob
        };
        let failed = fail_p > 0.0 && uniform(self.faults.seed, seq, salt::ERASE_FAIL) < fail_p;
        self.store.set_meta(b, meta);
        if failed {
            self.stats.erase_failures += 1;
            if let Ok(bytes) = self.block_bytes_mut(b, pages) {
                bytes[..pages].fill(PAGE_ERASE_TORN);
            }
            meta.next_page = pages as u32;
            self.store.set_meta(b, meta);
            return Err(NandError::EraseFailed { block: blk, done });
        }
        // Only the state bytes change: erased pages read as 0xFF whatever the slot holds.
        if let Some(bytes) = self.store.block(b)
            && bytes[..pages].iter().any(|&s| s != PAGE_ERASED)
        {
            self.block_bytes_mut(b, pages)?[..pages].fill(PAGE_ERASED);
        }
        meta.next_page = 0;
        self.store.set_meta(b, meta);
        Ok(done)
    }
}

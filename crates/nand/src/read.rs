//! Reads (batch-io §2.1, scan paper §3–§4.1): per-sector reads with or without their
//! OOB tags, OOB-only reads, prefetch hints, and the two halves of a timed read (the
//! array's tR on the die, then the transfer on the channel bus), with ECC applied per
//! sector.
//!
//! Choices made here: the die is held for tR only (cache read), so interleaving over
//! ways hides tR; a read moves only the requested sectors, plus their OOB bytes only
//! when asked; bit errors are drawn per sector from a Poisson law and a sector beyond
//! the ECC's strength is a typed uncorrectable error naming it.

use super::*;

impl Nand {
    /// Read `data.len() / sector_size` sectors of page `p` starting at `first_sector`
    /// into `data`, and their OOB bytes into `oob` when it is not empty
    /// (`oob.len()` must then be `sectors × oob_per_sector`). The operation starts no
    /// earlier than `at`.
    pub fn read(
        &mut self,
        p: Ppa,
        first_sector: u32,
        data: &mut [u8],
        oob: &mut [u8],
        at: SimTime,
    ) -> Result<ReadDone, NandError> {
        self.read_impl(p, first_sector, data, oob, true, at)
    }

    /// Warm the CPU caches for a read of `sectors` sectors of page `p` from
    /// `first_sector` that the caller will issue soon: the page state, the block's
    /// metadata, the sectors' OOB bytes and checked marks ([`Nand::sector_checked`]),
    /// and the sectors' data when `data` (a read that copies them; one that checks them
    /// in place, [`Nand::read_in_place`], touches the data only to hash a sector not yet
    /// checked). Only a hint to the host CPU: it changes no state, no counter and no
    /// modeled time, and an address out of range or a block never programmed is ignored.
    /// The emulator's random reads are bound by memory latency (the MAP entry, then the
    /// page); hinting the next command's lines while the current one runs overlaps those
    /// misses.
    #[inline]
    pub fn prefetch(&self, p: Ppa, first_sector: u32, sectors: u32, data: bool) {
        let b = p.block.0 as usize;
        if b >= self.store.blocks()
            || p.page >= self.layout.pages as u32
            || first_sector.saturating_add(sectors) > self.sectors
        {
            return;
        }
        let Some(bytes) = self.store.block(b) else {
            return;
        };
        let ss = self.sector_size;
        let d0 = self.layout.data_start(p.page) + first_sector as usize * ss;
        let o0 = self.layout.oob_start(p.page) + first_sector as usize * self.oob_sector;
        prefetch_lines(&bytes[p.page as usize..p.page as usize + 1]);
        if data {
            prefetch_lines(&bytes[d0..d0 + sectors as usize * ss]);
        }
        prefetch_lines(&bytes[o0..o0 + sectors as usize * self.oob_sector]);
        self.store.prefetch_meta(b);
        self.checked.prefetch(b, p.page, first_sector);
    }

    /// [`Nand::read`] with the sectors' OOB bytes delivered alongside, as a controller's
    /// ECC engine sees them with each codeword (`oob` must be `sectors × oob_per_sector`
    /// bytes). Unlike an explicit OOB read, the spare bytes are not charged on the
    /// channel, just as the ECC parity that travels with every sector is not: the FTL's
    /// end-to-end check of each sector's TAG and CRC costs no modeled time.
    pub fn read_with_tags(
        &mut self,
        p: Ppa,
        first_sector: u32,
        data: &mut [u8],
        oob: &mut [u8],
        at: SimTime,
    ) -> Result<ReadDone, NandError> {
        if oob.is_empty() {
            return Err(NandError::BufferSize {
                what: "read OOB",
                expected: data.len() / self.sector_size.max(1) * self.oob_sector,
                got: 0,
            });
        }
        self.read_impl(p, first_sector, data, oob, false, at)
    }

    /// Read the OOB (spare) bytes of every sector of page `p` into `oob`
    /// (`oob_per_page` bytes), e.g. to recover the TAG of a sector whose data is
    /// uncorrectable. The spare area has its own, stronger ECC in this model (bit errors
    /// are drawn for data only), so this fails only for a torn or failed program or an
    /// interrupted erase. An erased page fills `oob` with `0xFF`. Costs tR and the
    /// transfer of the OOB bytes.
    pub fn read_oob(&mut self, p: Ppa, oob: &mut [u8], at: SimTime) -> Result<ReadDone, NandError> {
        self.check_power()?;
        self.check_ppa(p)?;
        let want = self.sectors as usize * self.oob_sector;
        if oob.len() != want {
            return Err(NandError::BufferSize {
                what: "read OOB",
                expected: want,
                got: oob.len(),
            });
        }
        let b = p.block.0 as usize;
        if self.store.meta(b).flags & BLOCK_FACTORY_BAD != 0 {
            return Err(NandError::BadBlock { block: p.block });
        }
        self.op_seq += 1;
        self.store.note_read(b, p.page);
        let die = self.map.die_of(p.block);
        let ch = self.map.channel_of(die) as usize;
        let kind = p.page as usize % self.t_read.len();
        let (_, die_end) = self.dies[die.0 as usize].reserve(at, self.t_read[kind]);
        let bus_ns = self.ch_rate.transfer_ns(want as u64) + self.read_seq_ns[kind];
        let (_, done) = self.channels[ch].reserve(die_end, bus_ns);
        if self.cut_strikes(done) {
            return Err(NandError::PowerLoss);
        }
        self.stats.page_reads += 1;
        self.stats.channel_bytes += want as u64;
        let state = self
            .store
            .block(b)
            .map_or(PAGE_ERASED, |bytes| bytes[p.page as usize]);
        if state == PAGE_ERASED {
            oob.fill(0xFF);
            self.stats.erased_reads += 1;
            return Ok(ReadDone {
                done,
                corrected_bits: 0,
                erased: true,
            });
        }
        if state != PAGE_PROGRAMMED {
            self.stats.uncorrectable_reads += 1;
            return Err(NandError::Uncorrectable {
                ppa: p,
                sector: 0,
                bit_errors: u32::MAX,
                done,
            });
        }
        let bytes = self.store.block(b).unwrap_or(&[]);
        let o0 = self.layout.oob_start(p.page);
        oob.copy_from_slice(&bytes[o0..o0 + want]);
        Ok(ReadDone {
            done,
            corrected_bits: 0,
            erased: false,
        })
    }

    pub(super) fn read_impl(
        &mut self,
        p: Ppa,
        first_sector: u32,
        data: &mut [u8],
        oob: &mut [u8],
        charge_oob: bool,
        at: SimTime,
    ) -> Result<ReadDone, NandError> {
        let ss = self.sector_size;
        if data.is_empty() || !data.len().is_multiple_of(ss) {
            return Err(NandError::BufferSize {
                what: "read data",
                expected: ss,
                got: data.len(),
            });
        }
        let n = (data.len() / ss) as u32;
        let want_oob = !oob.is_empty();
        if want_oob && oob.len() != n as usize * self.oob_sector {
            return Err(NandError::BufferSize {
                what: "read OOB",
                expected: n as usize * self.oob_sector,
                got: oob.len(),
            });
        }
        let (b, done) = self.begin_read(p, first_sector, n, want_oob && charge_oob, at)?;
        // Copy first and look at the page state after: the copy's memory traffic then
        // overlaps the state byte's (both are cache misses on a large device). Whatever
        // the state turns out to be, the caller sees only what it says.
        let d0 = self.layout.data_start(p.page) + first_sector as usize * ss;
        let o0 = self.layout.oob_start(p.page) + first_sector as usize * self.oob_sector;
        let oob_part = if want_oob { &mut *oob } else { &mut [][..] };
        let copied = self.store.read_into(b, (d0, data), (o0, oob_part))?;
        if !copied && let Some(bytes) = self.store.block(b) {
            // Ask for every line of the sectors at once, so that their cache misses
            // overlap instead of the copy meeting them one after the other.
            prefetch_lines(&bytes[p.page as usize..p.page as usize + 1]);
            prefetch_lines(&bytes[d0..d0 + data.len()]);
            data.copy_from_slice(&bytes[d0..d0 + data.len()]);
            if want_oob {
                oob.copy_from_slice(&bytes[o0..o0 + oob.len()]);
            }
        }
        let r = self.finish_read(p, first_sector, n, done);
        if matches!(r, Ok(ReadDone { erased: true, .. })) {
            data.fill(0xFF);
            oob.fill(0xFF);
        }
        r
    }

    /// [`Nand::read_with_tags`] without the copy: the same checks, modeled time, bit
    /// errors and counters, after which [`Nand::stored_sectors`] gives the sectors'
    /// data and OOB bytes where the medium keeps them. An emulator shortcut for readers
    /// that only look at the bytes (the device's own firmware scanning a page in place):
    /// it models exactly what a read with tags models.
    pub fn read_in_place(
        &mut self,
        p: Ppa,
        first_sector: u32,
        sectors: u32,
        at: SimTime,
    ) -> Result<ReadDone, NandError> {
        if sectors == 0 {
            return Err(NandError::BufferSize {
                what: "read data",
                expected: self.sector_size,
                got: 0,
            });
        }
        let (_, done) = self.begin_read(p, first_sector, sectors, false, at)?;
        self.finish_read(p, first_sector, sectors, done)
    }

    /// The stored data and OOB bytes of `sectors` sectors of page `p` from
    /// `first_sector`, as [`Nand::read_in_place`] read them; `None` for an address out
    /// of range or a block that holds no bytes (never programmed since erase). Only
    /// meaningful after a successful read of the same sectors: the bytes of an erased,
    /// torn or failed page are whatever the medium holds.
    pub fn stored_sectors(
        &self,
        p: Ppa,
        first_sector: u32,
        sectors: u32,
    ) -> Option<(&[u8], &[u8])> {
        let b = p.block.0 as usize;
        if b >= self.store.blocks()
            || p.page >= self.layout.pages as u32
            || first_sector
                .checked_add(sectors)
                .is_none_or(|e| e > self.sectors)
        {
            return None;
        }
        let bytes = self.store.block(b)?;
        let ss = self.sector_size;
        let d0 = self.layout.data_start(p.page) + first_sector as usize * ss;
        let o0 = self.layout.oob_start(p.page) + first_sector as usize * self.oob_sector;
        Some((
            &bytes[d0..d0 + sectors as usize * ss],
            &bytes[o0..o0 + sectors as usize * self.oob_sector],
        ))
    }

    /// The part of a read before its bytes move: power, address and range checks, the
    /// die's tR and the channel transfer (with the OOB bytes when `charge_oob`), the
    /// power-cut check and the read counters. Returns the block index and completion.
    pub(super) fn begin_read(
        &mut self,
        p: Ppa,
        first_sector: u32,
        n: u32,
        charge_oob: bool,
        at: SimTime,
    ) -> Result<(usize, SimTime), NandError> {
        self.check_power()?;
        self.check_ppa(p)?;
        if first_sector
            .checked_add(n)
            .is_none_or(|end| end > self.sectors)
        {
            return Err(NandError::OutOfRange {
                what: "sector",
                value: first_sector as u64 + n as u64 - 1,
                limit: self.sectors as u64,
            });
        }
        let b = p.block.0 as usize;
        if self.store.meta(b).flags & BLOCK_FACTORY_BAD != 0 {
            return Err(NandError::BadBlock { block: p.block });
        }
        self.op_seq += 1;
        self.store.note_read(b, p.page);
        // Timing: die for tR, then the channel for the transfer out.
        let die = self.map.die_of(p.block);
        let ch = self.map.channel_of(die) as usize;
        let data_bytes = n as usize * self.sector_size;
        let xfer_bytes = data_bytes
            + if charge_oob {
                n as usize * self.oob_sector
            } else {
                0
            };
        let kind = p.page as usize % self.t_read.len();
        let t_r = self.t_read[kind];
        let (_, die_end) = self.dies[die.0 as usize].reserve(at, t_r);
        let bus_ns = self.ch_rate.transfer_ns(xfer_bytes as u64) + self.read_seq_ns[kind];
        let (_, done) = self.channels[ch].reserve(die_end, bus_ns);
        if self.cut_strikes(done) {
            return Err(NandError::PowerLoss);
        }
        self.stats.page_reads += 1;
        self.stats.channel_bytes += xfer_bytes as u64;
        Ok((b, done))
    }

    /// The part of a read after its bytes moved: the page state (erased, torn, failed)
    /// and the sectors' bit errors against the ECC, with their counters.
    pub(super) fn finish_read(
        &mut self,
        p: Ppa,
        first_sector: u32,
        n: u32,
        done: SimTime,
    ) -> Result<ReadDone, NandError> {
        let b = p.block.0 as usize;
        let ss = self.sector_size;
        let bytes_read = n as u64 * ss as u64;
        let state = self
            .store
            .block(b)
            .map_or(PAGE_ERASED, |bytes| bytes[p.page as usize]);
        if state == PAGE_ERASED {
            self.stats.erased_reads += 1;
            self.stats.sectors_read += n as u64;
            self.stats.bytes_read += bytes_read;
            return Ok(ReadDone {
                done,
                corrected_bits: 0,
                erased: true,
            });
        }
        let good_sectors = match state {
            PAGE_PROGRAMMED => self.sectors,
            PAGE_PROGRAM_FAILED | PAGE_ERASE_TORN => 0,
            k => (k - PAGE_TORN_BASE) as u32,
        };
        if first_sector + n > good_sectors {
            self.stats.uncorrectable_reads += 1;
            return Err(NandError::Uncorrectable {
                ppa: p,
                sector: first_sector.max(good_sectors),
                bit_errors: u32::MAX,
                done,
            });
        }
        // Bit errors per sector, drawn from the seed and this operation's number.
        let mut corrected = 0u32;
        let pe = self.store.meta(b).pe_cycles;
        let (lambda, p0) = match self.last_law {
            Some((last, lambda, p0)) if last == pe => (lambda, p0),
            _ => {
                let lambda = self.rber(pe) * (ss * 8) as f64;
                let p0 = (-lambda).exp();
                self.last_law = Some((pe, lambda, p0));
                (lambda, p0)
            }
        };
        if lambda > 0.0 {
            let seed = self.faults.seed ^ salt::BIT_ERRORS.wrapping_mul(0x9E37_79B9);
            for s in 0..n {
                let k = poisson_from(p0, lambda, uniform(seed, self.op_seq, s as u64));
                if k > self.faults.ecc_bits_per_sector {
                    self.stats.uncorrectable_reads += 1;
                    return Err(NandError::Uncorrectable {
                        ppa: p,
                        sector: first_sector + s,
                        bit_errors: k,
                        done,
                    });
                }
                corrected += k;
            }
        }
        self.stats.corrected_bits += corrected as u64;
        self.stats.sectors_read += n as u64;
        self.stats.bytes_read += bytes_read;
        Ok(ReadDone {
            done,
            corrected_bits: corrected,
            erased: false,
        })
    }
}

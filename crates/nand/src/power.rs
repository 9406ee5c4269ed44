//! Faults and power (batch-io §2.1, §8.2.3): armed power cuts (at the N-th operation
//! or a simulated instant) that tear the operation in flight, injected corruption and
//! interrupted programs for tests, and the raw bit error rate that grows with wear.
//!
//! Choices made here: after a cut every operation fails with `PowerLoss` until
//! `power_on`; RBER grows linearly from `rber_fresh` to `rber_end_of_life` at the rated
//! endurance, and a block past it uses the "worn" failure probabilities.

use super::*;

impl Nand {
    /// Arm a power cut. Replaces any cut armed before.
    pub fn arm_power_cut(&mut self, cut: PowerCut) {
        self.cut = Some(match cut {
            PowerCut::AtOp(n) => PowerCut::AtOp(self.op_seq + n.max(1)),
            t => t,
        });
    }

    /// Fault injection: flip the bits of `mask` in byte `byte` of sector `sector` of page
    /// `p`, as data retention loss or a damaged image would, without going through a
    /// program (the page keeps its state; the ECC model does not see the change, so only
    /// an end-to-end checksum above the media can). Does nothing to an erased page.
    pub fn corrupt(&mut self, p: Ppa, sector: u32, byte: usize, mask: u8) -> Result<(), NandError> {
        self.check_ppa(p)?;
        if sector >= self.sectors || byte >= self.sector_size {
            return Err(NandError::OutOfRange {
                what: "sector byte",
                value: sector as u64 * self.sector_size as u64 + byte as u64,
                limit: self.sectors as u64 * self.sector_size as u64,
            });
        }
        if self.state_of(p) == PageState::Erased {
            return Ok(());
        }
        let range = self.layout.data_range(p.page);
        let at = range.start + sector as usize * self.sector_size + byte;
        let bytes = self.block_bytes_mut(p.block.0 as usize, range.end)?;
        bytes[at] ^= mask;
        self.content_epoch += 1;
        Ok(())
    }

    /// Fault injection: as if the process died inside a program of `p` after the
    /// block's write pointer moved and before the page's commit point (its state byte;
    /// see [`Nand::program`]): the pointer is past `p` and the page stays erased. `p`
    /// must be the block's next page to program.
    pub fn interrupt_program(&mut self, p: Ppa) -> Result<(), NandError> {
        self.check_ppa(p)?;
        let b = p.block.0 as usize;
        let mut meta = self.store.meta(b);
        if p.page != meta.next_page || self.state_of(p) != PageState::Erased {
            return Err(NandError::ProgramOutOfOrder {
                ppa: p,
                expected: meta.next_page,
            });
        }
        meta.next_page = p.page + 1;
        self.store.begin_change()?;
        self.store.set_meta(b, meta);
        self.content_epoch += 1;
        Ok(())
    }

    /// Disarm a pending power cut.
    pub fn disarm_power_cut(&mut self) {
        self.cut = None;
    }

    /// Whether the device has power.
    pub fn is_powered(&self) -> bool {
        self.powered
    }

    /// Cut power now (as if the plug were pulled between operations).
    pub fn power_off(&mut self) {
        self.content_epoch += 1;
        if self.powered {
            self.stats.power_cuts += 1;
        }
        self.powered = false;
        self.cut = None;
    }

    /// Restore power. Flash contents persist; queues are empty, so every resource is
    /// free from the latest instant any of them was busy until.
    pub fn power_on(&mut self) {
        let now = self.now();
        self.dies
            .iter_mut()
            .chain(self.channels.iter_mut())
            .for_each(|r| r.power_cycle(now));
        self.powered = true;
    }

    #[inline]
    pub(super) fn check_power(&self) -> Result<(), NandError> {
        if self.powered {
            Ok(())
        } else {
            Err(NandError::PowerLoss)
        }
    }

    /// Does the armed cut strike the operation that just got number `self.op_seq` and
    /// would complete at `end`?
    #[inline]
    pub(super) fn cut_strikes(&mut self, end: SimTime) -> bool {
        let hit = match self.cut {
            None => false,
            Some(PowerCut::AtOp(n)) => self.op_seq >= n,
            // Compares the instant's value (a decision on time: class A of the
            // docs/time-model.md audit; armed only by tests).
            Some(PowerCut::AtTime(t)) => end.ns() > t.ns(),
        };
        if hit {
            self.power_off();
        }
        hit
    }

    #[inline]
    pub(super) fn rber(&self, pe: u32) -> f64 {
        let f = &self.faults;
        if f.rber_fresh == 0.0 && f.rber_end_of_life == 0.0 {
            return 0.0;
        }
        let wear = pe as f64 / self.cfg.flash.endurance as f64;
        (f.rber_fresh + (f.rber_end_of_life - f.rber_fresh) * wear).clamp(0.0, 1.0)
    }

    #[inline]
    pub(super) fn worn(&self, m: &BlockMeta) -> bool {
        m.pe_cycles >= self.cfg.flash.endurance
    }
}

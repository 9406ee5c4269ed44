//! Figures, knobs and self-checks of the store (batch-io §8.1.2/§8.1.3): counters, modeled
//! time, page and cache sizes, the host log's use, the device's SMART log, the cache and
//! host-log knobs the benchmarks turn, and [`Store::check`] for tests.
//!
//! Choices: the counters are plain fields copied out ([`StoreStats`]); resetting them
//! leaves the store's state alone.

use super::*;

impl<I: CommandIssuer> Store<I> {
    /// Check the host log's bookkeeping and that every clean cached page equals what the
    /// device holds for it (block interface). For tests; reads through the device.
    pub fn check(&mut self) -> Result<(), String> {
        let Some(log) = &self.log else {
            return Ok(());
        };
        log.check()?;
        let clean: Vec<u64> = self
            .cache
            .index
            .keys()
            .copied()
            .filter(|id| !self.dirty.contains_key(id) && !self.buf.contains(*id))
            .collect();
        for id in clean {
            let mut t = self.clock.cpu;
            let (p, _) = self.read_page(id, &mut t).map_err(|e| e.to_string())?;
            let i = self.cache.index[&id];
            if p[HEADER_SKIP..] != self.cache.frames[i].data[HEADER_SKIP..] {
                return Err(format!(
                    "clean cached page {id} differs from the device's copy"
                ));
            }
        }
        Ok(())
    }

    /// Host log segments in all and free (block interface).
    pub fn host_log_segments(&self) -> Option<(u32, usize)> {
        self.log.as_ref().map(|l| (l.segments(), l.free_segments()))
    }

    /// Counters since the last [`Store::reset_stats`].
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            io: self.io,
            cpu: self.clock.split,
            cache_hits: self.cache.hits,
            cache_misses: self.cache.misses,
            evictions: self.cache.evictions,
            queue_full_wait_ns: self.clock.queue_full_wait_ns,
            ..self.counts
        }
    }

    /// Start a new measurement window.
    pub fn reset_stats(&mut self) {
        self.io = IoStats::default();
        self.clock.split = CpuSplit::default();
        self.clock.queue_full_wait_ns = 0;
        self.cache.hits = 0;
        self.cache.misses = 0;
        self.cache.evictions = 0;
        self.counts = StoreStats::default();
    }

    /// The host thread's clock (modeled).
    pub fn now(&self) -> SimTime {
        self.clock.cpu
    }

    /// When every command issued so far has completed.
    pub fn drained(&self) -> SimTime {
        self.clock.drained()
    }

    /// Page ids the host log maps (block interface; `None` on batch).
    pub fn host_log_pages(&self) -> Option<u64> {
        self.log.as_ref().map(BlockLog::mapped_pages)
    }

    /// Pages in the tree (allocated page ids, the superpage included).
    pub fn pages(&self) -> u64 {
        self.sup.next_id
    }

    /// Tree height.
    pub fn height(&self) -> u8 {
        self.sup.height
    }

    /// Pages cached now.
    pub fn cached_pages(&self) -> usize {
        self.cache.frames.len()
    }

    /// Dirty pages now.
    pub fn dirty_pages(&self) -> usize {
        self.dirty.len()
    }

    /// Change the cache size (pages; `None` unbounded); shrinking evicts (writing dirty
    /// pages out).
    pub fn set_cache_pages(&mut self, pages: Option<usize>) -> Result<(), KvError> {
        self.cache.capacity = pages.unwrap_or(usize::MAX).max(self.reserve());
        self.make_room()?;
        self.seal()
    }

    /// Change the number of write buffers (see [`StoreConfig::write_buffers`]); the
    /// writes already in flight keep theirs.
    pub fn set_write_buffers(&mut self, buffers: Option<usize>) {
        self.cfg.write_buffers = buffers.map(|n| n.max(1));
    }

    /// Change how long a dirty page may wait before it is written (modeled ns; see
    /// [`StoreConfig::max_dirty_age_ns`]).
    pub fn set_max_dirty_age_ns(&mut self, ns: u64) {
        self.cfg.max_dirty_age_ns = ns;
    }

    /// The device's SMART log, read through the command interface.
    pub fn smart(&mut self) -> Result<csd_device::SmartLog, KvError> {
        let at = self.clock.cpu;
        let c = self
            .dev
            .exec_at(Command::GetLogPage(csd_device::LogPage::Smart), at)?;
        match c.payload {
            Payload::Smart(s) => Ok(s),
            _ => Err(KvError::Corrupt("SMART log page missing".into())),
        }
    }
}

//! Buffer cache of tree blocks over device LBAs, and the block allocator.
//!
//! * Blocks are `block_bytes` (a multiple of the LBA size) and are cached *decoded*
//!   (`Arc<Block>`), so a hit costs no parsing; the capacity is counted in blocks of
//!   `block_bytes` (`cache_bytes / block_bytes`).
//! * Eviction is CLOCK (second chance): one reference bit per frame, a hand that sweeps.
//! * Write-through: a written block goes to the device at once and into the cache. Tree
//!   blocks are immutable once written (merges write new blocks), so the cache never
//!   holds dirty data and a power cut cannot lose anything the manifest points to.
//! * Device access goes through a small **pool of [`DeviceHandle`]s** (each a queue pair
//!   with its own clock): a caller takes a handle for one command and puts it back. A
//!   pool rather than one handle per calling thread because the tree's callers are
//!   arbitrary threads that the tree does not know about (benchmark workers, the merge
//!   thread), handles are limited (64 queue pairs) and a pooled handle needs no
//!   thread-local state; the pool grows on demand up to `MAX_HANDLES`, then callers
//!   wait. Each handle carries its own simulated clock, so modeled time of concurrent
//!   callers overlaps as on a real multi-queue drive.
//! * The allocator hands out block ids of the tree area, reusing freed ids (a free
//!   list) before growing a high-water mark; freed blocks are trimmed so the FTL stops
//!   copying them during garbage collection.

use crate::FdError;
use crate::format::Block;
use crate::sync::{Arc, AtomicU64, Condvar, Mutex, Ordering, lock};
use csd_host::{CommandIssuer, DeviceHandle, SharedDevice};
use std::collections::HashMap;

/// Most device handles the pool opens.
pub const MAX_HANDLES: usize = 16;

/// Cache counters.
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// Lookups served from memory.
    pub hits: AtomicU64,
    /// Lookups that read the device.
    pub misses: AtomicU64,
    /// Blocks read from the device.
    pub reads: AtomicU64,
    /// Blocks written to the device.
    pub writes: AtomicU64,
}

struct Frame {
    id: u64,
    block: Arc<Block>,
    referenced: bool,
}

struct Frames {
    map: HashMap<u64, usize>,
    frames: Vec<Frame>,
    hand: usize,
}

/// The handle pool: handles not in use, and how many exist.
struct Pool {
    idle: Vec<DeviceHandle>,
    open: usize,
}

/// A thread-safe cache of decoded tree blocks with a CLOCK replacement policy.
pub struct Cache {
    dev: SharedDevice,
    /// First LBA of the tree area.
    base_lba: u64,
    lbas_per_block: u64,
    block_bytes: usize,
    capacity: usize,
    frames: Mutex<Frames>,
    pool: Mutex<Pool>,
    pool_cv: Condvar,
    /// Counters.
    pub counters: CacheCounters,
}

/// A handle borrowed from the pool; returned on drop.
pub struct PooledHandle<'a> {
    cache: &'a Cache,
    h: Option<DeviceHandle>,
}

impl PooledHandle<'_> {
    /// The handle.
    pub fn get(&mut self) -> &mut DeviceHandle {
        // Present from construction until drop.
        self.h
            .as_mut()
            .unwrap_or_else(|| unreachable!("pooled handle taken"))
    }
}

impl Drop for PooledHandle<'_> {
    fn drop(&mut self) {
        if let Some(h) = self.h.take() {
            lock(&self.cache.pool).idle.push(h);
            self.cache.pool_cv.notify_one();
        }
    }
}

impl Cache {
    /// A cache of `capacity_bytes` over blocks of `block_bytes` starting at `base_lba`.
    pub fn new(
        dev: SharedDevice,
        base_lba: u64,
        block_bytes: usize,
        capacity_bytes: usize,
    ) -> Cache {
        let lba = dev.identify().lba_size.max(1) as u64;
        Cache {
            dev,
            base_lba,
            lbas_per_block: (block_bytes as u64 / lba).max(1),
            block_bytes,
            capacity: (capacity_bytes / block_bytes.max(1)).max(4),
            frames: Mutex::new(Frames {
                map: HashMap::new(),
                frames: Vec::new(),
                hand: 0,
            }),
            pool: Mutex::new(Pool {
                idle: Vec::new(),
                open: 0,
            }),
            pool_cv: Condvar::new(),
            counters: CacheCounters::default(),
        }
    }

    /// The shared device.
    pub fn device(&self) -> &SharedDevice {
        &self.dev
    }

    /// Borrow a device handle from the pool (opening one if none is idle).
    pub fn handle(&self) -> Result<PooledHandle<'_>, FdError> {
        let mut p = lock(&self.pool);
        loop {
            if let Some(h) = p.idle.pop() {
                return Ok(PooledHandle {
                    cache: self,
                    h: Some(h),
                });
            }
            if p.open < MAX_HANDLES {
                p.open += 1;
                drop(p);
                return match self.dev.handle() {
                    Ok(h) => Ok(PooledHandle {
                        cache: self,
                        h: Some(h),
                    }),
                    Err(e) => {
                        lock(&self.pool).open -= 1;
                        Err(FdError::Device(e))
                    }
                };
            }
            p = self.pool_cv.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// First LBA of block `id`.
    pub fn lba_of(&self, id: u64) -> u64 {
        self.base_lba + id * self.lbas_per_block
    }

    /// The block `id`, from memory or the device.
    pub fn get(&self, id: u64) -> Result<Arc<Block>, FdError> {
        {
            let mut f = lock(&self.frames);
            if let Some(&i) = f.map.get(&id) {
                f.frames[i].referenced = true;
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(f.frames[i].block.clone());
            }
        }
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        let data = {
            let mut h = self.handle()?;
            h.get().read(self.lba_of(id), self.lbas_per_block as u32)?
        };
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        let block = Arc::new(Block::decode(id, &data)?);
        self.install(id, block.clone());
        Ok(block)
    }

    /// Read up to `n` consecutive blocks from `id` with one command (merge
    /// read-ahead), past the cache. The first block must decode; the run is cut at the
    /// first later block that does not (a free or trimmed block).
    pub fn read_run(&self, id: u64, n: u64) -> Result<Vec<(u64, Block)>, FdError> {
        let n = n.max(1);
        let data = {
            let mut h = self.handle()?;
            h.get()
                .read(self.lba_of(id), (n * self.lbas_per_block) as u32)?
        };
        self.counters.reads.fetch_add(n, Ordering::Relaxed);
        let mut out = Vec::with_capacity(n as usize);
        for (i, chunk) in data.chunks(self.block_bytes).enumerate() {
            let bid = id + i as u64;
            match Block::decode(bid, chunk) {
                Ok(b) => out.push((bid, b)),
                Err(e) if i == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(out)
    }

    /// Write blocks with consecutive ids starting at `blocks[0].0` with one command
    /// (the host client splits it at the device's MDTS), and cache them.
    pub fn put_run(&self, h: &mut DeviceHandle, blocks: Vec<(u64, Block)>) -> Result<(), FdError> {
        let Some(&(first, _)) = blocks.first() else {
            return Ok(());
        };
        let mut bytes = Vec::with_capacity(blocks.len() * self.block_bytes);
        for (i, (id, b)) in blocks.iter().enumerate() {
            if *id != first + i as u64 {
                return Err(FdError::Corrupt(format!(
                    "put_run: block {id} is not consecutive"
                )));
            }
            bytes.extend_from_slice(&b.encode(self.block_bytes));
        }
        h.write(self.lba_of(first), &bytes)?;
        self.counters
            .writes
            .fetch_add(blocks.len() as u64, Ordering::Relaxed);
        for (id, b) in blocks {
            self.install(id, Arc::new(b));
        }
        Ok(())
    }

    /// Write `block` as block `id` (write-through) with handle `h`.
    pub fn put(&self, h: &mut DeviceHandle, id: u64, block: Block) -> Result<(), FdError> {
        let bytes = block.encode(self.block_bytes);
        h.write(self.lba_of(id), &bytes)?;
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.install(id, Arc::new(block));
        Ok(())
    }

    /// Drop block `id` from the cache (it was freed).
    pub fn forget(&self, id: u64) {
        let mut f = lock(&self.frames);
        if let Some(i) = f.map.remove(&id) {
            // Keep the frame vector dense: move the last frame into the hole.
            let last = f.frames.len() - 1;
            f.frames.swap_remove(i);
            if i != last {
                let moved = f.frames[i].id;
                f.map.insert(moved, i);
            }
            if f.hand >= f.frames.len() {
                f.hand = 0;
            }
        }
    }

    fn install(&self, id: u64, block: Arc<Block>) {
        let mut f = lock(&self.frames);
        if let Some(&i) = f.map.get(&id) {
            f.frames[i].block = block;
            f.frames[i].referenced = true;
            return;
        }
        if f.frames.len() < self.capacity {
            let i = f.frames.len();
            f.frames.push(Frame {
                id,
                block,
                referenced: false,
            });
            f.map.insert(id, i);
            return;
        }
        // CLOCK: clear reference bits until an unreferenced frame comes under the hand.
        loop {
            let h = f.hand;
            f.hand = (h + 1) % f.frames.len();
            if f.frames[h].referenced {
                f.frames[h].referenced = false;
            } else {
                let old = f.frames[h].id;
                f.map.remove(&old);
                f.frames[h] = Frame {
                    id,
                    block,
                    referenced: false,
                };
                f.map.insert(id, h);
                return;
            }
        }
    }
}

/// Block allocator over the tree area `[0, blocks)`. Next fit, so that a merge writing
/// a level gets consecutive blocks (one device command per run of blocks, and
/// read-ahead later): the block after the last one handed out if it is free, else the
/// smallest free block that starts a free run of at least [`RUN`] blocks, else a fresh
/// block above the high-water mark, else the smallest free block. Single blocks freed
/// early by an FD+FC merge are thus reused once runs and fresh space are gone, instead
/// of breaking every run of the level being written.
#[derive(Debug, Clone)]
pub struct Allocator {
    free: std::collections::BTreeSet<u64>,
    high: u64,
    blocks: u64,
    last: Option<u64>,
}

/// Length of a free run that next fit prefers to a fresh block.
pub const RUN: u64 = 32;

impl Allocator {
    /// An allocator over `blocks` block ids, with ids in `used` taken.
    pub fn new(blocks: u64, used: &std::collections::HashSet<u64>) -> Allocator {
        let high = used.iter().map(|&b| b + 1).max().unwrap_or(0);
        let free = (0..high).filter(|b| !used.contains(b)).collect();
        Allocator {
            free,
            high,
            blocks,
            last: None,
        }
    }

    /// A free block id.
    pub fn alloc(&mut self) -> Result<u64, FdError> {
        let b = self.pick().ok_or(FdError::NoSpace {
            blocks: self.blocks,
        })?;
        if b == self.high {
            self.high += 1;
        } else {
            self.free.remove(&b);
        }
        self.last = Some(b);
        Ok(b)
    }

    fn pick(&self) -> Option<u64> {
        if let Some(next) = self.last.map(|l| l + 1)
            && (self.free.contains(&next) || (next == self.high && next < self.blocks))
        {
            return Some(next);
        }
        // The smallest free run of RUN blocks (free ids are few compared to lookups of
        // the tree, and runs are found in one ordered pass).
        let mut run_start = None;
        let mut prev = None;
        for &b in &self.free {
            match (prev, run_start) {
                (Some(p), Some(s)) if b == p + 1 => {
                    if b + 1 - s >= RUN {
                        return Some(s);
                    }
                }
                _ => run_start = Some(b),
            }
            prev = Some(b);
        }
        if self.high < self.blocks {
            return Some(self.high);
        }
        self.free.first().copied()
    }

    /// Is `id` free?
    pub fn is_free(&self, id: u64) -> bool {
        id >= self.high || self.free.contains(&id)
    }

    /// Give `id` back.
    pub fn free(&mut self, id: u64) {
        self.free.insert(id);
    }

    /// Blocks in use.
    pub fn used(&self) -> u64 {
        self.high - self.free.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Entry, Kind};

    fn dev() -> SharedDevice {
        crate::test_device()
    }

    #[test]
    fn clock_cache_evicts_and_counts() {
        let c = Cache::new(dev(), 0, 4096, 4 * 4096);
        let mut h = c.handle().unwrap();
        for id in 0..8u64 {
            let b = Block {
                entries: vec![Entry {
                    key: id,
                    kind: Kind::Insert,
                    val: id * 10,
                }],
                next: None,
            };
            c.put(h.get(), id, b).unwrap();
        }
        drop(h);
        for id in 0..8u64 {
            assert_eq!(c.get(id).unwrap().entries[0].val, id * 10);
        }
        assert!(
            c.counters.misses.load(Ordering::Relaxed) >= 4,
            "capacity 4 frames"
        );
        let hits = c.counters.hits.load(Ordering::Relaxed);
        c.get(7).unwrap();
        assert_eq!(c.counters.hits.load(Ordering::Relaxed), hits + 1);
        c.forget(7);
        c.get(7).unwrap();
        assert_eq!(c.counters.hits.load(Ordering::Relaxed), hits + 1);
    }

    #[test]
    fn allocator_reuses_and_runs_out() {
        let used = [0u64, 2].into_iter().collect();
        let mut a = Allocator::new(4, &used);
        // A fresh block before a single hole; then the hole.
        assert_eq!(a.alloc().unwrap(), 3);
        assert_eq!(a.alloc().unwrap(), 1);
        assert!(matches!(a.alloc(), Err(FdError::NoSpace { .. })));
        a.free(2);
        assert_eq!(a.alloc().unwrap(), 2);
        assert_eq!(a.used(), 4);
    }

    #[test]
    fn allocator_hands_out_runs_for_sequential_levels() {
        let used = (0..200u64).collect();
        let mut a = Allocator::new(1000, &used);
        // Free a run of 40 and scattered singles; a level written now gets the run.
        for b in 100..140 {
            a.free(b);
        }
        for b in [5, 17, 61] {
            a.free(b);
        }
        let got: Vec<u64> = (0..40).map(|_| a.alloc().unwrap()).collect();
        assert_eq!(got, (100..140).collect::<Vec<_>>());
        // Then it continues with fresh blocks above the high-water mark, contiguously.
        assert_eq!(a.alloc().unwrap(), 200);
        assert_eq!(a.alloc().unwrap(), 201);
    }
}

//! Creating a tree on a device and opening one after a restart or a crash: the
//! manifest, the redo log replay and the merge that was interrupted.

use super::*;

impl FdTree {
    pub(super) fn build(dev: SharedDevice, cfg: FdConfig) -> Result<(Arc<Inner>, Geo), FdError> {
        let geo = Geo::new(&dev, &cfg)?;
        let cache = Cache::new(dev, geo.tree_lba, geo.block_bytes, cfg.cache_bytes);
        let inner = Arc::new(Inner {
            alloc: Mutex::new(Allocator::new(geo.tree_blocks, &HashSet::new())),
            top: Mutex::new(Top {
                fc: None,
                wave: None,
                wave_heads: Vec::new(),
                tickets: Default::default(),
                next_ticket: 0,
                l0: L0::default(),
                l0_old: None,
                levels: Arc::new(Levels::default()),
                generation: 1,
                merging: false,
                failed: None,
                closed: false,
            }),
            cv: Condvar::new(),
            xm: RwLock::new(()),
            log: Mutex::new(LogState {
                next_lsn: 1,
                tail: vec![0u8; geo.lba_size as usize],
            }),
            log_start: AtomicU64::new(1),
            manifest_seq: Mutex::new((0, 0)),
            merge_thread: Mutex::new(None),
            counters: Counters::default(),
            gate: Mutex::new(None),
            cfg,
            geo: geo.clone(),
            cache,
        });
        Ok((inner, geo))
    }

    /// Create an empty tree in the configured LBA range (overwriting whatever is there).
    pub fn create(dev: SharedDevice, cfg: FdConfig) -> Result<FdTree, FdError> {
        let (inner, geo) = Self::build(dev, cfg)?;
        {
            let mut ph = inner.cache.handle()?;
            let h = ph.get();
            // Wipe the log so stale records of an earlier tree cannot replay.
            h.trim(geo.log_lba, geo.log_lbas)?;
            let zero = vec![0u8; (geo.log_lbas.min(64) * geo.lba_size) as usize];
            let mut lba = geo.log_lba;
            while lba < geo.log_lba + geo.log_lbas {
                let n = (geo.log_lba + geo.log_lbas - lba).min(64);
                h.write(lba, &zero[..(n * geo.lba_size) as usize])?;
                lba += n;
            }
            h.trim(geo.tree_lba, geo.tree_blocks * geo.lbas_per_block)?;
            // Both manifest slots, so an older tree's slot cannot win on open.
            inner.write_manifest(h, &Levels::default(), 1, 1, 0)?;
            inner.write_manifest(h, &Levels::default(), 1, 1, 0)?;
        }
        Ok(FdTree { inner })
    }

    /// Open the tree in the configured LBA range after a clean close, a crash or a
    /// power cut: the newest valid manifest, then the redo log. Restores exactly the
    /// acknowledged state.
    pub fn open(dev: SharedDevice, cfg: FdConfig) -> Result<FdTree, FdError> {
        let (inner, geo) = Self::build(dev, cfg)?;
        let mut ph = inner.cache.handle()?;
        let h = ph.get();
        let m = newest_manifest(h, &geo)?;
        inner.rebuild_allocator(&geo, &m)?;
        *lock(&inner.manifest_seq) = (m.seq, m.merges);
        let replay = replay_log(h, &geo, &m)?;
        drop(ph);
        let gen_count = replay.generations.len();
        let last_gen = replay.generations.last().map_or(m.generation, |g| g.0);
        let l0 = fold_generations(replay.generations);
        inner.log_start.store(m.log_start, Ordering::Release);
        {
            let mut log = lock(&inner.log);
            log.next_lsn = replay.next_lsn;
            log.tail = replay.tail;
        }
        {
            let mut top = lock(&inner.top);
            top.l0 = l0;
            top.generation = last_gen;
            top.levels = Arc::new(Levels {
                top_fences: m.top_fences,
                levels: m.levels,
            });
        }
        let tree = FdTree { inner };
        tree.finish_interrupted_merge(gen_count)?;
        Ok(tree)
    }

    /// A cut during a DS merge leaves two generations: merge them now (inline) so the
    /// log again holds a single generation; also merge if L0 is over its budget.
    fn finish_interrupted_merge(&self, gen_count: usize) -> Result<(), FdError> {
        let need = {
            let top = lock(&self.inner.top);
            let log = lock(&self.inner.log);
            gen_count > 1 || self.inner.triggered(&top, &log)
        };
        if need {
            let log = lock(&self.inner.log);
            let old = {
                let mut top = lock(&self.inner.top);
                let underflow = self.inner.underflow(&top);
                let l0 = Arc::new(std::mem::take(&mut top.l0));
                top.l0_old = Some(l0.clone());
                top.generation += 1;
                top.merging = true;
                (l0, top.levels.clone(), underflow, top.generation)
            };
            self.inner
                .merge_and_install(old.0, old.1, old.2, old.3, log.next_lsn)?;
        }
        Ok(())
    }
}

impl Inner {
    /// Rebuild the allocator: every block reachable from the manifest is in use.
    fn rebuild_allocator(&self, geo: &Geo, m: &Manifest) -> Result<(), FdError> {
        let mut used = HashSet::new();
        for l in &m.levels {
            let mut next = Some(l.head);
            while let Some(id) = next {
                if id >= geo.tree_blocks || !used.insert(id) {
                    return Err(FdError::Corrupt(format!(
                        "block {id} out of range or reached twice"
                    )));
                }
                next = self.cache.get(id)?.next;
            }
        }
        *lock(&self.alloc) = Allocator::new(geo.tree_blocks, &used);
        Ok(())
    }
}

/// The newer of the two manifest slots that decodes, checked against the configuration.
fn newest_manifest(h: &mut DeviceHandle, geo: &Geo) -> Result<Manifest, FdError> {
    let slot_bytes = (geo.manifest_lbas * geo.lba_size) as usize;
    let mut best: Option<Manifest> = None;
    for s in 0..2 {
        let data = h.read(
            geo.start_lba + s * geo.manifest_lbas,
            geo.manifest_lbas as u32,
        )?;
        if let Some(m) = Manifest::decode(&data[..slot_bytes])
            && best.as_ref().is_none_or(|b| m.seq > b.seq)
        {
            best = Some(m);
        }
    }
    let m = best.ok_or(FdError::NotFound {
        start_lba: geo.start_lba,
    })?;
    if m.block_bytes as usize != geo.block_bytes
        || m.start_lba != geo.start_lba
        || m.region_lbas != geo.region_lbas
        || m.log_lbas != geo.log_lbas
    {
        return Err(FdError::Config(format!(
            "the tree on the device has block_bytes {} over LBAs {}+{} with a log of {} LBAs; the configuration says {} over {}+{} with {}; open with the configuration it was created with",
            m.block_bytes,
            m.start_lba,
            m.region_lbas,
            m.log_lbas,
            geo.block_bytes,
            geo.start_lba,
            geo.region_lbas,
            geo.log_lbas
        )));
    }
    Ok(m)
}

/// What replaying the redo log found.
struct Replay {
    /// The L0 of each generation the log holds (one, or two after a cut in a DS merge),
    /// oldest first.
    generations: Vec<(u64, L0)>,
    /// The sequence number the next record gets.
    next_lsn: u64,
    /// The records of the log's last, partly filled LBA.
    tail: Vec<u8>,
}

/// Replay the redo log from the manifest's start up to the first record that is missing,
/// out of sequence or of an older generation.
fn replay_log(h: &mut DeviceHandle, geo: &Geo, m: &Manifest) -> Result<Replay, FdError> {
    let mut generations: Vec<(u64, L0)> = Vec::new();
    let mut lsn = m.log_start;
    let mut lba_data: Option<(u64, Vec<u8>)> = None;
    loop {
        let lba_no = lsn / geo.rpl;
        if lba_no >= m.log_start / geo.rpl + geo.log_lbas {
            break;
        }
        if lba_data.as_ref().is_none_or(|(n, _)| *n != lba_no) {
            let d = h.read(geo.log_lba + lba_no % geo.log_lbas, 1)?;
            lba_data = Some((lba_no, d));
        }
        let Some((_, d)) = &lba_data else { break };
        let i = (lsn % geo.rpl) as usize;
        let Some(r) = LogRecord::decode(&d[i * LOG_RECORD_BYTES..(i + 1) * LOG_RECORD_BYTES])
        else {
            break;
        };
        if r.lsn != lsn || r.generation < m.generation {
            break;
        }
        if generations.last().is_none_or(|g| g.0 != r.generation) {
            generations.push((r.generation, L0::default()));
        }
        if let Some(g) = generations.last_mut() {
            g.1.set(
                r.key,
                Slot {
                    del: r.del,
                    ins: r.ins,
                },
            );
        }
        lsn += 1;
    }
    let mut tail = vec![0u8; geo.lba_size as usize];
    if !lsn.is_multiple_of(geo.rpl)
        && let Some((n, d)) = lba_data
        && n == lsn / geo.rpl
    {
        let keep = (lsn % geo.rpl) as usize * LOG_RECORD_BYTES;
        tail[..keep].copy_from_slice(&d[..keep]);
    }
    Ok(Replay {
        generations,
        next_lsn: lsn,
        tail,
    })
}

/// One L0 of the replayed generations, the newer composed over the older.
fn fold_generations(generations: Vec<(u64, L0)>) -> L0 {
    let mut l0 = L0::default();
    for (_, g) in generations {
        if l0.map.is_empty() {
            l0 = g;
        } else {
            for (k, s) in g.map {
                let c = l0.map.get(&k).copied().unwrap_or_default().compose(s);
                l0.set(k, c);
            }
        }
    }
    l0
}

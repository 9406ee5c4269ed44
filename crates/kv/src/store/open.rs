//! Opening a store (batch-io §8.1.2): what is on the device (a batch store's superpage
//! at LPID 0, a block store's host checkpoint, nothing, or something else), formatting an
//! empty device, and recovering the block interface's host log (roll-forward from the
//! last checkpoint, then a fresh checkpoint).
//!
//! Choices: a device holding the other interface's store, or anything else, is refused
//! with an error naming the fix, and nothing is written; an empty device is formatted only
//! when [`StoreConfig::create`] says so.

use super::*;

impl<I: CommandIssuer> Store<I> {
    /// Open the store on `dev`: recover the one there, or format an empty device when
    /// `cfg.create`. A device holding the other interface's store, or anything else, is
    /// an error that says so (and changes nothing).
    pub fn open(dev: I, cfg: StoreConfig) -> Result<Store<I>, Box<OpenFailed<I>>> {
        let id = dev.identify().clone();
        let now = dev.now();
        let cap = (cfg.write_buffer_bytes / PAGE).saturating_sub(1);
        let mut s = Store {
            clock: HostClock::new(cfg.costs, cfg.queue_depth, now),
            cache: Cache::new(cfg.cache_pages.unwrap_or(usize::MAX)),
            buf: WriteBuffer::new(cap.max(1)),
            dirty: HashMap::new(),
            fifo: VecDeque::new(),
            sup: Super {
                interface: cfg.interface.tag(),
                root: 1,
                next_id: 2,
                height: 1,
            },
            lsn: 0,
            batch_seq: 0,
            log: None,
            modifying: false,
            group: None,
            last_ckpt: now,
            lbas: id.lbas,
            counts: StoreStats::default(),
            op_start: now,
            op_done: now,
            op_times: Vec::new(),
            op_noted: false,
            buffer_free: now,
            io: IoStats::default(),
            recovered: false,
            activity: Activity::Recovery,
            dev,
            cfg,
        };
        match s.init(id.lba_size) {
            Ok(()) => {
                s.activity = Activity::Idle;
                Ok(s)
            }
            Err(error) => Err(Box::new(OpenFailed { error, dev: s.dev })),
        }
    }

    /// Check the configuration against the device, then format, recognise or recover
    /// what the device holds.
    fn init(&mut self, lba_size: u32) -> Result<(), KvError> {
        self.check_config(lba_size)?;
        if !self.cfg.persist {
            self.cache.capacity = usize::MAX;
            return self.format_in_memory();
        }
        let batch_limit = self.dev.identify().max_batch_pages as usize;
        if self.cfg.interface == Interface::Batch && self.buf.cap > batch_limit {
            self.buf.cap = batch_limit;
        }
        let at = self.clock.cpu;
        let head = self.probe(at)?;
        match self.cfg.interface {
            Interface::Batch => self.open_batch(head),
            Interface::Block => self.open_block(head, at),
        }
    }

    /// The page size and write buffer size this store can work with.
    fn check_config(&self, lba_size: u32) -> Result<(), KvError> {
        if lba_size as usize != PAGE {
            return Err(KvError::Config(format!(
                "the store needs {PAGE}-byte LBAs; this device has {lba_size}"
            )));
        }
        if self.buf.cap < 16 || self.buf.cap > block::MAX_CHUNK_PAGES.min(255) {
            return Err(KvError::Config(format!(
                "write buffer of {} bytes: use 68 KiB to 1 MiB",
                self.cfg.write_buffer_bytes
            )));
        }
        Ok(())
    }

    /// What is on the device: LBA 0 and the block log's second checkpoint slot.
    fn probe(&mut self, at: SimTime) -> Result<DeviceHead, KvError> {
        let head = self.read_raw(0, at)?;
        let other_b = block::slot_b(self.lbas)
            .map(|b| self.read_raw(b, at))
            .transpose()?;
        let has_ckpt = block::is_checkpoint(&head)
            || other_b.as_ref().is_some_and(|b| block::is_checkpoint(b));
        Ok(DeviceHead {
            has_ckpt,
            sup: page::get_super(&head).filter(|_| page::crc_ok(&head)),
            empty: head.iter().all(|&b| b == 0) && !has_ckpt,
        })
    }

    /// Batch interface: recognise the superpage at LPID 0, or format an empty device.
    fn open_batch(&mut self, head: DeviceHead) -> Result<(), KvError> {
        if head.has_ckpt {
            return Err(KvError::WrongFormat(
                "this device holds a key-value store of the block interface (host log \
                 structuring): open it with --interface block"
                    .into(),
            ));
        }
        match head.sup {
            Some(s) if s.interface == Interface::Batch.tag() => {
                self.sup = s;
                self.recovered = true;
                Ok(())
            }
            Some(s) => Err(KvError::WrongFormat(format!(
                "the superpage at LPID 0 names interface tag {}: not a batch store",
                s.interface
            ))),
            None if head.empty && self.cfg.create => self.format(),
            None if head.empty => Err(KvError::WrongFormat(
                "the device holds no key-value store (create one first)".into(),
            )),
            None => Err(KvError::WrongFormat(
                "the device holds something other than a key-value store at LPID 0".into(),
            )),
        }
    }

    /// Block interface: recover the host log from its checkpoint, or format an empty
    /// device.
    fn open_block(&mut self, head: DeviceHead, at: SimTime) -> Result<(), KvError> {
        if let Some(s) = head.sup
            && s.interface == Interface::Batch.tag()
        {
            return Err(KvError::WrongFormat(
                "this device holds a key-value store of the batch interface (log \
                 structuring in the device): open it with --interface batch"
                    .into(),
            ));
        }
        if !head.has_ckpt {
            return if head.empty && self.cfg.create {
                self.format()
            } else if head.empty {
                Err(KvError::WrongFormat(
                    "the device holds no key-value store (create one first)".into(),
                ))
            } else {
                Err(KvError::WrongFormat(
                    "the device holds something other than a key-value store at LBA 0".into(),
                ))
            };
        }
        self.recover_block(at)
    }

    /// Roll the host log forward from its checkpoint, read the superpage through it, and
    /// checkpoint the recovered state.
    fn recover_block(&mut self, at: SimTime) -> Result<(), KvError> {
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        let Some((log, t)) = BlockLog::recover(&mut io, self.lbas, self.cfg.block, at)? else {
            return Err(KvError::WrongFormat("no host checkpoint found".into()));
        };
        self.log = Some(log);
        self.clock.cpu = self.dev.resolve(self.clock.cpu.max(t));
        let mut t = self.clock.cpu;
        let (p, done) = self.read_page(0, &mut t)?;
        let s = page::get_super(&p[..]).ok_or_else(|| {
            KvError::Corrupt("page 0 of the block store is not its superpage".into())
        })?;
        if s.interface != Interface::Block.tag() {
            return Err(KvError::Corrupt("superpage names another interface".into()));
        }
        self.sup = s;
        self.clock.cpu = self.dev.resolve(self.clock.cpu.max(done));
        // Pages a roll-forward found past the tree's last id belong to a tree
        // cleared before the cut: garbage.
        if let Some(log) = &mut self.log {
            log.forget_from(s.next_id);
        }
        self.checkpoint()?;
        self.recovered = true;
        Ok(())
    }

    /// Read one LBA as raw bytes (format detection).
    fn read_raw(&mut self, lba: u64, at: SimTime) -> Result<Vec<u8>, KvError> {
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        let (d, _) = io.read_lbas(Work::Checkpoint, lba, 1, at)?;
        Ok(d)
    }

    fn format_in_memory(&mut self) -> Result<(), KvError> {
        let mut sp = page::blank();
        page::put_super(&mut sp, &self.sup);
        let mut root = page::blank();
        page::init(&mut root, 1, Kind::Leaf, 0);
        let t = self.clock.cpu;
        self.cache.insert(0, sp, t);
        self.cache.insert(1, root, t);
        Ok(())
    }

    fn format(&mut self) -> Result<(), KvError> {
        if self.cfg.interface == Interface::Block {
            self.log = Some(BlockLog::new(self.lbas, self.cfg.block)?);
            self.checkpoint()?;
        }
        self.format_in_memory()?;
        self.lsn += 1;
        let t = self.clock.cpu;
        self.mark_dirty(0, self.lsn, t);
        self.mark_dirty(1, self.lsn, t);
        self.buf.add(0, None);
        self.buf.add(1, None);
        self.seal()?;
        if self.cfg.interface == Interface::Block {
            self.checkpoint()?;
        }
        Ok(())
    }
}

/// What [`Store::open`] found at the head of the device.
struct DeviceHead {
    /// A host checkpoint of the block interface in either slot.
    has_ckpt: bool,
    /// A superpage with a good CRC at LBA / LPID 0.
    sup: Option<Super>,
    /// LBA 0 is all zeros and there is no checkpoint.
    empty: bool,
}

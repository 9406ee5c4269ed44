//! Pages through the host cache (batch-io §8.1.2's in-place 4 KiB pages): reading a page
//! (cache hit, or a read of the device through the back end), making room (evicting the
//! least recently used clean page, staging a dirty one first), pinning the path an
//! operation holds, marking pages dirty with their change number, descending from the
//! root to a leaf, and bracketing an operation's modeled time.
//!
//! Choices: a page an operation holds is pinned so eviction cannot take it mid-operation;
//! an operation's latency runs from its start on the host thread to its last page's
//! arrival and its CPU work ([`crate::cost`]).

use super::*;

impl<I: CommandIssuer> Store<I> {
    pub(super) fn check_key(key: &[u8]) -> Result<(), KvError> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(KvError::KeySize {
                len: key.len(),
                max: MAX_KEY,
            });
        }
        Ok(())
    }

    pub(super) fn read_page(
        &mut self,
        id: u64,
        t: &mut SimTime,
    ) -> Result<(Page, SimTime), KvError> {
        let mut io = Io {
            dev: &mut self.dev,
            clock: &mut self.clock,
            stats: &mut self.io,
        };
        let (p, done) = match &self.log {
            Some(log) => log.read(&mut io, id, *t)?,
            None => batch::read(&mut io, id, *t)?,
        };
        self.io.user_read_bytes += PAGE as u64;
        if !(page::sane(&p[..]) && page::id(&p[..]) == id && page::crc_ok(&p[..])) {
            return Err(KvError::Corrupt(format!(
                "page {id} read back from the device does not verify (id {}, kind {:?})",
                page::id(&p[..]),
                page::kind(&p[..])
            )));
        }
        Ok((p, done))
    }

    /// Make room for one more frame: evict (a dirty page, or one the write buffer refers
    /// to, moves into the write buffer).
    pub(super) fn make_room(&mut self) -> Result<(), KvError> {
        while self.cache.is_full() {
            let Some(i) = self.cache.victim() else {
                return Ok(());
            };
            let (id, data) = self.cache.remove(i);
            if self.buf.contains(id) {
                if self.buf.image(id).is_none() {
                    self.buf.add(id, Some(data));
                }
            } else if self.dirty.contains_key(&id) {
                self.buf.add(id, Some(data));
                if !self.modifying && self.group.is_none() && self.buf.len() >= self.buf.cap {
                    self.seal()?;
                }
            }
        }
        Ok(())
    }

    /// Bring page `id` into the cache; `t` is the operation's clock.
    pub(super) fn fetch(&mut self, id: u64, t: &mut SimTime) -> Result<(), KvError> {
        let c = self.clock.costs;
        self.clock.charge(Work::User, c.level, t);
        if let Some(i) = self.cache.get(id) {
            self.cache.hits += 1;
            *t = (*t).max(self.cache.frames[i].ready_at);
            return Ok(());
        }
        self.cache.misses += 1;
        let (data, ready) = match self.buf.image(id) {
            Some(img) => (copy(img), *t),
            None => self.read_page(id, t)?,
        };
        self.make_room()?;
        let mut tt = ready.max(*t);
        self.clock.charge(Work::User, c.cache_fill, &mut tt);
        self.cache.insert(id, data, ready);
        *t = tt;
        Ok(())
    }

    pub(super) fn frame(&mut self, id: u64) -> Result<&mut Page, KvError> {
        match self.cache.index.get(&id) {
            Some(&i) => Ok(&mut self.cache.frames[i].data),
            None => Err(KvError::Corrupt(format!(
                "page {id} left the cache while in use"
            ))),
        }
    }

    pub(super) fn pin(&mut self, id: u64, by: i32) {
        if let Some(&i) = self.cache.index.get(&id) {
            let f = &mut self.cache.frames[i];
            f.pin = (f.pin as i32 + by).max(0) as u32;
        }
    }

    pub(super) fn mark_dirty(&mut self, id: u64, lsn: u64, t: SimTime) {
        if let Some(g) = &mut self.group {
            g.push(id);
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.dirty.entry(id) {
            e.insert((lsn, t));
            self.fifo.push_back((lsn, t, id));
        }
        if self.buf.image(id).is_some() && self.cache.index.contains_key(&id) {
            self.buf.add(id, None);
        }
        self.buf.relocated.remove(&id);
    }

    /// Walk from the root to the leaf for `key`; returns the page ids on the way.
    pub(super) fn descend(
        &mut self,
        key: &[u8],
        t: &mut SimTime,
        pin: bool,
    ) -> Result<Vec<u64>, KvError> {
        let mut path = Vec::with_capacity(self.sup.height as usize);
        let mut id = self.sup.root;
        loop {
            self.fetch(id, t)?;
            if pin {
                self.pin(id, 1);
            }
            path.push(id);
            let p = self.frame(id)?;
            match page::kind(&p[..]) {
                Some(Kind::Leaf) => return Ok(path),
                Some(Kind::Inner) if page::count(&p[..]) > 0 => {
                    let s = page::child_slot(&p[..], key);
                    id = page::child(&p[..], s);
                }
                k => {
                    return Err(KvError::Corrupt(format!(
                        "page {id} on the path to a key is {k:?}, not a tree node"
                    )));
                }
            }
            if path.len() > 64 {
                return Err(KvError::Corrupt("tree deeper than 64 levels".into()));
            }
        }
    }

    pub(super) fn begin_op(&mut self) -> SimTime {
        let mut t = self.clock.cpu;
        self.op_start = t;
        let c = self.clock.costs.op;
        self.clock.charge(Work::User, c, &mut t);
        t
    }

    pub(super) fn end_op(&mut self, t: SimTime) -> Result<(), KvError> {
        self.op_done = t.max(self.buffer_free);
        self.note_op(self.op_start, self.op_done);
        self.background()?;
        self.compact_events();
        Ok(())
    }

    /// Modeled start and end of the last operation.
    pub fn last_op(&self) -> (SimTime, SimTime) {
        (self.op_start, self.op_done)
    }
}

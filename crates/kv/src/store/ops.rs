//! The store's operations (batch-io §8.1.2): get, contains, put, put_all (crash-atomic
//! groups), delete, scan, clear (FLUSHALL), len; and the in-place page changes under them,
//! page splits included.
//!
//! Choices: every key and value is checked before anything changes; a split puts every
//! page it changes (the halves, the parent, perhaps a new root and the superpage) into one
//! write buffer, which always keeps room for what one operation can add, so a crash never
//! tears a split; deletes leave pages under-full (no merges).

use super::*;

impl<I: CommandIssuer> Store<I> {
    /// The value of `key`.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        Self::check_key(key)?;
        let mut t = self.begin_op();
        self.counts.gets += 1;
        let path = self.descend(key, &mut t, false)?;
        let leaf = *path.last().unwrap_or(&self.sup.root);
        let p = self.frame(leaf)?;
        let v = page::search(&p[..], key)
            .ok()
            .map(|i| page::value(&p[..], i).to_vec());
        self.end_op(t)?;
        Ok(v)
    }

    /// Does `key` exist?
    pub fn contains(&mut self, key: &[u8]) -> Result<bool, KvError> {
        Ok(self.get(key)?.is_some())
    }

    /// Set `key` to `value`; returns the change's sequence number (see [`Store::acked`]).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<u64, KvError> {
        Self::check_pair(key, value)?;
        self.counts.puts += 1;
        self.modify(key, Some(value)).map(|(lsn, _)| lsn)
    }

    /// Set every key to its value as one change a crash cannot tear (Redis's MSET):
    /// after a power cut either every pair or none of them reads back. Returns the
    /// sequence number of the last pair's change (see [`Store::acked`]).
    ///
    /// How: the pages the pairs will change are planned first (one more descent per
    /// key, charged like any): each distinct leaf, or for a leaf the pairs could
    /// overflow, the worst case of a split up to the root for each of its pairs.
    /// Every page dirty from earlier changes is sealed
    /// first, so evictions during the group can only move the group's own pages; the
    /// pairs are applied with sealing and background work held back, and all the pages
    /// they changed are sealed together as one write buffer, which is all-or-nothing on
    /// a crash. A command whose pages could exceed one buffer is refused before anything
    /// changes ([`KvError::GroupTooLarge`]); bad keys or values likewise. A failure of
    /// the device part-way (out of space, power loss) can leave the pairs applied so far
    /// in memory only, as for any unacknowledged change.
    pub fn put_all(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<u64, KvError> {
        for &(k, v) in pairs {
            Self::check_pair(k, v)?;
        }
        if !self.cfg.persist {
            let mut lsn = self.lsn;
            for &(k, v) in pairs {
                lsn = self.put(k, v)?;
            }
            return Ok(lsn);
        }
        let pages = self.plan_group(pairs)?;
        if pages > self.buf.cap {
            return Err(KvError::GroupTooLarge {
                pairs: pairs.len(),
                pages,
                cap: self.buf.cap,
            });
        }
        let ids: Vec<u64> = self.fifo.iter().map(|&(_, _, id)| id).collect();
        for id in ids {
            self.stage_dirty(id)?;
        }
        self.seal()?;
        self.group = Some(Vec::new());
        let mut r = Ok(self.lsn);
        for &(k, v) in pairs {
            r = self.put(k, v);
            if r.is_err() {
                break;
            }
        }
        let touched = self.group.take().unwrap_or_default();
        let lsn = r?;
        for id in touched {
            if self.dirty.contains_key(&id)
                && !self.buf.contains(id)
                && self.cache.index.contains_key(&id)
            {
                self.buf.add(id, None);
            }
        }
        self.seal()?;
        self.background()?;
        Ok(lsn)
    }

    /// Pages a [`Store::put_all`] of `pairs` may change at worst: every distinct leaf,
    /// or the worst case of a split (up to the root) for each leaf whose free bytes cannot take its pairs'
    /// entries.
    fn plan_group(&mut self, pairs: &[(&[u8], &[u8])]) -> Result<usize, KvError> {
        // leaf -> (its used bytes when planned, bytes of the entries going to it, pairs)
        let mut need: HashMap<u64, (usize, usize, usize)> = HashMap::new();
        let mut t = self.clock.cpu;
        for &(k, v) in pairs {
            let path = self.descend(k, &mut t, false)?;
            let leaf = *path.last().unwrap_or(&self.sup.root);
            let used = page::used_bytes(&self.frame(leaf)?[..]);
            let e = need.entry(leaf).or_insert((used, 0, 0));
            e.1 += page::entry_bytes(k.len(), v.len());
            e.2 += 1;
        }
        // A leaf its pairs may overflow can split on every one of them, each split
        // reaching up to the root: two pages per level (the page and its new sibling),
        // a new root and the superpage; two levels more in case the group grows the
        // tree (a group within one buffer cannot grow it further).
        let split = 2 * (self.sup.height as usize + 2) + 2;
        Ok(need
            .values()
            .map(|&(used, bytes, n)| {
                if used + bytes <= PAGE {
                    1
                } else {
                    1 + n * split
                }
            })
            .sum())
    }

    /// A key and value a put accepts.
    fn check_pair(key: &[u8], value: &[u8]) -> Result<(), KvError> {
        Self::check_key(key)?;
        if value.len() > MAX_VALUE {
            return Err(KvError::ValueSize {
                len: value.len(),
                max: MAX_VALUE,
            });
        }
        Ok(())
    }

    /// Remove `key`; returns whether it existed.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        Self::check_key(key)?;
        self.counts.deletes += 1;
        self.modify(key, None).map(|(_, existed)| existed)
    }

    pub(super) fn reserve(&self) -> usize {
        4 * self.sup.height as usize + 8
    }

    fn modify(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(u64, bool), KvError> {
        if self.cfg.persist
            && self.group.is_none()
            && self.buf.len() + self.reserve() > self.buf.cap
        {
            self.seal()?;
        }
        let mut t = self.begin_op();
        let path = self.descend(key, &mut t, true)?;
        self.lsn += 1;
        let lsn = self.lsn;
        self.modifying = true;
        let r = self.apply(&path, key, value, lsn, &mut t);
        self.modifying = false;
        for &id in &path {
            self.pin(id, -1);
        }
        let existed = r?;
        self.end_op(t)?;
        Ok((lsn, existed))
    }

    fn apply(
        &mut self,
        path: &[u64],
        key: &[u8],
        value: Option<&[u8]>,
        lsn: u64,
        t: &mut SimTime,
    ) -> Result<bool, KvError> {
        let leaf = *path
            .last()
            .ok_or_else(|| KvError::Corrupt("empty path".into()))?;
        let c = self.clock.costs;
        self.clock.charge(Work::User, c.modify, t);
        let Some(value) = value else {
            let removed = page::remove(self.frame(leaf)?, key);
            if removed {
                self.mark_dirty(leaf, lsn, *t);
            }
            return Ok(removed);
        };
        let existed = page::search(&self.frame(leaf)?[..], key).is_ok();
        if page::upsert(self.frame(leaf)?, key, value) {
            self.mark_dirty(leaf, lsn, *t);
            return Ok(existed);
        }
        self.split_insert(path, key, value, lsn, t)?;
        Ok(existed)
    }

    fn alloc_id(&mut self) -> Result<u64, KvError> {
        let id = self.sup.next_id;
        let limit = match &self.log {
            Some(l) => l.page_capacity() * 9 / 10,
            None if self.cfg.persist => self.lbas,
            None => u64::MAX,
        };
        if id >= limit {
            return Err(KvError::NoSpace(format!(
                "the tree has {id} pages, the most this device holds for the {} interface",
                self.cfg.interface.name()
            )));
        }
        self.sup.next_id += 1;
        Ok(id)
    }

    fn install(&mut self, id: u64, data: Page, t: SimTime) -> Result<(), KvError> {
        self.make_room()?;
        self.cache.insert(id, data, t);
        self.pin(id, 1);
        Ok(())
    }

    fn split_insert(
        &mut self,
        path: &[u64],
        key: &[u8],
        value: &[u8],
        lsn: u64,
        t: &mut SimTime,
    ) -> Result<(), KvError> {
        let c = self.clock.costs;
        let mut group: Vec<u64> = Vec::new();
        let mut level = path.len() - 1;
        let mut ins_key = key.to_vec();
        let mut ins_val = value.to_vec();
        let mut new_pages = Vec::new();
        loop {
            let id = path[level];
            if page::upsert(self.frame(id)?, &ins_key, &ins_val) {
                group.push(id);
                break;
            }
            self.clock.charge(Work::User, c.split, t);
            self.counts.splits += 1;
            let (kind, lvl) = {
                let p = self.frame(id)?;
                (
                    page::kind(&p[..]).unwrap_or(Kind::Leaf),
                    page::level(&p[..]),
                )
            };
            let rid = self.alloc_id()?;
            let mut r = page::blank();
            page::init(&mut r, rid, kind, lvl);
            let left = self.frame(id)?;
            let sep = page::split_into(left, &mut r);
            if kind == Kind::Leaf {
                page::set_next(&mut r[..], page::next(&left[..]));
                page::set_next(&mut left[..], rid);
            }
            let fits = if ins_key >= sep {
                page::upsert(&mut r, &ins_key, &ins_val)
            } else {
                page::upsert(self.frame(id)?, &ins_key, &ins_val)
            };
            if !fits {
                return Err(KvError::Corrupt(
                    "an entry does not fit a freshly split page".into(),
                ));
            }
            self.install(rid, r, *t)?;
            new_pages.push(rid);
            group.push(id);
            group.push(rid);
            if level == 0 {
                let nid = self.alloc_id()?;
                let mut root = page::blank();
                page::init(&mut root, nid, Kind::Inner, lvl + 1);
                page::upsert(&mut root, &[], &id.to_le_bytes());
                page::upsert(&mut root, &sep, &rid.to_le_bytes());
                self.install(nid, root, *t)?;
                new_pages.push(nid);
                group.push(nid);
                self.sup.root = nid;
                self.sup.height = self.sup.height.saturating_add(1);
                break;
            }
            ins_key = sep;
            ins_val = rid.to_le_bytes().to_vec();
            level -= 1;
        }
        // The superpage records the allocation (and any new root).
        self.fetch(0, t)?;
        let sup = self.sup;
        page::put_super(self.frame(0)?, &sup);
        group.push(0);
        for &id in &group {
            self.mark_dirty(id, lsn, *t);
            if self.cfg.persist {
                self.buf.add(id, None);
            }
        }
        for id in new_pages {
            self.pin(id, -1);
        }
        Ok(())
    }

    /// Up to `limit` entries with keys at or after `start`, in key order.
    pub fn scan(&mut self, start: &[u8], limit: usize) -> Result<Vec<Entry>, KvError> {
        let mut t = self.begin_op();
        self.counts.scans += 1;
        let mut out = Vec::new();
        let path = self.descend(start, &mut t, false)?;
        let mut id = *path.last().unwrap_or(&self.sup.root);
        let mut from = {
            let p = self.frame(id)?;
            match page::search(&p[..], start) {
                Ok(i) | Err(i) => i,
            }
        };
        let per = self.clock.costs.scan_entry;
        loop {
            let p = self.frame(id)?;
            let n = page::count(&p[..]);
            for i in from..n {
                if out.len() >= limit {
                    break;
                }
                out.push((
                    page::key(&p[..], i).to_vec(),
                    page::value(&p[..], i).to_vec(),
                ));
            }
            let next = page::next(&p[..]);
            if out.len() >= limit || next == NO_PAGE {
                break;
            }
            id = next;
            from = 0;
            self.fetch(id, &mut t)?;
        }
        self.clock
            .charge(Work::User, per * out.len() as u64, &mut t);
        self.end_op(t)?;
        Ok(out)
    }

    /// Remove every key (FLUSHALL): a new empty tree whose pages reuse the ids from 1 on,
    /// and the old tree's pages given back to the storage.
    ///
    /// Order, for crash safety: every earlier change is made durable first; the new root
    /// and the superpage naming it go out in one sealed buffer (all-or-nothing: after a
    /// cut the store holds either the old tree or the empty one); only then are the old
    /// pages released: unmapped from the host log (block; they become garbage for host
    /// GC, and the log is checkpointed without them) or trimmed on the device (batch; its
    /// GC reclaims them). A cut between the two leaves old pages allocated until the next
    /// open (block: a roll-forward drops every id at or past the superpage's next id) or
    /// the next clear (batch). Returns the number of old pages released.
    pub fn clear(&mut self) -> Result<u64, KvError> {
        self.sync()?;
        self.cache.clear();
        let old_next = self.sup.next_id;
        let t = self.begin_op();
        self.modifying = true;
        let r: Result<(), KvError> = (|| {
            self.sup.next_id = 1;
            let id = self.alloc_id()?;
            let mut root = page::blank();
            page::init(&mut root, id, Kind::Leaf, 0);
            self.install(id, root, t)?;
            self.pin(id, -1);
            self.sup.root = id;
            self.sup.height = 1;
            self.fetch(0, &mut t.clone())?;
            let sup = self.sup;
            page::put_super(self.frame(0)?, &sup);
            self.lsn += 1;
            let lsn = self.lsn;
            for p in [id, 0] {
                self.mark_dirty(p, lsn, t);
                if self.cfg.persist {
                    self.buf.add(p, None);
                }
            }
            Ok(())
        })();
        self.modifying = false;
        r?;
        self.end_op(t)?;
        if !self.cfg.persist {
            return Ok(old_next.saturating_sub(2));
        }
        self.sync()?;
        let first = self.sup.next_id;
        let released = match &mut self.log {
            Some(log) => {
                let n = log.forget_from(first);
                self.checkpoint()?;
                n
            }
            None => {
                let n = old_next.saturating_sub(first);
                if n > 0 {
                    let mut io = Io {
                        dev: &mut self.dev,
                        clock: &mut self.clock,
                        stats: &mut self.io,
                    };
                    let at = io.clock.cpu;
                    io.submit(
                        Work::User,
                        Command::Trim {
                            lba: first,
                            blocks: n,
                        },
                        at,
                    )?;
                    self.wait_drained();
                }
                n
            }
        };
        Ok(released)
    }

    /// Number of keys (walks every leaf).
    pub fn len(&mut self) -> Result<u64, KvError> {
        let mut n = 0u64;
        let mut t = self.clock.cpu;
        let mut id = self.sup.root;
        loop {
            self.fetch(id, &mut t)?;
            let p = self.frame(id)?;
            match page::kind(&p[..]) {
                Some(Kind::Inner) => id = page::child(&p[..], 0),
                _ => break,
            }
        }
        loop {
            self.fetch(id, &mut t)?;
            let p = self.frame(id)?;
            n += page::count(&p[..]) as u64;
            let next = page::next(&p[..]);
            if next == NO_PAGE {
                break;
            }
            id = next;
        }
        Ok(n)
    }

    /// Is the store empty?
    pub fn is_empty(&mut self) -> Result<bool, KvError> {
        Ok(self.len()? == 0)
    }
}

//! The store's fixed-size 4 KiB pages (batch-io §8.1.2: "We configured the BwTree page
//! size to 4KB"; pages are updated in place, without delta chains).
//!
//! Layout (little-endian), one slotted page per tree node:
//! * header, [`HEADER`] bytes: magic `KVPG` (u32), kind (u8: leaf, inner, super), level
//!   (u8, 0 = leaf), slot count (u16), heap start (u16), dead heap bytes (u16), CRC-32C of
//!   the page with this field zero (u32), page id (u64), write sequence (u64: the chunk or
//!   batch that wrote this version), right sibling (u64, leaves; [`NO_PAGE`] if none);
//! * a sorted slot array of u16 offsets right after the header;
//! * entries (key length u16, value length u16, key, value) growing down from the end.
//!
//! Inner pages store (separator key, child page id as 8 value bytes); slot 0 has the
//! empty key and covers everything below slot 1. The superpage (page 0) holds the root,
//! the next page id to allocate, the tree height and which interface formatted it.
//!
//! Choices: keys compare as bytes; an update of a value of the same length overwrites it
//! in place (the YCSB case); otherwise the old entry becomes dead heap space, reclaimed by
//! compaction when a page runs out of room. The CRC and write sequence let recovery tell
//! a page written completely by a given chunk from a stale or torn one.

/// Bytes per page (one LBA / LPID of every preset).
pub const PAGE: usize = 4096;
/// Bytes of the page header.
pub const HEADER: usize = 40;
/// "No page" (an absent sibling or mapping).
pub const NO_PAGE: u64 = u64::MAX;
/// Largest key the store accepts.
pub const MAX_KEY: usize = 512;
/// Largest value the store accepts.
pub const MAX_VALUE: usize = 1024;

const MAGIC: u32 = u32::from_le_bytes(*b"KVPG");
const ENTRY_HDR: usize = 4;

/// What a page is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A leaf: keys and values.
    Leaf = 1,
    /// An inner node: separator keys and child page ids.
    Inner = 2,
    /// The superpage (page 0).
    Super = 3,
}

/// A page image.
pub type Page = Box<[u8; PAGE]>;

/// A zeroed page.
pub fn blank() -> Page {
    Box::new([0u8; PAGE])
}

fn u16_at(p: &[u8], o: usize) -> usize {
    u16::from_le_bytes([p[o], p[o + 1]]) as usize
}
fn set_u16(p: &mut [u8], o: usize, v: usize) {
    p[o..o + 2].copy_from_slice(&(v as u16).to_le_bytes());
}
fn u64_at(p: &[u8], o: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&p[o..o + 8]);
    u64::from_le_bytes(b)
}
fn set_u64(p: &mut [u8], o: usize, v: u64) {
    p[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// Initialize `p` as an empty page of `kind` at `level`.
pub fn init(p: &mut [u8; PAGE], id: u64, kind: Kind, level: u8) {
    p.fill(0);
    p[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    p[4] = kind as u8;
    p[5] = level;
    set_u16(p, 6, 0);
    set_u16(p, 8, PAGE);
    set_u16(p, 10, 0);
    set_u64(p, 16, id);
    set_u64(p, 24, 0);
    set_u64(p, 32, NO_PAGE);
}

/// The page's kind, or `None` if it is not a store page (never written, torn, foreign).
pub fn kind(p: &[u8]) -> Option<Kind> {
    if p.len() < PAGE || u32::from_le_bytes([p[0], p[1], p[2], p[3]]) != MAGIC {
        return None;
    }
    match p[4] {
        1 => Some(Kind::Leaf),
        2 => Some(Kind::Inner),
        3 => Some(Kind::Super),
        _ => None,
    }
}

/// Tree level (0 = leaf).
pub fn level(p: &[u8]) -> u8 {
    p[5]
}
/// Slot count.
pub fn count(p: &[u8]) -> usize {
    u16_at(p, 6)
}
/// The page id written in the header.
pub fn id(p: &[u8]) -> u64 {
    u64_at(p, 16)
}
/// The write sequence stamped when the page was last sealed.
pub fn seq(p: &[u8]) -> u64 {
    u64_at(p, 24)
}
/// Right sibling of a leaf.
pub fn next(p: &[u8]) -> u64 {
    u64_at(p, 32)
}
/// Set the right sibling of a leaf.
pub fn set_next(p: &mut [u8], n: u64) {
    set_u64(p, 32, n)
}

/// Stamp the write sequence and the CRC (done when the page is sealed for writing).
pub fn seal(p: &mut [u8], seq: u64) {
    set_u64(p, 24, seq);
    p[12..16].fill(0);
    let crc = crc32c::crc32c(&p[..PAGE]);
    p[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Does the page's CRC match its contents?
pub fn crc_ok(p: &[u8]) -> bool {
    if p.len() < PAGE {
        return false;
    }
    let stored = u32::from_le_bytes([p[12], p[13], p[14], p[15]]);
    let mut c = crc32c::crc32c(&p[..12]);
    c = crc32c::crc32c_append(c, &[0u8; 4]);
    c = crc32c::crc32c_append(c, &p[16..PAGE]);
    c == stored
}

/// Is `p` a complete, intact store page with id `id` written by sequence `seq`?
pub fn valid(p: &[u8], id_: u64, seq_: u64) -> bool {
    kind(p).is_some() && id(p) == id_ && seq(p) == seq_ && crc_ok(p)
}

/// Is `p` structurally sound (header fields within the page, entries inside it)? Checked
/// on every page read from the device before the tree trusts it.
pub fn sane(p: &[u8]) -> bool {
    if kind(p).is_none() {
        return false;
    }
    let n = count(p);
    let heap = u16_at(p, 8);
    if HEADER + 2 * n > heap || heap > PAGE {
        return false;
    }
    (0..n).all(|i| {
        let o = slot(p, i);
        o >= heap
            && o + ENTRY_HDR <= PAGE
            && o + ENTRY_HDR + u16_at(p, o) + u16_at(p, o + 2) <= PAGE
    })
}

fn slot(p: &[u8], i: usize) -> usize {
    u16_at(p, HEADER + 2 * i)
}

/// Key of slot `i`.
pub fn key(p: &[u8], i: usize) -> &[u8] {
    let o = slot(p, i);
    let kl = u16_at(p, o);
    &p[o + ENTRY_HDR..o + ENTRY_HDR + kl]
}

/// Value of slot `i`.
pub fn value(p: &[u8], i: usize) -> &[u8] {
    let o = slot(p, i);
    let kl = u16_at(p, o);
    let vl = u16_at(p, o + 2);
    &p[o + ENTRY_HDR + kl..o + ENTRY_HDR + kl + vl]
}

/// Child page id of inner slot `i`.
pub fn child(p: &[u8], i: usize) -> u64 {
    let v = value(p, i);
    let mut b = [0u8; 8];
    b.copy_from_slice(&v[..8]);
    u64::from_le_bytes(b)
}

/// Binary search: `Ok(slot)` if `k` is present, else `Err(insertion slot)`.
pub fn search(p: &[u8], k: &[u8]) -> Result<usize, usize> {
    let (mut lo, mut hi) = (0, count(p));
    while lo < hi {
        let mid = (lo + hi) / 2;
        match key(p, mid).cmp(k) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

/// The inner slot whose subtree holds `k` (the last separator <= `k`).
pub fn child_slot(p: &[u8], k: &[u8]) -> usize {
    match search(p, k) {
        Ok(i) => i,
        Err(i) => i.saturating_sub(1),
    }
}

fn free_space(p: &[u8]) -> usize {
    u16_at(p, 8) - (HEADER + 2 * count(p))
}

fn dead(p: &[u8]) -> usize {
    u16_at(p, 10)
}

/// Bytes an entry takes (slot included).
pub fn entry_bytes(k: usize, v: usize) -> usize {
    2 + ENTRY_HDR + k + v
}

/// Bytes the entries of a page take (slots included), compacted.
pub fn used_bytes(p: &[u8]) -> usize {
    (0..count(p))
        .map(|i| entry_bytes(key(p, i).len(), value(p, i).len()))
        .sum()
}

/// Room for entries in an empty page.
pub const CAPACITY: usize = PAGE - HEADER;

/// Rewrite the heap without dead entries.
fn compact(p: &mut [u8; PAGE]) {
    let n = count(p);
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
        .map(|i| (key(p, i).to_vec(), value(p, i).to_vec()))
        .collect();
    let mut heap = PAGE;
    for (i, (k, v)) in entries.iter().enumerate() {
        heap -= ENTRY_HDR + k.len() + v.len();
        write_entry(p, heap, k, v);
        set_u16(p, HEADER + 2 * i, heap);
    }
    set_u16(p, 8, heap);
    set_u16(p, 10, 0);
}

fn write_entry(p: &mut [u8], o: usize, k: &[u8], v: &[u8]) {
    set_u16(p, o, k.len());
    set_u16(p, o + 2, v.len());
    p[o + ENTRY_HDR..o + ENTRY_HDR + k.len()].copy_from_slice(k);
    p[o + ENTRY_HDR + k.len()..o + ENTRY_HDR + k.len() + v.len()].copy_from_slice(v);
}

/// Insert or replace `k` → `v`. Returns `false` (page unchanged) if it does not fit.
pub fn upsert(p: &mut [u8; PAGE], k: &[u8], v: &[u8]) -> bool {
    match search(p, k) {
        Ok(i) => {
            let o = slot(p, i);
            let old_v = u16_at(p, o + 2);
            if old_v == v.len() {
                let s = o + ENTRY_HDR + k.len();
                p[s..s + v.len()].copy_from_slice(v);
                return true;
            }
            let need = ENTRY_HDR + k.len() + v.len();
            let old = ENTRY_HDR + k.len() + old_v;
            if free_space(p) < need {
                if free_space(p) + dead(p) + old < need {
                    return false;
                }
                // Drop the old entry, compact, then append.
                let d = dead(p) + old;
                set_u16(p, 10, d);
                remove_slot(p, i);
                compact(p);
                insert_at(p, i, k, v);
                return true;
            }
            let heap = u16_at(p, 8) - need;
            write_entry(p, heap, k, v);
            set_u16(p, 8, heap);
            set_u16(p, HEADER + 2 * i, heap);
            let d = dead(p) + old;
            set_u16(p, 10, d);
            true
        }
        Err(i) => {
            let need = 2 + ENTRY_HDR + k.len() + v.len();
            if free_space(p) < need {
                if free_space(p) + dead(p) < need {
                    return false;
                }
                compact(p);
            }
            insert_at(p, i, k, v);
            true
        }
    }
}

/// Insert an entry at slot `i` (room checked by the caller).
fn insert_at(p: &mut [u8; PAGE], i: usize, k: &[u8], v: &[u8]) {
    let n = count(p);
    let heap = u16_at(p, 8) - (ENTRY_HDR + k.len() + v.len());
    write_entry(p, heap, k, v);
    set_u16(p, 8, heap);
    let s = HEADER + 2 * i;
    p.copy_within(s..HEADER + 2 * n, s + 2);
    set_u16(p, s, heap);
    set_u16(p, 6, n + 1);
}

fn remove_slot(p: &mut [u8], i: usize) {
    let n = count(p);
    let s = HEADER + 2 * i;
    p.copy_within(s + 2..HEADER + 2 * n, s);
    set_u16(p, 6, n - 1);
}

/// Remove `k`; returns whether it was there.
pub fn remove(p: &mut [u8; PAGE], k: &[u8]) -> bool {
    match search(p, k) {
        Ok(i) => {
            let o = slot(p, i);
            let len = ENTRY_HDR + u16_at(p, o) + u16_at(p, o + 2);
            let d = dead(p) + len;
            set_u16(p, 10, d);
            remove_slot(p, i);
            true
        }
        Err(_) => false,
    }
}

/// Move the upper half (by bytes) of `left`'s entries into the empty page `right`;
/// returns the first key of `right` (the separator).
pub fn split_into(left: &mut [u8; PAGE], right: &mut [u8; PAGE]) -> Vec<u8> {
    let n = count(left);
    let total = used_bytes(left);
    let mut acc = 0;
    let mut cut = n / 2;
    for i in 0..n {
        acc += entry_bytes(key(left, i).len(), value(left, i).len());
        if acc * 2 >= total {
            cut = (i + 1).clamp(1, n - 1);
            break;
        }
    }
    for i in cut..n {
        let (k, v) = (key(left, i).to_vec(), value(left, i).to_vec());
        let at = count(right);
        insert_at(right, at, &k, &v);
    }
    for i in (cut..n).rev() {
        let o = slot(left, i);
        let len = ENTRY_HDR + u16_at(left, o) + u16_at(left, o + 2);
        let d = dead(left) + len;
        set_u16(left, 10, d);
        remove_slot(left, i);
    }
    compact(left);
    key(right, 0).to_vec()
}

/// Superpage fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Super {
    /// Which interface formatted the store (see [`crate::Interface`] tags).
    pub interface: u8,
    /// Root page id.
    pub root: u64,
    /// Next page id to allocate.
    pub next_id: u64,
    /// Levels of the tree (1 = a single leaf).
    pub height: u8,
}

/// Write `s` into the superpage `p` (page id 0).
pub fn put_super(p: &mut [u8; PAGE], s: &Super) {
    init(p, 0, Kind::Super, 0);
    p[HEADER] = s.interface;
    p[HEADER + 1] = s.height;
    set_u64(p, HEADER + 8, s.root);
    set_u64(p, HEADER + 16, s.next_id);
}

/// Read the superpage fields, if `p` is one.
pub fn get_super(p: &[u8]) -> Option<Super> {
    (kind(p) == Some(Kind::Super)).then(|| Super {
        interface: p[HEADER],
        height: p[HEADER + 1],
        root: u64_at(p, HEADER + 8),
        next_id: u64_at(p, HEADER + 16),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf() -> Page {
        let mut p = blank();
        init(&mut p, 7, Kind::Leaf, 0);
        p
    }

    #[test]
    fn upsert_search_remove_compact() {
        let mut p = leaf();
        for i in (0..40u32).rev() {
            assert!(upsert(&mut p, &i.to_be_bytes(), &[i as u8; 50]));
        }
        assert_eq!(count(&p[..]), 40);
        assert!(sane(&p[..]));
        for i in 0..40u32 {
            let s = search(&p[..], &i.to_be_bytes()).unwrap();
            assert_eq!(value(&p[..], s), &[i as u8; 50]);
        }
        // Same-length update in place, other lengths through dead space.
        assert!(upsert(&mut p, &3u32.to_be_bytes(), &[9; 50]));
        assert!(upsert(&mut p, &4u32.to_be_bytes(), &[8; 70]));
        assert!(remove(&mut p, &5u32.to_be_bytes()));
        assert!(!remove(&mut p, &5u32.to_be_bytes()));
        assert_eq!(
            value(&p[..], search(&p[..], &4u32.to_be_bytes()).unwrap()),
            &[8; 70]
        );
        // Fill until full; compaction reclaims dead bytes first.
        let mut i = 100u32;
        while upsert(&mut p, &i.to_be_bytes(), &[1; 50]) {
            i += 1;
        }
        assert!(used_bytes(&p[..]) + 58 > CAPACITY);
        let mut r = blank();
        init(&mut r, 8, Kind::Leaf, 0);
        let sep = split_into(&mut p, &mut r);
        assert_eq!(sep, key(&r[..], 0));
        assert!(key(&p[..], count(&p[..]) - 1) < &sep[..]);
        assert!(sane(&p[..]) && sane(&r[..]));
        seal(&mut r[..], 5);
        assert!(valid(&r[..], 8, 5));
        r[100] ^= 1;
        assert!(!crc_ok(&r[..]));
    }

    #[test]
    fn superpage_roundtrip() {
        let mut p = blank();
        let s = Super {
            interface: 2,
            root: 3,
            next_id: 9,
            height: 2,
        };
        put_super(&mut p, &s);
        assert_eq!(get_super(&p[..]), Some(s));
        assert_eq!(get_super(&leaf()[..]), None);
    }
}

//! The commands on keys of the Redis-protocol server in front of the batch-io paper's
//! store (§8.1.2): SET (NX / XX / GET), DEL, EXISTS, MGET, MSET, SCAN and KEYS (GET is
//! one line of the dispatcher), the SCAN cursor table and Redis's glob matching.
//!
//! Choices: writes check every key and value before changing anything (MSET goes through
//! [`Store::put_all`], all or nothing); SCAN cursors are numbers naming the key a scan
//! resumes at (the last [`MAX_CURSORS`] scans; ids start at a base from the clock so a
//! cursor of an earlier server run is refused); COUNT counts the keys visited and MATCH
//! filters after, as in Redis.

use super::{MAX_CURSORS, Server, int_arg, key_ok, lock, syntax, text, value_ok};
use crate::resp::Reply;
use crate::{KvError, Store};
use csd_host::CommandIssuer;
use std::collections::{HashMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

/// The keys SCANs resume at, by cursor id (the newest [`MAX_CURSORS`]).
pub(super) struct Cursors {
    next: u64,
    keys: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

impl Cursors {
    /// An empty table whose ids start at a base from the clock.
    pub(super) fn new() -> Cursors {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_secs());
        Cursors {
            next: ((secs & 0x7fff_ffff) << 24).max(1),
            keys: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn remember(&mut self, key: Vec<u8>) -> u64 {
        let id = self.next;
        self.next += 1;
        self.keys.insert(id, key);
        self.order.push_back(id);
        while self.order.len() > MAX_CURSORS {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
        id
    }
}

/// Redis-style glob match: `*`, `?`, `[abc]`, `[a-z]`, `[^a]`, `\x`.
pub fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    // One character class or literal at `p`: does it match `c`, and where does it end?
    fn one(pat: &[u8], mut p: usize, c: u8) -> (bool, usize) {
        match pat[p] {
            b'?' => (true, p + 1),
            b'\\' if p + 1 < pat.len() => (pat[p + 1] == c, p + 2),
            b'[' => {
                p += 1;
                let neg = p < pat.len() && pat[p] == b'^';
                if neg {
                    p += 1;
                }
                let mut hit = false;
                let mut first = true;
                while p < pat.len() && (pat[p] != b']' || first) {
                    first = false;
                    if pat[p] == b'\\' && p + 1 < pat.len() {
                        hit |= pat[p + 1] == c;
                        p += 2;
                    } else if p + 2 < pat.len() && pat[p + 1] == b'-' && pat[p + 2] != b']' {
                        let (a, b) = (pat[p].min(pat[p + 2]), pat[p].max(pat[p + 2]));
                        hit |= (a..=b).contains(&c);
                        p += 3;
                    } else {
                        hit |= pat[p] == c;
                        p += 1;
                    }
                }
                (hit != neg, (p + 1).min(pat.len()))
            }
            l => (l == c, p + 1),
        }
    }
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            p += 1;
            star = Some((p, i));
            continue;
        }
        if p < pattern.len() {
            let (hit, np) = one(pattern, p, s[i]);
            if hit {
                p = np;
                i += 1;
                continue;
            }
        }
        match star {
            Some((sp, si)) => {
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

impl<I: CommandIssuer> Server<I> {
    pub(super) fn set(&self, st: &mut Store<I>, a: &[Vec<u8>]) -> (Reply, bool) {
        let (k, v) = (&a[0], &a[1]);
        let (mut nx, mut xx, mut get) = (false, false, false);
        for o in &a[2..] {
            match text(o).to_ascii_uppercase().as_str() {
                "NX" => nx = true,
                "XX" => xx = true,
                "GET" => get = true,
                e @ ("EX" | "PX" | "EXAT" | "PXAT" | "KEEPTTL") => {
                    return (
                        Reply::err(format!(
                            "SET {e}: keys do not expire in this store (no TTLs)"
                        )),
                        false,
                    );
                }
                _ => return (syntax(), false),
            }
        }
        if nx && xx {
            return (syntax(), false);
        }
        if let Err(e) = key_ok(k).and_then(|_| value_ok(v)) {
            return (Reply::err(e), false);
        }
        let old = if nx || xx || get {
            match st.get(k) {
                Ok(o) => o,
                Err(e) => return (Reply::err(e), false),
            }
        } else {
            None
        };
        let skip = (nx && old.is_some()) || (xx && old.is_none());
        let done = if skip {
            Reply::Nil
        } else {
            match st.put(k, v) {
                Ok(_) => Reply::ok(),
                Err(e) => return (Reply::err(e), true),
            }
        };
        let r = if get {
            old.map_or(Reply::Nil, Reply::Bulk)
        } else {
            done
        };
        (r, !skip)
    }

    pub(super) fn del(&self, st: &mut Store<I>, keys: &[Vec<u8>]) -> Result<Reply, KvError> {
        for k in keys {
            key_ok(k)?;
        }
        let mut n = 0;
        for k in keys {
            n += st.delete(k)? as i64;
        }
        Ok(Reply::Int(n))
    }

    pub(super) fn exists(&self, st: &mut Store<I>, keys: &[Vec<u8>]) -> Result<Reply, KvError> {
        let mut n = 0;
        for k in keys {
            n += st.contains(k)? as i64;
        }
        Ok(Reply::Int(n))
    }

    pub(super) fn mget(&self, st: &mut Store<I>, keys: &[Vec<u8>]) -> Result<Reply, KvError> {
        let mut v = Vec::with_capacity(keys.len());
        for k in keys {
            // An impossible key cannot exist: nil, as Redis answers for a missing key.
            v.push(match key_ok(k) {
                Ok(()) => st.get(k)?.map_or(Reply::Nil, Reply::Bulk),
                Err(_) => Reply::Nil,
            });
        }
        Ok(Reply::Array(v))
    }

    pub(super) fn mset(&self, st: &mut Store<I>, a: &[Vec<u8>]) -> Result<Reply, KvError> {
        for p in a.chunks(2) {
            key_ok(&p[0])?;
            value_ok(&p[1])?;
        }
        let pairs: Vec<(&[u8], &[u8])> = a
            .chunks(2)
            .map(|p| (p[0].as_slice(), p[1].as_slice()))
            .collect();
        st.put_all(&pairs)?;
        Ok(Reply::ok())
    }

    pub(super) fn scan(&self, st: &mut Store<I>, a: &[Vec<u8>]) -> Reply {
        let cursor = match std::str::from_utf8(&a[0])
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            Some(c) => c,
            None => return Reply::err("invalid cursor"),
        };
        let (mut pattern, mut count) = (None, 10usize);
        let mut i = 1;
        while i < a.len() {
            let opt = text(&a[i]).to_ascii_uppercase();
            let Some(val) = a.get(i + 1) else {
                return syntax();
            };
            match opt.as_str() {
                "MATCH" => pattern = Some(val.clone()),
                "COUNT" => match int_arg(val) {
                    Ok(n) if n >= 1 => count = (n as usize).min(100_000),
                    Ok(_) => return syntax(),
                    Err(r) => return r,
                },
                "TYPE" => {
                    if !text(val).eq_ignore_ascii_case("string") {
                        return Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![])]);
                    }
                }
                _ => return syntax(),
            }
            i += 2;
        }
        let start = if cursor == 0 {
            Vec::new()
        } else {
            match lock(&self.cursors).keys.get(&cursor) {
                Some(k) => k.clone(),
                None => {
                    return Reply::err(format!(
                        "invalid cursor {cursor}: unknown or expired (the server keeps the \
                         last {MAX_CURSORS} scans); start again with SCAN 0"
                    ));
                }
            }
        };
        let mut got = match st.scan(&start, count + 1) {
            Ok(g) => g,
            Err(e) => return Reply::err(e),
        };
        let next = if got.len() > count {
            let resume = got.swap_remove(count).0;
            got.truncate(count);
            lock(&self.cursors).remember(resume)
        } else {
            0
        };
        let keys = got
            .into_iter()
            .filter(|(k, _)| pattern.as_ref().is_none_or(|p| glob_match(p, k)))
            .map(|(k, _)| Reply::Bulk(k))
            .collect();
        Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(keys)])
    }

    pub(super) fn keys(&self, st: &mut Store<I>, pattern: &[u8]) -> Result<Reply, KvError> {
        let mut out = Vec::new();
        let mut start = Vec::new();
        loop {
            let got = st.scan(&start, 1025)?;
            let more = got.len() > 1024;
            for (k, _) in got.iter().take(1024) {
                if glob_match(pattern, k) {
                    out.push(Reply::Bulk(k.clone()));
                }
            }
            if !more {
                return Ok(Reply::Array(out));
            }
            start = got[1024].0.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{b, err_has, run, server};
    use super::*;
    use crate::Interface;

    #[test]
    fn scan_walks_every_key_once_with_numeric_cursors() {
        let srv = server(Interface::Batch);
        let s = &mut srv.session();
        let mut want = Vec::new();
        for i in 0..137 {
            let k = format!("k{i:04}");
            run(&srv, s, &["SET", &k, "v"]);
            want.push(k);
        }
        let mut got = Vec::new();
        let mut cursor = "0".to_string();
        let mut rounds = 0;
        loop {
            rounds += 1;
            let r = run(&srv, s, &["SCAN", &cursor, "COUNT", "20"]);
            let Reply::Array(v) = r else {
                panic!("not an array")
            };
            let Reply::Bulk(c) = &v[0] else { panic!() };
            let Reply::Array(keys) = &v[1] else { panic!() };
            for k in keys {
                let Reply::Bulk(k) = k else { panic!() };
                got.push(String::from_utf8(k.clone()).unwrap());
            }
            cursor = String::from_utf8(c.clone()).unwrap();
            assert!(cursor.parse::<u64>().is_ok());
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(got, want);
        assert_eq!(rounds, 7);
        // MATCH filters the visited keys.
        let r = run(
            &srv,
            s,
            &["SCAN", "0", "MATCH", "k00[1-2]?", "COUNT", "1000"],
        );
        let Reply::Array(v) = r else { panic!() };
        assert_eq!(v[0], b("0"));
        let Reply::Array(keys) = &v[1] else { panic!() };
        assert_eq!(keys.len(), 20);
        let Reply::Array(all) = run(&srv, s, &["KEYS", "*"]) else {
            panic!()
        };
        assert_eq!(all.len(), 137);
        err_has(&run(&srv, s, &["SCAN", "12345"]), "invalid cursor");
        err_has(&run(&srv, s, &["SCAN", "x"]), "invalid cursor");
        err_has(&run(&srv, s, &["SCAN", "0", "COUNT", "0"]), "syntax");
        err_has(&run(&srv, s, &["SCAN", "0", "COUNT"]), "syntax");
        err_has(&run(&srv, s, &["SCAN", "0", "COUNT", "x"]), "integer");
    }

    #[test]
    fn glob_matches_like_redis() {
        let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes());
        assert!(m("*", ""));
        assert!(m("*", "abc"));
        assert!(m("a*c", "abbbc"));
        assert!(!m("a*c", "abbb"));
        assert!(m("h?llo", "hello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("*a*b*", "xxaxxbxx"));
        assert!(!m("abc", "abcd"));
    }
}

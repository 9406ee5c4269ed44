//! What Redis clients send when they start, and INFO, for the Redis-protocol server in
//! front of the batch-io paper's store (§8.1.2): HELLO 2, CONFIG GET / RESETSTAT, COMMAND,
//! CLIENT, and INFO's sections (server, clients, stats, keyspace, the store's figures, the
//! device's SMART figures and Table 4's amplifications, host and device GC together).
//!
//! Choices: INFO's "since start" figures subtract the store's counters and the device's
//! SMART log taken when the server was made; each section is one function writing
//! `key:value` lines, and the `# Name:` header lines are tidied into Redis's layout at the
//! end ([`tidy_headers`]). COMMAND DOCS / INFO answer an empty array (clients only need a
//! well-formed reply); CONFIG SET is refused with the fix (restart with other options).

use super::{COMMANDS, Server, ServerStats, Session, glob_match, int_arg, syntax, text};
use crate::resp::Reply;
use crate::{KvError, Store, StoreStats};
use csd_host::CommandIssuer;
use std::sync::atomic::Ordering;

/// INFO's text, one `key:value\r\n` line at a time.
#[derive(Default)]
struct InfoText(String);

impl InfoText {
    fn line(&mut self, k: &str, v: String) {
        self.0.push_str(k);
        self.0.push(':');
        self.0.push_str(&v);
        self.0.push_str("\r\n");
    }

    /// A section header (`# Name:`, tidied by [`tidy_headers`]).
    fn header(&mut self, name: &str) {
        self.line(name, String::new());
    }
}

impl<I: CommandIssuer> Server<I> {
    pub(super) fn hello(&self, a: &[Vec<u8>], s: &mut Session) -> Reply {
        let mut i = 0;
        if let Some(v) = a.first() {
            match int_arg(v) {
                Ok(2) => i = 1,
                Ok(_) => {
                    return Reply::Error(
                        "NOPROTO unsupported protocol version: this server speaks RESP2".into(),
                    );
                }
                Err(r) => return r,
            }
        }
        while i < a.len() {
            match text(&a[i]).to_ascii_uppercase().as_str() {
                "AUTH" if i + 2 < a.len() => i += 3,
                "SETNAME" if i + 1 < a.len() => {
                    s.name = Some(a[i + 1].clone());
                    i += 2;
                }
                _ => return syntax(),
            }
        }
        Reply::Array(vec![
            Reply::bulk("server"),
            Reply::bulk("csd-kv"),
            Reply::bulk("version"),
            Reply::bulk(env!("CARGO_PKG_VERSION")),
            Reply::bulk("proto"),
            Reply::Int(2),
            Reply::bulk("id"),
            Reply::Int(s.id as i64),
            Reply::bulk("mode"),
            Reply::bulk("standalone"),
            Reply::bulk("role"),
            Reply::bulk("master"),
            Reply::bulk("modules"),
            Reply::Array(vec![]),
        ])
    }

    pub(super) fn config(&self, st: &mut Store<I>, a: &[Vec<u8>]) -> Reply {
        let sub = text(&a[0]).to_ascii_uppercase();
        match sub.as_str() {
            "GET" if a.len() >= 2 => {
                let known = [("save", ""), ("appendonly", "no"), ("databases", "1")];
                let mut out = Vec::new();
                for (k, v) in known {
                    if a[1..]
                        .iter()
                        .any(|p| glob_match(&p.to_ascii_lowercase(), k.as_bytes()))
                    {
                        out.push(Reply::bulk(k));
                        out.push(Reply::bulk(v));
                    }
                }
                Reply::Array(out)
            }
            "RESETSTAT" => {
                st.reset_stats();
                for c in [
                    &self.counters.commands,
                    &self.counters.errors,
                    &self.counters.protocol_errors,
                    &self.counters.syncs,
                ] {
                    c.store(0, Ordering::Relaxed);
                }
                Reply::ok()
            }
            "SET" => {
                Reply::err("CONFIG SET is not supported: restart `csd kv serve` with other options")
            }
            _ => Reply::err(format!(
                "unknown subcommand or wrong number of arguments for 'config|{}'",
                sub.to_ascii_lowercase()
            )),
        }
    }

    /// INFO [section ...]: the sections asked for (all when none, `all`, `default` or
    /// `everything`).
    pub(super) fn info(&self, st: &mut Store<I>, a: &[Vec<u8>]) -> Reply {
        let want: Vec<String> = a.iter().map(|x| text(x).to_ascii_lowercase()).collect();
        let all = want.is_empty()
            || want
                .iter()
                .any(|w| matches!(w.as_str(), "all" | "default" | "everything"));
        let show = |sec: &str| all || want.iter().any(|w| w == sec);
        let mut out = InfoText::default();
        let sv = self.stats();
        if show("server") {
            self.info_server(st, &mut out);
        }
        if show("clients") {
            out.header("# Clients");
            out.line("connected_clients", sv.connections_open.to_string());
        }
        if show("stats") {
            info_stats(&sv, &mut out);
        }
        // Counted (and the store's figures taken) whichever sections are shown, in this
        // order: counting reads pages, which the cache figures then include.
        let keys = st.len();
        if show("keyspace") {
            out.header("# Keyspace");
            if let Ok(n) = &keys
                && *n > 0
            {
                out.line("db0", format!("keys={n},expires=0,avg_ttl=0"));
            }
        }
        let s = st.stats();
        if show("store") {
            info_store(st, &s, &keys, &mut out);
        }
        if show("device") {
            self.info_device(st, &s, &mut out);
        }
        Reply::Bulk(tidy_headers(&out.0).into_bytes())
    }

    fn info_server(&self, st: &Store<I>, out: &mut InfoText) {
        out.header("# Server");
        out.line("server", "csd-kv".into());
        out.line("csd_version", env!("CARGO_PKG_VERSION").into());
        out.line("redis_mode", "standalone".into());
        out.line("interface", st.config().interface.name().into());
        out.line(
            "uptime_in_seconds",
            self.started.elapsed().as_secs().to_string(),
        );
    }

    /// The device's SMART figures, and Table 4 of the paper (host and device GC
    /// together) since the server was made.
    fn info_device(&self, st: &mut Store<I>, s: &StoreStats, out: &mut InfoText) {
        out.header("# Device");
        let d = match st.smart() {
            Ok(d) => d,
            Err(e) => return out.line("device_error", e.to_string()),
        };
        out.line("device_host_read_bytes", d.host_read_bytes.to_string());
        out.line(
            "device_host_written_bytes",
            d.host_written_bytes.to_string(),
        );
        out.line("device_gc_read_bytes", d.gc_read_bytes.to_string());
        out.line("device_gc_written_bytes", d.gc_written_bytes.to_string());
        out.line("device_reclaimed_bytes", d.reclaimed_bytes.to_string());
        out.line(
            "device_read_amplification",
            format!("{:.4}", d.read_amplification),
        );
        out.line(
            "device_write_amplification",
            format!("{:.4}", d.write_amplification),
        );
        out.line("device_gc_overhead", format!("{:.4}", d.gc_overhead));
        out.line(
            "device_physical_write_amplification",
            format!("{:.4}", d.physical_write_amplification),
        );
        out.line("device_checkpoints", d.checkpoints.to_string());
        out.line("device_free_blocks", d.free_blocks.to_string());
        out.line("device_media_errors", d.media_errors.to_string());
        self.info_table4(s, &d, out);
    }

    /// Table 4 of the paper, host and device GC together, since start.
    fn info_table4(&self, s: &StoreStats, d: &csd_device::SmartLog, out: &mut InfoText) {
        let z = self.smart0.as_ref();
        let z0 = |f: fn(&csd_device::SmartLog) -> u64| z.map_or(0, f);
        let since = |a: u64, b: u64| a.saturating_sub(b);
        let s0 = &self.stats0;
        let user_read = since(s.io.user_read_bytes, s0.io.user_read_bytes);
        let user_write = since(s.io.user_write_bytes, s0.io.user_write_bytes);
        let gc_read = since(s.io.gc_read_bytes, s0.io.gc_read_bytes)
            + since(d.gc_read_bytes, z0(|x| x.gc_read_bytes));
        let gc_write = since(s.io.gc_write_bytes, s0.io.gc_write_bytes)
            + since(d.gc_written_bytes, z0(|x| x.gc_written_bytes));
        let reclaimed = since(s.io.gc_reclaimed_bytes, s0.io.gc_reclaimed_bytes)
            + since(d.reclaimed_bytes, z0(|x| x.reclaimed_bytes));
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        out.line(
            "read_amplification",
            format!("{:.4}", ratio(user_read + gc_read, user_read)),
        );
        out.line(
            "write_amplification",
            format!("{:.4}", ratio(user_write + gc_write, user_write)),
        );
        out.line(
            "gc_overhead",
            format!("{:.4}", ratio(gc_read + gc_write, reclaimed)),
        );
    }
}

/// INFO's stats section: the server's counters.
fn info_stats(sv: &ServerStats, out: &mut InfoText) {
    out.header("# Stats");
    out.line(
        "total_connections_received",
        sv.connections_total.to_string(),
    );
    out.line("rejected_connections", sv.connections_refused.to_string());
    out.line("total_commands_processed", sv.commands.to_string());
    out.line("total_error_replies", sv.errors.to_string());
    out.line("protocol_errors", sv.protocol_errors.to_string());
    out.line("durability_syncs", sv.syncs.to_string());
    match &sv.event_core {
        Some(k) => {
            out.line("time_model", "events".into());
            out.line("event_core_stages_booked", k.booked.to_string());
            out.line("event_core_late_arrivals", k.late_arrivals.to_string());
            out.line("event_core_unrecorded", k.unrecorded.to_string());
            out.line("event_core_stale", k.stale.to_string());
            out.line(
                "event_core_unfixed_comparisons",
                k.unfixed_comparisons.to_string(),
            );
        }
        None => out.line("time_model", "calendar".into()),
    }
}

/// INFO's store section: the tree, the cache, the operations, host I/O, host GC and
/// checkpoints, modeled time and host CPU.
fn info_store<I: CommandIssuer>(
    st: &mut Store<I>,
    s: &StoreStats,
    keys: &Result<u64, KvError>,
    out: &mut InfoText,
) {
    out.header("# Store");
    out.line(
        "keys",
        keys.as_ref()
            .map_or_else(|e| format!("error: {e}"), |n| n.to_string()),
    );
    out.line("pages", st.pages().to_string());
    out.line("tree_height", st.height().to_string());
    out.line("cache_pages", st.cached_pages().to_string());
    out.line(
        "cache_capacity_pages",
        st.config()
            .cache_pages
            .map_or("unbounded".into(), |c| c.to_string()),
    );
    out.line("dirty_pages", st.dirty_pages().to_string());
    out.line("cache_hits", s.cache_hits.to_string());
    out.line("cache_misses", s.cache_misses.to_string());
    out.line("cache_evictions", s.evictions.to_string());
    out.line("gets", s.gets.to_string());
    out.line("puts", s.puts.to_string());
    out.line("deletes", s.deletes.to_string());
    out.line("scans", s.scans.to_string());
    out.line("splits", s.splits.to_string());
    out.line("acked_change", st.acked().to_string());
    out.line("last_change", st.last_change().to_string());
    info_store_io(st, s, out);
}

/// The I/O, host GC, checkpoint, time and CPU lines of INFO's store section.
fn info_store_io<I: CommandIssuer>(st: &Store<I>, s: &StoreStats, out: &mut InfoText) {
    out.line("seals", s.io.seals.to_string());
    out.line("user_read_bytes", s.io.user_read_bytes.to_string());
    out.line("user_write_bytes", s.io.user_write_bytes.to_string());
    out.line("meta_write_bytes", s.io.meta_write_bytes.to_string());
    out.line("flush_commands", s.io.flush_commands.to_string());
    out.line("host_gc_victims", s.io.gc_victims.to_string());
    out.line("host_gc_pages_moved", s.io.gc_pages_moved.to_string());
    out.line("host_gc_read_bytes", s.io.gc_read_bytes.to_string());
    out.line("host_gc_write_bytes", s.io.gc_write_bytes.to_string());
    out.line(
        "host_gc_reclaimed_bytes",
        s.io.gc_reclaimed_bytes.to_string(),
    );
    out.line("host_checkpoints", s.io.checkpoints.to_string());
    out.line(
        "host_gc_forced_checkpoints",
        s.io.gc_forced_checkpoints.to_string(),
    );
    if let Some((all, free)) = st.host_log_segments() {
        out.line("host_log_segments", all.to_string());
        out.line("host_log_free_segments", free.to_string());
    }
    out.line(
        "modeled_time_s",
        format!("{:.6}", st.now().ns() as f64 / 1e9),
    );
    out.line(
        "host_cpu_modeled_s",
        format!("{:.6}", s.cpu.total_ns() as f64 / 1e9),
    );
    out.line(
        "host_cpu_gc_modeled_s",
        format!("{:.6}", s.cpu.gc_ns as f64 / 1e9),
    );
    out.line(
        "host_cpu_checkpoint_modeled_s",
        format!("{:.6}", s.cpu.checkpoint_ns as f64 / 1e9),
    );
}

/// Turn the `# Name:` lines the builder wrote into `# Name` and separate sections by a
/// blank line, as Redis's INFO does.
fn tidy_headers(s: &str) -> String {
    let mut out = String::new();
    for l in s.split("\r\n").filter(|l| !l.is_empty()) {
        if let Some(h) = l.strip_prefix("# ") {
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            out.push_str("# ");
            out.push_str(h.trim_end_matches(':'));
        } else {
            out.push_str(l);
        }
        out.push_str("\r\n");
    }
    out
}

pub(super) fn command(a: &[Vec<u8>]) -> Reply {
    match a.first().map(|x| text(x).to_ascii_uppercase()).as_deref() {
        None | Some("DOCS") | Some("INFO") => Reply::Array(vec![]),
        Some("COUNT") => Reply::Int(COMMANDS.len() as i64),
        Some("LIST") => Reply::Array(COMMANDS.iter().map(|(n, _)| Reply::bulk(n)).collect()),
        Some(o) => Reply::err(format!(
            "unknown subcommand '{o}'. Try COMMAND COUNT, LIST, DOCS or INFO"
        )),
    }
}

pub(super) fn client(a: &[Vec<u8>], s: &mut Session) -> Reply {
    match text(&a[0]).to_ascii_uppercase().as_str() {
        "SETNAME" if a.len() == 2 => {
            s.name = Some(a[1].clone());
            Reply::ok()
        }
        "GETNAME" => s.name.clone().map_or(Reply::Nil, Reply::Bulk),
        "ID" => Reply::Int(s.id as i64),
        "SETINFO" if a.len() == 3 => Reply::ok(),
        "INFO" => Reply::bulk(format!(
            "id={} name={} db=0\n",
            s.id,
            s.name.as_deref().map(text).unwrap_or_default()
        )),
        o => Reply::err(format!(
            "unknown subcommand or wrong number of arguments for 'client|{}'",
            o.to_ascii_lowercase()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{b, err_has, run, server};
    use super::*;
    use crate::Interface;

    #[test]
    fn start_up_commands_of_redis_tools_are_answered() {
        let srv = server(Interface::Batch);
        let s = &mut srv.session();
        assert_eq!(run(&srv, s, &["COMMAND", "DOCS"]), Reply::Array(vec![]));
        assert_eq!(run(&srv, s, &["COMMAND"]), Reply::Array(vec![]));
        assert_eq!(
            run(&srv, s, &["COMMAND", "COUNT"]),
            Reply::Int(COMMANDS.len() as i64)
        );
        assert_eq!(
            run(&srv, s, &["CONFIG", "GET", "save"]),
            Reply::Array(vec![b("save"), b("")])
        );
        assert_eq!(
            run(&srv, s, &["CONFIG", "GET", "appendonly"]),
            Reply::Array(vec![b("appendonly"), b("no")])
        );
        assert_eq!(
            run(&srv, s, &["CONFIG", "GET", "maxmemory"]),
            Reply::Array(vec![])
        );
        err_has(&run(&srv, s, &["CONFIG", "SET", "a", "b"]), "not supported");
        assert_eq!(run(&srv, s, &["CLIENT", "SETNAME", "me"]), Reply::ok());
        assert_eq!(run(&srv, s, &["CLIENT", "GETNAME"]), b("me"));
        let Reply::Array(h) = run(&srv, s, &["HELLO", "2"]) else {
            panic!()
        };
        assert_eq!(h[5], Reply::Int(2));
        err_has(&run(&srv, s, &["HELLO", "3"]), "NOPROTO");
        assert_eq!(run(&srv, s, &["ECHO", "x"]), b("x"));
        assert_eq!(run(&srv, s, &["QUIT"]), Reply::ok());
        assert!(s.quit);
    }

    #[test]
    fn info_reports_store_and_device_figures() {
        for iface in [Interface::Batch, Interface::Block] {
            let srv = server(iface);
            let s = &mut srv.session();
            for i in 0..300 {
                run(&srv, s, &["SET", &format!("key{i}"), &"x".repeat(100)]);
            }
            let Reply::Bulk(info) = run(&srv, s, &["INFO"]) else {
                panic!()
            };
            let info = String::from_utf8(info).unwrap();
            for k in [
                "# Server\r\n",
                "# Store\r\n",
                "# Device\r\n",
                "keys:300\r\n",
                "db0:keys=300,",
                &format!("interface:{}", iface.name()),
                "pages:",
                "cache_pages:",
                "host_checkpoints:",
                "host_gc_victims:",
                "device_write_amplification:",
                "read_amplification:",
                "gc_overhead:",
                "modeled_time_s:",
            ] {
                assert!(info.contains(k), "INFO lacks {k}:\n{info}");
            }
            assert!(!info.contains("# Server:"));
            let Reply::Bulk(one) = run(&srv, s, &["INFO", "keyspace"]) else {
                panic!()
            };
            let one = String::from_utf8(one).unwrap();
            assert!(one.starts_with("# Keyspace\r\ndb0:keys=300"), "{one}");
        }
    }
}

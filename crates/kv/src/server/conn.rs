//! The TCP side of the Redis-protocol server in front of the batch-io paper's store
//! (§8.1.2): the server's side of the shared accept loop ([`Server::serve`] over
//! [`csd_sim::net::accept_until`]) and the connection loop ([`Server::serve_connection`]).
//!
//! Choices: a thread per connection (scoped, so the server outlives none of them); a
//! connection takes every complete command it has buffered (up to
//! [`ServerConfig::max_batch`](super::ServerConfig::max_batch)) and runs them as one batch,
//! so one sync covers the pipeline; a framing error gets one `-ERR Protocol error` and
//! closes that connection only; reads poll with a timeout and the accept loop polls the
//! stop flag, so stopping shuts every connection's read side and joins the threads.

use super::Server;
use crate::resp::{Parsed, Reply, parse_command};
use csd_host::CommandIssuer;
use csd_sim::net::{Event, accept_until};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

impl<I: CommandIssuer + Send> Server<I> {
    /// Accept connections on `listener` and serve each on its own thread until `stop` is
    /// set; then close every connection (their read side) and wait for their threads.
    /// Returns on a listener failure too. The store stays in the server: take it back
    /// with [`Server::into_store`] and sync it.
    pub fn serve(&self, listener: &TcpListener, stop: &AtomicBool) -> io::Result<()> {
        std::thread::scope(|scope| {
            let mut conns: Vec<(std::thread::ScopedJoinHandle<'_, ()>, TcpStream)> = Vec::new();
            let result = accept_until(listener, stop, |event| match event {
                Event::Poll => conns.retain(|(h, _)| !h.is_finished()),
                Event::Accepted((stream, peer)) => {
                    let id = self.counters.total.fetch_add(1, Ordering::Relaxed) + 1;
                    if conns.len() >= self.cfg.max_connections {
                        self.counters.refused.fetch_add(1, Ordering::Relaxed);
                        let mut s = stream;
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                        let _ =
                            s.write_all(&Reply::err("max number of clients reached").to_bytes());
                        return;
                    }
                    let Ok(handle) = stream.try_clone() else {
                        return;
                    };
                    let verbose = self.cfg.verbose;
                    let h = scope.spawn(move || {
                        self.counters.open.fetch_add(1, Ordering::Relaxed);
                        if verbose {
                            eprintln!("connection {id} from {peer}: open");
                        }
                        let r = self.serve_connection(stream, stop);
                        self.counters.open.fetch_sub(1, Ordering::Relaxed);
                        if verbose {
                            match r {
                                Ok(()) => eprintln!("connection {id}: closed"),
                                Err(e) => eprintln!("connection {id}: {e}"),
                            }
                        }
                    });
                    conns.push((h, handle));
                }
            });
            for (_, s) in &conns {
                let _ = s.shutdown(Shutdown::Read);
            }
            result
        })
    }

    /// Serve one connection until end-of-file, QUIT, a framing error or the stop flag.
    pub fn serve_connection(&self, mut stream: TcpStream, stop: &AtomicBool) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(self.cfg.read_poll))?;
        stream.set_write_timeout(Some(self.cfg.write_timeout))?;
        let _ = stream.set_nodelay(true);
        let mut session = self.session();
        let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
        let mut chunk = vec![0u8; 64 * 1024];
        let mut out = Vec::new();
        loop {
            let mut cmds = Vec::new();
            let mut pos = 0;
            let mut fatal = None;
            while cmds.len() < self.cfg.max_batch.max(1) {
                match parse_command(&buf[pos..]) {
                    Ok(Parsed::Incomplete) => break,
                    Ok(Parsed::Command { args, consumed }) => {
                        pos += consumed;
                        if !args.is_empty() {
                            cmds.push(args);
                        }
                    }
                    Err(e) => {
                        fatal = Some(e);
                        break;
                    }
                }
            }
            buf.drain(..pos);
            if !cmds.is_empty() || fatal.is_some() {
                out.clear();
                for r in self.execute_batch(&cmds, &mut session) {
                    r.encode(&mut out);
                }
                if let Some(e) = &fatal {
                    self.counters
                        .protocol_errors
                        .fetch_add(1, Ordering::Relaxed);
                    Reply::err(e).encode(&mut out);
                }
                stream.write_all(&out)?;
                if fatal.is_some() || session.quit {
                    let _ = stream.shutdown(Shutdown::Both);
                    return Ok(());
                }
                if pos > 0 {
                    continue;
                }
            }
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            match stream.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{b, server};
    use super::*;
    use crate::resp::{encode_command, parse_reply};
    use crate::{Interface, ServerConfig};
    use csd_host::Client;

    struct Running {
        addr: std::net::SocketAddr,
        stop: std::sync::Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<Server<Client>>>,
    }

    impl Running {
        fn start(iface: Interface) -> Running {
            let srv = server(iface);
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let stop = std::sync::Arc::new(AtomicBool::new(false));
            let st = stop.clone();
            let thread = std::thread::spawn(move || {
                srv.serve(&l, &st).unwrap();
                srv
            });
            Running {
                addr,
                stop,
                thread: Some(thread),
            }
        }

        fn connect(&self) -> TcpStream {
            let c = TcpStream::connect(self.addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
            c
        }

        fn stop(mut self) -> Server<Client> {
            self.stop.store(true, Ordering::Relaxed);
            self.thread.take().unwrap().join().unwrap()
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Read `n` replies (or fewer if the server closes); never waits past the timeout.
    fn replies(c: &mut TcpStream, n: usize) -> (Vec<Reply>, bool) {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            while let Some((r, used)) = parse_reply(&buf).unwrap() {
                out.push(r);
                buf.drain(..used);
            }
            if out.len() >= n {
                return (out, false);
            }
            match c.read(&mut chunk) {
                Ok(0) => return (out, true),
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                Err(e) => panic!("read: {e} after {} replies", out.len()),
            }
        }
    }

    #[test]
    fn pipelines_over_tcp_get_every_reply_in_order() {
        let r = Running::start(Interface::Batch);
        let mut c = r.connect();
        let mut wire = Vec::new();
        for i in 0..500 {
            wire.extend(encode_command(&["SET", &format!("p{i}"), &i.to_string()]));
        }
        for i in 0..500 {
            wire.extend(encode_command(&["GET", &format!("p{i}")]));
        }
        // Split at awkward places: the server must put the halves together.
        for part in wire.chunks(777) {
            c.write_all(part).unwrap();
        }
        let (got, closed) = replies(&mut c, 1000);
        assert!(!closed);
        for (i, g) in got[500..].iter().enumerate() {
            assert_eq!(*g, b(&i.to_string()));
        }
        // A second connection sees the writes.
        let mut d = r.connect();
        d.write_all(b"GET p7\r\n").unwrap();
        assert_eq!(replies(&mut d, 1).0, vec![b("7")]);
        let srv = r.stop();
        assert!(srv.stats().connections_total >= 2);
    }

    #[test]
    fn malformed_input_closes_only_that_connection_and_loses_nothing() {
        for iface in [Interface::Batch, Interface::Block] {
            let r = Running::start(iface);
            let mut ok = r.connect();
            ok.write_all(&encode_command(&["SET", "safe", "1"]))
                .unwrap();
            assert_eq!(replies(&mut ok, 1).0, vec![Reply::ok()]);
            for bad in [
                &b"*1\r\n$abc\r\n"[..],
                b"*x\r\n",
                b"*2\r\n$3\r\nGET\r\n:1\r\n",
                b"*1\r\n$3\r\nGETXX\r\n",
                b"*1\r\n$-5\r\n",
                b"SET \"unbalanced 1\r\n",
            ] {
                let mut c = r.connect();
                // A good command first, in the same write: it still runs and replies.
                let mut w = encode_command(&["SET", "before", "2"]);
                w.extend_from_slice(bad);
                c.write_all(&w).unwrap();
                let (got, closed) = replies(&mut c, 3);
                assert_eq!(got[0], Reply::ok());
                assert!(
                    matches!(&got[1], Reply::Error(m) if m.starts_with("ERR Protocol error")),
                    "{got:?}"
                );
                assert!(
                    closed,
                    "connection left open after {:?}",
                    String::from_utf8_lossy(bad)
                );
            }
            // Unknown commands and oversize values keep the connection.
            let mut w = encode_command(&["FOO"]);
            w.extend(encode_command(&["SET", "big", &"v".repeat(5000)]));
            w.extend(encode_command(&["GET", "safe"]));
            ok.write_all(&w).unwrap();
            let (got, closed) = replies(&mut ok, 3);
            assert!(!closed);
            assert!(got[0].is_error() && got[1].is_error());
            assert_eq!(got[2], b("1"));
            // A half-sent command, then the server stops: nothing hangs.
            let mut half = r.connect();
            half.write_all(b"*2\r\n$3\r\nGET\r\n$10\r\nabc").unwrap();
            let srv = r.stop();
            assert!(srv.stats().protocol_errors >= 6);
            let mut st = srv.into_store();
            assert_eq!(st.get(b"safe").unwrap(), Some(b"1".to_vec()));
            assert_eq!(st.get(b"before").unwrap(), Some(b"2".to_vec()));
        }
    }

    #[test]
    fn many_connections_at_once_share_the_store() {
        let r = Running::start(Interface::Block);
        std::thread::scope(|sc| {
            for t in 0..6 {
                let r = &r;
                sc.spawn(move || {
                    let mut c = r.connect();
                    for round in 0..10 {
                        let mut w = Vec::new();
                        for i in 0..16 {
                            w.extend(encode_command(&["SET", &format!("t{t}:{round}:{i}"), "v"]));
                        }
                        c.write_all(&w).unwrap();
                        let (got, _) = replies(&mut c, 16);
                        assert!(got.iter().all(|g| *g == Reply::ok()));
                    }
                });
            }
        });
        let mut c = r.connect();
        c.write_all(&encode_command(&["DBSIZE"])).unwrap();
        assert_eq!(replies(&mut c, 1).0, vec![Reply::Int(960)]);
        drop(r.stop());
    }

    #[test]
    fn too_many_connections_are_refused_with_an_error() {
        let srv = server(Interface::Batch);
        let srv = Server {
            cfg: ServerConfig {
                max_connections: 1,
                ..ServerConfig::default()
            },
            ..srv
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| srv.serve(&l, &stop).unwrap());
            let mut a = TcpStream::connect(addr).unwrap();
            a.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            a.write_all(b"PING\r\n").unwrap();
            assert_eq!(replies(&mut a, 1).0, vec![Reply::Simple("PONG".into())]);
            let mut b2 = TcpStream::connect(addr).unwrap();
            b2.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let (got, _) = replies(&mut b2, 1);
            assert!(matches!(&got[0], Reply::Error(m) if m.contains("max number of clients")));
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(srv.stats().connections_refused, 1);
    }
}

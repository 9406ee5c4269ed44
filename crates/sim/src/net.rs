//! The accept loop of csd's socket servers (`csd serve`, the NBD server of `csd-nbd`, and
//! `csd kv serve`, the Redis-protocol server of `csd-kv`): one place that polls a
//! non-blocking listener, watches the stop flag, sorts accept errors into transient and
//! fatal, and hands each accepted stream to the server.
//!
//! What stays with each server: how many connections it admits, how it spawns a
//! connection's thread, what it counts, the timeouts it enforces between accepts (the
//! [`Event::Poll`] hook) and how it closes its connections once the loop returns.
//!
//! Choice: polling (every [`ACCEPT_POLL`] when nothing is pending) instead of a blocking
//! accept woken by a self-connection: the stop flag is a plain [`AtomicBool`] that a
//! signal handler or a test may set, and between accepts the servers enforce timeouts
//! that need a periodic turn anyway.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long the loop sleeps when no connection is pending.
pub const ACCEPT_POLL: Duration = Duration::from_millis(10);

/// A listening socket the loop can poll.
pub trait Listen {
    /// What one accept yields.
    type Stream;
    /// Switch the listener to non-blocking accepts.
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()>;
    /// Accept one pending connection (`WouldBlock` when none is pending).
    fn accept_stream(&self) -> io::Result<Self::Stream>;
}

impl Listen for TcpListener {
    type Stream = (TcpStream, SocketAddr);

    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        TcpListener::set_nonblocking(self, nonblocking)
    }

    fn accept_stream(&self) -> io::Result<Self::Stream> {
        self.accept()
    }
}

#[cfg(unix)]
impl Listen for std::os::unix::net::UnixListener {
    type Stream = std::os::unix::net::UnixStream;

    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        std::os::unix::net::UnixListener::set_nonblocking(self, nonblocking)
    }

    fn accept_stream(&self) -> io::Result<Self::Stream> {
        Ok(self.accept()?.0)
    }
}

/// What the loop tells the server.
#[derive(Debug)]
pub enum Event<S> {
    /// Before each accept (at least every [`ACCEPT_POLL`]): forget connections that have
    /// ended, enforce timeouts.
    Poll,
    /// A connection was accepted; the server admits, refuses or serves it.
    Accepted(S),
}

/// Whether an accept error concerns one connection only (interrupted, aborted or reset
/// before it was accepted), so the loop goes on.
pub fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Accept connections on `listener` until `stop` is set, handing each event to `server`.
/// Returns `Ok(())` once `stop` is seen, or the listener's first error that is not
/// transient ([`is_transient`]). The listener is left non-blocking.
pub fn accept_until<L: Listen>(
    listener: &L,
    stop: &AtomicBool,
    mut server: impl FnMut(Event<L::Stream>),
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        server(Event::Poll);
        match listener.accept_stream() {
            Ok(stream) => server(Event::Accepted(stream)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(e) if is_transient(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::collections::VecDeque;
    use std::io::Read;
    use std::sync::Arc;

    /// A listener whose accepts are scripted, for the error paths a socket rarely shows.
    struct Scripted {
        results: RefCell<VecDeque<io::Result<u32>>>,
        nonblocking: Cell<bool>,
    }

    impl Listen for Scripted {
        type Stream = u32;
        fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
            self.nonblocking.set(nonblocking);
            Ok(())
        }
        fn accept_stream(&self) -> io::Result<u32> {
            self.results
                .borrow_mut()
                .pop_front()
                .unwrap_or_else(|| Err(io::Error::other("script ended")))
        }
    }

    fn scripted(results: Vec<io::Result<u32>>) -> Scripted {
        Scripted {
            results: RefCell::new(results.into()),
            nonblocking: Cell::new(false),
        }
    }

    #[test]
    fn transient_errors_are_skipped_and_a_fatal_one_ends_the_loop() {
        let l = scripted(vec![
            Ok(1),
            Err(io::ErrorKind::WouldBlock.into()),
            Err(io::ErrorKind::ConnectionAborted.into()),
            Err(io::ErrorKind::Interrupted.into()),
            Err(io::ErrorKind::ConnectionReset.into()),
            Ok(2),
            Err(io::ErrorKind::PermissionDenied.into()),
            Ok(3),
        ]);
        let stop = AtomicBool::new(false);
        let mut accepted = Vec::new();
        let mut polls = 0;
        let r = accept_until(&l, &stop, |e| match e {
            Event::Poll => polls += 1,
            Event::Accepted(s) => accepted.push(s),
        });
        assert_eq!(
            r.expect_err("a fatal error ends the loop").kind(),
            io::ErrorKind::PermissionDenied
        );
        assert_eq!(
            accepted,
            vec![1, 2],
            "nothing accepted after the fatal error"
        );
        assert_eq!(polls, 7, "one poll before every accept");
        assert!(l.nonblocking.get());
    }

    #[test]
    fn a_set_stop_flag_returns_before_accepting() {
        let l = scripted(vec![Ok(1)]);
        let stop = AtomicBool::new(true);
        let mut events = 0;
        accept_until(&l, &stop, |_| events += 1).expect("stops cleanly");
        assert_eq!(events, 0);
    }

    #[test]
    fn serves_a_real_tcp_connection_and_stops_on_the_flag() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = l.local_addr().expect("local address");
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let client = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).expect("connect");
            let mut got = String::new();
            c.read_to_string(&mut got).expect("read reply");
            st.store(true, Ordering::Relaxed);
            got
        });
        accept_until(&l, &stop, |e| {
            if let Event::Accepted((mut s, _peer)) = e {
                io::Write::write_all(&mut s, b"hello").expect("write");
            }
        })
        .expect("stops cleanly");
        assert_eq!(client.join().expect("client thread"), "hello");
    }
}

//! Misbehaving clients: connections that never finish the handshake (a flood of them
//! over TCP on 127.0.0.1, and one that keeps talking without ever entering
//! transmission), every transmission slot taken, and idle connections. Each test runs
//! a few seconds at most: the timeouts here are 0.3–1 s.

mod common;

use common::{Client, Running};
use csd_nbd::proto::*;
use csd_nbd::{Server, ServerConfig};
use csd_sim::ClockMode;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn fill(seed: u64, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7)) as u8)
        .collect()
}

/// Open `n` TCP connections that never answer the greeting.
fn silent_flood(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        })
        .collect()
}

/// Read until the server closes the stream; `false` if it is still open after the
/// stream's read timeout.
fn closed_by_server(s: &mut impl Read) -> bool {
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Poll `f` until it holds or `limit` passes.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

fn use_it<S: Read + Write>(c: &mut Client<S>, seed: u64) {
    assert_eq!(c.write(8 * 4096, &fill(seed, 8192)), 0);
    assert_eq!(c.read(8 * 4096, 8192).unwrap(), fill(seed, 8192));
}

#[test]
fn a_flood_of_silent_connections_does_not_lock_a_client_out() {
    // 70 connections that never answer the greeting: more than the 63 transmission
    // slots and more than the 64 handshakes allowed at once.
    let srv = Running::start_tcp(ServerConfig {
        handshake_timeout: Duration::from_secs(1),
        ..Default::default()
    });
    let addr = srv.addr.unwrap();
    let t0 = Instant::now();
    let mut flood = silent_flood(addr, 70);
    // Let the server accept them all.
    assert!(eventually(Duration::from_secs(5), || {
        let s = srv.server.stats();
        s.connections_total >= 70 && s.handshakes_pending >= 60
    }));

    // A real client connects at once (the oldest silent connection makes room) and is
    // served, long before the flood times out.
    let mut c = Client::go_tcp(addr, "").expect("a client must get in during the flood");
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    use_it(&mut c, 1);

    // Every silent connection is closed by the server: the evicted ones at once, the
    // others at the handshake timeout.
    for s in &mut flood {
        assert!(closed_by_server(s), "a silent connection is still open");
    }
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert!(eventually(Duration::from_secs(2), || {
        let s = srv.server.stats();
        s.handshake_timeouts + s.handshakes_evicted == 70 && s.handshakes_pending == 0
    }));
    let s = srv.server.stats();
    assert!(s.handshakes_evicted >= 7, "{s:?}");
    assert!(s.handshake_timeouts >= 1, "{s:?}");
    // The client that got in is not touched by the handshake timeout.
    use_it(&mut c, 2);
    c.disconnect();
}

#[test]
fn silent_connections_hold_no_slot_and_time_out() {
    // A handshake limit above the flood: nobody is evicted, the 70 silent connections
    // are all in the handshake at once, and still a client gets in (they hold no
    // transmission slot); then all 70 time out.
    let srv = Running::start_tcp(ServerConfig {
        handshake_timeout: Duration::from_secs(1),
        max_handshakes: 200,
        ..Default::default()
    });
    let addr = srv.addr.unwrap();
    let t0 = Instant::now();
    let mut flood = silent_flood(addr, 70);
    assert!(eventually(Duration::from_secs(5), || srv
        .server
        .stats()
        .handshakes_pending
        == 70));
    let mut c = Client::go_tcp(addr, "").expect("a client must get in during the flood");
    use_it(&mut c, 3);
    for s in &mut flood {
        assert!(closed_by_server(s), "a silent connection is still open");
    }
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    assert!(eventually(Duration::from_secs(2), || {
        let s = srv.server.stats();
        s.handshake_timeouts == 70 && s.handshakes_pending == 0
    }));
    assert_eq!(srv.server.stats().handshakes_evicted, 0);
    use_it(&mut c, 4);
}

#[test]
fn a_handshake_that_never_ends_is_dropped_even_if_it_keeps_talking() {
    let srv = Running::start(ServerConfig {
        handshake_timeout: Duration::from_secs(1),
        ..Default::default()
    });
    // A client that enters transmission quickly outlives the handshake timeout.
    let mut fine = srv.client();

    // One that lists the exports every 100 ms and never goes on.
    let mut s = Client::handshake(&srv.socket).unwrap();
    let t0 = Instant::now();
    let end = loop {
        assert!(t0.elapsed() < Duration::from_secs(5), "never dropped");
        match Client::option(&mut s, OPT_LIST, &[]) {
            Ok(r) => assert_eq!(r.last().unwrap().1, REP_ACK),
            Err(_) => break t0.elapsed(),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        end >= Duration::from_millis(800) && end < Duration::from_secs(3),
        "{end:?}"
    );
    assert_eq!(srv.server.stats().handshake_timeouts, 1);
    use_it(&mut fine, 5);
}

#[test]
fn a_client_refused_for_lack_of_slots_gets_an_error_reply_and_may_retry() {
    let srv = Running::start(ServerConfig {
        max_connections: 2,
        ..Default::default()
    });
    let a = srv.client();
    let mut b = srv.client();
    let go = InfoRequest {
        name: vec![],
        requests: vec![],
    }
    .encode();

    // The third GO: an error reply with a message, and the negotiation goes on.
    let mut s = Client::handshake(&srv.socket).unwrap();
    let r = Client::option(&mut s, OPT_GO, &go).unwrap();
    let (opt, typ, msg) = r.last().unwrap();
    assert_eq!((*opt, *typ), (OPT_GO, REP_ERR_POLICY));
    let msg = String::from_utf8_lossy(msg);
    assert!(
        msg.contains("busy") && msg.contains("2 connection slots"),
        "{msg}"
    );
    let r = Client::option(&mut s, OPT_INFO, &go).unwrap();
    assert_eq!(r.last().unwrap().1, REP_ACK);

    // EXPORT_NAME cannot be answered with an error: hung up on.
    let mut e = Client::handshake(&srv.socket).unwrap();
    Client::send_option(&mut e, OPT_EXPORT_NAME, b"").unwrap();
    assert!(closed_by_server(&mut e));
    assert_eq!(srv.server.stats().refused_busy, 2);

    // Once a slot is free, the same connection gets in.
    a.disconnect();
    assert!(eventually(Duration::from_secs(5), || {
        srv.server.stats().connections_open == 2 // b, and s in the handshake
    }));
    let r = Client::option(&mut s, OPT_GO, &go).unwrap();
    assert_eq!(r.last().unwrap().1, REP_ACK);
    let mut third = Client::new(s, b.size, b.flags);
    use_it(&mut third, 6);
    use_it(&mut b, 7);
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(500);
    let srv = Running::start(ServerConfig {
        idle_timeout: Some(idle),
        ..Default::default()
    });
    let mut quiet = srv.client();
    let mut busy = srv.client();
    use_it(&mut quiet, 8);
    let t0 = Instant::now();
    // The busy client sends a request every 150 ms meanwhile and is never closed.
    let busy_thread = std::thread::spawn(move || {
        for i in 0..10 {
            use_it(&mut busy, 9 + i);
            std::thread::sleep(Duration::from_millis(150));
        }
        busy
    });
    quiet
        .s
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(
        closed_by_server(&mut quiet.s),
        "the idle connection stayed open"
    );
    let after = t0.elapsed();
    assert!(
        after >= idle - Duration::from_millis(50) && after < idle * 4,
        "{after:?}"
    );
    assert_eq!(srv.server.stats().idle_closed, 1);
    let mut busy = busy_thread.join().unwrap();
    use_it(&mut busy, 20);
    busy.disconnect();
}

#[test]
fn a_request_in_flight_is_not_cut_by_the_idle_timeout() {
    // Paced: a 64 KiB write takes over 300 modeled µs, here over 1.5 s of wall clock,
    // three times the idle timeout; its reply still comes, then the idle close.
    let idle = Duration::from_millis(500);
    let srv = Running::start(ServerConfig {
        idle_timeout: Some(idle),
        clock: ClockMode::Paced { scale: 5000.0 },
        ..Default::default()
    });
    let mut c = srv.client();
    let t0 = Instant::now();
    assert_eq!(c.write(0, &fill(30, 64 << 10)), 0);
    assert!(t0.elapsed() > idle * 2, "{:?}", t0.elapsed());
    assert_eq!(srv.server.stats().idle_closed, 0);
    let t1 = Instant::now();
    assert!(
        closed_by_server(&mut c.s),
        "the idle connection stayed open"
    );
    assert!(t1.elapsed() < idle * 4, "{:?}", t1.elapsed());
    assert_eq!(srv.server.stats().idle_closed, 1);
}

#[test]
fn timeouts_must_be_above_zero() {
    for cfg in [
        ServerConfig {
            handshake_timeout: Duration::ZERO,
            ..Default::default()
        },
        ServerConfig {
            idle_timeout: Some(Duration::ZERO),
            ..Default::default()
        },
    ] {
        let e = Server::new(common::tiny_device(), cfg).err().unwrap();
        assert!(e.to_string().contains("above zero"), "{e}");
    }
}

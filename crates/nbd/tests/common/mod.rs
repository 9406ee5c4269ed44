//! A minimal NBD client and an in-process server on a tiny in-memory device, for the
//! integration tests of csd-nbd.
#![allow(dead_code)]

use csd_device::NvmeDevice;
use csd_ftl::{Ftl, FtlConfig};
use csd_nand::Nand;
use csd_nbd::proto::{self, *};
use csd_nbd::{Listener, Server, ServerConfig};
use csd_sim::DeviceConfig;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A fresh tiny device behind the command interface.
pub fn tiny_device() -> NvmeDevice {
    let cfg = DeviceConfig::preset("tiny").unwrap();
    let nand = Nand::new_in_memory(cfg).unwrap();
    NvmeDevice::new(Ftl::format(nand, FtlConfig::default()).unwrap())
}

/// A server listening on a Unix socket in a temporary directory (or on 127.0.0.1),
/// served by a thread.
pub struct Running {
    pub server: Server,
    pub socket: PathBuf,
    /// The TCP address, for a server started with [`Running::start_tcp`].
    pub addr: Option<SocketAddr>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Running {
    pub fn start(cfg: ServerConfig) -> Running {
        Running::start_with(tiny_device(), cfg)
    }

    /// Serve `device`.
    pub fn start_with(device: NvmeDevice, cfg: ServerConfig) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("nbd.sock");
        let listener = Listener::unix(&socket).unwrap();
        Running::serve(device, cfg, listener, socket, dir)
    }

    /// A tiny device served on 127.0.0.1 (any free port).
    pub fn start_tcp(cfg: ServerConfig) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let listener = Listener::tcp(lo, false).unwrap();
        Running::serve(tiny_device(), cfg, listener, PathBuf::new(), dir)
    }

    fn serve(
        device: NvmeDevice,
        cfg: ServerConfig,
        listener: Listener,
        socket: PathBuf,
        dir: tempfile::TempDir,
    ) -> Running {
        let server = Server::new(device, cfg).unwrap();
        let addr = listener.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (server.clone(), stop.clone());
        let thread = std::thread::spawn(move || s.serve(&listener, &st).unwrap());
        Running {
            server,
            socket,
            addr,
            stop,
            thread: Some(thread),
            _dir: dir,
        }
    }

    pub fn client(&self) -> Client {
        Client::go(&self.socket, "").unwrap()
    }

    /// Stop serving and wait for every connection to end.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An option reply: (option, reply type, data).
pub type OptReply = (u32, u32, Vec<u8>);

/// A connected client (over a Unix socket unless said otherwise).
pub struct Client<S = UnixStream> {
    pub s: S,
    pub size: u64,
    pub flags: u16,
    next: u64,
}

pub fn read_u64(s: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

impl Client<UnixStream> {
    /// Connect and read the greeting; send client flags. Returns the raw stream.
    pub fn handshake(path: &Path) -> io::Result<UnixStream> {
        let mut s = UnixStream::connect(path)?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        Self::greet(&mut s)?;
        Ok(s)
    }

    /// Connect and enter transmission with NBD_OPT_GO.
    pub fn go(path: &Path, name: &str) -> io::Result<Client> {
        let s = Self::handshake(path)?;
        Client::go_on(s, name)
    }
}

impl Client<TcpStream> {
    /// Connect over TCP and read the greeting; send client flags.
    pub fn handshake_tcp(addr: SocketAddr) -> io::Result<TcpStream> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        Self::greet(&mut s)?;
        Ok(s)
    }

    /// Connect over TCP and enter transmission with NBD_OPT_GO.
    pub fn go_tcp(addr: SocketAddr, name: &str) -> io::Result<Client<TcpStream>> {
        let s = Self::handshake_tcp(addr)?;
        Client::go_on(s, name)
    }
}

impl<S: Read + Write> Client<S> {
    /// A client on a stream that has entered transmission.
    pub fn new(s: S, size: u64, flags: u16) -> Client<S> {
        Client {
            s,
            size,
            flags,
            next: 1,
        }
    }

    /// Read the greeting and send the client flags.
    pub fn greet(s: &mut S) -> io::Result<()> {
        let mut g = [0u8; 18];
        s.read_exact(&mut g)?;
        assert_eq!(g, proto::greeting());
        s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
    }

    pub fn send_option(s: &mut S, option: u32, data: &[u8]) -> io::Result<()> {
        let h = OptionHeader {
            option,
            length: data.len() as u32,
        };
        s.write_all(&h.encode())?;
        s.write_all(data)
    }

    pub fn read_opt_reply(s: &mut S) -> io::Result<OptReply> {
        assert_eq!(read_u64(s)?, OPT_REPLY_MAGIC);
        let mut b = [0u8; 12];
        s.read_exact(&mut b)?;
        let opt = u32::from_be_bytes(b[0..4].try_into().unwrap());
        let typ = u32::from_be_bytes(b[4..8].try_into().unwrap());
        let len = u32::from_be_bytes(b[8..12].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        s.read_exact(&mut d)?;
        Ok((opt, typ, d))
    }

    /// Replies up to and including the final one (ACK or an error).
    pub fn option(s: &mut S, option: u32, data: &[u8]) -> io::Result<Vec<OptReply>> {
        Self::send_option(s, option, data)?;
        let mut v = Vec::new();
        loop {
            let r = Self::read_opt_reply(s)?;
            let done = r.1 == REP_ACK || r.1 & (1 << 31) != 0;
            v.push(r);
            if done {
                return Ok(v);
            }
        }
    }

    /// Enter transmission with NBD_OPT_GO on a stream past the greeting.
    pub fn go_on(mut s: S, name: &str) -> io::Result<Client<S>> {
        let req = InfoRequest {
            name: name.as_bytes().to_vec(),
            requests: vec![INFO_BLOCK_SIZE],
        };
        let replies = Self::option(&mut s, OPT_GO, &req.encode())?;
        let last = replies.last().unwrap();
        if last.1 != REP_ACK {
            return Err(io::Error::other(format!(
                "GO refused: {:#x} {}",
                last.1,
                String::from_utf8_lossy(&last.2)
            )));
        }
        let export = replies
            .iter()
            .find(|r| r.1 == REP_INFO && r.2[..2] == INFO_EXPORT.to_be_bytes())
            .unwrap();
        let size = u64::from_be_bytes(export.2[2..10].try_into().unwrap());
        let flags = u16::from_be_bytes(export.2[10..12].try_into().unwrap());
        Ok(Client {
            s,
            size,
            flags,
            next: 1,
        })
    }

    /// Send a request (with `payload` for WRITE); returns its cookie.
    pub fn send(&mut self, kind: u16, flags: u16, offset: u64, length: u32, payload: &[u8]) -> u64 {
        let cookie = self.next;
        self.next += 1;
        let r = Request {
            flags,
            kind,
            cookie,
            offset,
            length,
        };
        self.s.write_all(&r.encode()).unwrap();
        self.s.write_all(payload).unwrap();
        cookie
    }

    /// Read one simple reply header: (error, cookie).
    pub fn reply(&mut self) -> io::Result<(u32, u64)> {
        let mut b = [0u8; SIMPLE_REPLY_BYTES];
        self.s.read_exact(&mut b)?;
        proto::parse_simple_reply(&b).map_err(io::Error::other)
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> u32 {
        self.write_flags(offset, data, 0)
    }

    pub fn write_flags(&mut self, offset: u64, data: &[u8], flags: u16) -> u32 {
        let c = self.send(CMD_WRITE, flags, offset, data.len() as u32, data);
        let (e, got) = self.reply().unwrap();
        assert_eq!(got, c);
        e
    }

    /// A command without payload and without reply data.
    pub fn simple(&mut self, kind: u16, flags: u16, offset: u64, length: u32) -> u32 {
        let c = self.send(kind, flags, offset, length, &[]);
        let (e, got) = self.reply().unwrap();
        assert_eq!(got, c);
        e
    }

    pub fn read(&mut self, offset: u64, length: u32) -> Result<Vec<u8>, u32> {
        let c = self.send(CMD_READ, 0, offset, length, &[]);
        let (e, got) = self.reply().unwrap();
        assert_eq!(got, c);
        if e != 0 {
            return Err(e);
        }
        let mut d = vec![0u8; length as usize];
        self.s.read_exact(&mut d).unwrap();
        Ok(d)
    }

    pub fn disconnect(mut self) {
        self.send(CMD_DISC, 0, 0, 0, &[]);
        // The server closes after the outstanding replies: EOF.
        let mut b = [0u8; 1];
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.s.read(&mut b) {
                Ok(0) => return,
                Ok(_) => {}
                Err(_) => return,
            }
        }
        panic!("the server did not close after NBD_CMD_DISC");
    }
}

//! A new user's first commands on the default device (`nvme-tlc`, 96 GiB raw): create,
//! info, load a small table, query it twice, list tables, SMART, check and serve. Each
//! command's wall time is printed in the test log; the image must not change under the
//! commands that only read, and every open must be quick (no scan of the capacity).

mod common;

use common::csd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Run `csd args`, print its wall time, and require success.
fn timed(label: &str, args: &[&str]) -> Output {
    let t0 = Instant::now();
    let out = csd(args);
    let wall = t0.elapsed().as_secs_f64();
    eprintln!("[{wall:>7.3} s] csd {label}");
    assert!(
        out.status.success(),
        "csd {label} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // No open of this device may scan its capacity (that took tens of seconds).
    assert!(wall < 20.0, "csd {label} took {wall:.1} s");
    out
}

/// A digest of an image that reads only its allocated extents (the file is a sparse
/// 96 GiB): size, bytes allocated, and the CRC of every non-zero chunk with its offset.
fn digest(path: &Path) -> (u64, u64, u32) {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::fd::AsRawFd;
    let mut f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    let fd = f.as_raw_fd();
    let mut crc = 0u32;
    let mut off: i64 = 0;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        // SAFETY: lseek on a descriptor we own; SEEK_DATA/SEEK_HOLE only move the offset.
        let data = unsafe { libc::lseek(fd, off, libc::SEEK_DATA) };
        if data < 0 {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        f.seek(SeekFrom::Start(data as u64)).unwrap();
        let mut left = (hole - data) as usize;
        let mut at = data;
        while left > 0 {
            let n = left.min(buf.len());
            f.read_exact(&mut buf[..n]).unwrap();
            // An all-zero chunk reads exactly like a hole. ext4 reports preallocated
            // (unwritten) extents as data once their pages sit in the page cache, which
            // a read-only memory map puts there, so only non-zero pages are hashed
            // (with their offset): the digest follows the bytes, not the page cache.
            // Hashed per 4 KiB page at its absolute offset (extent bounds are block
            // aligned), so where the file system draws data/hole bounds does not matter.
            for page in buf[..n].chunks(4096) {
                if page.iter().any(|&b| b != 0) {
                    crc = crc32c::crc32c_append(crc, &at.to_le_bytes());
                    crc = crc32c::crc32c_append(crc, page);
                }
                at += page.len() as i64;
            }
            left -= n;
        }
        off = hole;
    }
    let allocated = f.metadata().unwrap().blocks() * 512;
    (len, allocated, crc)
}

#[test]
fn a_new_users_first_commands_on_the_default_device() {
    let dir = tempfile::tempdir().unwrap();
    let img_path = dir.path().join("dev.img");
    let img = img_path.to_str().unwrap();
    let out = timed("device create", &["device", "create", "--image", img]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nvme-tlc"));
    timed("device info", &["device", "info", "--image", img]);
    let d0 = digest(&img_path);
    timed(
        "device smart",
        &["device", "smart", "--image", img, "--json"],
    );
    assert_eq!(digest(&img_path), d0, "device smart changed the image");
    timed(
        "load synthetic (5000 rows)",
        &[
            "load",
            "synthetic",
            "--columns",
            "4",
            "--rows",
            "5000",
            "--name",
            "s4",
            "--image",
            img,
        ],
    );
    let d1 = digest(&img_path);
    assert!(d1.1 < 64 << 20, "the image takes {} bytes on disk", d1.1);
    let q = "SELECT COUNT(*) FROM s4 WHERE c1 < 100";
    let first = timed("query (1st)", &["query", "--image", img, "--json", q]);
    let d2 = digest(&img_path);
    assert_eq!(d2, d1, "a query changed the image");
    let second = timed("query (2nd)", &["query", "--image", img, "--json", q]);
    assert_eq!(digest(&img_path), d2, "the second query changed the image");
    let rows = |o: &Output| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["rows"].clone()
    };
    assert_eq!(rows(&first), rows(&second));
    timed("tables", &["tables", "--image", img]);
    timed("device check", &["device", "check", "--image", img]);
    assert_eq!(digest(&img_path), d2, "tables/check changed the image");
    // Serve it briefly and ask the export's size with a real client when there is one.
    let sock = dir.path().join("nbd.sock");
    let t0 = Instant::now();
    let mut srv = Command::new(env!("CARGO_BIN_EXE_csd"))
        .args(["serve", "--image", img, "--socket"])
        .arg(&sock)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while !sock.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "serve did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "[{:>7.3} s] csd serve (until listening)",
        t0.elapsed().as_secs_f64()
    );
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    match Command::new("nbdinfo").args(["--size", &uri]).output() {
        Ok(o) if o.status.success() => {
            let size: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
            assert!(size > 80 << 30, "export of {size} bytes");
        }
        _ => eprintln!("notice: nbdinfo not available; serve checked only for start-up"),
    }
    // SAFETY: kill(2) with the pid of a child we spawned and SIGTERM.
    unsafe {
        libc::kill(srv.id() as i32, libc::SIGTERM);
    }
    assert!(srv.wait().unwrap().success());
}

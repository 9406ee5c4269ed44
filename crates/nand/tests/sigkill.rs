//! An image outlives its process: a child programs pages in a loop and reports each
//! completed program on stdout; the parent SIGKILLs it mid-loop, reopens the image and
//! checks that every reported program reads back intact and nothing else is corrupt.

use csd_nand::{BlockId, Nand, PageState, Ppa};
use csd_sim::{DeviceConfig, SimTime};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const CHILD_ENV: &str = "CSD_SIGKILL_CHILD_IMAGE";

fn pattern(page_size: usize, block: u32, page: u32) -> Vec<u8> {
    (0..page_size)
        .map(|i| {
            ((i as u32).wrapping_mul(31) ^ block.wrapping_mul(7) ^ page.wrapping_mul(13)) as u8
        })
        .collect()
}

/// The child: runs only when the parent sets the environment variable.
#[test]
fn sigkill_child_writer() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut n = Nand::open_image(path.as_ref(), None).expect("child opens image");
    let g = *n.geometry();
    let mut count = 0u64;
    // One pass over the whole device; the parent kills us well before the end.
    for b in 0..g.total_blocks() as u32 {
        for p in 0..g.pages_per_block {
            let data = pattern(g.page_size as usize, b, p);
            n.program(Ppa::new(BlockId(b), p), &data, &[], SimTime::ZERO)
                .expect("program");
            count += 1;
            println!("done {b} {p} {count}");
        }
    }
}

#[test]
fn image_survives_sigkill_mid_write_loop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kill.img");
    let cfg = DeviceConfig::preset("tiny").unwrap();
    let page_size = cfg.geometry.page_size as usize;
    drop(Nand::create_image(&path, cfg).unwrap());

    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "sigkill_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut done = Vec::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        let mut it = line.split_whitespace();
        if it.next() != Some("done") {
            continue;
        }
        let b: u32 = it.next().unwrap().parse().unwrap();
        let p: u32 = it.next().unwrap().parse().unwrap();
        done.push((b, p));
        if done.len() == 700 {
            child.kill().unwrap(); // SIGKILL on Unix
            break;
        }
    }
    child.wait().unwrap();
    assert_eq!(done.len(), 700, "child stopped early");

    let mut n = Nand::open_image(&path, None).unwrap();
    let mut buf = vec![0u8; page_size];
    for &(b, p) in &done {
        n.read(Ppa::new(BlockId(b), p), 0, &mut buf, &mut [], SimTime::ZERO)
            .unwrap();
        assert_eq!(
            buf,
            pattern(page_size, b, p),
            "block {b} page {p} lost after SIGKILL"
        );
    }
    // Any page past the last reported one is either erased or complete (a program that
    // finished but was not yet reported), never half-written.
    let g = *n.geometry();
    for b in 0..g.total_blocks() as u32 {
        for p in 0..g.pages_per_block {
            match n.page_state(Ppa::new(BlockId(b), p)).unwrap() {
                PageState::Erased => {}
                PageState::Programmed => {
                    n.read(Ppa::new(BlockId(b), p), 0, &mut buf, &mut [], SimTime::ZERO)
                        .unwrap();
                    assert_eq!(buf, pattern(page_size, b, p));
                }
                s => panic!("unexpected state {s:?} at block {b} page {p}"),
            }
        }
    }
    // The device keeps working after reopen.
    let info = n.block_info(BlockId(done.last().unwrap().0)).unwrap();
    assert!(info.next_page > 0);
}

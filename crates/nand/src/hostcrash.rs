//! Imitating a host power loss on an image file, for tests.
//!
//! An image is a shared mapping: the kernel writes its dirty pages back in any order and
//! at any time, and only what was synced ([`crate::Nand::persist`]) is known to be on
//! disk. A host that loses power keeps, of each 4 KiB page changed since the last sync,
//! either the synced version or any later one. To test that csd acknowledges nothing
//! durable before it is synced, a store can keep a *durable copy* beside the image
//! ([`crate::Nand::track_durable_copy`], or `CSD_DURABLE_COPY=1` for a whole process): at
//! every sync the blocks and tables changed since the previous one are copied into it,
//! so it holds exactly what the host's disk is known to hold. [`host_crash_image`] then
//! builds what a power cut at this instant may leave: per 4 KiB page where the image and
//! its durable copy differ, one of the two drawn from a seed (the live page stands for
//! "written back before the cut", the durable one for "lost"). A process killed by a
//! test leaves both files, so the same function serves in-process and process tests.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The page of the host's page cache: the unit a host writes back (and loses) whole.
pub const HOST_PAGE: usize = 4096;

/// The durable copy of an image (see the module documentation).
pub(crate) struct Shadow {
    file: File,
    blocks: Vec<bool>,
    pub meta: bool,
    pub header: bool,
}

impl Shadow {
    /// A durable copy at `path` holding `image` (the mapping, just synced).
    pub fn create(path: &Path, image: &[u8], nblocks: usize) -> io::Result<Shadow> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(image.len() as u64)?;
        copy_nonzero(&file, image, 0)?;
        Ok(Shadow {
            file,
            blocks: vec![false; nblocks],
            meta: false,
            header: false,
        })
    }

    /// Block `b` changed since the last sync.
    #[inline]
    pub fn mark_block(&mut self, b: usize) {
        self.blocks[b] = true;
    }

    /// After a sync: copy what changed since the previous one from `image`.
    pub fn absorb(
        &mut self,
        image: &[u8],
        meta: std::ops::Range<usize>,
        blocks_offset: usize,
        block_bytes: usize,
    ) -> io::Result<()> {
        if self.header {
            self.file.write_all_at(&image[..meta.start], 0)?;
            self.header = false;
        }
        if self.meta {
            self.file
                .write_all_at(&image[meta.clone()], meta.start as u64)?;
            self.meta = false;
        }
        for (b, dirty) in self.blocks.iter_mut().enumerate() {
            if std::mem::take(dirty) {
                let o = blocks_offset + b * block_bytes;
                self.file
                    .write_all_at(&image[o..o + block_bytes], o as u64)?;
            }
        }
        Ok(())
    }
}

/// Write the non-zero 4 KiB pages of `bytes` at `offset` of `file` (the rest stays a
/// hole, reading as zeros).
fn copy_nonzero(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    for (i, page) in bytes.chunks(HOST_PAGE).enumerate() {
        if page.iter().any(|&x| x != 0) {
            file.write_all_at(page, offset + (i * HOST_PAGE) as u64)?;
        }
    }
    Ok(())
}

/// What a host power cut may leave of `image`, given its durable copy `durable`: a new
/// file `out` holding, per 4 KiB page, the durable page where the two are equal, and
/// where they differ the live page with probability `keep` (drawn from `seed`), else the
/// durable one. Returns how many pages differed and how many of those kept the live
/// version. `keep = 0` is the harshest cut (nothing unsynced survives).
pub fn host_crash_image(
    image: &Path,
    durable: &Path,
    out: &Path,
    seed: u64,
    keep: f64,
) -> io::Result<(u64, u64)> {
    let live = std::fs::read(image)?;
    let synced = std::fs::read(durable)?;
    if live.len() != synced.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is {} bytes but its durable copy {} is {}",
                image.display(),
                live.len(),
                durable.display(),
                synced.len()
            ),
        ));
    }
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(out)?;
    file.set_len(live.len() as u64)?;
    let (mut differed, mut kept) = (0u64, 0u64);
    for (i, (l, d)) in live
        .chunks(HOST_PAGE)
        .zip(synced.chunks(HOST_PAGE))
        .enumerate()
    {
        let page = if l == d {
            d
        } else {
            differed += 1;
            if crate::fault::uniform(seed, i as u64, 0x4853_4352) < keep {
                kept += 1;
                l
            } else {
                d
            }
        };
        if page.iter().any(|&x| x != 0) {
            file.write_all_at(page, (i * HOST_PAGE) as u64)?;
        }
    }
    file.sync_all()?;
    Ok((differed, kept))
}

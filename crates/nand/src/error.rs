//! The flash media's errors ([`NandError`]): each refusal or failure the media model
//! enforces (batch-io §2.1's program/erase rules, bad blocks, ECC limits, power cuts),
//! with a message naming what to change and accessors a controller uses to react (the
//! completion instant of a failed operation, the sector that failed).

use crate::{BlockId, Ppa};
use csd_sim::SimTime;
use std::path::PathBuf;
use thiserror::Error;

/// Errors of the flash media.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum NandError {
    /// An address or index is outside the geometry.
    #[error("{what} {value} is out of range (the device has {limit})")]
    OutOfRange {
        /// Which part of the address.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The number of valid values.
        limit: u64,
    },
    /// A buffer has the wrong length.
    #[error("{what} buffer is {got} bytes; expected {expected}")]
    BufferSize {
        /// Which buffer.
        what: &'static str,
        /// Bytes expected.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// Program of a page that is not erased.
    #[error("cannot program {ppa}: the page is not erased (erase the block first)")]
    ProgramNotErased {
        /// The page.
        ppa: Ppa,
    },
    /// Program out of page order.
    #[error(
        "cannot program {ppa}: pages of a block are programmed in order; next is page {expected}"
    )]
    ProgramOutOfOrder {
        /// The page.
        ppa: Ppa,
        /// The page that must be programmed next.
        expected: u32,
    },
    /// The block is marked bad.
    #[error("{block} is a bad block")]
    BadBlock {
        /// The block.
        block: BlockId,
    },
    /// The program failed (status fail); the page's contents are unreliable.
    #[error("program of {ppa} failed")]
    ProgramFailed {
        /// The page.
        ppa: Ppa,
        /// When the failed operation completed.
        done: SimTime,
    },
    /// The erase failed; the block should be retired.
    #[error("erase of {block} failed")]
    EraseFailed {
        /// The block.
        block: BlockId,
        /// When the failed operation completed.
        done: SimTime,
    },
    /// More bit errors than the ECC corrects (or a torn/failed page).
    #[error("uncorrectable read at {ppa} sector {sector} ({bit_errors} bit errors)")]
    Uncorrectable {
        /// The page.
        ppa: Ppa,
        /// The first failing sector (index within the page).
        sector: u32,
        /// Bit errors found (u32::MAX for torn or failed pages).
        bit_errors: u32,
        /// When the failed read completed.
        done: SimTime,
    },
    /// Power was cut; nothing works until `power_on`.
    #[error("power loss: the device is off")]
    PowerLoss,
    /// The image file cannot be used.
    #[error("image {path}: {reason}")]
    Image {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file system holding the image has no room for a block about to be written.
    #[error(
        "image file system is full: {path} cannot store block {block} (free space on that file system or move the image); the device stays readable"
    )]
    ImageFull {
        /// The file.
        path: PathBuf,
        /// The block that could not be stored.
        block: u32,
    },
    /// An in-memory device reached its memory limit: storing one more erase block would
    /// take the memory its blocks hold past it (see [`crate::Nand::set_memory_limit`]).
    #[error(
        "the in-memory device reached its memory limit: block {block} would take its flash past {limit_bytes} bytes ({used_bytes} held: a block keeps its memory once programmed, stale pages included, and a log-structured FTL spreads writes over every block before its GC erases any); run on an image file (--image), on a smaller device (e.g. --set geometry.blocks_per_plane=32) or raise CSD_MEMORY_LIMIT; the device stays readable"
    )]
    MemoryFull {
        /// The block that could not be stored.
        block: u32,
        /// Bytes the device's blocks hold.
        used_bytes: u64,
        /// The limit.
        limit_bytes: u64,
    },
    /// Another process holds the image.
    #[error("image {path} is in use by another process")]
    Locked {
        /// The file.
        path: PathBuf,
    },
    /// The image was made with another geometry.
    #[error(
        "image {path} has geometry {image}, not the requested {requested}; use a matching preset or omit it"
    )]
    GeometryMismatch {
        /// The file.
        path: PathBuf,
        /// Geometry recorded in the image.
        image: String,
        /// Geometry asked for.
        requested: String,
    },
    /// The device config is invalid.
    #[error(transparent)]
    Config(#[from] csd_sim::ConfigError),
}

//! Errors of the key-value store.

use csd_host::HostError;
use thiserror::Error;

/// What can go wrong in the store.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum KvError {
    /// A key over [`crate::page::MAX_KEY`] bytes, or empty.
    #[error("key of {len} bytes: keys are 1..={max} bytes")]
    KeySize {
        /// Bytes given.
        len: usize,
        /// Largest accepted.
        max: usize,
    },
    /// A value over [`crate::page::MAX_VALUE`] bytes.
    #[error("value of {len} bytes: values are at most {max} bytes")]
    ValueSize {
        /// Bytes given.
        len: usize,
        /// Largest accepted.
        max: usize,
    },
    /// The device failed a command (power loss, no space, media error).
    #[error("device: {0}")]
    Device(#[from] HostError),
    /// The device holds a store of the other interface, or none, or something else.
    #[error("{0}")]
    WrongFormat(String),
    /// Data read back from the device is not what the store wrote.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// The host log (block interface) or the device is full.
    #[error(
        "MSET of {pairs} pairs could change up to {pages} pages (a pair landing in a leaf \
         that may fill up counts a split up to the root), more than one write buffer \
         ({cap} pages) makes durable at once: send it as several smaller MSETs"
    )]
    /// A multi-key put too big to be made crash-atomic (one write buffer).
    GroupTooLarge {
        /// Pairs in the command.
        pairs: usize,
        /// Pages its changes could need at worst.
        pages: usize,
        /// Pages one write buffer holds.
        cap: usize,
    },
    #[error("out of space: {0}")]
    NoSpace(String),
    /// A configuration the store cannot run with.
    #[error("configuration: {0}")]
    Config(String),
}

impl KvError {
    /// Did the device lose power (the crash tests' expected failure)?
    pub fn is_power_loss(&self) -> bool {
        matches!(
            self,
            KvError::Device(HostError::Device {
                status: csd_device::Status::NamespaceNotReady(_),
                ..
            })
        )
    }
}

//! The controller's persistent state kept by the FTL: FLIXR §4.6's redo-log bits (the
//! LPIDs whose MAP-entry extension is being recomputed) and the controller's own metadata
//! blob. Both are opaque to the FTL; it logs and checkpoints them.

use std::collections::BTreeSet;

/// Pending extension marks and the controller's metadata blob. Only this module changes
/// them; the FTL logs every change before making it here.
#[derive(Debug, Default)]
pub(crate) struct CtrlMeta {
    /// LPIDs whose extension is being recomputed (redo-log bit at 0). Sparse, because
    /// only the LPIDs of commands in flight are ever pending.
    ext_pending: BTreeSet<u64>,
    /// The controller's own persistent metadata (FLIXR's registered tables, encodings and
    /// rules).
    blob: Vec<u8>,
}

impl CtrlMeta {
    /// Mark the extensions of `lpids` pending.
    pub(crate) fn mark_pending(&mut self, lpids: std::ops::Range<u64>) {
        self.ext_pending.extend(lpids);
    }

    /// The extension of `lpid` is current again (set, or zeroed by a trim).
    #[inline]
    pub(crate) fn settle(&mut self, lpid: u64) {
        self.ext_pending.remove(&lpid);
    }

    /// Is the extension of `lpid` pending?
    pub(crate) fn is_pending(&self, lpid: u64) -> bool {
        self.ext_pending.contains(&lpid)
    }

    /// The pending LPIDs, in order.
    pub(crate) fn pending(&self) -> impl Iterator<Item = u64> + '_ {
        self.ext_pending.iter().copied()
    }

    /// How many LPIDs are pending.
    pub(crate) fn pending_count(&self) -> usize {
        self.ext_pending.len()
    }

    /// The controller's metadata blob.
    pub(crate) fn blob(&self) -> &[u8] {
        &self.blob
    }

    /// Replace the controller's metadata blob.
    pub(crate) fn set_blob(&mut self, bytes: Vec<u8>) {
        self.blob = bytes;
    }

    /// The state a checkpoint recorded (recovery).
    pub(crate) fn restore(&mut self, pending: &[u64], blob: &[u8]) {
        self.ext_pending = pending.iter().copied().collect();
        self.blob = blob.to_vec();
    }
}

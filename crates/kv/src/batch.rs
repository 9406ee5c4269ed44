//! The batch back end (batch-io §3, Figure 9b, §8.1.2 "BwTree Batch"): a page id *is* its
//! LPID; a sealed write buffer goes to the device as one `FlushBatch` (a DESC block and
//! the pages, written atomically by the device's log-structured FTL); a cache miss is one
//! `ReadLpids`. The device does placement, garbage collection and checkpoints; the host
//! keeps no mapping table and writes no checkpoint ("Checkpointing and recovering
//! BwTree's mapping table is not needed").
//!
//! Recovery is reading LPID 0, the superpage (root, height, next page id): every batch is
//! atomic, so the tree on the device is always the one the last acknowledged batch left.

use crate::KvError;
use crate::cost::Work;
use crate::io::Io;
use crate::page::{self, PAGE, Page};
use csd_device::{Command, Payload};
use csd_host::CommandIssuer;
use csd_sim::SimTime;
use csd_sim::wire::build_batch;

/// Read page `id` with `ReadLpids`; returns the page and when it arrived.
pub(crate) fn read<I: CommandIssuer>(
    io: &mut Io<'_, I>,
    id: u64,
    at: SimTime,
) -> Result<(Page, SimTime), KvError> {
    let c = io.submit(Work::User, Command::ReadLpids { lpids: vec![id] }, at)?;
    let Payload::Data(d) = c.payload else {
        return Err(KvError::Corrupt("ReadLpids returned no data".into()));
    };
    let mut p = page::blank();
    p.copy_from_slice(&d[..PAGE]);
    Ok((p, c.acct.completed))
}

/// Write sealed pages as one atomic batch; returns when the device acknowledged it.
pub(crate) fn write<I: CommandIssuer>(
    io: &mut Io<'_, I>,
    work: Work,
    pages: &[(u64, Page)],
    at: SimTime,
) -> Result<SimTime, KvError> {
    let refs: Vec<(u64, &[u8])> = pages.iter().map(|(id, p)| (*id, &p[..])).collect();
    let buffer = build_batch(&refs, PAGE).map_err(|e| KvError::Config(e.to_string()))?;
    io.stats.meta_write_bytes += PAGE as u64;
    let c = io.submit(work, Command::FlushBatch { buffer }, at)?;
    Ok(c.acct.completed)
}

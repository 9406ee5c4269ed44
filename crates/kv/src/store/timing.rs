//! The store on the event core (issue 30; docs/time-model.md "The event core"): while a
//! recording is on ([`csd_sim::events::Recording`]), the device's stages are booked in
//! modeled-arrival order and a command's completion is an instant the core may not have
//! fixed when the call returns. The host thread's own clock stays final (it waits only
//! for instants the core fixed: a queue slot, a write buffer, a drain); every decision
//! on another instant goes through the device ([`CommandIssuer::earliest`],
//! [`CommandIssuer::at_or_before`], [`CommandIssuer::resolve`]), which books only what
//! arrives by the thread's clock, so no later command is submitted behind a booking.
//!
//! Here: operation latencies reported once their ends are fixed, compaction of the
//! core's graph at operation boundaries (every instant the store and its device hold is
//! renamed), and settling every instant to its final value at the end of a recording.

use super::*;
use csd_sim::events;

impl<I: CommandIssuer> Store<I> {
    /// An operation ran from `start` to `done`. Of the operations between two calls of
    /// [`Store::drain_latencies`] only the last is kept (a read-modify-write is a get and a
    /// put; its caller reports the put, as `last_op` gives it).
    pub(super) fn note_op(&mut self, start: SimTime, done: SimTime) {
        if self.op_noted {
            self.op_times.pop();
        }
        self.op_noted = true;
        self.op_times.push((start, done));
    }

    /// Hand the modeled latency (ns) of the last operation since the previous call (see
    /// [`Store::note_op`]) to `f`, once, when its end is final: on calendars at once;
    /// while the event core records, when it has fixed that end (the rest after
    /// [`Store::settle_events`]).
    pub fn drain_latencies(&mut self, f: &mut dyn FnMut(u64)) {
        self.op_noted = false;
        self.op_times.retain(|&(start, done)| {
            let done = events::value(done);
            if done.is_final() {
                f(done.since(start));
                false
            } else {
                true
            }
        });
    }

    /// Book everything the event core recorded for this store's device and give every
    /// instant the store and the device hold its final value. Call at the end of a
    /// recording; a no-op outside one.
    pub fn settle_events(&mut self) {
        if !(events::recording() && self.dev.event_core()) {
            return;
        }
        self.dev.run_events();
        self.settle_instants(&mut events::value);
    }

    /// Compact the event core's graph when it is due ([`events::compact_due`]): what is
    /// booked is forgotten and every instant held here or in the device is renamed.
    pub(super) fn compact_events(&mut self) {
        if !events::compact_due() {
            return;
        }
        let mut roots = Vec::new();
        self.settle_instants(&mut |t| {
            roots.push(t);
            t
        });
        if let Some(remap) = events::compact(&roots) {
            self.settle_instants(&mut |t| remap.apply(t));
        }
    }

    /// Replace every instant the store and its device keep from one operation to the
    /// next by `settle(instant)`.
    fn settle_instants(&mut self, settle: &mut dyn FnMut(SimTime) -> SimTime) {
        self.clock.settle_instants(settle);
        self.buf.settle_instants(settle);
        self.cache.settle_instants(settle);
        for d in self.dirty.values_mut() {
            d.1 = settle(d.1);
        }
        for e in self.fifo.iter_mut() {
            e.1 = settle(e.1);
        }
        for (a, b) in self.op_times.iter_mut() {
            *a = settle(*a);
            *b = settle(*b);
        }
        self.last_ckpt = settle(self.last_ckpt);
        self.op_start = settle(self.op_start);
        self.op_done = settle(self.op_done);
        self.buffer_free = settle(self.buffer_free);
        self.dev.settle_instants(settle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ycsb::{self, KeyDist, Limit, Workload, YcsbConfig};
    use csd_device::{IoTarget, NvmeDevice};
    use csd_ftl::{Ftl, FtlConfig};
    use csd_host::Client;
    use csd_nand::Nand;
    use csd_sim::DeviceConfig;
    use csd_sim::events::{Recording, first_come_first_served};

    /// A store on a fresh `tiny` device where every mechanism runs often: a cache of 16
    /// pages, a write buffer of 41 pages, an I/O queue of 4, dirty pages out after 2 ms,
    /// host GC and checkpoints (block).
    fn store(interface: Interface, write_buffers: Option<usize>) -> Store<Client> {
        let cfg = DeviceConfig::preset("tiny").unwrap();
        let nand = Nand::new_in_memory(cfg).unwrap();
        let c = Client::new(NvmeDevice::new(
            Ftl::format(nand, FtlConfig::default()).unwrap(),
        ))
        .unwrap();
        let scfg = StoreConfig {
            interface,
            cache_pages: Some(16),
            write_buffer_bytes: 41 * 4096,
            queue_depth: 4,
            write_buffers,
            max_dirty_age_ns: 2_000_000,
            block: BlockOptions {
                gc: true,
                gc_start_used: 0.3,
                ..BlockOptions::default()
            },
            checkpoint_interval_ns: Some(20_000_000),
            ..StoreConfig::default()
        };
        match Store::open(c, scfg) {
            Ok(s) => s,
            Err(f) => panic!("open: {}", f.error),
        }
    }

    /// Bookings the device's calendars made behind a later arrival, so far.
    fn inversions(s: &mut Store<Client>) -> u64 {
        s.dev
            .device()
            .block()
            .utilization(1)
            .iter()
            .map(|u| u.inversions)
            .sum()
    }

    /// Issue 30 for the key-value store: on both interfaces, with write buffers bounded
    /// or not, YCSB runs on the event core with every resource first-come first-served
    /// in arrival order (the trace), no command submitted behind a booking (no late
    /// arrival), no booking outside the core, no decision on an unfixed instant, the
    /// graph compacted on the way (every held instant renamed: none stale), every
    /// operation's latency reported once, and every record readable afterwards on
    /// calendars.
    #[test]
    fn ycsb_on_the_event_core_serves_every_resource_in_arrival_order() {
        for interface in [Interface::Batch, Interface::Block] {
            for write_buffers in [None, Some(1)] {
                for (workload, seed) in [(Workload::WriteHeavy, 3), (Workload::ReadHeavy, 4)] {
                    let what =
                        format!("{interface:?} {workload:?} write buffers {write_buffers:?}");
                    let mut s = store(interface, write_buffers);
                    ycsb::load(&mut s, 3000, &mut |_| {}).unwrap();
                    let inversions0 = inversions(&mut s);
                    let rec = Recording::start().expect("no recording on this thread");
                    rec.graph(|g| {
                        g.record_trace();
                        g.set_compact_nodes(1 << 11);
                    });
                    let c = YcsbConfig {
                        records: 3000,
                        workload,
                        dist: KeyDist::Zipfian(0.99),
                        limit: Limit::Ops(3000),
                        seed,
                    };
                    let r = ycsb::run(&mut s, &c, &mut |_| {}).unwrap();
                    assert_eq!(r.ops.read_misses, 0, "{what}");
                    assert_eq!(r.modeled_latency.len(), 3000, "{what}");
                    assert!(r.modeled_ops_per_s().unwrap() > 0.0, "{what}");
                    let g = rec.finish();
                    assert_eq!(
                        (
                            g.late_arrivals(),
                            g.unrecorded(),
                            g.stale(),
                            g.unfixed_comparisons(),
                            g.pending()
                        ),
                        (0, 0, 0, 0, 0),
                        "{what}"
                    );
                    assert!(g.forgotten() > 0, "{what}: the graph was never compacted");
                    if let Err(e) = first_come_first_served(g.trace()) {
                        panic!("{what}: {e}");
                    }
                    assert_eq!(
                        inversions(&mut s),
                        inversions0,
                        "{what}: a booking behind a later arrival"
                    );
                    // Calendars again on the same store: its instants are final.
                    let c = YcsbConfig {
                        records: 3000,
                        workload: Workload::A,
                        dist: KeyDist::Uniform,
                        limit: Limit::Ops(300),
                        seed: 5,
                    };
                    let r = ycsb::run(&mut s, &c, &mut |_| {}).unwrap();
                    assert_eq!(r.ops.read_misses, 0, "{what}");
                    for i in 0..3000 {
                        assert!(
                            s.get(&ycsb::record_key(i)).unwrap().is_some(),
                            "{what}: record {i}"
                        );
                    }
                }
            }
        }
    }
}

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

//! Busy resources of the timing model (DESIGN.md "Time").
//!
//! A [`Resource`] is anything that serves one operation at a time: a flash die, a
//! channel bus, the controller's DRAM bus, the host link, an embedded core, the host
//! CPU. It keeps the instant it becomes free; [`Resource::reserve`] books it for a
//! duration starting no earlier than a given instant and returns when the booking ends.
//! There is no back-filling of idle gaps: bookings on one resource are served in the
//! order they are made, which is the FIFO behaviour of a real bus or die queue and keeps
//! every reservation O(1). Busy time and operation counts are kept so that reports can
//! show utilization and name the bottleneck.

use crate::time::SimTime;
use std::fmt;

/// One resource that serves one operation at a time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resource {
    free_at: u64,
    busy_ns: u64,
    ops: u64,
}

impl Resource {
    /// A resource that is free from time zero.
    pub const fn new() -> Resource {
        Resource {
            free_at: 0,
            busy_ns: 0,
            ops: 0,
        }
    }

    /// Book the resource for `dur_ns`, starting at `earliest` or when it becomes free,
    /// whichever is later. Returns the (start, end) of the booking.
    #[inline]
    pub fn reserve(&mut self, earliest: SimTime, dur_ns: u64) -> (SimTime, SimTime) {
        let start = self.free_at.max(earliest.0);
        let end = start.saturating_add(dur_ns);
        self.free_at = end;
        self.busy_ns = self.busy_ns.saturating_add(dur_ns);
        self.ops += 1;
        (SimTime(start), SimTime(end))
    }

    /// The instant at which the resource becomes free.
    #[inline]
    pub fn free_at(&self) -> SimTime {
        SimTime(self.free_at)
    }

    /// Total booked time, in nanoseconds.
    #[inline]
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns
    }

    /// Number of bookings made.
    #[inline]
    pub fn ops(&self) -> u64 {
        self.ops
    }

    /// Forget busy time and operation counts (keeps `free_at`), for a measurement window.
    pub fn reset_counters(&mut self) {
        self.busy_ns = 0;
        self.ops = 0;
    }

    /// Forget everything, as after a power cycle: the resource is free at `now`.
    pub fn power_cycle(&mut self, now: SimTime) {
        self.free_at = now.0;
    }
}

/// The classes of resources that reports group utilization by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceClass {
    /// Flash dies (array operations: tR, tPROG, tBERS).
    Die,
    /// Flash channel buses between the dies and the controller.
    Channel,
    /// The controller's DRAM bus.
    Dram,
    /// The host link (SATA, SAS, PCIe).
    HostLink,
    /// Embedded CPU cores of the controller.
    EmbeddedCpu,
    /// The host CPU.
    HostCpu,
}

impl ResourceClass {
    /// Every class, in data-path order.
    pub const ALL: [ResourceClass; 6] = [
        ResourceClass::Die,
        ResourceClass::Channel,
        ResourceClass::Dram,
        ResourceClass::HostLink,
        ResourceClass::EmbeddedCpu,
        ResourceClass::HostCpu,
    ];

    /// snake_case name used in JSON keys and tables.
    pub fn key(self) -> &'static str {
        match self {
            ResourceClass::Die => "die",
            ResourceClass::Channel => "channel",
            ResourceClass::Dram => "dram",
            ResourceClass::HostLink => "host_link",
            ResourceClass::EmbeddedCpu => "embedded_cpu",
            ResourceClass::HostCpu => "host_cpu",
        }
    }
}

impl fmt::Display for ResourceClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// Utilization of one resource class over a window: the mean and the maximum over the
/// members of the class (e.g. the busiest die), both as fractions of the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Utilization {
    /// Which class.
    pub class: ResourceClass,
    /// How many resources of this class exist.
    pub members: usize,
    /// Mean busy fraction over the members.
    pub mean: f64,
    /// Busy fraction of the busiest member.
    pub max: f64,
    /// Total busy nanoseconds, summed over members.
    pub busy_ns: u64,
}

impl Utilization {
    /// Summarize `resources` of one class over a window of `window_ns`.
    pub fn of<'a>(
        class: ResourceClass,
        resources: impl IntoIterator<Item = &'a Resource>,
        window_ns: u64,
    ) -> Utilization {
        let mut members = 0usize;
        let mut total = 0u64;
        let mut max = 0u64;
        for r in resources {
            members += 1;
            total += r.busy_ns();
            max = max.max(r.busy_ns());
        }
        let w = window_ns.max(1) as f64;
        Utilization {
            class,
            members,
            mean: if members == 0 {
                0.0
            } else {
                total as f64 / members as f64 / w
            },
            max: max as f64 / w,
            busy_ns: total,
        }
    }
}

/// The bottleneck among `utils`: the class whose mean utilization is highest (ties go to
/// the one earlier in the data path). `None` when nothing was busy.
pub fn bottleneck(utils: &[Utilization]) -> Option<ResourceClass> {
    utils
        .iter()
        .filter(|u| u.busy_ns > 0)
        .fold(None::<&Utilization>, |best, u| match best {
            Some(b) if b.mean >= u.mean => Some(b),
            _ => Some(u),
        })
        .map(|u| u.class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_queue_in_order() {
        let mut r = Resource::new();
        assert_eq!(r.reserve(SimTime(10), 5), (SimTime(10), SimTime(15)));
        // Asked earlier than free: waits.
        assert_eq!(r.reserve(SimTime(0), 5), (SimTime(15), SimTime(20)));
        // Asked later: idles until then.
        assert_eq!(r.reserve(SimTime(100), 1), (SimTime(100), SimTime(101)));
        assert_eq!(r.busy_ns(), 11);
        assert_eq!(r.ops(), 3);
    }

    #[test]
    fn bottleneck_is_busiest_class() {
        let mut a = Resource::new();
        a.reserve(SimTime(0), 50);
        let mut b = Resource::new();
        b.reserve(SimTime(0), 90);
        let u = [
            Utilization::of(ResourceClass::Die, [&a], 100),
            Utilization::of(ResourceClass::HostLink, [&b], 100),
        ];
        assert_eq!(bottleneck(&u), Some(ResourceClass::HostLink));
        assert!((u[1].mean - 0.9).abs() < 1e-12);
        assert_eq!(bottleneck(&[]), None);
    }
}

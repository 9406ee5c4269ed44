//! A device shared by many host threads: each thread holds a [`DeviceHandle`] with its
//! own queue pair and its own clock; commands execute one at a time under a lock (the
//! device model is serial, its resources keep the busy-until times that make
//! concurrency visible in modeled time), and in paced mode a thread then sleeps until
//! its command's modeled completion *outside* the lock, so other threads' commands are
//! submitted meanwhile and queue on the device as they would on a real drive.
//!
//! Choices: a handle submits at the wall-clock-derived simulated instant in paced mode
//! (so the device sees real arrival times) and at its own clock in virtual mode (a
//! thread that waits for each command); per-handle clocks in virtual mode mean threads
//! interleave by lock order, which is deterministic only for one thread.

use crate::client::{CommandIssuer, HostError, checked, complete, device_now};
use csd_device::{Completion, IdentifyInfo, NvmeDevice, QueueId};
use csd_sim::{ClockMode, Pacer, SimTime};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use crate::client::ClientTotals;

struct Inner {
    dev: Mutex<NvmeDevice>,
    pacer: RwLock<Pacer>,
    /// The latest completion instant of any command (ns), where a clock switch starts.
    latest: AtomicU64,
    identify: IdentifyInfo,
    totals: Mutex<ClientTotals>,
}

/// A device shared by host threads. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct SharedDevice {
    inner: Arc<Inner>,
}

impl SharedDevice {
    /// Share `dev` under clock `mode`. The pacer's origin is the device's current time,
    /// so a paced run starts "now".
    pub fn new(dev: NvmeDevice, mode: ClockMode) -> Result<SharedDevice, HostError> {
        let mut dev = dev;
        let origin = device_now(&dev);
        // Identify through a temporary queue pair.
        let qid = create_qp(&mut dev)?;
        let identify = match complete(&mut dev, qid, csd_device::Command::Identify, origin)
            .map(|c| c.payload)
        {
            Ok(csd_device::Payload::Identify(info)) => info,
            Ok(_) => return Err(HostError::Invalid("Identify returned no data".into())),
            Err(e) => return Err(e),
        };
        let _ = dev.delete_queue_pair(qid);
        Ok(SharedDevice {
            inner: Arc::new(Inner {
                dev: Mutex::new(dev),
                pacer: RwLock::new(Pacer::new(mode, origin)),
                latest: AtomicU64::new(origin.ns()),
                identify,
                totals: Mutex::new(ClientTotals::default()),
            }),
        })
    }

    /// A new handle with its own queue pair (at most 64 exist at once).
    pub fn handle(&self) -> Result<DeviceHandle, HostError> {
        let mut dev = self.lock();
        let qid = create_qp(&mut dev)?;
        let now = device_now(&dev);
        Ok(DeviceHandle {
            shared: self.clone(),
            qid,
            now,
        })
    }

    /// What the device said about itself.
    pub fn identify(&self) -> &IdentifyInfo {
        &self.inner.identify
    }

    /// The pacer (to wait for simulated instants or read the paced "now"); a copy, so
    /// that a later [`set_clock`](SharedDevice::set_clock) does not change it.
    pub fn pacer(&self) -> Pacer {
        self.inner
            .pacer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Switch the clock mode from now on: simulated time continues from the latest
    /// completion any handle has seen, mapped to the wall clock now. Used to build state
    /// quickly in virtual time (a benchmark's preload) and then measure in paced time.
    /// Handles whose own clock is behind move up to that instant with their next command.
    pub fn set_clock(&self, mode: ClockMode) {
        let origin = {
            let dev = self.lock();
            dev.block()
                .controller()
                .now()
                .max(SimTime::from_ns(self.inner.latest.load(Ordering::Acquire)))
        };
        *self
            .inner
            .pacer
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Pacer::new(mode, origin);
    }

    /// Totals of every command issued through any handle.
    pub fn totals(&self) -> ClientTotals {
        *self.inner.totals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lock the device for inspection, fault injection or shutdown. Hold it briefly.
    pub fn lock(&self) -> MutexGuard<'_, NvmeDevice> {
        // A panic while holding the lock leaves the device in a state that a later
        // command would observe anyway; recover the guard rather than poison every
        // other thread.
        self.inner.dev.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take the device back once every handle and clone has been dropped.
    pub fn into_device(self) -> Result<NvmeDevice, SharedDevice> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => Ok(inner.dev.into_inner().unwrap_or_else(|p| p.into_inner())),
            Err(inner) => Err(SharedDevice { inner }),
        }
    }
}

fn create_qp(dev: &mut NvmeDevice) -> Result<QueueId, HostError> {
    dev.create_queue_pair(64)
        .map_err(|status| HostError::Device {
            command: "CreateQueuePair",
            status,
        })
}

/// One thread's connection to a [`SharedDevice`]: a queue pair and a clock.
pub struct DeviceHandle {
    shared: SharedDevice,
    qid: QueueId,
    now: SimTime,
}

impl DeviceHandle {
    /// The device this handle talks to.
    pub fn shared(&self) -> &SharedDevice {
        &self.shared
    }
}

impl CommandIssuer for DeviceHandle {
    fn exec_at(&mut self, cmd: csd_device::Command, at: SimTime) -> Result<Completion, HostError> {
        let inner = &self.shared.inner;
        let name = cmd.name();
        let pacer = self.shared.pacer();
        // Paced: a submission in the future waits for it; the device sees the real
        // arrival instant.
        pacer.wait_until(at);
        let at = pacer.now_sim().map_or(at, |now| now.max(at));
        let result = {
            let mut dev = self.shared.lock();
            complete(&mut dev, self.qid, cmd, at)
        };
        let c = result?;
        inner
            .totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(&c.acct);
        self.now = self.now.max(c.acct.completed);
        inner
            .latest
            .fetch_max(c.acct.completed.ns(), Ordering::AcqRel);
        pacer.wait_until(c.acct.completed);
        checked(name, c)
    }

    fn identify(&self) -> &IdentifyInfo {
        &self.shared.inner.identify
    }

    fn now(&self) -> SimTime {
        self.now
    }

    fn wait_until(&mut self, t: SimTime) {
        self.shared.pacer().wait_until(t);
        self.now = self.now.max(t);
        self.shared.inner.latest.fetch_max(t.ns(), Ordering::AcqRel);
    }
}

impl Drop for DeviceHandle {
    fn drop(&mut self) {
        let _ = self.shared.lock().delete_queue_pair(self.qid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csd_device::NvmeDevice;
    use csd_ftl::{Ftl, FtlConfig};
    use csd_nand::Nand;
    use csd_sim::DeviceConfig;
    use std::time::Instant;

    fn shared(mode: ClockMode) -> SharedDevice {
        let cfg = DeviceConfig::preset("tiny").expect("tiny preset");
        let nand = Nand::new_in_memory(cfg).expect("nand");
        let ftl = Ftl::format(nand, FtlConfig::default()).expect("format");
        SharedDevice::new(NvmeDevice::new(ftl), mode).expect("share")
    }

    #[test]
    fn threads_write_and_read_their_own_lbas() {
        let dev = shared(ClockMode::Virtual);
        let lba_size = dev.identify().lba_size as usize;
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let dev = dev.clone();
                s.spawn(move || {
                    let mut h = dev.handle().expect("handle");
                    for i in 0..50u64 {
                        let lba = t as u64 * 100 + i;
                        let data = vec![t.wrapping_mul(31).wrapping_add(i as u8); lba_size];
                        h.write(lba, &data).expect("write");
                        assert_eq!(h.read(lba, 1).expect("read"), data);
                    }
                });
            }
        });
        let mut h = dev.handle().expect("handle");
        for t in 0..4u8 {
            for i in 0..50u64 {
                let got = h.read(t as u64 * 100 + i, 1).expect("read");
                assert!(
                    got.iter()
                        .all(|&b| b == t.wrapping_mul(31).wrapping_add(i as u8))
                );
            }
        }
        let tot = dev.totals();
        assert_eq!(tot.commands, 4 * 100 + 200);
        drop(h);
        assert!(dev.into_device().is_ok(), "all handles dropped");
    }

    /// Read one LBA at paced scale 1000: (wall seconds, modeled seconds x 1000, completion).
    fn paced_read(h: &mut DeviceHandle, lba: u64) -> (f64, f64, Completion) {
        let t0 = Instant::now();
        let c = h
            .exec(csd_device::Command::Read { lba, blocks: 1 })
            .expect("read");
        let wall = t0.elapsed().as_secs_f64();
        let modeled = c.acct.latency_ns as f64 / 1e9 * 1000.0;
        (wall, modeled, c)
    }

    #[test]
    fn paced_mode_makes_threads_wait_for_modeled_completion() {
        // Scale 1000: every modeled microsecond is a wall millisecond.
        let dev = shared(ClockMode::Paced { scale: 1000.0 });
        let mut h = dev.handle().expect("handle");
        let (wall, modeled, _) = paced_read(&mut h, 0);
        assert!(modeled > 0.0);
        assert!(
            wall >= modeled * 0.9,
            "wall {wall} s < modeled x scale {modeled} s"
        );
    }

    #[test]
    fn switching_from_virtual_to_paced_starts_the_wall_clock_now() {
        let dev = shared(ClockMode::Virtual);
        let lba_size = dev.identify().lba_size as usize;
        let mut h = dev.handle().expect("handle");
        // Modeled work in virtual time (no wall-clock wait): at scale 1000 its backlog
        // would be tens of seconds of wall clock if the switch did not start from it.
        for i in 0..400u64 {
            h.write(i, &vec![i as u8; lba_size]).expect("write");
        }
        h.flush().expect("flush");
        let virtual_end = h.now();
        assert!(virtual_end.ns() > 10_000_000, "{virtual_end:?}");
        // Paced at scale 1000 from here: a read waits its own latency x 1000 on the wall
        // clock, not the virtual backlog, and simulated time does not go backwards.
        dev.set_clock(ClockMode::Paced { scale: 1000.0 });
        let mut h2 = dev.handle().expect("handle");
        let (wall, modeled, c) = paced_read(&mut h2, 1);
        assert!(c.acct.completed >= virtual_end);
        assert!(wall >= modeled * 0.9, "wall {wall} s < modeled {modeled} s");
        assert!(
            wall < modeled * 3.0 + 0.5,
            "wall {wall} s: waited for the virtual backlog too (modeled {modeled} s)"
        );
        assert_eq!(h2.read(1, 1).expect("read"), vec![1u8; lba_size]);
    }

    #[test]
    fn errors_change_nothing_and_handles_free_their_queue() {
        let dev = shared(ClockMode::Virtual);
        let lbas = dev.identify().lbas;
        let mut h = dev.handle().expect("handle");
        assert!(h.read(lbas, 1).is_err());
        assert_eq!(
            dev.totals().commands,
            1,
            "the failed command is still counted"
        );
        drop(h);
        // 64 handles at once is the limit; after dropping, handles can be made again.
        let hs: Vec<_> = (0..64).map(|_| dev.handle().expect("handle")).collect();
        assert!(dev.handle().is_err());
        drop(hs);
        assert!(dev.handle().is_ok());
    }
}

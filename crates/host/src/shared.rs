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

use crate::client::{CommandIssuer, HostError, checked, complete};
use csd_device::{Completion, IdentifyInfo, NvmeDevice, QueueId};
use csd_sim::{ClockMode, Pacer, SimTime};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::client::ClientTotals;

struct Inner {
    dev: Mutex<NvmeDevice>,
    pacer: Pacer,
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
        let origin = dev.block().controller().now();
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
                pacer: Pacer::new(mode, origin),
                identify,
                totals: Mutex::new(ClientTotals::default()),
            }),
        })
    }

    /// A new handle with its own queue pair (at most 64 exist at once).
    pub fn handle(&self) -> Result<DeviceHandle, HostError> {
        let mut dev = self.lock();
        let qid = create_qp(&mut dev)?;
        let now = dev.block().controller().now();
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

    /// The clock mode.
    pub fn clock_mode(&self) -> ClockMode {
        self.inner.pacer.mode()
    }

    /// The pacer (to wait for simulated instants or read the paced "now").
    pub fn pacer(&self) -> &Pacer {
        &self.inner.pacer
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
        // Paced: a submission in the future waits for it; the device sees the real
        // arrival instant.
        inner.pacer.wait_until(at);
        let at = inner.pacer.now_sim().map_or(at, |now| now.max(at));
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
        inner.pacer.wait_until(c.acct.completed);
        checked(name, c)
    }

    fn identify(&self) -> &IdentifyInfo {
        &self.shared.inner.identify
    }

    fn now(&self) -> SimTime {
        self.now
    }

    fn wait_until(&mut self, t: SimTime) {
        self.shared.inner.pacer.wait_until(t);
        self.now = self.now.max(t);
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

    #[test]
    fn paced_mode_makes_threads_wait_for_modeled_completion() {
        // Scale 1000: every modeled microsecond is a wall millisecond.
        let dev = shared(ClockMode::Paced { scale: 1000.0 });
        let mut h = dev.handle().expect("handle");
        let t0 = Instant::now();
        let c = h
            .exec(csd_device::Command::Read { lba: 0, blocks: 1 })
            .expect("read");
        let wall = t0.elapsed().as_secs_f64();
        let modeled = c.acct.latency_ns as f64 / 1e9 * 1000.0;
        assert!(modeled > 0.0);
        assert!(
            wall >= modeled * 0.9,
            "wall {wall} s < modeled x scale {modeled} s"
        );
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

//! NVML samples, aggregated per device and per process.

use crate::model::snapshot::{GpuReport, MigInstanceReport, ProcessGpuReport};
use crate::nvml::{NvmlStatus, Sample};
use std::collections::{BTreeMap, BTreeSet};

/// A running mean and maximum of an optional value.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stat {
    sum: u128,
    n: u64,
    max: u64,
}

impl Stat {
    pub fn add(&mut self, v: Option<u64>) {
        if let Some(v) = v {
            self.sum += u128::from(v);
            self.n += 1;
            self.max = self.max.max(v);
        }
    }

    /// Mean, rounded to 0.1; `None` without values.
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| ((self.sum as f64 / self.n as f64) * 10.0).round() / 10.0)
    }

    pub fn max(&self) -> Option<u64> {
        (self.n > 0).then_some(self.max)
    }
}

#[derive(Clone, Debug, Default)]
struct Device {
    name: String,
    uuid: String,
    samples: u64,
    gpu_util: Stat,
    mem_util: Stat,
    mem_used: Stat,
    mem_total: Option<u64>,
    sm_clock: Stat,
    power_mw: Stat,
    temp: Stat,
    /// Pids NVML listed on the device.
    pids: BTreeSet<u32>,
    /// Rounds in which each throttle reason was in force.
    throttled: BTreeMap<&'static str, u64>,
    pcie_tx: Stat,
    pcie_rx: Stat,
    /// The latest volatile ECC counts.
    ecc: (Option<u64>, Option<u64>),
    /// XID error codes, in order (the first [`MAX_XIDS`]), and how many there were.
    xids: Vec<u64>,
    xid_count: u64,
    ecc_double_bit_events: u64,
    /// The latest round's health (the metrics show it).
    health_now: Option<crate::nvml::DeviceHealth>,
}

/// XID codes kept per device (a storm is counted, not kept).
pub const MAX_XIDS: usize = 32;

/// One process's NVML figures.
#[derive(Clone, Debug, Default)]
pub struct ProcGpu {
    pub samples: u64,
    pub devices: BTreeSet<u32>,
    pub used_bytes: Stat,
    pub sm_util: Stat,
    pub mem_util: Stat,
    /// The latest round's figures (the live view shows them).
    pub last_sm_util: Option<u32>,
    pub last_used_bytes: Option<u64>,
    /// The MIG instances NVML placed it on: (GPU, GPU instance, compute instance).
    pub mig: BTreeSet<(u32, u32, u32)>,
}

impl ProcGpu {
    pub fn report(&self) -> Option<ProcessGpuReport> {
        (self.samples > 0).then(|| ProcessGpuReport {
            samples: self.samples,
            devices: self.devices.iter().copied().collect(),
            mig: self
                .mig
                .iter()
                .map(
                    |&(device, gpu_instance, compute_instance)| MigInstanceReport {
                        device,
                        gpu_instance,
                        compute_instance,
                    },
                )
                .collect(),
            memory_max_bytes: self.used_bytes.max(),
            sm_util_avg: self.sm_util.mean(),
            mem_util_avg: self.mem_util.mean(),
        })
    }
}

/// Per-device aggregates and NVML's status.
#[derive(Clone, Debug, Default)]
pub struct Gpus {
    devices: BTreeMap<u32, Device>,
    /// The latest round's (utilisation %, memory used) per device.
    now: BTreeMap<u32, (Option<u32>, Option<u64>)>,
    /// The pids NVML listed on each device in the latest round (who holds it now).
    round_pids: BTreeMap<u32, Vec<u32>>,
    /// GPM figures per device, and who held each device while they were measured.
    pub gpm: crate::model::gpm::Gpm,
    pub status: NvmlStatus,
    /// The MIG instances of the GPUs in MIG mode, as the latest round listed them.
    migs: Vec<crate::nvml::MigDevice>,
}

impl Gpus {
    /// Device figures of `s` (its per-process figures are the caller's to attribute).
    pub fn apply(&mut self, s: &Sample) {
        self.status.samples += 1;
        if self.status.state.is_empty() {
            self.status.state = "ok".into();
        }
        for d in &s.devices {
            self.now.insert(d.index, (d.gpu_util, d.mem_used));
            let e = self.devices.entry(d.index).or_default();
            e.name.clone_from(&d.name);
            e.uuid.clone_from(&d.uuid);
            e.samples += 1;
            e.gpu_util.add(d.gpu_util.map(u64::from));
            e.mem_util.add(d.mem_util.map(u64::from));
            e.mem_used.add(d.mem_used);
            e.mem_total = d.mem_total.or(e.mem_total);
            e.sm_clock.add(d.sm_clock_mhz.map(u64::from));
            e.power_mw.add(d.power_mw.map(u64::from));
            e.temp.add(d.temp_c.map(u64::from));
        }
        self.round_pids.clear();
        for d in &s.devices {
            self.round_pids.insert(d.index, Vec::new());
        }
        for p in &s.processes {
            if let Some(e) = self.devices.get_mut(&p.device) {
                e.pids.insert(p.pid);
            }
            let pids = self.round_pids.entry(p.device).or_default();
            if !pids.contains(&p.pid) {
                pids.push(p.pid);
            }
        }
    }

    /// The pids NVML listed on device `index` in the latest round.
    pub fn round_pids(&self, index: u32) -> &[u32] {
        self.round_pids.get(&index).map_or(&[], Vec::as_slice)
    }

    /// Throttling, PCIe throughput, ECC counts and events of one NVML round.
    pub fn apply_health(&mut self, h: &crate::nvml::Health) {
        for d in &h.devices {
            let e = self.devices.entry(d.index).or_default();
            if let Some(bits) = d.throttle_reasons {
                for (bit, name) in crate::nvml::THROTTLE_REASONS {
                    if bits & bit != 0 {
                        *e.throttled.entry(name).or_insert(0) += 1;
                    }
                }
            }
            e.pcie_tx.add(d.pcie_tx_kbps.map(u64::from));
            e.pcie_rx.add(d.pcie_rx_kbps.map(u64::from));
            e.ecc = (d.ecc_corrected.or(e.ecc.0), d.ecc_uncorrected.or(e.ecc.1));
            e.health_now = Some(d.clone());
        }
        for ev in &h.events {
            let e = self.devices.entry(ev.device).or_default();
            match ev.kind.as_str() {
                "xid" => {
                    e.xid_count += 1;
                    if let Some(c) = ev.code
                        && e.xids.len() < MAX_XIDS
                    {
                        e.xids.push(c);
                    }
                }
                _ => e.ecc_double_bit_events += 1,
            }
        }
    }

    /// The latest round's health and the XID count so far, per device.
    pub fn health_now(&self) -> BTreeMap<u32, (crate::nvml::DeviceHealth, u64)> {
        self.devices
            .iter()
            .filter_map(|(&i, d)| d.health_now.clone().map(|h| (i, (h, d.xid_count))))
            .collect()
    }

    /// The latest round's (utilisation %, memory used) per device.
    pub fn now(&self) -> &BTreeMap<u32, (Option<u32>, Option<u64>)> {
        &self.now
    }

    /// The MIG instances of a round (the latest list replaces the one before).
    pub fn apply_mig(&mut self, instances: &[crate::nvml::MigDevice]) {
        self.migs = instances.to_vec();
    }

    /// The GPUs NVML listed, as the device-numbering rules need them.
    pub fn node_gpus(&self) -> Vec<crate::enrich::gpu_env::NodeGpu> {
        self.devices
            .iter()
            .map(|(&index, d)| crate::enrich::gpu_env::NodeGpu {
                index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                migs: crate::model::devices::node_migs(&self.migs, index),
            })
            .collect()
    }

    /// The report's `gpus`; `profiled` says whether a pid made CUDA calls gpuprofd recorded.
    pub fn report(&self, profiled: impl Fn(u32) -> bool) -> Vec<GpuReport> {
        self.devices
            .iter()
            .map(|(&index, d)| GpuReport {
                index,
                name: d.name.clone(),
                uuid: d.uuid.clone(),
                samples: d.samples,
                gpu_util_avg: d.gpu_util.mean(),
                gpu_util_max: d.gpu_util.max(),
                mem_util_avg: d.mem_util.mean(),
                memory_used_max_bytes: d.mem_used.max(),
                memory_total_bytes: d.mem_total,
                sm_clock_avg_mhz: d.sm_clock.mean(),
                power_avg_w: d.power_mw.mean().map(|mw| (mw / 100.0).round() / 10.0),
                temp_max_c: d.temp.max(),
                throttle_rounds: d
                    .throttled
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), *v))
                    .collect(),
                pcie_tx_avg_kbps: d.pcie_tx.mean(),
                pcie_rx_avg_kbps: d.pcie_rx.mean(),
                ecc_corrected: d.ecc.0,
                ecc_uncorrected: d.ecc.1,
                xid_errors: d.xids.clone(),
                xid_count: d.xid_count,
                ecc_double_bit_events: d.ecc_double_bit_events,
                // Pid 0 stands for other users' processes in a user's deep capture.
                unprofiled_pids: d
                    .pids
                    .iter()
                    .copied()
                    .filter(|&p| p != 0 && !profiled(p))
                    .collect(),
                gpm: self.gpm.report(index),
            })
            .collect()
    }
}

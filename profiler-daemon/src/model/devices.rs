//! Per-device split of a process's calls: which GPU each launch, copy, memset, sync and memory
//! operation went to. The probes put the device in the top byte of each record's `flags` (see
//! `profiler_common::device`); a call whose device no context call revealed is counted under
//! "unknown", never guessed.

use profiler_common::{CopyBody, MemBody, SyncBody, device, dir, flags, memop};
use serde::{Deserialize, Serialize};

/// What one device (or the unknown device) received from a process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStat {
    pub launches: u64,
    /// Copies, memsets excluded.
    pub copies: u64,
    pub copy_bytes: u64,
    pub memsets: u64,
    pub memset_bytes: u64,
    /// Synchronisations (CPU-blocking and GPU-side waits).
    pub syncs: u64,
    /// Allocations that succeeded, and their bytes.
    pub allocations: u64,
    pub alloc_bytes: u64,
}

/// A process's calls per device, indexed by the wire value (device + 1; 0: unknown).
#[derive(Clone, Debug, Default)]
pub struct Devices {
    by_wire: Vec<DeviceStat>,
}

impl Devices {
    #[inline]
    fn slot(&mut self, flags_: u32) -> &mut DeviceStat {
        let w = ((flags_ & flags::DEVICE_MASK) >> flags::DEVICE_SHIFT) as usize;
        if w >= self.by_wire.len() {
            self.by_wire.resize(w + 1, DeviceStat::default());
        }
        &mut self.by_wire[w]
    }

    /// `n` launches whose record (or counted key) had `flags_`.
    #[inline]
    pub fn launches(&mut self, flags_: u32, n: u64) {
        self.slot(flags_).launches += n;
    }

    /// One copy or memset; `copied`: it did not return an error (its bytes count).
    #[inline]
    pub fn copy(&mut self, c: &CopyBody, copied: bool) {
        let bytes = if copied { c.bytes } else { 0 };
        let s = self.slot(c.flags);
        if c.direction == dir::MEMSET {
            s.memsets += 1;
            s.memset_bytes = s.memset_bytes.saturating_add(bytes);
        } else {
            s.copies += 1;
            s.copy_bytes = s.copy_bytes.saturating_add(bytes);
        }
    }

    #[inline]
    pub fn sync(&mut self, s: &SyncBody) {
        self.slot(s.flags).syncs += 1;
    }

    /// An allocation, free or VMM operation: only allocations that took are counted.
    #[inline]
    pub fn mem(&mut self, m: &MemBody) {
        if (m.op == memop::ALLOC || m.op == memop::VMM_CREATE) && m.ret == 0 {
            let s = self.slot(m.flags);
            s.allocations += 1;
            s.alloc_bytes = s.alloc_bytes.saturating_add(m.bytes);
        }
    }

    /// The report rows: known devices by ordinal, then the unknown device; devices without
    /// calls left out. Empty when nothing was counted. `nvml_gpus`: the GPUs NVML listed the
    /// process on; exactly one (the usual one-process-per-GPU layout) is named on the unknown
    /// row as where those calls most likely went, in NVML's numbering (not a CUDA ordinal,
    /// which `CUDA_VISIBLE_DEVICES` renumbers), and the row stays unknown.
    pub fn report(&self, nvml_gpus: &[u32]) -> Vec<DeviceReport> {
        let row = |w: usize, s: &DeviceStat| DeviceReport {
            device: device::of((w as u32) << flags::DEVICE_SHIFT),
            launches: s.launches,
            copies: s.copies,
            copy_bytes: s.copy_bytes,
            memsets: s.memsets,
            memset_bytes: s.memset_bytes,
            syncs: s.syncs,
            allocations: s.allocations,
            alloc_bytes: s.alloc_bytes,
            nvml_gpu: None,
            mig: None,
        };
        let used = |s: &DeviceStat| *s != DeviceStat::default();
        let mut v: Vec<DeviceReport> = self
            .by_wire
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, s)| used(s))
            .map(|(w, s)| row(w, s))
            .collect();
        if let Some(u) = self.by_wire.first().filter(|s| used(s)) {
            v.push(DeviceReport {
                nvml_gpu: match nvml_gpus {
                    [one] => Some(*one),
                    _ => None,
                },
                ..row(0, u)
            });
        }
        v
    }
}

/// Names the NVML GPU of each known device row, where the process's environment `env` says
/// which of the node's `gpus` its CUDA ordinal is (`crate::enrich::gpu_env`). Rows stay
/// without one where the environment was not read, NVML listed no GPU, or the rules cannot
/// tell; the unknown row keeps what [`Devices::report`] gave it.
pub fn name_node_gpus(
    rows: &mut [DeviceReport],
    env: Option<&crate::enrich::gpu_env::GpuEnv>,
    gpus: &[crate::enrich::gpu_env::NodeGpu],
) {
    let Some(env) = env else { return };
    for r in rows.iter_mut() {
        if let Some(ord) = r.device {
            let Ok(at) = env.resolve(ord, gpus) else {
                continue;
            };
            r.nvml_gpu = Some(at.gpu.index);
            r.mig = at.mig.map(|m| crate::model::snapshot::MigInstanceReport {
                device: at.gpu.index,
                gpu_instance: m.gpu_instance,
                compute_instance: m.compute_instance,
            });
        }
    }
}

/// The flags of a record that carries a device (launches, copies, memsets, syncs, memory
/// operations), `None` for the other kinds.
pub fn device_flags(ev: &profiler_common::decode::Event) -> Option<u32> {
    use profiler_common::decode::Event;
    match ev {
        Event::Launch(_, l) => Some(l.flags),
        Event::Launches(_, l) => Some(l.flags),
        Event::Copy(_, c) => Some(c.flags),
        Event::Sync(_, s) => Some(s.flags),
        Event::Mem(_, m) => Some(m.flags),
        // An NCCL collective or send/recv went to its stream's device; a communicator's
        // creation, queries and end are kept whatever the device (they name the communicator).
        Event::Nccl(_, n) if profiler_common::nccl::call::is_op(n.call) => Some(n.flags),
        _ => None,
    }
}

/// `--device N`: whether a record is kept. Records without a device (names, process ends,
/// stacks, …) are kept; a call whose device is unknown is not device `N`'s.
pub fn selected(ev: &profiler_common::decode::Event, want: u32) -> bool {
    device_flags(ev).is_none_or(|f| device::of(f) == Some(want))
}

/// Which node GPU (NVML index) each process's CUDA devices are: the processes' environments
/// and NVML's GPUs (`report --gpu N`).
#[derive(Clone, Debug, Default)]
pub struct NodeGpuMap {
    pub envs: std::collections::HashMap<u32, crate::enrich::gpu_env::GpuEnv>,
    pub gpus: Vec<crate::enrich::gpu_env::NodeGpu>,
}

/// Where a record went, as a node GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeGpuOf {
    /// The record carries no device (an NCCL call, a process's exit, …).
    NoDevice,
    /// The node GPU (NVML index).
    Gpu(u32),
    /// It carries a device that cannot be named: the CUDA device was not learnt, the process's
    /// environment was not read, NVML listed no GPU, or CUDA's numbering rules cannot tell.
    Unknown,
}

impl NodeGpuMap {
    /// The node GPU record `ev` went to.
    pub fn of(&self, ev: &profiler_common::decode::Event) -> NodeGpuOf {
        let Some(f) = device_flags(ev) else {
            return NodeGpuOf::NoDevice;
        };
        let tgid = ev.header().tgid;
        match (device::of(f), self.envs.get(&tgid)) {
            (Some(ord), Some(env)) => env
                .resolve(ord, &self.gpus)
                .map_or(NodeGpuOf::Unknown, |r| NodeGpuOf::Gpu(r.gpu.index)),
            _ => NodeGpuOf::Unknown,
        }
    }
}

impl DeviceReport {
    /// The node GPU this row's calls went to as a metric label: its NVML index where the row's
    /// device is known and the process's environment names it, `unknown` otherwise (the
    /// unknown row's likely GPU is a guess, not a label).
    pub fn node_gpu_label(&self) -> String {
        match (self.device, self.nvml_gpu) {
            (Some(_), Some(g)) => g.to_string(),
            _ => "unknown".to_owned(),
        }
    }
}

/// One device's share of a process's calls (`processes[].devices[]` in the JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// The CUDA device ordinal; `null`: calls whose device gpuprofd could not learn (a context
    /// made current before it attached and never revealed since).
    pub device: Option<u32>,
    pub launches: u64,
    pub copies: u64,
    pub copy_bytes: u64,
    pub memsets: u64,
    pub memset_bytes: u64,
    pub syncs: u64,
    pub allocations: u64,
    pub alloc_bytes: u64,
    /// The node's GPU (NVML index) this row's calls went to. A known device: the one its
    /// CUDA ordinal is under the process's `CUDA_VISIBLE_DEVICES` / `NVIDIA_VISIBLE_DEVICES`
    /// (exact, by CUDA's rules; absent where they cannot tell). The unknown row of a process
    /// NVML listed on exactly one GPU: that GPU, the most likely (the row stays unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_gpu: Option<u32>,
    /// The MIG instance of `nvml_gpu` this row's calls went to, where the process's
    /// environment names one (`MIG-…`: CUDA then enumerates that instance as device 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<crate::model::snapshot::MigInstanceReport>,
}

/// The MIG instances of GPU `device` among `instances` (what NVML listed), for the
/// device-numbering rules.
pub fn node_migs(
    instances: &[crate::nvml::MigDevice],
    device: u32,
) -> Vec<crate::enrich::gpu_env::NodeMig> {
    instances
        .iter()
        .filter(|m| m.device == device)
        .map(|m| crate::enrich::gpu_env::NodeMig {
            uuid: m.uuid.clone(),
            gpu_instance: m.gpu_instance,
            compute_instance: m.compute_instance,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(dev: Option<u32>) -> u32 {
        device::with(0, dev.map_or(0, |d| device::wire(d as i64)))
    }

    #[test]
    fn calls_are_split_by_the_device_in_their_flags_unknown_last() {
        let mut d = Devices::default();
        d.launches(on(Some(1)), 5);
        d.launches(on(None), 3);
        d.launches(on(Some(0)), 2);
        let c = CopyBody {
            bytes: 100,
            direction: dir::H2D,
            flags: on(Some(1)),
            ..Default::default()
        };
        d.copy(&c, true);
        d.copy(&c, false);
        let m = CopyBody {
            bytes: 7,
            direction: dir::MEMSET,
            flags: on(Some(0)),
            ..Default::default()
        };
        d.copy(&m, true);
        let r = d.report(&[]);
        let got: Vec<_> = r
            .iter()
            .map(|r| (r.device, r.launches, r.copies, r.copy_bytes, r.memsets))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some(0), 2, 0, 0, 1),
                (Some(1), 5, 2, 100, 0),
                (None, 3, 0, 0, 0)
            ]
        );
    }

    #[test]
    fn the_unknown_row_names_the_one_gpu_nvml_lists_and_stays_unknown() {
        let mut d = Devices::default();
        d.launches(on(None), 3);
        d.launches(on(Some(0)), 1);
        let r = d.report(&[5]);
        assert_eq!((r[0].device, r[0].nvml_gpu), (Some(0), None));
        assert_eq!((r[1].device, r[1].nvml_gpu), (None, Some(5)));
        assert_eq!(d.report(&[5, 6])[1].nvml_gpu, None);
        assert_eq!(d.report(&[])[1].nvml_gpu, None);
    }

    /// `--gpu`: a process told `CUDA_VISIBLE_DEVICES=2,0` calls its device 0 the node's GPU 2
    /// and its device 1 GPU 0; a process whose environment was not read, or a device the
    /// process cannot have, is unknown; a record without a device is none.
    #[test]
    fn cuda_devices_map_to_node_gpus_through_each_process_environment() {
        use crate::enrich::gpu_env::{GpuEnv, NodeGpu};
        use profiler_common::decode::Event;
        use profiler_common::{Header, LaunchBody};
        let map = NodeGpuMap {
            envs: std::collections::HashMap::from([(
                7,
                GpuEnv {
                    cuda_visible: Some("2,0".into()),
                    nvidia_visible: None,
                    device_order: None,
                    in_container: false,
                },
            )]),
            gpus: (0..4)
                .map(|i| NodeGpu {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    name: "NVIDIA H100 80GB HBM3".into(),
                    migs: Vec::new(),
                })
                .collect(),
        };
        let launch = |tgid, dev: Option<u32>| {
            Event::Launch(
                Header {
                    kind: profiler_common::kind::LAUNCH,
                    tgid,
                    tid: tgid,
                    ..Default::default()
                },
                LaunchBody {
                    flags: on(dev),
                    ..Default::default()
                },
            )
        };
        assert_eq!(map.of(&launch(7, Some(0))), NodeGpuOf::Gpu(2));
        assert_eq!(map.of(&launch(7, Some(1))), NodeGpuOf::Gpu(0));
        assert_eq!(map.of(&launch(7, Some(2))), NodeGpuOf::Unknown);
        assert_eq!(map.of(&launch(7, None)), NodeGpuOf::Unknown);
        assert_eq!(map.of(&launch(8, Some(0))), NodeGpuOf::Unknown);
        let exit = Event::Exit(
            Header {
                kind: profiler_common::kind::EXIT,
                tgid: 7,
                ..Default::default()
            },
            Default::default(),
        );
        assert_eq!(map.of(&exit), NodeGpuOf::NoDevice);
    }

    #[test]
    fn a_record_made_before_device_attribution_reads_as_unknown() {
        assert_eq!(device::of(flags::HAS_RETURN | flags::ASYNC), None);
        assert_eq!(
            device::of(device::with(flags::ASYNC, device::wire(3))),
            Some(3)
        );
        assert_eq!(device::wire(-1), 0);
        assert_eq!(device::wire(255), 0);
    }
}

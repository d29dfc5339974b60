//! NVML sampling: what the GPUs themselves report, beside what the probes saw.
//!
//! A thread samples every device once per period through `nvml-wrapper` (which loads
//! `libnvidia-ml.so.1` at run time): utilisation (GPU, memory), memory used/total, SM clock,
//! power, temperature, and per process the GPU memory it holds (`nvmlDeviceGetComputeRunningProcesses`)
//! and its SM/memory utilisation samples since the previous call
//! (`nvmlDeviceGetProcessUtilization` with the last timestamp seen). NVML reports host pids, which
//! are the tgids the probes record, so processes in containers match directly.
//!
//! The same round reads GPM's measured device activity on Hopper and later GPUs ([`gpm`]).
//!
//! A machine without NVML, or an NVML that fails mid-run, never stops a capture: the sampler
//! says why once, and the report says how far sampling got ([`NvmlStatus`]).

pub mod gpm;
pub mod mig;

pub use mig::{MigDevice, MigPlacement, MigRound};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// One device at one moment. `None`: the device does not report it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSample {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub gpu_util: Option<u32>,
    pub mem_util: Option<u32>,
    pub mem_used: Option<u64>,
    pub mem_total: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    pub power_mw: Option<u32>,
    pub temp_c: Option<u32>,
}

/// One process on one device at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub device: u32,
    pub pid: u32,
    /// GPU memory the process holds (all of it, not only what the hooked APIs allocated).
    pub used_bytes: Option<u64>,
    /// SM and memory utilisation attributed to the process since the previous sample.
    pub sm_util: Option<u32>,
    pub mem_util: Option<u32>,
}

/// One sampling round.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// CLOCK_MONOTONIC, as the probes' records.
    pub ts_ns: u64,
    pub devices: Vec<DeviceSample>,
    pub processes: Vec<ProcessSample>,
    /// Throttling, PCIe, ECC and XID events of the same round. Not part of this struct's
    /// encoding in capture files (that stays as older files have it): written as a frame of
    /// its own (the capture file's `NvmlHealth` frame).
    #[serde(skip)]
    pub health: Option<Health>,
    /// GPM figures of the same round (measured device activity, Hopper and later; see
    /// [`gpm`]). Like `health`, a frame of its own in capture files (`NvmlGpm`).
    #[serde(skip)]
    pub gpm: Option<gpm::Gpm>,
    /// MIG, where a GPU is in MIG mode: each process's instance and each GPU's instances
    /// (see [`mig`]). Like `health`, a frame of its own in capture files (`NvmlMig`), written
    /// only when there is any.
    #[serde(skip)]
    pub mig: MigRound,
}

/// What else NVML says of the devices' health in one round.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub ts_ns: u64,
    pub devices: Vec<DeviceHealth>,
    /// Events since the previous round (XID errors, double-bit ECC errors).
    pub events: Vec<GpuEvent>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceHealth {
    pub index: u32,
    /// `nvmlClocksThrottleReason*` bits in force now ([`THROTTLE_REASONS`] names them).
    pub throttle_reasons: Option<u64>,
    /// PCIe throughput over NVML's last 20 ms window, KB/s.
    pub pcie_tx_kbps: Option<u32>,
    pub pcie_rx_kbps: Option<u32>,
    /// Volatile ECC error counts (since the driver loaded).
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuEvent {
    pub device: u32,
    /// `xid` or `ecc_double_bit`.
    pub kind: String,
    /// The XID error code, for `xid`.
    pub code: Option<u64>,
}

/// nvml.h's throttle reason bits, by the names reports use.
pub const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// Events drained per round at most (a storm cannot hold the sampler).
const MAX_EVENTS_PER_ROUND: usize = 64;

/// What the sampler tells the session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Message {
    Sample(Sample),
    /// Sampling stopped for good (NVML missing, or failing): why.
    Stopped(String),
}

/// How NVML sampling went, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlStatus {
    /// `ok`, `unavailable` (never worked), `failed` (worked, then stopped) or `off` (--no-nvml).
    pub state: String,
    /// Why, when not `ok`.
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub detail: String,
    pub samples: u64,
}

/// Rounds that fail in a row before the sampler gives up.
const MAX_FAILED_ROUNDS: u32 = 3;

/// Initialises NVML and starts the sampler thread: one [`Message`] per round on the returned
/// channel. Returns why not when NVML cannot be used here (known before the capture starts).
pub fn start(lib: Option<PathBuf>, period: Duration) -> Result<mpsc::Receiver<Message>, String> {
    let (tx, rx) = mpsc::channel(64);
    let (init_tx, init_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("gpuprofd-nvml".into())
        .spawn(move || {
            let mut b = Nvml::builder();
            if let Some(p) = &lib {
                b.lib_path(p.as_os_str());
            }
            match b.init() {
                Ok(nvml) => {
                    let _ = init_tx.send(Ok(()));
                    run(&nvml, period, tx);
                }
                Err(e) => {
                    let _ = init_tx.send(Err(describe_init(&e, lib.as_ref())));
                }
            }
        })
        .map_err(|e| format!("cannot start the NVML sampler thread: {e}"))?;
    init_rx
        .recv()
        .map_err(|_| "the NVML sampler thread ended during initialisation".to_owned())??;
    Ok(rx)
}

/// An event set with XID and double-bit ECC events of every device that supports them
/// (`None`: no device does, or the driver has no events).
fn event_set(nvml: &Nvml) -> Option<nvml_wrapper::EventSet<'_>> {
    use nvml_wrapper::bitmasks::event::EventTypes;
    let mut set = nvml.create_event_set().ok()?;
    let mut any = false;
    for i in 0..nvml.device_count().ok()? {
        let Ok(d) = nvml.device_by_index(i) else {
            continue;
        };
        let want = d.supported_event_types().ok()?
            & (EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR);
        if want.is_empty() {
            continue;
        }
        set = d.register_events(want, set).ok()?;
        any = true;
    }
    any.then_some(set)
}

/// The events waiting in `set` (no blocking).
fn drain_events(set: &nvml_wrapper::EventSet<'_>) -> Vec<GpuEvent> {
    use nvml_wrapper::bitmasks::event::EventTypes;
    use nvml_wrapper::enums::event::XidError;
    let mut out = Vec::new();
    while out.len() < MAX_EVENTS_PER_ROUND {
        let Ok(e) = set.wait(0) else { break };
        let device = e.device.index().unwrap_or(u32::MAX);
        if e.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
            out.push(GpuEvent {
                device,
                kind: "xid".into(),
                code: match e.event_data {
                    Some(XidError::Value(v)) => Some(v),
                    _ => None,
                },
            });
        } else if e.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR) {
            out.push(GpuEvent {
                device,
                kind: "ecc_double_bit".into(),
                code: None,
            });
        }
    }
    out
}

fn run(nvml: &Nvml, period: Duration, tx: mpsc::Sender<Message>) {
    let mut last_seen: Vec<u64> = Vec::new();
    let mut failed = 0;
    let events = event_set(nvml);
    let mut gpm = gpm::Sampler::new();
    loop {
        match round(nvml, &mut last_seen, &mut gpm) {
            Ok(mut s) => {
                if let (Some(h), Some(set)) = (s.health.as_mut(), events.as_ref()) {
                    h.events = drain_events(set);
                }
                failed = 0;
                if tx.blocking_send(Message::Sample(s)).is_err() {
                    return; // the session ended
                }
            }
            Err(e) => {
                failed += 1;
                if failed >= MAX_FAILED_ROUNDS {
                    let _ = tx.blocking_send(Message::Stopped(format!(
                        "NVML failed {MAX_FAILED_ROUNDS} rounds in a row: {e}"
                    )));
                    return;
                }
            }
        }
        std::thread::sleep(period);
        if tx.is_closed() {
            return;
        }
    }
}

fn describe_init(e: &NvmlError, lib: Option<&PathBuf>) -> String {
    let what = lib.map_or_else(
        || "libnvidia-ml.so.1".to_owned(),
        |p| p.display().to_string(),
    );
    match e {
        NvmlError::LibloadingError(l) => format!(
            "cannot load {what} ({l}); GPU utilisation and per-process GPU memory are not \
             sampled (install the NVIDIA driver, or point --nvml-lib at the library)"
        ),
        other => format!("NVML did not initialise ({other}); GPU figures are not sampled"),
    }
}

/// One round over every device. An error from a device-wide call (count, utilisation) fails
/// the round; a value a device does not support is `None`.
fn round<'n>(
    nvml: &'n Nvml,
    last_seen: &mut Vec<u64>,
    gpm: &mut gpm::Sampler<'n>,
) -> Result<Sample, NvmlError> {
    let ts_ns = crate::sys::clock::monotonic_ns();
    let count = nvml.device_count()?;
    last_seen.resize(count as usize, 0);
    let mut devices = Vec::new();
    let mut processes = Vec::new();
    let mut mig = MigRound::default();
    let mut health = Vec::new();
    let mut gpm_devices = Vec::new();
    for index in 0..count {
        let d = nvml.device_by_index(index)?;
        let util = d.utilization_rates()?;
        gpm_devices.push(gpm.round(nvml, index, &d));
        let mem = d.memory_info().ok();
        devices.push(DeviceSample {
            index,
            name: d.name().unwrap_or_default(),
            uuid: d.uuid().unwrap_or_default(),
            gpu_util: Some(util.gpu),
            mem_util: Some(util.memory),
            mem_used: mem.as_ref().map(|m| m.used),
            mem_total: mem.as_ref().map(|m| m.total),
            sm_clock_mhz: d.clock_info(Clock::SM).ok(),
            power_mw: d.power_usage().ok(),
            temp_c: d.temperature(TemperatureSensor::Gpu).ok(),
        });
        health.push(DeviceHealth {
            index,
            throttle_reasons: d.current_throttle_reasons().ok().map(|r| r.bits()),
            pcie_tx_kbps: d.pcie_throughput(PcieUtilCounter::Send).ok(),
            pcie_rx_kbps: d.pcie_throughput(PcieUtilCounter::Receive).ok(),
            ecc_corrected: d
                .total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
                .ok(),
            ecc_uncorrected: d
                .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
                .ok(),
        });
        let listed = d.running_compute_processes().unwrap_or_default();
        // On a GPU in MIG mode, NVML names each process's GPU and compute instance.
        mig.instances.extend(mig::instances(nvml, index, &d));
        mig.placements.extend(listed.iter().filter_map(|p| {
            Some(MigPlacement {
                pid: p.pid,
                device: index,
                gpu_instance: p.gpu_instance_id?,
                compute_instance: p.compute_instance_id?,
            })
        }));
        let mut per_pid: Vec<ProcessSample> = listed
            .into_iter()
            .map(|p| ProcessSample {
                device: index,
                pid: p.pid,
                used_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
                sm_util: None,
                mem_util: None,
            })
            .collect();
        let seen = &mut last_seen[index as usize];
        if let Ok(samples) = d.process_utilization_stats(*seen) {
            for s in samples {
                *seen = (*seen).max(s.timestamp);
                match per_pid.iter_mut().find(|p| p.pid == s.pid) {
                    Some(p) => {
                        p.sm_util = Some(s.sm_util);
                        p.mem_util = Some(s.mem_util);
                    }
                    None => per_pid.push(ProcessSample {
                        device: index,
                        pid: s.pid,
                        used_bytes: None,
                        sm_util: Some(s.sm_util),
                        mem_util: Some(s.mem_util),
                    }),
                }
            }
        }
        processes.extend(per_pid);
    }
    Ok(Sample {
        ts_ns,
        devices,
        processes,
        mig,
        health: Some(Health {
            ts_ns,
            devices: health,
            events: Vec::new(),
        }),
        gpm: Some(gpm::Gpm {
            ts_ns,
            devices: gpm_devices,
        }),
    })
}

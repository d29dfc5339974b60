//! NVML sampling: what the GPUs themselves report, beside what the probes saw.
//!
//! A thread samples every device once per period through `nvml-wrapper` (which loads
//! `libnvidia-ml.so.1` at run time): utilisation (GPU, memory), memory used/total, SM clock,
//! power, temperature, and per process the GPU memory it holds (`nvmlDeviceGetComputeRunningProcesses`)
//! and its SM/memory utilisation samples since the previous call
//! (`nvmlDeviceGetProcessUtilization` with the last timestamp seen). NVML reports host pids, which
//! are the tgids the probes record, so processes in containers match directly.
//!
//! A machine without NVML, or an NVML that fails mid-run, never stops a capture: the sampler
//! says why once, and the report says how far sampling got ([`NvmlStatus`]).

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// One device at one moment. `None`: the device does not report it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// CLOCK_MONOTONIC, as the probes' records.
    pub ts_ns: u64,
    pub devices: Vec<DeviceSample>,
    pub processes: Vec<ProcessSample>,
}

/// What the sampler tells the session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

fn run(nvml: &Nvml, period: Duration, tx: mpsc::Sender<Message>) {
    let mut last_seen: Vec<u64> = Vec::new();
    let mut failed = 0;
    loop {
        match round(nvml, &mut last_seen) {
            Ok(s) => {
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
fn round(nvml: &Nvml, last_seen: &mut Vec<u64>) -> Result<Sample, NvmlError> {
    let ts_ns = crate::store::monotonic_ns();
    let count = nvml.device_count()?;
    last_seen.resize(count as usize, 0);
    let mut devices = Vec::new();
    let mut processes = Vec::new();
    for index in 0..count {
        let d = nvml.device_by_index(index)?;
        let util = d.utilization_rates()?;
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
        let mut per_pid: Vec<ProcessSample> = d
            .running_compute_processes()
            .unwrap_or_default()
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
    })
}

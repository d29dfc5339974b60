//! The model's snapshot schema: the report every output reads (`gpuprofd.report/1`, a public
//! contract: fields are only ever added), taken from the aggregator at any moment.

pub use crate::api::LibraryReport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::SystemTime;

/// The `schema` of every report this version writes.
pub const SCHEMA: &str = "gpuprofd.report/1";

/// What the aggregator cannot know: where and when the run happened, what was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportMeta {
    pub host: String,
    pub started_at: SystemTime,
    /// CLOCK_MONOTONIC ns at the capture's start: the origin of the report's timelines.
    pub started_mono_ns: u64,
    pub duration_ns: u64,
    /// Records lost per kind (see [`crate::capture::drops_by_kind`]).
    pub drops: BTreeMap<String, u64>,
    /// Records the probes wrote into the ring buffer, per kind.
    pub submitted: BTreeMap<String, u64>,
    /// The probes' rare paths, by name (`profiler_common::fault`); empty where not known (a
    /// capture file from before they were kept).
    pub faults: BTreeMap<String, u64>,
}

/// The whole report; `output::json::to_string_pretty` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    pub host: String,
    /// RFC 3339, UTC, whole seconds.
    pub started_at: String,
    pub duration_ns: u64,
    pub drops: BTreeMap<String, u64>,
    /// Records the probes wrote, per kind (with an in-kernel filter, only selected processes').
    pub submitted: BTreeMap<String, u64>,
    /// What the probes could not do as asked, by name: `user_read` (a call's arguments or
    /// results could not be read from the process: the fields are 0 in its record),
    /// `launch_counts_full` (the in-kernel launch counters were full: a record was written
    /// instead). Absent where not known (a capture file from an older version).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub probe_faults: BTreeMap<String, u64>,
    pub decode_errors: u64,
    /// Per-job totals, sorted by launches (descending), then key.
    pub jobs: Vec<JobReport>,
    /// Sorted by tgid.
    pub processes: Vec<ProcessReport>,
    /// How NVML sampling went (`state` `off` when it was not asked for).
    #[serde(default)]
    pub nvml: crate::nvml::NvmlStatus,
    /// What NVML reported per device, by index (empty without NVML).
    #[serde(default)]
    pub gpus: Vec<GpuReport>,
    /// The CUDA driver and runtime libraries the probes were attached to, by path.
    #[serde(default)]
    pub libraries: Vec<LibraryReport>,
    /// The launch probes' duty cycle (absent: attached all the time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_duty: Option<LaunchDutyReport>,
}

/// The launch probes' duty cycle over the run (measured: the windows and what one attach and
/// one detach of every launch link took).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchDutyReport {
    /// `WINDOW/PERIOD` as configured.
    pub cycle: String,
    pub windows: u64,
    /// Periods a deep capture held the probes attached.
    pub held_windows: u64,
    pub attached_ms: u64,
    pub observed_ms: u64,
    /// Median time to attach / detach every launch link of one window (µs).
    pub attach_us_median: Option<u64>,
    pub detach_us_median: Option<u64>,
    /// Windows whose attach failed for at least one library.
    pub failed_attaches: u64,
}

/// One GPU as NVML sampled it (derived: NVML's own averages over its sample period, averaged
/// again over gpuprofd's samples). `None`: the device does not report it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuReport {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub samples: u64,
    /// Percent of time a kernel was running, mean over the samples.
    pub gpu_util_avg: Option<f64>,
    pub gpu_util_max: Option<u64>,
    /// Percent of time device memory was read or written, mean over the samples.
    pub mem_util_avg: Option<f64>,
    pub memory_used_max_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub sm_clock_avg_mhz: Option<f64>,
    pub power_avg_w: Option<f64>,
    pub temp_max_c: Option<u64>,
    /// NVML rounds in which each clock throttle reason was in force (`sw_power_cap`,
    /// `hw_slowdown`, `sw_thermal_slowdown`, `hw_thermal_slowdown`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub throttle_rounds: BTreeMap<String, u64>,
    /// PCIe throughput NVML measured (KB/s, its 20 ms windows, averaged over the rounds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_tx_avg_kbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_rx_avg_kbps: Option<f64>,
    /// Volatile ECC error counts at the last round (since the driver loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_corrected: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected: Option<u64>,
    /// XID error codes NVML reported during the run (the first 32), and how many in all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xid_errors: Vec<u64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub xid_count: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ecc_double_bit_events: u64,
    /// Processes NVML listed on the device that made no CUDA call gpuprofd recorded (they
    /// started before it and stayed idle, use CUDA in a way it does not hook, or are graphics).
    pub unprofiled_pids: Vec<u32>,
    /// GPM: what the SMs, tensor pipes, DRAM, PCIe and NVLink did, from the device's own
    /// counters (Hopper and later); `state` `unsupported` (and why) elsewhere. Absent in
    /// captures from before GPM was sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpm: Option<GpmReport>,
}

/// One GPU's GPM figures over the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpmReport {
    /// `measured`; `unsupported` (the device or driver has no GPM: `detail` says why; the
    /// utilisation above is then NVML's only figure); `failed` (GPM stopped working: why);
    /// `pending` (one sample only: GPM needs two).
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// `measured` when there are figures: they come from the device's counters, not from
    /// gpuprofd's reasoning.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// NVML rounds with figures (each over the interval since the round before).
    pub samples: u64,
    /// Means over those rounds, and maxima (percentages 0-100, throughputs MiB/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg: Option<crate::nvml::gpm::Figures>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<crate::nvml::gpm::Figures>,
    /// The jobs that held the GPU alone (every process NVML listed on it was theirs), with the
    /// figures of those rounds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<GpmJobReport>,
    /// Rounds the GPU was shared (processes of several jobs, or of one gpuprofd could not
    /// tell, beside others): their figures belong to no one job and are not split.
    #[serde(default)]
    pub shared_samples: u64,
    /// Rounds with no process on the GPU.
    #[serde(default)]
    pub idle_samples: u64,
    /// Rounds whose processes were all of jobs gpuprofd could not tell.
    #[serde(default)]
    pub unattributed_samples: u64,
}

/// One job that held a GPU alone, in the GPU's `gpm`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpmJobReport {
    /// The job's `kind:id`.
    pub workload: String,
    pub samples: u64,
    pub avg: crate::nvml::gpm::Figures,
}

/// One GPU a job held alone, in the job's `gpm`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobGpmReport {
    pub gpu: u32,
    /// NVML rounds with figures in which the job's processes were the only ones on the GPU.
    pub samples: u64,
    /// Always `measured`.
    pub source: String,
    pub avg: crate::nvml::gpm::Figures,
}

/// One process as NVML sampled it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessGpuReport {
    /// NVML rounds that listed the process.
    pub samples: u64,
    /// Devices it was listed on.
    pub devices: Vec<u32>,
    /// The MIG instances it ran on, where its GPU is in MIG mode (NVML's process list names
    /// them); absent on whole GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<MigInstanceReport>,
    /// GPU memory it held (all of it: allocations through any API, context, cuDNN workspaces…).
    pub memory_max_bytes: Option<u64>,
    /// SM utilisation NVML attributed to it, mean over the samples that had one.
    pub sm_util_avg: Option<f64>,
    pub mem_util_avg: Option<f64>,
}

/// A MIG instance: its GPU (NVML's index of the whole GPU), GPU instance and compute instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstanceReport {
    pub device: u32,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

impl std::fmt::Display for MigInstanceReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GPU {} MIG {}/{}",
            self.device, self.gpu_instance, self.compute_instance
        )
    }
}

/// One job's processes and totals (sums of its processes' figures).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    pub kind: String,
    pub id: String,
    /// Slurm steps seen, sorted.
    pub steps: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub namespace: Option<String>,
    /// Tgids, ascending.
    pub processes: Vec<u32>,
    pub launches: u64,
    pub graph_launches: u64,
    pub copy_bytes: u64,
    pub alloc_bytes: u64,
    /// CPU time blocked in calls with a return probe (syncs, blocking copies, allocations).
    pub blocked_ns: u64,
    /// The GPUs the job held alone while GPM measured them (measured figures; a GPU shared
    /// with other jobs is not in here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpm: Vec<JobGpmReport>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessReport {
    pub tgid: u32,
    /// Who owns the process (service mode: which client may see it); not in the JSON.
    #[serde(skip)]
    pub owner: Option<u32>,
    pub comm: String,
    pub cmdline: String,
    pub exited: bool,
    /// `null` when the process was gone before gpuprofd could read its cgroup.
    pub job: Option<crate::enrich::jobs::Job>,
    pub launches: u64,
    /// Launches whose kernel no name source could name.
    pub unnamed_launches: u64,
    /// Sorted by calls (descending), then name.
    pub kernels: Vec<KernelReport>,
    /// In the order h2d, d2h, d2d, h2h, peer, default, unknown, memset (memory the process set
    /// with `cuMemsetD*`/`cudaMemset*`); directions without calls left out.
    pub copies: Vec<CopyReport>,
    /// Sorted by calls (descending), then name.
    pub api: Vec<ApiReport>,
    pub graphs: GraphReport,
    pub allocations: AllocReport,
    /// What NVML reported for the process (`null` without NVML or when NVML never listed it).
    #[serde(default)]
    pub gpu: Option<ProcessGpuReport>,
    /// Launches and copies per stream, most launches first.
    #[serde(default)]
    pub streams: Vec<StreamReport>,
    /// Where the calls came from: one row per distinct call stack sampled, most calls first.
    #[serde(default)]
    pub code: Vec<CodeReport>,
    /// How the stacks were taken.
    #[serde(default)]
    pub stacks: StackSummary,
    /// When the process called CUDA (`null` when it made no call the probes saw).
    #[serde(default)]
    pub timeline: Option<crate::model::activity::TimelineReport>,
    /// Under a duty cycle (`capture.launch_duty`), `launches` holds the launches the probes
    /// counted inside the windows; this says what they stand for. Absent when the launch
    /// probes were attached all the time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_sampling: Option<LaunchSamplingReport>,
    /// The calls per device they went to (known devices by ordinal, then `device: null` for
    /// calls whose device was never revealed); empty when the process made no such call.
    #[serde(default)]
    pub devices: Vec<crate::model::devices::DeviceReport>,
    /// GPU idle and launch-ahead **derived** from the calls (`null` when the process enqueued
    /// no work and waited for none): `model::busy`, docs/GPU-TIME.md.
    #[serde(default)]
    pub derived_gpu_idle: Option<DerivedGpuIdleReport>,
    /// NCCL: communicators and, per communicator and operation, calls and bytes (absent when
    /// the process made no NCCL call the probes saw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<crate::model::nccl::NcclReport>,
    /// GPU time measured by CUPTI through the injection library (`basis: "measured"`), or
    /// `basis: "absent"` and why not (`model::kernel_time`).
    #[serde(default)]
    pub gpu_time: crate::model::kernel_time::GpuTimeReport,
}

/// A process's GPU idle and launch-ahead, **derived** from its calls, never measured: the time
/// in which every stream it used was known empty (a lower bound on its GPU's idle time), and
/// how long the waits that found work queued blocked (the host ran at least that far ahead).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DerivedGpuIdleReport {
    /// Always `derived`.
    pub basis: String,
    /// Why nothing could be derived (`null` when the figures hold; else they are 0).
    pub unavailable: Option<String>,
    /// From the first work enqueued or wait returned to the last the probes saw.
    pub span_ns: u64,
    /// Time every stream was known empty: a lower bound on the GPU's idle time.
    pub idle_lower_bound_ns: u64,
    /// `idle_lower_bound_ns / span_ns` (0 when the span is 0).
    pub idle_share: f64,
    /// Waits (syncs, blocking device-to-host copies) that found work queued.
    pub drains: u64,
    /// Their blocked times, median and largest: launch-ahead ≥ these.
    pub launch_ahead_p50_ns: u64,
    pub launch_ahead_max_ns: u64,
}

/// A process's launches under the duty cycle (see `model::sampling` for the estimator).
/// `counted_launches` and `exact_launches` are measured; `estimated_launches` and
/// `standard_error` are derived.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSamplingReport {
    /// Sampled windows the process was alive for.
    pub windows: u64,
    /// Launches counted inside those windows.
    pub counted_launches: u64,
    /// Launches counted while a deep capture held the probes attached (exact, not scaled).
    pub exact_launches: u64,
    /// The process's launches over the whole time, estimated.
    pub estimated_launches: u64,
    /// The estimate's standard error (`null` below two windows).
    pub standard_error: Option<u64>,
    /// Time the probes were attached, out of the observed time, over the sampled windows.
    pub attached_ms: u64,
    pub observed_ms: u64,
}

/// The calls sampled on one call stack. `samples` is measured; `calls`, `launches`, `syncs`,
/// `copies` and `blocked_ns` are estimates: each sample stands for the sampling period's
/// number of calls of its thread (exact when the period is 1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeReport {
    /// Outermost frame first: Python frames as `file:line function`, native frames as
    /// `function (library)`.
    pub stack: Vec<String>,
    /// The library that made the call: the innermost native frame outside libcuda and
    /// libcudart.
    pub caller: String,
    pub samples: u64,
    pub calls: u64,
    pub launches: u64,
    pub syncs: u64,
    pub copies: u64,
    /// CPU time blocked in the syncs and blocking copies on this stack.
    pub blocked_ns: u64,
    /// The kernels launched from this stack, most launches first.
    pub kernels: Vec<CodeKernel>,
    /// GPU time CUPTI measured for the kernels of this stack's sampled launches (injection
    /// library, joined through the launch calls: docs/GPU-TIME.md), exactly…
    #[serde(default)]
    pub gpu_measured_ns: u64,
    /// …and scaled by the sampling period like `launches` (equal where every launch is
    /// sampled). 0 where nothing joined.
    #[serde(default)]
    pub gpu_ns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeKernel {
    pub name: String,
    pub launches: u64,
}

/// How a process's stacks were taken.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackSummary {
    /// Stacks taken.
    pub samples: u64,
    /// Samples on stacks past the distinct stacks kept per process (4,096), not in `code`.
    pub dropped: u64,
    /// Samples cut at 32 native or 16 Python frames (outermost frames missing).
    pub truncated: u64,
    /// The interpreter, for a CPython process (and whether its frames are read).
    pub python: Option<String>,
    /// Samples of that interpreter taken on a thread it does not know (no Python frames).
    pub python_no_thread: u64,
    /// Samples of that interpreter whose Python frames could not all be read (its memory was
    /// not where the version's offsets say, or changed under the walk): frames may be missing.
    #[serde(default)]
    pub python_fault: u64,
    /// Samples without Python frames whose native walk named fewer than 3 frames: typical of
    /// code built without frame pointers, where only the innermost frame (the direct caller,
    /// read off the stack) is certain.
    #[serde(default)]
    pub shallow: u64,
}

/// What a process put on one stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamReport {
    /// `default` (handle 0, the legacy default stream), `legacy` (cudaStreamLegacy),
    /// `per-thread` (cudaStreamPerThread), `other` (streams beyond the 1,024 tracked per
    /// process, summed), else the handle in hex.
    pub stream: String,
    pub launches: u64,
    pub copies: u64,
    pub copy_bytes: u64,
    /// **Derived**: time the stream's queue was known empty (a lower bound on its idle time;
    /// `null` when nothing could be derived: the process's `derived_gpu_idle` says why).
    #[serde(default)]
    pub derived_idle_ns: Option<u64>,
    /// Waits that found work queued on it, and the longest one's blocked time (**derived**
    /// launch-ahead ≥ it).
    #[serde(default)]
    pub drains: u64,
    #[serde(default)]
    pub derived_launch_ahead_max_ns: u64,
}

/// Launches of one kernel with one configuration through one API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelReport {
    /// Demangled, or `<unknown 0x…>` (the launch's function handle / host stub).
    pub name: String,
    /// `None` when the name is unknown.
    pub mangled: Option<String>,
    pub calls: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    /// Distinct stream handles the launches went to.
    pub streams: u64,
    pub api: String,
    /// Where the name came from: register_function, module_get_function, library_get_kernel,
    /// get_name, driver_object, driver_object_remembered, other, symbols, unknown.
    pub name_source: String,
    /// The GPU time CUPTI measured for this mangled name in the process (every launch of it:
    /// on the name's first row only when launch configurations split it into several rows);
    /// absent without the injection library. A kernel only CUPTI saw (launched inside a CUDA
    /// graph, or before gpuprofd attached) has a row of its own with 0 calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_time: Option<crate::model::kernel_time::KernelGpuTime>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyReport {
    pub direction: String,
    pub calls: u64,
    /// Bytes of the copies that did not return an error.
    pub bytes: u64,
    pub async_calls: u64,
    /// CPU time inside the copy calls (synchronous copies block until the copy ends).
    pub blocked_ns: u64,
    /// Host-to-device / device-to-host copies whose host memory was pageable: not in any
    /// pinned (or managed) allocation the process made while gpuprofd watched it. A buffer
    /// pinned before gpuprofd attached counts as pageable.
    #[serde(default)]
    pub pageable_calls: u64,
    #[serde(default)]
    pub pageable_bytes: u64,
    /// Calls by size: < 4 KiB, < 64 KiB, < 1 MiB, < 16 MiB, < 256 MiB, ≥ 256 MiB (empty in
    /// reports older than this field).
    #[serde(default)]
    pub size_histogram: Vec<u64>,
}

/// Calls of one hooked API. Durations come only from calls with a return probe; for the others
/// `blocked_ns`, `p50_ns`, `p99_ns` and `max_ns` are 0. Percentiles are within 1% (see
/// `model::hist::Histogram`); `max_ns` is exact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiReport {
    pub name: String,
    pub calls: u64,
    pub blocked_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphReport {
    pub launches: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocReport {
    pub calls: u64,
    pub failed: u64,
    /// Bytes of the successful allocations.
    pub bytes: u64,
    pub frees: u64,
    /// Bytes allocated and not freed, among the tracked allocations.
    pub live_bytes: u64,
    pub peak_bytes: u64,
    /// Successful allocations not tracked live (per-process cap reached).
    pub untracked: u64,
    pub by_kind: ByKind,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByKind {
    pub device: KindReport,
    pub host_pinned: KindReport,
    pub managed: KindReport,
    #[serde(rename = "async")]
    pub async_: KindReport,
    pub pitched: KindReport,
    pub vmm: KindReport,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindReport {
    pub calls: u64,
    pub bytes: u64,
}

/// One process's counters for the live view.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveRow {
    /// The job's short label (`slurm 77.0`), empty when unknown; rows are grouped by it.
    pub job: String,
    pub tgid: u32,
    pub comm: String,
    pub exited: bool,
    pub launches: u64,
    /// Launches per second since the previous live view.
    pub launches_per_s: f64,
    pub copies: u64,
    pub copy_bytes: u64,
    /// CPU time blocked in synchronisations.
    pub sync_blocked_ns: u64,
    pub live_bytes: u64,
    /// NVML's latest figures for the process, when it has any.
    pub gpu_sm_util: Option<u32>,
    pub gpu_held_bytes: Option<u64>,
    /// Under the launch probes' duty cycle: the estimated launches and their standard error
    /// (`launches` then holds those the windows counted).
    pub launches_estimated: Option<(u64, Option<u64>)>,
    /// GPM's latest measured SM and tensor-pipe activity (percent) of a GPU the process's job
    /// held alone in the latest round (`None` on a shared GPU, or without GPM).
    pub gpm_sm_activity_pct: Option<f64>,
    pub gpm_tensor_pct: Option<f64>,
}

/// What the metrics exposition needs from the model beyond the report: NVML's latest figures
/// and the processes that ended longer ago than the exposition keeps them.
#[derive(Clone, Debug, Default)]
pub struct MetricsFacts {
    /// Latest NVML figures per GPU index: (utilisation %, memory used bytes).
    pub gpu_now: BTreeMap<u32, (Option<u32>, Option<u64>)>,
    /// Latest GPU memory NVML says each process holds.
    pub process_gpu_bytes: BTreeMap<u32, u64>,
    /// Latest NVML health per GPU index, and the XID errors counted so far.
    pub gpu_health: BTreeMap<u32, (crate::nvml::DeviceHealth, u64)>,
    /// Latest GPM figures per GPU index that GPM measured in the latest round, and who held it.
    pub gpm_now: BTreeMap<u32, crate::model::gpm::GpmNow>,
    /// Processes that ended longer ago than the grace asked for.
    pub expired: Vec<u32>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `t` as RFC 3339 in UTC, whole seconds (`2026-11-23T07:00:00Z`); times before 1970 print as
/// the epoch.
pub fn rfc3339_utc(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (non-negative here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339() {
        let at = |s| rfc3339_utc(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(1_795_417_200), "2026-11-23T07:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59Z");
        assert_eq!(
            rfc3339_utc(SystemTime::UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00Z"
        );
    }
}

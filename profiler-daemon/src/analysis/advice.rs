//! Advice: what the figures suggest trying, each with the evidence that triggered it (like
//! TensorBoard's "recommendation for next steps"), computed from a [`Report`] alone.
//!
//! Every rule works from CPU-side measurements (counts, bytes, time blocked inside calls), or
//! from NVML's figures of the GPUs (GPM's are measured device activity); none knows how long
//! kernels ran on the GPU. `sync_bound` and `input_bound` add the GPU idle **derived** from the
//! syncs (`model::busy`) to their evidence, labelled so; `input_bound` also the kernels' GPU time
//! per step where CUPTI **measured** it (the injection library), and `launch_bound` and
//! `dominant_kernel` use measured kernel times. Thresholds are the constants below. Per-process rates
//! and shares are over the time the process was active in the capture ([`active_ns`]), and need
//! [`MIN_DURATION_NS`] of it, so that a short run's start-up does not read as a pattern.

use crate::analysis::steps::{ProcessSteps, quantile};
use crate::model::snapshot::{ProcessReport, Report};
use crate::sys::units;
use serde::Serialize;

/// Captures, and processes active for less than this, get no per-process advice (start-up
/// dominates them).
pub const MIN_DURATION_NS: u64 = 1_000_000_000;
/// Sync-bound: CPU time blocked in synchronisation calls, as a share of the capture.
pub const SYNC_BOUND_SHARE: f64 = 0.30;
/// Launch-bound: kernel launches per second of capture.
pub const LAUNCH_BOUND_RATE: f64 = 10_000.0;
/// Measured GPU time: a kernel whose mean GPU time is under this is "short" (its launch costs
/// the CPU about as much as it runs).
pub const SHORT_KERNEL_NS: u64 = 10_000;
/// Dominant kernel: one kernel took at least this share of its process's measured kernel GPU
/// time...
pub const DOMINANT_KERNEL_SHARE: f64 = 0.50;
/// ...of at least this much GPU time in all.
pub const DOMINANT_KERNEL_MIN_NS: u64 = 10_000_000;
/// Tiny copies: at least this many copies in one direction...
pub const TINY_COPY_CALLS: u64 = 1_000;
/// ...averaging fewer bytes than this.
pub const TINY_COPY_BYTES: u64 = 64 << 10;
/// Pageable copies: at least this many host↔device copies from or to pageable memory...
pub const PAGEABLE_COPY_CALLS: u64 = 100;
/// ...carrying at least this share of the process's host↔device bytes.
pub const PAGEABLE_COPY_SHARE: f64 = 0.50;
/// Blocking copies: CPU time blocked in synchronous copies, as a share of the capture.
pub const BLOCKING_COPY_SHARE: f64 = 0.10;
/// Allocation churn: device allocations per second of capture.
pub const ALLOC_CHURN_RATE: f64 = 100.0;
/// Idle GPU memory: NVML says the process holds at least this much GPU memory...
pub const IDLE_HELD_BYTES: u64 = 1 << 30;
/// ...while its SM utilisation averaged below this (percent)...
pub const IDLE_SM_UTIL: f64 = 5.0;
/// ...over at least this many NVML samples.
pub const IDLE_MIN_SAMPLES: u64 = 5;
/// Input-bound: the median delay from a step's start to its first enqueued work, as a share of
/// the median step time.
pub const INPUT_BOUND_SHARE: f64 = 0.30;
/// `exposed_communication`: the median step's NCCL kernels ran with nothing else of the
/// process beside them for at least this share of the step (measured).
pub const EXPOSED_COMM_SHARE: f64 = 0.20;
/// Memory growth: device memory live at the last step's end minus at the first's, when it never
/// went down from step to step.
pub const MEMORY_GROWTH_BYTES: u64 = 64 << 20;

/// GPU throttled: a reason that slows the clocks (power or thermal) was in force in at least
/// this share of NVML's rounds.
pub const THROTTLED_SHARE: f64 = 0.20;
/// The throttle reasons that mean the GPU runs slower than it could (not idle, not a clock
/// setting someone chose).
const SLOWING_REASONS: [&str; 5] = [
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
];

/// GPM rules: the SMs busy (measured SM activity, mean over GPM's rounds) at least this much...
pub const GPM_BUSY_SM_ACTIVITY: f64 = 50.0;
/// ...over at least this many GPM rounds...
pub const GPM_MIN_SAMPLES: u64 = 5;
/// ...while the tensor pipes were busy less than this (percent) and the FP32 pipes at least
/// [`GPM_FP32_BUSY`]: FP32 math the tensor cores could do (bf16/fp16, TF32).
pub const GPM_TENSOR_IDLE: f64 = 5.0;
pub const GPM_FP32_BUSY: f64 = 10.0;
/// ...or while the SMs held fewer warps than this share of their maximum (percent).
pub const GPM_LOW_OCCUPANCY: f64 = 20.0;

/// One piece of advice.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Advice {
    /// `sync_bound`, `launch_bound`, `dominant_kernel` (measured GPU time), `tiny_copies`,
    /// `pageable_copies`, `blocking_copies`, `alloc_churn`,
    /// `input_bound`, `memory_growth`, `exposed_communication` (these three need steps, see
    /// `steps`; the last measured GPU time), `gpu_idle_held`
    /// (needs NVML), `gpu_throttled`, `gpu_errors` (NVML, per GPU), `gpu_tensor_idle`,
    /// `gpu_low_occupancy` (NVML GPM, per GPU, measured), `straggler` (the ranks of one job in
    /// the capture, needs steps: `analysis::ranks`), `records_lost`.
    pub rule: &'static str,
    /// The process it is about (`None`: the capture as a whole).
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// What was measured that triggered it.
    pub evidence: String,
    /// What to try.
    pub suggestion: String,
}

impl Advice {
    fn about(p: &ProcessReport, rule: &'static str, evidence: String, suggestion: &str) -> Advice {
        Advice {
            rule,
            pid: Some(p.tgid),
            comm: Some(p.comm.clone()),
            evidence,
            suggestion: suggestion.to_owned(),
        }
    }
}

/// Synchronisation APIs whose time is the CPU waiting for the GPU.
fn is_sync_api(name: &str) -> bool {
    name.contains("Synchronize") || name == "cudaEventQuery" || name == "cuEventQuery"
}

/// Every piece of advice for `r` (and the `steps` found in its capture, if any), per process in
/// report order, then capture-wide.
pub fn advise(r: &Report, steps: &[ProcessSteps]) -> Vec<Advice> {
    let mut out = Vec::new();
    if r.duration_ns >= MIN_DURATION_NS {
        let mut generation: std::collections::HashMap<u32, u32> = Default::default();
        for p in &r.processes {
            let active = active_ns(p, r.duration_ns);
            if active >= MIN_DURATION_NS {
                process_advice(p, active, active as f64 / 1e9, &mut out);
            }
            let g = generation.entry(p.tgid).or_default();
            if let Some(s) = steps
                .iter()
                .find(|s| s.tgid == p.tgid && s.generation == *g)
            {
                step_advice(p, s, &mut out);
            }
            *g += 1;
        }
    }
    rank_advice(r, steps, &mut out);
    gpu_advice(r, &mut out);
    let lost: u64 = r.drops.values().sum();
    if lost > 0 {
        out.push(Advice {
            rule: "records_lost",
            pid: None,
            comm: None,
            evidence: format!(
                "{lost} records were lost because the ring buffer was full; every count in this \
                 report is a lower bound"
            ),
            suggestion: "capture again with a larger --ring-buffer-mb (e.g. 256), or narrow the \
                         capture with --pid / --job"
                .into(),
        });
    }
    out
}

/// The ranks of one job in this capture (a node's ranks; `analysis::ranks`): the one the
/// others wait for, where one stands out.
fn rank_advice(r: &Report, steps: &[ProcessSteps], out: &mut Vec<Advice>) {
    let header = crate::store::FileHeader {
        writer: String::new(),
        host: r.host.clone(),
        kernel: String::new(),
        started_at_unix_ns: 0,
        started_at_monotonic_ns: 0,
        target: String::new(),
    };
    let cap = crate::analysis::ranks::Capture {
        file: String::new(),
        header: &header,
        clocks: &[],
        report: r,
        steps,
        complete: true,
    };
    // Only NCCL ranks: processes that merely have steps need not be one job.
    let Ok(job) = crate::analysis::ranks::merge(&[cap]) else {
        return;
    };
    if !job.ranks.iter().any(|x| x.rank.is_some()) {
        return;
    }
    for s in &job.stragglers {
        let rank = job.ranks.iter().find(|x| x.name == s.rank);
        out.push(Advice {
            rule: "straggler",
            pid: rank.map(|x| x.pid),
            comm: rank.map(|x| x.comm.clone()),
            evidence: s.evidence.clone(),
            suggestion: format!(
                "find what {} does that the other ranks do not: its input (data loader \
                 workers, storage it reads), its CPU (other work on its cores), its GPU (clocks \
                 held back, errors: the gpus section) or a larger share of the work (uneven \
                 batches or padding); `gpuprofd report FILE --view ranks` shows every rank's \
                 steps side by side",
                s.rank
            ),
        });
    }
}

/// How long `p` was active in a capture of `capture_ns`: from its first CUDA call the probes saw
/// to the capture's end, or, once it has exited, to its last call (plus the time blocked in that
/// call's stretch of the timeline, so a final long synchronisation is inside). Rates and shares
/// are over this, not over the capture: under `--all-jobs` a job that ran ten minutes of an
/// hour-long capture is judged on its ten minutes, not diluted six-fold. A process without a
/// timeline (no call seen) counts the whole capture.
fn active_ns(p: &ProcessReport, capture_ns: u64) -> u64 {
    let Some(t) = &p.timeline else {
        return capture_ns;
    };
    let end = if p.exited {
        t.last_call_ns
            .saturating_add(t.blocked_ns.last().copied().unwrap_or(0))
            .min(capture_ns)
    } else {
        capture_ns
    };
    end.saturating_sub(t.first_call_ns)
}

/// What NVML says of the GPUs themselves: clocks held back, hardware or driver errors, and
/// (GPM) busy SMs whose math misses the tensor cores or that hold few warps.
fn gpu_advice(r: &Report, out: &mut Vec<Advice>) {
    for g in &r.gpus {
        let gpu = format!("GPU {} ({})", g.index, g.name);
        gpm_advice(&gpu, g, out);
        let worst = SLOWING_REASONS
            .iter()
            .filter_map(|&why| g.throttle_rounds.get(why).map(|&n| (why, n)))
            .max_by_key(|&(why, n)| (n, std::cmp::Reverse(why)));
        if let Some((why, n)) = worst
            && g.samples > 0
            && n as f64 >= THROTTLED_SHARE * g.samples as f64
        {
            out.push(Advice {
                rule: "gpu_throttled",
                pid: None,
                comm: None,
                evidence: format!(
                    "{gpu}: clocks held back by {why} in {n} of {} NVML rounds ({:.0} %)",
                    g.samples,
                    100.0 * n as f64 / g.samples as f64
                ),
                suggestion: "every kernel on this GPU runs slower whatever the code does: check \
                             cooling, power limits and power supply (`nvidia-smi -q -d \
                             PERFORMANCE,POWER,TEMPERATURE`) before tuning the program"
                    .into(),
            });
        }
        if g.xid_count > 0 || g.ecc_uncorrected.is_some_and(|n| n > 0) {
            let mut what = Vec::new();
            if g.xid_count > 0 {
                let codes: Vec<String> = g.xid_errors.iter().map(u64::to_string).collect();
                what.push(format!(
                    "{} XID error(s) ({})",
                    g.xid_count,
                    if codes.is_empty() {
                        "codes unknown".into()
                    } else {
                        codes.join(", ")
                    }
                ));
            }
            if let Some(n) = g.ecc_uncorrected.filter(|&n| n > 0) {
                what.push(format!(
                    "{n} uncorrected ECC error(s) since the driver loaded"
                ));
            }
            out.push(Advice {
                rule: "gpu_errors",
                pid: None,
                comm: None,
                evidence: format!("{gpu}: {}", what.join("; ")),
                suggestion: "hardware or driver faults, not a tuning matter: look the XID codes up \
                             in NVIDIA's XID catalogue and the kernel log (`dmesg`); 48/63/64/94/95 \
                             are memory errors, 79 a GPU off the bus; drain the node if they repeat"
                    .into(),
            });
        }
    }
}

/// GPM's measured figures of a GPU: busy SMs with idle tensor pipes and busy FP32 pipes, or
/// busy SMs holding few warps. The GPU's whole figures (whoever held it); the evidence names
/// the job when one job held it in every round.
fn gpm_advice(gpu: &str, g: &crate::model::snapshot::GpuReport, out: &mut Vec<Advice>) {
    let Some(m) = g.gpm.as_ref().filter(|m| m.samples >= GPM_MIN_SAMPLES) else {
        return;
    };
    let Some(a) = &m.avg else { return };
    let Some(sm) = a.sm_activity_pct.filter(|&v| v >= GPM_BUSY_SM_ACTIVITY) else {
        return;
    };
    let held = match m.jobs.as_slice() {
        [j] if j.samples == m.samples => format!(", all held by job {}", j.workload),
        _ => String::new(),
    };
    let busy = format!(
        "{gpu}: SM activity averaged {sm:.1} % over {} GPM rounds (measured{held})",
        m.samples
    );
    if let (Some(t), Some(f32_)) = (a.tensor_activity_pct, a.fp32_activity_pct)
        && t < GPM_TENSOR_IDLE
        && f32_ >= GPM_FP32_BUSY
    {
        out.push(Advice {
            rule: "gpu_tensor_idle",
            pid: None,
            comm: None,
            evidence: format!(
                "{busy}, while the tensor pipes were busy {t:.1} % and the FP32 pipes {f32_:.1} %"
            ),
            suggestion: "the math runs on the FP32 pipes, not the tensor cores: autocast to                          bf16/fp16 (torch.autocast, jax.default_matmul_precision), or let FP32                          matmuls and convolutions use TF32                          (torch.set_float32_matmul_precision(\"high\"))"
                .into(),
        });
    }
    if let Some(occ) = a.sm_occupancy_pct
        && occ < GPM_LOW_OCCUPANCY
    {
        out.push(Advice {
            rule: "gpu_low_occupancy",
            pid: None,
            comm: None,
            evidence: format!(
                "{busy}, while the SMs held {occ:.1} % of the warps they can (occupancy)"
            ),
            suggestion: "busy SMs with few resident warps hide memory latency poorly: larger                          batches or blocks, fewer registers or less shared memory per block (Nsight                          Compute's occupancy section names the limit)"
                .into(),
        });
    }
}

/// The rules about one process, in the order their advice is listed.
fn process_advice(p: &ProcessReport, dur_ns: u64, secs: f64, out: &mut Vec<Advice>) {
    sync_bound(p, dur_ns, secs, out);
    launch_bound(p, secs, out);
    dominant_kernel(p, out);
    tiny_copies(p, out);
    pageable_copies(p, out);
    blocking_copies(p, dur_ns, secs, out);
    gpu_idle_held(p, out);
    alloc_churn(p, secs, out);
}

/// The host blocked in synchronisations for a large share of its active time.
fn sync_bound(p: &ProcessReport, dur_ns: u64, secs: f64, out: &mut Vec<Advice>) {
    let mut push = |rule, evidence: String, suggestion: &str| {
        out.push(Advice::about(p, rule, evidence, suggestion))
    };
    let share = |ns: u64| ns as f64 / dur_ns as f64;
    let syncs: Vec<_> = p.api.iter().filter(|a| is_sync_api(&a.name)).collect();
    let sync_ns: u64 = syncs.iter().map(|a| a.blocked_ns).sum();
    if share(sync_ns) >= SYNC_BOUND_SHARE {
        let top = syncs
            .iter()
            .max_by_key(|a| a.blocked_ns)
            .expect("non-empty");
        push(
            "sync_bound",
            format!(
                "blocked {:.1} s of {secs:.1} s active ({:.0}%) waiting for the GPU; most in {} \
                 ({} calls, p50 {} ms){}",
                sync_ns as f64 / 1e9,
                share(sync_ns) * 100.0,
                top.name,
                top.calls,
                units::ms(top.p50_ns),
                derived_idle(p)
            ),
            "the host waits for the GPU instead of queueing more work: take per-step \
             synchronisations (loss.item(), .cpu(), printing tensors) out of the step loop or \
             do them every N steps, and use events / non_blocking copies so the CPU runs ahead",
        );
    }
}

/// Kernels launched faster than the CPU can keep up with, most of them small.
fn launch_bound(p: &ProcessReport, secs: f64, out: &mut Vec<Advice>) {
    let mut push = |rule, evidence: String, suggestion: &str| {
        out.push(Advice::about(p, rule, evidence, suggestion))
    };
    let rate = p.launches as f64 / secs;
    if rate >= LAUNCH_BOUND_RATE {
        let small = p
            .kernels
            .iter()
            .filter(|k| u64::from(k.grid[0]) * u64::from(k.grid[1]) * u64::from(k.grid[2]) < 132)
            .map(|k| k.calls)
            .sum::<u64>();
        push(
            "launch_bound",
            format!(
                "{:.0} kernel launches per second ({} in {secs:.1} s active); {:.0}% of them \
                 with fewer than 132 blocks{}",
                rate,
                p.launches,
                small as f64 * 100.0 / p.launches.max(1) as f64,
                short_kernels(p)
            ),
            "many small kernels: the CPU's launch rate may limit the GPU. Capture the step in a \
             CUDA graph (torch.cuda.graphs, torch.compile(mode=\"reduce-overhead\")), or fuse \
             kernels (torch.compile, custom fused ops)",
        );
    }
}

/// Launch-bound's measured evidence, where the injection library measured the kernels: the
/// share of launches and of GPU time of kernels whose mean GPU time is under
/// [`SHORT_KERNEL_NS`] ("" otherwise).
fn short_kernels(p: &ProcessReport) -> String {
    let timed: Vec<_> = p
        .kernels
        .iter()
        .filter_map(|k| k.gpu_time.as_ref())
        .collect();
    let (runs, ns): (u64, u64) = timed
        .iter()
        .fold((0, 0), |(r, n), t| (r + t.count, n + t.total_ns));
    if runs == 0 || ns == 0 {
        return String::new();
    }
    let short: Vec<_> = timed
        .iter()
        .filter(|t| t.mean_ns < SHORT_KERNEL_NS)
        .collect();
    let short_runs: u64 = short.iter().map(|t| t.count).sum();
    let short_ns: u64 = short.iter().map(|t| t.total_ns).sum();
    format!(
        "; measured on the GPU, kernels averaging under {} µs are {:.0}% of the kernels run and \
         {:.0}% of the GPU time",
        SHORT_KERNEL_NS / 1_000,
        short_runs as f64 * 100.0 / runs as f64,
        short_ns as f64 * 100.0 / ns as f64
    )
}

/// One kernel took most of the process's measured GPU time: the first place to look.
fn dominant_kernel(p: &ProcessReport, out: &mut Vec<Advice>) {
    let Some((k, t)) = p
        .kernels
        .iter()
        .filter_map(|k| Some((k, k.gpu_time.as_ref()?)))
        .max_by_key(|(_, t)| t.total_ns)
    else {
        return;
    };
    if t.share >= DOMINANT_KERNEL_SHARE && t.total_ns >= DOMINANT_KERNEL_MIN_NS {
        out.push(Advice::about(
            p,
            "dominant_kernel",
            format!(
                "{} took {:.0}% of the process's kernel time on the GPU ({} ms in {} runs, mean \
                 {} µs; measured)",
                k.name,
                t.share * 100.0,
                units::ms(t.total_ns),
                t.count,
                t.mean_ns / 1_000
            ),
            "optimise this kernel first: profile it alone (Nsight Compute: ncu --kernel-name \
             with its name) for its memory and compute throughput, or replace it with a fused \
             or library version",
        ));
    }
}

/// Many copies of a direction too small to pay their fixed cost.
fn tiny_copies(p: &ProcessReport, out: &mut Vec<Advice>) {
    let mut push = |rule, evidence: String, suggestion: &str| {
        out.push(Advice::about(p, rule, evidence, suggestion))
    };
    // Memsets are no transfers: many small ones cost an enqueue each, like launches.
    for c in p.copies.iter().filter(|c| c.direction != "memset") {
        if c.calls >= TINY_COPY_CALLS && c.bytes / c.calls.max(1) < TINY_COPY_BYTES {
            push(
                "tiny_copies",
                format!(
                    "{} {} copies averaging {} ({} in all)",
                    c.calls,
                    c.direction,
                    units::bytes(c.bytes / c.calls),
                    units::bytes(c.bytes)
                ),
                "each copy pays a fixed cost on the CPU and the bus: batch them into fewer, \
                 larger copies (one staging buffer per step), or keep the data on the GPU",
            );
        }
    }
}

/// Host↔device copies staged through pageable memory.
fn pageable_copies(p: &ProcessReport, out: &mut Vec<Advice>) {
    let mut push = |rule, evidence: String, suggestion: &str| {
        out.push(Advice::about(p, rule, evidence, suggestion))
    };
    let host = p
        .copies
        .iter()
        .filter(|c| c.direction == "h2d" || c.direction == "d2h");
    let (host_bytes, pageable_calls, pageable_bytes) = host
        .fold((0u64, 0u64, 0u64), |(b, pc, pb), c| {
            (b + c.bytes, pc + c.pageable_calls, pb + c.pageable_bytes)
        });
    if pageable_calls >= PAGEABLE_COPY_CALLS
        && host_bytes > 0
        && pageable_bytes as f64 >= PAGEABLE_COPY_SHARE * host_bytes as f64
    {
        push(
            "pageable_copies",
            format!(
                "{pageable_calls} host↔device copies moved {} of {} through pageable host memory \
                 (not in any pinned buffer the process allocated while watched)",
                units::bytes(pageable_bytes),
                units::bytes(host_bytes)
            ),
            "pageable copies are staged through a driver buffer, run slower and cannot overlap \
             with kernels: allocate the host buffers pinned (cudaMallocHost / cudaHostAlloc, \
             `pin_memory=True` in PyTorch's DataLoader and `tensor.pin_memory()`)",
        );
    }
}

/// The host blocked in synchronous copies for a large share of its active time (memsets left
/// out: pinned memory and non_blocking copies do nothing for them).
fn blocking_copies(p: &ProcessReport, dur_ns: u64, secs: f64, out: &mut Vec<Advice>) {
    let mut push = |rule, evidence: String, suggestion: &str| {
        out.push(Advice::about(p, rule, evidence, suggestion))
    };
    let share = |ns: u64| ns as f64 / dur_ns as f64;
    let sync_copy_ns: u64 = p
        .copies
        .iter()
        .filter(|c| c.async_calls < c.calls && c.direction != "memset")
        .map(|c| c.blocked_ns)
        .sum();
    if share(sync_copy_ns) >= BLOCKING_COPY_SHARE {
        push(
            "blocking_copies",
            format!(
                "blocked {:.1} s of {secs:.1} s active ({:.0}%) inside synchronous copies",
                sync_copy_ns as f64 / 1e9,
                share(sync_copy_ns) * 100.0
            ),
            "synchronous copies stop the host until the copy (and the work before it on the \
             stream) is done: copy from pinned memory (pin_memory=True in the DataLoader) with \
             non_blocking=True / cudaMemcpyAsync, and overlap copies with compute",
        );
    }
}

/// GPU memory held while the GPU stays idle (NVML).
fn gpu_idle_held(p: &ProcessReport, out: &mut Vec<Advice>) {
    let mut push = |rule, evidence: String, suggestion: &str| {
        out.push(Advice::about(p, rule, evidence, suggestion))
    };
    if let Some(g) = &p.gpu
        && let (Some(held), Some(sm)) = (g.memory_max_bytes, g.sm_util_avg)
        && held >= IDLE_HELD_BYTES
        && sm < IDLE_SM_UTIL
        && g.samples >= IDLE_MIN_SAMPLES
    {
        push(
            "gpu_idle_held",
            format!(
                "holds {} of GPU memory (NVML) while its SM utilisation averaged {sm:.1}% over \
                 {} samples",
                units::bytes(held),
                g.samples
            ),
            "the process keeps GPU memory other jobs could use while doing little on the GPU: \
             free cached memory (torch.cuda.empty_cache()), end idle notebooks/servers, or \
             share the GPU deliberately (MPS, MIG)",
        );
    }
}

/// The process's derived GPU idle as evidence ("" when there is none): after the waits the
/// GPU had nothing queued until the host enqueued more.
fn derived_idle(p: &ProcessReport) -> String {
    match &p.derived_gpu_idle {
        Some(d) if d.unavailable.is_none() && d.span_ns > 0 => format!(
            "; derived from the syncs, the GPU had no work queued >= {:.0}% of the time, and \
             the host ran >= {} ms ahead of it before a wait (median)",
            d.idle_share * 100.0,
            units::ms(d.launch_ahead_p50_ns)
        ),
        _ => String::new(),
    }
}

/// Device allocations at a high rate.
fn alloc_churn(p: &ProcessReport, secs: f64, out: &mut Vec<Advice>) {
    let mut push = |rule, evidence: String, suggestion: &str| {
        out.push(Advice::about(p, rule, evidence, suggestion))
    };
    let allocs = p.allocations.by_kind.device.calls + p.allocations.by_kind.pitched.calls;
    let alloc_rate = allocs as f64 / secs;
    if alloc_rate >= ALLOC_CHURN_RATE {
        push(
            "alloc_churn",
            format!(
                "{alloc_rate:.0} device allocations per second ({allocs} in {secs:.1} s active), \
                 {} frees",
                p.allocations.frees
            ),
            "cudaMalloc/cudaFree synchronise and are slow: allocate once and reuse, or use a \
             pool (cudaMallocAsync, PyTorch's caching allocator, CuPy's memory pool)",
        );
    }
}

fn step_advice(p: &ProcessReport, s: &ProcessSteps, out: &mut Vec<Advice>) {
    let regular: Vec<&crate::analysis::steps::Step> = s.regular().collect();
    if (regular.len() as u64) < crate::analysis::steps::MIN_STEPS {
        return;
    }
    let mut push = |rule, evidence: String, suggestion: &str| {
        out.push(Advice::about(p, rule, evidence, suggestion))
    };
    let wall = quantile(regular.iter().map(|x| x.wall_ns).collect(), 0.5);
    let wait = quantile(regular.iter().map(|x| x.first_enqueue_ns).collect(), 0.5);
    let idle: Vec<u64> = regular
        .iter()
        .filter_map(|x| x.derived_gpu_idle_ns)
        .collect();
    let idle = if wall > 0 && idle.len() == regular.len() {
        let idle = quantile(idle, 0.5);
        format!(
            "; derived from the syncs, the GPU had no work queued for >= {} ms ({:.0}%) of \
             the step (median)",
            units::ms(idle),
            idle as f64 * 100.0 / wall as f64
        )
    } else {
        String::new()
    };
    // Measured by CUPTI (the injection library): how long some GPU work of the process ran
    // inside each step (overlaps counted once); where that is missing, the GPU time of the
    // kernels each step launched, summed over streams (it can sum past the wall time).
    let busy: Vec<u64> = regular.iter().filter_map(|x| x.gpu_busy_ns).collect();
    let gpu: Vec<u64> = regular.iter().filter_map(|x| x.gpu_ns).collect();
    let gpu = if wall > 0 && busy.len() == regular.len() {
        let busy = quantile(busy, 0.5);
        format!(
            "; measured by CUPTI, the GPU ran this process's work for {} ms ({:.0}%) of the \
             step and nothing of it for the rest (median; overlapping streams counted once)",
            units::ms(busy),
            busy as f64 * 100.0 / wall as f64
        )
    } else if wall > 0 && gpu.len() == regular.len() {
        let gpu = quantile(gpu, 0.5);
        format!(
            "; measured by CUPTI, the step's kernels ran {} ms on the GPU ({:.0}% of the \
             step; median, summed over streams)",
            units::ms(gpu),
            gpu as f64 * 100.0 / wall as f64
        )
    } else {
        String::new()
    };
    if wall > 0 && wait as f64 >= INPUT_BOUND_SHARE * wall as f64 {
        push(
            "input_bound",
            format!(
                "in {} steps of {} ms (median; boundary {}), the first GPU work was enqueued \
                 {} ms ({:.0}%) after the step began{idle}{gpu}",
                regular.len(),
                units::ms(wall),
                s.boundary,
                units::ms(wait),
                wait as f64 * 100.0 / wall as f64
            ),
            "the GPU gets nothing new while the host prepares the next step: load and \
             preprocess data ahead (DataLoader num_workers, prefetch_factor, pin_memory), move \
             augmentation to the GPU, and check host-side logging between steps",
        );
    }
    let first = regular[0].live_bytes;
    let last = regular[regular.len() - 1].live_bytes;
    let never_down = regular
        .windows(2)
        .all(|w| w[1].live_bytes >= w[0].live_bytes);
    if never_down && last.saturating_sub(first) >= MEMORY_GROWTH_BYTES {
        push(
            "memory_growth",
            format!(
                "device memory live at step ends grew from {} to {} over {} steps and never \
                 went down",
                units::bytes(first),
                units::bytes(last),
                regular.len()
            ),
            "something allocated per step is kept: tensors appended to a list (losses kept \
             with their graph — use loss.item() or .detach()), caches that grow, or a leak",
        );
    }
    // Measured: NCCL's kernels in each step, and the part nothing else ran beside.
    let exposed: Vec<u64> = regular
        .iter()
        .filter_map(|x| x.gpu_comm_exposed_ns)
        .collect();
    let comm: Vec<u64> = regular.iter().filter_map(|x| x.gpu_comm_ns).collect();
    if wall > 0 && exposed.len() == regular.len() && comm.len() == regular.len() {
        let (exposed, comm) = (quantile(exposed, 0.5), quantile(comm, 0.5));
        if exposed as f64 >= EXPOSED_COMM_SHARE * wall as f64 {
            push(
                "exposed_communication",
                format!(
                    "in {} steps of {} ms (median), NCCL's kernels ran {} ms of each, {} ms \
                     ({:.0}% of the step) with nothing else of the process running on the GPU \
                     (median; measured by CUPTI)",
                    regular.len(),
                    units::ms(wall),
                    units::ms(comm),
                    units::ms(exposed),
                    exposed as f64 * 100.0 / wall as f64
                ),
                "the step waits for communication that compute does not hide: overlap it \
                 (DDP's gradient buckets: bucket_cap_mb, gradient_as_bucket_view; FSDP's \
                 forward/backward prefetch), communicate less (gradient accumulation, lower \
                 precision reductions), and compare ranks: one slow rank makes every other wait \
                 inside its collectives",
            );
        }
    }
}

/// The advice as text for the end-of-run summary ("" when there is none).
pub fn render(advice: &[Advice]) -> String {
    if advice.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nadvice (from CPU-side measurements, NVML and measured GPU times; see docs/CAPTURE-FILES.md#advice):\n",
    );
    for a in advice {
        let who = match (a.pid, &a.comm) {
            (Some(p), Some(c)) => format!("process {p} {c}"),
            _ => "capture".to_owned(),
        };
        s.push_str(&format!(
            "  [{}] {who}: {}\n    try: {}\n",
            a.rule, a.evidence, a.suggestion
        ));
    }
    s
}

#[cfg(test)]
mod tests;

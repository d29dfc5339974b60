//! The end-of-run summary for a terminal.

use super::fmt::{self, Align, table};
use crate::model::snapshot::{AllocReport, ProcessReport, Report};
use std::fmt::Write as _;

/// Kernel rows shown per process by [`render`].
pub const TOP_KERNELS: usize = 20;
const NAME_CHARS: usize = 60;
const CMDLINE_CHARS: usize = 100;

/// The report as text, [`TOP_KERNELS`] kernel rows per process.
pub fn render(r: &Report) -> String {
    render_with(r, TOP_KERNELS)
}

/// The report as text, at most `top` kernel rows per process, then the advice.
pub fn render_with(r: &Report, top: usize) -> String {
    let mut s = render_figures(r, top);
    s.push_str(&crate::analysis::advice::render(
        &crate::analysis::advice::advise(r, &[]),
    ));
    s
}

/// A line for the probes' rare paths, when any happened.
fn probe_faults(r: &Report) -> String {
    let what = |name: &str| match name {
        "user_read" => "a call's arguments or results unreadable: recorded as 0",
        "launch_counts_full" => "in-kernel launch counters full: recorded instead",
        _ => "",
    };
    let seen: Vec<String> = r
        .probe_faults
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n} ({})", what(k)))
        .collect();
    if seen.is_empty() {
        String::new()
    } else {
        format!("probe faults: {}\n", seen.join(", "))
    }
}

fn render_figures(r: &Report, top: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "gpuprofd report: host {}, started {}, duration {:.3} s",
        r.host,
        r.started_at,
        r.duration_ns as f64 / 1e9
    );
    let lost: Vec<String> = r
        .drops
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if lost.is_empty() {
        s.push_str("no records lost");
    } else {
        let _ = write!(
            s,
            "WARNING: records lost ({}): counts below are lower bounds",
            lost.join(", ")
        );
    }
    let _ = writeln!(s, "; decode errors: {}", r.decode_errors);
    s.push_str(&probe_faults(r));
    if !r.libraries.is_empty() {
        let libs: Vec<String> = r
            .libraries
            .iter()
            .map(|l| {
                let v = l
                    .version
                    .as_deref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default();
                format!("{}{v} ({}, {} probes)", l.soname, l.layer, l.probes)
            })
            .collect();
        let _ = writeln!(s, "CUDA libraries: {}", libs.join(", "));
    }
    if r.processes.is_empty() {
        s.push_str("\nno CUDA activity recorded\n");
    }
    if !r.jobs.is_empty() {
        s.push_str("\njobs:\n");
        let rows: Vec<Vec<String>> = r
            .jobs
            .iter()
            .map(|j| {
                let label = crate::enrich::jobs::Job {
                    kind: j.kind.clone(),
                    id: j.id.clone(),
                    step: (j.steps.len() == 1).then(|| j.steps[0].clone()),
                    name: j.name.clone(),
                    namespace: j.namespace.clone(),
                    ..Default::default()
                }
                .label();
                vec![
                    label,
                    j.processes.len().to_string(),
                    j.launches.to_string(),
                    fmt::bytes(j.copy_bytes),
                    fmt::bytes(j.alloc_bytes),
                    fmt::ms(j.blocked_ns),
                ]
            })
            .collect();
        s.push_str(&fmt::table(
            "  ",
            &[
                "job",
                "processes",
                "launches",
                "copied",
                "allocated",
                "blocked (CPU) ms",
            ],
            &[
                Align::Left,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
            ],
            &rows,
        ));
    }
    gpus(&mut s, r);
    for p in &r.processes {
        s.push('\n');
        process(&mut s, p, top);
    }
    s
}

/// NVML's devices, or why there are none.
fn gpus(s: &mut String, r: &Report) {
    match r.nvml.state.as_str() {
        "ok" | "failed" => {}
        "" | "off" => return,
        other => {
            let _ = writeln!(s, "\nNVML: {other}: {}", r.nvml.detail);
            return;
        }
    }
    let _ = writeln!(s, "\nGPUs (NVML, {} samples):", r.nvml.samples);
    let pct = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}%"));
    for g in &r.gpus {
        let mem = match (g.memory_used_max_bytes, g.memory_total_bytes) {
            (Some(u), Some(t)) => format!("{} of {}", fmt::bytes(u), fmt::bytes(t)),
            (Some(u), None) => fmt::bytes(u),
            _ => "-".into(),
        };
        let _ = writeln!(
            s,
            "  {} {}: util avg {} (max {}), memory util avg {}, memory used max {}, power avg {}, temp max {}",
            g.index,
            g.name,
            pct(g.gpu_util_avg),
            g.gpu_util_max.map_or("-".into(), |v| format!("{v}%")),
            pct(g.mem_util_avg),
            mem,
            g.power_avg_w.map_or("-".into(), |w| format!("{w:.1} W")),
            g.temp_max_c.map_or("-".into(), |t| format!("{t} C")),
        );
        if let Some(m) = &g.gpm {
            gpm(s, m);
        }
        if !g.unprofiled_pids.is_empty() {
            let pids: Vec<String> = g.unprofiled_pids.iter().map(u32::to_string).collect();
            let _ = writeln!(
                s,
                "    also on it, no CUDA calls recorded: {}",
                pids.join(" ")
            );
        }
    }
    if r.nvml.state == "failed" {
        let _ = writeln!(s, "  NVML stopped: {}", r.nvml.detail);
    }
}

/// A GPU's GPM lines: the measured figures (means, the SM activity's maximum), who held the
/// GPU; or why there are none.
fn gpm(s: &mut String, m: &crate::model::snapshot::GpmReport) {
    let Some(a) = &m.avg else {
        let _ = writeln!(
            s,
            "    gpm: {}{}{}",
            m.state,
            if m.detail.is_empty() { "" } else { ": " },
            m.detail
        );
        return;
    };
    let pct = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}%"));
    let mib = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1} MiB/s"));
    let max_sm = m.max.as_ref().and_then(|x| x.sm_activity_pct);
    let _ = writeln!(
        s,
        "    gpm (measured, {} samples{}): SM activity avg {} (max {}), SM occupancy avg {}, tensor avg {} \
         (HMMA {}, IMMA {}, DFMA {}), DRAM bandwidth avg {}",
        m.samples,
        if m.state == "measured" {
            String::new()
        } else {
            format!(", then {}", m.state)
        },
        pct(a.sm_activity_pct),
        pct(max_sm),
        pct(a.sm_occupancy_pct),
        pct(a.tensor_activity_pct),
        pct(a.tensor_hmma_pct),
        pct(a.tensor_imma_pct),
        pct(a.tensor_dfma_pct),
        pct(a.dram_bandwidth_pct),
    );
    let _ = writeln!(
        s,
        "      FP16 {}, FP32 {}, FP64 {}; PCIe tx {} rx {}; NVLink tx {} rx {}",
        pct(a.fp16_activity_pct),
        pct(a.fp32_activity_pct),
        pct(a.fp64_activity_pct),
        mib(a.pcie_tx_mib_per_s),
        mib(a.pcie_rx_mib_per_s),
        mib(a.nvlink_tx_mib_per_s),
        mib(a.nvlink_rx_mib_per_s),
    );
    let mut held: Vec<String> = m
        .jobs
        .iter()
        .map(|j| {
            format!(
                "{} alone {} (SM activity avg {})",
                j.workload,
                j.samples,
                pct(j.avg.sm_activity_pct)
            )
        })
        .collect();
    for (what, n) in [
        ("shared", m.shared_samples),
        ("idle", m.idle_samples),
        ("unattributed", m.unattributed_samples),
    ] {
        if n > 0 {
            held.push(format!("{what} {n}"));
        }
    }
    if !held.is_empty() {
        let _ = writeln!(s, "      held (samples): {}", held.join(", "));
    }
    if !m.detail.is_empty() {
        let _ = writeln!(s, "      gpm: {}", m.detail);
    }
}

fn process(s: &mut String, p: &ProcessReport, top: usize) {
    let comm = if p.comm.is_empty() { "?" } else { &p.comm };
    let _ = writeln!(
        s,
        "process {} {}{}",
        p.tgid,
        comm,
        if p.exited { " (exited)" } else { "" }
    );
    if !p.cmdline.is_empty() {
        let _ = writeln!(s, "  cmdline: {}", fmt::truncate(&p.cmdline, CMDLINE_CHARS));
    }
    if let Some(j) = &p.job {
        let _ = writeln!(s, "  job: {}", j.label());
    }
    let _ = writeln!(
        s,
        "  kernel launches {} ({} unnamed), graph launches {}",
        p.launches, p.unnamed_launches, p.graphs.launches
    );
    devices(s, &p.devices);

    if p.kernels.is_empty() {
        s.push_str("  kernels: none\n");
    } else {
        s.push_str("  kernels by launches:\n");
        let rows: Vec<Vec<String>> = p
            .kernels
            .iter()
            .take(top)
            .map(|k| {
                vec![
                    k.calls.to_string(),
                    fmt::dim3(k.grid),
                    fmt::dim3(k.block),
                    k.shared_bytes.to_string(),
                    k.api.clone(),
                    fmt::truncate(&k.name, NAME_CHARS),
                ]
            })
            .collect();
        use Align::{Left as L, Right as R};
        s.push_str(&table(
            "    ",
            &["launches", "grid", "block", "smem B", "api", "kernel"],
            &[R, L, L, R, L, L],
            &rows,
        ));
        if p.kernels.len() > top {
            let _ = writeln!(s, "    … {} more rows not shown", p.kernels.len() - top);
        }
    }

    if p.copies.is_empty() {
        s.push_str("  copies: none\n");
    } else {
        s.push_str("  copies:\n");
        let rows: Vec<Vec<String>> = p
            .copies
            .iter()
            .map(|c| {
                vec![
                    c.direction.clone(),
                    c.calls.to_string(),
                    fmt::bytes(c.bytes),
                    c.async_calls.to_string(),
                    // Asynchronous copies return at once and have no return probe.
                    if c.blocked_ns == 0 && c.async_calls == c.calls {
                        "-".to_owned()
                    } else {
                        fmt::ms(c.blocked_ns)
                    },
                ]
            })
            .collect();
        use Align::{Left as L, Right as R};
        s.push_str(&table(
            "    ",
            &["direction", "calls", "bytes", "async", "blocked (CPU) ms"],
            &[L, R, R, R, R],
            &rows,
        ));
    }

    if p.api.is_empty() {
        s.push_str("  API calls: none\n");
    } else {
        s.push_str("  API calls (blocked = CPU time inside the call; - = no return probe):\n");
        let rows: Vec<Vec<String>> = p
            .api
            .iter()
            .map(|a| {
                let timed = a.max_ns > 0 || a.blocked_ns > 0;
                let t = |v: String| if timed { v } else { "-".to_owned() };
                vec![
                    a.name.clone(),
                    a.calls.to_string(),
                    t(fmt::ms(a.blocked_ns)),
                    t(fmt::us(a.p50_ns)),
                    t(fmt::us(a.p99_ns)),
                    t(fmt::us(a.max_ns)),
                ]
            })
            .collect();
        use Align::{Left as L, Right as R};
        let headers = [
            "api",
            "calls",
            "blocked (CPU) ms",
            "p50 µs",
            "p99 µs",
            "max µs",
        ];
        s.push_str(&table("    ", &headers, &[L, R, R, R, R, R], &rows));
    }
    allocations(s, &p.allocations);
    if let Some(g) = &p.gpu {
        // On a GPU in MIG mode: its instances (GPU instance/compute instance).
        let mig: Vec<String> = (g.mig.iter())
            .map(|i| format!("{}/{}", i.gpu_instance, i.compute_instance))
            .collect();
        let mig = match mig.is_empty() {
            true => String::new(),
            false => format!(", MIG instance {}", mig.join(",")),
        };
        let _ = writeln!(
            s,
            "  GPU (NVML, {} samples on device {}{mig}): SM util avg {}, memory held max {}",
            g.samples,
            g.devices
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            g.sm_util_avg.map_or("-".into(), |v| format!("{v:.1}%")),
            g.memory_max_bytes.map_or("-".into(), fmt::bytes),
        );
    }
    derived_idle(s, p);
}

/// The GPU idle derived from the process's syncs (docs/GPU-TIME.md): a lower bound.
fn derived_idle(s: &mut String, p: &ProcessReport) {
    let Some(d) = &p.derived_gpu_idle else {
        return;
    };
    let _ = match &d.unavailable {
        Some(why) => writeln!(s, "  GPU idle (derived): unavailable: {why}"),
        None => writeln!(
            s,
            "  GPU idle (derived from syncs, a lower bound): >= {:.1}% of {} ms; launch-ahead \
             >= {} ms median, {} ms max ({} waits found work queued)",
            d.idle_share * 100.0,
            fmt::ms(d.span_ns),
            fmt::ms(d.launch_ahead_p50_ns),
            fmt::ms(d.launch_ahead_max_ns),
            d.drains
        ),
    };
}

/// The calls per device they went to (nothing when the process made none).
fn devices(s: &mut String, d: &[crate::model::devices::DeviceReport]) {
    if d.is_empty() {
        return;
    }
    s.push_str("  by device (unknown: a context made current before gpuprofd attached):\n");
    let rows: Vec<Vec<String>> = d
        .iter()
        .map(|r| {
            vec![
                r.device.map_or("unknown".to_owned(), |d| d.to_string()),
                r.launches.to_string(),
                r.copies.to_string(),
                fmt::bytes(r.copy_bytes),
                r.memsets.to_string(),
                r.syncs.to_string(),
                r.allocations.to_string(),
                fmt::bytes(r.alloc_bytes),
            ]
        })
        .collect();
    use Align::{Left as L, Right as R};
    s.push_str(&table(
        "    ",
        &[
            "device",
            "launches",
            "copies",
            "copied",
            "memsets",
            "syncs",
            "allocations",
            "allocated",
        ],
        &[L, R, R, R, R, R, R, R],
        &rows,
    ));
}

fn allocations(s: &mut String, a: &AllocReport) {
    if a.calls == 0 && a.frees == 0 {
        s.push_str("  allocations: none\n");
        return;
    }
    let _ = write!(
        s,
        "  allocations: {} calls ({} failed), {} allocated, {} frees, live {}, peak {}",
        a.calls,
        a.failed,
        fmt::bytes(a.bytes),
        a.frees,
        fmt::bytes(a.live_bytes),
        fmt::bytes(a.peak_bytes)
    );
    if a.untracked > 0 {
        let _ = write!(s, " ({} not tracked: cap reached)", a.untracked);
    }
    s.push('\n');
    let k = &a.by_kind;
    let kinds = [
        ("device", k.device),
        ("host_pinned", k.host_pinned),
        ("managed", k.managed),
        ("async", k.async_),
        ("pitched", k.pitched),
        ("vmm", k.vmm),
    ];
    let parts: Vec<String> = kinds
        .iter()
        .filter(|(_, t)| t.calls > 0)
        .map(|(n, t)| format!("{n} {} ({} calls)", fmt::bytes(t.bytes), t.calls))
        .collect();
    if !parts.is_empty() {
        let _ = writeln!(s, "    by kind: {}", parts.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::LibraryReport;
    use crate::model::snapshot::{
        ApiReport, ByKind, CopyReport, GraphReport, KernelReport, KindReport, SCHEMA,
    };
    use std::collections::BTreeMap;

    fn kernel(name: &str, calls: u64, grid: u32, api: &str) -> KernelReport {
        KernelReport {
            name: name.into(),
            mangled: None,
            calls,
            grid: [grid, 1, 1],
            block: [256, 1, 1],
            shared_bytes: 1024,
            streams: 1,
            api: api.into(),
            name_source: "register_function".into(),
            gpu_time: None,
        }
    }

    fn report(drops: &[(&str, u64)]) -> Report {
        let p = ProcessReport {
            owner: None,
            tgid: 4242,
            comm: "python3".into(),
            cmdline: "python3 train.py --epochs 1".into(),
            exited: true,
            job: None,
            launches: 1234,
            unnamed_launches: 4,
            kernels: vec![
                kernel(
                    "vecAdd(float const*, float const*, float*, int)",
                    1000,
                    64,
                    "cudaLaunchKernel",
                ),
                kernel(
                    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)",
                    230,
                    1024,
                    "cuLaunchKernel",
                ),
                kernel("<unknown 0x7f00dead>", 4, 1, "cuLaunchKernel"),
            ],
            copies: vec![
                CopyReport {
                    direction: "h2d".into(),
                    calls: 50,
                    bytes: 52_428_800,
                    async_calls: 0,
                    blocked_ns: 12_345_678,
                    pageable_calls: 50,
                    pageable_bytes: 52_428_800,
                    size_histogram: vec![],
                },
                CopyReport {
                    direction: "d2h".into(),
                    calls: 2,
                    bytes: 512,
                    async_calls: 2,
                    blocked_ns: 0,
                    pageable_calls: 0,
                    pageable_bytes: 0,
                    size_histogram: vec![],
                },
            ],
            api: vec![
                ApiReport {
                    name: "cudaLaunchKernel".into(),
                    calls: 1000,
                    blocked_ns: 0,
                    p50_ns: 0,
                    p99_ns: 0,
                    max_ns: 0,
                },
                ApiReport {
                    name: "cudaStreamSynchronize".into(),
                    calls: 100,
                    blocked_ns: 5_050_000,
                    p50_ns: 49_919,
                    p99_ns: 98_815,
                    max_ns: 100_000,
                },
            ],
            graphs: GraphReport { launches: 3 },
            allocations: AllocReport {
                calls: 8,
                failed: 1,
                bytes: 16 << 20,
                frees: 5,
                live_bytes: 1234,
                peak_bytes: 4567,
                untracked: 0,
                by_kind: ByKind {
                    device: KindReport {
                        calls: 6,
                        bytes: 16 << 20,
                    },
                    host_pinned: KindReport { calls: 2, bytes: 0 },
                    ..Default::default()
                },
            },
            gpu: None,
            streams: Vec::new(),
            code: Vec::new(),
            stacks: Default::default(),
            timeline: None,
            launch_sampling: None,
            derived_gpu_idle: None,
            nccl: None,
            gpu_time: Default::default(),
            devices: Vec::new(),
        };
        Report {
            schema: SCHEMA.into(),
            host: "gpu-box".into(),
            started_at: "2026-11-23T07:00:00Z".into(),
            duration_ns: 12_500_000_000,
            drops: drops
                .iter()
                .map(|(k, n)| ((*k).to_owned(), *n))
                .collect::<BTreeMap<_, _>>(),
            submitted: BTreeMap::new(),
            probe_faults: BTreeMap::new(),
            decode_errors: 0,
            nvml: Default::default(),
            gpus: vec![],
            jobs: vec![],
            processes: vec![p],
            libraries: vec![
                LibraryReport {
                    path: "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03".into(),
                    soname: "libcuda.so.1".into(),
                    layer: "driver".into(),
                    version: Some("535.261.03".into()),
                    build_id: Some("ab12".into()),
                    probes: 61,
                },
                LibraryReport {
                    path: "/venv/nvidia/cuda_runtime/lib/libcudart.so.12".into(),
                    soname: "libcudart.so.12".into(),
                    layer: "runtime".into(),
                    version: None,
                    build_id: None,
                    probes: 88,
                },
            ],
            launch_duty: None,
        }
    }

    #[test]
    fn probe_faults_are_said_when_any_happened() {
        let mut r = Report {
            probe_faults: BTreeMap::from([
                ("launch_counts_full".to_owned(), 0),
                ("user_read".to_owned(), 3),
            ]),
            ..serde_json::from_value(serde_json::json!({
                "schema": "gpuprofd.report/1", "host": "h", "started_at": "x",
                "duration_ns": 0, "drops": {}, "submitted": {}, "decode_errors": 0,
                "jobs": [], "processes": []}))
            .unwrap()
        };
        assert_eq!(
            probe_faults(&r),
            "probe faults: user_read 3 (a call's arguments or results unreadable: recorded as 0)\n"
        );
        r.probe_faults.insert("user_read".into(), 0);
        assert_eq!(probe_faults(&r), "");
    }

    #[test]
    fn gpm_lines() {
        use crate::model::snapshot::{GpmJobReport, GpmReport};
        use crate::nvml::gpm::Figures;
        let f = |sm: f64| Figures {
            sm_activity_pct: Some(sm),
            sm_occupancy_pct: Some(20.0),
            tensor_activity_pct: Some(40.0),
            tensor_hmma_pct: Some(40.0),
            tensor_imma_pct: Some(0.0),
            dram_bandwidth_pct: Some(55.5),
            fp32_activity_pct: Some(10.0),
            pcie_tx_mib_per_s: Some(128.0),
            pcie_rx_mib_per_s: Some(256.0),
            ..Figures::default()
        };
        let m = GpmReport {
            state: "measured".into(),
            detail: String::new(),
            source: "measured".into(),
            samples: 9,
            avg: Some(f(62.5)),
            max: Some(f(75.0)),
            jobs: vec![GpmJobReport {
                workload: "slurm:77".into(),
                samples: 8,
                avg: f(65.0),
            }],
            shared_samples: 1,
            idle_samples: 0,
            unattributed_samples: 0,
        };
        let mut s = String::new();
        gpm(&mut s, &m);
        assert_eq!(
            s,
            concat!(
                "    gpm (measured, 9 samples): SM activity avg 62.5% (max 75.0%), SM occupancy avg 20.0%, ",
                "tensor avg 40.0% (HMMA 40.0%, IMMA 0.0%, DFMA -), DRAM bandwidth avg 55.5%\n",
                "      FP16 -, FP32 10.0%, FP64 -; PCIe tx 128.0 MiB/s rx 256.0 MiB/s; NVLink tx - rx -\n",
                "      held (samples): slurm:77 alone 8 (SM activity avg 65.0%), shared 1\n",
            )
        );
        let mut s = String::new();
        gpm(
            &mut s,
            &GpmReport {
                state: "unsupported".into(),
                detail: "the device does not support GPM".into(),
                source: String::new(),
                samples: 0,
                avg: None,
                max: None,
                jobs: vec![],
                shared_samples: 0,
                idle_samples: 0,
                unattributed_samples: 0,
            },
        );
        assert_eq!(s, "    gpm: unsupported: the device does not support GPM\n");
    }

    #[test]
    fn golden() {
        let want = concat!(
            "gpuprofd report: host gpu-box, started 2026-11-23T07:00:00Z, duration 12.500 s\n",
            "no records lost; decode errors: 0\n",
            "CUDA libraries: libcuda.so.1 535.261.03 (driver, 61 probes), libcudart.so.12 (runtime, 88 probes)\n",
            "\n",
            "process 4242 python3 (exited)\n",
            "  cmdline: python3 train.py --epochs 1\n",
            "  kernel launches 1234 (4 unnamed), graph launches 3\n",
            "  kernels by launches:\n",
            "    launches  grid      block    smem B  api               kernel\n",
            "        1000  64x1x1    256x1x1    1024  cudaLaunchKernel  vecAdd(float const*, float const*, float*, int)\n",
            "         230  1024x1x1  256x1x1    1024  cuLaunchKernel    void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_…\n",
            "    … 1 more rows not shown\n",
            "  copies:\n",
            "    direction  calls     bytes  async  blocked (CPU) ms\n",
            "    h2d           50  50.0 MiB      0            12.346\n",
            "    d2h            2     512 B      2                 -\n",
            "  API calls (blocked = CPU time inside the call; - = no return probe):\n",
            "    api                    calls  blocked (CPU) ms  p50 µs  p99 µs  max µs\n",
            "    cudaLaunchKernel        1000                 -       -       -       -\n",
            "    cudaStreamSynchronize    100             5.050    49.9    98.8   100.0\n",
            "  allocations: 8 calls (1 failed), 16.0 MiB allocated, 5 frees, live 1.2 KiB, peak 4.5 KiB\n",
            "    by kind: device 16.0 MiB (6 calls), host_pinned 0 B (2 calls)\n",
        );
        assert_eq!(render_with(&report(&[("copy", 0), ("launch", 0)]), 2), want);
    }

    #[test]
    fn drops_warn_and_empty_sections() {
        let mut r = report(&[("copy", 3), ("launch", 12), ("sync", 0)]);
        r.decode_errors = 2;
        r.libraries.clear();
        let p = &mut r.processes[0];
        (p.comm, p.cmdline, p.exited) = (String::new(), String::new(), false);
        (p.kernels, p.copies, p.api) = (vec![], vec![], vec![]);
        p.allocations = AllocReport::default();
        let want = concat!(
            "gpuprofd report: host gpu-box, started 2026-11-23T07:00:00Z, duration 12.500 s\n",
            "WARNING: records lost (copy 3, launch 12): counts below are lower bounds; decode errors: 2\n",
            "\n",
            "process 4242 ?\n",
            "  kernel launches 1234 (4 unnamed), graph launches 3\n",
            "  kernels: none\n",
            "  copies: none\n",
            "  API calls: none\n",
            "  allocations: none\n",
            "\n",
            "advice (from CPU-side measurements, NVML and measured GPU times; see docs/CAPTURE-FILES.md#advice):\n",
            "  [records_lost] capture: 15 records were lost because the ring buffer was full; \
             every count in this report is a lower bound\n",
            "    try: capture again with a larger --ring-buffer-mb (e.g. 256), or narrow the \
             capture with --pid / --job\n",
        );
        assert_eq!(render(&r), want);
        r.processes.clear();
        r.drops.clear();
        assert!(
            render(&r)
                .ends_with("no records lost; decode errors: 2\n\nno CUDA activity recorded\n")
        );
    }

    #[test]
    fn the_calls_per_device_follow_the_launch_line_unknown_last() {
        use crate::model::devices::DeviceReport;
        let mut r = report(&[("copy", 0), ("launch", 0)]);
        r.processes[0].devices = vec![
            DeviceReport {
                device: Some(1),
                launches: 1200,
                copies: 50,
                copy_bytes: 50 << 20,
                syncs: 100,
                allocations: 8,
                alloc_bytes: 16 << 20,
                ..Default::default()
            },
            DeviceReport {
                device: None,
                launches: 34,
                copies: 2,
                copy_bytes: 512,
                ..Default::default()
            },
        ];
        let text = render_with(&r, 2);
        let want = concat!(
            "  kernel launches 1234 (4 unnamed), graph launches 3\n",
            "  by device (unknown: a context made current before gpuprofd attached):\n",
            "    device   launches  copies    copied  memsets  syncs  allocations  allocated\n",
            "    1            1200      50  50.0 MiB        0    100            8   16.0 MiB\n",
            "    unknown        34       2     512 B        0      0            0        0 B\n",
            "  kernels by launches:\n",
        );
        assert!(text.contains(want), "{text}");
    }
}

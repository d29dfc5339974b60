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
mod tests;

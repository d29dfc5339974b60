//! The views with a row per process or per job: `memory` (device memory per process),
//! `processes` (launches, copies and blocked time per process) and `jobs`.

use super::columns::{Cell, Column, LEFT, RIGHT, Rows};
use super::select::{Key, Tabular};
use super::{OrderBy, job_text, per_second};
use crate::analysis::steps::ProcessSteps;
use crate::model::snapshot::{JobReport, ProcessReport, Report};

/// `--view memory`.
pub struct Memory;

impl Rows for Memory {
    type Row<'a> = &'a ProcessReport;
}

impl Tabular for Memory {
    const ORDER: OrderBy = OrderBy::Bytes;
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("pid", "PID", RIGHT, |p| Cell::Int(p.tgid.into())),
        Column::new("comm", "COMM", LEFT.cut(24), |p| Cell::text(&p.comm)),
        Column::new("calls", "ALLOCS", RIGHT, |p| Cell::Int(p.allocations.calls)),
        Column::new("bytes", "BYTES", RIGHT, |p| {
            Cell::Bytes(p.allocations.bytes)
        }),
        Column::new("frees", "FREES", RIGHT, |p| Cell::Int(p.allocations.frees)),
        Column::new("live_bytes", "LIVE", RIGHT, |p| {
            Cell::Bytes(p.allocations.live_bytes)
        }),
        Column::new("peak_bytes", "PEAK", RIGHT, |p| {
            Cell::Bytes(p.allocations.peak_bytes)
        }),
        Column::new("failed", "FAILED", RIGHT, |p| {
            Cell::Int(p.allocations.failed)
        }),
        // What a process that ended still held; a running one's live bytes are not leaks.
        Column::new("never_freed_bytes", "NEVER FREED", RIGHT.wide(), |p| {
            Cell::or_null(p.exited.then_some(p.allocations.live_bytes), Cell::Bytes)
        }),
    ];

    fn rows<'a>(r: &'a Report, _: &'a [ProcessSteps]) -> Vec<&'a ProcessReport> {
        r.processes.iter().collect()
    }

    fn key(p: &&ProcessReport) -> Key {
        let a = &p.allocations;
        Key::process(p, &p.comm, a.calls, a.bytes, 0)
    }
}

/// `--view processes`.
pub struct Processes;

impl Rows for Processes {
    type Row<'a> = &'a ProcessReport;
}

/// Bytes `p` copied, all directions.
fn copy_bytes(p: &ProcessReport) -> u64 {
    p.copies.iter().map(|c| c.bytes).sum()
}

/// Time `p` was blocked in calls, all APIs.
fn blocked_ns(p: &ProcessReport) -> u64 {
    p.api.iter().map(|a| a.blocked_ns).sum()
}

impl Tabular for Processes {
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("pid", "PID", RIGHT, |p| Cell::Int(p.tgid.into())),
        Column::new("comm", "COMM", LEFT.cut(24), |p| Cell::text(&p.comm)),
        Column::new("job", "JOB", LEFT.cut(24), |p| job_text(p)),
        Column::new("launches", "LAUNCHES", RIGHT, |p| Cell::Int(p.launches)),
        Column::new("rate", "PER s", RIGHT.wide(), |p| per_second(p.launches, p)),
        Column::new("copy_bytes", "COPIED", RIGHT, |p| {
            Cell::Bytes(copy_bytes(p))
        }),
        Column::new("blocked_ns", "BLOCKED ms", RIGHT, |p| {
            Cell::Ms(blocked_ns(p))
        }),
        Column::new("peak_bytes", "PEAK MEM", RIGHT, |p| {
            Cell::Bytes(p.allocations.peak_bytes)
        }),
        // Kernels, copies and memsets as CUPTI measured them (the injection library).
        Column::new("gpu_total_ns", "GPU ms", RIGHT.wide(), |p| {
            let g = &p.gpu_time;
            Cell::or_null((g.basis == "measured").then_some(g), |g| {
                Cell::Ms(g.kernel_ns + g.memcpy_ns + g.memset_ns)
            })
        }),
        // `measured`, or why there is no GPU time.
        Column::new("gpu_time", "GPU TIME", LEFT.json_only(), |p| {
            let g = &p.gpu_time;
            Cell::text(g.unavailable.as_deref().unwrap_or(&g.basis))
        }),
        Column::new("exited", "EXITED", LEFT, |p| Cell::Bool(p.exited)),
    ];

    fn rows<'a>(r: &'a Report, _: &'a [ProcessSteps]) -> Vec<&'a ProcessReport> {
        r.processes.iter().collect()
    }

    fn key(p: &&ProcessReport) -> Key {
        Key::process(p, &p.comm, p.launches, copy_bytes(p), blocked_ns(p))
    }
}

/// `--view jobs`.
pub struct Jobs;

impl Rows for Jobs {
    type Row<'a> = &'a JobReport;
}

/// GPM's SM activity (a fraction) of the GPUs the job held alone, weighted by their rounds.
fn gpm_sm_activity(j: &JobReport) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0u64);
    for g in &j.gpm {
        if let Some(v) = g.avg.sm_activity_pct {
            sum += v * g.samples as f64;
            n += g.samples;
        }
    }
    (n > 0).then(|| sum / n as f64 / 100.0)
}

/// `id (name)`, or the id.
fn label(j: &JobReport) -> String {
    match &j.name {
        Some(n) => format!("{} ({n})", j.id),
        None => j.id.clone(),
    }
}

impl Tabular for Jobs {
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("kind", "KIND", LEFT, |j| Cell::text(&j.kind)),
        Column::new("job", "JOB", LEFT.cut(24), |j| Cell::Text(label(j))),
        Column::new("processes", "PROCS", RIGHT, |j| {
            Cell::Int(j.processes.len() as u64)
        }),
        Column::new("launches", "LAUNCHES", RIGHT, |j| Cell::Int(j.launches)),
        Column::new("copy_bytes", "COPIED", RIGHT, |j| Cell::Bytes(j.copy_bytes)),
        Column::new("blocked_ns", "BLOCKED ms", RIGHT, |j| {
            Cell::Ms(j.blocked_ns)
        }),
        // Measured (NVML GPM), over the rounds the job held its GPUs alone.
        Column::new("gpm_sm_activity", "GPM SM", RIGHT.wide(), |j| {
            Cell::or_null(gpm_sm_activity(j), Cell::Share)
        }),
    ];

    fn rows<'a>(r: &'a Report, _: &'a [ProcessSteps]) -> Vec<&'a JobReport> {
        r.jobs.iter().collect()
    }

    fn key(j: &&JobReport) -> Key {
        Key {
            tgid: None,
            job: Some((j.id.clone(), j.name.clone())),
            name: label(j),
            calls: j.launches,
            bytes: j.copy_bytes,
            blocked_ns: j.blocked_ns,
        }
    }
}

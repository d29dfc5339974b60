//! `--view steps`: per process with a training loop, the medians of its regular steps (what
//! the loop usually does); JSON adds every step. `IDLE≥`/`AHEAD≥` are derived (a lower bound
//! on the GPU's idle time per step, and the host's launch-ahead: docs/GPU-TIME.md); `GPU ms`
//! (the step's kernels' GPU time, summed), `BUSY ms` and `BUSY` (the time some GPU work of the
//! process ran inside the step, and its share of the step), `COMM ms` and `EXPOSED ms` (NCCL's
//! kernels inside the step, and the part nothing else of the process ran beside) are measured
//! where the injection library listened.

use super::columns::{Cell, Column, LEFT, RIGHT, Rows};
use super::select::{Key, Tabular, job_label};
use crate::analysis::steps::{ProcessSteps, Step, quantile};
use crate::model::snapshot::{ProcessReport, Report};
use serde_json::json;

/// A process's steps, with its report entry (for its job).
pub struct Loop<'a> {
    s: &'a ProcessSteps,
    p: Option<&'a ProcessReport>,
    regular: Vec<&'a Step>,
}

impl Loop<'_> {
    /// The `at` quantile of `f` over the regular steps.
    fn q(&self, f: fn(&Step) -> u64, at: f64) -> u64 {
        quantile(self.regular.iter().map(|x| f(x)).collect(), at)
    }

    /// The `at` quantile of `f` over the regular steps that have it (`None`: none has).
    fn q_some(&self, f: fn(&Step) -> Option<u64>, at: f64) -> Option<u64> {
        let v: Vec<u64> = self.regular.iter().filter_map(|x| f(x)).collect();
        (!v.is_empty()).then(|| quantile(v, at))
    }
}

/// `--view steps`.
pub struct Steps;

impl Rows for Steps {
    type Row<'a> = Loop<'a>;
}

impl Tabular for Steps {
    const COLUMNS: &'static [Column<Self>] = &[
        Column::new("pid", "PID", RIGHT, |r| Cell::Int(r.s.tgid.into())),
        Column::new("boundary", "BOUNDARY", LEFT.cut(24), |r| {
            Cell::text(&r.s.boundary)
        }),
        Column::new("calls", "STEPS", RIGHT, |r| {
            Cell::Int(r.regular.len() as u64)
        }),
        Column::new("irregular", "IRREG", RIGHT.wide(), |r| {
            Cell::Int((r.s.steps.len() - r.regular.len()) as u64)
        }),
        Column::new("wall_p50_ns", "P50 ms", RIGHT, |r| {
            Cell::Ms(r.q(|x| x.wall_ns, 0.5))
        }),
        Column::new("wall_p90_ns", "P90 ms", RIGHT.wide(), |r| {
            Cell::Ms(r.q(|x| x.wall_ns, 0.9))
        }),
        Column::new("launches", "LAUNCH/STEP", RIGHT, |r| {
            Cell::Int(r.q(|x| x.launches, 0.5))
        }),
        Column::new("blocked_ns", "BLOCKED ms", RIGHT.wide(), |r| {
            Cell::Ms(r.q(|x| x.blocked_ns, 0.5))
        }),
        Column::new("first_enqueue_ns", "INPUT ms", RIGHT, |r| {
            Cell::Ms(r.q(|x| x.first_enqueue_ns, 0.5))
        }),
        // Derived (model::busy), never measured: a lower bound, hence ≥.
        Column::new("derived_gpu_idle_ns", "IDLE≥ ms", RIGHT, |r| {
            Cell::or_null(r.q_some(|x| x.derived_gpu_idle_ns, 0.5), Cell::Ms)
        }),
        Column::new(
            "derived_launch_ahead_ns",
            "AHEAD≥ ms",
            RIGHT.wide(),
            |r| Cell::or_null(r.q_some(|x| x.derived_launch_ahead_ns, 0.5), Cell::Ms),
        ),
        // Measured (CUPTI, joined to the launches): the step's kernels' GPU time.
        Column::new("gpu_ns", "GPU ms", RIGHT.wide(), |r| {
            Cell::or_null(r.q_some(|x| x.gpu_ns, 0.5), Cell::Ms)
        }),
        // Measured (CUPTI): the union of the GPU work's intervals inside the step, and its
        // share of the step's wall time (median over the steps that have it).
        Column::new("gpu_busy_ns", "BUSY ms", RIGHT.wide(), |r| {
            Cell::or_null(r.q_some(|x| x.gpu_busy_ns, 0.5), Cell::Ms)
        }),
        Column::new("gpu_busy_share", "BUSY", RIGHT, |r| {
            let v: Vec<u64> = r
                .regular
                .iter()
                .filter_map(|x| x.gpu_busy_permille())
                .collect();
            if v.is_empty() {
                Cell::Null
            } else {
                Cell::Share(quantile(v, 0.5) as f64 / 1000.0)
            }
        }),
        // Measured (CUPTI): NCCL's kernels inside the step, and the part nothing else ran
        // beside (exposed communication).
        Column::new("gpu_comm_ns", "COMM ms", RIGHT.wide(), |r| {
            Cell::or_null(r.q_some(|x| x.gpu_comm_ns, 0.5), Cell::Ms)
        }),
        Column::new("gpu_comm_exposed_ns", "EXPOSED ms", RIGHT.wide(), |r| {
            Cell::or_null(r.q_some(|x| x.gpu_comm_exposed_ns, 0.5), Cell::Ms)
        }),
        Column::new("copy_bytes", "COPIED/STEP", RIGHT.wide(), |r| {
            Cell::Bytes(r.q(|x| x.copy_bytes, 0.5))
        }),
        Column::new("steps", "", LEFT.json_only(), |r| {
            Cell::Json(json!(r.s.steps))
        }),
    ];

    fn rows<'a>(r: &'a Report, steps: &'a [ProcessSteps]) -> Vec<Loop<'a>> {
        steps
            .iter()
            .map(|s| Loop {
                s,
                // The report entry of this process generation.
                p: r.processes
                    .iter()
                    .filter(|p| p.tgid == s.tgid)
                    .nth(s.generation as usize),
                regular: s.regular().collect(),
            })
            .collect()
    }

    fn key(r: &Loop<'_>) -> Key {
        Key {
            tgid: Some(r.s.tgid),
            job: r.p.and_then(job_label),
            name: r.s.boundary.clone(),
            calls: r.regular.len() as u64,
            bytes: r.q(|x| x.copy_bytes, 0.5),
            blocked_ns: r.q(|x| x.blocked_ns, 0.5),
        }
    }
}

//! A step's **measured** GPU busy time and communication: how long, inside the step's
//! wall-clock window, at least one of the process's kernels, copies or memsets was running on
//! the GPU (CUPTI's records from the injection library); how long one of NCCL's kernels was;
//! and how long an NCCL kernel ran with nothing else of the process running beside it (the
//! communication the step waited for: "exposed"). Overlap between streams counts once: these
//! are unions of the records' GPU intervals, clipped to each step's window, not sums of their
//! durations (the step's `gpu_ns` is that sum, and exceeds the wall time when streams
//! overlap). The step's wall time less its busy time is the time the GPU ran nothing of this
//! process. Exposed communication is busy time less the busy time of everything that is not an
//! NCCL kernel: `|C ∪ W| − |W|`, with `C` the NCCL kernels' intervals and `W` the rest.
//!
//! The records reach the capture when the library delivers them (about every 100 ms), after
//! the launches and often after the step that launched them ended. So the intervals wait in a
//! buffer and are folded into the closed steps' windows once they are older than [`LAG_NS`]
//! behind the latest step's end: a record that arrives later than that, for a time already
//! folded, is cut at the fold (its part before it is not counted), which keeps the unions exact
//! for everything else. The buffers hold about [`LAG_NS`] plus one step of records (16 bytes
//! each, twice); past [`COMPACT_AT`] a buffer is merged in place.
//!
//! Which steps are measured: those that start inside a span in which the library listened
//! (from its `enabled` report, or its first record where the capture holds no report, to its
//! `disabled` or `yielded` report). The others read `null`, never 0.
//!
//! Written here rather than taken from a crate: an interval union folded into sorted windows
//! is a dozen lines; interval-tree crates keep every interval, which this must not.

use crate::model::nccl::is_nccl_kernel;
use profiler_common::gpu::{GpuActivity, GpuNameBody, activity, state};
use std::collections::HashSet;

/// How far behind the latest step's end the fold stays (ns): the library's delivery delay,
/// with a wide margin.
pub const LAG_NS: u64 = 2_000_000_000;
/// Buffered intervals past which a buffer is merged in place.
const COMPACT_AT: usize = 1 << 20;

/// A step's measured GPU figures (ns inside its window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Busy {
    /// Some GPU work of the process ran.
    pub busy: u64,
    /// An NCCL kernel of the process ran.
    pub comm: u64,
    /// An NCCL kernel ran and nothing else of the process did.
    pub comm_exposed: u64,
}

/// The union of a set of intervals, folded into the steps' windows as it goes.
#[derive(Default)]
struct Union {
    /// Intervals not yet folded, `[start, end)` (monotonic ns), unordered.
    pending: Vec<(u64, u64)>,
    /// Everything before it has been folded.
    frontier: u64,
    compact_at: usize,
    /// Busy time per step window.
    busy: Vec<u64>,
}

impl Union {
    fn add(&mut self, start: u64, end: u64) {
        let start = start.max(self.frontier);
        if end > start {
            self.pending.push((start, end));
            if self.pending.len() >= self.compact_at.max(COMPACT_AT) {
                self.compact();
            }
        }
    }

    /// Sorts and merges the buffer in place (nothing is credited).
    fn compact(&mut self) {
        self.pending.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(self.pending.len());
        for &(a, b) in &self.pending {
            match out.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        self.pending = out;
        self.compact_at = self.pending.len() * 2;
    }

    /// Credits the union of the buffered intervals before `upto` to the `windows` (disjoint,
    /// in order) and keeps the rest.
    fn fold(&mut self, upto: u64, windows: &[(u64, u64)]) {
        self.busy.resize(windows.len(), 0);
        if upto <= self.frontier {
            return;
        }
        self.compact();
        let mut keep = Vec::new();
        for (a, b) in std::mem::take(&mut self.pending) {
            if a >= upto {
                keep.push((a, b));
                continue;
            }
            if b > upto {
                keep.push((upto, b));
            }
            // The merged intervals are disjoint: nothing is counted twice.
            let b = b.min(upto);
            let mut i = windows.partition_point(|w| w.1 <= a);
            while let Some(&(ws, we)) = windows.get(i) {
                if ws >= b {
                    break;
                }
                self.busy[i] += b.min(we).saturating_sub(a.max(ws));
                i += 1;
            }
        }
        self.pending = keep;
        self.frontier = upto;
    }
}

#[derive(Default)]
pub struct GpuBusy {
    /// Every kernel, copy and memset; NCCL's kernels; all of them but NCCL's kernels.
    all: Union,
    comm: Union,
    other: Union,
    /// CUPTI's name ids (this process, since the library's last enable) of NCCL's kernels.
    nccl: HashSet<u32>,
    /// The spans the library listened in: `(from, until)`, the last one open.
    spans: Vec<(u64, Option<u64>)>,
    /// The steps' windows `[start, end)` (monotonic ns, in order).
    windows: Vec<(u64, u64)>,
}

impl GpuBusy {
    /// One of the library's state reports, at `ts` (monotonic ns).
    pub fn state(&mut self, ts: u64, code: u32) {
        let open = self.spans.last().is_some_and(|s| s.1.is_none());
        match code {
            state::ENABLED | state::DROPPED if !open => self.spans.push((ts, None)),
            state::DISABLED | state::YIELDED | state::NO_CUPTI if open => {
                if let Some(s) = self.spans.last_mut() {
                    s.1 = Some(ts);
                }
            }
            _ => {}
        }
    }

    /// A kernel name the library announced (ids start again from 1 at each enable).
    pub fn name(&mut self, b: &GpuNameBody) {
        if is_nccl_kernel(b.name_bytes()) {
            self.nccl.insert(b.id);
        } else {
            self.nccl.remove(&b.id);
        }
    }

    /// One record of the library: kernels, copies and memsets are GPU work.
    pub fn record(&mut self, a: &GpuActivity) {
        if !matches!(
            a.kind,
            activity::KERNEL | activity::MEMCPY | activity::MEMSET
        ) {
            return;
        }
        if self.spans.is_empty() {
            // No report in the capture (it began after the library's): from its first record.
            self.spans.push((a.start_ns, None));
        }
        self.all.add(a.start_ns, a.end_ns);
        if a.kind == activity::KERNEL && self.nccl.contains(&a.name) {
            self.comm.add(a.start_ns, a.end_ns);
        } else {
            self.other.add(a.start_ns, a.end_ns);
        }
    }

    /// A step closed: its window `[start, end)` (monotonic ns).
    pub fn step(&mut self, start: u64, end: u64) {
        self.windows.push((start, end));
        self.fold(end.saturating_sub(LAG_NS));
    }

    fn fold(&mut self, upto: u64) {
        for u in [&mut self.all, &mut self.comm, &mut self.other] {
            u.fold(upto, &self.windows);
        }
    }

    /// Every step's figures (`None` where the library did not listen from its start), in the
    /// order they closed.
    pub fn finish(mut self) -> Vec<Option<Busy>> {
        self.fold(u64::MAX);
        let spans = &self.spans;
        self.windows
            .iter()
            .enumerate()
            .map(|(i, (start, _))| {
                let (all, other) = (self.all.busy[i], self.other.busy[i]);
                let comm = self.comm.busy[i];
                spans
                    .iter()
                    .any(|(from, until)| *from <= *start && until.is_none_or(|u| *start < u))
                    .then(|| Busy {
                        busy: all,
                        comm,
                        comm_exposed: all.saturating_sub(other),
                    })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;

//! A step's **measured** GPU busy time: how long, inside the step's wall-clock window, at least
//! one of the process's kernels, copies or memsets was running on the GPU (CUPTI's records from
//! the injection library). Overlap between streams counts once: this is the union of the
//! records' GPU intervals, clipped to each step's window, not the sum of their durations (the
//! step's `gpu_ns` is that sum, and exceeds the wall time when streams overlap). The step's
//! wall time less its busy time is the time the GPU ran nothing of this process.
//!
//! The records reach the capture when the library delivers them (about every 100 ms), after
//! the launches and often after the step that launched them ended. So the intervals wait in a
//! buffer and are folded into the closed steps' windows once they are older than [`LAG_NS`]
//! behind the latest step's end: a record that arrives later than that, for a time already
//! folded, is cut at the fold (its part before it is not counted), which keeps the union exact
//! for everything else. The buffer holds about [`LAG_NS`] plus one step of records (16 bytes
//! each); when it grows past [`COMPACT_AT`] it is merged in place.
//!
//! Which steps are measured: those that start inside a span in which the library listened
//! (from its `enabled` report, or its first record where the capture holds no report, to its
//! `disabled` or `yielded` report). The others read `null`, never 0.
//!
//! Written here rather than taken from a crate: an interval union folded into sorted windows
//! is a dozen lines; interval-tree crates keep every interval, which this must not.

use profiler_common::gpu::{GpuActivity, activity, state};

/// How far behind the latest step's end the fold stays (ns): the library's delivery delay,
/// with a wide margin.
pub const LAG_NS: u64 = 2_000_000_000;
/// Buffered intervals past which the buffer is merged in place.
const COMPACT_AT: usize = 1 << 20;

#[derive(Default)]
pub struct GpuBusy {
    /// Intervals not yet folded, `[start, end)` (monotonic ns), unordered.
    pending: Vec<(u64, u64)>,
    /// Everything before it has been folded.
    frontier: u64,
    compact_at: usize,
    /// The spans the library listened in: `(from, until)`, the last one open.
    spans: Vec<(u64, Option<u64>)>,
    /// The steps' windows `[start, end)` (monotonic ns, in order) and their busy time.
    windows: Vec<(u64, u64)>,
    busy: Vec<u64>,
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
        let start = a.start_ns.max(self.frontier);
        if a.end_ns > start {
            self.pending.push((start, a.end_ns));
            if self.pending.len() >= self.compact_at.max(COMPACT_AT) {
                self.compact();
            }
        }
    }

    /// A step closed: its window `[start, end)` (monotonic ns).
    pub fn step(&mut self, start: u64, end: u64) {
        self.windows.push((start, end));
        self.busy.push(0);
        self.fold(end.saturating_sub(LAG_NS));
    }

    /// Every step's busy time (`None` where the library did not listen from its start), in
    /// the order they closed.
    pub fn finish(mut self) -> Vec<Option<u64>> {
        self.fold(u64::MAX);
        let spans = &self.spans;
        self.windows
            .iter()
            .zip(self.busy)
            .map(|((start, _), b)| {
                spans
                    .iter()
                    .any(|(from, until)| *from <= *start && until.is_none_or(|u| *start < u))
                    .then_some(b)
            })
            .collect()
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

    /// Credits the union of the buffered intervals before `upto` to the steps' windows and
    /// keeps the rest.
    fn fold(&mut self, upto: u64) {
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
            self.credit(a, b.min(upto));
        }
        self.pending = keep;
        self.frontier = upto;
    }

    /// Adds the overlap of `[a, b)` with each step's window (the merged intervals are
    /// disjoint, so nothing is counted twice).
    fn credit(&mut self, a: u64, b: u64) {
        let mut i = self.windows.partition_point(|w| w.1 <= a);
        while let Some(&(ws, we)) = self.windows.get(i) {
            if ws >= b {
                break;
            }
            self.busy[i] += b.min(we).saturating_sub(a.max(ws));
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: u8, start: u64, end: u64) -> GpuActivity {
        GpuActivity {
            kind,
            start_ns: start,
            end_ns: end,
            ..GpuActivity::default()
        }
    }

    #[test]
    fn overlapping_streams_count_once_and_work_is_clipped_to_each_window() {
        let mut g = GpuBusy::default();
        g.state(0, state::ENABLED);
        // Step 1 [100, 200): two streams overlap on [120, 150); a copy runs on into step 2.
        g.record(&rec(activity::KERNEL, 110, 150));
        g.record(&rec(activity::KERNEL, 120, 160));
        g.record(&rec(activity::MEMCPY, 190, 230));
        // A launch call's record is CPU time, not GPU work.
        g.record(&rec(activity::API, 100, 200));
        g.step(100, 200);
        // Step 2 [200, 300): the copy's 30 and a memset.
        g.record(&rec(activity::MEMSET, 250, 260));
        g.step(200, 300);
        // Step 3 [300, 400): nothing ran.
        g.step(300, 400);
        assert_eq!(g.finish(), [Some(50 + 10), Some(30 + 10), Some(0)]);
    }

    #[test]
    fn records_that_come_after_their_step_closed_still_count() {
        let mut g = GpuBusy::default();
        g.state(0, state::ENABLED);
        let s = LAG_NS; // steps a lag long, so each close folds the one before
        g.step(s, 2 * s); // folds up to s: nothing yet
        // Delivered after its step closed, within the lag.
        g.record(&rec(activity::KERNEL, s + 10, s + 40));
        g.step(2 * s, 3 * s); // folds up to 2s: the first step is final
        // Later than the lag: its part before the fold is cut, the rest is the second step's.
        g.record(&rec(activity::KERNEL, s + 50, 2 * s + 5));
        g.step(3 * s, 4 * s);
        assert_eq!(g.finish(), [Some(30), Some(5), Some(0)]);
    }

    #[test]
    fn only_steps_the_library_listened_from_the_start_of_are_measured() {
        let mut g = GpuBusy::default();
        g.step(0, 100); // before any report: not measured
        g.state(150, state::ENABLED);
        g.record(&rec(activity::KERNEL, 160, 170));
        g.step(100, 200); // enabled mid-step: not measured
        g.step(200, 300);
        g.state(350, state::YIELDED);
        g.step(300, 400); // yielded mid-step: its start was measured
        g.step(400, 500);
        assert_eq!(g.finish(), [None, None, Some(0), Some(0), None]);
        // With no report at all, from the first record's start.
        let mut g = GpuBusy::default();
        g.record(&rec(activity::KERNEL, 120, 130));
        g.record(&rec(activity::KERNEL, 210, 230));
        g.step(100, 200);
        g.step(200, 300);
        assert_eq!(g.finish(), [None, Some(20)]);
    }

    #[test]
    fn a_large_buffer_is_merged_in_place_without_changing_the_sum() {
        let mut g = GpuBusy::default();
        g.state(0, state::ENABLED);
        // Twice the compaction threshold of back-to-back kernels on two streams.
        for i in 0..COMPACT_AT as u64 {
            g.record(&rec(activity::KERNEL, 1000 + i * 10, 1000 + i * 10 + 10));
            g.record(&rec(
                activity::KERNEL,
                1000 + i * 10 + 5,
                1000 + i * 10 + 15,
            ));
        }
        assert!(g.pending.len() < COMPACT_AT, "{}", g.pending.len());
        let end = 1000 + COMPACT_AT as u64 * 10 + 5;
        g.step(0, end + 100);
        assert_eq!(g.finish(), [Some(end - 1000)]);
    }
}

//! When a process was busy: its calls, launches and blocked time in a fixed number of time
//! bins from its first call to its last, whatever the length of the capture.
//!
//! The bins start [`FIRST_BIN_NS`] wide; when a call falls past the last bin, neighbouring
//! bins are merged pairwise and the width doubles, so memory stays at [`BINS`] counters per
//! process and the resolution is always between 1/[`BINS`] and 2/[`BINS`] of the process's
//! active span (or [`FIRST_BIN_NS`] for a short one).

use serde::{Deserialize, Serialize};

/// Bins per process.
pub const BINS: usize = 32;
/// Width of a bin before the first merge.
pub const FIRST_BIN_NS: u64 = 1_000_000;

#[derive(Clone, Debug)]
pub struct Activity {
    /// CLOCK_MONOTONIC ns of the first and last call (0, 0 before the first).
    pub first_ns: u64,
    pub last_ns: u64,
    pub bin_ns: u64,
    pub calls: [u64; BINS],
    pub launches: [u64; BINS],
    /// CPU time inside the calls a return probe timed, by the bin of their start.
    pub blocked_ns: [u64; BINS],
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            first_ns: 0,
            last_ns: 0,
            bin_ns: FIRST_BIN_NS,
            calls: [0; BINS],
            launches: [0; BINS],
            blocked_ns: [0; BINS],
        }
    }
}

impl Activity {
    /// One call at `ts_ns` (a launch or not) that blocked for `blocked_ns` where measured.
    /// A call stamped before the first (records of different CPUs can arrive a little out of
    /// order) counts in the first bin.
    #[inline]
    pub fn add(&mut self, ts_ns: u64, launch: bool, blocked_ns: u64) {
        self.add_n(ts_ns, 1, u64::from(launch), blocked_ns);
    }

    /// `calls` calls at `ts_ns`, `launches` of them launches (counted launches arrive together).
    pub fn add_n(&mut self, ts_ns: u64, calls: u64, launches: u64, blocked_ns: u64) {
        if self.first_ns == 0 && self.last_ns == 0 {
            self.first_ns = ts_ns;
        }
        self.last_ns = self.last_ns.max(ts_ns);
        let off = ts_ns.saturating_sub(self.first_ns);
        let mut i = off / self.bin_ns;
        while i >= BINS as u64 {
            self.halve();
            i = off / self.bin_ns;
        }
        let i = i as usize;
        self.calls[i] = self.calls[i].saturating_add(calls);
        self.launches[i] = self.launches[i].saturating_add(launches);
        self.blocked_ns[i] = self.blocked_ns[i].saturating_add(blocked_ns);
    }

    /// Merges bins pairwise; the width doubles.
    fn halve(&mut self) {
        for v in [&mut self.calls, &mut self.launches, &mut self.blocked_ns] {
            for i in 0..BINS / 2 {
                v[i] = v[2 * i].saturating_add(v[2 * i + 1]);
            }
            v[BINS / 2..].fill(0);
        }
        self.bin_ns = self.bin_ns.saturating_mul(2);
    }

    /// The bins up to the last used one, with times relative to `origin_ns` (the capture's
    /// start); `None` before the first call.
    pub fn report(&self, origin_ns: u64) -> Option<TimelineReport> {
        if self.first_ns == 0 && self.last_ns == 0 {
            return None;
        }
        let used = ((self.last_ns - self.first_ns) / self.bin_ns) as usize + 1;
        Some(TimelineReport {
            first_call_ns: self.first_ns.saturating_sub(origin_ns),
            last_call_ns: self.last_ns.saturating_sub(origin_ns),
            bin_ns: self.bin_ns,
            calls: self.calls[..used].to_vec(),
            launches: self.launches[..used].to_vec(),
            blocked_ns: self.blocked_ns[..used].to_vec(),
        })
    }
}

/// A process's activity over time (measured: CPU-side call times). Times in ns from the
/// capture's start; bin `i` covers `[first_call_ns + i·bin_ns, first_call_ns + (i+1)·bin_ns)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineReport {
    pub first_call_ns: u64,
    pub last_call_ns: u64,
    pub bin_ns: u64,
    pub calls: Vec<u64>,
    pub launches: Vec<u64>,
    pub blocked_ns: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_double_and_keep_every_call() {
        let mut a = Activity::default();
        let t0 = 5_000_000_000;
        // 100 calls 10 ms apart: 990 ms of activity needs 32 ms bins (31 used).
        for i in 0..100u64 {
            a.add(t0 + i * 10_000_000, i % 2 == 0, 1_000);
        }
        let r = a.report(t0 - 2_000_000_000).unwrap();
        assert_eq!(r.first_call_ns, 2_000_000_000);
        assert_eq!(r.last_call_ns, 2_990_000_000);
        assert_eq!(r.bin_ns, 32_000_000);
        assert_eq!(r.calls.len(), 31);
        assert_eq!(r.calls.iter().sum::<u64>(), 100);
        assert_eq!(r.launches.iter().sum::<u64>(), 50);
        assert_eq!(r.blocked_ns.iter().sum::<u64>(), 100_000);
        // Bin 0 covers [0, 32 ms): calls at 0, 10, 20, 30 ms.
        assert_eq!(r.calls[0], 4);
        assert_eq!(r.launches[0], 2);
        // The last bin, [960, 992) ms: calls at 960, 970, 980, 990.
        assert_eq!(r.calls[30], 4);
    }

    #[test]
    fn a_late_stamped_call_counts_in_the_first_bin_and_nothing_is_reported_before_a_call() {
        let mut a = Activity::default();
        assert_eq!(a.report(0), None);
        a.add(1_000_000_000, true, 0);
        a.add(999_000_000, false, 7);
        let r = a.report(0).unwrap();
        assert_eq!(
            (r.first_call_ns, r.last_call_ns, r.bin_ns),
            (1_000_000_000, 1_000_000_000, FIRST_BIN_NS)
        );
        assert_eq!(
            (r.calls, r.launches, r.blocked_ns),
            (vec![2], vec![1], vec![7])
        );
    }
}

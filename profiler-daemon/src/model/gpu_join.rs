//! The join of the injection library's kernel records to the launch calls the probes saw
//! (issue 31, "merged into the one model"): CUPTI's kernel record carries a correlation id the
//! probes never read; the driver API record of the launch call that caused it
//! ([`activity::API`]) carries the same id, the calling thread and the call's CPU times. The
//! API record on thread T with CPU span `[start, end]` claims the launch the probes recorded on
//! T with the latest timestamp ≤ `end` that no earlier API record claimed (the probe fires at
//! the function's entry, before CUPTI's `start`, so `≥ start` is not required); the kernel
//! records with its correlation id (several for a graph launch) then belong to that launch.
//!
//! Ordering. A launch's probe record is reserved in the ring at the call; its API record
//! reaches the ring only when CUPTI delivers its buffer (up to a few hundred ms later), so the
//! launch always comes first, live and in a capture file (same order). Kernel records may come
//! before their API record (another CUPTI buffer, delivered first): they wait, bounded, for it.
//!
//! Thread ids. CUPTI's are `gettid` in the process's own PID namespace; the probes' are the
//! kernel's. [`Tids`] maps them (from `NSpid` in `/proc/PID/task/*/status`,
//! `enrich::nspid`); where it cannot, the records are counted unjoined, never guessed.
//!
//! Bounded per process: while the library is enabled (its last state `enabled` or `dropped`),
//! [`PER_THREAD`] unclaimed launches per thread and [`PER_PROCESS`] in all; otherwise (no
//! library, or it is not listening) only [`PER_THREAD_IDLE`] per thread, the launches made
//! between CUPTI's enable and the library's `enabled` report. [`THREADS`] threads,
//! [`CORRELATIONS`] correlation ids kept for their kernel records, [`WAITING`] kernel records
//! waiting for their API record; what a bound pushes out is counted.
//!
//! Why so many: the library delivers CUPTI's records about every 100 ms (its poll), and a
//! launch-bound thread makes up to ~300,000 launches a second under the probes (one trap,
//! ~3 µs); 65,536 launches are ~200 ms of that. Launches pushed out before their call's record
//! came are counted (`launches_evicted`) and their kernels are timed but not joined.
//!
//! Written here rather than taken from a crate: it is a few bounded maps specific to CUPTI's
//! records.

use profiler_common::gpu::{GpuActivity, activity};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Unclaimed launches remembered per thread while the library listens (the oldest go first).
pub const PER_THREAD: usize = 65536;
/// ... and in all, per process (~48 bytes each: about 12 MiB at most).
pub const PER_PROCESS: usize = 262144;
/// Unclaimed launches remembered per thread while it does not.
pub const PER_THREAD_IDLE: usize = 1024;
/// Launches made this long (ns) after the last launch call record came, with none coming
/// since, while the library says it is enabled: CUPTI's records no longer reach it (another
/// CUPTI client took them). The library delivers every ~100 ms.
pub const RECORDS_STOPPED_NS: u64 = 2_000_000_000;
/// Threads with launches remembered per process.
pub const THREADS: usize = 1024;
/// Correlation ids remembered (with their launch) for the kernel records still to come.
pub const CORRELATIONS: usize = 65536;
/// Kernel records waiting for the API record of their launch call.
pub const WAITING: usize = 16384;

/// Why a kernel record was not joined (the report's `unjoined_by` keys).
pub mod why {
    /// Its launch call's thread could not be mapped to the kernel's thread id (the process is
    /// in its own PID namespace and the thread was not found, or the namespace is unknown).
    pub const THREAD_NOT_MAPPED: &str = "thread_not_mapped";
    /// The probes recorded no launch on that thread before the call ended (the launch came
    /// before gpuprofd attached, launches were only counted, or the launch was pushed out).
    pub const NO_LAUNCH_RECORD: &str = "no_launch_record";
    /// No API record with its correlation id came (before the library enabled them, dropped,
    /// or pushed out of the bounds).
    pub const NO_LAUNCH_CALL: &str = "no_launch_call";
}

pub use crate::enrich::nspid::Tids;

/// What the join counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JoinCounts {
    /// Kernel records tied to a launch.
    pub joined: u64,
    /// Kernel records not tied, by [`why`] (those still waiting count as `no_launch_call`).
    pub unjoined: BTreeMap<&'static str, u64>,
    /// API records (launch calls) that claimed a launch, and that did not.
    pub calls_joined: u64,
    pub calls_unjoined: u64,
    /// Launches pushed out of the per-thread bound (or of a thread past [`THREADS`]) unclaimed.
    pub launches_evicted: u64,
}

impl JoinCounts {
    pub fn unjoined_total(&self) -> u64 {
        self.unjoined.values().sum()
    }
}

/// One process's join; `L` is what the caller keeps of a launch (the model's key, the
/// timeline's slice).
#[derive(Clone, Debug)]
pub struct Joiner<L> {
    /// Host tid → unclaimed launches (timestamp, launch), in arrival order.
    threads: HashMap<u32, VecDeque<(u64, L)>>,
    /// Correlation id → its launch, or why there is none.
    corr: HashMap<u32, Result<L, &'static str>>,
    corr_order: VecDeque<u32>,
    /// Kernel records whose API record has not come, in arrival order.
    waiting: VecDeque<GpuActivity>,
    counts: JoinCounts,
    /// The library's last state was `enabled` or `dropped`: its launch calls' records come.
    listening: bool,
    /// Launches remembered, all threads.
    queued: usize,
    /// While listening: the first launch since the last launch call record came, and the
    /// launches since (all threads), and the latest launch's time.
    uncovered_since: Option<u64>,
    uncovered: u64,
    latest_launch: u64,
}

impl<L> Default for Joiner<L> {
    fn default() -> Self {
        Self {
            threads: HashMap::new(),
            corr: HashMap::new(),
            corr_order: VecDeque::new(),
            waiting: VecDeque::new(),
            counts: JoinCounts::default(),
            listening: false,
            queued: 0,
            uncovered_since: None,
            uncovered: 0,
            latest_launch: 0,
        }
    }
}

impl<L: Clone> Joiner<L> {
    /// The probes recorded a launch on (host) thread `tid` at `ts`.
    pub fn launch(&mut self, tid: u32, ts: u64, l: L) {
        if !self.threads.contains_key(&tid) && self.threads.len() >= THREADS {
            self.counts.launches_evicted += 1;
            return;
        }
        if self.listening {
            self.latest_launch = self.latest_launch.max(ts);
            if self.uncovered_since.is_none() {
                self.uncovered_since = Some(ts);
            }
            self.uncovered += 1;
        }
        let (per_thread, all) = if self.listening {
            (PER_THREAD, PER_PROCESS)
        } else {
            (PER_THREAD_IDLE, usize::MAX)
        };
        let q = self.threads.entry(tid).or_default();
        if q.len() >= per_thread || (self.queued >= all && !q.is_empty()) {
            q.pop_front();
            self.queued -= 1;
            // Not listening, the launch could not have been claimed: not an eviction.
            if self.listening {
                self.counts.launches_evicted += 1;
            }
        } else if self.queued >= all {
            // Every remembered launch is another thread's: this one is not kept.
            self.counts.launches_evicted += 1;
            return;
        }
        q.push_back((ts, l));
        self.queued += 1;
    }

    /// The library reported state `code` ([`profiler_common::gpu::state`]): while it is
    /// enabled the launches wait for their calls' records under the large bounds; otherwise
    /// only the last [`PER_THREAD_IDLE`] of each thread are kept (no record will claim the
    /// others).
    pub fn state(&mut self, code: u32) {
        use profiler_common::gpu::state;
        self.listening = matches!(code, state::ENABLED | state::DROPPED);
        if !self.listening {
            self.uncovered_since = None;
            self.uncovered = 0;
            for q in self.threads.values_mut() {
                let extra = q.len().saturating_sub(PER_THREAD_IDLE);
                q.drain(..extra);
                self.queued -= extra;
            }
        }
    }

    /// The latest unclaimed launch on `tid`, if it was recorded at `ts` (a sampled stack of
    /// that launch follows its record): `f` amends what is kept of it.
    pub fn amend_last(&mut self, tid: u32, ts: u64, f: impl FnOnce(&mut L)) {
        if let Some((t, l)) = self.threads.get_mut(&tid).and_then(|q| q.back_mut())
            && *t == ts
        {
            f(l);
        }
    }

    /// One of the library's records: kernels and launch calls take part, the rest is ignored.
    /// `settled` gets every kernel record once its fate is known, with its launch if it was
    /// joined: now, or (for a record that came before its launch call) when the call comes, or
    /// when the waiting bound pushes it out, or at [`Self::finish`].
    pub fn record(
        &mut self,
        a: &GpuActivity,
        tids: &Tids,
        settled: &mut dyn FnMut(&GpuActivity, Option<&L>),
    ) {
        match a.kind {
            activity::API => self.call(a, tids, settled),
            activity::KERNEL => self.kernel(a, settled),
            _ => {}
        }
    }

    fn call(
        &mut self,
        a: &GpuActivity,
        tids: &Tids,
        settled: &mut dyn FnMut(&GpuActivity, Option<&L>),
    ) {
        self.uncovered_since = None;
        self.uncovered = 0;
        let claimed = match tids.host(a.bytes as u32) {
            None => Err(why::THREAD_NOT_MAPPED),
            Some(t) => self.claim(t, a.end_ns).ok_or(why::NO_LAUNCH_RECORD),
        };
        match &claimed {
            Ok(_) => self.counts.calls_joined += 1,
            Err(_) => self.counts.calls_unjoined += 1,
        }
        // Kernel records that came first.
        if self.waiting.iter().any(|w| w.correlation == a.correlation) {
            let (mine, rest): (VecDeque<_>, VecDeque<_>) = self
                .waiting
                .drain(..)
                .partition(|w| w.correlation == a.correlation);
            self.waiting = rest;
            for w in &mine {
                self.settle(w, &claimed, settled);
            }
        }
        if self.corr.insert(a.correlation, claimed).is_none() {
            self.corr_order.push_back(a.correlation);
            if self.corr_order.len() > CORRELATIONS
                && let Some(old) = self.corr_order.pop_front()
            {
                self.corr.remove(&old);
            }
        }
    }

    /// The launch on `tid` with the latest timestamp ≤ `end`; the older unclaimed ones go
    /// (a thread's launch calls come in the order they were made).
    fn claim(&mut self, tid: u32, end: u64) -> Option<L> {
        let q = self.threads.get_mut(&tid)?;
        let i = q.iter().rposition(|(ts, _)| *ts <= end)?;
        let (_, l) = q.remove(i)?;
        q.drain(..i);
        self.queued -= i + 1;
        Some(l)
    }

    fn kernel(&mut self, a: &GpuActivity, settled: &mut dyn FnMut(&GpuActivity, Option<&L>)) {
        match self.corr.get(&a.correlation).cloned() {
            Some(c) => self.settle(a, &c, settled),
            None => {
                if self.waiting.len() >= WAITING
                    && let Some(old) = self.waiting.pop_front()
                {
                    self.settle(&old, &Err(why::NO_LAUNCH_CALL), settled);
                }
                self.waiting.push_back(*a);
            }
        }
    }

    fn settle(
        &mut self,
        a: &GpuActivity,
        c: &Result<L, &'static str>,
        settled: &mut dyn FnMut(&GpuActivity, Option<&L>),
    ) {
        match c {
            Ok(l) => {
                self.counts.joined += 1;
                settled(a, Some(l));
            }
            Err(why) => {
                *self.counts.unjoined.entry(why).or_default() += 1;
                settled(a, None);
            }
        }
    }

    /// The end of the records: those still waiting are settled unjoined (`no_launch_call`).
    pub fn finish(&mut self, settled: &mut dyn FnMut(&GpuActivity, Option<&L>)) {
        for w in std::mem::take(&mut self.waiting) {
            self.settle(&w, &Err(why::NO_LAUNCH_CALL), settled);
        }
    }

    /// While the library says it is enabled: the launches made since the last launch call
    /// record came, when they span more than [`RECORDS_STOPPED_NS`] (the library's records
    /// stopped: another CUPTI client took them). `(first such launch's time, launches)`.
    pub fn records_stopped(&self) -> Option<(u64, u64)> {
        let since = self.uncovered_since?;
        (self.listening && self.latest_launch.saturating_sub(since) > RECORDS_STOPPED_NS)
            .then_some((since, self.uncovered))
    }

    /// The counts so far; kernel records still waiting count as `no_launch_call`.
    pub fn counts(&self) -> JoinCounts {
        let mut c = self.counts.clone();
        if !self.waiting.is_empty() {
            *c.unjoined.entry(why::NO_LAUNCH_CALL).or_default() += self.waiting.len() as u64;
        }
        c
    }
}

#[cfg(test)]
mod tests;

//! Training steps, found without annotations from a capture file.
//!
//! Method. A training loop repeats the same launches and closes each repetition with a call that
//! makes the host wait for the GPU: a synchronisation (`cudaStreamSynchronize`, what `loss.item()`
//! ends in) or a blocking device-to-host copy. Every such call of a process, keyed by API and
//! stream/event handle (or copy direction), is a candidate boundary. Cutting the process's calls
//! at each occurrence of a candidate gives segments; a segment's signature is the multiset of the
//! functions it launched (an order-independent hash, and the count). The boundary whose segments
//! most often share one signature — the step's — is the process's step boundary, when at least
//! [`MIN_STEPS`] segments share it. The calls before its first occurrence are warm-up, not a step.
//!
//! Per step (from the end of one boundary call to the end of the next): wall time; launches;
//! host time blocked in timed calls; copy bytes; the delay from the step's start to its first
//! enqueued work (launch or copy) — time the GPU had nothing new from this process, e.g. waiting
//! for input; device memory live at its end; the GPU idle and launch-ahead **derived** from the
//! calls (`model::busy`: a lower bound on the time every stream of the process was empty, split
//! at the step's edges); where the injection library listened, the GPU time of the step's
//! kernels, the GPU busy time inside the step's window, and the time NCCL's kernels ran in it
//! (all of it, and the part nothing else ran beside: exposed), all **measured** ([`gpu_busy`]). Steps whose signature differs from the step's
//! (a last, shorter batch; an evaluation pass) are counted as irregular and kept in the series.
//!
//! Limits: a loop whose steps launch different kernels each time (dynamic shapes that change the
//! kernel choice) has no repeating signature and gets no steps; a loop with no blocking call at
//! all (fully asynchronous, e.g. CUDA graphs replayed without a sync) has no boundary. Times are
//! CPU-side: a step's wall time is what the host saw, which equals the GPU's step time only when
//! the boundary waits for all of the step's work.

mod gpu_busy;

use crate::api::ApiTable;
use crate::model::busy::{Derived, Roles};
use crate::model::gpu_join::{Joiner, Tids};
use crate::store;
use profiler_common::decode::Event;
use profiler_common::flags;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// Fewest segments sharing one signature for a boundary to count as a step loop.
pub const MIN_STEPS: u64 = 3;
/// Candidate boundaries followed per process (the first ones seen).
const MAX_CANDIDATES: usize = 16;
/// Distinct segment signatures remembered per candidate.
const MAX_SIGNATURES: usize = 64;

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Start, ns after the capture started.
    pub start_ns: u64,
    pub wall_ns: u64,
    pub launches: u64,
    /// CPU time inside calls a return probe timed (the boundary call included).
    pub blocked_ns: u64,
    pub copy_bytes: u64,
    /// From the step's start to its first launch or copy (the whole step when it had none).
    pub first_enqueue_ns: u64,
    /// Device memory allocated through the hooked APIs and not freed, at the step's end.
    pub live_bytes: u64,
    /// The step's signature is the loop's.
    pub regular: bool,
    /// **Derived** (`model::busy`): time within the step in which every stream of the process
    /// was known empty, a lower bound on the GPU's idle time; `null` when it cannot be derived
    /// (launches counted in the kernel).
    pub derived_gpu_idle_ns: Option<u64>,
    /// **Derived**: the longest blocked time of the step's waits that found work queued (the
    /// host ran at least this far ahead of the GPU); `null` when no wait found work queued.
    pub derived_launch_ahead_ns: Option<u64>,
    /// **Measured** (CUPTI, the injection library): GPU time of the kernels the step launched,
    /// each joined to its launch through its launch call (`model::gpu_join`); `null` where the
    /// process's records cannot join (no library, no launch calls, thread ids not mapped).
    /// A sum over streams: it exceeds the wall time where streams overlap.
    pub gpu_ns: Option<u64>,
    /// **Measured** (CUPTI): time inside the step's window in which at least one of the
    /// process's kernels, copies or memsets ran on the GPU, overlaps counted once
    /// ([`gpu_busy`]); the wall time less it is the time the GPU ran nothing of the process.
    /// `null` where the library did not listen from the step's start.
    pub gpu_busy_ns: Option<u64>,
    /// **Measured** (CUPTI): time inside the step's window in which one of the process's NCCL
    /// kernels ran (collectives and point-to-point on the GPU), overlaps counted once.
    pub gpu_comm_ns: Option<u64>,
    /// **Measured** (CUPTI): the part of it in which nothing else of the process ran on the
    /// GPU: communication the step waited for, not hidden behind compute or copies.
    pub gpu_comm_exposed_ns: Option<u64>,
}

impl Step {
    /// The measured GPU busy time's share of the step's wall time, in per mille (integers, so
    /// that a quantile over steps is one of them); `None` where busy time was not measured.
    pub fn gpu_busy_permille(&self) -> Option<u64> {
        let b = self.gpu_busy_ns?;
        Some(
            (u128::from(b.min(self.wall_ns)) * 1000)
                .checked_div(u128::from(self.wall_ns))
                .map_or(0, |v| v as u64),
        )
    }
}

/// The steps of one process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProcessSteps {
    pub tgid: u32,
    /// How many processes had this tgid before (pid reuse); 0 almost always.
    pub generation: u32,
    /// The boundary call: API, and the handle or direction that keys it.
    pub boundary: String,
    pub steps: Vec<Step>,
}

impl ProcessSteps {
    pub fn regular(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().filter(|s| s.regular)
    }
}

/// A candidate boundary: API id and handle (sync) or direction (copy).
type Key = (u32, u64);

fn boundary_key(ev: &Event) -> Option<Key> {
    match ev {
        Event::Sync(h, s) if s.flags & flags::GPU_SIDE == 0 => Some((h.api, s.handle)),
        Event::Copy(h, c)
            if c.flags & flags::ASYNC == 0 && c.direction == profiler_common::dir::D2H =>
        {
            Some((h.api, u64::from(c.direction)))
        }
        _ => None,
    }
}

fn mix(func: u64) -> u64 {
    // splitmix64's finaliser: spreads nearby handles across the word.
    let mut z = func.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Signature of the launches since a boundary: (sum of mixed functions, count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Sig(u64, u64);

impl Sig {
    fn add(&mut self, func: u64) {
        self.0 = self.0.wrapping_add(mix(func));
        self.1 += 1;
    }
}

#[derive(Default)]
struct Candidate {
    acc: Sig,
    /// Segment signature → how many segments had it.
    seen: HashMap<Sig, u64>,
}

#[derive(Default)]
struct Finder {
    order: Vec<Key>,
    cands: HashMap<Key, Candidate>,
}

impl Finder {
    fn on_launch(&mut self, func: u64) {
        for c in self.cands.values_mut() {
            c.acc.add(func);
        }
    }

    fn on_boundary(&mut self, k: Key) {
        if !self.cands.contains_key(&k) {
            if self.cands.len() >= MAX_CANDIDATES {
                return;
            }
            self.order.push(k);
            // Its first occurrence starts its first segment.
            self.cands.insert(k, Candidate::default());
            return;
        }
        let c = self.cands.get_mut(&k).expect("checked");
        let sig = std::mem::take(&mut c.acc);
        if sig.1 == 0 {
            return; // back-to-back boundaries: no segment
        }
        if c.seen.len() < MAX_SIGNATURES || c.seen.contains_key(&sig) {
            *c.seen.entry(sig).or_default() += 1;
        }
    }

    /// The boundary and its step signature: most segments sharing one signature, at least
    /// [`MIN_STEPS`]; ties go to the boundary seen first.
    fn choose(&self) -> Option<(Key, Sig)> {
        let mut best: Option<(Key, Sig, u64)> = None;
        for k in &self.order {
            let c = &self.cands[k];
            // The mode; ties to the signature with more launches, then the smaller hash.
            let Some((sig, n)) = c
                .seen
                .iter()
                .max_by_key(|(s, n)| (**n, s.1, std::cmp::Reverse(s.0)))
            else {
                continue;
            };
            if *n >= MIN_STEPS && best.as_ref().is_none_or(|b| *n > b.2) {
                best = Some((*k, *sig, *n));
            }
        }
        best.map(|(k, s, _)| (k, s))
    }
}

fn fresh_step(start_ns: u64) -> Step {
    Step {
        start_ns,
        wall_ns: 0,
        launches: 0,
        blocked_ns: 0,
        copy_bytes: 0,
        first_enqueue_ns: u64::MAX,
        live_bytes: 0,
        regular: false,
        derived_gpu_idle_ns: None,
        derived_launch_ahead_ns: None,
        gpu_ns: None,
        gpu_busy_ns: None,
        gpu_comm_ns: None,
        gpu_comm_exposed_ns: None,
    }
}

/// Per-process state of the second pass.
struct Cutter {
    key: Key,
    sig: Sig,
    /// The boundary API's name, once seen.
    name: Option<String>,
    started: bool,
    cur: Step,
    cur_sig: Sig,
    live: crate::model::mem::MemTracker,
    steps: Vec<Step>,
    /// The derived GPU idle (the model's derivation, fed the same records).
    busy: Derived,
    roles: Roles,
    /// The process's derived idle up to the current step's start.
    idle_at_start: u64,
    /// Kernel records → the step that launched them (index into `steps`, `steps.len()` being
    /// the current one; `None` before the first step); `None` where the process cannot join.
    join: Option<(Tids, Joiner<Option<usize>>)>,
    /// The GPU busy time of the steps' windows.
    gpu_busy: gpu_busy::GpuBusy,
}

impl Cutter {
    fn new(key: Key, sig: Sig, tids: Option<Tids>) -> Self {
        Cutter {
            join: tids
                .filter(|t| *t != Tids::Unknown)
                .map(|t| (t, Joiner::default())),
            key,
            sig,
            name: None,
            started: false,
            cur: fresh_step(0),
            cur_sig: Sig::default(),
            live: crate::model::mem::MemTracker::new(crate::model::DEFAULT_LIVE_CAP),
            steps: Vec::new(),
            busy: Derived::default(),
            roles: Roles::default(),
            idle_at_start: 0,
            gpu_busy: gpu_busy::GpuBusy::default(),
        }
    }

    fn on(&mut self, api: &ApiTable, ev: &Event, t0: u64) {
        let h = *ev.header();
        let rel = h.ts_ns.saturating_sub(t0);
        if let Some(ahead) = self.busy.apply(ev, self.roles.of(api, h.api)) {
            let a = self.cur.derived_launch_ahead_ns.get_or_insert(0);
            *a = (*a).max(ahead);
        }
        match ev {
            Event::GpuState(_, b) => self.gpu_busy.state(h.ts_ns, b.state),
            Event::GpuName(_, b) => self.gpu_busy.name(b),
            Event::GpuActivity(_, b) => b.in_use().iter().for_each(|a| self.gpu_busy.record(a)),
            _ => {}
        }
        let mut enqueue = false;
        if let Some((tids, j)) = &mut self.join {
            let at = self.started.then_some(self.steps.len());
            match ev {
                Event::Launch(..) | Event::Graph(..) => j.launch(h.tid, h.ts_ns, at),
                Event::GpuState(_, b) => j.state(b.state),
                Event::GpuActivity(_, b) => {
                    let (steps, cur) = (&mut self.steps, &mut self.cur);
                    for a in b.in_use() {
                        j.record(a, tids, &mut |k, l| {
                            let ns = k.end_ns.saturating_sub(k.start_ns);
                            let step = match l.copied().flatten() {
                                Some(i) if i < steps.len() => &mut steps[i],
                                Some(_) => &mut *cur,
                                None => return,
                            };
                            *step.gpu_ns.get_or_insert(0) += ns;
                        });
                    }
                }
                _ => {}
            }
        }
        match ev {
            Event::Launch(_, l) => {
                self.cur.launches += 1;
                self.cur_sig.add(l.func);
                enqueue = true;
            }
            Event::Copy(_, c) => {
                if c.flags & flags::HAS_RETURN == 0 || c.ret == 0 {
                    self.cur.copy_bytes += c.bytes;
                }
                if c.flags & flags::HAS_RETURN != 0 {
                    self.cur.blocked_ns += c.dur_ns;
                }
                enqueue = true;
            }
            Event::Sync(_, s) if s.flags & flags::HAS_RETURN != 0 => {
                self.cur.blocked_ns += s.dur_ns;
            }
            Event::Mem(_, m) => {
                if m.flags & flags::HAS_RETURN != 0 {
                    self.cur.blocked_ns += m.dur_ns;
                }
                self.live.apply(m);
            }
            _ => {}
        }
        if enqueue && self.cur.first_enqueue_ns == u64::MAX {
            self.cur.first_enqueue_ns = rel.saturating_sub(self.cur.start_ns);
        }
        if boundary_key(ev) == Some(self.key) {
            if self.name.is_none() {
                self.name = Some(api.name(h.api));
            }
            let dur = match ev {
                Event::Sync(_, s) => s.dur_ns,
                Event::Copy(_, c) => c.dur_ns,
                _ => 0,
            };
            let end = rel + dur;
            if self.started {
                let mut s = self.cur.clone();
                s.wall_ns = end.saturating_sub(s.start_ns);
                if s.first_enqueue_ns == u64::MAX {
                    s.first_enqueue_ns = s.wall_ns;
                }
                s.live_bytes = self.live.live_bytes;
                s.regular = self.cur_sig == self.sig;
                let idle = self.busy.idle_through(end + t0);
                s.derived_gpu_idle_ns = self
                    .busy
                    .blind
                    .is_none()
                    .then(|| idle.saturating_sub(self.idle_at_start));
                if self.busy.blind.is_some() {
                    s.derived_launch_ahead_ns = None;
                }
                self.gpu_busy.step(s.start_ns + t0, end + t0);
                self.steps.push(s);
            }
            self.started = true;
            self.idle_at_start = self.busy.idle_through(end + t0);
            self.cur = fresh_step(end);
            if self.join.is_some() {
                self.cur.gpu_ns = Some(0);
            }
            self.cur_sig = Sig::default();
        }
    }
}

/// Finding steps takes two passes over a capture's records: the first finds each process's
/// candidate boundaries and their segments' signatures, the second cuts at the chosen boundary
/// and measures each step. A caller that reads the records for something else too feeds
/// [`Self::first`] (and, where [`Self::chosen`] says so, [`Self::second`]) from its own passes.
#[derive(Default)]
pub struct StepSearch {
    /// The capture's start (CLOCK_MONOTONIC ns), known by the second pass.
    t0: u64,
    finders: HashMap<(u32, u32), Finder>,
    cutters: HashMap<(u32, u32), Cutter>,
    /// Each process's thread id map (a replay's `tids`), for the steps' measured GPU time.
    tids: HashMap<(u32, u32), Tids>,
}

impl StepSearch {
    /// Pass 1: a record of process generation `g`.
    pub fn first(&mut self, g: u32, ev: &Event) {
        let f = self.finders.entry((ev.header().tgid, g)).or_default();
        match ev {
            Event::Launch(_, l) => f.on_launch(l.func),
            _ => {
                if let Some(k) = boundary_key(ev) {
                    f.on_boundary(k);
                }
            }
        }
    }

    /// The processes' thread id maps (`store::Replay::tids`), before [`Self::chosen`]: where a
    /// process's kernel records join its launches, each step gets their measured GPU time.
    pub fn set_tids(&mut self, tids: HashMap<(u32, u32), Tids>) {
        self.tids = tids;
    }

    /// Between the passes: picks each process's boundary; whether any process has a step loop
    /// (else the second pass is not needed). `t0`: the capture's start (CLOCK_MONOTONIC ns:
    /// its header's `started_at_monotonic_ns`), the origin of the steps' times.
    pub fn chosen(&mut self, t0: u64) -> bool {
        self.t0 = t0;
        let tids = std::mem::take(&mut self.tids);
        self.cutters = std::mem::take(&mut self.finders)
            .into_iter()
            .filter_map(|(p, f)| {
                f.choose()
                    .map(|(k, s)| (p, Cutter::new(k, s, tids.get(&p).cloned())))
            })
            .collect();
        !self.cutters.is_empty()
    }

    /// Pass 2: the same record again.
    pub fn second(&mut self, api: &ApiTable, g: u32, ev: &Event) {
        if let Some(c) = self.cutters.get_mut(&(ev.header().tgid, g)) {
            c.on(api, ev, self.t0);
        }
    }

    /// The steps of every process that has a step loop, by tgid.
    pub fn steps(self) -> Vec<ProcessSteps> {
        let mut out: Vec<ProcessSteps> = self
            .cutters
            .into_iter()
            .map(|((tgid, generation), c)| {
                let (_, handle) = c.key;
                let name = c.name.unwrap_or_default();
                let mut steps = c.steps;
                for (s, b) in steps.iter_mut().zip(c.gpu_busy.finish()) {
                    s.gpu_busy_ns = b.map(|b| b.busy);
                    s.gpu_comm_ns = b.map(|b| b.comm);
                    s.gpu_comm_exposed_ns = b.map(|b| b.comm_exposed);
                }
                let boundary = if name.contains("Memcpy") || name.contains("memcpy") {
                    format!("{name} d2h")
                } else if handle == 0 {
                    name
                } else {
                    format!("{name} 0x{handle:x}")
                };
                ProcessSteps {
                    tgid,
                    generation,
                    boundary,
                    steps,
                }
            })
            .collect();
        out.sort_by_key(|p| (p.tgid, p.generation));
        out
    }
}

/// The steps of every process in the capture at `path` (which started at `t0`, CLOCK_MONOTONIC
/// ns: its header's `started_at_monotonic_ns`) that has a step loop, by tgid. Reads the file
/// twice (once when no process has a loop).
pub fn find(path: &Path, t0: u64) -> Result<Vec<ProcessSteps>, store::StoreError> {
    let mut search = StepSearch::default();
    read(path, |_, g, ev| search.first(g, ev))?;
    if search.chosen(t0) {
        read(path, |api, g, ev| search.second(api, g, ev))?;
    }
    Ok(search.steps())
}

/// One pass over the records of `path`, with a visitor that cannot fail.
pub fn read(
    path: &Path,
    mut each: impl FnMut(&ApiTable, u32, &Event),
) -> Result<(), store::StoreError> {
    match store::for_each_record(path, |api, g, ev| {
        each(api, g, ev);
        Ok::<(), std::convert::Infallible>(())
    }) {
        Ok(_) => Ok(()),
        Err(store::WalkError::Open(e)) => Err(e),
        Err(store::WalkError::Stopped(never)) => match never {},
    }
}

/// The value at quantile `q` (0..=1) of `v` (nearest rank), 0 when empty.
pub fn quantile(mut v: Vec<u64>, q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

#[cfg(test)]
mod tests;

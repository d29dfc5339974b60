//! GPU idle and launch-ahead, **derived** (never measured) from the calls the probes see: when
//! each stream's queue was certainly empty, and how far the host ran ahead of the GPU.
//!
//! Method (docs/GPU-TIME.md states it for users, with its error):
//!
//! * A stream is *known empty* from the return of a call that waited for all of its work —
//!   `cuStreamSynchronize`/`cudaStreamSynchronize` on it, `cuCtxSynchronize`/
//!   `cudaDeviceSynchronize`/`cudaThreadSynchronize` for every stream, a blocking
//!   device-to-host copy for the stream it went on (the legacy default stream) — that
//!   returned success, provided nothing was enqueued on the stream after that call began (work
//!   another thread enqueued during the wait is not covered by it). It stays known empty until
//!   the next launch, graph launch, copy, memset, stream-ordered allocation or GPU-side wait
//!   enqueued on it. Every other moment it is *maybe busy*.
//! * A stream's derived idle is the sum of its known-empty intervals; a process's is the sum
//!   of the intervals in which every stream it used was known empty. Both are **lower bounds**:
//!   the queue may have drained before the waiting call returned, or without anyone waiting.
//! * Launch-ahead: a drain that found work queued blocked for `d` (return − entry); the GPU
//!   then still had at least `d` of work queued when the host asked: the host ran at least `d`
//!   ahead of the GPU.
//!
//! Not drains: event waits (`cu/cudaEventSynchronize`: which stream recorded the event is not
//! seen), a sync of the per-thread default stream (its handle names a different stream on each
//! thread), host-to-device and device-to-device copies and memsets without `Async` (they may
//! return before the GPU finishes). Launches counted in the kernel and launch probes under a
//! duty cycle hide when work was enqueued, and a device-wide sync drains only the calling
//! thread's device: the process's figures are unavailable then, and where NVML lists it on
//! several GPUs.
//!
//! Why hand-written: it is a small state machine over the model's own records; memory is
//! bounded per process (one entry per stream, as the stream counters, and one histogram).

use super::hash::FastMap;
use super::hist::Histogram;
use super::process::{MAX_STREAMS, OTHER_STREAMS};
use super::snapshot::{DerivedGpuIdleReport, ProcessReport};
use crate::api::ApiTable;
use profiler_common::decode::Event;
use profiler_common::{dir, flags};

/// `cudaStreamPerThread` / `CU_STREAM_PER_THREAD`.
const PER_THREAD: u64 = 2;

/// What a hooked call does to the streams' queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Waits for one stream's work; `per_thread`: the `_ptsz`/`_ptds` variant, whose stream 0
    /// is the calling thread's default stream.
    StreamSync { per_thread: bool },
    /// Waits for all the work of the calling thread's context.
    DeviceSync,
    /// Anything else (launches and copies are told by their record kind).
    Other { per_thread: bool },
}

impl Role {
    /// The role of the hooked symbol `name`.
    pub fn of(name: &str) -> Role {
        let base = name
            .strip_suffix("_ptsz")
            .or_else(|| name.strip_suffix("_ptds"));
        let per_thread = base.is_some();
        match base.unwrap_or(name) {
            "cuStreamSynchronize" | "cudaStreamSynchronize" => Role::StreamSync { per_thread },
            "cuCtxSynchronize" | "cudaDeviceSynchronize" | "cudaThreadSynchronize" => {
                Role::DeviceSync
            }
            _ => Role::Other { per_thread },
        }
    }

    fn per_thread(self) -> bool {
        match self {
            Role::StreamSync { per_thread } | Role::Other { per_thread } => per_thread,
            Role::DeviceSync => false,
        }
    }
}

/// The role of each API id, looked up once per id (the table only grows; ids never change).
#[derive(Clone, Debug, Default)]
pub struct Roles(Vec<Role>);

impl Roles {
    pub fn of(&mut self, api: &ApiTable, id: u32) -> Role {
        let i = id as usize;
        if i >= self.0.len() && i < api.len() {
            self.0 = api.list().iter().map(|a| Role::of(&a.name)).collect();
        }
        self.0
            .get(i)
            .copied()
            .unwrap_or(Role::Other { per_thread: false })
    }
}

/// One stream's derived state and figures.
#[derive(Clone, Debug, Default)]
pub struct Lane {
    /// Entry time of the latest work enqueued.
    last_enqueue: u64,
    /// While known empty: (since: the drain's return, the drain's entry).
    empty: Option<(u64, u64)>,
    /// Closed known-empty time.
    idle_ns: u64,
    /// Drains that found work queued, and their blocked times.
    pub drains: u64,
    pub ahead_sum_ns: u64,
    pub ahead_max_ns: u64,
}

impl Lane {
    /// Known-empty time up to `t` (the open interval included).
    pub fn idle_through(&self, t: u64) -> u64 {
        self.idle_ns + self.empty.map_or(0, |(s, _)| t.saturating_sub(s))
    }

    fn ahead(&mut self, d: u64) {
        self.drains += 1;
        self.ahead_sum_ns += d;
        self.ahead_max_ns = self.ahead_max_ns.max(d);
    }
}

/// One process's derived GPU idle (see the module's method).
#[derive(Clone, Debug, Default)]
pub struct Derived {
    lanes: FastMap<u64, Lane>,
    /// Lanes not known empty.
    busy: usize,
    /// Every lane known empty since (process-level idle, open).
    idle_since: Option<u64>,
    /// Closed process-level idle.
    idle_ns: u64,
    /// First and last moment the derivation saw (an enqueue's entry, a drain's return).
    pub first_ns: Option<u64>,
    pub last_ns: u64,
    /// Blocked times of the drains that found work queued.
    pub ahead: Histogram,
    /// Why the figures cannot be derived for this process, once known.
    pub blind: Option<&'static str>,
}

/// The reason given when launches were counted in the kernel.
pub const BLIND_COUNTED: &str = "launches were counted in the kernel: their times are not known";
/// The reason given when NVML lists the process on several GPUs.
pub const BLIND_DEVICES: &str =
    "the process used several GPUs: a device-wide sync waits for one of them only";
/// The reason given when the launch probes ran under a duty cycle.
pub const BLIND_DUTY: &str = "the launch probes ran under a duty cycle: launches were missed";

impl Derived {
    /// Applies one record whose API has `role`; returns the launch-ahead it shows (the
    /// blocked time of a drain that found work queued).
    pub fn apply(&mut self, ev: &Event, role: Role) -> Option<u64> {
        if self.blind.is_some() {
            return None; // nothing more can be derived: spare the hot path
        }
        match ev {
            Event::Launch(h, l) => self.enqueue(l.stream, h.ts_ns),
            Event::Graph(h, g) => self.enqueue(g.stream, h.ts_ns),
            Event::Launches(..) => self.blind = Some(BLIND_COUNTED),
            Event::Mem(h, m) if m.flags & flags::ASYNC != 0 => self.enqueue(m.stream, h.ts_ns),
            Event::Copy(h, c) => {
                self.enqueue(c.stream, h.ts_ns);
                let drains = c.flags & (flags::ASYNC | flags::HAS_RETURN) == flags::HAS_RETURN
                    && c.ret == 0
                    && c.direction == dir::D2H
                    && !role.per_thread()
                    && c.stream != PER_THREAD;
                if drains {
                    return self.drain(Some(c.stream), h.ts_ns, h.ts_ns + c.dur_ns);
                }
            }
            Event::Sync(h, s) if s.flags & flags::GPU_SIDE != 0 => {
                // A wait queued on the stream: it is not empty until a drain.
                self.enqueue(s.handle, h.ts_ns)
            }
            Event::Sync(h, s) if s.flags & flags::HAS_RETURN != 0 && s.ret == 0 => {
                let (e, r) = (h.ts_ns, h.ts_ns + s.dur_ns);
                match role {
                    Role::DeviceSync => return self.drain(None, e, r),
                    Role::StreamSync { per_thread }
                        if !(s.handle == PER_THREAD || per_thread && s.handle == 0) =>
                    {
                        return self.drain(Some(s.handle), e, r);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        None
    }

    fn touch(&mut self, t: u64) {
        self.first_ns.get_or_insert(t);
        self.last_ns = self.last_ns.max(t);
    }

    fn key(&self, handle: u64) -> u64 {
        if self.lanes.len() >= MAX_STREAMS && !self.lanes.contains_key(&handle) {
            OTHER_STREAMS
        } else {
            handle
        }
    }

    /// Work enqueued on `handle` at `t`.
    fn enqueue(&mut self, handle: u64, t: u64) {
        self.touch(t);
        let key = self.key(handle);
        let Some(lane) = self.lanes.get_mut(&key) else {
            self.lanes.insert(
                key,
                Lane {
                    last_enqueue: t,
                    ..Lane::default()
                },
            );
            self.busy += 1;
            self.close(t);
            return;
        };
        let mut woke = false;
        if let Some((since, entry)) = lane.empty {
            if t < entry {
                // A record that arrived late, of work the drain waited for.
                return;
            }
            lane.idle_ns += t.saturating_sub(since);
            lane.empty = None;
            woke = true;
        }
        lane.last_enqueue = lane.last_enqueue.max(t);
        if woke {
            self.busy += 1;
            self.close(t);
        }
    }

    /// The process-level idle interval (if open) ends at `t`.
    fn close(&mut self, t: u64) {
        if let Some(s) = self.idle_since.take() {
            self.idle_ns += t.saturating_sub(s);
        }
    }

    /// A call entered at `e` and returned at `r` after all the work of `handle` (`None`: of
    /// every stream) enqueued before `e` was done.
    fn drain(&mut self, handle: Option<u64>, e: u64, r: u64) -> Option<u64> {
        self.touch(r);
        let d = r - e;
        let room = self.lanes.len() < MAX_STREAMS;
        let mut found = false;
        let mut emptied = 0;
        let mut empty = |lane: &mut Lane| {
            if lane.empty.is_none() && lane.last_enqueue <= e {
                lane.empty = Some((r, e));
                lane.ahead(d);
                emptied += 1;
                found = true;
            }
        };
        match handle {
            None => self.lanes.values_mut().for_each(empty),
            Some(h) => match self.lanes.get_mut(&h) {
                Some(lane) => empty(lane),
                None if room => {
                    // A stream with no work seen: known empty from now on.
                    self.lanes.insert(
                        h,
                        Lane {
                            empty: Some((r, e)),
                            ..Lane::default()
                        },
                    );
                }
                None => {}
            },
        }
        self.busy -= emptied;
        if self.busy == 0 && self.idle_since.is_none() && !self.lanes.is_empty() {
            self.idle_since = Some(r);
        }
        if found {
            self.ahead.record(d);
        }
        found.then_some(d)
    }

    /// Process-level derived idle up to `t` (the open interval included).
    pub fn idle_through(&self, t: u64) -> u64 {
        self.idle_ns + self.idle_since.map_or(0, |s| t.saturating_sub(s))
    }

    /// The stream `handle`'s figures (`None`: no work or drain seen on it).
    pub fn lane(&self, handle: u64) -> Option<&Lane> {
        self.lanes.get(&handle)
    }
}

/// Puts `d`'s figures into the process's report: its `derived_gpu_idle`, and each stream's.
pub fn fill(r: &mut ProcessReport, d: &Derived) {
    let Some(first) = d.first_ns else {
        return;
    };
    if let Some(why) = d.blind {
        unavailable(r, why);
        return;
    }
    if r.gpu.as_ref().is_some_and(|g| g.devices.len() > 1) {
        unavailable(r, BLIND_DEVICES);
        return;
    }
    let end = d.last_ns;
    let span_ns = end.saturating_sub(first);
    let idle = d.idle_through(end);
    r.derived_gpu_idle = Some(DerivedGpuIdleReport {
        basis: "derived".into(),
        unavailable: None,
        span_ns,
        idle_lower_bound_ns: idle,
        idle_share: if span_ns > 0 {
            idle as f64 / span_ns as f64
        } else {
            0.0
        },
        drains: d.ahead.count(),
        launch_ahead_p50_ns: d.ahead.p50(),
        launch_ahead_max_ns: d.ahead.max(),
    });
    for s in &mut r.streams {
        let Some(lane) = stream_handle(&s.stream).and_then(|h| d.lane(h)) else {
            continue;
        };
        s.derived_idle_ns = Some(lane.idle_through(end));
        s.drains = lane.drains;
        s.derived_launch_ahead_max_ns = lane.ahead_max_ns;
    }
}

/// Nothing can be derived for the process: `why` says so, every figure is 0 (or `null`).
pub fn unavailable(r: &mut ProcessReport, why: &str) {
    if r.derived_gpu_idle.is_none() && r.streams.is_empty() {
        return;
    }
    r.derived_gpu_idle = Some(DerivedGpuIdleReport {
        basis: "derived".into(),
        unavailable: Some(why.to_owned()),
        ..Default::default()
    });
    for s in &mut r.streams {
        s.derived_idle_ns = None;
        s.drains = 0;
        s.derived_launch_ahead_max_ns = 0;
    }
}

/// The handle a stream's report label names (the inverse of the report's naming).
fn stream_handle(label: &str) -> Option<u64> {
    match label {
        "default" => Some(0),
        "legacy" => Some(1),
        "per-thread" => Some(PER_THREAD),
        "other" => Some(OTHER_STREAMS),
        h => u64::from_str_radix(h.strip_prefix("0x")?, 16).ok(),
    }
}

#[cfg(test)]
mod tests;

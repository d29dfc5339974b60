//! The aggregator: the single owner of every counter, fed one decoded record at a time.
//!
//! [`Aggregator::apply`] is the hot path: a hash lookup for the process, one for the launch
//! configuration or API slot, integer updates; it allocates only when it meets something new
//! (a process, a launch configuration, an API id, a stream, a live allocation, a name).
//! Kernel names are resolved at report time, so a name that arrives after its launches still
//! names them.

pub mod activity;
pub mod busy;
pub mod devices;
pub mod gpm;
pub mod gpu;
pub mod gpu_join;
/// The fast hasher lives in `sys` (the driver-object names of `enrich` use it too).
pub use crate::sys::hash;
pub mod hist;
pub mod history;
pub mod kernel_time;
pub mod mem;
pub mod nccl;
mod nvml_rounds;
pub mod process;
pub(crate) mod report;
pub mod sampling;
pub mod snapshot;
pub mod stacks;
pub use report::direction_name;
#[cfg(test)]
mod tests;

use crate::api::ApiTable;
use crate::enrich::names::{NameSource, SymbolResolver};
use hash::FastMap;
use process::{ProcState, measured};
use profiler_common::decode::Event;
use profiler_common::flags;
use snapshot::{LiveRow, MetricsFacts, Report, ReportMeta, SCHEMA, rfc3339_utc};
use std::collections::{BTreeMap, HashMap};

pub use mem::DEFAULT_LIVE_CAP;

/// What procfs says about a process (filled in by the daemon).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessMeta {
    pub comm: String,
    pub cmdline: String,
    pub exited: bool,
    /// The job it belongs to (`None` when it was gone before it could be read).
    pub job: Option<crate::enrich::jobs::Job>,
    /// Start time (`/proc/PID/stat` field 22, clock ticks since boot): tells a new process
    /// that reuses the tgid from the old one. 0 when unknown.
    pub start_time: u64,
    /// The uid that owns the process (service mode: what an unprivileged client may see);
    /// `None` when unknown. Kept with the counters of an ended process whose pid a process of
    /// another user now has.
    pub owner: Option<u32>,
    /// The environment that numbers its CUDA devices (`None`: not read).
    pub gpu_env: Option<crate::enrich::gpu_env::GpuEnv>,
}

/// The `comm` of a process that was gone before procfs could be read, until its end record
/// names it.
pub const EXITED_COMM: &str = "<exited>";

/// The `comm` of a program a process ran before an exec, when procfs was read only after it.
pub const BEFORE_EXEC_COMM: &str = "<before exec>";

/// API ids are 16 bits in the probes' cookies; a larger one is a corrupt record.
const MAX_API_ID: u32 = u16::MAX as u32;

/// Every counter of the run, per process.
pub struct Aggregator {
    api: ApiTable,
    resolver: Box<dyn SymbolResolver + Send>,
    procs: FastMap<u32, Box<ProcState>>,
    meta: HashMap<u32, ProcessMeta>,
    /// Processes whose tgid was taken by a new process during the run (kept for the report).
    retired: Vec<(u32, Box<ProcState>, ProcessMeta)>,
    /// When each `retired` entry was set aside (same order).
    retired_at: std::collections::VecDeque<std::time::Instant>,
    decode_errors: BTreeMap<u32, u64>,
    live_cap: usize,
    gpus: gpu::Gpus,
    /// When each process was first known to have ended (for the metrics' grace period).
    exited_at: HashMap<u32, std::time::Instant>,
    /// When procfs was read for each live process's meta (CLOCK_MONOTONIC ns, as the records).
    meta_read_at: HashMap<u32, u64>,
    /// Kernel launches applied since the start, all processes (forgotten ones included).
    launches_total: u64,
    /// Names the frames of sampled stacks.
    stacks: crate::enrich::stacks::StackResolver,
    /// The CUDA libraries attached so far.
    libraries: Vec<crate::model::snapshot::LibraryReport>,
    /// The launch probes' duty cycle, once a window record came (`None`: always attached).
    duty: Option<sampling::DutyStats>,
    /// The cycle configured, and its cost as the cycle measures it (live runs only).
    duty_config: Option<(
        String,
        std::sync::Arc<std::sync::Mutex<crate::attach::duty::CycleCost>>,
    )>,
    /// What each API does to the streams' queues (for the derived GPU idle).
    roles: busy::Roles,
    /// Launches are counted in the kernel: no launch has its time (the derived GPU idle is
    /// unavailable even before a process's first counted batch arrives).
    launches_counted: bool,
    /// Thread id maps of the processes (`set_tids`), for their state made after it (a process
    /// whose first record comes later, the program after an exec).
    tids_pending: HashMap<u32, gpu_join::Tids>,
}

impl Aggregator {
    pub fn new(api: ApiTable, resolver: Box<dyn SymbolResolver + Send>) -> Self {
        Self {
            api,
            resolver,
            procs: FastMap::default(),
            meta: HashMap::new(),
            retired: Vec::new(),
            retired_at: Default::default(),
            decode_errors: BTreeMap::new(),
            live_cap: DEFAULT_LIVE_CAP,
            gpus: gpu::Gpus::default(),
            exited_at: HashMap::new(),
            meta_read_at: HashMap::new(),
            launches_total: 0,
            stacks: crate::enrich::stacks::StackResolver::replay(),
            libraries: Vec::new(),
            duty: None,
            duty_config: None,
            roles: busy::Roles::default(),
            launches_counted: false,
            tids_pending: HashMap::new(),
        }
    }

    /// Launches are counted in the kernel in this session (service mode).
    pub fn set_launches_counted(&mut self) {
        self.launches_counted = true;
    }

    /// The CUDA libraries attached so far (the whole list, replacing the last).
    pub fn set_libraries(&mut self, libraries: Vec<crate::model::snapshot::LibraryReport>) {
        self.libraries = libraries;
    }

    /// Names stack frames with `stacks` (the live resolver; the default knows only what a
    /// capture file taught it).
    pub fn with_stacks(mut self, stacks: crate::enrich::stacks::StackResolver) -> Self {
        self.stacks = stacks;
        self
    }

    /// The stack frame names, to look up a stack's before its record is stored, or to learn
    /// a capture file's.
    pub fn stacks_mut(&mut self) -> &mut crate::enrich::stacks::StackResolver {
        &mut self.stacks
    }

    /// Bounds the live allocations tracked per process (default [`DEFAULT_LIVE_CAP`]); applies
    /// to processes seen from now on.
    pub fn with_live_alloc_cap(mut self, cap: usize) -> Self {
        self.live_cap = cap;
        self
    }

    /// Replaces the API table (it grows as libraries are attached; ids never change).
    pub fn set_api_table(&mut self, api: ApiTable) {
        self.api = api;
    }

    pub fn api_table(&self) -> &ApiTable {
        &self.api
    }

    /// Accounts one decoded record.
    pub fn apply(&mut self, ev: &Event) {
        match ev {
            // Discovery, not CUDA activity: the session acts on it; no process entry is made.
            // The session splits the process at its exec (see `Seen`); nothing to count.
            Event::Map(..) | Event::Exec(..) => return,
            Event::Window(_, w) => {
                self.duty.get_or_insert_default().close(w);
                // Every process alive for the window, and one that ended in it (its last
                // launches belong to it).
                for (t, p) in self.procs.iter_mut() {
                    let ended = self.meta.get(t).is_some_and(|m| m.exited);
                    if !ended || p.sampling.has_pending() {
                        p.sampling.close(w);
                    }
                }
                return;
            }
            Event::Exit(h, x) => {
                if let Some(p) = self.procs.get_mut(&h.tgid) {
                    p.sampling.ended(h.ts_ns);
                    self.mark_exited(h.tgid);
                    let meta = self.meta.entry(h.tgid).or_default();
                    if meta.comm.is_empty() || meta.comm == EXITED_COMM {
                        let len = x.comm.iter().position(|&b| b == 0).unwrap_or(x.comm.len());
                        meta.comm = String::from_utf8_lossy(&x.comm[..len]).into_owned();
                    }
                }
                return;
            }
            _ => {}
        }
        let h = *ev.header();
        let cap = self.live_cap;
        let pending = &mut self.tids_pending;
        let p = self.procs.entry(h.tgid).or_insert_with(|| {
            let mut p = Box::new(ProcState::new(cap));
            p.sampling.seen(h.ts_ns);
            if let Some(t) = pending.get(&h.tgid) {
                p.kernel_time.set_tids(t.clone());
            }
            p
        });
        let call = |p: &mut ProcState, dur: Option<u64>| {
            if h.api <= MAX_API_ID {
                p.api_call(h.api, dur);
            }
        };
        // The injection library's records are the GPU's, not calls the program made.
        let gpu_side = matches!(
            ev,
            Event::GpuActivity(..) | Event::GpuName(..) | Event::GpuState(..)
        );
        if !gpu_side && !matches!(ev, Event::Name(..) | Event::Alias(..) | Event::Stack(..)) {
            p.busy.apply(ev, self.roles.of(&self.api, h.api));
        }
        match ev {
            Event::Launch(_, l) => {
                p.launch(h.api, l);
                // One of NCCL's kernels: the NCCL call the thread made for it. (The name is
                // looked up only on a thread with an NCCL call waiting: not per launch.)
                let nccl = if p.nccl.waits_for_kernel(h.tid)
                    && p.names
                        .resolve(l.func)
                        .is_some_and(|n| nccl::is_nccl_kernel(n.as_bytes()))
                {
                    p.nccl.take_kernel(h.tid)
                } else {
                    None
                };
                let site = kernel_time::LaunchSite {
                    api: h.api,
                    func: l.func,
                    caller: l.caller,
                    stack: None,
                    nccl,
                };
                p.kernel_time.launch(h.tid, h.ts_ns, site);
                call(p, None);
                p.activity.add(h.ts_ns, true, 0);
                self.launches_total += 1;
            }
            Event::Launches(_, l) => {
                p.sampling.add(l.count);
                p.launches_n(h.api, &l.launch(), l.count);
                if h.api <= MAX_API_ID {
                    p.api_calls(h.api, l.count, None);
                }
                p.activity.add_n(h.ts_ns, l.count, l.count, 0);
                self.launches_total += l.count;
            }
            Event::Copy(_, c) => {
                p.copy(c);
                let d = measured(c.flags, c.dur_ns);
                call(p, d);
                p.activity.add(h.ts_ns, false, d.unwrap_or(0));
            }
            Event::Sync(_, s) => {
                p.sync(s);
                let d = measured(s.flags, s.dur_ns);
                call(p, d);
                p.activity.add(h.ts_ns, false, d.unwrap_or(0));
            }
            Event::Mem(_, m) => {
                p.mem.apply(m);
                p.devices.mem(m);
                let d = measured(m.flags, m.dur_ns);
                call(p, d);
                p.activity.add(h.ts_ns, false, d.unwrap_or(0));
            }
            Event::Graph(_, g) => {
                p.graph_launches += 1;
                let site = kernel_time::LaunchSite {
                    api: h.api,
                    func: g.graph_exec,
                    caller: 0,
                    stack: None,
                    nccl: None,
                };
                p.kernel_time.launch(h.tid, h.ts_ns, site);
                call(p, None);
                p.activity.add(h.ts_ns, false, 0);
            }
            Event::Name(_, n) => {
                let name = String::from_utf8_lossy(n.name_bytes());
                let truncated = n.flags & flags::TRUNCATED != 0;
                if !name.is_empty() {
                    p.names
                        .insert(n.handle, &name, NameSource::from_wire(n.source), truncated);
                }
            }
            Event::Alias(_, a) => p.names.alias(a.from, a.to),
            Event::Nccl(_, b) => {
                p.nccl.apply(&h, b);
                call(p, measured(b.flags, b.dur_ns));
            }
            Event::GpuActivity(_, b) => {
                let (stacks, nccl) = (&mut p.stacks, &mut p.nccl);
                p.kernel_time.apply_batch_with(b, &mut |site, ns| {
                    if let Some((key, period)) = &site.stack {
                        stacks.gpu(key, ns, *period);
                    }
                    if let Some((comm, call)) = site.nccl {
                        nccl.kernel(comm, call, ns);
                    }
                });
            }
            Event::GpuName(_, b) => p.kernel_time.apply_name(b),
            Event::GpuState(_, b) => p.kernel_time.apply_state(b),
            // Its frames were named before it was stored (`StackResolver::prepare`, live) or
            // come from the capture file: counting is all that is left.
            Event::Stack(_, st) => {
                p.stacks.apply(h.api, st);
                if st.of_kind == profiler_common::kind::LAUNCH {
                    let key = crate::enrich::stacks::StackKey::of(st);
                    p.kernel_time
                        .launch_stack(h.tid, h.ts_ns, key, st.period.max(1));
                }
            }
            Event::Map(..) | Event::Exit(..) | Event::Exec(..) | Event::Window(..) => {}
        }
        if h.api > MAX_API_ID
            && !gpu_side
            && !matches!(ev, Event::Name(..) | Event::Alias(..) | Event::Stack(..))
        {
            // Counted with the rest of the record applied: only its API slot is lost.
            *self.decode_errors.entry(h.kind).or_insert(0) += 1;
        }
    }

    /// Stores what procfs says about `tgid` (its `exited` flag is kept once set).
    /// [`Self::set_process_meta`] with `meta` read from procfs at `read_at_ns` (CLOCK_MONOTONIC),
    /// so that an exec the records later reveal can tell whether procfs showed the old program.
    pub fn set_process_meta_read_at(&mut self, tgid: u32, meta: ProcessMeta, read_at_ns: u64) {
        self.meta_read_at.insert(tgid, read_at_ns);
        self.set_process_meta(tgid, meta);
    }

    /// Process `tgid` replaced its program at `ts_ns` (`execve`): what it did so far is set
    /// aside as the old program's (as for a reused pid), and its next record starts the new
    /// one. Where procfs was read only after the exec, the name and command line it gave are
    /// the new program's: the old one's are reported unknown rather than wrong (that meta is
    /// returned, for the capture file).
    pub fn exec(&mut self, tgid: u32, ts_ns: u64) -> Option<ProcessMeta> {
        let mut changed = None;
        if self.meta_read_at.get(&tgid).is_some_and(|&at| at >= ts_ns)
            && let Some(m) = self.meta.get_mut(&tgid)
        {
            m.comm = BEFORE_EXEC_COMM.into();
            m.cmdline.clear();
            changed = Some(m.clone());
        }
        self.retire(tgid);
        changed
    }

    pub fn set_process_meta(&mut self, tgid: u32, meta: ProcessMeta) {
        let exited = self.meta.get(&tgid).is_some_and(|m| m.exited);
        if meta.exited {
            self.exited_at
                .entry(tgid)
                .or_insert_with(std::time::Instant::now);
        }
        self.meta.insert(
            tgid,
            ProcessMeta {
                exited: meta.exited || exited,
                ..meta
            },
        );
    }

    /// The owner of `tgid`, where it was not known (an end record's uid).
    pub fn set_owner_if_unknown(&mut self, tgid: u32, uid: u32) {
        self.meta.entry(tgid).or_default().owner.get_or_insert(uid);
    }

    /// Replaces the job of `tgid` (a live process re-read at report time).
    pub fn set_job(&mut self, tgid: u32, job: crate::enrich::jobs::Job) {
        self.meta.entry(tgid).or_default().job = Some(job);
    }

    /// `tgid` is gone; its counters stay in the report.
    /// Whether `tgid`'s process is known to have ended.
    pub fn is_exited(&self, tgid: u32) -> bool {
        self.meta.get(&tgid).is_some_and(|m| m.exited)
    }

    pub fn mark_exited(&mut self, tgid: u32) {
        self.meta.entry(tgid).or_default().exited = true;
        self.exited_at
            .entry(tgid)
            .or_insert_with(std::time::Instant::now);
    }

    /// What the metrics exposition needs beyond the report: NVML's latest figures and the
    /// processes that ended longer than `grace` ago.
    pub fn metrics_facts(&self, grace: std::time::Duration) -> MetricsFacts {
        MetricsFacts {
            gpu_now: self.gpus.now().clone(),
            gpu_health: self.gpus.health_now(),
            gpm_now: self.gpus.gpm.now(),
            process_gpu_bytes: self
                .procs
                .iter()
                .filter_map(|(&t, p)| p.gpu.last_used_bytes.map(|b| (t, b)))
                .collect(),
            expired: self
                .exited_at
                .iter()
                .filter(|(_, at)| at.elapsed() > grace)
                .map(|(&t, _)| t)
                .collect(),
        }
    }

    /// The environment that numbers `tgid`'s CUDA devices (from a capture file's frame).
    pub fn set_gpu_env(&mut self, tgid: u32, env: crate::enrich::gpu_env::GpuEnv) {
        if let Some(m) = self.meta.get_mut(&tgid) {
            m.gpu_env = Some(env);
        }
    }

    /// How the thread ids CUPTI gives in `tgid` (its PID namespace's) map to the kernel's: the
    /// join of its kernel records to its launches needs it (`model::gpu_join`).
    pub fn set_tids(&mut self, tgid: u32, tids: gpu_join::Tids) {
        if let Some(p) = self.procs.get_mut(&tgid) {
            p.kernel_time.set_tids(tids.clone());
        }
        self.tids_pending.insert(tgid, tids);
    }

    /// The thread id map of `tgid` in force (`Unknown` for a process not seen).
    pub fn tids(&self, tgid: u32) -> gpu_join::Tids {
        self.tids_pending.get(&tgid).cloned().unwrap_or_default()
    }

    /// What procfs said about `tgid` at first sight (and since).
    pub fn process_meta(&self, tgid: u32) -> Option<&ProcessMeta> {
        self.meta.get(&tgid)
    }

    /// The names `tgid` has given its handles so far.
    pub fn names(&self, tgid: u32) -> Option<&crate::enrich::names::NameTable> {
        self.procs.get(&tgid).map(|p| &p.names)
    }

    /// The start time recorded for `tgid` (0 when unknown).
    pub fn start_time(&self, tgid: u32) -> u64 {
        self.meta.get(&tgid).map_or(0, |m| m.start_time)
    }

    /// `tgid` now belongs to a new process: the old one's counters are set aside (reported,
    /// marked exited) and the tgid starts afresh.
    pub fn retire(&mut self, tgid: u32) {
        self.exited_at.remove(&tgid);
        self.tids_pending.remove(&tgid);
        if self.stacks.naming(tgid) {
            self.stacks.settle();
        }
        if let Some(mut p) = self.procs.remove(&tgid) {
            // Its stacks are named now: the names are the old process's and are forgotten.
            p.frozen_code = Some(report::code(
                tgid,
                &p,
                &self.api,
                self.resolver.as_ref(),
                &self.stacks,
            ));
            self.stacks.forget(tgid);
            self.meta_read_at.remove(&tgid);
            let mut meta = self.meta.remove(&tgid).unwrap_or_default();
            meta.exited = true;
            self.retired.push((tgid, p, meta));
            self.retired_at.push_back(std::time::Instant::now());
        }
    }

    /// The processes [`Self::forget_exited`] would forget now.
    pub fn exited_for(&self, grace: std::time::Duration) -> Vec<u32> {
        self.exited_at
            .iter()
            .filter(|(_, at)| at.elapsed() > grace)
            .map(|(&t, _)| t)
            .collect()
    }

    /// Drops the processes that ended more than `grace` ago, counters and all (the service's
    /// memory bound under process churn: what stays is the live processes and the recently
    /// ended). Returns the tgids dropped (not those of set-aside processes whose tgid lives on).
    pub fn forget_exited(&mut self, grace: std::time::Duration) -> Vec<u32> {
        let old = self.exited_for(grace);
        for t in &old {
            self.exited_at.remove(t);
            self.procs.remove(t);
            self.tids_pending.remove(t);
            self.meta.remove(t);
            self.meta_read_at.remove(t);
            self.stacks.forget(*t);
        }
        let n = self
            .retired_at
            .iter()
            .take_while(|at| at.elapsed() > grace)
            .count();
        self.retired_at.drain(..n);
        self.retired.drain(..n);
        old
    }

    /// Kernel launches applied since the start (a counter: processes dropped from the model
    /// keep counting here).
    pub fn launches_total(&self) -> u64 {
        self.launches_total
    }

    /// NVML's latest utilisation (percent) and memory used per GPU index.
    pub fn gpu_now(&self) -> &BTreeMap<u32, (Option<u32>, Option<u64>)> {
        self.gpus.now()
    }

    /// Processes held (live, recently ended, and set aside), for the service's status.
    pub fn processes_held(&self) -> usize {
        self.procs.len() + self.retired.len()
    }

    /// Processes that produced records, ascending.
    pub fn seen_tgids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.procs.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// A record that could not be decoded (unknown kind, wrong length): counted, per kind.
    pub fn record_decode_error(&mut self, kind: u32) {
        *self.decode_errors.entry(kind).or_insert(0) += 1;
    }

    /// Decode errors, all kinds.
    pub fn decode_errors(&self) -> u64 {
        self.decode_errors.values().sum()
    }

    /// Decode errors by the kind in the record's header.
    pub fn decode_errors_by_kind(&self) -> &BTreeMap<u32, u64> {
        &self.decode_errors
    }

    /// The live view's rows, by tgid; rates are over the `interval_s` since the previous call.
    pub fn live_rows(&mut self, interval_s: f64) -> Vec<LiveRow> {
        let mut rows = Vec::with_capacity(self.procs.len());
        let gpm_now = self.gpus.gpm.now();
        for (&tgid, p) in &mut self.procs {
            let delta = p.launches - p.prev_launches;
            p.prev_launches = p.launches;
            let meta = self.meta.get(&tgid);
            rows.push(LiveRow {
                job: meta
                    .and_then(|m| m.job.as_ref())
                    .map(|j| j.label())
                    .unwrap_or_default(),
                tgid,
                comm: meta.map(|m| m.comm.clone()).unwrap_or_default(),
                exited: meta.is_some_and(|m| m.exited),
                launches: p.launches,
                launches_per_s: if interval_s > 0.0 {
                    delta as f64 / interval_s
                } else {
                    0.0
                },
                copies: p.copy_calls(),
                copy_bytes: p.copy_bytes(),
                sync_blocked_ns: p.sync_blocked_ns,
                live_bytes: p.mem.live_bytes,
                gpu_sm_util: p.gpu.last_sm_util,
                gpu_held_bytes: p.gpu.last_used_bytes,
                launches_estimated: (p.sampling.windows > 0).then(|| {
                    (
                        p.sampling.estimate().round() as u64,
                        p.sampling.standard_error().map(|e| e.round() as u64),
                    )
                }),
                gpm_sm_activity_pct: None,
                gpm_tensor_pct: None,
            });
            // The first GPU NVML lists the process on whose latest GPM round its job held alone.
            let key = meta.and_then(|m| m.job.as_ref()).map(|j| j.key());
            let held = gpm_now.iter().find(|(dev, now)| {
                self.gpus.round_pids(**dev).contains(&tgid)
                    && matches!(&now.holder, gpm::Holder::Job(j) if Some(j) == key.as_ref())
            });
            if let (Some((_, now)), Some(row)) = (held, rows.last_mut()) {
                row.gpm_sm_activity_pct = now.figures.sm_activity_pct;
                row.gpm_tensor_pct = now.figures.tensor_activity_pct;
            }
        }
        rows.sort_by(|a, b| a.job.cmp(&b.job).then(a.tgid.cmp(&b.tgid)));
        rows
    }

    /// The name the report gives each launched function: `(tgid, generation, func, runtime)`
    /// → name, where generation counts the processes that had the tgid before (pid reuse, see
    /// [`Self::retire`]) and `runtime` says whether the launch went through a runtime API.
    pub fn kernel_names(&self) -> HashMap<(u32, u32, u64, bool), String> {
        let mut out = HashMap::new();
        let mut generation: HashMap<u32, u32> = HashMap::new();
        let mut name = |tgid: u32, g: u32, p: &ProcState| {
            for k in p.kernels.keys() {
                let runtime = self
                    .api
                    .get(k.api)
                    .is_some_and(|a| a.layer == crate::api::Layer::Runtime);
                out.entry((tgid, g, k.func, runtime)).or_insert_with(|| {
                    report::name_of(p, self.resolver.as_ref(), tgid, k.func, runtime).name
                });
            }
        };
        for (t, p, _) in &self.retired {
            let g = generation.entry(*t).or_default();
            name(*t, *g, p);
            *g += 1;
        }
        for (t, p) in &self.procs {
            name(*t, generation.get(t).copied().unwrap_or(0), p);
        }
        out
    }

    /// The report of everything so far (names resolved now, through the symbol resolver).
    pub fn report(&self, meta: ReportMeta) -> Report {
        let node = self.gpus.node_gpus();
        let cx = report::Ctx {
            api: &self.api,
            resolver: self.resolver.as_ref(),
            stacks: &self.stacks,
            origin_ns: meta.started_mono_ns,
            node: &node,
        };
        let mut processes: Vec<_> = self
            .retired
            .iter()
            .map(|(t, p, m)| report::process(*t, p, Some(m), &cx))
            .chain(
                self.seen_tgids()
                    .into_iter()
                    .map(|t| report::process(t, &self.procs[&t], self.meta.get(&t), &cx)),
            )
            .collect();
        // By tgid; a retired process before the one that took its tgid (stable sort).
        processes.sort_by_key(|p| p.tgid);
        // Launches outside the duty cycle's windows were not seen, counted ones have no time:
        // no queue is known empty.
        let blind = if self.duty.is_some() {
            Some(busy::BLIND_DUTY)
        } else {
            self.launches_counted.then_some(busy::BLIND_COUNTED)
        };
        if let Some(why) = blind {
            for p in &mut processes {
                busy::unavailable(p, why);
            }
        }
        let gpus = self
            .gpus
            .report(|pid| processes.iter().any(|p| p.tgid == pid));
        Report {
            schema: SCHEMA.to_owned(),
            host: meta.host,
            started_at: rfc3339_utc(meta.started_at),
            duration_ns: meta.duration_ns,
            drops: meta.drops,
            submitted: meta.submitted,
            probe_faults: meta.faults,
            decode_errors: self.decode_errors(),
            jobs: {
                let mut jobs = report::jobs(&processes);
                report::job_gpm(&mut jobs, &gpus);
                jobs
            },
            nvml: {
                let mut st = self.gpus.status.clone();
                if st.state.is_empty() {
                    st.state = "pending".into();
                    st.detail = "no NVML sample arrived before the capture ended".into();
                }
                st
            },
            gpus,
            processes,
            libraries: self.libraries.clone(),
            launch_duty: self.duty_report(),
        }
    }

    /// Says that the launch probes run under `cycle`, whose own cost the cycle keeps in `cost`.
    pub fn set_duty(
        &mut self,
        cycle: String,
        cost: std::sync::Arc<std::sync::Mutex<crate::attach::duty::CycleCost>>,
    ) {
        self.duty_config = Some((cycle, cost));
    }

    fn duty_report(&self) -> Option<crate::model::snapshot::LaunchDutyReport> {
        let (cycle, cost) = self.duty_config.as_ref()?;
        let d = self.duty.clone().unwrap_or_default();
        let c = cost.lock().map(|c| c.clone()).unwrap_or_default();
        use crate::attach::duty::CycleCost;
        Some(crate::model::snapshot::LaunchDutyReport {
            cycle: cycle.clone(),
            windows: d.windows,
            held_windows: d.held,
            attached_ms: d.attached_ns / 1_000_000,
            observed_ms: d.observed_ns / 1_000_000,
            attach_us_median: CycleCost::median(&c.attach_us),
            detach_us_median: CycleCost::median(&c.detach_us),
            failed_attaches: c.failed_attaches,
        })
    }
}

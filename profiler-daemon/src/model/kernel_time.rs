//! Measured GPU time per process, from the opt-in injection library (CUPTI's activity records,
//! `profiler_common::gpu`): per kernel (by mangled name) count, total, min, max, p50 and p99
//! of the GPU's own start/end times, per device and CUPTI stream; copies and memsets by kind;
//! the library's state (enabled, yielded to another CUPTI client, no CUPTI, …) and its drops.
//!
//! `model::gpu` is NVML's figures and `model::busy` the GPU idle *derived* from the calls;
//! these are *measured* (`basis: "measured"`, `source: "cupti"`), and only for processes that
//! loaded the library while gpuprofd listened.
//!
//! Bounded per process: [`MAX_NAMES`] names and [`MAX_KERNELS`] kernels (records of further
//! kernels count in the totals and in `kernels_cut`), [`MAX_STREAMS`] (device, stream) pairs
//! per kernel (further ones in the kernel's totals only).

use super::gpu_join::{Joiner, Tids};
use super::hist::Histogram;
use profiler_common::gpu::{GpuActivity, GpuActivityBody, GpuNameBody, GpuStateBody, activity};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Kernel names remembered per process.
pub const MAX_NAMES: usize = 4096;
/// Kernels (distinct name ids) with their own figures per process.
pub const MAX_KERNELS: usize = 2048;
/// (device, stream) pairs listed per kernel.
pub const MAX_STREAMS: usize = 16;

/// What the report says of a process whose library never spoke.
pub const ABSENT: &str =
    "no records from the injection library (not loaded in this process, or not attached)";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sum {
    count: u64,
    ns: u64,
    bytes: u64,
}

impl Sum {
    fn add(&mut self, ns: u64, bytes: u64) {
        self.count += 1;
        self.ns = self.ns.saturating_add(ns);
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

#[derive(Clone, Debug, Default)]
struct KernelStat {
    hist: Histogram,
    /// (device, CUPTI stream) → count and GPU ns.
    streams: BTreeMap<(u32, u32), Sum>,
}

/// A launch the probes recorded, as the join keeps it: the kernel row's function, the API,
/// the calling code's address, its call stack where one was sampled (with the period it
/// stands for), and the NCCL call it was made for (communicator handle, call), where one was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchSite {
    pub api: u32,
    pub func: u64,
    pub caller: u64,
    pub stack: Option<(std::sync::Arc<crate::enrich::stacks::StackKey>, u32)>,
    pub nccl: Option<(u64, u32)>,
}

/// One process's measured GPU activity.
#[derive(Clone, Debug, Default)]
pub struct KernelTime {
    /// Kernel records → the launches that caused them (`model::gpu_join`).
    join: Joiner<LaunchSite>,
    /// CUPTI's thread ids → the kernel's (set by the session from procfs, or a capture file).
    tids: Tids,
    /// Launch call records (the library's `api` entries) received.
    calls: u64,
    /// The library's last state and its detail; `None` before it said any.
    state: Option<(u32, u64)>,
    /// Records the library reported dropped (its `dropped` states, summed).
    dropped: u64,
    /// Activity records handed over (all kinds).
    records: u64,
    /// Records with an end before their start (counted, not timed).
    bad_times: u64,
    names: HashMap<u32, String>,
    names_cut: u64,
    /// The CUPTI library the injection library uses, and how it found it (its `enabled`
    /// report).
    cupti_path: Option<String>,
    cupti_found: Option<u64>,
    kernels: HashMap<u32, KernelStat>,
    /// Kernel records of kernels past [`MAX_KERNELS`].
    kernels_cut: u64,
    kernel: Sum,
    /// By CUPTI copy kind.
    copies: BTreeMap<u8, Sum>,
    memset: Sum,
}

impl KernelTime {
    /// Whether the library spoke at all (a state, a name or a batch).
    pub fn seen(&self) -> bool {
        self.state.is_some() || self.records > 0 || !self.names.is_empty()
    }

    /// A state change of the library.
    pub fn apply_state(&mut self, b: &GpuStateBody) {
        use profiler_common::gpu::state;
        self.join.state(b.state);
        if b.state == state::DROPPED {
            self.dropped = self.dropped.saturating_add(b.detail);
            // Records were lost, the library's mode did not change: keep the last state
            // unless none was said yet.
            if self.state.is_some() {
                return;
            }
        }
        if b.state == state::ENABLED {
            let found = b.detail >> profiler_common::gpu::found::SHIFT;
            self.cupti_found = (found != 0).then_some(found);
            self.state = Some((b.state, b.detail & u64::from(u32::MAX)));
            return;
        }
        self.state = Some((b.state, b.detail));
    }

    /// Name id `id` is the mangled name in `b`.
    pub fn apply_name(&mut self, b: &GpuNameBody) {
        let name = String::from_utf8_lossy(b.name_bytes()).into_owned();
        if name.is_empty() {
            return;
        }
        if b.id == profiler_common::gpu::found::PATH_NAME_ID {
            self.cupti_path = Some(name);
            return;
        }
        if self.names.len() >= MAX_NAMES && !self.names.contains_key(&b.id) {
            self.names_cut += 1;
            return;
        }
        self.names.insert(b.id, name);
    }

    /// How CUPTI's thread ids of this process map to the kernel's.
    pub fn set_tids(&mut self, tids: Tids) {
        self.tids = tids;
    }

    pub fn tids(&self) -> &Tids {
        &self.tids
    }

    /// The probes recorded a launch (kernel or graph) on thread `tid` at `ts`: a launch that
    /// kernel records may join.
    pub fn launch(&mut self, tid: u32, ts: u64, site: LaunchSite) {
        self.join.launch(tid, ts, site);
    }

    /// The launch recorded on `tid` at `ts` had its call stack sampled (`period`: the calls it
    /// stands for): its kernels' GPU time goes to that stack too.
    pub fn launch_stack(
        &mut self,
        tid: u32,
        ts: u64,
        key: crate::enrich::stacks::StackKey,
        period: u32,
    ) {
        self.join.amend_last(tid, ts, |l| {
            l.stack = Some((std::sync::Arc::new(key), period));
        });
    }

    /// One hand-over batch.
    pub fn apply_batch(&mut self, b: &GpuActivityBody) {
        self.apply_batch_with(b, &mut |_, _| {});
    }

    /// One hand-over batch; `joined` gets each kernel record tied to its launch, with its GPU
    /// time.
    pub fn apply_batch_with(
        &mut self,
        b: &GpuActivityBody,
        joined: &mut dyn FnMut(&LaunchSite, u64),
    ) {
        for a in b.in_use() {
            self.join.record(a, &self.tids, &mut |k, l| {
                if let (Some(l), Some(ns)) = (l, k.end_ns.checked_sub(k.start_ns)) {
                    joined(l, ns);
                }
            });
            if a.kind == activity::API {
                self.calls += 1;
                continue;
            }
            self.apply_one(a);
        }
    }

    fn apply_one(&mut self, a: &GpuActivity) {
        self.records += 1;
        let Some(ns) = a.end_ns.checked_sub(a.start_ns) else {
            self.bad_times += 1;
            return;
        };
        match a.kind {
            activity::KERNEL => {
                self.kernel.add(ns, 0);
                let n = self.kernels.len();
                let k = match self.kernels.get_mut(&a.name) {
                    Some(k) => k,
                    None if n < MAX_KERNELS => self.kernels.entry(a.name).or_default(),
                    None => {
                        self.kernels_cut += 1;
                        return;
                    }
                };
                k.hist.record(ns);
                let key = (a.device, a.stream);
                if k.streams.len() < MAX_STREAMS || k.streams.contains_key(&key) {
                    k.streams.entry(key).or_default().add(ns, 0);
                }
            }
            activity::MEMCPY => self.copies.entry(a.copy_kind).or_default().add(ns, a.bytes),
            activity::MEMSET => self.memset.add(ns, a.bytes),
            _ => {}
        }
    }

    /// The process's figures for the report (always there: `basis` says whether measured).
    pub fn report(&self) -> GpuTimeReport {
        if !self.seen() {
            return GpuTimeReport::default();
        }
        use profiler_common::gpu::state as st;
        let (state, detail) = self.state.unwrap_or((0, 0));
        let state_name = st::name(state).map(str::to_owned);
        let unavailable = match state {
            st::NO_CUPTI => Some("the injection library found no CUPTI library".to_owned()),
            st::UNSUPPORTED_VERSION => Some(format!(
                "CUPTI API version {detail} is not one the injection library was built for"
            )),
            st::YIELDED => Some(format!(
                "another CUPTI client (torch.profiler, Nsight) is active in the process; the \
                 injection library stepped aside (CUPTI result {detail})"
            )),
            st::CUPTI_ERROR => Some(format!("a CUPTI call failed (CUPTI result {detail})")),
            _ => None,
        };
        let stopped = self.join.records_stopped();
        let unavailable = unavailable.or_else(|| {
            stopped.map(|(_, n)| {
                format!(
                    "CUPTI's records stopped coming while the process kept launching ({n} \
                     launches without them): another CUPTI client (torch.profiler, Nsight) \
                     started after the injection library and took them; GPU times cover the \
                     launches before it"
                )
            })
        });
        let copies = self
            .copies
            .iter()
            .map(|(&k, s)| GpuCopyTime {
                kind: copy_kind_name(k).to_owned(),
                count: s.count,
                gpu_ns: s.ns,
                bytes: s.bytes,
            })
            .collect();
        let memcpy_ns = self.copies.values().map(|s| s.ns).sum();
        let join = self.join.counts();
        GpuTimeReport {
            basis: "measured".into(),
            source: Some("cupti".into()),
            state: state_name,
            state_detail: self.state.map(|(_, d)| d),
            cupti_library: self.cupti_path.clone(),
            cupti_found: self
                .cupti_found
                .and_then(profiler_common::gpu::found::name)
                .map(str::to_owned),
            unavailable,
            dropped: self.dropped,
            records: self.records,
            bad_times: self.bad_times,
            kernels: self.kernel.count,
            kernel_ns: self.kernel.ns,
            memcpy_ns,
            memset_ns: self.memset.ns,
            memsets: self.memset.count,
            memset_bytes: self.memset.bytes,
            copies,
            kernels_cut: self.kernels_cut,
            names_cut: self.names_cut,
            calls: self.calls,
            joined: join.joined,
            unjoined: join.unjoined_total(),
            unjoined_by: join
                .unjoined
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            launches_evicted: join.launches_evicted,
            launches_without_records: stopped.map_or(0, |(_, n)| n),
        }
    }

    /// Per kernel, by mangled name (name ids the library never named are `<kernel id N>`):
    /// the figures of every name id that carries that name, merged.
    pub fn kernels(&self) -> BTreeMap<String, KernelGpuTime> {
        let mut by_name: BTreeMap<String, Vec<&KernelStat>> = BTreeMap::new();
        for (id, k) in &self.kernels {
            let name = self
                .names
                .get(id)
                .cloned()
                .unwrap_or_else(|| format!("<kernel id {id}>"));
            by_name.entry(name).or_default().push(k);
        }
        let total = self.kernel.ns;
        by_name
            .into_iter()
            .map(|(name, ks)| {
                let g = if ks.len() == 1 {
                    kernel_figures(&ks[0].hist, total)
                } else {
                    let mut h = Histogram::new();
                    for k in &ks {
                        h.merge(&k.hist);
                    }
                    kernel_figures(&h, total)
                };
                let mut streams: BTreeMap<(u32, u32), Sum> = BTreeMap::new();
                for k in &ks {
                    for (key, s) in &k.streams {
                        let e = streams.entry(*key).or_default();
                        e.count += s.count;
                        e.ns = e.ns.saturating_add(s.ns);
                    }
                }
                let streams = streams
                    .into_iter()
                    .map(|((device, stream), s)| GpuStreamTime {
                        device,
                        stream,
                        count: s.count,
                        gpu_ns: s.ns,
                    })
                    .collect();
                (name, KernelGpuTime { streams, ..g })
            })
            .collect()
    }
}

fn kernel_figures(h: &Histogram, process_kernel_ns: u64) -> KernelGpuTime {
    KernelGpuTime {
        basis: "measured".into(),
        count: h.count(),
        total_ns: h.sum(),
        mean_ns: h.sum().checked_div(h.count()).unwrap_or(0),
        min_ns: h.min(),
        p50_ns: h.p50(),
        p99_ns: h.p99(),
        max_ns: h.max(),
        share: if process_kernel_ns == 0 {
            0.0
        } else {
            h.sum() as f64 / process_kernel_ns as f64
        },
        streams: Vec::new(),
    }
}

/// CUPTI's copy kind as the report names it.
pub fn copy_kind_name(k: u8) -> &'static str {
    use profiler_common::gpu::copykind as c;
    match k {
        c::HTOD => "h2d",
        c::DTOH => "d2h",
        c::HTOA => "h2a",
        c::ATOH => "a2h",
        c::ATOA => "a2a",
        c::ATOD => "a2d",
        c::DTOA => "d2a",
        c::DTOD => "d2d",
        c::HTOH => "h2h",
        c::PTOP => "peer",
        _ => "unknown",
    }
}

/// A process's GPU time as CUPTI measured it (`basis: "measured"`), or why there is none
/// (`basis: "absent"`, `unavailable` says why; also what a report without the field reads as).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuTimeReport {
    /// `measured` (the injection library's CUPTI records) or `absent`.
    pub basis: String,
    /// `cupti` when measured.
    #[serde(default)]
    pub source: Option<String>,
    /// The library's last state (`enabled`, `disabled`, `no_cupti`,
    /// `unsupported_cupti_version`, `yielded_to_another_cupti_client`, `cupti_error`; `dropped`
    /// only when it said nothing else); `null` when it said none.
    #[serde(default)]
    pub state: Option<String>,
    /// What came with that state (CUPTI's API version when enabled, a result code, …).
    #[serde(default)]
    pub state_detail: Option<u64>,
    /// The CUPTI library the injection library loaded (the path the loader mapped), and how it
    /// found it: `in_process` (a framework had loaded it), `beside_runtime`, `by_name`. `null`
    /// before it enabled, or from an older library.
    #[serde(default)]
    pub cupti_library: Option<String>,
    #[serde(default)]
    pub cupti_found: Option<String>,
    /// Why the figures are missing or partial (`null` when they hold).
    #[serde(default)]
    pub unavailable: Option<String>,
    /// Records CUPTI or the library dropped (as the library reported them).
    #[serde(default)]
    pub dropped: u64,
    /// Activity records received (kernels, copies, memsets).
    #[serde(default)]
    pub records: u64,
    /// Records whose end came before their start (not timed).
    #[serde(default)]
    pub bad_times: u64,
    /// Kernels run, and their GPU time.
    #[serde(default)]
    pub kernels: u64,
    #[serde(default)]
    pub kernel_ns: u64,
    /// GPU time of copies (all kinds) and memsets.
    #[serde(default)]
    pub memcpy_ns: u64,
    #[serde(default)]
    pub memset_ns: u64,
    #[serde(default)]
    pub memsets: u64,
    #[serde(default)]
    pub memset_bytes: u64,
    /// Copies by CUPTI's kind.
    #[serde(default)]
    pub copies: Vec<GpuCopyTime>,
    /// Kernel records of kernels past the per-process bound (in the totals only).
    #[serde(default)]
    pub kernels_cut: u64,
    /// Names not remembered (past the bound).
    #[serde(default)]
    pub names_cut: u64,
    /// Launch call records received (CUPTI's driver API records of the launches: not in
    /// `records`).
    #[serde(default)]
    pub calls: u64,
    /// Kernel records tied to the launch the probes recorded (docs/GPU-TIME.md, "Joined to
    /// the launch").
    #[serde(default)]
    pub joined: u64,
    /// Kernel records not tied to a launch, and why (`thread_not_mapped`, `no_launch_record`,
    /// `no_launch_call`).
    #[serde(default)]
    pub unjoined: u64,
    #[serde(default)]
    pub unjoined_by: BTreeMap<String, u64>,
    /// Recorded launches pushed out of the join's per-thread bound before a call claimed them.
    #[serde(default)]
    pub launches_evicted: u64,
    /// Launches made while the library said `enabled` but CUPTI's records had stopped coming
    /// for more than 2 s (another CUPTI client took them; `unavailable` says so); 0 otherwise.
    #[serde(default)]
    pub launches_without_records: u64,
}

impl Default for GpuTimeReport {
    fn default() -> Self {
        Self {
            basis: "absent".into(),
            source: None,
            state: None,
            state_detail: None,
            cupti_library: None,
            cupti_found: None,
            unavailable: Some(ABSENT.into()),
            dropped: 0,
            records: 0,
            bad_times: 0,
            kernels: 0,
            kernel_ns: 0,
            memcpy_ns: 0,
            memset_ns: 0,
            memsets: 0,
            memset_bytes: 0,
            copies: Vec::new(),
            kernels_cut: 0,
            names_cut: 0,
            calls: 0,
            joined: 0,
            unjoined: 0,
            unjoined_by: BTreeMap::new(),
            launches_evicted: 0,
            launches_without_records: 0,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuCopyTime {
    /// `h2d`, `d2h`, `d2d`, `h2h`, `peer`, `h2a`, `a2h`, `a2a`, `a2d`, `d2a`, `unknown`.
    pub kind: String,
    pub count: u64,
    pub gpu_ns: u64,
    pub bytes: u64,
}

/// One kernel's measured GPU time (every launch of its mangled name in the process).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelGpuTime {
    /// Always `measured`.
    pub basis: String,
    pub count: u64,
    pub total_ns: u64,
    pub mean_ns: u64,
    pub min_ns: u64,
    /// Within 1 % (`model::hist`).
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// `total_ns` over the process's kernel GPU time.
    pub share: f64,
    /// Per device and CUPTI stream (at most 16 pairs listed).
    #[serde(default)]
    pub streams: Vec<GpuStreamTime>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuStreamTime {
    pub device: u32,
    /// CUPTI's stream id (not the `cudaStream_t` handle).
    pub stream: u32,
    pub count: u64,
    pub gpu_ns: u64,
}

#[cfg(test)]
mod tests;

//! Prometheus `/metrics`: the running daemon's figures per workload (job) or, when asked, per
//! process; NVML gauges per GPU; loss and self counters. In the Prometheus text format 0.0.4
//! (built with prometheus-client, whose OpenMetrics output is rewritten: counter families named
//! with their `_total` samples, no `# EOF`), which every scraper and `promtool check metrics`
//! read. Names and units follow Prometheus's naming guide (base units: seconds, bytes, ratios).
//!
//! Served by the service's HTTP responder (`service::http`) on `--metrics-addr` (off
//! unless asked for; the service's default is [`DEFAULT_LISTEN`]). Each scrape asks the
//! aggregator for a snapshot.
//!
//! Labels: the job a process belongs to is `workload` (`slurm:1234`, `k8s:<pod uid>`, …), not
//! `job`, which Prometheus sets on every scraped series itself (ours would arrive as
//! `exported_job`). `pid` and `comm` only with `per_process` (`metrics.per_process`,
//! `--metrics-per-process`): every new process would otherwise start new series, and a node
//! that starts thousands a day would fill the server with series that each live minutes.
//!
//! Cardinality is bounded: kernel series only for the [`TOP_KERNELS`] most launched kernels of
//! each workload (or process), and GPU-time series for the [`TOP_KERNELS`] that took the most
//! measured GPU time, and a process that ended leaves the exposition [`EXITED_GRACE`]
//! after its end (its last values stay visible for one or two scrapes, then the series stop).

use crate::model::snapshot::{ProcessReport, Report};
use crate::output::top_kernels::ByName;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Kernel series per workload (or process).
pub const TOP_KERNELS: usize = 10;
/// Where the service serves metrics unless configured otherwise. 9400 is dcgm-exporter's, which
/// most GPU nodes run; the exporters' range of Prometheus's port allocations (9100-9999) is
/// fully allocated, so the port is outside it, below Linux's ephemeral ports (32768+), and
/// easy to place beside dcgm-exporter's.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:19400";
/// How long an ended process stays in the exposition.
pub const EXITED_GRACE: Duration = Duration::from_secs(60);

/// The labels of a workload's (or process's) series, and the family's own after them.
type Labels = Vec<(&'static str, String)>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MapLabel {
    map: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Gpu {
    gpu: String,
    uuid: String,
}

/// What the session adds to a [`Report`] for a scrape.
#[derive(Clone, Debug, Default)]
pub struct Extra {
    /// The model's figures beyond the report (NVML's latest, processes expired).
    pub facts: crate::model::snapshot::MetricsFacts,
    /// Records read from the ring buffer so far.
    pub records_read: u64,
    /// Launches read from the in-kernel launch counters so far (service mode).
    pub launches_counted: u64,
    pub probes: u64,
    /// The fill of the eBPF object's per-process and per-thread maps.
    pub bpf_maps: Vec<crate::capture::MapFill>,
    /// Bytes the daemon has allocated and not freed ([`crate::sys::heap::in_use`]).
    pub heap_in_use: Option<u64>,
    /// Kernel series per workload or process (the [`TOP_KERNELS`] default, or the service's
    /// `metrics.top_kernels`).
    pub top_kernels: usize,
    /// Series per process (`pid`, `comm` and `workload` labels) instead of per workload.
    pub per_process: bool,
    /// The OTLP push's own counts, when it runs.
    pub otlp: Option<crate::output::otlp::Status>,
}

fn counter(reg: &mut Registry, name: &str, help: &str) -> Family<Labels, Counter> {
    let f = Family::<Labels, Counter>::default();
    reg.register(name, help, f.clone());
    f
}

fn gauge(reg: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let f = Family::<Labels, Gauge>::default();
    reg.register(name, help, f.clone());
    f
}

/// `base` and one more label.
fn with(base: &Labels, key: &'static str, value: &str) -> Labels {
    let mut l = base.clone();
    l.push((key, value.to_owned()));
    l
}

/// The exposition's families, registered in the order they are written.
struct Families {
    launches: Family<Labels, Counter>,
    graphs: Family<Labels, Counter>,
    copies: Family<Labels, Counter>,
    copy_bytes: Family<Labels, Counter>,
    device_launches: Family<Labels, Counter>,
    device_copy_bytes: Family<Labels, Counter>,
    nccl_calls: Family<Labels, Counter>,
    nccl_bytes: Family<Labels, Counter>,
    nccl_gpu_seconds: Family<Labels, Counter<f64, AtomicU64>>,
    api_calls: Family<Labels, Counter>,
    api_blocked: Family<Labels, Counter<f64, AtomicU64>>,
    idle_derived: Family<Labels, Counter<f64, AtomicU64>>,
    gpu_kernel_seconds: Family<Labels, Counter<f64, AtomicU64>>,
    kernels: Family<Labels, Counter>,
    kernel_gpu_seconds: Family<Labels, Counter<f64, AtomicU64>>,
    live: Family<Labels, Gauge>,
    held: Family<Labels, Gauge>,
    gpu_util: Family<Gpu, Gauge<f64, AtomicU64>>,
    gpu_mem: Family<Gpu, Gauge>,
    lost: Family<Kind, Counter>,
    submitted: Family<Kind, Counter>,
    faults: Family<Kind, Counter>,
    read: Counter,
    counted: Counter,
    estimated: Family<Labels, Counter>,
    estimate_error: Family<Labels, Gauge<f64, AtomicU64>>,
    attached_ratio: Gauge<f64, AtomicU64>,
    procs: Gauge,
    probes: Gauge,
}

impl Families {
    fn register(reg: &mut Registry) -> Families {
        let launches = counter(
            reg,
            "gpuprofd_kernel_launches",
            "Kernel launches made (CUDA graph launches excluded)",
        );
        let graphs = counter(reg, "gpuprofd_graph_launches", "CUDA graph launches made");
        let copies = counter(
            reg,
            "gpuprofd_copies",
            "Memory copies made, by direction (memsets: direction \"memset\")",
        );
        let copy_bytes = counter(
            reg,
            "gpuprofd_copy_bytes",
            "Bytes copied, by direction (memsets: the bytes set)",
        );
        let device_launches = counter(
            reg,
            "gpuprofd_device_kernel_launches",
            "Kernel launches by the CUDA device they went to (gpu: its ordinal in the process, \
             or \"unknown\" where a context made current before gpuprofd attached was never \
             revealed; node_gpu: the node's GPU as NVML numbers it, the gpu label of \
             gpuprofd_gpu_* series, where the process's CUDA_VISIBLE_DEVICES and NVML tell, \
             else \"unknown\")",
        );
        let device_copy_bytes = counter(
            reg,
            "gpuprofd_device_copy_bytes",
            "Bytes copied by the CUDA device the copy went to (memsets excluded; gpu and \
             node_gpu as for gpuprofd_device_kernel_launches)",
        );
        let nccl_calls = counter(
            reg,
            "gpuprofd_nccl_collective_calls",
            "NCCL collectives and sends/receives, by operation (op: AllReduce, AllGather, \
             ReduceScatter, Broadcast, Reduce, AlltoAll, Send, Recv), communicator (its id, the \
             same in every rank, or \"unknown\" for one made before gpuprofd attached) and rank \
             (\"unknown\" until learnt)",
        );
        let nccl_bytes = counter(
            reg,
            "gpuprofd_nccl_collective_bytes",
            "Bytes of NCCL collectives and sends/receives: count x datatype size, with NCCL's \
             count (per rank for AllGather and ReduceScatter, per peer for AlltoAll); labels as \
             for gpuprofd_nccl_collective_calls",
        );
        let nccl_gpu_seconds = Family::<Labels, Counter<f64, AtomicU64>>::default();
        reg.register(
            "gpuprofd_nccl_collective_gpu_seconds",
            "Measured, not derived: GPU time of the kernels NCCL's calls launched (CUPTI, through \
             the injection library; only processes that loaded it); labels as for \
             gpuprofd_nccl_collective_calls",
            nccl_gpu_seconds.clone(),
        );
        let api_calls = counter(
            reg,
            "gpuprofd_api_calls",
            "Calls of each hooked CUDA API function",
        );
        let api_blocked = Family::<Labels, Counter<f64, AtomicU64>>::default();
        reg.register(
            "gpuprofd_api_blocked_seconds",
            "CPU time spent inside calls a return probe timed (synchronisations, blocking copies, allocations)",
            api_blocked.clone(),
        );
        let idle_derived = Family::<Labels, Counter<f64, AtomicU64>>::default();
        reg.register(
            "gpuprofd_gpu_idle_derived_seconds",
            "Derived from the syncs, never measured: time every stream of the processes was \
             known empty, a lower bound on their GPU idle time (absent where launches are \
             counted in the kernel or sampled: docs/GPU-TIME.md)",
            idle_derived.clone(),
        );
        let gpu_kernel_seconds = Family::<Labels, Counter<f64, AtomicU64>>::default();
        reg.register(
            "gpuprofd_gpu_kernel_seconds",
            "Measured, not derived: GPU time of the kernels the processes ran, from CUPTI's \
             records through gpuprofd's injection library (only processes that loaded it while \
             gpuprofd listened: docs/GPU-TIME.md)",
            gpu_kernel_seconds.clone(),
        );
        let kernels = counter(
            reg,
            "gpuprofd_top_kernel_launches",
            "Launches per kernel, of the most launched kernels of each workload (or process) only",
        );
        let kernel_gpu_seconds = Family::<Labels, Counter<f64, AtomicU64>>::default();
        reg.register(
            "gpuprofd_top_kernel_gpu_seconds",
            "Measured, not derived: GPU time per kernel (CUPTI, through the injection library), \
             of the kernels that took the most of it in each workload (or process) only",
            kernel_gpu_seconds.clone(),
        );
        let live = gauge(
            reg,
            "gpuprofd_device_memory_live_bytes",
            "Device memory allocated through the hooked APIs and not freed",
        );
        let held = gauge(
            reg,
            "gpuprofd_gpu_memory_held_bytes",
            "GPU memory NVML says the processes hold (all of it)",
        );
        let gpu_util = Family::<Gpu, Gauge<f64, AtomicU64>>::default();
        reg.register(
            "gpuprofd_gpu_utilization_ratio",
            "NVML: share of the last sample period a kernel ran on the GPU (0 to 1)",
            gpu_util.clone(),
        );
        let gpu_mem = Family::<Gpu, Gauge>::default();
        reg.register(
            "gpuprofd_gpu_memory_used_bytes",
            "NVML: device memory in use",
            gpu_mem.clone(),
        );
        let lost = Family::<Kind, Counter>::default();
        reg.register(
            "gpuprofd_records_lost",
            "Records lost (ring buffer full, or the aggregator behind), by kind: counts are lower bounds when non-zero",
            lost.clone(),
        );
        let submitted = Family::<Kind, Counter>::default();
        let faults = Family::<Kind, Counter>::default();
        reg.register(
            "gpuprofd_probe_faults",
            "What the probes could not do as asked, by kind: user_read (a call's arguments or \
             results unreadable, recorded as 0), launch_counts_full (a launch recorded instead \
             of counted)",
            faults.clone(),
        );
        reg.register(
            "gpuprofd_records_submitted",
            "Records the probes wrote into the ring buffer, by kind",
            submitted.clone(),
        );
        let read: Counter = Counter::default();
        reg.register(
            "gpuprofd_records_read",
            "Records the daemon read from the ring buffer",
            read.clone(),
        );
        let counted: Counter = Counter::default();
        reg.register(
            "gpuprofd_launches_counted_in_kernel",
            "Kernel launches read from the in-kernel launch counters (no record each)",
            counted.clone(),
        );
        let estimated = counter(
            reg,
            "gpuprofd_kernel_launches_estimated",
            "Under the launch probes' duty cycle: kernel launches estimated from the windows \
             (derived; gpuprofd_kernel_launches_total holds those the windows counted)",
        );
        let estimate_error = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        reg.register(
            "gpuprofd_kernel_launches_estimate_stderr",
            "Standard error of gpuprofd_kernel_launches_estimated (derived)",
            estimate_error.clone(),
        );
        let attached_ratio = Gauge::<f64, AtomicU64>::default();
        reg.register(
            "gpuprofd_launch_probes_attached_ratio",
            "Share of the time the launch probes were attached under the duty cycle (1 without one)",
            attached_ratio.clone(),
        );
        let procs: Gauge = Gauge::default();
        reg.register(
            "gpuprofd_processes",
            "CUDA processes in the exposition (live, or ended within the grace period)",
            procs.clone(),
        );
        let probes: Gauge = Gauge::default();
        reg.register("gpuprofd_probes", "Uprobes attached", probes.clone());
        Families {
            launches,
            graphs,
            copies,
            copy_bytes,
            device_launches,
            device_copy_bytes,
            nccl_calls,
            nccl_bytes,
            nccl_gpu_seconds,
            api_calls,
            api_blocked,
            idle_derived,
            gpu_kernel_seconds,
            kernels,
            kernel_gpu_seconds,
            live,
            held,
            gpu_util,
            gpu_mem,
            lost,
            submitted,
            faults,
            read,
            counted,
            estimated,
            estimate_error,
            attached_ratio,
            procs,
            probes,
        }
    }

    /// The series of one process, under `l` (its workload's labels, or its own); its kernels
    /// go into `kernels` for [`Self::top_kernels`].
    fn process(
        &self,
        l: &Labels,
        p: &ProcessReport,
        held_bytes: Option<u64>,
        kernels: &mut BTreeMap<Labels, ByName>,
    ) {
        self.launches.get_or_create(l).inc_by(p.launches);
        if let Some(s) = &p.launch_sampling {
            self.estimated.get_or_create(l).inc_by(s.estimated_launches);
            let e = self.estimate_error.get_or_create(l);
            let se = s.standard_error.unwrap_or(0) as f64;
            e.set((e.get().powi(2) + se * se).sqrt());
        }
        self.graphs.get_or_create(l).inc_by(p.graphs.launches);
        self.live
            .get_or_create(l)
            .inc_by(p.allocations.live_bytes.min(i64::MAX as u64) as i64);
        if let Some(b) = held_bytes {
            self.held
                .get_or_create(l)
                .inc_by(b.min(i64::MAX as u64) as i64);
        }
        for c in &p.copies {
            let d = with(l, "direction", &c.direction);
            self.copies.get_or_create(&d).inc_by(c.calls);
            self.copy_bytes.get_or_create(&d).inc_by(c.bytes);
        }
        for d in &p.devices {
            let g = d.device.map_or("unknown".to_owned(), |n| n.to_string());
            let k = with(&with(l, "gpu", &g), "node_gpu", &d.node_gpu_label());
            self.device_launches.get_or_create(&k).inc_by(d.launches);
            self.device_copy_bytes
                .get_or_create(&k)
                .inc_by(d.copy_bytes);
        }
        for c in p.nccl.iter().flat_map(|n| &n.communicators) {
            let comm = c.id.as_deref().unwrap_or("unknown");
            let rank = c.rank.map_or("unknown".to_owned(), |r| r.to_string());
            for o in &c.ops {
                // `communicator`, not `comm`: per-process series already carry `comm`, the
                // process's name.
                let k = with(
                    &with(&with(l, "op", &o.op), "communicator", comm),
                    "rank",
                    &rank,
                );
                self.nccl_calls.get_or_create(&k).inc_by(o.calls);
                self.nccl_bytes.get_or_create(&k).inc_by(o.bytes);
                if let Some(ns) = o.gpu_ns {
                    self.nccl_gpu_seconds
                        .get_or_create(&k)
                        .inc_by(ns as f64 / 1e9);
                }
            }
        }
        for a in &p.api {
            let k = with(l, "api", &a.name);
            self.api_calls.get_or_create(&k).inc_by(a.calls);
            if a.blocked_ns > 0 {
                self.api_blocked
                    .get_or_create(&k)
                    .inc_by(a.blocked_ns as f64 / 1e9);
            }
        }
        if let Some(d) = &p.derived_gpu_idle
            && d.unavailable.is_none()
        {
            self.idle_derived
                .get_or_create(l)
                .inc_by(d.idle_lower_bound_ns as f64 / 1e9);
        }
        if p.gpu_time.basis == "measured" {
            self.gpu_kernel_seconds
                .get_or_create(l)
                .inc_by(p.gpu_time.kernel_ns as f64 / 1e9);
        }
        kernels.entry(l.clone()).or_default().add(p);
    }

    /// The most launched kernels of each workload (or process), and those that took the most
    /// measured GPU time, `top` of each.
    fn top_kernels(&self, kernels: BTreeMap<Labels, ByName>, top: usize) {
        for (l, by_name) in kernels {
            let (launches, gpu) = by_name.top(top);
            for (name, calls) in launches {
                self.kernels
                    .get_or_create(&with(&l, "kernel", name))
                    .inc_by(calls);
            }
            for (name, ns) in gpu {
                self.kernel_gpu_seconds
                    .get_or_create(&with(&l, "kernel", name))
                    .inc_by(ns as f64 / 1e9);
            }
        }
    }

    /// NVML's latest figures per GPU.
    fn gpus(&self, r: &Report, extra: &Extra) {
        for g in &r.gpus {
            let l = Gpu {
                gpu: g.index.to_string(),
                uuid: g.uuid.clone(),
            };
            if let Some((util, mem)) = extra.facts.gpu_now.get(&g.index) {
                if let Some(u) = util {
                    self.gpu_util.get_or_create(&l).set(f64::from(*u) / 100.0);
                }
                if let Some(m) = mem {
                    self.gpu_mem
                        .get_or_create(&l)
                        .set((*m).min(i64::MAX as u64) as i64);
                }
            }
        }
    }
}

/// The exposition of `r` (+ `extra`).
pub fn render(r: &Report, extra: &Extra) -> String {
    let mut reg = Registry::default();
    let f = Families::register(&mut reg);
    let mut kernels = BTreeMap::new();
    let processes = shown(r, extra);
    for p in &processes {
        let held = extra.facts.process_gpu_bytes.get(&p.tgid).copied();
        f.process(&labels(p, extra.per_process), p, held, &mut kernels);
    }
    f.top_kernels(kernels, extra.top_kernels);
    f.gpus(r, extra);
    f.attached_ratio.set(match &r.launch_duty {
        Some(d) if d.observed_ms > 0 => d.attached_ms as f64 / d.observed_ms as f64,
        _ => 1.0,
    });
    for (k, v) in &r.drops {
        f.lost.get_or_create(&Kind { kind: k.clone() }).inc_by(*v);
    }
    for (k, v) in &r.probe_faults {
        f.faults.get_or_create(&Kind { kind: k.clone() }).inc_by(*v);
    }
    for (k, v) in &r.submitted {
        f.submitted
            .get_or_create(&Kind { kind: k.clone() })
            .inc_by(*v);
    }
    gpus::gpu_health(&mut reg, r, extra);
    gpus::gpu_gpm(&mut reg, r, extra);
    bpf_maps(&mut reg, &extra.bpf_maps);
    if let Some(b) = extra.heap_in_use {
        let heap: Gauge = Gauge::default();
        reg.register(
            "gpuprofd_heap_in_use_bytes",
            "Memory the daemon has allocated and not freed (the allocator's count; the resident \
             size adds what it keeps free)",
            heap.clone(),
        );
        heap.set(b.min(i64::MAX as u64) as i64);
    }
    if let Some(o) = &extra.otlp {
        otlp(&mut reg, o);
    }
    f.read.inc_by(extra.records_read);
    f.counted.inc_by(extra.launches_counted);
    f.procs.set(processes.len() as i64);
    f.probes.set(extra.probes.min(i64::MAX as u64) as i64);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &reg);
    to_prometheus_text(&out)
}

/// The processes in the figures: the latest process of each pid (series are keyed by pid), none
/// that ended longer than the grace ago. Newest first.
pub(crate) fn shown<'a>(r: &'a Report, extra: &Extra) -> Vec<&'a ProcessReport> {
    let mut seen: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    for p in r.processes.iter().rev() {
        if seen.contains(&p.tgid) || extra.facts.expired.contains(&p.tgid) {
            continue;
        }
        seen.push(p.tgid);
        out.push(p);
    }
    out
}

/// The labels of `p`'s series: its workload (`kind:id` of its job; empty for a process gpuprofd
/// could not attribute), and with `per_process` its pid and command name first.
pub(crate) fn labels(p: &ProcessReport, per_process: bool) -> Labels {
    let workload = p
        .job
        .as_ref()
        .map(|j| format!("{}:{}", j.kind, j.id))
        .unwrap_or_default();
    let mut l = Vec::with_capacity(3);
    if per_process {
        l.push(("pid", p.tgid.to_string()));
        l.push(("comm", p.comm.clone()));
    }
    l.push(("workload", workload));
    l
}

/// How full the probes' per-process and per-thread maps are: a count that keeps growing while
/// the node's processes do not is state left behind.
fn bpf_maps(reg: &mut Registry, fill: &[crate::capture::MapFill]) {
    let entries = Family::<MapLabel, Gauge>::default();
    let capacity = Family::<MapLabel, Gauge>::default();
    reg.register(
        "gpuprofd_bpf_map_entries",
        "Entries in a BPF map of per-process or per-thread state",
        entries.clone(),
    );
    reg.register(
        "gpuprofd_bpf_map_capacity",
        "Size (max_entries) of a BPF map of per-process or per-thread state",
        capacity.clone(),
    );
    for f in fill {
        let l = MapLabel {
            map: f.map.to_owned(),
        };
        entries.get_or_create(&l).set(i64::from(f.entries));
        capacity.get_or_create(&l).set(i64::from(f.capacity));
    }
}

/// The OTLP push: exports that got through, those that failed (dropped: never queued), and
/// those under way (at most [`crate::output::otlp::MAX_IN_FLIGHT`]).
fn otlp(reg: &mut Registry, o: &crate::output::otlp::Status) {
    let ok: Counter = Counter::default();
    reg.register(
        "gpuprofd_otlp_exports",
        "OTLP exports the endpoint accepted",
        ok.clone(),
    );
    ok.inc_by(o.exports);
    let failed: Counter = Counter::default();
    reg.register(
        "gpuprofd_otlp_exports_failed",
        "OTLP exports that failed (endpoint down, refused, timed out) and were dropped: not \
         queued, not retried; the next export that gets through carries the cumulative totals",
        failed.clone(),
    );
    failed.inc_by(o.exports_failed);
    let in_flight: Gauge = Gauge::default();
    reg.register(
        "gpuprofd_otlp_exports_in_flight",
        "OTLP exports under way (at most 1)",
        in_flight.clone(),
    );
    in_flight.set(o.in_flight.min(i64::MAX as u64) as i64);
}

/// OpenMetrics text → Prometheus text 0.0.4: a counter family `x` (samples `x_total`) becomes
/// `x_total` in its HELP and TYPE lines; `# UNIT` and `# EOF` go.
fn to_prometheus_text(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((p, rest)) => {
                let name = rest.split(' ').next().unwrap_or("");
                if counters.contains(name) {
                    out.push_str(p);
                    out.push_str(name);
                    out.push_str("_total");
                    out.push_str(&rest[name.len()..]);
                } else {
                    out.push_str(line);
                }
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

mod gpus;

#[cfg(test)]
pub(crate) mod tests;

//! The figures OTLP sends: the same report and extras the Prometheus exposition is rendered from
//! ([`prometheus::Extra`]), the same processes and labels ([`prometheus::shown`],
//! [`prometheus::labels`]), as typed points per instrument of [`METRICS`].
//!
//! Names follow OpenTelemetry's conventions (dotted namespaces, the unit in `unit`, not in the
//! name); where a semantic convention exists it is used (`hw.gpu.utilization`,
//! `hw.gpu.memory.usage`). Every other name is chosen so that an OpenTelemetry Collector's
//! Prometheus exporter, which appends the unit (`By` → `_bytes`, `s` → `_seconds`, `1` →
//! `_ratio` on gauges) and `_total` to monotonic sums, gives back gpuprofd's own Prometheus name
//! ([`Spec::prometheus`]): a dashboard written for `/metrics` reads the Collector's series too.

use crate::model::snapshot::Report;
use crate::output::prometheus::{self, Extra};
use crate::output::top_kernels::ByName;
use std::collections::BTreeMap;

/// How an instrument reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A monotonic cumulative sum (OTLP `Sum`, `is_monotonic`).
    Counter,
    /// A value now (OTLP `Gauge`).
    Gauge,
    /// A cumulative sum that goes up and down (OTLP `Sum`, not monotonic).
    UpDown,
}

/// One instrument.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub name: &'static str,
    /// UCUM, as OpenTelemetry writes units (`By`, `s`, `1`, `{launch}`).
    pub unit: &'static str,
    pub kind: Kind,
    /// Whole numbers (else floating point).
    pub int: bool,
    /// The same figure's name on `/metrics`.
    pub prometheus: &'static str,
    pub description: &'static str,
}

const fn spec(
    name: &'static str,
    unit: &'static str,
    kind: Kind,
    int: bool,
    prometheus: &'static str,
    description: &'static str,
) -> Spec {
    Spec {
        name,
        unit,
        kind,
        int,
        prometheus,
        description,
    }
}

use Kind::{Counter, Gauge, UpDown};

pub const LAUNCHES: &str = "gpuprofd.kernel.launches";
pub const LAUNCHES_ESTIMATED: &str = "gpuprofd.kernel.launches_estimated";
pub const LAUNCHES_STDERR: &str = "gpuprofd.kernel.launches_estimate_stderr";
pub const GRAPHS: &str = "gpuprofd.graph.launches";
pub const COPIES: &str = "gpuprofd.copies";
pub const COPY_BYTES: &str = "gpuprofd.copy";
pub const API_CALLS: &str = "gpuprofd.api.calls";
pub const API_BLOCKED: &str = "gpuprofd.api.blocked";
pub const IDLE_DERIVED: &str = "gpuprofd.gpu.idle_derived";
pub const DEVICE_LAUNCHES: &str = "gpuprofd.device.kernel.launches";
pub const DEVICE_COPY_BYTES: &str = "gpuprofd.device.copy";
pub const NCCL_CALLS: &str = "gpuprofd.nccl.collective.calls";
pub const NCCL_BYTES: &str = "gpuprofd.nccl.collective";
pub const NCCL_GPU_TIME: &str = "gpuprofd.nccl.collective.gpu";
pub const TOP_KERNELS: &str = "gpuprofd.top_kernel.launches";
pub const GPU_KERNEL_TIME: &str = "gpuprofd.gpu.kernel";
pub const TOP_KERNEL_GPU_TIME: &str = "gpuprofd.top_kernel.gpu";
pub const LIVE: &str = "gpuprofd.device_memory.live";
pub const HELD: &str = "gpuprofd.gpu.memory.held";
pub const GPU_UTIL: &str = "hw.gpu.utilization";
pub const GPU_MEM: &str = "hw.gpu.memory.usage";
pub const THROTTLE: &str = "gpuprofd.gpu.throttle_reason";
pub const PCIE: &str = "gpuprofd.gpu.pcie_throughput";
pub const ECC: &str = "gpuprofd.gpu.ecc_errors";
pub const XID: &str = "gpuprofd.gpu.xid_errors";
pub const LOST: &str = "gpuprofd.records.lost";
pub const FAULTS: &str = "gpuprofd.probe.faults";
pub const SUBMITTED: &str = "gpuprofd.records.submitted";
pub const READ: &str = "gpuprofd.records.read";
pub const COUNTED: &str = "gpuprofd.launches.counted_in_kernel";
pub const ATTACHED: &str = "gpuprofd.launch_probes.attached";
pub const PROCESSES: &str = "gpuprofd.processes";
pub const PROBES: &str = "gpuprofd.probes";
pub const HEAP: &str = "gpuprofd.heap.in_use";
pub const MAP_ENTRIES: &str = "gpuprofd.bpf_map.entries";
pub const MAP_CAPACITY: &str = "gpuprofd.bpf_map.capacity";

/// Every instrument, in the order they are registered.
#[rustfmt::skip]
pub const METRICS: &[Spec] = &[
    spec(LAUNCHES, "{launch}", Counter, true, "gpuprofd_kernel_launches_total",
        "Kernel launches made (CUDA graph launches excluded)"),
    spec(LAUNCHES_ESTIMATED, "{launch}", Counter, true, "gpuprofd_kernel_launches_estimated_total",
        "Under the launch probes' duty cycle: kernel launches estimated from the windows"),
    spec(LAUNCHES_STDERR, "{launch}", Gauge, false, "gpuprofd_kernel_launches_estimate_stderr",
        "Standard error of gpuprofd.kernel.launches_estimated"),
    spec(GRAPHS, "{launch}", Counter, true, "gpuprofd_graph_launches_total",
        "CUDA graph launches made"),
    spec(COPIES, "{copy}", Counter, true, "gpuprofd_copies_total",
        "Memory copies made, by direction (memsets: direction \"memset\")"),
    spec(COPY_BYTES, "By", Counter, true, "gpuprofd_copy_bytes_total",
        "Bytes copied, by direction (memsets: the bytes set)"),
    spec(API_CALLS, "{call}", Counter, true, "gpuprofd_api_calls_total",
        "Calls of each hooked CUDA API function"),
    spec(API_BLOCKED, "s", Counter, false, "gpuprofd_api_blocked_seconds_total",
        "CPU time spent inside calls a return probe timed"),
    spec(DEVICE_LAUNCHES, "{launch}", Counter, true, "gpuprofd_device_kernel_launches_total",
        "Kernel launches by the CUDA device they went to (gpu: its ordinal, or \"unknown\"; \
         node_gpu: the node's GPU as NVML numbers it, or \"unknown\")"),
    spec(DEVICE_COPY_BYTES, "By", Counter, true, "gpuprofd_device_copy_bytes_total",
        "Bytes copied by the CUDA device the copy went to (memsets excluded)"),
    spec(NCCL_CALLS, "{call}", Counter, true, "gpuprofd_nccl_collective_calls_total",
        "NCCL collectives and sends/receives, by op, communicator (its id, the same in every \
         rank, or \"unknown\") and rank (\"unknown\" until learnt)"),
    spec(NCCL_BYTES, "By", Counter, true, "gpuprofd_nccl_collective_bytes_total",
        "Bytes of NCCL collectives and sends/receives: count x datatype size (NCCL's count)"),
    spec(NCCL_GPU_TIME, "s", Counter, false, "gpuprofd_nccl_collective_gpu_seconds_total",
        "Measured, not derived: GPU time of the kernels NCCL's calls launched (CUPTI, through \
         the injection library)"),
    spec(IDLE_DERIVED, "s", Counter, false, "gpuprofd_gpu_idle_derived_seconds_total",
        "Derived from the syncs, never measured: time every stream of the processes was known \
         empty, a lower bound on their GPU idle time (docs/GPU-TIME.md)"),
    spec(TOP_KERNELS, "{launch}", Counter, true, "gpuprofd_top_kernel_launches_total",
        "Launches per kernel, of the most launched kernels of each workload (or process) only"),
    spec(GPU_KERNEL_TIME, "s", Counter, false, "gpuprofd_gpu_kernel_seconds_total",
        "Measured, not derived: GPU time of the kernels the processes ran, from CUPTI's records \
         through gpuprofd's injection library (docs/GPU-TIME.md)"),
    spec(TOP_KERNEL_GPU_TIME, "s", Counter, false, "gpuprofd_top_kernel_gpu_seconds_total",
        "Measured, not derived: GPU time per kernel, of the kernels that took the most of it in \
         each workload (or process) only"),
    spec(LIVE, "By", Gauge, true, "gpuprofd_device_memory_live_bytes",
        "Device memory allocated through the hooked APIs and not freed"),
    spec(HELD, "By", Gauge, true, "gpuprofd_gpu_memory_held_bytes",
        "GPU memory NVML says the processes hold"),
    spec(GPU_UTIL, "1", Gauge, false, "gpuprofd_gpu_utilization_ratio",
        "NVML: share of the last sample period a kernel ran on the GPU (0 to 1)"),
    spec(GPU_MEM, "By", UpDown, true, "gpuprofd_gpu_memory_used_bytes",
        "NVML: device memory in use"),
    spec(THROTTLE, "", Gauge, true, "gpuprofd_gpu_throttle_reason",
        "1 while NVML reports this clock throttle reason in force on the GPU, else 0"),
    spec(PCIE, "By/s", Gauge, true, "gpuprofd_gpu_pcie_throughput_bytes_per_second",
        "PCIe throughput NVML measured over its last 20 ms window"),
    spec(ECC, "{error}", Gauge, true, "gpuprofd_gpu_ecc_errors",
        "Volatile ECC errors since the driver loaded"),
    spec(XID, "{error}", Counter, true, "gpuprofd_gpu_xid_errors_total",
        "XID errors NVML reported for the GPU while gpuprofd ran"),
    spec(LOST, "{record}", Counter, true, "gpuprofd_records_lost_total",
        "Records lost, by kind: counts are lower bounds when non-zero"),
    spec(FAULTS, "{fault}", Counter, true, "gpuprofd_probe_faults_total",
        "What the probes could not do as asked, by kind"),
    spec(SUBMITTED, "{record}", Counter, true, "gpuprofd_records_submitted_total",
        "Records the probes wrote into the ring buffer, by kind"),
    spec(READ, "{record}", Counter, true, "gpuprofd_records_read_total",
        "Records the daemon read from the ring buffer"),
    spec(COUNTED, "{launch}", Counter, true, "gpuprofd_launches_counted_in_kernel_total",
        "Kernel launches read from the in-kernel launch counters"),
    spec(ATTACHED, "1", Gauge, false, "gpuprofd_launch_probes_attached_ratio",
        "Share of the time the launch probes were attached under the duty cycle"),
    spec(PROCESSES, "{process}", Gauge, true, "gpuprofd_processes",
        "CUDA processes in the figures (live, or ended within the grace period)"),
    spec(PROBES, "{probe}", Gauge, true, "gpuprofd_probes", "Uprobes attached"),
    spec(HEAP, "By", Gauge, true, "gpuprofd_heap_in_use_bytes",
        "Memory the daemon has allocated and not freed"),
    spec(MAP_ENTRIES, "{entry}", Gauge, true, "gpuprofd_bpf_map_entries",
        "Entries in a BPF map of per-process or per-thread state"),
    spec(MAP_CAPACITY, "{entry}", Gauge, true, "gpuprofd_bpf_map_capacity",
        "Size (max_entries) of a BPF map of per-process or per-thread state"),
];

/// A point's attributes: the Prometheus labels, same names, same values.
pub type Attrs = Vec<(&'static str, String)>;

/// A point's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

/// The points of every instrument at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    points: BTreeMap<&'static str, BTreeMap<Attrs, Value>>,
}

impl Figures {
    /// The points of `name` (none: the instrument reports nothing this time).
    pub fn of(&self, name: &str) -> impl Iterator<Item = (&Attrs, Value)> {
        self.points
            .get(name)
            .into_iter()
            .flat_map(|m| m.iter().map(|(a, v)| (a, *v)))
    }

    fn add(&mut self, name: &'static str, attrs: Attrs, n: u64) {
        let v = self
            .points
            .entry(name)
            .or_default()
            .entry(attrs)
            .or_insert(Value::Int(0));
        if let Value::Int(x) = v {
            *x = x.saturating_add(n);
        }
    }

    fn add_f(&mut self, name: &'static str, attrs: Attrs, x: f64) {
        let v = self
            .points
            .entry(name)
            .or_default()
            .entry(attrs)
            .or_insert(Value::Float(0.0));
        if let Value::Float(y) = v {
            *y += x;
        }
    }

    fn set(&mut self, name: &'static str, attrs: Attrs, v: Value) {
        self.points.entry(name).or_default().insert(attrs, v);
    }
}

fn with(base: &Attrs, key: &'static str, value: &str) -> Attrs {
    let mut a = base.clone();
    a.push((key, value.to_owned()));
    a
}

/// The figures of `r` (+ `extra`), as `/metrics` shows them.
pub fn figures(r: &Report, extra: &Extra) -> Figures {
    let mut f = Figures::default();
    // Per workload (or process): kernel name → (launches, measured GPU ns).
    let mut kernels: BTreeMap<Attrs, ByName> = BTreeMap::new();
    let mut stderr2: BTreeMap<Attrs, f64> = BTreeMap::new();
    let shown = prometheus::shown(r, extra);
    for p in &shown {
        let l = prometheus::labels(p, extra.per_process);
        f.add(LAUNCHES, l.clone(), p.launches);
        if let Some(s) = &p.launch_sampling {
            f.add(LAUNCHES_ESTIMATED, l.clone(), s.estimated_launches);
            let se = s.standard_error.unwrap_or(0) as f64;
            *stderr2.entry(l.clone()).or_default() += se * se;
        }
        f.add(GRAPHS, l.clone(), p.graphs.launches);
        f.add(LIVE, l.clone(), p.allocations.live_bytes);
        if let Some(b) = extra.facts.process_gpu_bytes.get(&p.tgid) {
            f.add(HELD, l.clone(), *b);
        }
        for c in &p.copies {
            let d = with(&l, "direction", &c.direction);
            f.add(COPIES, d.clone(), c.calls);
            f.add(COPY_BYTES, d, c.bytes);
        }
        for d in &p.devices {
            let g = d.device.map_or("unknown".to_owned(), |n| n.to_string());
            let k = with(&with(&l, "gpu", &g), "node_gpu", &d.node_gpu_label());
            f.add(DEVICE_LAUNCHES, k.clone(), d.launches);
            f.add(DEVICE_COPY_BYTES, k, d.copy_bytes);
        }
        for c in p.nccl.iter().flat_map(|n| &n.communicators) {
            let comm = c.id.as_deref().unwrap_or("unknown");
            let rank = c.rank.map_or("unknown".to_owned(), |r| r.to_string());
            for o in &c.ops {
                let k = with(
                    &with(&with(&l, "op", &o.op), "communicator", comm),
                    "rank",
                    &rank,
                );
                f.add(NCCL_CALLS, k.clone(), o.calls);
                f.add(NCCL_BYTES, k.clone(), o.bytes);
                if let Some(ns) = o.gpu_ns {
                    f.add_f(NCCL_GPU_TIME, k, ns as f64 / 1e9);
                }
            }
        }
        for a in &p.api {
            let k = with(&l, "api", &a.name);
            f.add(API_CALLS, k.clone(), a.calls);
            if a.blocked_ns > 0 {
                f.add_f(API_BLOCKED, k, a.blocked_ns as f64 / 1e9);
            }
        }
        if let Some(d) = &p.derived_gpu_idle
            && d.unavailable.is_none()
        {
            f.add_f(IDLE_DERIVED, l.clone(), d.idle_lower_bound_ns as f64 / 1e9);
        }
        if p.gpu_time.basis == "measured" {
            f.add_f(
                GPU_KERNEL_TIME,
                l.clone(),
                p.gpu_time.kernel_ns as f64 / 1e9,
            );
        }
        kernels.entry(l).or_default().add(p);
    }
    for (l, s2) in stderr2 {
        f.set(LAUNCHES_STDERR, l, Value::Float(s2.sqrt()));
    }
    for (l, by_name) in kernels {
        let (launches, gpu) = by_name.top(extra.top_kernels);
        for (name, calls) in launches {
            f.add(TOP_KERNELS, with(&l, "kernel", name), calls);
        }
        for (name, ns) in gpu {
            f.add_f(
                TOP_KERNEL_GPU_TIME,
                with(&l, "kernel", name),
                ns as f64 / 1e9,
            );
        }
    }
    gpus(&mut f, r, extra);
    let kinds = [
        (LOST, &r.drops),
        (FAULTS, &r.probe_faults),
        (SUBMITTED, &r.submitted),
    ];
    for (name, counts) in kinds {
        for (k, v) in counts {
            f.add(name, vec![("kind", k.clone())], *v);
        }
    }
    f.add(READ, Vec::new(), extra.records_read);
    f.add(COUNTED, Vec::new(), extra.launches_counted);
    let attached = match &r.launch_duty {
        Some(d) if d.observed_ms > 0 => d.attached_ms as f64 / d.observed_ms as f64,
        _ => 1.0,
    };
    f.set(ATTACHED, Vec::new(), Value::Float(attached));
    f.set(PROCESSES, Vec::new(), Value::Int(shown.len() as u64));
    f.set(PROBES, Vec::new(), Value::Int(extra.probes));
    if let Some(b) = extra.heap_in_use {
        f.set(HEAP, Vec::new(), Value::Int(b));
    }
    for m in &extra.bpf_maps {
        let l = vec![("map", m.map.to_owned())];
        f.set(MAP_ENTRIES, l.clone(), Value::Int(u64::from(m.entries)));
        f.set(MAP_CAPACITY, l, Value::Int(u64::from(m.capacity)));
    }
    f
}

/// NVML's latest figures and health per GPU. The semantic conventions' `hw.gpu.*` metrics
/// carry `hw.id` (the GPU's UUID) besides the labels `/metrics` has.
fn gpus(f: &mut Figures, r: &Report, extra: &Extra) {
    for g in &r.gpus {
        let l: Attrs = vec![("gpu", g.index.to_string()), ("uuid", g.uuid.clone())];
        if let Some((util, mem)) = extra.facts.gpu_now.get(&g.index) {
            let hw = with(&l, "hw.id", &g.uuid);
            if let Some(u) = util {
                f.set(GPU_UTIL, hw.clone(), Value::Float(f64::from(*u) / 100.0));
            }
            if let Some(m) = mem {
                f.set(GPU_MEM, hw, Value::Int(*m));
            }
        }
        let Some((h, xids)) = extra.facts.gpu_health.get(&g.index) else {
            continue;
        };
        if let Some(bits) = h.throttle_reasons {
            for (bit, name) in crate::nvml::THROTTLE_REASONS {
                let on = u64::from(bits & bit != 0);
                f.set(THROTTLE, with(&l, "what", name), Value::Int(on));
            }
        }
        for (what, v) in [("tx", h.pcie_tx_kbps), ("rx", h.pcie_rx_kbps)] {
            if let Some(kb) = v {
                f.set(
                    PCIE,
                    with(&l, "what", what),
                    Value::Int(u64::from(kb) * 1024),
                );
            }
        }
        for (what, v) in [
            ("corrected", h.ecc_corrected),
            ("uncorrected", h.ecc_uncorrected),
        ] {
            if let Some(n) = v {
                f.set(ECC, with(&l, "what", what), Value::Int(n));
            }
        }
        f.add(XID, l, *xids);
    }
}

#[cfg(test)]
mod tests;

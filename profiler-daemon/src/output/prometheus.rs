//! Prometheus `/metrics`: the running daemon's figures per job and process, NVML gauges, loss
//! and self counters, in the Prometheus text format 0.0.4 (built with prometheus-client, whose
//! OpenMetrics output is rewritten: counter families named with their `_total` samples, no
//! `# EOF`), which every scraper and `promtool check metrics` read.
//!
//! Served by the service's HTTP responder (`service::http`) on `--metrics-addr` (off
//! unless asked for; the service's default is 127.0.0.1:9400). Each scrape asks the aggregator
//! for a snapshot.
//!
//! Cardinality is bounded: kernel series only for the [`TOP_KERNELS`] most launched kernels of
//! each process, and a process that ended leaves the exposition [`EXITED_GRACE`] after its end
//! (its last values stay visible for one or two scrapes, then the series stop).

use crate::model::snapshot::{ProcessReport, Report};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Kernel series per process.
pub const TOP_KERNELS: usize = 10;
/// How long an ended process stays in the exposition.
pub const EXITED_GRACE: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Proc {
    pid: String,
    comm: String,
    job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcDir {
    pid: String,
    comm: String,
    job: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcApi {
    pid: String,
    comm: String,
    job: String,
    api: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcKernel {
    pid: String,
    comm: String,
    job: String,
    kernel: String,
}

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuWhat {
    gpu: String,
    uuid: String,
    what: String,
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
    /// Kernel series per process (the [`TOP_KERNELS`] default, or the service's
    /// `metrics.top_kernels`).
    pub top_kernels: usize,
}

fn counter(reg: &mut Registry, name: &str, help: &str) -> Family<Proc, Counter> {
    let f = Family::<Proc, Counter>::default();
    reg.register(name, help, f.clone());
    f
}

/// The exposition's families, registered in the order they are written.
struct Families {
    launches: Family<Proc, Counter>,
    graphs: Family<Proc, Counter>,
    copies: Family<ProcDir, Counter>,
    copy_bytes: Family<ProcDir, Counter>,
    api_calls: Family<ProcApi, Counter>,
    api_blocked: Family<ProcApi, Counter<f64, AtomicU64>>,
    kernels: Family<ProcKernel, Counter>,
    live: Family<Proc, Gauge>,
    held: Family<Proc, Gauge>,
    gpu_util: Family<Gpu, Gauge>,
    gpu_mem: Family<Gpu, Gauge>,
    lost: Family<Kind, Counter>,
    submitted: Family<Kind, Counter>,
    faults: Family<Kind, Counter>,
    read: Counter,
    counted: Counter,
    procs: Gauge,
    probes: Gauge,
}

impl Families {
    fn register(reg: &mut Registry) -> Families {
        let launches = counter(
            reg,
            "gpuprofd_kernel_launches",
            "Kernel launches the process made (CUDA graph launches excluded)",
        );
        let graphs = counter(
            reg,
            "gpuprofd_graph_launches",
            "CUDA graph launches the process made",
        );
        let copies = Family::<ProcDir, Counter>::default();
        reg.register(
            "gpuprofd_copies",
            "Memory copies the process made, by direction (memsets: direction \"memset\")",
            copies.clone(),
        );
        let copy_bytes = Family::<ProcDir, Counter>::default();
        reg.register(
            "gpuprofd_copy_bytes",
            "Bytes the process copied, by direction (memsets: the bytes set)",
            copy_bytes.clone(),
        );
        let api_calls = Family::<ProcApi, Counter>::default();
        reg.register(
            "gpuprofd_api_calls",
            "Calls of each hooked CUDA API function",
            api_calls.clone(),
        );
        let api_blocked = Family::<ProcApi, Counter<f64, AtomicU64>>::default();
        reg.register(
            "gpuprofd_api_blocked_seconds",
            "CPU time the process spent inside calls a return probe timed (synchronisations, blocking copies, allocations)",
            api_blocked.clone(),
        );
        let kernels = Family::<ProcKernel, Counter>::default();
        reg.register(
            "gpuprofd_kernel_calls",
            "Launches per kernel (the most launched kernels of each process only)",
            kernels.clone(),
        );
        let live = Family::<Proc, Gauge>::default();
        reg.register(
            "gpuprofd_device_memory_live_bytes",
            "Device memory the process allocated through the hooked APIs and has not freed",
            live.clone(),
        );
        let held = Family::<Proc, Gauge>::default();
        reg.register(
            "gpuprofd_process_gpu_memory_bytes",
            "GPU memory NVML says the process holds (all of it)",
            held.clone(),
        );
        let gpu_util = Family::<Gpu, Gauge>::default();
        reg.register(
            "gpuprofd_gpu_utilization_percent",
            "NVML: percent of the last sample period a kernel ran on the GPU",
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
            api_calls,
            api_blocked,
            kernels,
            live,
            held,
            gpu_util,
            gpu_mem,
            lost,
            submitted,
            faults,
            read,
            counted,
            procs,
            probes,
        }
    }

    /// The series of one process.
    fn process(&self, p: &ProcessReport, held_bytes: Option<u64>, top_kernels: usize) {
        let job = p
            .job
            .as_ref()
            .map(|j| format!("{}:{}", j.kind, j.id))
            .unwrap_or_default();
        let l = Proc {
            pid: p.tgid.to_string(),
            comm: p.comm.clone(),
            job: job.clone(),
        };
        self.launches.get_or_create(&l).inc_by(p.launches);
        self.graphs.get_or_create(&l).inc_by(p.graphs.launches);
        self.live
            .get_or_create(&l)
            .set(p.allocations.live_bytes.min(i64::MAX as u64) as i64);
        if let Some(b) = held_bytes {
            self.held
                .get_or_create(&l)
                .set(b.min(i64::MAX as u64) as i64);
        }
        for c in &p.copies {
            let d = ProcDir {
                pid: l.pid.clone(),
                comm: l.comm.clone(),
                job: job.clone(),
                direction: c.direction.clone(),
            };
            self.copies.get_or_create(&d).inc_by(c.calls);
            self.copy_bytes.get_or_create(&d).inc_by(c.bytes);
        }
        for a in &p.api {
            let k = ProcApi {
                pid: l.pid.clone(),
                comm: l.comm.clone(),
                job: job.clone(),
                api: a.name.clone(),
            };
            self.api_calls.get_or_create(&k).inc_by(a.calls);
            if a.blocked_ns > 0 {
                self.api_blocked
                    .get_or_create(&k)
                    .inc_by(a.blocked_ns as f64 / 1e9);
            }
        }
        // Kernels by name (launch configurations summed), the most launched first.
        let mut by_name: BTreeMap<&str, u64> = BTreeMap::new();
        for k in &p.kernels {
            *by_name.entry(&k.name).or_default() += k.calls;
        }
        let mut top: Vec<(&str, u64)> = by_name.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        for (name, calls) in top.into_iter().take(top_kernels) {
            self.kernels
                .get_or_create(&ProcKernel {
                    pid: l.pid.clone(),
                    comm: l.comm.clone(),
                    job: job.clone(),
                    kernel: name.to_owned(),
                })
                .inc_by(calls);
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
                    self.gpu_util.get_or_create(&l).set(i64::from(*u));
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
    let mut shown = 0;
    let mut seen: Vec<u32> = Vec::new();
    // A reused pid: only its latest process is exposed (series are keyed by pid).
    for p in r.processes.iter().rev() {
        if seen.contains(&p.tgid) || extra.facts.expired.contains(&p.tgid) {
            continue;
        }
        seen.push(p.tgid);
        shown += 1;
        let held = extra.facts.process_gpu_bytes.get(&p.tgid).copied();
        f.process(p, held, extra.top_kernels);
    }
    f.gpus(r, extra);
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
    gpu_health(&mut reg, r, extra);
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
    f.read.inc_by(extra.records_read);
    f.counted.inc_by(extra.launches_counted);
    f.procs.set(shown);
    f.probes.set(extra.probes.min(i64::MAX as u64) as i64);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &reg);
    to_prometheus_text(&out)
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

/// Throttling, PCIe throughput, ECC and XID figures of each GPU NVML reported on.
fn gpu_health(reg: &mut Registry, r: &Report, extra: &Extra) {
    let throttle = Family::<GpuWhat, Gauge>::default();
    reg.register(
        "gpuprofd_gpu_throttle_reason",
        "1 while NVML reports this clock throttle reason in force on the GPU (label what), else 0",
        throttle.clone(),
    );
    let pcie = Family::<GpuWhat, Gauge>::default();
    reg.register(
        "gpuprofd_gpu_pcie_throughput_bytes_per_second",
        "PCIe throughput NVML measured over its last 20 ms window (what: tx or rx; KiB/s x 1024)",
        pcie.clone(),
    );
    let ecc = Family::<GpuWhat, Gauge>::default();
    reg.register(
        "gpuprofd_gpu_ecc_errors",
        "Volatile ECC errors since the driver loaded (what: corrected or uncorrected)",
        ecc.clone(),
    );
    let xid = Family::<Gpu, Counter>::default();
    reg.register(
        "gpuprofd_gpu_xid_errors",
        "XID errors NVML reported for the GPU while gpuprofd ran",
        xid.clone(),
    );
    for g in &r.gpus {
        let Some((h, xids)) = extra.facts.gpu_health.get(&g.index) else {
            continue;
        };
        let l = |what: &str| GpuWhat {
            gpu: g.index.to_string(),
            uuid: g.uuid.clone(),
            what: what.to_owned(),
        };
        if let Some(bits) = h.throttle_reasons {
            for (bit, name) in crate::nvml::THROTTLE_REASONS {
                throttle
                    .get_or_create(&l(name))
                    .set(i64::from(bits & bit != 0));
            }
        }
        for (what, v) in [("tx", h.pcie_tx_kbps), ("rx", h.pcie_rx_kbps)] {
            if let Some(kb) = v {
                pcie.get_or_create(&l(what)).set(i64::from(kb) * 1024);
            }
        }
        for (what, v) in [
            ("corrected", h.ecc_corrected),
            ("uncorrected", h.ecc_uncorrected),
        ] {
            if let Some(n) = v {
                ecc.get_or_create(&l(what))
                    .set(n.min(i64::MAX as u64) as i64);
            }
        }
        xid.get_or_create(&Gpu {
            gpu: g.index.to_string(),
            uuid: g.uuid.clone(),
        })
        .inc_by(*xids);
    }
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

#[cfg(test)]
mod tests;

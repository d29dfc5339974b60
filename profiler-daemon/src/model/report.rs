//! Turning the aggregator's counters into a [`Report`](super::snapshot::Report): names are resolved here, not on the hot path.

use super::hash::{FastMap, FastSet};
use super::process::ProcState;
use super::{ProcessMeta, mem::kind_slot};
use crate::api::{ApiTable, Layer};
use crate::enrich::names::{NameSource, SymbolResolver, demangle};
use crate::model::snapshot::{
    AllocReport, ApiReport, ByKind, CopyReport, GraphReport, KernelReport, KindReport,
    ProcessReport,
};
use profiler_common::{dir, memkind};

/// The report's label of copy direction `d` (`profiler_common::dir`).
pub fn direction_name(d: u32) -> &'static str {
    DIRECTION_ORDER
        .iter()
        .find(|(k, _)| *k == d)
        .map_or("unknown", |(_, n)| n)
}

/// Copy directions in report order, with their labels.
const DIRECTION_ORDER: [(u32, &str); 8] = [
    (dir::H2D, "h2d"),
    (dir::D2H, "d2h"),
    (dir::D2D, "d2d"),
    (dir::H2H, "h2h"),
    (dir::PEER, "peer"),
    (dir::DEFAULT, "default"),
    (dir::UNKNOWN, "unknown"),
    (dir::MEMSET, "memset"),
];

/// A kernel's name as the report shows it.
#[derive(Clone, Debug)]
pub(super) struct Named {
    pub(super) name: String,
    mangled: Option<String>,
    source: NameSource,
}

/// Names `func` of a launch through a `runtime` (or driver) API: the process's name table
/// (aliases included), then for runtime host stubs the symbol resolver, then `<unknown 0x…>`.
pub(super) fn name_of(
    p: &ProcState,
    resolver: &dyn SymbolResolver,
    tgid: u32,
    func: u64,
    runtime: bool,
) -> Named {
    if let Some(e) = p.names.resolve_entry(func) {
        let mut name = demangle(&e.mangled);
        if e.truncated && !name.ends_with('…') {
            name.push('…');
        }
        return Named {
            name,
            mangled: Some(e.mangled.to_string()),
            source: e.source,
        };
    }
    if runtime && let Some(m) = resolver.resolve(tgid, func) {
        return Named {
            name: demangle(&m),
            mangled: Some(m),
            source: NameSource::Symbols,
        };
    }
    Named {
        name: format!("<unknown 0x{func:x}>"),
        mangled: None,
        source: NameSource::Unknown,
    }
}

type GroupKey = (String, [u32; 3], [u32; 3], u32, u32);

struct Group {
    named: Named,
    calls: u64,
    streams: FastSet<u64>,
}

fn kernels(
    p: &ProcState,
    api: &ApiTable,
    resolver: &dyn SymbolResolver,
    tgid: u32,
) -> (Vec<KernelReport>, u64) {
    let mut cache: FastMap<(u64, bool), Named> = FastMap::default();
    let mut groups: FastMap<GroupKey, Group> = FastMap::default();
    for (k, s) in &p.kernels {
        let runtime = api.get(k.api).is_some_and(|a| a.layer == Layer::Runtime);
        let named = cache
            .entry((k.func, runtime))
            .or_insert_with(|| name_of(p, resolver, tgid, k.func, runtime));
        let key = (named.name.clone(), k.grid, k.block, k.shared_bytes, k.api);
        let g = groups.entry(key).or_insert_with(|| Group {
            named: named.clone(),
            calls: 0,
            streams: FastSet::default(),
        });
        // Two mangled spellings can demangle alike (internal linkage): keep the smaller, so the
        // report does not depend on hash order.
        if named.mangled < g.named.mangled {
            g.named = named.clone();
        }
        g.calls += s.calls;
        g.streams.extend(s.streams.iter().copied());
    }
    let mut unnamed = 0;
    let mut out: Vec<KernelReport> = groups
        .into_iter()
        .map(|((name, grid, block, shared_bytes, api_id), g)| {
            if g.named.source == NameSource::Unknown {
                unnamed += g.calls;
            }
            KernelReport {
                name,
                mangled: g.named.mangled,
                calls: g.calls,
                grid,
                block,
                shared_bytes,
                streams: g.streams.len() as u64,
                api: api.name(api_id),
                name_source: g.named.source.as_str().to_owned(),
                gpu_time: None,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.calls
            .cmp(&a.calls)
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.api.cmp(&b.api))
            .then_with(|| (a.grid, a.block, a.shared_bytes).cmp(&(b.grid, b.block, b.shared_bytes)))
    });
    (out, unnamed)
}

/// Puts CUPTI's per-kernel GPU time on the kernel rows of the same mangled name (the first
/// row of each name: the rows are sorted by calls), and adds a row (0 calls) for each kernel
/// only CUPTI saw.
fn join_gpu_time(rows: &mut Vec<KernelReport>, kt: &super::kernel_time::KernelTime) {
    let mut gpu = kt.kernels();
    if gpu.is_empty() {
        return;
    }
    for r in rows.iter_mut() {
        if let Some(g) = r.mangled.as_ref().and_then(|m| gpu.remove(m)) {
            r.gpu_time = Some(g);
        }
    }
    for (mangled, g) in gpu {
        rows.push(KernelReport {
            name: crate::enrich::names::demangle(&mangled),
            mangled: Some(mangled),
            calls: 0,
            grid: [0; 3],
            block: [0; 3],
            shared_bytes: 0,
            streams: 0,
            api: String::new(),
            name_source: "cupti".into(),
            gpu_time: Some(g),
        });
    }
}

fn streams(p: &ProcState) -> Vec<crate::model::snapshot::StreamReport> {
    let mut v: Vec<(u64, &super::process::StreamStat)> =
        p.streams.iter().map(|(&h, s)| (h, s)).collect();
    v.sort_by(|a, b| b.1.launches.cmp(&a.1.launches).then(a.0.cmp(&b.0)));
    v.into_iter()
        .map(|(h, s)| crate::model::snapshot::StreamReport {
            stream: match h {
                0 => "default".into(),
                1 => "legacy".into(),
                2 => "per-thread".into(),
                super::process::OTHER_STREAMS => "other".into(),
                h => format!("0x{h:x}"),
            },
            launches: s.launches,
            copies: s.copies,
            copy_bytes: s.copy_bytes,
            derived_idle_ns: None,
            drains: 0,
            derived_launch_ahead_max_ns: 0,
        })
        .collect()
}

fn copies(p: &ProcState) -> Vec<CopyReport> {
    DIRECTION_ORDER
        .iter()
        .filter_map(|&(d, label)| {
            let c = &p.copies[d as usize];
            (c.calls > 0).then(|| CopyReport {
                direction: label.to_owned(),
                calls: c.calls,
                bytes: c.bytes,
                async_calls: c.async_calls,
                blocked_ns: c.blocked_ns,
                pageable_calls: c.pageable_calls,
                pageable_bytes: c.pageable_bytes,
                size_histogram: c.sizes.to_vec(),
            })
        })
        .collect()
}

fn apis(p: &ProcState, api: &ApiTable) -> Vec<ApiReport> {
    let mut out: Vec<ApiReport> = p
        .apis
        .iter()
        .enumerate()
        .filter(|(_, a)| a.calls > 0)
        .map(|(id, a)| ApiReport {
            name: api.name(id as u32),
            calls: a.calls,
            blocked_ns: a.durations.sum(),
            p50_ns: a.durations.p50(),
            p99_ns: a.durations.p99(),
            max_ns: a.durations.max(),
        })
        .collect();
    out.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.name.cmp(&b.name)));
    out
}

fn allocations(p: &ProcState) -> AllocReport {
    let m = &p.mem;
    let k = |kind: u32| {
        let t = kind_slot(kind).map(|s| m.by_kind[s]).unwrap_or_default();
        KindReport {
            calls: t.calls,
            bytes: t.bytes,
        }
    };
    AllocReport {
        calls: m.calls,
        failed: m.failed,
        bytes: m.bytes,
        frees: m.frees,
        live_bytes: m.live_bytes,
        peak_bytes: m.peak_bytes,
        untracked: m.untracked,
        by_kind: ByKind {
            device: k(memkind::DEVICE),
            host_pinned: k(memkind::HOST_PINNED),
            managed: k(memkind::MANAGED),
            async_: k(memkind::ASYNC),
            pitched: k(memkind::PITCHED),
            vmm: k(memkind::VMM),
        },
    }
}

/// What every process's report section is made with.
pub(super) struct Ctx<'a> {
    pub api: &'a ApiTable,
    pub resolver: &'a dyn SymbolResolver,
    pub stacks: &'a crate::enrich::stacks::StackResolver,
    /// The capture's start (CLOCK_MONOTONIC): timelines count from it.
    pub origin_ns: u64,
    /// The node's GPUs, as NVML listed them.
    pub node: &'a [crate::enrich::gpu_env::NodeGpu],
}

/// The report section of one process.
pub(super) fn process(
    tgid: u32,
    p: &ProcState,
    meta: Option<&ProcessMeta>,
    cx: &Ctx<'_>,
) -> ProcessReport {
    let Ctx {
        api,
        resolver,
        stacks,
        origin_ns,
        node,
    } = *cx;
    let (kernels, unnamed_launches) = kernels(p, api, resolver, tgid);
    let (code, stack_summary) = match &p.frozen_code {
        Some(c) => c.clone(),
        None => code(tgid, p, api, resolver, stacks),
    };
    let mut r = ProcessReport {
        tgid,
        owner: meta.and_then(|m| m.owner),
        comm: meta.map(|m| m.comm.clone()).unwrap_or_default(),
        cmdline: meta.map(|m| m.cmdline.clone()).unwrap_or_default(),
        exited: meta.is_some_and(|m| m.exited),
        job: meta.and_then(|m| m.job.clone()),
        launches: p.launches,
        unnamed_launches,
        kernels,
        copies: copies(p),
        streams: streams(p),
        api: apis(p, api),
        graphs: GraphReport {
            launches: p.graph_launches,
        },
        allocations: allocations(p),
        gpu: p.gpu.report(),
        code,
        stacks: stack_summary,
        timeline: p.activity.report(origin_ns),
        launch_sampling: sampling(&p.sampling),
        devices: p
            .devices
            .report(p.gpu.report().as_ref().map_or(&[][..], |g| &g.devices[..])),
        derived_gpu_idle: None,
        nccl: p.nccl.report(),
        gpu_time: p.kernel_time.report(),
    };
    super::devices::name_node_gpus(&mut r.devices, meta.and_then(|m| m.gpu_env.as_ref()), node);
    join_gpu_time(&mut r.kernels, &p.kernel_time);
    super::busy::fill(&mut r, &p.busy);
    r
}

fn sampling(s: &super::sampling::Sampling) -> Option<crate::model::snapshot::LaunchSamplingReport> {
    (s.windows > 0 || s.exact > 0).then(|| crate::model::snapshot::LaunchSamplingReport {
        windows: s.windows,
        counted_launches: s.counted,
        exact_launches: s.exact,
        estimated_launches: s.estimate().round() as u64,
        standard_error: s.standard_error().map(|e| e.round() as u64),
        attached_ms: s.attached_ns / 1_000_000,
        observed_ms: s.observed_ns / 1_000_000,
    })
}

/// The code rows of a process (kernels named as in the kernels view).
pub(super) fn code(
    tgid: u32,
    p: &ProcState,
    api: &ApiTable,
    resolver: &dyn SymbolResolver,
    stacks: &crate::enrich::stacks::StackResolver,
) -> (
    Vec<crate::model::snapshot::CodeReport>,
    crate::model::snapshot::StackSummary,
) {
    let mut cache: FastMap<(u64, bool), String> = FastMap::default();
    let mut kernel = |api_id: u32, func: u64| {
        let runtime = api.get(api_id).is_some_and(|a| a.layer == Layer::Runtime);
        cache
            .entry((func, runtime))
            .or_insert_with(|| name_of(p, resolver, tgid, func, runtime).name)
            .clone()
    };
    super::stacks::code_report(stacks, tgid, &p.stacks, &mut kernel)
}

/// Groups processes by job (`kind:id`); processes without a job are left out.
/// Each job's `gpm`: the GPUs it held alone while GPM measured them, from the GPUs' own
/// `gpm.jobs` (so that a report cut down to some processes keeps its jobs' figures).
pub(crate) fn job_gpm(
    jobs: &mut [crate::model::snapshot::JobReport],
    gpus: &[crate::model::snapshot::GpuReport],
) {
    for j in jobs {
        let key = format!("{}:{}", j.kind, j.id);
        j.gpm = gpus
            .iter()
            .filter_map(|g| {
                let h = g.gpm.as_ref()?.jobs.iter().find(|h| h.workload == key)?;
                Some(crate::model::snapshot::JobGpmReport {
                    gpu: g.index,
                    samples: h.samples,
                    source: "measured".to_owned(),
                    avg: h.avg.clone(),
                })
            })
            .collect();
    }
}

pub(crate) fn jobs(
    processes: &[crate::model::snapshot::ProcessReport],
) -> Vec<crate::model::snapshot::JobReport> {
    use std::collections::BTreeMap;
    let mut by: BTreeMap<String, crate::model::snapshot::JobReport> = BTreeMap::new();
    for p in processes {
        let Some(j) = &p.job else { continue };
        let e = by
            .entry(j.key())
            .or_insert_with(|| crate::model::snapshot::JobReport {
                kind: j.kind.clone(),
                id: j.id.clone(),
                steps: Vec::new(),
                name: j.name.clone(),
                namespace: j.namespace.clone(),
                processes: Vec::new(),
                launches: 0,
                graph_launches: 0,
                copy_bytes: 0,
                alloc_bytes: 0,
                blocked_ns: 0,
                gpm: Vec::new(),
            });
        if let Some(s) = &j.step
            && !e.steps.contains(s)
        {
            e.steps.push(s.clone());
        }
        e.processes.push(p.tgid);
        e.launches += p.launches;
        e.graph_launches += p.graphs.launches;
        e.copy_bytes += p.copies.iter().map(|c| c.bytes).sum::<u64>();
        e.alloc_bytes += p.allocations.bytes;
        e.blocked_ns += p.api.iter().map(|a| a.blocked_ns).sum::<u64>();
    }
    let mut v: Vec<_> = by.into_values().collect();
    for j in &mut v {
        j.steps.sort();
        j.processes.sort_unstable();
    }
    v.sort_by(|a, b| {
        b.launches
            .cmp(&a.launches)
            .then_with(|| (&a.kind, &a.id).cmp(&(&b.kind, &b.id)))
    });
    v
}

//! `gpuprofd report FILE --format html -o report.html`: one self-contained page (no network at
//! view time) with the overview: summary, step-time graph, top kernels, jobs, copies, device
//! memory over time, advice.
//!
//! The page carries its data as JSON in a `<script type="application/json">` element and draws
//! itself with a few lines of plain JavaScript (tables and inline SVG), so what a browser shows
//! is exactly the JSON's numbers; the end-to-end test loads it in headless Chromium and reads
//! the rendered DOM back.

use crate::analysis::advice::Advice;
use crate::analysis::steps::{ProcessSteps, quantile};
use crate::model::mem::LiveMemory;
use crate::model::snapshot::Report;
use profiler_common::decode::Event;
use serde_json::{Value, json};
use std::collections::HashMap;

/// Top kernels shown.
const TOP_KERNELS: usize = 10;
/// Points per memory curve (changes beyond are thinned evenly; the last is always kept).
const MAX_POINTS: usize = 400;

/// Device memory live over time per process generation: `(tgid, generation)` → points of
/// (seconds since the start, bytes).
pub type MemorySeries = HashMap<(u32, u32), Vec<(f64, u64)>>;

/// Gathers [`MemorySeries`] from a capture's records, in one pass with whatever else reads
/// them.
#[derive(Default)]
pub struct MemoryCollector {
    live: LiveMemory<(u32, u32)>,
    /// `(tgid, generation)` → (CLOCK_MONOTONIC ns, bytes live after the change).
    changes: HashMap<(u32, u32), Vec<(u64, u64)>>,
}

impl MemoryCollector {
    /// A record of process generation `g`.
    pub fn on(&mut self, g: u32, ev: &Event) {
        let h = ev.header();
        if let Some(bytes) = self.live.on((h.tgid, g), ev) {
            self.changes
                .entry((h.tgid, g))
                .or_default()
                .push((h.ts_ns, bytes));
        }
    }

    /// The series, in seconds since `t0` (the capture's start, CLOCK_MONOTONIC ns).
    pub fn series(self, t0: u64) -> MemorySeries {
        self.changes
            .into_iter()
            .map(|(k, pts)| {
                let pts = pts
                    .into_iter()
                    .map(|(ts, b)| (ts.saturating_sub(t0) as f64 / 1e9, b))
                    .collect();
                (k, thin(pts))
            })
            .collect()
    }
}

fn thin(pts: Vec<(f64, u64)>) -> Vec<(f64, u64)> {
    if pts.len() <= MAX_POINTS {
        return pts;
    }
    let step = pts.len().div_ceil(MAX_POINTS - 1);
    let last = *pts.last().expect("non-empty");
    let mut out: Vec<_> = pts.into_iter().step_by(step).collect();
    if out.last() != Some(&last) {
        out.push(last);
    }
    out
}

/// The page's data.
pub fn page_data(
    r: &Report,
    steps: &[ProcessSteps],
    advice: &[Advice],
    memory: &MemorySeries,
) -> Value {
    let launches: u64 = r.processes.iter().map(|p| p.launches).sum();
    let copy_bytes: u64 = r
        .processes
        .iter()
        .flat_map(|p| &p.copies)
        .map(|c| c.bytes)
        .sum();
    let lost: u64 = r.drops.values().sum();
    let mut kernels: Vec<Value> = r
        .processes
        .iter()
        .flat_map(|p| {
            p.kernels.iter().map(move |k| {
                let t = k.gpu_time.as_ref();
                json!({"pid": p.tgid, "name": k.name, "calls": k.calls,
                       "grid": crate::output::fmt::dim3(k.grid),
                       "block": crate::output::fmt::dim3(k.block),
                       "gpu_ns": t.map(|t| t.total_ns),
                       "gpu_share": t.map(|t| t.share)})
            })
        })
        .collect();
    // Ranked by GPU time where the injection library measured any (TensorBoard's overview
    // ranks operations by time), by launches otherwise; the page says which.
    let by_gpu_time = kernels.iter().any(|k| k["gpu_ns"].as_u64().is_some());
    let key = if by_gpu_time { "gpu_ns" } else { "calls" };
    kernels.sort_by(|a, b| {
        b[key]
            .as_u64()
            .cmp(&a[key].as_u64())
            .then_with(|| b["calls"].as_u64().cmp(&a["calls"].as_u64()))
            .then_with(|| a["name"].as_str().cmp(&b["name"].as_str()))
            .then_with(|| a["pid"].as_u64().cmp(&b["pid"].as_u64()))
    });
    kernels.truncate(TOP_KERNELS);
    let jobs: Vec<Value> = r
        .jobs
        .iter()
        .map(|j| {
            json!({"kind": j.kind, "job": j.name.clone().unwrap_or_else(|| j.id.clone()),
                   "processes": j.processes.len(), "launches": j.launches,
                   "copy_bytes": j.copy_bytes, "blocked_ms": j.blocked_ns as f64 / 1e6})
        })
        .collect();
    let mut copies: Vec<(String, u64, u64)> = Vec::new();
    for c in r.processes.iter().flat_map(|p| &p.copies) {
        match copies.iter_mut().find(|x| x.0 == c.direction) {
            Some(x) => {
                x.1 += c.calls;
                x.2 += c.bytes;
            }
            None => copies.push((c.direction.clone(), c.calls, c.bytes)),
        }
    }
    // Per CUDA device (unknown last): processes, launches, bytes copied.
    let mut devices: Vec<(Option<u32>, u64, u64, u64)> = Vec::new();
    for d in r.processes.iter().flat_map(|p| &p.devices) {
        match devices.iter_mut().find(|x| x.0 == d.device) {
            Some(x) => {
                x.1 += 1;
                x.2 += d.launches;
                x.3 += d.copy_bytes;
            }
            None => devices.push((d.device, 1, d.launches, d.copy_bytes)),
        }
    }
    devices.sort_by_key(|d| (d.0.is_none(), d.0));
    // Derived GPU idle per process (model/busy.rs): a lower bound, never measured.
    let gpu_idle: Vec<Value> = r
        .processes
        .iter()
        .filter_map(|p| p.derived_gpu_idle.as_ref().map(|g| (p, g)))
        .map(|(p, g)| {
            json!({"pid": p.tgid, "comm": p.comm, "span_ms": g.span_ns as f64 / 1e6,
                   "idle_ms": g.idle_lower_bound_ns as f64 / 1e6,
                   "idle_pct": g.idle_share * 100.0, "drains": g.drains,
                   "ahead_p50_ms": g.launch_ahead_p50_ns as f64 / 1e6,
                   "ahead_max_ms": g.launch_ahead_max_ns as f64 / 1e6,
                   "unavailable": g.unavailable})
        })
        .collect();
    let comm = |tgid: u32, g: u32| {
        r.processes
            .iter()
            .filter(|p| p.tgid == tgid)
            .nth(g as usize)
            .map_or_else(String::new, |p| p.comm.clone())
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    let step_series: Vec<Value> = steps
        .iter()
        .map(|s| {
            // Medians over the regular steps (the loop's usual step), as the steps view.
            let regular: Vec<_> = s.regular().collect();
            let median = |v: Vec<u64>| (!v.is_empty()).then(|| quantile(v, 0.5));
            let busy = median(regular.iter().filter_map(|x| x.gpu_busy_ns).collect());
            let comm_ns = median(regular.iter().filter_map(|x| x.gpu_comm_ns).collect());
            let exposed = median(
                regular
                    .iter()
                    .filter_map(|x| x.gpu_comm_exposed_ns)
                    .collect(),
            );
            let share = median(
                regular
                    .iter()
                    .filter_map(|x| x.gpu_busy_permille())
                    .collect(),
            );
            json!({"pid": s.tgid, "comm": comm(s.tgid, s.generation), "boundary": s.boundary,
                   "steps": regular.len(),
                   "wall_p50_ms": median(regular.iter().map(|x| x.wall_ns).collect()).map(ms),
                   "busy_p50_ms": busy.map(ms),
                   "busy_pct": share.map(|p| p as f64 / 10.0),
                   "comm_p50_ms": comm_ns.map(ms), "exposed_p50_ms": exposed.map(ms),
                   "wall_ms": s.steps.iter().map(|x| ms(x.wall_ns)).collect::<Vec<_>>(),
                   "busy_ms": s.steps.iter().map(|x| x.gpu_busy_ns.map(ms)).collect::<Vec<_>>()})
        })
        .collect();
    let mut keys: Vec<&(u32, u32)> = memory.keys().collect();
    keys.sort();
    let memory: Vec<Value> = keys
        .into_iter()
        .map(|&(tgid, g)| {
            // Held until the end of the capture (a single allocation still draws a line).
            let mut pts = memory[&(tgid, g)].clone();
            if let Some(&(_, last)) = pts.last() {
                pts.push((r.duration_ns as f64 / 1e9, last));
            }
            json!({"pid": tgid, "comm": comm(tgid, g),
                   "points": pts.iter().map(|(t, b)| json!([t, b])).collect::<Vec<_>>()})
        })
        .collect();
    json!({
        "summary": {
            "host": r.host, "started_at": r.started_at,
            "duration_s": r.duration_ns as f64 / 1e9,
            "processes": r.processes.len(), "jobs": r.jobs.len(),
            "launches": launches, "copy_bytes": copy_bytes, "records_lost": lost,
        },
        "kernels": kernels,
        "kernels_by": if by_gpu_time { "gpu_time" } else { "launches" },
        "jobs": jobs,
        "devices": devices.iter().map(|(d, n, l, b)| json!({
            "device": d.map_or("unknown".to_owned(), |d| d.to_string()),
            "processes": n, "launches": l, "copy_bytes": b})).collect::<Vec<_>>(),
        "gpu_idle": gpu_idle,
        "copies": copies.iter().map(|(d, c, b)| json!({"direction": d, "calls": c, "bytes": b}))
            .collect::<Vec<_>>(),
        "steps": step_series,
        "memory": memory,
        "advice": advice,
        "nvml": {"state": r.nvml.state, "detail": r.nvml.detail, "samples": r.nvml.samples},
        "gpus": r.gpus.iter().map(|g| json!({"index": g.index, "name": g.name,
            "gpu_util_avg": g.gpu_util_avg, "mem_util_avg": g.mem_util_avg,
            "gpm": g.gpm.as_ref().map_or("-".to_owned(), |m| m.state.clone()),
            "gpm_sm_activity_avg": gpm_avg(g, |f| f.sm_activity_pct),
            "gpm_sm_occupancy_avg": gpm_avg(g, |f| f.sm_occupancy_pct),
            "gpm_tensor_activity_avg": gpm_avg(g, |f| f.tensor_activity_pct),
            "gpm_dram_bandwidth_avg": gpm_avg(g, |f| f.dram_bandwidth_pct),
            "memory_used_max": g.memory_used_max_bytes, "memory_total": g.memory_total_bytes,
            "power_avg_w": g.power_avg_w})).collect::<Vec<_>>(),
    })
}

/// The live dashboard: the overview of `data` (with `data["live"]`: the history of
/// [`crate::model::history::History::to_json`]) as a page that reloads itself every 5 s.
/// A GPU's measured GPM mean of one figure (`None` without GPM figures).
fn gpm_avg(
    g: &crate::model::snapshot::GpuReport,
    f: fn(&crate::nvml::gpm::Figures) -> Option<f64>,
) -> Option<f64> {
    g.gpm.as_ref().and_then(|m| m.avg.as_ref()).and_then(f)
}

pub fn live_page(data: &Value) -> String {
    page(data)
        .replacen(
            "<title>gpuprofd report</title>",
            "<title>gpuprofd live</title>\n<meta http-equiv=\"refresh\" content=\"5\">",
            1,
        )
        .replacen(
            "<h1>gpuprofd report</h1>",
            "<h1>gpuprofd live</h1>\n<p class=\"note\">Everything the service has seen, refreshed \
             every 5 s; processes that ended leave after metrics.expire_after.</p>\n\
             <h2>Kernel launches per second (all processes)</h2><div id=\"live-rate\"></div>\n\
             <h2>GPU utilisation (NVML)</h2><div id=\"live-util\"></div>",
            1,
        )
}

/// The page for `data` ([`page_data`]).
pub fn page(data: &Value) -> String {
    // '<' escaped inside the JSON so that no string in it can close the script element.
    let json = serde_json::to_string(data)
        .unwrap_or_else(|_| "{}".into())
        .replace('<', "\\u003c");
    format!(
        "{HEAD}<script type=\"application/json\" id=\"data\">{json}</script>\n<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )
}

const HEAD: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>gpuprofd report</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
.note { color: #666; font-size: 12px; } svg { background: #fafafa; border: 1px solid #eee; }
.advice { margin: 8px 0; padding: 8px; background: #fff7e6; border-left: 3px solid #f0a000; }
</style>
</head>
<body>
<h1>gpuprofd report</h1>
<p class="note">Call counts, bytes and blocked times are measured on the CPU side (when programs
called CUDA, and how long they were blocked). GPU execution times are measured only for processes
that ran with gpuprofd's injection library (CUPTI; columns marked "measured"); derived figures say
so.</p>
<h2>Summary</h2><table id="summary"></table>
<h2>GPUs (NVML)</h2><div id="gpus"></div>
<h2>Step time</h2>
<p class="note">Each process's step time, and where the injection library ran, the time inside
each step that some GPU work of the process was running (GPU busy, measured: overlapping streams
count once). The step less its GPU busy time is time the GPU ran nothing of that process. NCCL
kernels: the time one of NCCL's kernels ran in the step; exposed: the part in which nothing else
of the process ran beside it (communication not hidden behind compute).</p>
<div id="steps"></div><table id="steptable"></table>
<h2 id="kernels-title">Top kernels</h2><table id="kernels"></table>
<h2>Jobs</h2><table id="jobs"></table>
<h2>Copies</h2><div id="copies"></div>
<h2>Devices (CUDA ordinal the calls went to)</h2><table id="devices"></table>
<h2>GPU idle per process (derived from the syncs: a lower bound, not measured)</h2>
<p class="note">Time every stream the process used was known to have no work queued, and how
far the host ran ahead of the GPU (the blocked time of the waits that found work queued):
docs/GPU-TIME.md says how, and its error.</p>
<table id="gpuidle"></table>
<h2>Device memory over time</h2><div id="memory"></div>
<h2>Advice</h2><div id="advice"></div>
"#;

const SCRIPT: &str = r#"
const D = JSON.parse(document.getElementById('data').textContent);
const $ = (id) => document.getElementById(id);
const el = (tag, attrs, text) => { const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text; return e; };
const bytes = (n) => { const u = ['B','KiB','MiB','GiB','TiB']; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return i ? n.toFixed(1) + ' ' + u[i] : n + ' B'; };
function table(id, cols, rows) {
  const t = $(id); const h = el('tr');
  cols.forEach(c => h.appendChild(el('th', {class: c.left ? 'l' : ''}, c.title)));
  t.appendChild(h);
  rows.forEach(r => { const tr = el('tr');
    cols.forEach(c => tr.appendChild(el('td', {class: c.left ? 'l' : '', 'data-k': c.key},
      c.fmt ? c.fmt(r[c.key]) : String(r[c.key])))); t.appendChild(tr); });
}
const S = D.summary;
[['host', S.host], ['started_at', S.started_at], ['duration_s', S.duration_s.toFixed(3)],
 ['processes', S.processes], ['jobs', S.jobs], ['launches', S.launches],
 ['copy_bytes', bytes(S.copy_bytes)], ['records_lost', S.records_lost]].forEach(([k, v]) => {
  const tr = el('tr'); tr.appendChild(el('td', {class: 'l'}, k));
  tr.appendChild(el('td', {'data-k': k}, String(v))); $('summary').appendChild(tr); });
function chart(parent, series, xlab, ylab, fmtY) {
  const W = 900, H = 220, P = 50; let xs = [], ys = [];
  series.forEach(s => s.points.forEach(([x, y]) => { xs.push(x); ys.push(y); }));
  if (!xs.length) { parent.appendChild(el('p', {class: 'note'}, 'nothing recorded')); return; }
  const x0 = Math.min(...xs), x1 = Math.max(...xs) || 1, y1 = Math.max(...ys) || 1;
  const sx = (x) => P + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (W - 2 * P);
  const sy = (y) => H - P + 10 - (y / y1) * (H - 2 * P);
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('width', W); svg.setAttribute('height', H);
  const colors = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];
  series.forEach((s, i) => {
    const pl = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
    pl.setAttribute('points', s.points.map(([x, y]) => sx(x) + ',' + sy(y)).join(' '));
    pl.setAttribute('fill', 'none'); pl.setAttribute('stroke', colors[i % colors.length]);
    pl.setAttribute('stroke-width', '2'); pl.setAttribute('data-pid', s.pid);
    if (s.series) { pl.setAttribute('data-series', s.series); pl.setAttribute('stroke-dasharray', '4 3'); }
    pl.setAttribute('data-points', s.points.length); svg.appendChild(pl);
    const t = document.createElementNS('http://www.w3.org/2000/svg', 'text');
    t.setAttribute('x', W - P - 160); t.setAttribute('y', 16 + 14 * i);
    t.setAttribute('fill', colors[i % colors.length]); t.textContent = s.label; svg.appendChild(t);
  });
  const yl = document.createElementNS('http://www.w3.org/2000/svg', 'text');
  yl.setAttribute('x', 4); yl.setAttribute('y', 14); yl.textContent = ylab + ' (max ' + fmtY(y1) + ')';
  svg.appendChild(yl);
  const xl = document.createElementNS('http://www.w3.org/2000/svg', 'text');
  xl.setAttribute('x', W / 2 - 40); xl.setAttribute('y', H - 6); xl.textContent = xlab;
  svg.appendChild(xl); parent.appendChild(svg);
}
if (D.gpus.length) {
  const gt = el('table', {id: 'gputable'}); $('gpus').appendChild(gt);
  table('gputable', [{key: 'index', title: 'GPU'}, {key: 'name', title: 'name', left: true},
    {key: 'gpu_util_avg', title: 'util avg %', fmt: (v) => v === null ? '-' : v.toFixed(1)},
    {key: 'mem_util_avg', title: 'mem util avg %', fmt: (v) => v === null ? '-' : v.toFixed(1)},
    {key: 'memory_used_max', title: 'memory used max', fmt: (v) => v === null ? '-' : bytes(v)},
    {key: 'power_avg_w', title: 'power avg W', fmt: (v) => v === null ? '-' : v.toFixed(1)},
    {key: 'gpm', title: 'GPM', left: true},
    {key: 'gpm_sm_activity_avg', title: 'SM active avg % (measured)', fmt: (v) => v === null ? '-' : v.toFixed(1)},
    {key: 'gpm_sm_occupancy_avg', title: 'SM occupancy avg %', fmt: (v) => v === null ? '-' : v.toFixed(1)},
    {key: 'gpm_tensor_activity_avg', title: 'tensor avg %', fmt: (v) => v === null ? '-' : v.toFixed(1)},
    {key: 'gpm_dram_bandwidth_avg', title: 'DRAM bw avg %', fmt: (v) => v === null ? '-' : v.toFixed(1)}],
    D.gpus);
} else {
  $('gpus').appendChild(el('p', {class: 'note'}, 'NVML ' + D.nvml.state +
    (D.nvml.detail ? ': ' + D.nvml.detail : '')));
}
chart($('steps'), D.steps.flatMap(s => {
  const out = [{pid: s.pid, label: s.pid + ' ' + s.comm, points: s.wall_ms.map((w, i) => [i + 1, w])}];
  const busy = s.busy_ms.map((b, i) => [i + 1, b]).filter(([, b]) => b !== null);
  if (busy.length) out.push({pid: s.pid, series: 'gpu-busy', points: busy,
    label: s.pid + ' GPU busy (measured)'});
  return out; }), 'step', 'step time, ms', (v) => v.toFixed(1));
const opt = (f) => (v) => v === null ? '-' : f(v);
table('steptable', [{key: 'pid', title: 'PID'}, {key: 'comm', title: 'process', left: true},
  {key: 'boundary', title: 'step ends at', left: true}, {key: 'steps', title: 'steps'},
  {key: 'wall_p50_ms', title: 'step ms (median)', fmt: opt((v) => v.toFixed(3))},
  {key: 'busy_p50_ms', title: 'GPU busy ms (measured, median)', fmt: opt((v) => v.toFixed(3))},
  {key: 'busy_pct', title: 'GPU busy % of the step (median)', fmt: opt((v) => v.toFixed(1))},
  {key: 'comm_p50_ms', title: 'NCCL kernels ms (measured, median)', fmt: opt((v) => v.toFixed(3))},
  {key: 'exposed_p50_ms', title: 'of which exposed ms', fmt: opt((v) => v.toFixed(3))}],
  D.steps);
if (!D.steps.length) $('steps').firstChild.textContent =
  'no training loop found (see docs/CAPTURE-FILES.md, Steps)';
$('kernels-title').textContent = D.kernels_by === 'gpu_time'
  ? 'Top kernels (by GPU time, measured by CUPTI through the injection library)'
  : 'Top kernels (by launches; no GPU time was measured: docs/INJECTION.md)';
table('kernels', [{key: 'pid', title: 'PID'}, {key: 'name', title: 'kernel', left: true},
  {key: 'calls', title: 'launches'},
  {key: 'gpu_ns', title: 'GPU ms (measured)', fmt: (v) => v === null ? '-' : (v / 1e6).toFixed(3)},
  {key: 'gpu_share', title: 'share of its process %', fmt: (v) => v === null ? '-' : (100 * v).toFixed(1)},
  {key: 'grid', title: 'grid'}, {key: 'block', title: 'block'}],
  D.kernels);
table('jobs', [{key: 'kind', title: 'kind', left: true}, {key: 'job', title: 'job', left: true},
  {key: 'processes', title: 'processes'}, {key: 'launches', title: 'launches'},
  {key: 'copy_bytes', title: 'copied', fmt: bytes},
  {key: 'blocked_ms', title: 'blocked ms', fmt: (v) => v.toFixed(3)}], D.jobs);
table('devices', [{key: 'device', title: 'device', left: true},
  {key: 'processes', title: 'processes'}, {key: 'launches', title: 'launches'},
  {key: 'copy_bytes', title: 'copied', fmt: bytes}], D.devices || []);
const ms3 = (v) => v.toFixed(3);
table('gpuidle', [{key: 'pid', title: 'PID'}, {key: 'comm', title: 'process', left: true},
  {key: 'span_ms', title: 'span ms', fmt: ms3}, {key: 'idle_ms', title: 'idle ≥ ms', fmt: ms3},
  {key: 'idle_pct', title: 'idle ≥ %', fmt: (v) => v.toFixed(1)},
  {key: 'drains', title: 'waits with work queued'},
  {key: 'ahead_p50_ms', title: 'ahead ≥ ms (median)', fmt: ms3},
  {key: 'ahead_max_ms', title: 'ahead ≥ ms (max)', fmt: ms3},
  {key: 'unavailable', title: 'not derived because', left: true, fmt: (v) => v || ''}],
  D.gpu_idle || []);
if (!(D.gpu_idle || []).length) $('gpuidle').appendChild(el('tr', {},
  'nothing derived (no process waited for its GPU work)'));
const ct = el('table', {id: 'copytable'}); $('copies').appendChild(ct);
const maxB = Math.max(1, ...D.copies.map(c => c.bytes));
D.copies.forEach(c => { const tr = el('tr'); tr.appendChild(el('td', {class: 'l'}, c.direction));
  tr.appendChild(el('td', {'data-k': 'calls'}, String(c.calls)));
  tr.appendChild(el('td', {'data-k': 'bytes', 'data-v': c.bytes}, bytes(c.bytes)));
  const bar = el('td', {class: 'l'}); bar.appendChild(el('div', {style:
    'background:#1f77b4;height:10px;width:' + Math.round(300 * c.bytes / maxB) + 'px'}));
  tr.appendChild(bar); ct.appendChild(tr); });
chart($('memory'), D.memory.map(m => ({pid: m.pid, label: m.pid + ' ' + m.comm,
  points: m.points})), 'seconds since start', 'live device memory', bytes);
if (!D.copies.length) $('copies').appendChild(el('p', {class: 'note'}, 'no copies recorded'));
if (!D.advice.length) $('advice').appendChild(el('p', {}, 'nothing stood out'));
D.advice.forEach(a => { const d = el('div', {class: 'advice', 'data-rule': a.rule});
  d.appendChild(el('b', {}, a.rule + (a.pid ? ' — process ' + a.pid + ' ' + a.comm : '')));
  d.appendChild(el('div', {}, a.evidence)); d.appendChild(el('div', {}, 'Try: ' + a.suggestion));
  $('advice').appendChild(d); });
if (D.live) {
  chart($('live-rate'), [{pid: 0, label: 'launches/s', points: D.live.launch_rate}],
    'seconds since the service started', 'launches/s', (v) => v.toFixed(0));
  chart($('live-util'), D.live.gpu_util.map(g => ({pid: g.gpu, label: 'GPU ' + g.gpu,
    points: g.points})), 'seconds since the service started', 'utilisation %',
    (v) => v.toFixed(0));
}
document.body.setAttribute('data-rendered', 'yes');
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_cannot_close_its_script_element() {
        let p = page(&json!({"summary": {"host": "</script><script>alert(1)</script>"}}));
        assert_eq!(p.matches("</script>").count(), 2, "only the page's own two");
        assert!(p.contains("\\u003c/script>\\u003cscript>alert(1)"));
    }

    #[test]
    fn long_series_are_thinned_keeping_the_last_point() {
        let pts: Vec<(f64, u64)> = (0..1000).map(|i| (i as f64, i)).collect();
        let t = thin(pts);
        assert!(t.len() <= MAX_POINTS, "{}", t.len());
        assert_eq!(t[0], (0.0, 0));
        assert_eq!(*t.last().unwrap(), (999.0, 999));
        let short: Vec<(f64, u64)> = vec![(0.0, 1), (1.0, 2)];
        assert_eq!(thin(short.clone()), short);
    }
}

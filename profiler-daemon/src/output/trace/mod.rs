//! `gpuprofd export FILE --format chrome`: a capture file as Chrome Trace Event JSON, for
//! Perfetto UI (ui.perfetto.dev) and chrome://tracing.
//!
//! What the trace holds, all from the CPU side (uprobes see when the program called the API,
//! not when the GPU ran the work):
//! - a process per captured process (named with its comm and job), a thread track per thread
//!   that called CUDA;
//! - every call on its thread: launches as zero-length slices named after the kernel (grid,
//!   block, shared memory, stream, API in the arguments), with a flow arrow to the same launch on
//!   its stream's track; copies, synchronisations and allocations as
//!   slices spanning the call when a return probe timed it, instants otherwise;
//! - a track per stream ("stream 0x…") with the launches and copies enqueued on it, at the time
//!   they were enqueued;
//! - a counter per process: device memory allocated through the hooked APIs and not yet freed;
//! - with NVML: a utilisation counter per GPU (on track 0, "GPUs") and the GPU memory each
//!   process holds;
//! - a "steps" track per process with a training loop (see `steps`): a span per step (a step in
//!   the `--from/--to` window when it starts inside it).
//!
//! A pid that was reused during the capture shows as two processes; the earlier one's track id
//! is `tgid + 10,000,000 × (n + 1)` for its n-th predecessor. Events are streamed to the output
//! (memory stays bounded by the number of kernels, threads and streams, not events).

use crate::api::Layer;
use crate::model::direction_name as dir_name;
use crate::model::mem::LiveMemory;
use crate::store;
use profiler_common::decode::Event;
use profiler_common::flags;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Chrome Trace Event JSON (Perfetto UI, chrome://tracing).
    Chrome,
    /// Perfetto's protobuf trace format (Perfetto UI, trace_processor): for large captures.
    Perfetto,
}

/// A JSON trace larger than this is written in Perfetto's format instead, unless `--format
/// chrome` asks for JSON (browsers load a JSON trace as one string; V8 caps strings at 2^29
/// characters, and Perfetto UI's JSON importer struggles well before that).
pub const JSON_LIMIT_BYTES: u64 = 256 << 20;

#[derive(Clone, Debug, clap::Args)]
pub struct ExportArgs {
    /// A capture file written with `--output FILE.gpuprof`.
    pub file: PathBuf,
    /// Default: `perfetto` for an output named `*.pftrace` or `*.perfetto-trace`, else `chrome`
    /// — switching to `perfetto` (written to `FILE.pftrace`) when the JSON would pass
    /// `--json-limit`.
    #[arg(long, value_enum)]
    pub format: Option<ExportFormat>,
    /// Where to write the trace.
    #[arg(long, short, value_name = "FILE.json|FILE.pftrace")]
    pub output: PathBuf,
    /// Only calls this many seconds or more after the capture started.
    #[arg(long, value_name = "SECONDS")]
    pub from: Option<f64>,
    /// Only calls less than this many seconds after the capture started.
    #[arg(long, value_name = "SECONDS")]
    pub to: Option<f64>,
    /// Without --format: the largest JSON trace to write before switching to Perfetto's format.
    #[arg(long, value_name = "BYTES", default_value_t = JSON_LIMIT_BYTES)]
    pub json_limit: u64,
}

/// Why a trace was not written in full.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The capture file could not be read (`gpuprofd export` exits with 10).
    #[error("{0}")]
    Read(String),
    /// The output could not be written (exit 4).
    #[error("writing the trace: {0}")]
    Write(#[from] std::io::Error),
    /// A [`ChromeSink`] with a limit passed it (exit 4, unless `export` switches to Perfetto).
    #[error("the JSON trace passed its size limit")]
    OverLimit,
}

/// What an export wrote.
#[derive(Debug, PartialEq, Eq)]
pub struct Summary {
    pub events: u64,
    pub processes: usize,
    pub damaged: bool,
    pub warning: Option<String>,
}

/// Track id of the `generation`-th process that had `tgid` when `last` generations did.
fn track_pid(tgid: u32, generation: u32, last: u32) -> u64 {
    if generation >= last {
        u64::from(tgid)
    } else {
        u64::from(tgid) + 10_000_000 * u64::from(last - generation)
    }
}

/// Stream tracks get thread ids above any real one (Linux pids stay below 2^22).
const STREAM_TID_BASE: u64 = 1 << 30;
/// The track of a process's steps.
const STEP_TID: u64 = STREAM_TID_BASE - 1;

struct Streams {
    ids: HashMap<(u64, u64), u64>,
}

impl Streams {
    /// The track of `stream` in process track `pid`, and whether it is new.
    fn track(&mut self, pid: u64, stream: u64) -> (u64, bool) {
        let n = self.ids.len() as u64;
        let mut new = false;
        let id = *self.ids.entry((pid, stream)).or_insert_with(|| {
            new = true;
            STREAM_TID_BASE + n
        });
        (id, new)
    }
}

/// Where a trace's events go: Chrome Trace Event JSON objects, written as they are or
/// translated (see [`perfetto`]).
pub trait Sink {
    fn event(&mut self, v: Value) -> Result<(), TraceError>;
    fn finish(&mut self) -> Result<(), TraceError>;
}

/// Chrome Trace Event JSON: `{"displayTimeUnit":"ns","traceEvents":[…]}`.
pub struct ChromeSink<W: Write> {
    out: W,
    n: u64,
    written: u64,
    /// Stop with [`TraceError::OverLimit`] past this many bytes.
    pub limit: Option<u64>,
}

impl<W: Write> ChromeSink<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            n: 0,
            written: 0,
            limit: None,
        }
    }
}

impl<W: Write> Sink for ChromeSink<W> {
    fn event(&mut self, v: Value) -> Result<(), TraceError> {
        if self.n == 0 {
            write!(self.out, "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
        } else {
            self.out.write_all(b",\n")?;
        }
        let text = serde_json::to_vec(&v).map_err(std::io::Error::from)?;
        self.written += text.len() as u64 + 2;
        if self.limit.is_some_and(|l| self.written > l) {
            return Err(TraceError::OverLimit);
        }
        self.out.write_all(&text)?;
        self.n += 1;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), TraceError> {
        if self.n == 0 {
            write!(self.out, "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
        }
        writeln!(self.out, "]}}")?;
        Ok(self.out.flush()?)
    }
}

/// Writes the Chrome trace of the capture at `path` to `out`.
pub fn chrome(
    path: &std::path::Path,
    out: &mut impl Write,
    from_s: Option<f64>,
    to_s: Option<f64>,
) -> Result<Summary, TraceError> {
    trace(path, &mut ChromeSink::new(out), from_s, to_s)
}

/// Sends the trace of the capture at `path` to `out`, event by event.
pub fn trace(
    path: &std::path::Path,
    out: &mut dyn Sink,
    from_s: Option<f64>,
    to_s: Option<f64>,
) -> Result<Summary, TraceError> {
    // Pass 1: the report (process names, jobs) and every kernel's name.
    let replay = store::replay(path).map_err(|e| TraceError::Read(e.to_string()))?;
    let t0 = replay.header.started_at_monotonic_ns;
    let from_ns = from_s.map(|s| t0 + (s * 1e9) as u64);
    let to_ns = to_s.map(|s| t0 + (s * 1e9) as u64);
    let mut last_gen: HashMap<u32, u32> = HashMap::new();
    for p in &replay.report.processes {
        *last_gen.entry(p.tgid).or_insert(0) += 1;
    }
    let last = |tgid: u32| last_gen.get(&tgid).map_or(0, |n| n.saturating_sub(1));

    let mut events = 0u64;
    let mut emit = |out: &mut dyn Sink, v: Value| -> Result<(), TraceError> {
        out.event(v)?;
        events += 1;
        Ok(())
    };

    // Process and thread names; track 0 holds the GPUs' counters.
    emit(
        out,
        json!({"ph": "M", "name": "process_name", "pid": 0, "tid": 0,
               "args": {"name": "GPUs (NVML)"}}),
    )?;
    let mut seen_gen: HashMap<u32, u32> = HashMap::new();
    for p in &replay.report.processes {
        let g = seen_gen.entry(p.tgid).or_insert(0);
        let pid = track_pid(p.tgid, *g, last(p.tgid));
        *g += 1;
        let job = p
            .job
            .as_ref()
            .map(|j| format!(" [{}:{}]", j.kind, j.name.as_deref().unwrap_or(&j.id)))
            .unwrap_or_default();
        let ended = if p.exited { ", exited" } else { "" };
        emit(
            out,
            json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                   "args": {"name": format!("{} (pid {}{ended}){job}", p.comm, p.tgid)}}),
        )?;
    }

    // NVML: a counter per device (utilisation) and per process (GPU memory it holds).
    for s in store::nvml_samples(path).map_err(TraceError::Read)? {
        if from_ns.is_some_and(|f| s.ts_ns < f) || to_ns.is_some_and(|t| s.ts_ns >= t) {
            continue;
        }
        let ts = s.ts_ns.saturating_sub(t0) as f64 / 1e3;
        for d in &s.devices {
            emit(
                out,
                json!({"ph": "C", "name": format!("GPU {} utilisation % (NVML)", d.index),
                       "pid": 0, "ts": ts,
                       "args": {"gpu": d.gpu_util, "memory": d.mem_util}}),
            )?;
        }
        for p in &s.processes {
            if let Some(b) = p.used_bytes
                && last_gen.contains_key(&p.pid)
            {
                emit(
                    out,
                    json!({"ph": "C", "name": "GPU memory held (NVML, bytes)",
                           "pid": track_pid(p.pid, last(p.pid), last(p.pid)), "ts": ts,
                           "args": {"held": b}}),
                )?;
            }
        }
    }

    // Steps (two more passes, see `steps`): a span per step on a "steps" track.
    for s in crate::analysis::steps::find(path, t0).map_err(TraceError::Read)? {
        let pid = track_pid(s.tgid, s.generation, last(s.tgid));
        let mut named = false;
        for (i, st) in s.steps.iter().enumerate() {
            let at = t0 + st.start_ns;
            if from_ns.is_some_and(|f| at < f) || to_ns.is_some_and(|t| at >= t) {
                continue;
            }
            if !named {
                named = true;
                emit(
                    out,
                    json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": STEP_TID,
                           "args": {"name": format!("steps (ends: {})", s.boundary)}}),
                )?;
            }
            emit(
                out,
                json!({"ph": "X", "cat": "step", "name": format!("step {}", i + 1),
                       "pid": pid, "tid": STEP_TID, "ts": st.start_ns as f64 / 1e3,
                       "dur": st.wall_ns as f64 / 1e3,
                       "args": {"launches": st.launches, "blocked_ns": st.blocked_ns,
                                "copy_bytes": st.copy_bytes,
                                "first_enqueue_ns": st.first_enqueue_ns,
                                "live_bytes": st.live_bytes, "regular": st.regular}}),
            )?;
        }
    }

    // Pass 2: every call, in ring order.
    let mut threads: HashMap<(u64, u32), ()> = HashMap::new();
    let mut streams = Streams {
        ids: HashMap::new(),
    };
    let mut live: LiveMemory<u64> = LiveMemory::default();
    let mut flow = 0u64;
    let us = |ts: u64| ts.saturating_sub(t0) as f64 / 1e3;
    // The sink's error, kept whole while the reader passes its text on.
    let mut failed: Option<TraceError> = None;
    let damage = store::for_each_record_named(path, |api, g, ev, stacks| {
        let mut one = || -> Result<(), TraceError> {
            let h = *ev.header();
            let pid = track_pid(h.tgid, g, last(h.tgid));
            let api_name = api.name(h.api);
            let runtime = api.get(h.api).is_some_and(|a| a.layer == Layer::Runtime);
            let in_window =
                from_ns.is_none_or(|f| h.ts_ns >= f) && to_ns.is_none_or(|t| h.ts_ns < t);
            // Live memory is followed over the whole capture, shown inside the window.
            if let Some(v) = live.on(pid, ev)
                && in_window
            {
                emit(
                    out,
                    json!({"ph": "C", "name": "device memory (bytes)", "pid": pid,
                               "ts": us(h.ts_ns), "args": {"live": v}}),
                )?;
            }
            if !in_window || matches!(ev, Event::Map(..) | Event::Name(..) | Event::Alias(..)) {
                return Ok(());
            }
            if threads.insert((pid, h.tid), ()).is_none() {
                emit(
                    out,
                    json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": h.tid,
                               "args": {"name": format!("thread {}", h.tid)}}),
                )?;
            }
            let ts = us(h.ts_ns);
            let mut on_stream =
                |out: &mut dyn Sink,
                 stream: u64,
                 v: Value,
                 emit: &mut dyn FnMut(&mut dyn Sink, Value) -> Result<(), TraceError>|
                 -> Result<u64, TraceError> {
                    let (tid, new) = streams.track(pid, stream);
                    if new {
                        let label = if stream == 0 {
                            "default stream".to_owned()
                        } else {
                            format!("stream 0x{stream:x}")
                        };
                        emit(
                            out,
                            json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                   "args": {"name": label}}),
                        )?;
                    }
                    let mut v = v;
                    v["tid"] = json!(tid);
                    emit(out, v)?;
                    Ok(tid)
                };
            let kernel_name = |func: u64| {
                replay
                    .kernel_names
                    .get(&(h.tgid, g, func, runtime))
                    .cloned()
                    .unwrap_or_else(|| format!("<unknown 0x{func:x}>"))
            };
            match &ev {
                Event::Launch(_, l) => {
                    let name = kernel_name(l.func);
                    let args = json!({"api": api_name, "grid": l.grid, "block": l.block,
                                          "shared_bytes": l.shared_bytes,
                                          "stream": format!("0x{:x}", l.stream)});
                    // Zero-length slices rather than instants: flow arrows bind to slices.
                    emit(
                        out,
                        json!({"ph": "X", "dur": 0, "cat": "launch", "name": name.clone(),
                                   "pid": pid, "tid": h.tid, "ts": ts, "args": args.clone()}),
                    )?;
                    let stream_tid = on_stream(
                        out,
                        l.stream,
                        json!({"ph": "X", "dur": 0, "cat": "launch", "name": name,
                                   "pid": pid, "ts": ts, "args": args}),
                        &mut emit,
                    )?;
                    flow += 1;
                    emit(
                        out,
                        json!({"ph": "s", "id": flow, "cat": "enqueue", "name": "enqueue",
                               "pid": pid, "tid": h.tid, "ts": ts}),
                    )?;
                    emit(
                        out,
                        json!({"ph": "f", "bp": "e", "id": flow, "cat": "enqueue",
                               "name": "enqueue", "pid": pid, "tid": stream_tid, "ts": ts}),
                    )?;
                }
                Event::Copy(_, c) => {
                    let name = format!("{api_name} {}", dir_name(c.direction));
                    let args = json!({"bytes": c.bytes, "direction": dir_name(c.direction),
                                          "async": c.flags & flags::ASYNC != 0,
                                          "stream": format!("0x{:x}", c.stream), "ret": c.ret});
                    emit(
                        out,
                        call(
                            &name,
                            "copy",
                            pid,
                            h.tid,
                            ts,
                            c.flags,
                            c.dur_ns,
                            args.clone(),
                        ),
                    )?;
                    let _ = on_stream(
                        out,
                        c.stream,
                        json!({"ph": "i", "s": "t", "cat": "copy", "name": name,
                                   "pid": pid, "ts": ts, "args": args}),
                        &mut emit,
                    )?;
                }
                Event::Sync(_, s) => {
                    let args = json!({"handle": format!("0x{:x}", s.handle), "ret": s.ret,
                                          "gpu_side": s.flags & flags::GPU_SIDE != 0});
                    emit(
                        out,
                        call(&api_name, "sync", pid, h.tid, ts, s.flags, s.dur_ns, args),
                    )?;
                }
                Event::Mem(_, m) => {
                    let args = json!({"bytes": m.bytes, "ptr": format!("0x{:x}", m.ptr),
                                          "ret": m.ret});
                    emit(
                        out,
                        call(&api_name, "memory", pid, h.tid, ts, m.flags, m.dur_ns, args),
                    )?;
                }
                Event::Graph(_, gr) => {
                    let args = json!({"graph_exec": format!("0x{:x}", gr.graph_exec),
                                          "stream": format!("0x{:x}", gr.stream)});
                    emit(
                        out,
                        json!({"ph": "i", "s": "t", "cat": "graph", "name": api_name,
                                   "pid": pid, "tid": h.tid, "ts": ts, "args": args}),
                    )?;
                }
                Event::Exit(..) => {
                    emit(
                        out,
                        json!({"ph": "i", "s": "p", "cat": "process", "name": "process exit",
                                   "pid": pid, "tid": h.tid, "ts": ts}),
                    )?;
                }
                Event::Exec(_, x) => {
                    let len = x.comm.iter().position(|&b| b == 0).unwrap_or(x.comm.len());
                    emit(
                        out,
                        json!({"ph": "i", "s": "p", "cat": "process", "name": "exec",
                                   "pid": pid, "tid": h.tid, "ts": ts,
                                   "args": {"comm": String::from_utf8_lossy(&x.comm[..len])}}),
                    )?;
                }
                Event::Stack(_, st) => {
                    // The call just before on this thread, at this timestamp: its stack, as an
                    // instant on the same track (outermost frame first).
                    let key = crate::enrich::stacks::StackKey::of(st);
                    let of = match st.of_kind {
                        profiler_common::kind::LAUNCH => "launch",
                        profiler_common::kind::SYNC => "sync",
                        profiler_common::kind::COPY => "copy",
                        _ => "call",
                    };
                    emit(
                        out,
                        json!({"ph": "i", "s": "t", "cat": "stack", "name": format!("{of} stack"),
                               "pid": pid, "tid": h.tid, "ts": ts,
                               "args": {"stack": stacks.labels(h.tgid, &key),
                                        "period": st.period}}),
                    )?;
                }
                Event::Launches(_, l) => {
                    // Counted in the kernel (capture files are written in full mode, so only a
                    // hand-made file has these): one instant for the lot, no per-launch slices.
                    let name = kernel_name(l.func);
                    emit(
                        out,
                        json!({"ph": "i", "s": "t", "cat": "launch", "name": name,
                               "pid": pid, "tid": h.tid, "ts": ts,
                               "args": {"api": api_name, "launches": l.count, "grid": l.grid,
                                        "block": l.block, "shared_bytes": l.shared_bytes,
                                        "stream": format!("0x{:x}", l.stream)}}),
                    )?;
                }
                Event::Map(..) | Event::Name(..) | Event::Alias(..) => {}
            }
            Ok(())
        };
        one().map_err(|e| {
            let text = e.to_string();
            failed = Some(e);
            text
        })
    });
    if let Some(e) = failed {
        return Err(e);
    }
    let damage = damage.map_err(TraceError::Read)?;
    out.finish()?;
    let recovery_warning = damage
        .as_ref()
        .map(|d| format!("the capture is damaged ({d}); the trace stops there"));
    Ok(Summary {
        events,
        processes: replay.report.processes.len(),
        damaged: damage.is_some(),
        warning: recovery_warning.or_else(|| replay.recovery.warning(&path.display().to_string())),
    })
}

/// A timed call as a slice (return probe: its duration is measured), else an instant.
#[allow(clippy::too_many_arguments)]
fn call(
    name: &str,
    cat: &str,
    pid: u64,
    tid: u32,
    ts: f64,
    fl: u32,
    dur_ns: u64,
    args: Value,
) -> Value {
    if fl & flags::HAS_RETURN != 0 {
        json!({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts,
               "dur": dur_ns as f64 / 1e3, "args": args})
    } else {
        json!({"ph": "i", "s": "t", "cat": cat, "name": name, "pid": pid, "tid": tid,
               "ts": ts, "args": args})
    }
}

pub mod perfetto;
#[cfg(test)]
mod tests;

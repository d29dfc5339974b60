//! `gpuprofd export FILE`: a capture file as a timeline's events ([`TraceEvent`]), handed one by
//! one to a [`Sink`] that writes them in one format: [`chrome`](mod@chrome) (Chrome Trace Event
//! JSON, for Perfetto UI (ui.perfetto.dev) and chrome://tracing) or [`perfetto`] (Perfetto's
//! protobuf). The records' pass is in `calls`.
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
//! - with NVML GPM (Hopper and later): a measured activity counter per GPU (SM activity and
//!   occupancy, tensor pipes, DRAM bandwidth, FP16/32/64), beside the utilisation counter;
//! - a track per NCCL communicator of a process ("NCCL <id> rank r/n") with its collectives
//!   and sends/receives, each an instant at its entry (creation and queries stay on the thread);
//! - a "steps" track per process with a training loop (see `steps`): a span per step (a step in
//!   the `--from/--to` window when it starts inside it).
//!
//! A pid that was reused during the capture shows as two processes; the earlier one's track id
//! is `tgid + 10,000,000 × (n + 1)` for its n-th predecessor. Events are streamed to the output
//! (memory stays bounded by the number of kernels, threads and streams, not events).
//!
//! The events are typed data: times in ns after the capture's start, tracks as integers,
//! arguments as typed values. Each writer converts them at its edge (µs as floats for Chrome,
//! protobuf fields for Perfetto). Both formats' output for a synthetic capture that makes every
//! kind of event is kept in `fixtures/` and checked byte for byte (`cli/export`'s golden test).

use crate::store;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

mod calls;
pub mod chrome;
pub mod guard;
pub mod merge;
pub mod perfetto;
#[cfg(test)]
mod tests;

pub use chrome::ChromeSink;

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
    /// A capture file written with `--output FILE.gpuprof`. Several captures of one job (one
    /// per node) make one timeline: each node's processes named `node/rank`, on the nodes'
    /// wall-clock axis (see `report A B …`).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Default: `perfetto` for an output named `*.pftrace` or `*.perfetto-trace`, else `chrome`
    /// — switching to `perfetto` (written to `FILE.pftrace`) when the JSON would pass
    /// `--json-limit`.
    #[arg(long, value_enum)]
    pub format: Option<ExportFormat>,
    /// Where to write the trace.
    #[arg(long, short, value_name = "FILE.json|FILE.pftrace")]
    pub output: PathBuf,
    /// Only calls this many seconds or more after the capture started (the earliest capture,
    /// with several).
    #[arg(long, value_name = "SECONDS")]
    pub from: Option<f64>,
    /// Only calls less than this many seconds after the capture started.
    #[arg(long, value_name = "SECONDS")]
    pub to: Option<f64>,
    /// Only this process (one capture).
    #[arg(long, value_name = "PID", conflicts_with = "rank")]
    pub pid: Option<u32>,
    /// Only the process of this NCCL rank (in the job's communicator, as `report --view
    /// ranks` names them), in every capture given.
    #[arg(long, value_name = "RANK")]
    pub rank: Option<i32>,
    /// Without --format: the largest JSON trace to write before switching to Perfetto's format.
    #[arg(long, value_name = "BYTES", default_value_t = JSON_LIMIT_BYTES)]
    pub json_limit: u64,
    /// Without --from/--to: the largest trace (estimated, in Perfetto's format) to write whole.
    /// Past it, export writes the window that fits around the slowest training step (else the
    /// busiest moment; of any capture, with several) and says what it left out. 0: no limit.
    #[arg(long, value_name = "BYTES", default_value_t = guard::DEFAULT_MAX_BYTES)]
    pub max_size: u64,
}

/// Why a trace was not written in full.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The capture file could not be read (`gpuprofd export` exits with 10).
    #[error(transparent)]
    Read(#[from] store::StoreError),
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

/// One event of the trace. Times are ns after the capture's start. A track is a pair of
/// integers: `pid`, a process's track (0: the GPUs; see the module's note on reused pids), and
/// `tid`, one of its threads, or a stream (from [`STREAM_TID_BASE`]), a device and CUPTI
/// stream's measured track (from [`GPU_TID_BASE`]), an NCCL communicator's track (from
/// [`NCCL_TID_BASE`]) or its steps ([`STEP_TID`]).
#[derive(Clone, Debug, PartialEq)]
pub enum TraceEvent {
    /// Names the track of a process.
    ProcessName { pid: u64, name: String },
    /// Names a thread's, a stream's or the steps' track in a process.
    ThreadName { pid: u64, tid: u64, name: String },
    /// Something that lasts (or, [`Dur::Mark`], marks a moment flows bind to).
    Slice {
        pid: u64,
        tid: u64,
        ts_ns: u64,
        dur: Dur,
        cat: &'static str,
        name: Name,
        args: Args,
    },
    /// A moment on a thread's track, or (`Scope::Process`) the whole process's.
    Instant {
        pid: u64,
        tid: u64,
        ts_ns: u64,
        scope: Scope,
        cat: &'static str,
        name: Name,
        args: Args,
    },
    /// Counter `name` of a process: each series with its value (`None`: not reported), the
    /// series in key order.
    Counter {
        pid: u64,
        ts_ns: u64,
        name: String,
        values: Vec<(&'static str, Option<u64>)>,
    },
    /// Flow `id` leaves the slice at this time on this track (written just after it).
    FlowStart {
        id: u64,
        pid: u64,
        tid: u64,
        ts_ns: u64,
        cat: &'static str,
        name: &'static str,
    },
    /// Flow `id` arrives at the slice at this time on this track (written just after it).
    FlowEnd {
        id: u64,
        pid: u64,
        tid: u64,
        ts_ns: u64,
        cat: &'static str,
        name: &'static str,
    },
}

/// An event's name: shared, as a kernel's name is by every launch of it (and by the launch's
/// copy on its stream's track), rather than copied for each.
pub type Name = std::rc::Rc<str>;

/// How long a slice lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dur {
    /// No time: a launch (a slice rather than an instant, for its flow arrow to bind to).
    Mark,
    /// Measured: ns.
    Ns(u64),
}

impl Dur {
    pub fn ns(self) -> u64 {
        match self {
            Dur::Mark => 0,
            Dur::Ns(n) => n,
        }
    }
}

/// What an instant belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Thread,
    Process,
}

/// One argument's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    Uint(u64),
    Int(i64),
    Bool(bool),
    Str(Name),
    /// An address or a handle: shown in hex, as the string `0x…`.
    Hex(u64),
    /// A CUDA grid or block.
    Dim3([u32; 3]),
    List(Vec<String>),
}

/// An event's arguments, in key order (the order both formats write them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args(Vec<(&'static str, Arg)>);

impl Args {
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &Arg)> {
        self.0.iter().map(|(k, v)| (*k, v))
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<const N: usize> From<[(&'static str, Arg); N]> for Args {
    fn from(a: [(&'static str, Arg); N]) -> Args {
        Args::from(Vec::from(a))
    }
}

impl From<Vec<(&'static str, Arg)>> for Args {
    fn from(mut v: Vec<(&'static str, Arg)>) -> Args {
        v.sort_unstable_by_key(|(k, _)| *k);
        Args(v)
    }
}

/// Where a trace's events go, in order: a writer of one format.
pub trait Sink {
    fn event(&mut self, e: TraceEvent) -> Result<(), TraceError>;
    fn finish(&mut self) -> Result<(), TraceError>;
}

/// Writes the Chrome trace of the capture at `path` to `out`.
pub fn chrome(
    path: &Path,
    out: &mut impl Write,
    from_s: Option<f64>,
    to_s: Option<f64>,
) -> Result<Summary, TraceError> {
    trace(path, &mut ChromeSink::new(out), from_s, to_s)
}

/// Sends the trace of the capture at `path` to `out`, event by event.
pub fn trace(
    path: &Path,
    out: &mut dyn Sink,
    from_s: Option<f64>,
    to_s: Option<f64>,
) -> Result<Summary, TraceError> {
    trace_of(path, out, from_s, to_s, None)
}

/// [`trace`] of only the processes `only` names (`export --pid`, `--rank`), when given.
pub fn trace_of(
    path: &Path,
    out: &mut dyn Sink,
    from_s: Option<f64>,
    to_s: Option<f64>,
    only: Option<&std::collections::HashSet<u32>>,
) -> Result<Summary, TraceError> {
    // Pass 1: the report (process names, jobs) and every kernel's name.
    let replay = store::replay(path)?;
    let mut cap = Capture::new(&replay, from_s, to_s);
    cap.only = only.cloned();
    let mut emit = Emit { out, events: 0 };
    processes(&cap, &mut emit)?;
    nvml(path, &cap, &mut emit)?;
    gpm(path, &cap, &mut emit)?;
    steps(path, &cap, &mut emit)?;
    let damage = calls::calls(path, &cap, &mut emit)?;
    emit.out.finish()?;
    let recovery_warning = damage
        .as_ref()
        .map(|d| format!("the capture is damaged ({d}); the trace stops there"));
    Ok(Summary {
        events: emit.events,
        processes: replay
            .report
            .processes
            .iter()
            .filter(|p| cap.keeps(p.tgid))
            .count(),
        damaged: damage.is_some(),
        warning: recovery_warning.or_else(|| replay.recovery.warning(&path.display().to_string())),
    })
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
/// The GPU's own tracks (CUPTI's measured activity, per device and CUPTI stream), above the
/// call streams' tracks.
const GPU_TID_BASE: u64 = STREAM_TID_BASE + (1 << 29);
/// The track of a process's steps.
const STEP_TID: u64 = STREAM_TID_BASE - 1;
/// The tracks of a process's NCCL communicators (their collectives and sends/receives), above
/// the GPU's tracks.
const NCCL_TID_BASE: u64 = GPU_TID_BASE + (1 << 28);

/// What the parts of a trace share: the replayed capture, its start, the window.
struct Capture<'a> {
    replay: &'a store::Replay,
    t0: u64,
    from_ns: Option<u64>,
    to_ns: Option<u64>,
    /// Processes per tgid in the capture.
    generations: HashMap<u32, u32>,
    /// Only these processes' events (`export --pid`, `--rank`); `None`: all.
    only: Option<std::collections::HashSet<u32>>,
}

impl<'a> Capture<'a> {
    fn new(replay: &'a store::Replay, from_s: Option<f64>, to_s: Option<f64>) -> Self {
        let t0 = replay.header.started_at_monotonic_ns;
        let mut generations: HashMap<u32, u32> = HashMap::new();
        for p in &replay.report.processes {
            *generations.entry(p.tgid).or_insert(0) += 1;
        }
        Capture {
            replay,
            t0,
            from_ns: from_s.map(|s| t0 + (s * 1e9) as u64),
            to_ns: to_s.map(|s| t0 + (s * 1e9) as u64),
            generations,
            only: None,
        }
    }

    /// Whether process `tgid`'s events are in the trace.
    fn keeps(&self, tgid: u32) -> bool {
        self.only.as_ref().is_none_or(|o| o.contains(&tgid))
    }

    /// The generation of the last process that had `tgid`.
    fn last(&self, tgid: u32) -> u32 {
        self.generations
            .get(&tgid)
            .map_or(0, |n| n.saturating_sub(1))
    }

    /// The track of the `generation`-th process that had `tgid`.
    fn pid(&self, tgid: u32, generation: u32) -> u64 {
        track_pid(tgid, generation, self.last(tgid))
    }

    /// Whether `ts_ns` (CLOCK_MONOTONIC) falls in the `--from/--to` window.
    fn in_window(&self, ts_ns: u64) -> bool {
        self.from_ns.is_none_or(|f| ts_ns >= f) && self.to_ns.is_none_or(|t| ts_ns < t)
    }

    /// `ts_ns` (CLOCK_MONOTONIC) as ns after the capture's start.
    fn rel(&self, ts_ns: u64) -> u64 {
        ts_ns.saturating_sub(self.t0)
    }
}

/// The sink, and how many events went to it.
struct Emit<'a> {
    out: &'a mut dyn Sink,
    events: u64,
}

impl Emit<'_> {
    fn send(&mut self, e: TraceEvent) -> Result<(), TraceError> {
        self.out.event(e)?;
        self.events += 1;
        Ok(())
    }
}

/// Names the tracks of the processes; track 0 holds the GPUs' counters.
fn processes(cap: &Capture, emit: &mut Emit) -> Result<(), TraceError> {
    let gpus = "GPUs (NVML)".to_owned();
    emit.send(TraceEvent::ProcessName { pid: 0, name: gpus })?;
    let mut seen: HashMap<u32, u32> = HashMap::new();
    for p in &cap.replay.report.processes {
        let g = seen.entry(p.tgid).or_insert(0);
        let pid = cap.pid(p.tgid, *g);
        *g += 1;
        if !cap.keeps(p.tgid) {
            continue;
        }
        let job = p
            .job
            .as_ref()
            .map(|j| format!(" [{}:{}]", j.kind, j.name.as_deref().unwrap_or(&j.id)))
            .unwrap_or_default();
        let ended = if p.exited { ", exited" } else { "" };
        let name = format!("{} (pid {}{ended}){job}", p.comm, p.tgid);
        emit.send(TraceEvent::ProcessName { pid, name })?;
    }
    Ok(())
}

/// NVML: a counter per device (utilisation) and per process (GPU memory it holds).
fn nvml(path: &Path, cap: &Capture, emit: &mut Emit) -> Result<(), TraceError> {
    for s in store::nvml_samples(path)? {
        if !cap.in_window(s.ts_ns) {
            continue;
        }
        let ts_ns = cap.rel(s.ts_ns);
        for d in &s.devices {
            emit.send(TraceEvent::Counter {
                pid: 0,
                ts_ns,
                name: format!("GPU {} utilisation % (NVML)", d.index),
                values: vec![
                    ("gpu", d.gpu_util.map(u64::from)),
                    ("memory", d.mem_util.map(u64::from)),
                ],
            })?;
        }
        for p in &s.processes {
            if let Some(b) = p.used_bytes
                && cap.generations.contains_key(&p.pid)
                && cap.keeps(p.pid)
            {
                let last = cap.last(p.pid);
                emit.send(TraceEvent::Counter {
                    pid: cap.pid(p.pid, last),
                    ts_ns,
                    name: "GPU memory held (NVML, bytes)".into(),
                    values: vec![("held", Some(b))],
                })?;
            }
        }
    }
    Ok(())
}

/// GPM: a counter per device of what it measured each round (percent, rounded; measured by
/// the device's counters, where the utilisation counter only says a kernel ran).
fn gpm(path: &Path, cap: &Capture, emit: &mut Emit) -> Result<(), TraceError> {
    use crate::nvml::gpm::State;
    let pct = |v: Option<f64>| v.map(|v| v.round().max(0.0) as u64);
    for g in store::gpm_samples(path)? {
        if !cap.in_window(g.ts_ns) {
            continue;
        }
        let ts_ns = cap.rel(g.ts_ns);
        for d in &g.devices {
            let State::Measured(f) = &d.state else {
                continue;
            };
            let mut values = vec![
                ("dram_bandwidth", pct(f.dram_bandwidth_pct)),
                ("fp16", pct(f.fp16_activity_pct)),
                ("fp32", pct(f.fp32_activity_pct)),
                ("fp64", pct(f.fp64_activity_pct)),
                ("sm_activity", pct(f.sm_activity_pct)),
                ("sm_occupancy", pct(f.sm_occupancy_pct)),
                ("tensor", pct(f.tensor_activity_pct)),
                ("tensor_hmma", pct(f.tensor_hmma_pct)),
            ];
            // A figure the device does not report is no series (not a series at zero).
            values.retain(|(_, v)| v.is_some());
            emit.send(TraceEvent::Counter {
                pid: 0,
                ts_ns,
                name: format!("GPU {} activity % (GPM, measured)", d.index),
                values,
            })?;
        }
    }
    Ok(())
}

/// Steps (two more passes, see `steps`): a span per step on a "steps" track, with the step's
/// figures (its derived GPU idle and measured GPU busy time where there are) as arguments.
fn steps(path: &Path, cap: &Capture, emit: &mut Emit) -> Result<(), TraceError> {
    for s in crate::analysis::steps::find(path, cap.t0)? {
        if !cap.keeps(s.tgid) {
            continue;
        }
        let pid = cap.pid(s.tgid, s.generation);
        let mut named = false;
        for (i, st) in s.steps.iter().enumerate() {
            if !cap.in_window(cap.t0 + st.start_ns) {
                continue;
            }
            if !named {
                named = true;
                let name = format!("steps (ends: {})", s.boundary);
                emit.send(TraceEvent::ThreadName {
                    pid,
                    tid: STEP_TID,
                    name,
                })?;
            }
            emit.send(TraceEvent::Slice {
                pid,
                tid: STEP_TID,
                ts_ns: st.start_ns,
                dur: Dur::Ns(st.wall_ns),
                cat: "step",
                name: format!("step {}", i + 1).into(),
                args: Args::from(
                    [
                        ("launches", Some(st.launches)),
                        ("blocked_ns", Some(st.blocked_ns)),
                        ("copy_bytes", Some(st.copy_bytes)),
                        ("first_enqueue_ns", Some(st.first_enqueue_ns)),
                        ("live_bytes", Some(st.live_bytes)),
                        // Derived (a lower bound) and measured (CUPTI), where there are.
                        ("derived_gpu_idle_ns", st.derived_gpu_idle_ns),
                        ("gpu_busy_ns", st.gpu_busy_ns),
                    ]
                    .into_iter()
                    .filter_map(|(k, v)| Some((k, Arg::Uint(v?))))
                    .chain([("regular", Arg::Bool(st.regular))])
                    .collect::<Vec<_>>(),
                ),
            })?;
        }
    }
    Ok(())
}

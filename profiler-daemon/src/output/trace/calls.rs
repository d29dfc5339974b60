//! The calls' pass of a trace: every record of the capture, in ring order, as events on its
//! thread's track and its stream's (launches with a flow arrow between the two), the
//! process's device memory as it changes, and the kernels, copies and memsets CUPTI measured
//! (the injection library's records) at their GPU times on one track per device and CUPTI
//! stream.

use super::{
    Arg, Args, Capture, Dur, Emit, GPU_TID_BASE, Name, STREAM_TID_BASE, Scope, TraceError,
    TraceEvent,
};
use crate::api::{ApiTable, Layer};
use crate::enrich::stacks::{StackKey, StackResolver};
use crate::model::direction_name as dir_name;
use crate::model::gpu_join::{Joiner, Tids};
use crate::model::mem::LiveMemory;
use crate::store;
use crate::sys::hash::{FastMap, FastSet};
use profiler_common::decode::Event;
use profiler_common::{CopyBody, LaunchBody, LaunchesBody, device, dir, flags};
use std::collections::{HashMap, HashSet};
use std::path::Path;

mod nccl;
use nccl::CommTrack;

/// Pass 2: every call, in ring order. Returns why the capture stopped early, if it did.
pub(super) fn calls(
    path: &Path,
    cap: &Capture,
    emit: &mut Emit,
) -> Result<Option<String>, TraceError> {
    let mut calls = Calls {
        cap,
        threads: Default::default(),
        streams: Default::default(),
        live: LiveMemory::default(),
        flow: 0,
        gpu_names: HashMap::new(),
        gpu_tracks: HashMap::new(),
        joins: Default::default(),
        flow_from: None,
        flows_in: HashSet::new(),
        claimed: Default::default(),
        launch_seq: Default::default(),
        comms: HashMap::new(),
        node_gpus: node_gpus(cap),
        names: Default::default(),
        apis: Vec::new(),
    };
    calls.claimed = claimed_launches(path, cap)?;
    let stopped = store::for_each_record_named(path, |api, g, ev, stacks| {
        calls.record(emit, api, g, ev, stacks)
    })
    .map_err(|e| match e {
        store::WalkError::Open(e) => TraceError::Read(e),
        store::WalkError::Stopped(e) => e,
    })?;
    calls.finish(emit)?;
    Ok(stopped)
}

/// `(process track, CUDA device)` → the node's GPU (NVML index) it is, where the process's
/// device row names one (`model::devices::name_node_gpus`).
fn node_gpus(cap: &Capture) -> HashMap<(u64, u32), u32> {
    let mut seen: HashMap<u32, u32> = HashMap::new();
    let mut out = HashMap::new();
    for p in &cap.replay.report.processes {
        let g = seen.entry(p.tgid).or_insert(0);
        let pid = cap.pid(p.tgid, *g);
        *g += 1;
        for d in &p.devices {
            if let (Some(dev), Some(n)) = (d.device, d.nvml_gpu) {
                out.insert((pid, dev), n);
            }
        }
    }
    out
}

/// A GPU track's name: `GPU d` (the process's CUDA device), and the node's GPU where it differs.
fn gpu_label(node_gpus: &HashMap<(u64, u32), u32>, pid: u64, device: u32) -> String {
    match node_gpus.get(&(pid, device)) {
        Some(&n) if n != device => format!("GPU {device} (node GPU {n})"),
        _ => format!("GPU {device}"),
    }
}

/// The thread map of process `tgid` (generation `g`) where its capture can join: its library
/// recorded launch calls and its thread ids are mapped.
fn joinable(cap: &Capture, tgid: u32, g: u32) -> Option<Tids> {
    let replay = cap.replay;
    let tids = replay.tids.get(&(tgid, g)).cloned().unwrap_or_default();
    let calls = replay
        .report
        .processes
        .iter()
        .any(|p| p.tgid == tgid && p.gpu_time.calls > 0);
    (calls && tids != Tids::Unknown).then_some(tids)
}

/// A first pass over the records: which launches (`(pid, n)`, the process's n-th launch record)
/// a launch call claims. Only those get an arrow, so that none leaves a launch and never
/// arrives. No pass where no process can join.
fn claimed_launches(path: &Path, cap: &Capture) -> Result<FastSet<(u64, u64)>, TraceError> {
    let mut claimed = FastSet::default();
    if !cap
        .replay
        .tids
        .keys()
        .any(|&(t, g)| joinable(cap, t, g).is_some())
    {
        return Ok(claimed);
    }
    let mut joins: HashMap<u64, Option<(Tids, Joiner<u64>)>> = HashMap::new();
    let mut seq: HashMap<u64, u64> = HashMap::new();
    store::for_each_record_named(path, |_, g, ev, _| {
        let h = *ev.header();
        let pid = cap.pid(h.tgid, g);
        let Some((tids, j)) = joins
            .entry(pid)
            .or_insert_with(|| joinable(cap, h.tgid, g).map(|t| (t, Joiner::default())))
        else {
            return Ok::<(), TraceError>(());
        };
        match ev {
            Event::Launch(..) | Event::Graph(..) => {
                let n = seq.entry(pid).or_insert(0);
                *n += 1;
                j.launch(h.tid, h.ts_ns, *n);
            }
            Event::GpuActivity(_, b) => {
                for a in b.in_use() {
                    j.record(a, tids, &mut |_, l| {
                        if let Some(&n) = l {
                            claimed.insert((pid, n));
                        }
                    });
                }
            }
            Event::GpuState(_, b) => j.state(b.state),
            _ => {}
        }
        Ok(())
    })
    .map_err(|e| match e {
        store::WalkError::Open(e) => TraceError::Read(e),
        store::WalkError::Stopped(e) => e,
    })?;
    Ok(claimed)
}

/// A launch as the timeline's join keeps it: its thread track and time, and the flow it
/// leaves by (`None` outside the window, or a graph launch: an instant, which no flow leaves).
type FlowFrom = Option<(u64, u64, u64)>;

/// One process's join of its kernel records to its launches (`model::gpu_join`), for the
/// flow arrows from each launch to its kernel's GPU slice.
struct ProcJoin {
    tids: Tids,
    join: Joiner<FlowFrom>,
}

/// One call: where it is on the trace, and who made it.
#[derive(Clone)]
struct Call {
    pid: u64,
    tid: u64,
    ts_ns: u64,
    api: Name,
    /// Its kernel names: `(tgid, generation)`, and whether the API is the runtime's.
    process: (u32, u32),
    runtime: bool,
}

impl Call {
    /// A timed call as a slice (return probe: its duration is measured), else an instant.
    fn timed(&self, cat: &'static str, name: Name, fl: u32, dur_ns: u64, args: Args) -> TraceEvent {
        if fl & flags::HAS_RETURN == 0 {
            return self.instant(Scope::Thread, cat, name, args);
        }
        TraceEvent::Slice {
            pid: self.pid,
            tid: self.tid,
            ts_ns: self.ts_ns,
            dur: Dur::Ns(dur_ns),
            cat,
            name,
            args,
        }
    }

    /// An instant on the call's thread (`Scope::Thread`) or process.
    fn instant(&self, scope: Scope, cat: &'static str, name: Name, args: Args) -> TraceEvent {
        TraceEvent::Instant {
            pid: self.pid,
            tid: self.tid,
            ts_ns: self.ts_ns,
            scope,
            cat,
            name,
            args,
        }
    }
}

/// The state of the calls' pass: the tracks named so far, live memory, the last flow.
struct Calls<'a> {
    cap: &'a Capture<'a>,
    threads: FastSet<(u64, u32)>,
    /// `(pid, device, stream)` → its track: one device's default stream is not another's, and
    /// a track's name says its GPU when known, so each GPU's streams read together.
    streams: FastMap<(u64, Option<u32>, u64), u64>,
    live: LiveMemory<u64>,
    flow: u64,
    /// The injection library's kernel names: `(pid, name id)` → mangled name.
    gpu_names: HashMap<(u64, u32), String>,
    /// `(pid, device, CUPTI stream)` → its measured track.
    gpu_tracks: HashMap<(u64, u32, u32), u64>,
    /// Per process whose capture can join (launch calls recorded, thread ids mapped); `None`
    /// for the others, whose GPU slices are written as they come.
    joins: FastMap<u64, Option<ProcJoin>>,
    /// The flow the launch being written leaves by.
    flow_from: FlowFrom,
    /// Flows that arrived (a graph launch's kernels share one: the first gets the arrow).
    flows_in: HashSet<u64>,
    /// The launches a launch call claims (`claimed_launches`), and each process's launch count.
    claimed: FastSet<(u64, u64)>,
    launch_seq: FastMap<u64, u64>,
    /// `(pid, communicator handle)` → what the report knows of it and its track.
    comms: HashMap<(u64, u64), CommTrack>,
    /// `(pid, CUDA device)` → the node's GPU, where known ([`node_gpus`]).
    node_gpus: HashMap<(u64, u32), u32>,
    /// Kernel names made so far, each shared by its launches' events: `(tgid, generation,
    /// function, runtime)` → name.
    names: FastMap<(u32, u32, u64, bool), Name>,
    /// API names by id, made once each.
    apis: Vec<Option<Name>>,
}

impl Calls<'_> {
    fn record(
        &mut self,
        emit: &mut Emit,
        api: &ApiTable,
        g: u32,
        ev: &Event,
        stacks: &StackResolver,
    ) -> Result<(), TraceError> {
        let h = *ev.header();
        if !self.cap.keeps(h.tgid) {
            return Ok(());
        }
        let pid = self.cap.pid(h.tgid, g);
        let ts_ns = self.cap.rel(h.ts_ns);
        let in_window = self.cap.in_window(h.ts_ns);
        // Live memory is followed over the whole capture, shown inside the window.
        if let Some(v) = self.live.on(pid, ev)
            && in_window
        {
            emit.send(TraceEvent::Counter {
                pid,
                ts_ns,
                name: "device memory (bytes)".into(),
                values: vec![("live", Some(v))],
            })?;
        }
        // Every launch, in the window or not, may be claimed by a launch call.
        if matches!(ev, Event::Launch(..) | Event::Graph(..))
            && self.join_of(pid, h.tgid, g).is_some()
        {
            let n = self.launch_seq.entry(pid).or_insert(0);
            *n += 1;
            let from = match ev {
                Event::Launch(..) if in_window && self.claimed.contains(&(pid, *n)) => {
                    self.flow += 1;
                    Some((u64::from(h.tid), ts_ns, self.flow))
                }
                _ => None,
            };
            if let Some(j) = self.join_of(pid, h.tgid, g) {
                j.join.launch(h.tid, h.ts_ns, from);
            }
            self.flow_from = from;
        }
        // GPU activity lies at its own (GPU) times, not at the hand-over's, and on no thread.
        match ev {
            Event::GpuName(_, n) => {
                let name = String::from_utf8_lossy(n.name_bytes()).into_owned();
                self.gpu_names.insert((pid, n.id), name);
                return Ok(());
            }
            Event::GpuActivity(_, b) => return self.gpu_activity(emit, pid, h.tgid, g, b),
            Event::GpuState(_, b) => {
                if let Some(j) = self.join_of(pid, h.tgid, g) {
                    j.join.state(b.state);
                }
            }
            _ => {}
        }
        if !in_window
            || matches!(
                ev,
                Event::Map(..)
                    | Event::Name(..)
                    | Event::Alias(..)
                    | Event::Window(..)
                    | Event::GpuState(..)
            )
        {
            return Ok(());
        }
        if self.threads.insert((pid, h.tid)) {
            let name = format!("thread {}", h.tid);
            let tid = u64::from(h.tid);
            emit.send(TraceEvent::ThreadName { pid, tid, name })?;
        }
        let call = Call {
            pid,
            tid: u64::from(h.tid),
            ts_ns,
            api: self.api_name(api, h.api),
            process: (h.tgid, g),
            runtime: api.get(h.api).is_some_and(|a| a.layer == Layer::Runtime),
        };
        let e = match ev {
            Event::Launch(_, l) => {
                self.launch(emit, &call, l)?;
                // The arrow to its kernel's GPU slice leaves here (if a launch call claims it:
                // a flow that never arrives is not drawn).
                let Some((tid, ts_ns, id)) = self.flow_from.take() else {
                    return Ok(());
                };
                return emit.send(TraceEvent::FlowStart {
                    id,
                    pid,
                    tid,
                    ts_ns,
                    cat: "gpu",
                    name: "gpu",
                });
            }
            Event::Copy(_, c) => return self.copy(emit, &call, c),
            Event::Sync(_, s) => {
                let args = Args::from([
                    ("handle", Arg::Hex(s.handle)),
                    ("ret", Arg::Int(i64::from(s.ret))),
                    ("gpu_side", Arg::Bool(s.flags & flags::GPU_SIDE != 0)),
                ]);
                call.timed("sync", call.api.clone(), s.flags, s.dur_ns, args)
            }
            Event::Mem(_, m) => {
                let args = Args::from([
                    ("bytes", Arg::Uint(m.bytes)),
                    ("ptr", Arg::Hex(m.ptr)),
                    ("ret", Arg::Int(i64::from(m.ret))),
                ]);
                call.timed("memory", call.api.clone(), m.flags, m.dur_ns, args)
            }
            Event::Graph(_, gr) => {
                let args = Args::from([
                    ("graph_exec", Arg::Hex(gr.graph_exec)),
                    ("stream", Arg::Hex(gr.stream)),
                ]);
                call.instant(Scope::Thread, "graph", call.api.clone(), args)
            }
            Event::Exit(..) => call.instant(
                Scope::Process,
                "process",
                "process exit".into(),
                Args::default(),
            ),
            Event::Exec(_, x) => {
                let len = x.comm.iter().position(|&b| b == 0).unwrap_or(x.comm.len());
                let comm = String::from_utf8_lossy(&x.comm[..len]);
                let args = Args::from([("comm", Arg::Str(comm.as_ref().into()))]);
                call.instant(Scope::Process, "process", "exec".into(), args)
            }
            Event::Stack(_, st) => {
                // The call just before on this thread, at this timestamp: its stack, as an
                // instant on the same track (outermost frame first).
                let of = match st.of_kind {
                    profiler_common::kind::LAUNCH => "launch",
                    profiler_common::kind::SYNC => "sync",
                    profiler_common::kind::COPY => "copy",
                    _ => "call",
                };
                let stack = stacks.labels(h.tgid, &StackKey::of(st));
                let args = Args::from([
                    ("stack", Arg::List(stack)),
                    ("period", Arg::Uint(u64::from(st.period))),
                ]);
                call.instant(Scope::Thread, "stack", format!("{of} stack").into(), args)
            }
            Event::Launches(_, l) => self.launches(&call, l),
            Event::Nccl(_, b) => return self.nccl(emit, &call, b),
            // The GPU's own activity is handled above.
            Event::Map(..)
            | Event::Name(..)
            | Event::Alias(..)
            | Event::Window(..)
            | Event::GpuActivity(..)
            | Event::GpuName(..)
            | Event::GpuState(..) => {
                return Ok(());
            }
        };
        emit.send(e)
    }

    /// The name of kernel `func` launched by `call`.
    fn kernel_name(&mut self, call: &Call, func: u64) -> Name {
        let (tgid, g) = call.process;
        let replay = self.cap.replay;
        self.names
            .entry((tgid, g, func, call.runtime))
            .or_insert_with(
                || match replay.kernel_names.get(&(tgid, g, func, call.runtime)) {
                    Some(n) => n.as_str().into(),
                    None => format!("<unknown 0x{func:x}>").into(),
                },
            )
            .clone()
    }

    /// The name of API `id`, made once.
    fn api_name(&mut self, api: &ApiTable, id: u32) -> Name {
        let i = id as usize;
        if self.apis.len() <= i {
            self.apis.resize(i + 1, None);
        }
        self.apis[i]
            .get_or_insert_with(|| api.name(id).into())
            .clone()
    }

    /// The track of `stream` on device `device` (`None`: unknown) in process track `pid`,
    /// named when it is new.
    fn stream(
        &mut self,
        emit: &mut Emit,
        pid: u64,
        device: Option<u32>,
        stream: u64,
    ) -> Result<u64, TraceError> {
        let n = self.streams.len() as u64;
        let mut new = false;
        let tid = *self
            .streams
            .entry((pid, device, stream))
            .or_insert_with(|| {
                new = true;
                STREAM_TID_BASE + n
            });
        if new {
            let name = if stream == 0 {
                "default stream".to_owned()
            } else {
                format!("stream 0x{stream:x}")
            };
            let name = match device {
                Some(d) => format!("{}: {name}", gpu_label(&self.node_gpus, pid, d)),
                None => name,
            };
            emit.send(TraceEvent::ThreadName { pid, tid, name })?;
        }
        Ok(tid)
    }

    /// The measured track of CUPTI stream `stream` on device `device` in process track `pid`,
    /// named when it is new (after the call streams' tracks, by their own numbering).
    fn gpu_track(
        &mut self,
        emit: &mut Emit,
        pid: u64,
        device: u32,
        stream: u32,
    ) -> Result<u64, TraceError> {
        let n = self.gpu_tracks.len() as u64;
        let mut new = false;
        let tid = *self
            .gpu_tracks
            .entry((pid, device, stream))
            .or_insert_with(|| {
                new = true;
                GPU_TID_BASE + n
            });
        if new {
            let name = format!(
                "{}: CUPTI stream {stream} (measured)",
                gpu_label(&self.node_gpus, pid, device)
            );
            emit.send(TraceEvent::ThreadName { pid, tid, name })?;
        }
        Ok(tid)
    }

    /// The join of process `pid` (`tgid`, generation `g`), where its capture can join: its
    /// thread ids are mapped and its library recorded launch calls.
    fn join_of(&mut self, pid: u64, tgid: u32, g: u32) -> Option<&mut ProcJoin> {
        let cap = self.cap;
        self.joins
            .entry(pid)
            .or_insert_with(|| {
                joinable(cap, tgid, g).map(|tids| ProcJoin {
                    tids,
                    join: Joiner::default(),
                })
            })
            .as_mut()
    }

    /// A batch of CUPTI records: each kernel, copy and memset as a slice at its GPU start,
    /// as long as it ran, on its device and stream's track (those that start in the window).
    /// Where the process joins, a kernel is written once its launch call is known, with the
    /// arrow from its launch.
    fn gpu_activity(
        &mut self,
        emit: &mut Emit,
        pid: u64,
        tgid: u32,
        g: u32,
        b: &profiler_common::gpu::GpuActivityBody,
    ) -> Result<(), TraceError> {
        use profiler_common::gpu::activity;
        let mut ready: Vec<(profiler_common::gpu::GpuActivity, FlowFrom)> = Vec::new();
        for a in b.in_use() {
            match (a.kind, self.join_of(pid, tgid, g)) {
                (activity::KERNEL | activity::API, Some(j)) => {
                    j.join.record(a, &j.tids, &mut |k, l| {
                        ready.push((*k, l.copied().flatten()));
                    });
                }
                _ => ready.push((*a, None)),
            }
        }
        for (a, from) in ready {
            self.gpu_slice(emit, pid, &a, from)?;
        }
        Ok(())
    }

    /// The kernels still waiting for their launch calls at the end, without arrows.
    fn finish(&mut self, emit: &mut Emit) -> Result<(), TraceError> {
        let mut left = Vec::new();
        for (&pid, j) in self.joins.iter_mut() {
            if let Some(j) = j {
                j.join.finish(&mut |k, _| left.push((pid, *k)));
            }
        }
        left.sort_by_key(|(pid, a)| (*pid, a.start_ns));
        for (pid, a) in left {
            self.gpu_slice(emit, pid, &a, None)?;
        }
        Ok(())
    }

    /// One kernel, copy or memset at its GPU time, and the arrow from its launch (`from`).
    fn gpu_slice(
        &mut self,
        emit: &mut Emit,
        pid: u64,
        a: &profiler_common::gpu::GpuActivity,
        from: FlowFrom,
    ) -> Result<(), TraceError> {
        use crate::model::kernel_time::copy_kind_name;
        use profiler_common::gpu::activity;
        let Some(dur) = a.end_ns.checked_sub(a.start_ns) else {
            return Ok(());
        };
        if !self.cap.in_window(a.start_ns) {
            return Ok(());
        }
        let (cat, name) = match a.kind {
            activity::KERNEL => {
                let name = self
                    .gpu_names
                    .get(&(pid, a.name))
                    .map(|m| crate::enrich::names::demangle(m))
                    .unwrap_or_else(|| format!("<kernel id {}>", a.name));
                ("gpu kernel", name)
            }
            activity::MEMCPY => ("gpu copy", format!("copy {}", copy_kind_name(a.copy_kind))),
            activity::MEMSET => ("gpu memset", "memset".to_owned()),
            _ => return Ok(()),
        };
        let args = Args::from([
            ("bytes", Arg::Uint(a.bytes)),
            ("correlation", Arg::Uint(u64::from(a.correlation))),
        ]);
        let tid = self.gpu_track(emit, pid, a.device, a.stream)?;
        let ts_ns = self.cap.rel(a.start_ns);
        emit.send(TraceEvent::Slice {
            pid,
            tid,
            ts_ns,
            dur: Dur::Ns(dur),
            cat,
            name: name.into(),
            args,
        })?;
        match from {
            Some((_, _, id)) if self.flows_in.insert(id) => emit.send(TraceEvent::FlowEnd {
                id,
                pid,
                tid,
                ts_ns,
                cat: "gpu",
                name: "gpu",
            }),
            _ => Ok(()),
        }
    }

    /// A launch on its thread (with its arguments) and, by name alone, on its stream's track at
    /// the same moment (the thread's event says which stream; an arrow between two events at
    /// one time would add bytes and no information).
    fn launch(&mut self, emit: &mut Emit, call: &Call, l: &LaunchBody) -> Result<(), TraceError> {
        let name = self.kernel_name(call, l.func);
        let args = Args::from([
            ("api", Arg::Str(call.api.clone())),
            ("grid", Arg::Dim3(l.grid)),
            ("block", Arg::Dim3(l.block)),
            ("shared_bytes", Arg::Uint(u64::from(l.shared_bytes))),
            ("stream", Arg::Hex(l.stream)),
        ]);
        let (pid, ts_ns) = (call.pid, call.ts_ns);
        let slice = |tid, name, args| TraceEvent::Slice {
            pid,
            tid,
            ts_ns,
            dur: Dur::Mark,
            cat: "launch",
            name,
            args,
        };
        emit.send(slice(call.tid, name.clone(), args))?;
        let stream_tid = self.stream(emit, pid, device::of(l.flags), l.stream)?;
        emit.send(slice(stream_tid, name, Args::default()))
    }

    /// A copy on its thread (timed or not, with its arguments) and, as an instant named alone,
    /// on its stream's track. A memset is named by its API alone (`cudaMemset`), its direction
    /// being its name.
    fn copy(&mut self, emit: &mut Emit, call: &Call, c: &CopyBody) -> Result<(), TraceError> {
        let name: Name = if c.direction == dir::MEMSET {
            call.api.clone()
        } else {
            format!("{} {}", call.api, dir_name(c.direction)).into()
        };
        let args = Args::from([
            ("bytes", Arg::Uint(c.bytes)),
            ("direction", Arg::Str(dir_name(c.direction).into())),
            ("async", Arg::Bool(c.flags & flags::ASYNC != 0)),
            ("stream", Arg::Hex(c.stream)),
            ("ret", Arg::Int(i64::from(c.ret))),
        ]);
        emit.send(call.timed("copy", name.clone(), c.flags, c.dur_ns, args))?;
        let tid = self.stream(emit, call.pid, device::of(c.flags), c.stream)?;
        emit.send(TraceEvent::Instant {
            pid: call.pid,
            tid,
            ts_ns: call.ts_ns,
            scope: Scope::Thread,
            cat: "copy",
            name,
            args: Args::default(),
        })
    }

    /// Launches counted in the kernel (capture files are written in full mode, so only a
    /// hand-made file has these): one instant for the lot, no per-launch slices.
    fn launches(&mut self, call: &Call, l: &LaunchesBody) -> TraceEvent {
        let args = Args::from([
            ("api", Arg::Str(call.api.clone())),
            ("launches", Arg::Uint(l.count)),
            ("grid", Arg::Dim3(l.grid)),
            ("block", Arg::Dim3(l.block)),
            ("shared_bytes", Arg::Uint(u64::from(l.shared_bytes))),
            ("stream", Arg::Hex(l.stream)),
        ]);
        let name = self.kernel_name(call, l.func);
        call.instant(Scope::Thread, "launch", name, args)
    }
}

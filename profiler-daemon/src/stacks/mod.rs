//! Call stacks of launches, blocking syncs and blocking copies: the code and callers views.
//!
//! The probes take a stack on every Nth such call of each thread ([`STACK_CONFIG`] period) —
//! native return addresses from the kernel's frame-pointer walk, and for CPython processes the
//! interpreter's frames (code object, instruction). Here they are named: native addresses
//! through the ELF symbol tables of the files the process maps, Python frames by reading the
//! code object from the process (file, function, line table). Names are looked up when the
//! stack arrives, while the process and its files are there, and cached: Python code objects
//! at once, native frames on a thread of their own (a large library's symbol tables take a
//! while to read), from the mappings remembered at the process's first sight. With a capture
//! file every new name is written to it ([`StackSym`]), Python names before the stack that
//! needs them, native ones as they are found and all of them before the process is retired
//! and before the file ends, so a replay names the same stacks without the processes.
//!
//! [`STACK_CONFIG`]: profiler_common::maps::STACK_CONFIG

pub mod lines;
pub mod python;

use crate::enrich::names::demangle_symbol;
use crate::enrich::process::ProcSymbols;
use profiler_common::{StackBody, kind, stackflags};
use python::PyCode;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// A native frame, named.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NativeFrame {
    /// The mapped file's name (no directory).
    pub module: String,
    /// Demangled function name, when the file's symbol tables have one.
    pub symbol: Option<String>,
    /// Where in the file the address lies (the name of a frame without a symbol, for
    /// `addr2line -e FILE` on a copy of the file that has symbols).
    #[serde(default)]
    pub offset: u64,
    /// From DWARF, when the file has it: the functions at the address, innermost (inlined)
    /// first, the real function last, each with its file and line.
    #[serde(default)]
    pub source: Vec<lines::SourceFrame>,
}

impl NativeFrame {
    /// The frame's labels, outermost first: `file:line function (library)` per function at the
    /// address when DWARF knows it (inlined functions get frames of their own), else
    /// `function (library)`.
    fn labels(&self) -> Vec<String> {
        if self.source.is_empty() {
            return vec![match &self.symbol {
                Some(s) => format!("{s} ({})", self.module),
                None => format!("{}+0x{:x}", self.module, self.offset),
            }];
        }
        let last = self.source.len() - 1;
        self.source
            .iter()
            .enumerate()
            .rev()
            .map(|(i, f)| {
                let name = match (&f.function, i == last) {
                    (Some(n), _) => demangle_symbol(n),
                    (None, true) => self
                        .symbol
                        .clone()
                        .unwrap_or_else(|| format!("{}+0x{:x}", self.module, self.offset)),
                    (None, false) => "??".into(),
                };
                match (&f.file, f.line) {
                    (Some(file), Some(line)) => format!("{file}:{line} {name} ({})", self.module),
                    _ => format!("{name} ({})", self.module),
                }
            })
            .collect()
    }
}

/// A name learned while capturing, kept in the capture file for a replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StackSym {
    /// `addr` (a return address) in `tgid`: `None` when no executable mapping holds it.
    Native {
        tgid: u32,
        addr: u64,
        frame: Option<NativeFrame>,
    },
    /// The code object at `code` in `tgid`.
    PyCode {
        tgid: u32,
        code: u64,
        info: Option<PyCode>,
    },
    /// `tgid` runs CPython 3.`minor` from `module` (`frames`: whether its frames are read).
    Python {
        tgid: u32,
        module: String,
        minor: u8,
        frames: bool,
    },
}

impl StackSym {
    /// The process the name is of.
    pub fn tgid(&self) -> u32 {
        match self {
            StackSym::Native { tgid, .. }
            | StackSym::PyCode { tgid, .. }
            | StackSym::Python { tgid, .. } => *tgid,
        }
    }
}

/// What is known of a process's interpreter.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Interp {
    module: String,
    minor: u8,
    layout: Option<&'static python::PyLayout>,
}

/// Most names cached (native addresses and code objects, all processes); past it, names are
/// still looked up but no longer kept.
const MAX_CACHED: usize = 1 << 20;

/// Reads of one code object before its frames stay unnamed. A read can fail while the process
/// runs (on an H200 node four code objects of a live PyTorch process failed at first sight,
/// which left every forward() frame unnamed); the next stack through it tries again.
const PY_READ_TRIES: u8 = 4;

/// Names the frames of stacks: live (from the processes) or from a capture file's records.
pub struct StackResolver {
    live: Option<Arc<ProcSymbols>>,
    native: HashMap<(u32, u64), Option<Arc<NativeFrame>>>,
    py: HashMap<(u32, u64), Option<Arc<PyCode>>>,
    /// Code objects whose read failed, with the attempts so far (see [`PY_READ_TRIES`]).
    py_failed: HashMap<(u32, u64), u8>,
    interp: HashMap<u32, Option<Interp>>,
    /// Names looked up since the last [`Self::take_log`] (for the capture file).
    log: Vec<StackSym>,
    /// Live: the thread that names native frames.
    namer: Option<Namer>,
    /// Native addresses handed to the namer and not yet named.
    requested: std::collections::HashSet<(u32, u64)>,
}

/// Native frames are named on a thread of their own: the first frame in a large library waits
/// for the file's symbol tables to be read (a fifth of a second for each of PyTorch's largest,
/// on a cold page cache more), and the records behind the stack (among them other stacks,
/// whose Python code objects must be read while their process lives) do not wait with it.
struct Namer {
    jobs: std::sync::mpsc::Sender<NamerJob>,
    named: std::sync::mpsc::Receiver<Walked>,
}

/// A [`NamerJob::Walk`] answered: the addresses named, in order, and those past the end of
/// the walk (left unnamed).
struct Walked {
    tgid: u32,
    named: Vec<(u64, Option<NativeFrame>)>,
    past_end: Vec<u64>,
}

enum NamerJob {
    /// Name these return addresses of a process, in order, up to the first no file maps.
    Walk(u32, Vec<u64>),
    /// Answer once every job before this one has been answered.
    Flush(std::sync::mpsc::SyncSender<()>),
    /// Tests: wait for a word before the next job (a namer slow to read a file).
    #[cfg(test)]
    Hold(std::sync::mpsc::Receiver<()>),
}

impl Namer {
    fn spawn(symbols: Arc<ProcSymbols>) -> Option<Namer> {
        let (jobs, todo) = std::sync::mpsc::channel::<NamerJob>();
        let (done, named) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("gpuprofd-names".into())
            .spawn(move || {
                while let Ok(job) = todo.recv() {
                    match job {
                        NamerJob::Walk(tgid, addrs) => {
                            if done.send(walk(&symbols, tgid, addrs)).is_err() {
                                return;
                            }
                        }
                        NamerJob::Flush(ack) => {
                            let _ = ack.send(());
                        }
                        #[cfg(test)]
                        NamerJob::Hold(until) => {
                            let _ = until.recv();
                        }
                    }
                }
            })
            .map_err(|e| tracing::warn!("cannot start the native frame namer: {e}"))
            .ok()?;
        Some(Namer { jobs, named })
    }
}

/// Names return addresses of `tgid`, in order, up to the first no file maps.
fn walk(symbols: &ProcSymbols, tgid: u32, mut addrs: Vec<u64>) -> Walked {
    let mut named = Vec::with_capacity(addrs.len());
    let mut past_end = Vec::new();
    for (i, &a) in addrs.iter().enumerate() {
        let frame = native_frame(symbols, tgid, a);
        let end = frame.is_none();
        named.push((a, frame));
        if end {
            // The walk ends there (see `labels`).
            past_end = addrs.split_off(i + 1);
            break;
        }
    }
    Walked {
        tgid,
        named,
        past_end,
    }
}

/// Names a return address of `tgid` (the call instruction is just before it).
fn native_frame(symbols: &ProcSymbols, tgid: u32, addr: u64) -> Option<NativeFrame> {
    symbols
        .frame_at(tgid, addr.saturating_sub(1))
        .map(|f| NativeFrame {
            module: f.module,
            symbol: f.symbol.map(|s| demangle_symbol(&s)),
            offset: f.file_offset,
            source: f.source,
        })
}

impl StackResolver {
    /// Names from the running processes (what is looked up is kept for [`Self::take_log`]).
    pub fn live(symbols: Arc<ProcSymbols>) -> Self {
        Self {
            namer: Namer::spawn(symbols.clone()),
            live: Some(symbols),
            ..Self::replay()
        }
    }

    /// Names only from what a capture file recorded ([`Self::learn`]).
    pub fn replay() -> Self {
        Self {
            live: None,
            native: HashMap::new(),
            py: HashMap::new(),
            py_failed: HashMap::new(),
            interp: HashMap::new(),
            log: Vec::new(),
            namer: None,
            requested: Default::default(),
        }
    }

    /// Names a capture file recorded.
    pub fn learn(&mut self, syms: Vec<StackSym>) {
        for s in syms {
            match s {
                StackSym::Native { tgid, addr, frame } => {
                    self.native.insert((tgid, addr), frame.map(Arc::new));
                }
                StackSym::PyCode { tgid, code, info } => {
                    self.py.insert((tgid, code), info.map(Arc::new));
                }
                StackSym::Python {
                    tgid,
                    module,
                    minor,
                    frames,
                } => {
                    self.interp.insert(
                        tgid,
                        Some(Interp {
                            module,
                            minor,
                            layout: if frames { python::layout(minor) } else { None },
                        }),
                    );
                }
            }
        }
    }

    /// What was learned since the last call (for the capture file).
    pub fn take_log(&mut self) -> Vec<StackSym> {
        std::mem::take(&mut self.log)
    }

    /// Forgets a process's names (its tgid now belongs to another process). Its frames still
    /// being named are waited for first: their names would otherwise arrive after this, as the
    /// names of the next process given the tgid. (The session settles them before it retires
    /// a process, so that a capture file has them before the process's end.)
    pub fn forget(&mut self, tgid: u32) {
        if self.naming(tgid) {
            self.settle();
        }
        self.native.retain(|k, _| k.0 != tgid);
        self.py.retain(|k, _| k.0 != tgid);
        self.py_failed.retain(|k, _| k.0 != tgid);
        self.interp.remove(&tgid);
    }

    fn room(&self) -> bool {
        self.native.len() + self.py.len() < MAX_CACHED
    }

    /// Takes in the native frames the namer has named so far (they join [`Self::take_log`]).
    pub fn poll(&mut self) {
        let Some(n) = &self.namer else {
            return;
        };
        let walks: Vec<Walked> = n.named.try_iter().collect();
        for w in walks {
            self.take_walk(w);
        }
    }

    fn take_walk(&mut self, w: Walked) {
        let tgid = w.tgid;
        for a in w.past_end {
            self.requested.remove(&(tgid, a));
        }
        for (addr, frame) in w.named {
            self.requested.remove(&(tgid, addr));
            self.log.push(StackSym::Native {
                tgid,
                addr,
                frame: frame.clone(),
            });
            if self.room() {
                self.native.insert((tgid, addr), frame.map(Arc::new));
            }
        }
    }

    /// Waits until every native frame asked for so far is named and takes the names in: before
    /// a report, the end of a capture, or forgetting a process.
    pub fn settle(&mut self) {
        if let Some(n) = &self.namer {
            if self.requested.is_empty() {
                return self.poll();
            }
            let (ack, answer) = std::sync::mpsc::sync_channel(1);
            if n.jobs.send(NamerJob::Flush(ack)).is_ok() {
                let _ = answer.recv();
            }
        }
        self.poll();
    }

    /// Whether native frames of `tgid` are still being named.
    pub fn naming(&self, tgid: u32) -> bool {
        self.requested.iter().any(|k| k.0 == tgid)
    }

    /// Hands the native frames of a stack not named yet to the namer, from the first one the
    /// cache lacks (the walk ends at an address no file maps: see `labels`).
    fn request_native(&mut self, tgid: u32, frames: &[u64]) {
        let mut first = None;
        for (i, &a) in frames.iter().enumerate() {
            match self.native.get(&(tgid, a)) {
                Some(Some(_)) => continue,
                Some(None) => return,
                None if self.requested.contains(&(tgid, a)) => continue,
                None => {
                    first = Some(i);
                    break;
                }
            }
        }
        // Past the cache's bound names are no longer kept: none is asked for.
        let Some(i) = first.filter(|_| self.room()) else {
            return;
        };
        let rest: Vec<u64> = frames[i..]
            .iter()
            .copied()
            .filter(|&b| {
                !self.native.contains_key(&(tgid, b)) && !self.requested.contains(&(tgid, b))
            })
            .collect();
        match (&self.namer, &self.live) {
            (Some(n), _) => {
                if n.jobs.send(NamerJob::Walk(tgid, rest.clone())).is_ok() {
                    self.requested.extend(rest.into_iter().map(|b| (tgid, b)));
                }
            }
            // Live without a namer (its thread could not start): named here, in turn.
            (None, Some(symbols)) => {
                let w = walk(symbols, tgid, rest);
                self.take_walk(w);
            }
            (None, None) => {}
        }
    }

    fn interp(&mut self, tgid: u32) -> Option<Interp> {
        if let Some(i) = self.interp.get(&tgid) {
            return i.clone();
        }
        self.live.as_ref()?;
        let found = python::detect(tgid).map(|p| Interp {
            module: p.module,
            minor: p.minor,
            layout: p.layout,
        });
        if let Some(i) = &found {
            self.log.push(StackSym::Python {
                tgid,
                module: i.module.clone(),
                minor: i.minor,
                frames: i.layout.is_some(),
            });
        }
        self.interp.insert(tgid, found.clone());
        found
    }

    fn py(&mut self, tgid: u32, code: u64) -> Option<Arc<PyCode>> {
        let key = (tgid, code);
        match self.py.get(&key) {
            Some(Some(c)) => return Some(c.clone()),
            // Replay, or a code object given up on: unnamed.
            Some(None) if self.py_failed.get(&key).is_none_or(|&n| n >= PY_READ_TRIES) => {
                return None;
            }
            _ => {}
        }
        self.live.as_ref()?;
        let layout = self.interp(tgid)?.layout?;
        let info = match python::read_code(tgid, layout, code) {
            Ok(c) => {
                self.py_failed.remove(&key);
                Some(c)
            }
            Err(why) => {
                let n = self.py_failed.entry(key).or_insert(0);
                *n += 1;
                tracing::debug!(tgid, attempt = *n, %why, "cannot read a Python code object");
                None
            }
        };
        self.log.push(StackSym::PyCode {
            tgid,
            code,
            info: info.clone(),
        });
        let info = info.map(Arc::new);
        if self.room() || self.py.contains_key(&key) {
            self.py.insert(key, info.clone());
        }
        info
    }

    /// Looks up the names `st` needs while its process is there: Python code objects now, from
    /// the process's memory; native frames on the namer's thread, from the files the process
    /// mapped (remembered at its first sight), taken in by [`Self::poll`]. With both read here,
    /// in turn, a short PyTorch run on an H200 ended while the first stack's native frames were
    /// named (its libraries' symbol tables read), and none of its Python frames was named.
    pub fn prepare(&mut self, tgid: u32, st: &StackBody) {
        if st.py_len > 0 || st.flags & (stackflags::PY_NO_THREAD | stackflags::PY_FAULT) != 0 {
            self.interp(tgid);
        }
        for f in st.py_frames() {
            if f.instr != 0 && f.code != 0 {
                self.py(tgid, f.code);
            }
        }
        self.request_native(tgid, st.native_frames());
        self.poll();
    }

    /// The stack's frames, named, outermost first, from the names looked up by
    /// [`Self::prepare`]. With Python frames, the interpreter's own native frames are replaced
    /// by them: the Python frames, then the native frames called from Python (an extension,
    /// ctypes, …) down to the probed call.
    pub fn labels(&self, tgid: u32, key: &StackKey) -> Vec<String> {
        let mut inner: Vec<String> = Vec::new();
        let interp_module = if key.py.is_empty() {
            None
        } else {
            self.interp
                .get(&tgid)
                .and_then(|i| i.as_ref())
                .map(|i| base(&i.module).to_owned())
        };
        for (i, &a) in key.native.iter().enumerate() {
            match self.native.get(&(tgid, a)).and_then(|f| f.as_ref()) {
                Some(f) => {
                    if interp_module.as_deref() == Some(f.module.as_str()) {
                        break;
                    }
                    // `inner` runs innermost first.
                    inner.extend(f.labels().into_iter().rev());
                }
                // Past the first frame, an address no file maps ends the walk: without frame
                // pointers what follows is not a stack.
                None if i == 0 => inner.push(format!("0x{a:x}")),
                None => break,
            }
        }
        let minor = self
            .interp
            .get(&tgid)
            .and_then(|i| i.as_ref())
            .map_or(11, |i| i.minor);
        let mut out: Vec<String> = key
            .py
            .iter()
            .rev()
            .map(
                |&(code, instr)| match self.py.get(&(tgid, code)).and_then(|c| c.as_ref()) {
                    Some(c) => match c.line_at(minor, code, instr) {
                        Some(l) => format!("{}:{l} {}", c.filename, c.qualname),
                        None => format!("{} {}", c.filename, c.qualname),
                    },
                    None => format!("<python code 0x{code:x}>"),
                },
            )
            .collect();
        out.extend(inner.into_iter().rev());
        out
    }

    /// The module of the stack's innermost native frame outside the CUDA libraries: the library
    /// that made the call (`libtorch_cuda.so`, `libcublasLt.so.12`, …).
    pub fn caller_module(&self, tgid: u32, key: &StackKey) -> String {
        for &a in key.native.iter() {
            match self.native.get(&(tgid, a)).and_then(|f| f.as_ref()) {
                Some(f) if is_cuda_module(&f.module) => continue,
                Some(f) => return f.module.clone(),
                None => return "[unknown]".into(),
            }
        }
        "[unknown]".into()
    }

    /// The interpreter `tgid` runs, as the report says it (`None`: not Python, or not seen).
    pub fn python_of(&self, tgid: u32) -> Option<String> {
        let i = self.interp.get(&tgid)?.as_ref()?;
        Some(if i.layout.is_some() {
            format!("CPython 3.{} ({})", i.minor, i.module)
        } else {
            format!(
                "CPython 3.{} ({}): Python frames not read (supported: 3.9 to 3.13; 3.9 and 3.10 need the kernel's BTF)",
                i.minor, i.module
            )
        })
    }
}

/// The CUDA runtime and driver themselves (never "the caller").
fn is_cuda_module(module: &str) -> bool {
    module.starts_with("libcudart.so") || module.starts_with("libcuda.so")
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl StackKey {
    /// The key of a stack record (shim frames left out).
    pub fn of(st: &StackBody) -> StackKey {
        let mut native = st.native_frames();
        // At an entry probe the record's first frame is the caller, read off the stack; kernels
        // from 6.13 on add that same caller to their walk themselves (the walk's first entry,
        // the probed function, was replaced by it): one copy is kept.
        if st.flags & stackflags::AT_ENTRY != 0 && native.len() >= 2 && native[0] == native[1] {
            native = &native[1..];
        }
        StackKey {
            native: native.into(),
            py: st
                .py_frames()
                .iter()
                .filter(|f| f.instr != 0 && f.code != 0)
                .map(|f| (f.code, f.instr))
                .collect(),
        }
    }
}

/// One distinct stack of a process, as taken (before naming).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub native: Box<[u64]>,
    /// `(code object, instruction)` per Python frame, innermost first.
    pub py: Box<[(u64, u64)]>,
}

/// What was sampled on one stack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackStat {
    pub samples: u64,
    /// Estimated calls: each sample stands for `period` calls.
    pub calls: u64,
    pub launches: u64,
    pub syncs: u64,
    pub copies: u64,
    /// Estimated CPU time blocked (sampled duration × period).
    pub blocked_ns: u64,
    /// Launched function handle and API → estimated launches.
    pub funcs: HashMap<(u32, u64), u64>,
}

/// A native stack naming fewer frames than this is "shallow" (see `StackSummary::shallow`).
pub const SHALLOW_FRAMES: usize = 3;

/// Distinct stacks kept per process; samples on further stacks are counted in
/// [`ProcStacks::dropped`].
pub const MAX_STACKS_PER_PROCESS: usize = 4096;

/// A process's sampled stacks.
#[derive(Clone, Debug, Default)]
pub struct ProcStacks {
    pub by_stack: HashMap<StackKey, StackStat>,
    pub samples: u64,
    /// Samples on stacks beyond [`MAX_STACKS_PER_PROCESS`].
    pub dropped: u64,
    /// Samples whose native walk was cut at [`profiler_common::STACK_NATIVE_MAX`] frames.
    pub truncated: u64,
    /// Samples of a Python process taken on a thread without a Python thread state.
    pub py_no_thread: u64,
    /// Samples whose Python frames could not all be read.
    pub py_fault: u64,
}

impl ProcStacks {
    pub fn apply(&mut self, api: u32, st: &StackBody) {
        let period = u64::from(st.period.max(1));
        self.samples += 1;
        if st.flags & (stackflags::NATIVE_TRUNCATED | stackflags::PY_TRUNCATED) != 0 {
            self.truncated += 1;
        }
        if st.flags & stackflags::PY_NO_THREAD != 0 {
            self.py_no_thread += 1;
        }
        if st.flags & stackflags::PY_FAULT != 0 {
            self.py_fault += 1;
        }
        let key = StackKey::of(st);
        let full = self.by_stack.len() >= MAX_STACKS_PER_PROCESS;
        let s = match self.by_stack.get_mut(&key) {
            Some(s) => s,
            None if full => {
                self.dropped += 1;
                return;
            }
            None => self.by_stack.entry(key).or_default(),
        };
        s.samples += 1;
        s.calls += period;
        match st.of_kind {
            kind::LAUNCH => {
                s.launches += period;
                *s.funcs.entry((api, st.handle)).or_default() += period;
            }
            kind::SYNC => {
                s.syncs += period;
                s.blocked_ns += st.dur_ns.saturating_mul(period);
            }
            kind::COPY => {
                s.copies += period;
                s.blocked_ns += st.dur_ns.saturating_mul(period);
            }
            _ => {}
        }
    }
}

impl StackResolver {
    /// The code rows of a process: stacks named and merged where they name alike, most calls
    /// first. `kernel` names a launched function (API id, handle).
    pub fn code_report(
        &self,
        tgid: u32,
        ps: &ProcStacks,
        kernel: &mut dyn FnMut(u32, u64) -> String,
    ) -> (
        Vec<crate::model::snapshot::CodeReport>,
        crate::model::snapshot::StackSummary,
    ) {
        use crate::model::snapshot::{CodeKernel, CodeReport};
        let mut rows: HashMap<Vec<String>, (CodeReport, HashMap<String, u64>)> = HashMap::new();
        let mut shallow = 0;
        for (key, s) in &ps.by_stack {
            let stack = self.labels(tgid, key);
            if key.py.is_empty() && stack.len() < SHALLOW_FRAMES {
                shallow += s.samples;
            }
            let caller = self.caller_module(tgid, key);
            let (r, k) = rows.entry(stack.clone()).or_insert_with(|| {
                (
                    CodeReport {
                        stack,
                        caller,
                        ..Default::default()
                    },
                    HashMap::new(),
                )
            });
            r.samples += s.samples;
            r.calls += s.calls;
            r.launches += s.launches;
            r.syncs += s.syncs;
            r.copies += s.copies;
            r.blocked_ns += s.blocked_ns;
            for (&(api, func), &n) in &s.funcs {
                *k.entry(kernel(api, func)).or_default() += n;
            }
        }
        let mut out: Vec<CodeReport> = rows
            .into_values()
            .map(|(mut r, k)| {
                let mut ks: Vec<CodeKernel> = k
                    .into_iter()
                    .map(|(name, launches)| CodeKernel { name, launches })
                    .collect();
                ks.sort_by(|a, b| b.launches.cmp(&a.launches).then(a.name.cmp(&b.name)));
                r.kernels = ks;
                r
            })
            .collect();
        out.sort_by(|a, b| {
            b.calls
                .cmp(&a.calls)
                .then(b.blocked_ns.cmp(&a.blocked_ns))
                .then_with(|| a.stack.cmp(&b.stack))
        });
        let summary = crate::model::snapshot::StackSummary {
            samples: ps.samples,
            dropped: ps.dropped,
            truncated: ps.truncated,
            python: self.python_of(tgid),
            python_no_thread: ps.py_no_thread,
            python_fault: ps.py_fault,
            shallow,
        };
        (out, summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_common::PyFrameRaw;

    fn stack(native: &[u64], py: &[(u64, u64)], of_kind: u32, period: u32) -> StackBody {
        let mut st = StackBody {
            of_kind,
            period,
            handle: 0x77,
            dur_ns: 1_000,
            native_len: native.len() as u32,
            py_len: py.len() as u32,
            flags: stackflags::AT_ENTRY,
            ..StackBody::default()
        };
        st.native[..native.len()].copy_from_slice(native);
        for (i, &(code, instr)) in py.iter().enumerate() {
            st.py[i] = PyFrameRaw { code, instr };
        }
        st
    }

    fn frame(module: &str, symbol: &str) -> Option<NativeFrame> {
        Some(NativeFrame {
            module: module.into(),
            symbol: Some(symbol.into()),
            offset: 0x40,
            source: Vec::new(),
        })
    }

    /// A CPython 3.12 code object built in this process's memory (the buffers it points
    /// into live as long as it does).
    struct FakeCode {
        code: Vec<u8>,
        filename: Vec<u8>,
        _qualname: Vec<u8>,
        _linetable: Vec<u8>,
    }

    impl FakeCode {
        fn new(filename: &str, qualname: &str, firstlineno: u32) -> FakeCode {
            let l = python::layout(12).expect("3.12 layout");
            // A compact ASCII str: length, state (compact + ascii, kind 1), then its characters.
            let ascii = |text: &str| {
                let mut o = vec![0u8; l.obj.ascii_size as usize + text.len() + 1];
                o[l.obj.unicode_length as usize..][..8]
                    .copy_from_slice(&(text.len() as u64).to_le_bytes());
                let state: u32 = (1 << l.obj.state_kind_shift)
                    | (1 << l.obj.state_compact_bit)
                    | (1 << l.obj.state_ascii_bit);
                o[l.obj.unicode_state as usize..][..4].copy_from_slice(&state.to_le_bytes());
                o[l.obj.ascii_size as usize..][..text.len()].copy_from_slice(text.as_bytes());
                o
            };
            let mut c = FakeCode {
                code: vec![0u8; 512],
                filename: ascii(filename),
                _qualname: ascii(qualname),
                _linetable: vec![0u8; l.obj.bytes_sval as usize],
            };
            c.put(l.code_qualname, c._qualname.as_ptr() as u64);
            c.put(l.code_linetable, c._linetable.as_ptr() as u64);
            c.code[l.code_firstlineno as usize..][..4].copy_from_slice(&firstlineno.to_le_bytes());
            c.put(l.code_filename, c.filename.as_ptr() as u64);
            c
        }

        fn put(&mut self, at: u64, v: u64) {
            self.code[at as usize..][..8].copy_from_slice(&v.to_le_bytes());
        }

        fn addr(&self) -> u64 {
            std::hint::black_box(self.code.as_ptr() as u64)
        }
    }

    /// The native frames named since the last look: (address, whether a file named it).
    fn natives_logged(r: &mut StackResolver) -> Vec<(u64, bool)> {
        r.take_log()
            .into_iter()
            .filter_map(|s| match s {
                StackSym::Native { addr, frame, .. } => Some((addr, frame.is_some())),
                _ => None,
            })
            .collect()
    }

    /// A resolver for this process, which it takes to be CPython 3.12.
    fn resolver_of_this_process() -> StackResolver {
        let mut r = StackResolver::live(Arc::new(crate::enrich::process::ProcSymbols::new()));
        r.learn(vec![StackSym::Python {
            tgid: std::process::id(),
            module: "python3.12".into(),
            minor: 12,
            frames: true,
        }]);
        r
    }

    /// A code object whose first read fails (its file name is not there yet) is read again at
    /// its next sighting, and named; one that never reads is given up after
    /// [`PY_READ_TRIES`]. The "process" is this one, its code objects built in its memory with
    /// CPython 3.12's layout.
    #[test]
    fn a_code_object_that_fails_to_read_is_tried_again() {
        let l = python::layout(12).expect("3.12 layout");
        let tgid = std::process::id();
        let mut code = FakeCode::new("train.py", "Net.forward", 7);
        // Not there yet: a file name pointer into the unmapped first page.
        code.put(l.code_filename, 8);
        let addr = code.addr();
        let mut r = resolver_of_this_process();
        assert!(r.py(tgid, addr).is_none(), "the first read fails");
        let filename = code.filename.as_ptr() as u64;
        code.put(l.code_filename, filename);
        let c = r.py(tgid, code.addr()).expect("read again");
        assert_eq!(
            (c.filename.as_str(), c.qualname.as_str(), c.firstlineno),
            ("train.py", "Net.forward", 7)
        );
        let logged: Vec<bool> = r
            .take_log()
            .iter()
            .filter_map(|s| match s {
                StackSym::PyCode { info, .. } => Some(info.is_some()),
                _ => None,
            })
            .collect();
        assert_eq!(
            logged,
            [false, true],
            "both reads go to the capture file, the last wins"
        );
        // A code object that never reads: PY_READ_TRIES attempts, then no more.
        let mut bad = FakeCode::new("bad.py", "bad", 1);
        bad.put(l.code_filename, 8);
        let bad_addr = bad.addr();
        for _ in 0..10 {
            assert!(r.py(tgid, bad_addr).is_none());
        }
        assert_eq!(r.take_log().len(), PY_READ_TRIES as usize);
    }

    /// A stack's Python code objects are read when it arrives, whatever its native frames
    /// wait for: the process may be gone by the time a large library's symbol tables are read.
    /// The native frames are named on the namer's thread, held here until the Python frames
    /// are named; `settle` then waits for them.
    #[test]
    fn python_frames_are_named_while_native_ones_wait() {
        let tgid = std::process::id();
        let code = FakeCode::new("train.py", "Net.forward", 7);
        let mut r = resolver_of_this_process();
        let (release, held) = std::sync::mpsc::channel();
        r.namer
            .as_ref()
            .expect("a live resolver has a namer")
            .jobs
            .send(NamerJob::Hold(held))
            .unwrap();
        // Return addresses inside two of this test binary's functions.
        let native = [
            native_frame as *const () as u64 + 1,
            resolver_of_this_process as *const () as u64 + 1,
        ];
        let st = stack(&native, &[(code.addr(), 0x10)], kind::LAUNCH, 1);
        r.prepare(tgid, &st);
        let py: Vec<_> = r
            .take_log()
            .into_iter()
            .filter_map(|s| match s {
                StackSym::PyCode { info, .. } => info.map(|c| (c.filename, c.qualname)),
                StackSym::Native { .. } => panic!("a native frame named while the namer waits"),
                StackSym::Python { .. } => None,
            })
            .collect();
        assert_eq!(py, [("train.py".to_string(), "Net.forward".to_string())]);
        assert!(r.naming(tgid));
        let key = StackKey::of(&st);
        assert_eq!(
            r.labels(tgid, &key),
            [
                "train.py Net.forward".to_string(),
                format!("0x{:x}", native[0])
            ]
        );
        release.send(()).unwrap();
        r.settle();
        assert!(!r.naming(tgid));
        let named: Vec<(u64, Option<String>)> = r
            .take_log()
            .into_iter()
            .filter_map(|s| match s {
                StackSym::Native { addr, frame, .. } => Some((addr, frame?.symbol)),
                _ => None,
            })
            .collect();
        assert_eq!(named.len(), 2, "{named:?}");
        assert_eq!(named[0].0, native[0]);
        assert!(
            named[0].1.as_deref().unwrap().ends_with("native_frame"),
            "{named:?}"
        );
        assert!(
            named[1]
                .1
                .as_deref()
                .unwrap()
                .ends_with("resolver_of_this_process"),
            "{named:?}"
        );
        // Known now: the same stack again asks the namer for nothing.
        r.prepare(tgid, &st);
        assert!(!r.naming(tgid));
        let labels = r.labels(tgid, &key);
        assert!(
            labels.iter().any(|l| l.contains("native_frame")),
            "{labels:?}"
        );
    }

    /// A walk ends at an address no file maps: what lies past it is not named, nor waited
    /// for (each such address once stayed "being named" for good, a leak per process).
    #[test]
    fn a_walk_ends_at_an_unmapped_address() {
        let tgid = std::process::id();
        let mut r = resolver_of_this_process();
        let native = [
            native_frame as *const () as u64 + 1,
            0x10,
            resolver_of_this_process as *const () as u64 + 1,
        ];
        let st = stack(&native, &[], kind::LAUNCH, 1);
        r.prepare(tgid, &st);
        r.settle();
        assert!(!r.naming(tgid));
        assert!(r.requested.is_empty(), "{:?}", r.requested);
        assert_eq!(natives_logged(&mut r), [(native[0], true), (0x10, false)]);
        let labels = r.labels(tgid, &StackKey::of(&st));
        assert_eq!(labels.len(), 1, "{labels:?}");
        assert!(labels[0].contains("native_frame"), "{labels:?}");
        // Seen again: nothing more to name.
        r.prepare(tgid, &st);
        assert!(!r.naming(tgid));
    }

    /// Without a namer thread (it could not start), native frames are named in `prepare`.
    #[test]
    fn without_a_namer_native_frames_are_named_in_turn() {
        let tgid = std::process::id();
        let mut r = resolver_of_this_process();
        r.namer = None;
        let native = [native_frame as *const () as u64 + 1, 0x10, 0x20];
        let st = stack(&native, &[], kind::LAUNCH, 1);
        r.prepare(tgid, &st);
        assert!(!r.naming(tgid));
        assert_eq!(natives_logged(&mut r), [(native[0], true), (0x10, false)]);
    }

    #[test]
    fn the_caller_counted_once_whether_or_not_the_kernel_added_it() {
        // Kernels from 6.13 repeat the caller after the one read off the stack.
        let k = StackKey::of(&stack(&[0x10, 0x10, 0x20], &[], kind::LAUNCH, 1));
        assert_eq!(&*k.native, &[0x10, 0x20]);
        let k = StackKey::of(&stack(&[0x10, 0x20], &[], kind::LAUNCH, 1));
        assert_eq!(&*k.native, &[0x10, 0x20]);
        // At a return probe nothing is read off the stack: no deduplication.
        let mut st = stack(&[0x10, 0x10], &[], kind::SYNC, 1);
        st.flags = 0;
        assert_eq!(&*StackKey::of(&st).native, &[0x10, 0x10]);
        // Shim frames (instr 0) are left out.
        let k = StackKey::of(&stack(
            &[0x10],
            &[(0x100, 0x1c0), (0x200, 0)],
            kind::LAUNCH,
            1,
        ));
        assert_eq!(&*k.py, &[(0x100, 0x1c0)]);
    }

    #[test]
    fn samples_scaled_by_their_period_and_bounded() {
        let mut ps = ProcStacks::default();
        ps.apply(3, &stack(&[0x10, 0x20], &[], kind::LAUNCH, 4));
        ps.apply(3, &stack(&[0x10, 0x20], &[], kind::LAUNCH, 4));
        ps.apply(5, &stack(&[0x30], &[], kind::SYNC, 4));
        assert_eq!(ps.samples, 3);
        let s = &ps.by_stack[&StackKey::of(&stack(&[0x10, 0x20], &[], kind::LAUNCH, 4))];
        assert_eq!((s.samples, s.calls, s.launches, s.blocked_ns), (2, 8, 8, 0));
        assert_eq!(s.funcs[&(3, 0x77)], 8);
        let s = &ps.by_stack[&StackKey::of(&stack(&[0x30], &[], kind::SYNC, 4))];
        assert_eq!((s.syncs, s.blocked_ns), (4, 4_000));
        // Past the bound, samples are counted, not kept.
        let mut ps = ProcStacks::default();
        for i in 0..MAX_STACKS_PER_PROCESS as u64 + 5 {
            ps.apply(3, &stack(&[0x1000 + i], &[], kind::LAUNCH, 1));
        }
        assert_eq!(ps.by_stack.len(), MAX_STACKS_PER_PROCESS);
        assert_eq!(ps.dropped, 5);
    }

    #[test]
    fn names_from_a_capture_merge_python_and_native_frames() {
        let mut r = StackResolver::replay();
        let code = |q: &str, first: u32| PyCode {
            filename: "/m.py".into(),
            qualname: q.into(),
            firstlineno: first,
            // one entry: no-column form, line delta 0, 8 code units
            linetable: vec![0x80 | (13 << 3) | 7, 0],
            code_adaptive: 184,
        };
        r.learn(vec![
            StackSym::Python {
                tgid: 7,
                module: "/usr/bin/python3.11".into(),
                minor: 11,
                frames: true,
            },
            StackSym::Native {
                tgid: 7,
                addr: 0x10,
                frame: frame("libffi.so.8", "ffi_call"),
            },
            StackSym::Native {
                tgid: 7,
                addr: 0x20,
                frame: frame("python3.11", "_PyEval_EvalFrameDefault"),
            },
            StackSym::PyCode {
                tgid: 7,
                code: 0x1000,
                info: Some(code("launch", 14)),
            },
            StackSym::PyCode {
                tgid: 7,
                code: 0x2000,
                info: Some(code("<module>", 30)),
            },
        ]);
        let key = StackKey::of(&stack(
            &[0x10, 0x20, 0x10],
            &[(0x1000, 0x1000 + 184 + 4), (0x2000, 0x2000 + 184)],
            kind::LAUNCH,
            1,
        ));
        // Outermost first: Python frames, then native frames below the interpreter.
        assert_eq!(
            r.labels(7, &key),
            [
                "/m.py:30 <module>",
                "/m.py:14 launch",
                "ffi_call (libffi.so.8)"
            ]
        );
        assert_eq!(r.caller_module(7, &key), "libffi.so.8");
        assert_eq!(
            r.python_of(7).as_deref(),
            Some("CPython 3.11 (/usr/bin/python3.11)")
        );
        // Without Python frames the native walk is kept whole, and stops at an address no file
        // maps (past the first frame).
        r.learn(vec![StackSym::Native {
            tgid: 7,
            addr: 0x99,
            frame: None,
        }]);
        let key = StackKey::of(&stack(&[0x99, 0x10, 0x99, 0x20], &[], kind::LAUNCH, 1));
        assert_eq!(r.labels(7, &key), ["ffi_call (libffi.so.8)", "0x99"]);
        // A retired tgid's names are forgotten.
        r.forget(7);
        assert_eq!(r.python_of(7), None);
    }

    #[test]
    fn dwarf_lines_and_inlined_functions_become_frames() {
        let f = NativeFrame {
            module: "app".into(),
            symbol: Some("main".into()),
            offset: 0x1234,
            source: vec![
                lines::SourceFrame {
                    function: Some("_Z6helperv".into()),
                    file: Some("app.c".into()),
                    line: Some(12),
                },
                lines::SourceFrame {
                    function: None,
                    file: Some("app.c".into()),
                    line: Some(40),
                },
            ],
        };
        // Outermost first: the real function (named by its symbol when DWARF has no name) at
        // the inlined call's line, then the inlined function.
        assert_eq!(
            f.labels(),
            ["app.c:40 main (app)", "app.c:12 helper() (app)"]
        );
        let bare = NativeFrame {
            source: Vec::new(),
            ..f.clone()
        };
        assert_eq!(bare.labels(), ["main (app)"]);
        let unnamed = NativeFrame {
            symbol: None,
            source: Vec::new(),
            ..f
        };
        assert_eq!(unnamed.labels(), ["app+0x1234"]);
    }

    #[test]
    fn code_rows_merge_stacks_that_name_alike() {
        let mut r = StackResolver::replay();
        r.learn(vec![
            StackSym::Native {
                tgid: 1,
                addr: 0x10,
                frame: frame("app", "f"),
            },
            StackSym::Native {
                tgid: 1,
                addr: 0x11,
                frame: frame("app", "f"),
            },
            StackSym::Native {
                tgid: 1,
                addr: 0x20,
                frame: frame("app", "main"),
            },
        ]);
        let mut ps = ProcStacks::default();
        ps.apply(0, &stack(&[0x10, 0x20], &[], kind::LAUNCH, 1));
        ps.apply(0, &stack(&[0x11, 0x20], &[], kind::LAUNCH, 1));
        ps.apply(0, &stack(&[0x11, 0x20], &[], kind::COPY, 1));
        let (rows, sum) = r.code_report(1, &ps, &mut |_, h| format!("k{h:x}"));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].stack, ["main (app)", "f (app)"]);
        assert_eq!(
            (
                rows[0].calls,
                rows[0].launches,
                rows[0].copies,
                rows[0].blocked_ns
            ),
            (3, 2, 1, 1_000)
        );
        assert_eq!(rows[0].kernels.len(), 1);
        assert_eq!(
            (
                rows[0].kernels[0].name.as_str(),
                rows[0].kernels[0].launches
            ),
            ("k77", 2)
        );
        assert_eq!((sum.samples, sum.shallow), (3, 3));
    }
}

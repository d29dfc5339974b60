//! Naming the frames of sampled call stacks (launches, blocking syncs and blocking copies).
//!
//! The probes take a stack of one such call in N, drawn at random ([`STACK_CONFIG`] period) —
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
use profiler_common::{StackBody, stackflags};
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
        // The CUDA libraries' own frames at the leaf are left out: with one trap per launch a
        // runtime launch's stack is taken at the driver call it makes, and the stack ends, as
        // with the runtime's entry probed, at the program's call into the runtime.
        let mut first = true;
        for &a in key.native.iter() {
            match self.native.get(&(tgid, a)).and_then(|f| f.as_ref()) {
                Some(f) if first && is_cuda_module(&f.module) => continue,
                Some(f) => {
                    first = false;
                    if interp_module.as_deref() == Some(f.module.as_str()) {
                        break;
                    }
                    // `inner` runs innermost first.
                    inner.extend(f.labels().into_iter().rev());
                }
                // Past the first frame, an address no file maps ends the walk: without frame
                // pointers what follows is not a stack.
                None if first => {
                    first = false;
                    inner.push(format!("0x{a:x}"));
                }
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

#[cfg(test)]
pub(crate) mod tests;

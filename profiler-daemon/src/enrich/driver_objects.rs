//! Names of driver handles created before the attach, read from the driver's own function
//! objects through a layout learned per driver build from handles whose names the probes saw.
//!
//! Why: a kernel handle (`CUfunction`, `CUkernel`) that a process got from the driver before
//! gpuprofd attached was never seen with its name, and no interface lets another process ask
//! the driver for it. The driver itself keeps the mangled name behind a pointer in the object
//! the handle points to (driver 550.163.01: `cuFuncGetName` and `cuKernelGetName` return
//! `*(const char **)(handle + 8)`, see docs/ARCHITECTURE.md, "Names from the driver's
//! objects"), but that layout is the driver's private business and may change with any build.
//! So nothing is assumed: every handle whose name a probe did see (the returns of
//! `cuModuleGetFunction` and `cuLibraryGetKernel`) is a calibration sample, and a layout — the
//! pointer chains from the handle that reach its exact name — is used for a driver build (its
//! GNU build id) only once at least [`MIN_AGREEING`] samples agreed on it and none disagreed.
//! A sample disagrees when none of the shortest chains so far reaches its name, even where a
//! longer one still does: reading a pointer's neighbourhood also finds coincidences of the
//! heap (the module's name table allocated next to it), which are right for some handles and
//! wrong for others. A layout one later sample contradicts is dropped for the rest of the
//! session. Where no
//! layout is confirmed, a handle keeps no name (`<unknown 0x…>`): a name is read, never guessed.
//!
//! The reads are the daemon's (`/proc/PID/mem`, root), not the probes': the search over
//! candidate offsets takes a few thousand reads, once per build, which a probe could not do, and
//! launches, the hot path, stay as they are. The learner itself ([`Learner`], [`read_name`])
//! reads through the [`Memory`] trait, so it is tested on made-up objects.
//!
//! A confirmed layout is remembered across runs in the state directory ([`remembered`]), so a
//! later attach to a process that makes no new handle still names the old ones: such a layout
//! is checked by this session's samples as a learned one is, and names read through it before
//! this session confirmed it on its own samples say so (`driver_object_remembered`).

pub mod remembered;

use crate::discovery;
use crate::sys::hash::{FastMap, FastSet};
use remembered::Remembered;
use std::collections::HashMap;
use std::fmt;

/// Calibration samples that must agree before a layout is used.
pub const MIN_AGREEING: u32 = 3;
/// Bytes of a handle's object searched for a pointer to the name.
pub const OUTER_SCAN: usize = 0x200;
/// Bytes of an object one pointer away searched for a pointer to the name.
pub const INNER_SCAN: usize = 0x100;
/// The longest name read through a layout (longer: not taken as a name).
pub const MAX_NAME: usize = 4096;
/// Handles of one process waiting for a layout (more are left unnamed).
pub const MAX_PENDING: usize = 1 << 16;

/// A process's memory, read by address.
pub trait Memory {
    /// Reads up to `buf.len()` bytes at `addr`; returns how many it could (a prefix).
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize;
}

/// Where a name is, from the handle: a pointer chain ending at the NUL-terminated name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Chain {
    /// `*(const char **)(handle + off)`.
    Direct(u16),
    /// `*(const char **)(*(void **)(handle + outer) + inner)`.
    Indirect(u16, u16),
}

impl Chain {
    /// Pointers followed to reach the name.
    pub fn hops(self) -> u8 {
        match self {
            Chain::Direct(_) => 1,
            Chain::Indirect(..) => 2,
        }
    }
}

impl fmt::Display for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Chain::Direct(o) => write!(f, "*(handle+{o:#x})"),
            Chain::Indirect(o, i) => write!(f, "*(*(handle+{o:#x})+{i:#x})"),
        }
    }
}

/// The two kinds of handle the probes learn names for: their objects may differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HandleKind {
    /// `CUfunction` (`cuModuleGetFunction`).
    Function,
    /// `CUkernel` (`cuLibraryGetKernel`).
    Kernel,
}

impl HandleKind {
    /// The kind of handle a name record of `source` ([`profiler_common::namesrc`]) names;
    /// `None` for the sources that are no calibration (host stubs, names read by the daemon,
    /// `cuFuncGetName`, whose handle may be of either kind).
    pub fn of_source(source: u32) -> Option<Self> {
        use profiler_common::namesrc;
        match source {
            namesrc::MODULE_GET_FUNCTION => Some(Self::Function),
            namesrc::LIBRARY_GET_KERNEL => Some(Self::Kernel),
            _ => None,
        }
    }
}

/// What one calibration sample said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sample {
    /// Its name is where the layout (or, for the first, some chain) says.
    Agreed,
    /// It contradicts every candidate: no layout for this build, from now on.
    Disagreed,
    /// Its object could not be read (the process is gone, a bad handle): no evidence.
    Unreadable,
}

/// Where a learner stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Learning,
    Confirmed,
    Refuted,
}

/// Learns one driver build's layout for one kind of handle.
#[derive(Clone, Debug, Default)]
pub struct Learner {
    /// Every chain that reached the name of every sample so far (`None`: no sample yet).
    candidates: Option<Vec<Chain>>,
    agreed: u32,
    refuted: bool,
    /// Taken from the state file ([`Learner::remembered`]), not learned in this session.
    remembered: bool,
    /// Samples of this session that agreed (`agreed` counts the remembered ones too).
    session_agreed: u32,
}

impl Learner {
    /// A layout an earlier session confirmed on `samples` samples: confirmed now, and checked
    /// by every sample of this session as a learned one is.
    pub fn remembered(chains: Vec<Chain>, samples: u32) -> Self {
        Self {
            candidates: Some(chains),
            agreed: samples,
            refuted: false,
            remembered: true,
            session_agreed: 0,
        }
    }

    /// Confirmed only by what an earlier session remembered: this session's own samples are
    /// fewer than [`MIN_AGREEING`].
    pub fn only_remembered(&self) -> bool {
        self.remembered && self.session_agreed < MIN_AGREEING
    }

    /// Samples of this session that agreed.
    pub fn session_agreed(&self) -> u32 {
        self.session_agreed
    }

    /// Checks the layout against `handle`, whose name is known to be `name` (`truncated`: the
    /// probe kept only its first bytes).
    pub fn calibrate(
        &mut self,
        mem: &dyn Memory,
        handle: u64,
        name: &[u8],
        truncated: bool,
    ) -> Sample {
        if self.refuted {
            return Sample::Disagreed;
        }
        if name.is_empty() {
            return Sample::Unreadable;
        }
        let found = match &self.candidates {
            None => match search(mem, handle, name, truncated) {
                Some(found) => found,
                None => return Sample::Unreadable,
            },
            Some(c) => {
                let mut probe = [0u8; 8];
                if mem.read(handle, &mut probe) < 8 {
                    return Sample::Unreadable;
                }
                let found: Vec<Chain> = c
                    .iter()
                    .copied()
                    .filter(|&ch| {
                        follow(mem, handle, ch).is_some_and(|p| matches(mem, p, name, truncated))
                    })
                    .collect();
                // The shortest chains must hold: where only a longer one still reaches the
                // name, that one is likelier a coincidence of the heap (the module's own name
                // table next to the object) than the driver's way, and this object another
                // kind — a disagreement.
                let shortest = c.iter().map(|ch| ch.hops()).min();
                if found.iter().map(|ch| ch.hops()).min() != shortest {
                    Vec::new()
                } else {
                    found
                }
            }
        };
        if found.is_empty() {
            self.refuted = true;
            self.candidates = Some(Vec::new());
            return Sample::Disagreed;
        }
        self.candidates = Some(found);
        self.agreed = self.agreed.saturating_add(1);
        self.session_agreed += 1;
        Sample::Agreed
    }

    pub fn state(&self) -> State {
        match (&self.candidates, self.refuted) {
            (_, true) => State::Refuted,
            (Some(c), false) if !c.is_empty() && self.agreed >= MIN_AGREEING => State::Confirmed,
            _ => State::Learning,
        }
    }

    /// The confirmed layout: every chain that agreed with every sample.
    pub fn layout(&self) -> Option<&[Chain]> {
        (self.state() == State::Confirmed)
            .then_some(self.candidates.as_deref())
            .flatten()
    }

    /// Samples that agreed so far.
    pub fn agreed(&self) -> u32 {
        self.agreed
    }
}

/// The name `handle` reads as through the confirmed `layouts` (one per kind of handle): each
/// layout's chains must all give the same plausible name or none; every layout that gives one
/// must give the same. Anything else is no name.
pub fn read_name(mem: &dyn Memory, handle: u64, layouts: &[&[Chain]]) -> Option<Vec<u8>> {
    let mut agreed: Option<Vec<u8>> = None;
    for chains in layouts {
        let reads: Vec<Option<Vec<u8>>> = chains
            .iter()
            .map(|&ch| follow(mem, handle, ch).and_then(|p| plausible_name(mem, p)))
            .collect();
        let Some(first) = reads.first() else { continue };
        if reads.iter().any(|r| r != first) {
            return None;
        }
        if let Some(name) = first {
            if agreed.as_ref().is_some_and(|a| a != name) {
                return None;
            }
            agreed = Some(name.clone());
        }
    }
    agreed
}

/// Every chain from `handle` that reaches `name`; `None` when the object is unreadable.
fn search(mem: &dyn Memory, handle: u64, name: &[u8], truncated: bool) -> Option<Vec<Chain>> {
    let mut obj = vec![0u8; OUTER_SCAN];
    let n = mem.read(handle, &mut obj);
    if n < 8 {
        return None;
    }
    let mut found = Vec::new();
    let mut inner = vec![0u8; INNER_SCAN];
    for (o, p) in qwords(&obj[..n]) {
        if !plausible_pointer(p) {
            continue;
        }
        if matches(mem, p, name, truncated) {
            found.push(Chain::Direct(o));
        }
        let m = mem.read(p, &mut inner);
        for (i, q) in qwords(&inner[..m]) {
            if plausible_pointer(q) && matches(mem, q, name, truncated) {
                found.push(Chain::Indirect(o, i));
            }
        }
    }
    Some(found)
}

/// The 8-byte words of `bytes` with their offsets.
fn qwords(bytes: &[u8]) -> impl Iterator<Item = (u16, u64)> + '_ {
    bytes.chunks_exact(8).enumerate().map(|(k, w)| {
        let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        ((k * 8) as u16, v)
    })
}

fn read_u64(mem: &dyn Memory, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    (mem.read(addr, &mut b) == 8).then(|| u64::from_le_bytes(b))
}

/// The address `chain` gives for `handle`'s name.
fn follow(mem: &dyn Memory, handle: u64, ch: Chain) -> Option<u64> {
    let p = match ch {
        Chain::Direct(o) => read_u64(mem, handle.checked_add(o.into())?)?,
        Chain::Indirect(o, i) => {
            let mid = read_u64(mem, handle.checked_add(o.into())?)?;
            if !plausible_pointer(mid) {
                return None;
            }
            read_u64(mem, mid.checked_add(i.into())?)?
        }
    };
    plausible_pointer(p).then_some(p)
}

/// A user-space address (x86-64, 47 bits) past the first page.
fn plausible_pointer(p: u64) -> bool {
    (0x1000..1 << 47).contains(&p)
}

/// Whether the bytes at `p` are `name` and its NUL (only its bytes, when `truncated`).
fn matches(mem: &dyn Memory, p: u64, name: &[u8], truncated: bool) -> bool {
    let mut buf = vec![0u8; name.len() + usize::from(!truncated)];
    mem.read(p, &mut buf) == buf.len()
        && &buf[..name.len()] == name
        && (truncated || buf[name.len()] == 0)
}

/// The NUL-terminated string at `p` when it looks like a kernel name: 1 to [`MAX_NAME`]
/// printable ASCII characters, no spaces (mangled C++ names and the names of Triton, CuPy and
/// PTX entries are all of that form).
fn plausible_name(mem: &dyn Memory, p: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 256];
    while out.len() < MAX_NAME {
        let n = mem.read(p.checked_add(out.len() as u64)?, &mut chunk);
        let got = &chunk[..n];
        if let Some(end) = got.iter().position(|&b| b == 0) {
            out.extend_from_slice(&got[..end]);
            let ok = !out.is_empty()
                && out.len() <= MAX_NAME
                && out.iter().all(|b| (0x21..=0x7e).contains(b));
            return ok.then_some(out);
        }
        if n < chunk.len() {
            return None;
        }
        out.extend_from_slice(got);
    }
    None
}

/// `/proc/PID/mem` of one process.
pub struct ProcMem(std::fs::File);

impl ProcMem {
    pub fn open(tgid: u32) -> Option<ProcMem> {
        std::fs::File::open(format!("/proc/{tgid}/mem"))
            .ok()
            .map(ProcMem)
    }
}

impl Memory for ProcMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        use std::os::unix::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match self.0.read_at(&mut buf[done..], addr + done as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => done += n,
            }
        }
        done
    }
}

/// What [`DriverObjects`] needs of the processes: their memory, and which driver build they
/// run (the live ones read procfs; the tests make them up).
pub trait Processes {
    fn memory(&self, tgid: u32) -> Option<Box<dyn Memory>>;
    /// The GNU build id, in hex, of the `libcuda.so.1` that `tgid` maps.
    fn driver_build(&mut self, tgid: u32) -> Option<String>;
}

/// The processes of this host, through procfs; the driver files' build ids are read once each.
#[derive(Default)]
pub struct LiveProcesses {
    /// (device, inode) → the build id when that file is a driver.
    files: HashMap<(u64, u64), Option<String>>,
}

impl Processes for LiveProcesses {
    fn memory(&self, tgid: u32) -> Option<Box<dyn Memory>> {
        ProcMem::open(tgid).map(|m| Box::new(m) as Box<dyn Memory>)
    }

    fn driver_build(&mut self, tgid: u32) -> Option<String> {
        let maps = std::fs::read_to_string(format!("/proc/{tgid}/maps")).ok()?;
        for m in discovery::parse_maps(&maps) {
            let id = self.files.entry((m.dev, m.inode)).or_insert_with(|| {
                let file = discovery::open_mapping(tgid, &m)?;
                let soname = discovery::elf::read_soname(&file.path)?;
                if discovery::layer_of_soname(&soname) != Some(crate::api::Layer::Driver) {
                    return None;
                }
                let id = discovery::elf::read_build_id(&file.path)?;
                Some(id.iter().map(|b| format!("{b:02x}")).collect())
            });
            if let Some(id) = id {
                return Some(id.clone());
            }
        }
        None
    }
}

/// A name read from a driver object, for the session to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    pub tgid: u32,
    pub handle: u64,
    pub name: Vec<u8>,
    /// Read through a layout this session took from the state file and has not confirmed on
    /// [`MIN_AGREEING`] samples of its own.
    pub remembered: bool,
}

/// The session's learners (per driver build and kind of handle) and the handles launched
/// without a name, waiting for a layout.
pub struct DriverObjects {
    procs: Box<dyn Processes + Send>,
    /// tgid → its driver's build id (`None`: none, or unreadable).
    builds: HashMap<u32, Option<String>>,
    learners: HashMap<(String, HandleKind), Learner>,
    /// Layouts confirmed by earlier sessions, and where this session's go.
    remembered: Remembered,
    /// Driver handles each process launched, each considered once (checked on every launch).
    considered: FastMap<u32, FastSet<u64>>,
    pending: HashMap<u32, Vec<u64>>,
    /// Something to try in [`Self::take`]: new handles waiting, or a layout newly confirmed.
    dirty: bool,
}

impl DriverObjects {
    pub fn new(procs: Box<dyn Processes + Send>, remembered: Remembered) -> Self {
        Self {
            procs,
            builds: HashMap::new(),
            learners: HashMap::new(),
            remembered,
            considered: FastMap::default(),
            pending: HashMap::new(),
            dirty: false,
        }
    }

    /// For the live processes of this host, with the layouts `remembered` from earlier runs.
    pub fn live(remembered: Remembered) -> Self {
        Self::new(Box::new(LiveProcesses::default()), remembered)
    }

    /// `tgid`'s driver build; a build seen for the first time starts with the layouts the
    /// state file remembers for it.
    fn build(&mut self, tgid: u32) -> Option<String> {
        if let Some(b) = self.builds.get(&tgid) {
            return b.clone();
        }
        let b = self.procs.driver_build(tgid);
        self.builds.insert(tgid, b.clone());
        if let Some(build) = &b {
            for kind in [HandleKind::Function, HandleKind::Kernel] {
                let key = (build.clone(), kind);
                if self.learners.contains_key(&key) {
                    continue;
                }
                if let Some(e) = self.remembered.get(build, kind) {
                    let layout: Vec<String> = e.chains.iter().map(|c| c.to_string()).collect();
                    tracing::info!(build = %build, ?kind, layout = ?layout, samples = e.samples,
                        "driver object layout remembered from an earlier run");
                    self.learners
                        .insert(key, Learner::remembered(e.chains.clone(), e.samples));
                    self.dirty = true;
                }
            }
        }
        b
    }

    /// Writes what the state file does not have yet (refreshed layouts).
    pub fn flush(&mut self) {
        self.remembered.flush();
    }

    /// A probe saw `handle` (of `kind`) named `name` in `tgid`: a calibration sample for its
    /// driver build.
    pub fn calibrate(
        &mut self,
        tgid: u32,
        kind: HandleKind,
        handle: u64,
        name: &[u8],
        truncated: bool,
    ) {
        self.considered.entry(tgid).or_default().insert(handle);
        let Some(build) = self.build(tgid) else {
            return;
        };
        let learner = self.learners.entry((build.clone(), kind)).or_default();
        if learner.state() == State::Refuted {
            return;
        }
        let Some(mem) = self.procs.memory(tgid) else {
            return;
        };
        let sample = learner.calibrate(&*mem, handle, name, truncated);
        let chains = learner.layout().unwrap_or_default().to_vec();
        match (sample, learner.state()) {
            (Sample::Agreed, State::Confirmed) if learner.session_agreed() == MIN_AGREEING => {
                let layout: Vec<String> = chains.iter().map(|c| c.to_string()).collect();
                tracing::info!(build = %build, ?kind, layout = ?layout, "driver object layout confirmed");
                self.remembered
                    .confirmed(&build, kind, &chains, learner.agreed());
                self.dirty = true;
            }
            (Sample::Agreed, State::Confirmed) => {
                self.remembered
                    .agreed(&build, kind, &chains, learner.agreed());
            }
            (Sample::Disagreed, _) => {
                let was = if self.remembered.refuted(&build, kind) {
                    "the layout remembered from an earlier run is dropped"
                } else {
                    "no names from this driver's objects"
                };
                tracing::warn!(build = %build, ?kind, tgid, handle = format_args!("{handle:#x}"),
                    "a driver handle's name is not where the others' were: {was}");
            }
            _ => {}
        }
    }

    /// `tgid` launched driver handle `handle`; `named` says whether it has a name already.
    /// Each handle is considered once.
    pub fn launched(&mut self, tgid: u32, handle: u64, named: impl FnOnce() -> bool) {
        if !self.considered.entry(tgid).or_default().insert(handle) || named() {
            return;
        }
        let p = self.pending.entry(tgid).or_default();
        if p.len() < MAX_PENDING {
            p.push(handle);
            self.dirty = true;
        }
    }

    /// The names that can be read now, of the handles waiting. A handle is tried once its
    /// process's driver build has a confirmed layout; one of a process whose layouts are all
    /// refuted, or that is gone, is given up.
    pub fn take(&mut self) -> Vec<Learned> {
        if !std::mem::take(&mut self.dirty) {
            return Vec::new();
        }
        let mut out = Vec::new();
        let tgids: Vec<u32> = self.pending.keys().copied().collect();
        for tgid in tgids {
            let build = self.build(tgid);
            let learners: Vec<&Learner> = [HandleKind::Function, HandleKind::Kernel]
                .iter()
                .filter_map(|&k| {
                    build
                        .as_ref()
                        .and_then(|b| self.learners.get(&(b.clone(), k)))
                })
                .collect();
            let states: Vec<(State, Option<&[Chain]>)> =
                learners.iter().map(|l| (l.state(), l.layout())).collect();
            let remembered = learners
                .iter()
                .any(|l| l.layout().is_some() && l.only_remembered());
            let layouts: Vec<&[Chain]> = states.iter().filter_map(|s| s.1).collect();
            if layouts.is_empty() {
                let hopeless = build.is_none()
                    || (!states.is_empty() && states.iter().all(|s| s.0 == State::Refuted));
                if hopeless {
                    self.pending.remove(&tgid);
                }
                continue;
            }
            let handles = self.pending.remove(&tgid).unwrap_or_default();
            let Some(mem) = self.procs.memory(tgid) else {
                continue;
            };
            for handle in handles {
                if let Some(name) = read_name(&*mem, handle, &layouts) {
                    out.push(Learned {
                        tgid,
                        handle,
                        name,
                        remembered,
                    });
                }
            }
        }
        out
    }

    /// `tgid`'s process is over (it ended, ran another program, or its pid was reused).
    pub fn forget(&mut self, tgid: u32) {
        self.builds.remove(&tgid);
        self.considered.remove(&tgid);
        self.pending.remove(&tgid);
    }
}

#[cfg(test)]
mod tests;

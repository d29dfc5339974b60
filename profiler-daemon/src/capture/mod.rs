//! Capture: load the eBPF object, set the in-kernel filter, read the ring buffer, count losses.
//!
//! The reader drains the ring buffer on every wake (never sleep-polls) and hands whole batches
//! of raw records to the aggregator through a bounded channel; what it cannot hand over is
//! counted, never dropped silently.

pub mod counted;
pub mod origin;
mod reader;
mod watch;

#[cfg(test)]
use reader::is_live_process;
pub(crate) use reader::peek;
pub use reader::{Counting, Windows, drain, spawn_reader};

pub use watch::{WatchError, follow_forks, watch_processes};

use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::{Ebpf, EbpfLoader};
use profiler_common::{FILTER_ALL, FILTER_CGROUPS, FILTER_TGIDS, MAX_KINDS, fault, kind, maps};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// The eBPF object built by build.rs (empty when built with GPUPROFD_SKIP_EBPF=1).
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler-ebpf"));

/// Whether this build carries its eBPF object.
pub fn has_object() -> bool {
    !EBPF_OBJECT.is_empty()
}

/// Default ring-buffer size (bytes, a power of two).
pub const DEFAULT_RING_BYTES: u32 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error(
        "this gpuprofd was built without its eBPF object (GPUPROFD_SKIP_EBPF=1); \
         build it with `cargo xtask build` (or scripts/setup.sh then `cargo build --release`)"
    )]
    NoObject,
    #[error(
        "permission denied loading BPF programs: run gpuprofd as root (`sudo gpuprofd …`) or \
         give it CAP_BPF, CAP_PERFMON, CAP_SYS_RESOURCE and CAP_DAC_READ_SEARCH \
         (`gpuprofd doctor` checks this machine)"
    )]
    Permission {
        #[source]
        source: aya::EbpfError,
    },
    #[error(
        "the kernel refused gpuprofd's eBPF object: {source}. It needs Linux ≥ 5.15 with BPF, \
         BTF, uprobes and ring buffers (`gpuprofd doctor` says which piece is missing)"
    )]
    Load {
        #[source]
        source: aya::EbpfError,
    },
    #[error("the eBPF object has no map \"{name}\": rebuild gpuprofd (`cargo xtask build`)")]
    MissingMap { name: &'static str },
    #[error("BPF map \"{name}\": {source}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("could not watch the ring buffer: {0}")]
    Io(#[from] std::io::Error),
}

/// The embedded eBPF object's bytes.
pub fn object() -> &'static [u8] {
    EBPF_OBJECT
}

/// Loads the eBPF object (programs are loaded and attached by `attach`).
pub fn load(ring_bytes: u32) -> Result<Ebpf, CaptureError> {
    if EBPF_OBJECT.is_empty() {
        return Err(CaptureError::NoObject);
    }
    raise_memlock_rlimit();
    EbpfLoader::new()
        .map_max_entries(maps::EVENTS, ring_bytes)
        // PEND_RT and PEND_DRV are task-local storage, which aya creates but has no userspace
        // type for; only the probes use them.
        .allow_unsupported_maps()
        .load(EBPF_OBJECT)
        .map_err(|source| {
            if is_permission_error(&source) {
                CaptureError::Permission { source }
            } else {
                CaptureError::Load { source }
            }
        })
}

fn is_permission_error(e: &aya::EbpfError) -> bool {
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = cur {
        if says_permission_denied(&err.to_string()) {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Whether an error's text is the kernel refusing for want of privilege (EPERM or EACCES).
pub(crate) fn says_permission_denied(s: &str) -> bool {
    s.contains("Operation not permitted") || s.contains("Permission denied")
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; raise it where we can.
fn raise_memlock_rlimit() {
    let rl = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall with a valid struct; failure is harmless on modern kernels.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) };
}

/// Which processes the probes record (decided in the kernel: an unselected process costs a
/// map lookup per hooked call and produces no record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Filter {
    All,
    Tgids(Vec<u32>),
    /// These processes and every process they start, at any depth (a wrapped command's tree:
    /// see [`follow_forks`] and [`seed_tree`]).
    Tree,
    /// Processes in these cgroups (v2 ids), at any depth below them.
    Cgroups(Vec<u64>),
}

fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> CaptureError {
    move |source| CaptureError::Map { name, source }
}

/// Installs `filter`.
/// Takes a call stack on every `period`th launch, blocking sync and blocking copy of each
/// thread (0: never).
pub fn set_stack_period(ebpf: &mut Ebpf, period: u32) -> Result<(), CaptureError> {
    let map = ebpf
        .map_mut(maps::STACK_CONFIG)
        .ok_or(CaptureError::MissingMap {
            name: maps::STACK_CONFIG,
        })?;
    let mut cfg: Array<_, u32> = Array::try_from(map).map_err(map_err(maps::STACK_CONFIG))?;
    cfg.set(0, period, 0).map_err(map_err(maps::STACK_CONFIG))
}

#[repr(transparent)]
#[derive(Clone, Copy)]
struct PyProcValue(profiler_common::PyProc);
// SAFETY: PyProc is repr(C), plain integers, no padding bytes (asserted size, explicit _pad).
unsafe impl aya::Pod for PyProcValue {}

/// Lets the probes read the Python frames of `tgid`, a CPython process (or stop: `None`).
pub fn set_python(
    ebpf: &mut Ebpf,
    tgid: u32,
    proc_: Option<profiler_common::PyProc>,
) -> Result<(), CaptureError> {
    let map = ebpf
        .map_mut(maps::PY_PROCS)
        .ok_or(CaptureError::MissingMap {
            name: maps::PY_PROCS,
        })?;
    let mut m: BpfHashMap<_, u32, PyProcValue> =
        BpfHashMap::try_from(map).map_err(map_err(maps::PY_PROCS))?;
    match proc_ {
        Some(p) => m
            .insert(tgid, PyProcValue(p), 0)
            .map_err(map_err(maps::PY_PROCS)),
        None => {
            let _ = m.remove(&tgid);
            Ok(())
        }
    }
}

pub fn set_filter(ebpf: &mut Ebpf, filter: &Filter) -> Result<(), CaptureError> {
    match filter {
        Filter::All => {}
        Filter::Tgids(tgids) => {
            let map = ebpf
                .map_mut(maps::FILTER_TGIDS)
                .ok_or(CaptureError::MissingMap {
                    name: maps::FILTER_TGIDS,
                })?;
            let mut set: BpfHashMap<_, u32, u8> =
                BpfHashMap::try_from(map).map_err(map_err(maps::FILTER_TGIDS))?;
            for t in tgids {
                set.insert(t, 1, 0).map_err(map_err(maps::FILTER_TGIDS))?;
            }
        }
        Filter::Cgroups(ids) => add_cgroups(ebpf, ids)?,
        Filter::Tree => {}
    }
    let map = ebpf
        .map_mut(maps::FILTER_MODE)
        .ok_or(CaptureError::MissingMap {
            name: maps::FILTER_MODE,
        })?;
    let mut mode: Array<_, u32> = Array::try_from(map).map_err(map_err(maps::FILTER_MODE))?;
    let v = match filter {
        Filter::All => FILTER_ALL,
        Filter::Tgids(_) => FILTER_TGIDS,
        Filter::Cgroups(_) => FILTER_CGROUPS,
        Filter::Tree => profiler_common::FILTER_TREE,
    };
    mode.set(0, v, 0).map_err(map_err(maps::FILTER_MODE))
}

fn tgid_set(ebpf: &mut Ebpf) -> Result<BpfHashMap<&mut aya::maps::MapData, u32, u8>, CaptureError> {
    let map = ebpf
        .map_mut(maps::FILTER_TGIDS)
        .ok_or(CaptureError::MissingMap {
            name: maps::FILTER_TGIDS,
        })?;
    BpfHashMap::try_from(map).map_err(map_err(maps::FILTER_TGIDS))
}

/// Selects (or deselects) `tgid` in the tree mode: while the daemon's own tgid is selected, the
/// fork watcher selects the process it starts, before that process runs its first instruction.
/// The daemon selects itself around the command's spawn only.
pub fn seed_tree(ebpf: &mut Ebpf, tgid: u32, on: bool) -> Result<(), CaptureError> {
    let mut set = tgid_set(ebpf)?;
    if on {
        set.insert(tgid, 1, 0).map_err(map_err(maps::FILTER_TGIDS))
    } else {
        let _ = set.remove(&tgid);
        Ok(())
    }
}

/// The processes the tgid (or tree) filter selects now: in the tree mode, the live processes
/// of the command's tree (the probes remove a process at its end).
pub fn selected_tgids(ebpf: &mut Ebpf) -> Result<Vec<u32>, CaptureError> {
    let set = tgid_set(ebpf)?;
    let mut v: Vec<u32> = set.keys().filter_map(Result::ok).collect();
    v.sort_unstable();
    Ok(v)
}

/// Adds cgroups to the selection (a job whose cgroup appeared after the start) and forgets
/// every cached per-process decision, so processes already seen are decided again.
pub fn add_cgroups(ebpf: &mut Ebpf, ids: &[u64]) -> Result<(), CaptureError> {
    {
        let map = ebpf
            .map_mut(maps::FILTER_CGROUPS)
            .ok_or(CaptureError::MissingMap {
                name: maps::FILTER_CGROUPS,
            })?;
        let mut set: BpfHashMap<_, u64, u8> =
            BpfHashMap::try_from(map).map_err(map_err(maps::FILTER_CGROUPS))?;
        for id in ids {
            set.insert(id, 1, 0)
                .map_err(map_err(maps::FILTER_CGROUPS))?;
        }
    }
    let map = ebpf
        .map_mut(maps::FILTER_VERDICT)
        .ok_or(CaptureError::MissingMap {
            name: maps::FILTER_VERDICT,
        })?;
    let mut verdicts: BpfHashMap<_, u32, u8> =
        BpfHashMap::try_from(map).map_err(map_err(maps::FILTER_VERDICT))?;
    let keys: Vec<u32> = verdicts.keys().filter_map(Result::ok).collect();
    for k in keys {
        let _ = verdicts.remove(&k);
    }
    Ok(())
}

/// Per-kind counters summed over CPUs, indexed by record kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindCounts(pub [u64; MAX_KINDS as usize]);

impl KindCounts {
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// `(name, count)` for every record kind, for reports.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        (1..MAX_KINDS)
            .filter(|&k| kind::written_by_probes(k))
            .map(|k| (kind_name(k), self.0[k as usize]))
            .collect()
    }
}

/// The report's name for a record kind.
pub fn kind_name(k: u32) -> &'static str {
    kind::name(k).unwrap_or("other")
}

/// `drops` for the report's meta from the `DROPS` counters indexed by kind: every known kind present
/// (0 included); counts at indexes that are no kind are summed under `"other"` when non-zero.
pub fn drops_by_kind(counts: &[u64]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for k in (1..MAX_KINDS).filter(|&k| kind::written_by_probes(k)) {
        out.insert(kind::name(k).unwrap_or("other").to_owned(), 0);
    }
    for (i, &c) in counts.iter().enumerate() {
        let name = u32::try_from(i)
            .ok()
            .filter(|&k| kind::written_by_probes(k))
            .and_then(kind::name)
            .unwrap_or("other");
        if c != 0 || name != "other" {
            *out.entry(name.to_owned()).or_insert(0) += c;
        }
    }
    out
}

/// The first `n` counters of a per-CPU counter array, summed over CPUs.
fn read_per_cpu(ebpf: &Ebpf, name: &'static str, n: u32) -> Result<Vec<u64>, CaptureError> {
    let map = ebpf.map(name).ok_or(CaptureError::MissingMap { name })?;
    let arr: PerCpuArray<_, u64> =
        PerCpuArray::try_from(map).map_err(|source| CaptureError::Map { name, source })?;
    (0..n)
        .map(|k| {
            arr.get(&k, 0)
                .map(|vals| vals.iter().sum())
                .map_err(|source| CaptureError::Map { name, source })
        })
        .collect()
}

/// Reads a per-CPU counter array (`DROPS` or `SUBMITTED`).
pub fn read_counts(ebpf: &Ebpf, name: &'static str) -> Result<KindCounts, CaptureError> {
    let mut out = KindCounts::default();
    for (k, v) in read_per_cpu(ebpf, name, MAX_KINDS)?.into_iter().enumerate() {
        out.0[k] = v;
    }
    Ok(out)
}

/// The probes' rare paths so far (`FAULTS`), by name: every fault, zeros included.
pub fn read_faults(ebpf: &Ebpf) -> Result<BTreeMap<String, u64>, CaptureError> {
    let counts = read_per_cpu(ebpf, maps::FAULTS, fault::COUNT)?;
    Ok((0..fault::COUNT)
        .zip(counts)
        .map(|(f, n)| (fault::name(f).unwrap_or("other").to_owned(), n))
        .collect())
}

/// How full one of the eBPF object's state maps is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MapFill {
    pub map: &'static str,
    /// Entries now (a count taken while the probes may be adding and removing some).
    pub entries: u32,
    /// The map's size (`max_entries`).
    pub capacity: u32,
}

/// The fill of every map in [`maps::STATE`] the object has: what the probes keep per process
/// and per thread. Costs one `bpf(BPF_MAP_GET_NEXT_KEY)` per entry.
pub fn map_fill(ebpf: &Ebpf) -> Vec<MapFill> {
    use aya::maps::Map;
    maps::STATE
        .iter()
        .filter_map(|&name| {
            let data = match ebpf.map(name)? {
                Map::HashMap(d) | Map::LruHashMap(d) => d,
                _ => return None,
            };
            let info = data.info().ok()?;
            let entries = count_keys(data.fd().as_fd(), info.key_size(), info.max_entries())?;
            Some(MapFill {
                map: name,
                entries,
                capacity: info.max_entries(),
            })
        })
        .collect()
}

/// The keys in the hash map `fd` (key size `key_size`), walked with `BPF_MAP_GET_NEXT_KEY`;
/// at most `capacity` (a walk restarts from the first key when the one it stands on is removed
/// meanwhile, so it is bounded rather than trusted to end).
fn count_keys(fd: std::os::fd::BorrowedFd<'_>, key_size: u32, capacity: u32) -> Option<u32> {
    const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
    #[repr(C)]
    struct NextKey {
        map_fd: u32,
        _pad: u32,
        key: u64,
        next_key: u64,
    }
    let size = key_size as usize;
    if size == 0 || size > 64 {
        return None;
    }
    let (mut cur, mut next) = ([0u8; 64], [0u8; 64]);
    let mut n = 0u32;
    let mut first = true;
    while n < capacity {
        let attr = NextKey {
            map_fd: fd.as_raw_fd() as u32,
            _pad: 0,
            key: if first { 0 } else { cur.as_ptr() as u64 },
            next_key: next.as_mut_ptr() as u64,
        };
        // SAFETY: BPF_MAP_GET_NEXT_KEY reads `key_size` bytes at `key` (or none when it is 0)
        // and writes `key_size` bytes at `next_key`; both buffers hold 64.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_GET_NEXT_KEY,
                &attr as *const NextKey,
                std::mem::size_of::<NextKey>() as u32,
            )
        };
        if rc != 0 {
            // ENOENT: past the last key.
            break;
        }
        n += 1;
        first = false;
        cur[..size].copy_from_slice(&next[..size]);
    }
    Some(n)
}

/// Takes the ring buffer out of the object for the reader task.
pub fn take_ring(ebpf: &mut Ebpf) -> Result<RingBuf<MapData>, CaptureError> {
    let map = ebpf
        .take_map(maps::EVENTS)
        .ok_or(CaptureError::MissingMap { name: maps::EVENTS })?;
    RingBuf::try_from(map).map_err(|source| CaptureError::Map {
        name: maps::EVENTS,
        source,
    })
}

/// Raw records, each prefixed by its length as a little-endian u32.
#[derive(Default)]
pub struct Batch {
    pub bytes: Vec<u8>,
    pub records: usize,
    /// Of `records`, those made from the in-kernel launch counters (not read from the ring).
    pub counted_records: usize,
    /// Launches those carry.
    pub counted_launches: u64,
}

impl Batch {
    fn push(&mut self, rec: &[u8]) {
        self.bytes
            .extend_from_slice(&(rec.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(rec);
        self.records += 1;
    }

    /// [`Self::push`], the record relabelled in place where `origin` says a runtime made it.
    fn push_from_ring(&mut self, rec: &[u8], origin: &mut dyn origin::LaunchOrigin) {
        self.push(rec);
        let start = self.bytes.len() - rec.len();
        origin::relabel(&mut self.bytes[start..], origin);
    }

    /// The records in order.
    pub fn iter(&self) -> BatchIter<'_> {
        records(&self.bytes)
    }
}

/// The records in `bytes`, each prefixed by its length (a [`Batch`]'s layout, also used by the
/// capture file); stops at the first incomplete one.
pub fn records(bytes: &[u8]) -> BatchIter<'_> {
    BatchIter { rest: bytes }
}

pub struct BatchIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.len() < 4 {
            return None;
        }
        let n = u32::from_le_bytes(self.rest[..4].try_into().ok()?) as usize;
        let rec = self.rest.get(4..4 + n)?;
        self.rest = &self.rest[4 + n..];
        Some(rec)
    }
}

/// Counters kept by the reader.
#[derive(Debug, Default)]
pub struct ReaderStats {
    /// Records read from the ring buffer.
    pub read: AtomicU64,
    /// Records read but not handed to the aggregator because its channel was full.
    pub channel_dropped: AtomicU64,
    /// Launches read from the in-kernel counters (service mode).
    pub counted_launches: AtomicU64,
    /// Of those, launches not handed to the aggregator because its channel was full.
    pub counted_dropped: AtomicU64,
    /// Entries of the launch counters as of the last read (processes that ended removed).
    pub counted_entries: AtomicU64,
}

/// [`map_fill`], and the launch counters' fill when launches are counted.
pub fn fill(ebpf: &Ebpf, stats: &ReaderStats, counting: bool) -> Vec<MapFill> {
    let mut v = map_fill(ebpf);
    if counting {
        v.push(MapFill {
            map: maps::LAUNCH_COUNTS,
            entries: stats.counted_entries.load(Ordering::Relaxed) as u32,
            capacity: profiler_common::LAUNCH_COUNTS_MAX,
        });
    }
    v
}

/// The ring buffer's file descriptor (for diagnostics).
pub fn ring_fd(ring: &RingBuf<MapData>) -> i32 {
    ring.as_raw_fd()
}

#[cfg(test)]
mod tests;

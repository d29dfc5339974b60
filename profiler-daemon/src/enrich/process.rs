//! Process facts from procfs (comm, cmdline, executable mappings) and host-stub symbolisation.
//!
//! A runtime launch carries the host-stub address the program passed to `cudaLaunchKernel`; for
//! programs compiled by nvcc that address is a function whose symbol is the kernel's mangled
//! name. When the registration (`__cudaRegisterFunction`) happened before gpuprofd attached,
//! this is how such a launch still gets its name: address → mapping → file offset → ELF symbol.

use crate::discovery::{ExecMapping, elf::SymbolIndex, parse_maps};
use std::collections::HashMap;
use std::fs;
use std::sync::Mutex;

/// What procfs says about a process, read once when it is first seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcInfo {
    pub comm: String,
    pub cmdline: String,
}

/// Longest cmdline kept (bytes).
const MAX_CMDLINE: usize = 4096;

/// At most `max` bytes from the start of `path`: a process chooses how long its command line
/// and environment are (up to a quarter of its stack limit), the daemon does not read it all.
pub fn read_head(path: &str, max: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    fs::File::open(path)?
        .take(max as u64)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// Most of a process's environment read when looking for job variables.
pub const MAX_ENVIRON: usize = 1 << 20;

/// Reads `/proc/TGID/{comm,cmdline}`; `None` when the process is gone.
pub fn read_proc_info(tgid: u32) -> Option<ProcInfo> {
    let comm = fs::read_to_string(format!("/proc/{tgid}/comm")).ok()?;
    let raw = read_head(&format!("/proc/{tgid}/cmdline"), MAX_CMDLINE).unwrap_or_default();
    let cmdline = raw
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    Some(ProcInfo {
        comm: comm.trim_end().to_owned(),
        cmdline,
    })
}

/// The fields of `/proc/PID/stat` the daemon uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    /// `R`, `S`, `D`, `Z` (a zombie: for a process's main thread, it ended while others run)…
    pub state: char,
    pub ppid: u32,
    /// Field 22, clock ticks after boot: tells a process from a later one given the same pid.
    pub start_time: u64,
}

/// Reads `/proc/TGID/stat`; `None` when the process is gone.
pub fn read_stat(tgid: u32) -> Option<Stat> {
    let stat = fs::read_to_string(format!("/proc/{tgid}/stat")).ok()?;
    // pid (comm) state ppid …; comm may contain spaces and parentheses: split at the last ')'
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    Some(Stat {
        comm,
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        start_time: rest.get(19)?.parse().ok()?,
    })
}

/// Whether a process that started at `start_ticks` ([`Stat::start_time`]) started after
/// `ts_ns` (CLOCK_MONOTONIC, as eBPF records carry), i.e. cannot have made that record.
///
/// The start time counts boot-time clock ticks, rounded down; the monotonic clock stops while
/// the machine is suspended, so the difference between the two clocks is taken away first. An
/// answer of `false` may still be a later process started within the same tick.
pub fn started_after(start_ticks: u64, ts_ns: u64) -> bool {
    let start_boot_ns = start_ticks.saturating_mul(1_000_000_000) / clock_ticks_per_sec();
    start_boot_ns.saturating_sub(crate::sys::clock::boot_minus_monotonic_ns()) > ts_ns
}

fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as u64 } else { 100 }
}

/// The owner (real uid, as the kernel's exit record has it) of a running process.
pub fn process_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_uid(&status)
}

/// The real uid from a `/proc/PID/status` text (`Uid:\treal\teffective\tsaved\tfs`).
pub fn parse_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The start time of `tgid` ([`Stat::start_time`]).
pub fn start_time(tgid: u32) -> Option<u64> {
    read_stat(tgid).map(|s| s.start_time)
}

/// Names host-stub addresses from the ELF symbol tables of the files a process maps.
///
/// Each process's executable mappings are remembered when it is first seen ([`Self::remember`]),
/// so addresses of a process that has exited by report time still resolve while its files exist.
#[derive(Default)]
pub struct ProcSymbols {
    inner: Mutex<Inner>,
    /// Signalled when a file's index is in (see [`Inner::loading`]).
    loaded: std::sync::Condvar,
    /// Files read so far.
    #[cfg(test)]
    reads: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Inner {
    maps: HashMap<u32, Vec<ExecMapping>>,
    /// Symbol index per file (None: unreadable or not ELF), by identity rather than path: the
    /// same library seen through every container's `/proc/PID/root` is read once.
    files: HashMap<FileKey, Cached>,
    /// What the indexes in `files` hold, in bytes ([`SymbolIndex::heap_bytes`]).
    bytes: usize,
    /// Advances at every use of an index: the least recently used goes first.
    clock: u64,
    /// Files whose index a thread is reading now: another thread that needs one waits for it
    /// rather than reading the file too (the stack namer and the kernel namer both meet
    /// PyTorch's libraries first thing).
    loading: std::collections::HashSet<FileKey>,
}

/// One file's symbol index (`None`: unreadable or not ELF) and when it was last used.
struct Cached {
    index: Option<SymbolIndex>,
    bytes: usize,
    used: u64,
}

impl Inner {
    /// Keeps `index` for `key`, then gives up the least recently used indexes (never the new
    /// one) until the cache is within [`MAX_SYMBOL_FILES`] files and `max_bytes`.
    fn insert(&mut self, key: FileKey, index: Option<SymbolIndex>, max_bytes: usize) {
        if self.files.contains_key(&key) {
            return;
        }
        let bytes = index.as_ref().map_or(0, |i| i.heap_bytes());
        self.clock += 1;
        self.bytes += bytes;
        self.files.insert(
            key,
            Cached {
                index,
                bytes,
                used: self.clock,
            },
        );
        while self.files.len() > 1
            && (self.files.len() > MAX_SYMBOL_FILES || self.bytes > max_bytes)
        {
            // Over the bytes only: an entry that holds none (an unreadable file) frees nothing.
            let any = self.files.len() > MAX_SYMBOL_FILES;
            let Some((&old, _)) = self
                .files
                .iter()
                .filter(|(k, c)| **k != key && (any || c.bytes > 0))
                .min_by_key(|(_, c)| c.used)
            else {
                break;
            };
            if let Some(c) = self.files.remove(&old) {
                self.bytes -= c.bytes;
            }
        }
    }

    /// The index of `key`, marked as used now.
    fn get(&mut self, key: &FileKey) -> Option<&SymbolIndex> {
        self.clock += 1;
        let c = self.files.get_mut(key)?;
        c.used = self.clock;
        c.index.as_ref()
    }
}

/// Takes a file off [`Inner::loading`] and wakes the waiters, however the read ended.
struct Loading<'a> {
    symbols: &'a ProcSymbols,
    key: FileKey,
}

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.symbols.inner.lock() {
            inner.loading.remove(&self.key);
        }
        self.symbols.loaded.notify_all();
    }
}

/// A file's identity: device, inode, size and modification time (a file replaced in place
/// gets a new entry).
pub type FileKey = (u64, u64, u64, i64, i64);

/// The identity of the file at `path`, if it can be read.
pub fn file_key(path: &std::path::Path) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
}

/// Most files whose symbol index is kept at once (each keeps its file open); past it, or past
/// [`MAX_SYMBOL_BYTES`], the least recently used index is given up (and read again if needed).
const MAX_SYMBOL_FILES: usize = 256;

/// Most memory the symbol indexes hold together (24 bytes per function symbol; names stay in
/// the file). PyTorch's three libraries made 17 MB of indexes (docs/VALIDATION.md): this keeps about seven
/// distinct PyTorch builds, a busy node's environments, however many there are.
const MAX_SYMBOL_BYTES: usize = 128 << 20;

impl ProcSymbols {
    pub fn new() -> Self {
        Self::default()
    }

    /// Snapshots the executable mappings of `tgid` (call when the process is first seen).
    pub fn remember(&self, tgid: u32) {
        if let Ok(text) = fs::read_to_string(format!("/proc/{tgid}/maps")) {
            let maps = parse_maps(&text);
            self.inner
                .lock()
                .expect("symbol cache poisoned")
                .maps
                .insert(tgid, maps);
        }
    }

    /// Forgets a process (its tgid may be reused).
    pub fn forget(&self, tgid: u32) {
        self.inner
            .lock()
            .expect("symbol cache poisoned")
            .maps
            .remove(&tgid);
    }

    /// The file (device, inode) whose executable mapping holds `addr` in `tgid`: `Ok(None)`
    /// when none does (code the process made itself), `Err(())` when the process's mappings
    /// cannot be read (it is gone). Reads the maps again, once, for an address the snapshot
    /// does not hold (a library mapped since).
    #[allow(clippy::result_unit_err)]
    pub fn file_at(&self, tgid: u32, addr: u64) -> Result<Option<(u64, u64)>, ()> {
        let find = |maps: &[ExecMapping]| {
            maps.iter()
                .find(|m| m.start <= addr && addr < m.end)
                .map(|m| (m.dev, m.inode))
        };
        {
            let inner = self.inner.lock().expect("symbol cache poisoned");
            if let Some(hit) = inner.maps.get(&tgid).and_then(|m| find(m)) {
                return Ok(Some(hit));
            }
        }
        let read = fs::read_to_string(format!("/proc/{tgid}/maps")).map_err(|_| ())?;
        let maps = parse_maps(&read);
        let hit = find(&maps);
        self.inner
            .lock()
            .expect("symbol cache poisoned")
            .maps
            .insert(tgid, maps);
        Ok(hit)
    }

    /// The symbol at exactly `addr` in `tgid`, if a mapped file has one.
    pub fn symbol_at(&self, tgid: u32, addr: u64) -> Option<String> {
        self.lookup(tgid, addr, |idx, vaddr, _| idx.lookup_exact(vaddr))?
            .2
    }

    /// What names a code address of `tgid` (`None`: no executable file mapping holds it).
    pub fn frame_at(&self, tgid: u32, addr: u64) -> Option<FrameAt> {
        // Lines are read inside the lookup: the path it hands over (`/proc/self/fd/N` when the
        // file had to be opened) is only valid until it returns.
        let mut source = Vec::new();
        let (module, file_offset, symbol) = self.lookup(tgid, addr, |idx, vaddr, path| {
            source = crate::enrich::stacks::lines::frames_at(path, vaddr);
            idx.lookup_containing(vaddr).map(|(n, _)| n)
        })?;
        Some(FrameAt {
            module,
            file_offset,
            symbol,
            source,
        })
    }

    /// `(file name, file offset, find(index, vaddr, path))` for the mapping of `addr` in `tgid`.
    fn lookup(
        &self,
        tgid: u32,
        addr: u64,
        find: impl FnOnce(&SymbolIndex, u64, &std::path::Path) -> Option<String>,
    ) -> Option<(String, u64, Option<String>)> {
        let mut inner = self.inner.lock().expect("symbol cache poisoned");
        if !inner.maps.contains_key(&tgid) {
            drop(inner);
            self.remember(tgid);
            inner = self.inner.lock().expect("symbol cache poisoned");
        }
        let holds = |maps: &[ExecMapping]| {
            maps.iter()
                .find(|m| m.start <= addr && addr < m.end)
                .cloned()
        };
        let m = match holds(inner.maps.get(&tgid)?) {
            Some(m) => m,
            None => {
                // Mapped after the snapshot (a library loaded later): look again, once per
                // address (callers cache the answer).
                drop(inner);
                self.remember(tgid);
                inner = self.inner.lock().expect("symbol cache poisoned");
                holds(inner.maps.get(&tgid)?)?
            }
        };
        let file_off = addr - m.start + m.offset;
        let clean = m
            .path
            .strip_suffix(" (deleted)")
            .unwrap_or(&m.path)
            .to_owned();
        let module = clean.rsplit('/').next().unwrap_or(&clean).to_owned();
        let Some(opened) = crate::discovery::open_mapping(tgid, &m) else {
            return Some((module, file_off, None));
        };
        let path = opened.path.as_path();
        let Some(key) = file_key(path) else {
            return Some((module, file_off, None));
        };
        while inner.loading.contains(&key) {
            inner = self.loaded.wait(inner).expect("symbol cache poisoned");
        }
        if !inner.files.contains_key(&key) {
            // Read without the lock: a large library takes a fifth of a second, and the
            // session takes the lock to remember a new process's mappings.
            inner.loading.insert(key);
            drop(inner);
            // Should the read panic, the guard takes the file off the list as it unwinds.
            let loading = Loading { symbols: self, key };
            let t0 = std::time::Instant::now();
            #[cfg(test)]
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let loaded = SymbolIndex::load(path).ok();
            tracing::debug!(
                file = %m.path,
                ms = t0.elapsed().as_millis() as u64,
                functions = loaded.as_ref().map_or(0, |i| i.len()),
                "symbol tables read"
            );
            inner = self.inner.lock().expect("symbol cache poisoned");
            inner.insert(key, loaded, MAX_SYMBOL_BYTES);
            inner.loading.remove(&key);
            // Done here, under the lock the guard would take.
            std::mem::forget(loading);
            self.loaded.notify_all();
        }
        let Some(idx) = inner.get(&key) else {
            return Some((module, file_off, None));
        };
        let found = idx
            .vaddr_of_file_offset(file_off)
            .and_then(|vaddr| find(idx, vaddr, path));
        Some((module, file_off, found))
    }
}

/// A code address named: [`ProcSymbols::frame_at`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameAt {
    /// The mapped file's name, no directory.
    pub module: String,
    /// Where in the file the address lies.
    pub file_offset: u64,
    /// The function symbol containing the address, if the file's symbol tables have one.
    pub symbol: Option<String>,
    /// What DWARF says of the address (see [`crate::enrich::stacks::lines`]).
    pub source: Vec<crate::enrich::stacks::lines::SourceFrame>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real symbol index (of this test binary: thousands of function symbols).
    fn index() -> SymbolIndex {
        let data = fs::read("/proc/self/exe").unwrap();
        let idx = SymbolIndex::from_elf(&data).unwrap();
        assert!(idx.len() > 1000, "{}", idx.len());
        idx
    }

    fn key(n: u64) -> FileKey {
        (1, n, 0, 0, 0)
    }

    /// Past its byte bound the cache gives up the least recently used index, not all of them
    /// and not the one just read; its byte count is what the kept indexes hold.
    #[test]
    fn uid_from_status() {
        let s =
            "Name:\tpython3\nUmask:\t0022\nUid:\t1000\t0\t1000\t1000\nGid:\t100\t100\t100\t100\n";
        assert_eq!(parse_uid(s), Some(1000));
        assert_eq!(parse_uid("Name:\tx\n"), None);
        assert_eq!(parse_uid("Uid:\tx\n"), None);
        assert_eq!(
            process_uid(std::process::id()),
            Some(unsafe { libc::getuid() })
        );
    }

    #[test]
    fn the_cache_keeps_the_recently_used_indexes_within_its_bytes() {
        let one = index().heap_bytes();
        assert!(one >= 24 * 1000, "{one}");
        let mut c = Inner::default();
        let max = 2 * one + one / 2;
        c.insert(key(1), Some(index()), max);
        c.insert(key(2), Some(index()), max);
        assert_eq!((c.files.len(), c.bytes), (2, 2 * one));
        // 1 used after 2: 2 is the least recently used when 3 comes in.
        assert!(c.get(&key(1)).is_some());
        c.insert(key(3), Some(index()), max);
        let mut kept: Vec<u64> = c.files.keys().map(|k| k.1).collect();
        kept.sort();
        assert_eq!((kept, c.bytes), (vec![1, 3], 2 * one));
        assert!(c.get(&key(2)).is_none());
        // An unreadable file holds nothing and pushes nothing out ...
        c.insert(key(4), None, max);
        assert_eq!((c.files.len(), c.bytes), (3, 2 * one));
        // ... nor is it given up for bytes it does not hold, though the least recently used.
        c.insert(key(6), Some(index()), max);
        let mut kept: Vec<u64> = c.files.keys().map(|k| k.1).collect();
        kept.sort();
        assert_eq!((kept, c.bytes), (vec![3, 4, 6], 2 * one));
        // One index larger than the whole bound is still kept (alone): the lookup that read it
        // needs it.
        c.insert(key(5), Some(index()), one / 2);
        let mut kept: Vec<u64> = c.files.keys().map(|k| k.1).collect();
        kept.sort();
        assert_eq!((kept, c.bytes), (vec![4, 5], one));
    }

    /// The file bound holds too (each index keeps its file open).
    #[test]
    fn the_cache_keeps_at_most_its_files() {
        let mut c = Inner::default();
        for n in 0..(MAX_SYMBOL_FILES as u64 + 10) {
            c.insert(key(n), None, usize::MAX);
        }
        assert_eq!(c.files.len(), MAX_SYMBOL_FILES);
        // The first ten (least recently used) went.
        assert!((0..10).all(|n| !c.files.contains_key(&key(n))));
        assert!(c.files.contains_key(&key(10)));
    }

    /// Threads that need the same file's symbols at once read it once: the others wait.
    #[test]
    fn a_file_wanted_by_several_threads_is_read_once() {
        let symbols = ProcSymbols::new();
        let pid = std::process::id();
        // Inside this function, in this (large, unstripped) test binary.
        let here = a_file_wanted_by_several_threads_is_read_once as *const () as u64 + 1;
        let start = std::sync::Barrier::new(4);
        let names: Vec<Option<String>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        symbols.frame_at(pid, here).and_then(|f| f.symbol)
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for n in &names {
            assert!(
                n.as_deref()
                    .is_some_and(|n| n.contains("a_file_wanted_by_several_threads_is_read_once")),
                "{names:?}"
            );
        }
        assert_eq!(symbols.reads.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(symbols.inner.lock().unwrap().loading.is_empty());
    }

    #[test]
    fn start_time_of_this_process() {
        let me = read_stat(std::process::id()).expect("own stat");
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
        let mine = start_time(std::process::id()).expect("own start time");
        assert_eq!(mine, me.start_time);
        assert!(mine > 0);
        let init = start_time(1).expect("pid 1");
        assert!(init <= mine, "pid 1 started before us");
        assert_eq!(start_time(u32::MAX), None);
    }

    #[test]
    fn a_record_made_now_is_not_before_this_process_started() {
        let mine = start_time(std::process::id()).expect("own start time");
        let now_ns = crate::sys::clock::monotonic_ns();
        assert!(!started_after(mine, now_ns));
        // A record from before this process existed (one second before it started) cannot be
        // its own; a process that starts an hour after this one did not make a record now.
        let hz = clock_ticks_per_sec();
        let start_mono = mine * 1_000_000_000 / hz - crate::sys::clock::boot_minus_monotonic_ns();
        assert!(started_after(
            mine,
            start_mono.saturating_sub(1_000_000_000)
        ));
        assert!(started_after(mine + 3600 * hz, now_ns));
    }

    #[test]
    fn own_process_info() {
        let me = std::process::id();
        let info = read_proc_info(me).expect("own /proc entry");
        assert!(!info.comm.is_empty());
        assert!(info.cmdline.contains("gpuprofd") || info.cmdline.contains("profiler"));
        assert_eq!(read_proc_info(u32::MAX), None);
    }

    #[inline(never)]
    #[unsafe(no_mangle)]
    pub extern "C" fn gpuprofd_test_symbol_target() -> u32 {
        std::hint::black_box(42)
    }

    #[test]
    fn names_a_function_in_this_test_binary() {
        let s = ProcSymbols::new();
        let addr = gpuprofd_test_symbol_target as *const () as u64;
        assert_eq!(
            s.symbol_at(std::process::id(), addr).as_deref(),
            Some("gpuprofd_test_symbol_target")
        );
        assert_eq!(s.symbol_at(std::process::id(), 8), None);
    }
}

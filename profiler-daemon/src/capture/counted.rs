//! Launches counted in the kernel (service mode): read `LAUNCH_COUNTS`, turn what grew into
//! [`kind::LAUNCHES`] records, and remove the entries of processes that ended.
//!
//! The probes add each launch to a counter keyed by process and launch configuration instead of
//! writing a record. The reader calls [`LaunchCounts::read`] every period and, so that a
//! process's launches always reach the aggregator before its end, right before it hands over an
//! exit or exec record whose time is later than the last read's start (every launch of a process
//! that had ended when a read started is in that read). Nothing is lost: a count only grows
//! while its process lives, the daemon keeps the last value it saw, and an entry is removed only
//! after a read that started once its process was gone. A launch that finds the map full is
//! recorded in the ring instead (see the eBPF object's `count_launch`).

use super::origin::LaunchOrigin;
use super::{Batch, CaptureError};
use aya::Ebpf;
use aya::maps::{Array, MapData};
use profiler_common::{
    GATE_OPEN, GATE_SHUT, Header, LAUNCHES_COUNTED, LAUNCHES_TO_RING, LaunchCount, LaunchKey,
    LaunchesBody, Record, decode::encode, flags, kind, maps,
};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// Entries fetched per `BPF_MAP_LOOKUP_BATCH` call.
const CHUNK: usize = 1024;

/// The reader's side of the counters: the map, and the count last seen for each entry.
pub struct LaunchCounts {
    map: Fetcher,
    /// Count last seen and first launch time of each entry; ordered by tgid first, so one
    /// process's entries are a range.
    seen: BTreeMap<LaunchKey, (u64, u64)>,
    /// CLOCK_MONOTONIC when the last read started (0: never read).
    read_started_ns: u64,
}

/// The map and the buffers its batch reads fill.
struct Fetcher {
    fd: OwnedFd,
    keys: Vec<LaunchKey>,
    values: Vec<LaunchCount>,
}

/// What the launch counts read so far say about an exec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecSeen {
    /// No launch of the process has been read.
    Nothing,
    /// Every launch read came after the exec: the new program's, already handed over.
    OnlyNewProgram,
    /// Some launches read came before it: the old program launched.
    OldProgramLaunched,
}

/// The probes' launch mode switch (held by the aggregator: deep captures need every launch as
/// a record while they run).
pub struct LaunchMode {
    map: Array<MapData, u32>,
    counting: bool,
}

impl LaunchMode {
    /// Counting (`true`) or a record per launch (`false`), from now on.
    pub fn set(&mut self, counting: bool) -> Result<(), CaptureError> {
        let v = if counting {
            LAUNCHES_COUNTED
        } else {
            LAUNCHES_TO_RING
        };
        self.map.set(0, v, 0).map_err(|source| CaptureError::Map {
            name: maps::LAUNCH_MODE,
            source,
        })?;
        self.counting = counting;
        Ok(())
    }

    pub fn counting(&self) -> bool {
        self.counting
    }
}

/// The duty cycle's gate on counted launches ([`maps::LAUNCH_GATE`]): shut while its links go
/// in and out, open for the window, so that a window lasts exactly from one write to the other.
pub struct LaunchGate(Array<MapData, u32>);

impl LaunchGate {
    /// Takes the gate out of the object (open, as the probes start).
    pub fn take(ebpf: &mut Ebpf) -> Result<LaunchGate, CaptureError> {
        let map = ebpf
            .take_map(maps::LAUNCH_GATE)
            .ok_or(CaptureError::MissingMap {
                name: maps::LAUNCH_GATE,
            })?;
        Array::try_from(map)
            .map(LaunchGate)
            .map_err(|source| CaptureError::Map {
                name: maps::LAUNCH_GATE,
                source,
            })
    }

    /// Opens (`true`) or shuts the gate, and returns the time it did (monotonic ns: the
    /// records' clock), read right before an opening write and right after a shutting one, so
    /// that the time between them holds every launch counted (a write takes microseconds).
    pub fn set(&mut self, open: bool) -> Result<u64, CaptureError> {
        let v = if open { GATE_OPEN } else { GATE_SHUT };
        let before = crate::sys::clock::monotonic_ns();
        self.0.set(0, v, 0).map_err(|source| CaptureError::Map {
            name: maps::LAUNCH_GATE,
            source,
        })?;
        Ok(if open {
            before
        } else {
            crate::sys::clock::monotonic_ns()
        })
    }
}

/// Takes the counters and the mode switch out of the object and checks that the kernel can read
/// the counters in batches; the probes keep recording every launch until the mode is set.
pub fn take(ebpf: &mut Ebpf) -> Result<(LaunchCounts, LaunchMode), CaptureError> {
    let missing = |name| CaptureError::MissingMap { name };
    let counts = ebpf
        .take_map(maps::LAUNCH_COUNTS)
        .ok_or(missing(maps::LAUNCH_COUNTS))?;
    let data: MapData = match counts {
        aya::maps::Map::HashMap(d) => d,
        _ => return Err(missing(maps::LAUNCH_COUNTS)),
    };
    let fd = data
        .fd()
        .as_fd()
        .try_clone_to_owned()
        .map_err(CaptureError::Io)?;
    let mode = ebpf
        .take_map(maps::LAUNCH_MODE)
        .ok_or(missing(maps::LAUNCH_MODE))?;
    let mode = Array::try_from(mode).map_err(|source| CaptureError::Map {
        name: maps::LAUNCH_MODE,
        source,
    })?;
    let mut map = Fetcher {
        fd,
        keys: vec![LaunchKey::default(); CHUNK],
        values: vec![LaunchCount::default(); CHUNK],
    };
    // An empty map, read once: a kernel without batch lookups says so here, not mid-run.
    map.fetch(|_, _| {})?;
    let counts = LaunchCounts {
        map,
        seen: BTreeMap::new(),
        read_started_ns: 0,
    };
    Ok((
        counts,
        LaunchMode {
            map: mode,
            counting: false,
        },
    ))
}

impl LaunchCounts {
    /// Whether a record (exit or exec) with time `ts_ns` must wait for a read first: its
    /// process's last launches may not have been read yet.
    pub fn needs_read_before(&self, ts_ns: u64) -> bool {
        ts_ns >= self.read_started_ns
    }

    /// Appends a `LAUNCHES` record to `batch` for every entry that grew since the last read;
    /// returns the launches they carry.
    pub fn read(
        &mut self,
        batch: &mut Batch,
        origin: &mut dyn LaunchOrigin,
    ) -> Result<u64, CaptureError> {
        self.read_split(batch, None, origin).map(|(n, _)| n)
    }

    /// [`Self::read`], except that the records of process `tgid`'s entries first made at or
    /// after `ts_ns` (an exec: the new program's) are returned to go after it, with their
    /// launches counted in the total. A driver launch that `origin` says a runtime made is
    /// reported under the runtime's API (see [`super::origin`]).
    pub fn read_split(
        &mut self,
        batch: &mut Batch,
        after: Option<(u32, u64)>,
        origin: &mut dyn LaunchOrigin,
    ) -> Result<(u64, Vec<Record<LaunchesBody>>), CaptureError> {
        self.read_started_ns = crate::sys::clock::monotonic_ns();
        let mut grew = Vec::new();
        let seen = &self.seen;
        self.map.fetch(|k, v| {
            let before = seen.get(k).map_or(0, |s| s.0);
            if v.count > before {
                grew.push((*k, *v));
            }
        })?;
        let mut total = 0;
        let mut held = Vec::new();
        for (k, v) in grew {
            let before = self
                .seen
                .insert(k, (v.count, v.first_ns))
                .map_or(0, |s| s.0);
            let n = v.count - before;
            total += n;
            let runtime = match k.caller {
                0 => None,
                c => origin.runtime_api(k.tgid, k.api, c),
            };
            let rec = Record {
                header: Header {
                    kind: kind::LAUNCHES,
                    api: runtime.unwrap_or(k.api),
                    tgid: k.tgid,
                    tid: 0,
                    // Stamped once per kernel tick per entry: at most a tick before the
                    // latest launch, and never put before the entry's first.
                    ts_ns: v.last_ns.max(v.first_ns),
                },
                body: LaunchesBody {
                    func: k.func,
                    stream: k.stream,
                    count: n,
                    grid: k.grid,
                    block: k.block,
                    shared_bytes: k.shared_bytes,
                    flags: match runtime {
                        Some(_) => k.flags | flags::DRIVER_HANDLE,
                        None => k.flags,
                    },
                },
            };
            match after {
                Some((t, ts)) if t == k.tgid && v.first_ns >= ts => held.push(rec),
                _ => batch.push(encode(&rec)),
            }
        }
        Ok((total, held))
    }

    /// Removes process `tgid`'s entries. Only after a read that started once it had ended.
    pub fn forget(&mut self, tgid: u32) {
        let keys: Vec<LaunchKey> = self.of(tgid).map(|(k, _)| *k).collect();
        for k in keys {
            self.seen.remove(&k);
            delete(&self.map.fd, &k);
        }
    }

    /// What the counts read so far say of process `tgid`'s exec at `ts_ns`.
    pub fn exec_seen(&self, tgid: u32, ts_ns: u64) -> ExecSeen {
        let mut seen = ExecSeen::Nothing;
        for (_, &(_, first_ns)) in self.of(tgid) {
            if first_ns < ts_ns {
                return ExecSeen::OldProgramLaunched;
            }
            seen = ExecSeen::OnlyNewProgram;
        }
        seen
    }

    fn of(&self, tgid: u32) -> impl Iterator<Item = (&LaunchKey, &(u64, u64))> {
        let lo = LaunchKey {
            tgid,
            ..Default::default()
        };
        self.seen
            .range(lo..)
            .take_while(move |(k, _)| k.tgid == tgid)
    }

    /// The processes that have entries (for the sweep of processes whose end was missed).
    pub fn tgids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.seen.keys().map(|k| k.tgid).collect();
        v.dedup();
        v
    }

    /// Entries the daemon holds a count for.
    pub fn entries(&self) -> usize {
        self.seen.len()
    }
}

impl Fetcher {
    /// Every entry of the map, through `BPF_MAP_LOOKUP_BATCH` ([`CHUNK`] per call).
    fn fetch(
        &mut self,
        mut each: impl FnMut(&LaunchKey, &LaunchCount),
    ) -> Result<(), CaptureError> {
        const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
        #[repr(C)]
        struct BatchAttr {
            in_batch: u64,
            out_batch: u64,
            keys: u64,
            values: u64,
            count: u32,
            map_fd: u32,
            elem_flags: u64,
            flags: u64,
        }
        // The hash map's cursor is a bucket index (u32); 8 bytes leave room either way.
        let (mut cursor, mut next) = (0u64, 0u64);
        let mut first = true;
        // A walk visits each bucket once; bounded all the same.
        for _ in 0..1 << 20 {
            let mut attr = BatchAttr {
                in_batch: if first {
                    0
                } else {
                    &mut cursor as *mut u64 as u64
                },
                out_batch: &mut next as *mut u64 as u64,
                keys: self.keys.as_mut_ptr() as u64,
                values: self.values.as_mut_ptr() as u64,
                count: CHUNK as u32,
                map_fd: self.fd.as_raw_fd() as u32,
                elem_flags: 0,
                flags: 0,
            };
            // SAFETY: the kernel writes at most `count` keys and values into buffers that hold
            // CHUNK of each (the map's key and value sizes are these types': asserted in
            // profiler-common), and 4 bytes of cursor into `next`.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_bpf,
                    BPF_MAP_LOOKUP_BATCH,
                    &mut attr as *mut BatchAttr,
                    std::mem::size_of::<BatchAttr>() as u32,
                )
            };
            let err = (rc != 0).then(std::io::Error::last_os_error);
            let n = (attr.count as usize).min(CHUNK);
            for i in 0..n {
                each(&self.keys[i], &self.values[i]);
            }
            match err {
                None => {}
                // ENOENT: no more entries (those of this call were still returned).
                Some(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
                Some(e) => {
                    return Err(CaptureError::Io(std::io::Error::new(
                        e.kind(),
                        format!(
                            "reading the in-kernel launch counters (BPF_MAP_LOOKUP_BATCH): {e}"
                        ),
                    )));
                }
            }
            cursor = next;
            first = false;
        }
        Ok(())
    }
}

fn delete(fd: &OwnedFd, key: &LaunchKey) {
    const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
    #[repr(C)]
    struct Attr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    let attr = Attr {
        map_fd: fd.as_raw_fd() as u32,
        _pad: 0,
        key: key as *const LaunchKey as u64,
        value: 0,
        flags: 0,
    };
    // SAFETY: the kernel reads a key of the map's key size (LaunchKey's) at `key`.
    unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_DELETE_ELEM,
            &attr as *const Attr,
            std::mem::size_of::<Attr>() as u32,
        );
    }
}

//! Per-process counters, updated on the hot path without allocating in the steady state.

use super::hash::{FastMap, FastSet};
use super::hist::Histogram;
use super::mem::MemTracker;
use crate::enrich::names::NameTable;
use profiler_common::{CopyBody, LaunchBody, SyncBody, dir, flags};
use std::hash::{Hash, Hasher};

/// Distinct streams remembered per launch configuration; more are not counted.
pub const MAX_STREAMS_PER_KEY: usize = 4096;
/// Number of copy directions (`dir::H2H..=dir::MEMSET`).
pub const DIRECTIONS: usize = 8;
const _: () = assert!(DIRECTIONS == dir::MEMSET as usize + 1);

/// One launch configuration as the program issued it; names are resolved at report time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchKey {
    pub api: u32,
    pub func: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
}

impl Hash for LaunchKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.func);
        h.write_u64(u64::from(self.grid[0]) | u64::from(self.grid[1]) << 32);
        h.write_u64(u64::from(self.grid[2]) | u64::from(self.block[0]) << 32);
        h.write_u64(u64::from(self.block[1]) | u64::from(self.block[2]) << 32);
        h.write_u64(u64::from(self.shared_bytes) | u64::from(self.api) << 32);
    }
}

#[derive(Clone, Debug, Default)]
pub struct LaunchStat {
    pub calls: u64,
    pub streams: FastSet<u64>,
    last_stream: Option<u64>,
}

/// Copies in one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyStat {
    pub calls: u64,
    /// Bytes of copies that did not return an error.
    pub bytes: u64,
    pub async_calls: u64,
    /// CPU time inside the calls that had a return probe.
    pub blocked_ns: u64,
    /// Host↔device copies whose host side was in no pinned region the process allocated
    /// while watched (pageable: staged through a driver buffer).
    pub pageable_calls: u64,
    pub pageable_bytes: u64,
    /// Calls by size, in the buckets of [`COPY_SIZE_BUCKETS`].
    pub sizes: [u64; COPY_SIZE_BUCKETS.len() + 1],
}

/// Upper bounds (exclusive) of the copy-size buckets; the last bucket holds the rest:
/// < 4 KiB, < 64 KiB, < 1 MiB, < 16 MiB, < 256 MiB, ≥ 256 MiB.
pub const COPY_SIZE_BUCKETS: [u64; 5] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];

/// The bucket of a copy of `bytes`.
#[inline]
pub fn copy_size_bucket(bytes: u64) -> usize {
    COPY_SIZE_BUCKETS
        .iter()
        .position(|&b| bytes < b)
        .unwrap_or(COPY_SIZE_BUCKETS.len())
}

/// Calls of one hooked API.
#[derive(Clone, Debug, Default)]
pub struct ApiStat {
    pub calls: u64,
    /// Durations of the calls that had a return probe.
    pub durations: Histogram,
}

/// What went onto one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStat {
    pub launches: u64,
    pub copies: u64,
    pub copy_bytes: u64,
}

/// Streams tracked per process; work on further streams is summed under [`OTHER_STREAMS`].
pub const MAX_STREAMS: usize = 1024;
/// The key that gathers the streams beyond [`MAX_STREAMS`].
pub const OTHER_STREAMS: u64 = u64::MAX;

/// Everything known about one process.
#[derive(Clone, Debug)]
pub struct ProcState {
    pub launches: u64,
    pub kernels: FastMap<LaunchKey, LaunchStat>,
    /// Indexed by `dir::*`.
    pub copies: [CopyStat; DIRECTIONS],
    /// Indexed by API id.
    pub apis: Vec<ApiStat>,
    pub graph_launches: u64,
    /// CPU time blocked in synchronisations (GPU-side waits excluded).
    pub sync_blocked_ns: u64,
    pub mem: MemTracker,
    /// Sampled call stacks.
    pub stacks: crate::model::stacks::ProcStacks,
    /// The code rows, named when the process's tgid went to another process (its names are
    /// then forgotten).
    pub frozen_code: Option<(
        Vec<crate::model::snapshot::CodeReport>,
        crate::model::snapshot::StackSummary,
    )>,
    pub names: NameTable,
    /// `launches` when the live view last looked.
    pub prev_launches: u64,
    /// NVML's figures for the process.
    pub gpu: super::gpu::ProcGpu,
    /// Launches and copies per stream handle (0: the legacy default stream).
    pub streams: FastMap<u64, StreamStat>,
    /// Calls, launches and blocked time over the process's active span.
    pub activity: super::activity::Activity,
    /// Launches counted in duty-cycle windows, and the estimate made from them.
    pub sampling: super::sampling::Sampling,
    /// GPU idle and launch-ahead derived from the calls (per stream and for the process).
    pub busy: super::busy::Derived,
    /// Calls per device.
    pub devices: super::devices::Devices,
    /// NCCL communicators and collectives.
    pub nccl: super::nccl::Nccl,
    /// GPU time measured by CUPTI (the injection library).
    pub kernel_time: super::kernel_time::KernelTime,
}

/// `Some(dur_ns)` when a return probe measured the call.
#[inline]
pub fn measured(flags_: u32, dur_ns: u64) -> Option<u64> {
    (flags_ & flags::HAS_RETURN != 0).then_some(dur_ns)
}

impl ProcState {
    pub fn new(live_cap: usize) -> Self {
        Self {
            launches: 0,
            kernels: FastMap::default(),
            copies: [CopyStat::default(); DIRECTIONS],
            apis: Vec::new(),
            graph_launches: 0,
            sync_blocked_ns: 0,
            mem: MemTracker::new(live_cap),
            stacks: Default::default(),
            frozen_code: None,
            names: NameTable::new(),
            prev_launches: 0,
            gpu: Default::default(),
            streams: FastMap::default(),
            activity: Default::default(),
            sampling: Default::default(),
            busy: Default::default(),
            devices: Default::default(),
            nccl: Default::default(),
            kernel_time: Default::default(),
        }
    }

    /// One call of API `api` (below 2^16, checked by the caller).
    #[inline]
    pub fn api_call(&mut self, api: u32, dur: Option<u64>) {
        self.api_calls(api, 1, dur);
    }

    /// `n` calls of API `api`; `dur`, when measured, is one call's.
    pub fn api_calls(&mut self, api: u32, n: u64, dur: Option<u64>) {
        let i = api as usize;
        if i >= self.apis.len() {
            self.apis.resize_with(i + 1, ApiStat::default);
        }
        let a = &mut self.apis[i];
        a.calls += n;
        if let Some(d) = dur {
            a.durations.record(d);
        }
    }

    /// The stream's counters (bounded: see [`MAX_STREAMS`]).
    #[inline]
    fn stream(&mut self, handle: u64) -> &mut StreamStat {
        let key = if self.streams.len() >= MAX_STREAMS && !self.streams.contains_key(&handle) {
            OTHER_STREAMS
        } else {
            handle
        };
        self.streams.entry(key).or_default()
    }

    #[inline]
    pub fn launch(&mut self, api: u32, l: &LaunchBody) {
        self.launches_n(api, l, 1);
    }

    /// `n` launches of one configuration (counted in the kernel, or one recorded launch).
    pub fn launches_n(&mut self, api: u32, l: &LaunchBody, n: u64) {
        self.launches += n;
        self.devices.launches(l.flags, n);
        self.stream(l.stream).launches += n;
        let key = LaunchKey {
            api,
            func: l.func,
            grid: l.grid,
            block: l.block,
            shared_bytes: l.shared_bytes,
        };
        let s = self.kernels.entry(key).or_default();
        s.calls += n;
        if s.last_stream != Some(l.stream) {
            s.last_stream = Some(l.stream);
            if s.streams.len() < MAX_STREAMS_PER_KEY {
                s.streams.insert(l.stream);
            }
        }
    }

    #[inline]
    pub fn copy(&mut self, c: &CopyBody) {
        let d = if (c.direction as usize) < DIRECTIONS {
            c.direction
        } else {
            dir::UNKNOWN
        };
        let s = &mut self.copies[d as usize];
        s.calls += 1;
        s.sizes[copy_size_bucket(c.bytes)] += 1;
        let dur = measured(c.flags, c.dur_ns);
        let copied = dur.is_none() || c.ret == 0;
        if copied {
            s.bytes = s.bytes.saturating_add(c.bytes);
        }
        self.devices.copy(c, copied);
        let st = self.stream(c.stream);
        st.copies += 1;
        if copied {
            st.copy_bytes = st.copy_bytes.saturating_add(c.bytes);
        }
        let s = &mut self.copies[d as usize];
        if c.flags & flags::ASYNC != 0 {
            s.async_calls += 1;
        }
        s.blocked_ns = s.blocked_ns.saturating_add(dur.unwrap_or(0));
        let host = match d {
            dir::H2D => Some(c.src),
            dir::D2H => Some(c.dst),
            _ => None,
        };
        if let Some(h) = host
            && !self.mem.is_pinned(h)
        {
            s.pageable_calls += 1;
            if copied {
                s.pageable_bytes = s.pageable_bytes.saturating_add(c.bytes);
            }
        }
    }

    #[inline]
    pub fn sync(&mut self, s: &SyncBody) {
        self.devices.sync(s);
        if s.flags & flags::GPU_SIDE == 0 {
            let d = measured(s.flags, s.dur_ns).unwrap_or(0);
            self.sync_blocked_ns = self.sync_blocked_ns.saturating_add(d);
        }
    }

    /// Bytes copied, all directions.
    pub fn copy_bytes(&self) -> u64 {
        self.copies
            .iter()
            .map(|c| c.bytes)
            .fold(0, u64::saturating_add)
    }

    pub fn copy_calls(&self) -> u64 {
        self.copies.iter().map(|c| c.calls).sum()
    }
}

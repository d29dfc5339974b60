//! Wire ABI between gpuprofd's eBPF probes and its daemon: record layouts, kinds, cookies, maps.
//!
//! Every record in the ring buffer starts with [`Header`] followed by a kind-specific body.
//! All types are `#[repr(C)]`, fixed-width, padded explicitly, and sized to a multiple of 8;
//! `const` assertions next to each struct keep both sides honest.
#![no_std]

pub mod cookie;
#[cfg(feature = "user")]
pub mod decode;
pub mod gpu;
pub mod memset;
pub mod nccl;
pub mod pairing;

/// Names of the maps in the eBPF object (looked up by name from userspace).
pub mod maps {
    /// The one ring buffer every record goes through.
    pub const EVENTS: &str = "EVENTS";
    /// Per-CPU `u64` counters of records lost because `reserve` failed, indexed by kind.
    pub const DROPS: &str = "DROPS";
    /// Per-CPU `u64` counters of records submitted, indexed by kind.
    pub const SUBMITTED: &str = "SUBMITTED";
    /// `Array<u32>` of length 1: the in-kernel filter mode (see [`crate::FILTER_ALL`]).
    pub const FILTER_MODE: &str = "FILTER_MODE";
    /// `HashMap<u32 tgid, u8>`: processes selected when the filter mode is [`crate::FILTER_TGIDS`]
    /// or [`crate::FILTER_TREE`] (which adds their children as they are made).
    pub const FILTER_TGIDS: &str = "FILTER_TGIDS";
    /// `HashMap<u64 cgroup id, u8>`: cgroups (v2) whose processes, at any depth below, are
    /// selected when the filter mode is [`crate::FILTER_CGROUPS`].
    pub const FILTER_CGROUPS: &str = "FILTER_CGROUPS";
    /// `LruHashMap<u32 tgid, u8 verdict>`: the cgroup decision per process, cached so that an
    /// unselected process costs one lookup per hooked call. Userspace clears it whenever it
    /// adds a cgroup to `FILTER_CGROUPS`.
    pub const FILTER_VERDICT: &str = "FILTER_VERDICT";
    /// Task-local storage (`BPF_MAP_TYPE_TASK_STORAGE`, one [`crate::Pending`] per thread, freed
    /// with the thread; no userspace access): the runtime call in flight (pairing runtime with
    /// driver, runtime return probes).
    pub const PEND_RT: &str = "PEND_RT";
    /// Task-local storage like [`PEND_RT`]: the driver call in flight (driver return probes).
    pub const PEND_DRV: &str = "PEND_DRV";
    /// Per-thread `mmap(PROT_EXEC, fd)` in flight (`u32 tid` → length).
    pub const MMAP_PEND: &str = "MMAP_PEND";
    /// `Array<u32>` of length 1: the byte offset of `group_dead` in the `sched_process_exit`
    /// tracepoint's record, or 0 where the kernel's record has no such field (before 6.16); the
    /// process's end is then recorded at its group leader's exit instead of its last thread's.
    pub const EXIT_CONFIG: &str = "EXIT_CONFIG";
    /// `Array<u32>` of length 1: the stack-sampling period N; each launch, copy or blocking
    /// sync has its call stack taken with probability 1/N, drawn independently per call (0:
    /// never, 1: every one). See [`crate::StackBody`].
    pub const STACK_CONFIG: &str = "STACK_CONFIG";
    /// `LruHashMap<u32 tgid, PyProc>`: CPython processes whose Python frames the probes read.
    pub const PY_PROCS: &str = "PY_PROCS";
    /// `Array<u32>` of length 1: where launches go, [`crate::LAUNCHES_TO_RING`] (a record each,
    /// the default) or [`crate::LAUNCHES_COUNTED`] (counted in [`LAUNCH_COUNTS`]).
    pub const LAUNCH_MODE: &str = "LAUNCH_MODE";
    /// `Array<u32>` of length 1: [`crate::GATE_OPEN`] (the default) or [`crate::GATE_SHUT`].
    /// Shut, a counted launch is neither counted nor recorded: the duty cycle opens it once
    /// a window's links are all in place and shuts it before they go, so that the window's
    /// length is the daemon's two writes apart, whatever the attach and detach calls take.
    pub const LAUNCH_GATE: &str = "LAUNCH_GATE";
    /// Per-CPU `u64` counters of the probes' rare paths, indexed by [`crate::fault`]: what they
    /// could not do as asked. Counted, never logged (a probe on a hot path must not format
    /// text); the daemon reports them as `probe_faults`.
    pub const FAULTS: &str = "FAULTS";
    /// `HashMap<LaunchKey, LaunchCount>`: launches counted in the kernel (service mode's
    /// always-on default). The daemon reads it every period and removes an ended process's
    /// entries; a launch that finds it full goes to the ring as a record instead.
    pub const LAUNCH_COUNTS: &str = "LAUNCH_COUNTS";
    /// Task-local storage (one [`crate::ThreadCtx`] per thread): the thread's current CUDA
    /// context and its device.
    pub const THREAD_CTX: &str = "THREAD_CTX";
    /// `LruHashMap<HandleKey, u32>`: a process's context → its device (wire value).
    pub const CTX_DEVICE: &str = "CTX_DEVICE";
    /// `LruHashMap<HandleKey, u32>`: a process's stream → its context's device (wire value).
    pub const STREAM_DEVICE: &str = "STREAM_DEVICE";
    /// Task-local storage (one [`crate::nccl::NcclThread`] per thread): the thread's NCCL
    /// group depth and the NCCL call in flight.
    pub const NCCL_THREAD: &str = "NCCL_THREAD";

    /// The hash maps that hold per-process or per-thread state, in the order the daemon reports
    /// their fill. The probes remove a thread's entries when it exits and a process's when it
    /// ends, so their entry counts follow the live processes, not the node's history.
    /// (The per-thread call slots, [`PEND_RT`] and [`PEND_DRV`], are task storage: no capacity
    /// to fill, and nothing userspace can count.)
    pub const STATE: [&str; 5] = [
        FILTER_TGIDS,
        FILTER_CGROUPS,
        FILTER_VERDICT,
        MMAP_PEND,
        PY_PROCS,
    ];
}

/// Filter mode: every process.
pub const FILTER_ALL: u32 = 0;
/// Filter mode: only tgids present in `FILTER_TGIDS`.
pub const FILTER_TGIDS: u32 = 1;
/// Filter mode: only processes in (or below) the cgroups in `FILTER_CGROUPS`.
pub const FILTER_CGROUPS: u32 = 2;
/// Filter mode: the tgids in `FILTER_TGIDS` and every process they start, at any depth: the
/// fork watcher adds a selected process's child before the child runs (a wrapped command's tree).
pub const FILTER_TREE: u32 = 3;
/// Deepest cgroup level the filter looks at (root = 0).
pub const MAX_CGROUP_DEPTH: i32 = 24;

/// The probes' rare paths, counted per CPU in [`maps::FAULTS`] at these indexes.
pub mod fault {
    /// A user-memory read of a call's arguments or results failed (a bad pointer the program
    /// passed; the call fails too): the fields it would have filled are recorded as 0.
    pub const USER_READ: u32 = 0;
    /// The in-kernel launch counters ([`crate::maps::LAUNCH_COUNTS`]) were full: the launch
    /// went to the ring buffer as a record instead (nothing is lost).
    pub const COUNTS_FULL: u32 = 1;
    /// Entries of [`crate::maps::FAULTS`].
    pub const COUNT: u32 = 2;

    /// The report's name of fault `f`.
    pub const fn name(f: u32) -> Option<&'static str> {
        Some(match f {
            USER_READ => "user_read",
            COUNTS_FULL => "launch_counts_full",
            _ => return None,
        })
    }
}

/// Capacity of the counters arrays (kinds are below this).
pub const MAX_KINDS: u32 = 24;

/// Record kinds (`Header::kind`).
pub mod kind {
    /// Kernel launch ([`crate::LaunchBody`]).
    pub const LAUNCH: u32 = 1;
    /// Memory copy ([`crate::CopyBody`]).
    pub const COPY: u32 = 2;
    /// Synchronisation ([`crate::SyncBody`]).
    pub const SYNC: u32 = 3;
    /// Allocation, free, VMM operation ([`crate::MemBody`]).
    pub const MEM: u32 = 4;
    /// CUDA graph launch ([`crate::GraphBody`]).
    pub const GRAPH: u32 = 5;
    /// A handle learned a name ([`crate::NameBody`]).
    pub const NAME: u32 = 6;
    /// One handle stands for another ([`crate::AliasBody`]).
    pub const ALIAS: u32 = 7;
    /// A process mapped a file executable with `mmap` ([`crate::MapBody`]): it may have
    /// loaded a CUDA library the daemon has not attached yet.
    pub const MAP: u32 = 8;
    /// A selected process ended (its last thread exited) ([`crate::ExitBody`]).
    pub const EXIT: u32 = 9;
    /// The call stack of the launch or sync record just before it from the same thread, with
    /// the same timestamp ([`crate::StackBody`]).
    pub const STACK: u32 = 10;
    /// A selected process replaced its image (`execve`): same pid, a new program, whose name
    /// is the body's `comm` ([`crate::ExitBody`]). What the process did before was the old
    /// program's.
    pub const EXEC: u32 = 11;
    /// `count` launches of one configuration by one process, counted in the kernel
    /// ([`crate::LaunchesBody`]). Never written by the probes: the daemon makes these from
    /// [`crate::maps::LAUNCH_COUNTS`] (service mode), so they reach the aggregator like any other
    /// record. `tid` is 0 (counting does not keep threads apart); `ts_ns` is the latest launch's.
    pub const LAUNCHES: u32 = 12;
    /// The launch probes were attached from `start_ns` to `end_ns` of a duty-cycle period
    /// that ends at the record's `ts_ns` ([`crate::WindowBody`]). The daemon's own, like
    /// [`LAUNCHES`]: every counted launch of the window precedes it.
    pub const WINDOW: u32 = 13;
    /// An NCCL call: a communicator made, split, queried or ended, a collective, a send or a
    /// receive ([`crate::nccl::NcclBody`]).
    pub const NCCL: u32 = 14;
    /// Kernels, copies and memsets as the GPU ran them, handed over by the injection library
    /// ([`crate::gpu::GpuActivityBody`]).
    pub const GPU_ACTIVITY: u32 = 15;
    /// A kernel name id of the injection library ([`crate::gpu::GpuNameBody`]).
    pub const GPU_NAME: u32 = 16;
    /// The injection library's state changed ([`crate::gpu::GpuStateBody`]).
    pub const GPU_STATE: u32 = 17;
    /// Highest kind of the first run of kinds the probes write; [`LAUNCHES`] and [`WINDOW`]
    /// are the daemon's own, and [`NCCL`] to [`GPU_STATE`] come after them (see
    /// [`written_by_probes`]).
    pub const LAST: u32 = EXEC;

    /// Whether the probes write records of kind `k` (the kinds the loss and submission
    /// counters cover): `1..=LAST` and [`NCCL`]`..=`[`GPU_STATE`].
    pub const fn written_by_probes(k: u32) -> bool {
        (k >= LAUNCH && k <= LAST) || (k >= NCCL && k <= GPU_STATE)
    }

    /// The report's name of record kind `kind`, `None` for values that are no kind.
    pub const fn name(kind: u32) -> Option<&'static str> {
        Some(match kind {
            LAUNCH => "launch",
            COPY => "copy",
            SYNC => "sync",
            MEM => "mem",
            GRAPH => "graph",
            NAME => "name",
            ALIAS => "alias",
            MAP => "map",
            EXIT => "exit",
            STACK => "stack",
            EXEC => "exec",
            LAUNCHES => "counted_launches",
            WINDOW => "launch_window",
            NCCL => "nccl",
            GPU_ACTIVITY => "gpu_activity",
            GPU_NAME => "gpu_name",
            GPU_STATE => "gpu_state",
            _ => return None,
        })
    }
}

/// Copy directions (`CopyBody::direction`); the runtime's `cudaMemcpyKind` values 0..=4 map to
/// `H2H`, `H2D`, `D2H`, `D2D`, `DEFAULT`. Memsets are copies of direction [`dir::MEMSET`].
pub mod dir {
    pub const H2H: u32 = 0;
    pub const H2D: u32 = 1;
    pub const D2H: u32 = 2;
    pub const D2D: u32 = 3;
    /// Unified addressing: the API does not say (cuMemcpy, cudaMemcpyDefault).
    pub const DEFAULT: u32 = 4;
    /// Between devices (cuMemcpyPeer*, cudaMemcpyPeer*, 3D peer).
    pub const PEER: u32 = 5;
    /// A value we could not interpret (a bad `cudaMemcpyKind` passed by the program).
    pub const UNKNOWN: u32 = 6;
    /// A memset (`cuMemsetD*`, `cudaMemset*`): `dst` is the memory set, `src` is 0, `bytes`
    /// as [`crate::memset::bytes`] counts them.
    pub const MEMSET: u32 = 7;
}

/// Memory operations (`MemBody::op`).
pub mod memop {
    pub const ALLOC: u32 = 1;
    pub const FREE: u32 = 2;
    /// `cuMemCreate`: physical allocation (VMM), `ptr` is the generic allocation handle.
    pub const VMM_CREATE: u32 = 3;
    /// `cuMemRelease`: `ptr` is the generic allocation handle.
    pub const VMM_RELEASE: u32 = 4;
    pub const VMM_MAP: u32 = 5;
    pub const VMM_UNMAP: u32 = 6;
    /// `cuMemHostRegister*` / `cudaHostRegister`: `ptr`..`ptr + bytes` of the process's own
    /// memory is page-locked from now on (no allocation).
    pub const HOST_REGISTER: u32 = 7;
    /// `cuMemHostUnregister` / `cudaHostUnregister`: the region at `ptr` is pageable again.
    pub const HOST_UNREGISTER: u32 = 8;
}

/// What kind of memory an allocation gives (`MemBody::mem_kind`).
pub mod memkind {
    pub const DEVICE: u32 = 1;
    /// Page-locked host memory (cuMemAllocHost, cuMemHostAlloc, cudaMallocHost, cudaHostAlloc).
    pub const HOST_PINNED: u32 = 2;
    pub const MANAGED: u32 = 3;
    /// Stream-ordered (cuMemAllocAsync, pools).
    pub const ASYNC: u32 = 4;
    pub const PITCHED: u32 = 5;
    /// VMM physical memory.
    pub const VMM: u32 = 6;
}

/// Where a name came from (`NameBody::source`).
pub mod namesrc {
    /// `__cudaRegisterFunction`: handle = host stub.
    pub const REGISTER_FUNCTION: u32 = 1;
    /// `cuModuleGetFunction`: handle = CUfunction.
    pub const MODULE_GET_FUNCTION: u32 = 2;
    /// `cuLibraryGetKernel`: handle = CUkernel.
    pub const LIBRARY_GET_KERNEL: u32 = 3;
    /// `cuFuncGetName` / `cuKernelGetName`: handle = CUfunction / CUkernel.
    pub const GET_NAME: u32 = 4;
    /// Read by the daemon from the driver's own function object through a layout learned from
    /// handles whose names the probes saw (handle = CUfunction / CUkernel). The probes never
    /// send it; the daemon writes it into the records it makes for such names.
    pub const DRIVER_OBJECT: u32 = 5;
    /// As [`DRIVER_OBJECT`], through a layout an earlier run confirmed for that driver build
    /// (the daemon's state file) that this run's own samples have not confirmed yet.
    pub const DRIVER_OBJECT_REMEMBERED: u32 = 6;
}

/// Record flags.
pub mod flags {
    /// Copy or free that returns before the GPU finishes (stream-ordered).
    pub const ASYNC: u32 = 1 << 0;
    /// `dur_ns`/`ret` were measured by a return probe.
    pub const HAS_RETURN: u32 = 1 << 1;
    /// Launch: cooperative.
    pub const COOPERATIVE: u32 = 1 << 2;
    /// Launch: extensible config (cuLaunchKernelEx / cudaLaunchKernelExC).
    pub const LAUNCH_EX: u32 = 1 << 3;
    /// Name: truncated to [`crate::NAME_CAP`] bytes.
    pub const TRUNCATED: u32 = 1 << 4;
    /// Sync: the wait happens on the GPU (cuStreamWaitEvent), the CPU does not block.
    pub const GPU_SIDE: u32 = 1 << 5;
    /// Launch under a runtime API whose `func` is the driver's handle: a runtime launch seen
    /// at the driver call it made (one trap per launch: the runtime entry is not probed).
    pub const DRIVER_HANDLE: u32 = 1 << 6;
    /// Launch, copy, memset, sync, memory operation: the top byte holds the device the call
    /// went to, plus one (0: unknown). See [`crate::device`].
    pub const DEVICE_SHIFT: u32 = 24;
    /// The bits of [`DEVICE_SHIFT`].
    pub const DEVICE_MASK: u32 = 0xff << DEVICE_SHIFT;
}

/// The device a call went to, carried in the top byte of its record's `flags` (launches,
/// copies, memsets, syncs, memory operations) and so in a counted launch's key. The probes
/// know it from the stream's context, else the calling thread's current context (see
/// `profiler-ebpf/src/device.rs`). Stored as device + 1 so that 0 — what every record of a
/// capture made before device attribution holds — reads as unknown: the record layouts did
/// not change, and older capture files decode as they did.
pub mod device {
    use crate::flags::{DEVICE_MASK, DEVICE_SHIFT};

    /// Devices that can be told apart; a higher ordinal is recorded as unknown.
    pub const MAX: u32 = 254;

    /// The wire value (device + 1, 0 unknown) of device ordinal `ordinal` (negative or above
    /// [`MAX`]: unknown).
    #[inline(always)]
    pub const fn wire(ordinal: i64) -> u32 {
        if ordinal < 0 || ordinal > MAX as i64 {
            0
        } else {
            ordinal as u32 + 1
        }
    }

    /// `flags` with the device whose wire value is `wire` (0 leaves it unknown).
    #[inline(always)]
    pub const fn with(flags: u32, wire: u32) -> u32 {
        (flags & !DEVICE_MASK) | ((wire & 0xff) << DEVICE_SHIFT)
    }

    /// The device ordinal a record's `flags` carry, `None` when unknown.
    #[inline(always)]
    pub const fn of(flags: u32) -> Option<u32> {
        match (flags & DEVICE_MASK) >> DEVICE_SHIFT {
            0 => None,
            w => Some(w - 1),
        }
    }

    /// Context operations the device tracker follows (`Cookie::q` of its probes).
    pub mod op {
        /// `cuCtxSetCurrent(ctx)`.
        pub const SET_CURRENT: u8 = 1;
        /// `cuCtxPushCurrent_v2(ctx)`.
        pub const PUSH: u8 = 2;
        /// `cuCtxPopCurrent_v2(CUcontext *)`.
        pub const POP: u8 = 3;
        /// `cuDevicePrimaryCtxRetain(CUcontext *, CUdevice)`.
        pub const PRIMARY_RETAIN: u8 = 4;
        /// `cuCtxCreate_v2/_v3/_v4(CUcontext *, …, CUdevice)`: made and pushed.
        pub const CREATE: u8 = 5;
        /// `cuCtxGetCurrent(CUcontext *)`: reveals a context made current before attach.
        pub const GET_CURRENT: u8 = 6;
        /// `cuCtxGetDevice(CUdevice *)`, `cudaGetDevice(int *)`: the current context's device.
        pub const GET_DEVICE: u8 = 7;
        /// `cuStreamCreate(CUstream *, …)`, `cudaStreamCreate*(cudaStream_t *, …)`: the stream
        /// belongs to the thread's current context.
        pub const STREAM_CREATE: u8 = 8;
        /// `cudaSetDevice(int)`: the thread's device from now on.
        pub const SET_DEVICE: u8 = 9;
    }
}

/// Key of the device tracker's per-process handle maps (context → device, stream → device).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HandleKey {
    pub handle: u64,
    pub tgid: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<HandleKey>() == 16);

/// The device tracker's per-thread state (task storage `THREAD_CTX`): the current context, the
/// one beneath it on the thread's context stack (one level: a push and its pop), their devices
/// (wire values: device + 1, 0 unknown), and the context call in flight per layer (its
/// out-pointer and device argument, for the return probe).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadCtx {
    pub ctx: u64,
    pub prev_ctx: u64,
    pub dev: u32,
    pub prev_dev: u32,
    /// Index 0: driver, 1: runtime.
    pub pend_ptr: [u64; 2],
    pub pend_arg: [u64; 2],
    /// The [`device::op`] in flight per layer, 0 none.
    pub pend_op: [u32; 2],
}
const _: () = assert!(core::mem::size_of::<ThreadCtx>() == 64);

/// Common header of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// One of [`kind`].
    pub kind: u32,
    /// Index of the hooked symbol in the daemon's API table (carried in the probe's cookie).
    pub api: u32,
    /// Process id (kernel tgid).
    pub tgid: u32,
    /// Thread id (kernel pid).
    pub tid: u32,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) at function entry.
    pub ts_ns: u64,
}
const _: () = assert!(core::mem::size_of::<Header>() == 24);

/// A kernel launch (driver `cuLaunchKernel*`, runtime `cudaLaunchKernel*`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchBody {
    /// Driver: `CUfunction` or `CUkernel`; runtime: host-stub address (or `cudaKernel_t`).
    pub func: u64,
    pub stream: u64,
    /// Return address at entry: the code that called the API.
    pub caller: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub flags: u32,
}
const _: () = assert!(core::mem::size_of::<LaunchBody>() == 56);

/// Capacity of [`maps::LAUNCH_COUNTS`].
pub const LAUNCH_COUNTS_MAX: u32 = 32768;

/// Launch mode: every launch is a ring-buffer record (full capture).
pub const LAUNCHES_TO_RING: u32 = 0;
/// Launch mode: launches are counted per process and configuration in
/// [`maps::LAUNCH_COUNTS`]; no record per launch.
pub const LAUNCHES_COUNTED: u32 = 1;

/// [`maps::LAUNCH_GATE`]: counted launches count (the default: no duty cycle).
pub const GATE_OPEN: u32 = 0;
/// [`maps::LAUNCH_GATE`]: counted launches are let go (outside a duty cycle's window).
pub const GATE_SHUT: u32 = 1;

/// Key of [`maps::LAUNCH_COUNTS`]: a process and a launch configuration. A runtime launch's
/// key has no caller (it differs per call site of the program and would multiply the
/// entries); a driver launch's keeps it: the code that called the driver is a runtime's own
/// launch path in a handful of places, and it tells a runtime launch seen one layer down (the
/// runtime's launch entry left unprobed) from the program's own driver call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaunchKey {
    pub tgid: u32,
    /// API id (the probe's cookie).
    pub api: u32,
    pub func: u64,
    pub stream: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub flags: u32,
    /// Driver launches: the return address at entry (runtime launches: 0).
    pub caller: u64,
}
const _: () = assert!(core::mem::size_of::<LaunchKey>() == 64);

/// Value of [`maps::LAUNCH_COUNTS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchCount {
    /// Launches since the entry was made (added atomically).
    pub count: u64,
    /// `bpf_ktime_get_ns()` of the entry's first launch in the kernel tick of its latest one
    /// (the precise clock is read once per tick per entry, not per launch): at most a tick
    /// (1–10 ms by the kernel's HZ) before the latest launch. Last writer wins.
    pub last_ns: u64,
    /// `bpf_ktime_get_ns()` of the launch that made the entry (tells an exec's old program's
    /// launches from the new one's).
    pub first_ns: u64,
    /// `bpf_jiffies64()` when `last_ns` was stamped.
    pub last_jiffies: u64,
}
const _: () = assert!(core::mem::size_of::<LaunchCount>() == 32);

/// `count` launches of one configuration ([`kind::LAUNCHES`]): a [`LaunchBody`] whose `caller`
/// slot holds the count.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchesBody {
    pub func: u64,
    pub stream: u64,
    pub count: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub flags: u32,
}
const _: () = assert!(core::mem::size_of::<LaunchesBody>() == 56);

/// One duty-cycle window ([`kind::WINDOW`]): the launch probes were attached from `start_ns`
/// to `end_ns` (CLOCK_MONOTONIC, as the probes' times) of a period of `period_ns`. With
/// [`window::HELD`] they stayed attached the whole period (a deep capture needed every
/// launch): its counts are exact, not a sample.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowBody {
    pub start_ns: u64,
    pub end_ns: u64,
    pub period_ns: u64,
    pub flags: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<WindowBody>() == 32);

/// [`WindowBody::flags`].
pub mod window {
    /// Attached the whole period (its counts are exact).
    pub const HELD: u32 = 1 << 0;
}

impl LaunchesBody {
    /// One launch of this configuration, as a full capture would have recorded it (no caller).
    pub fn launch(&self) -> LaunchBody {
        LaunchBody {
            func: self.func,
            stream: self.stream,
            caller: 0,
            grid: self.grid,
            block: self.block,
            shared_bytes: self.shared_bytes,
            flags: self.flags,
        }
    }
}

/// A memory copy.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyBody {
    pub dst: u64,
    pub src: u64,
    pub bytes: u64,
    pub stream: u64,
    /// Entry to return, when [`flags::HAS_RETURN`] is set; else 0.
    pub dur_ns: u64,
    /// One of [`dir`].
    pub direction: u32,
    pub flags: u32,
    /// CUresult / cudaError_t when [`flags::HAS_RETURN`] is set.
    pub ret: i32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<CopyBody>() == 56);

/// A synchronisation (the CPU blocks for `dur_ns`), or a GPU-side wait ([`flags::GPU_SIDE`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncBody {
    /// Stream or event waited on; 0 for context/device syncs.
    pub handle: u64,
    pub dur_ns: u64,
    pub ret: i32,
    pub flags: u32,
}
const _: () = assert!(core::mem::size_of::<SyncBody>() == 24);

/// An allocation, free or VMM operation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemBody {
    /// Device pointer (or VMM allocation handle); 0 when the call failed.
    pub ptr: u64,
    /// Requested bytes (0 for frees: the daemon knows the size from the allocation).
    pub bytes: u64,
    pub dur_ns: u64,
    pub stream: u64,
    /// One of [`memop`].
    pub op: u32,
    /// One of [`memkind`].
    pub mem_kind: u32,
    pub ret: i32,
    pub flags: u32,
}
const _: () = assert!(core::mem::size_of::<MemBody>() == 48);

/// A CUDA graph launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphBody {
    pub graph_exec: u64,
    pub stream: u64,
}
const _: () = assert!(core::mem::size_of::<GraphBody>() == 16);

/// Bytes of a name carried in a record (longer names are truncated and flagged).
pub const NAME_CAP: usize = 488;

/// A handle learned its (mangled) name.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameBody {
    pub handle: u64,
    /// Module / library handle, when the API has one.
    pub scope: u64,
    /// One of [`namesrc`].
    pub source: u32,
    /// Bytes of `name` in use, without the terminating NUL.
    pub len: u32,
    pub flags: u32,
    pub _pad: u32,
    pub name: [u8; NAME_CAP],
}
const _: () = assert!(core::mem::size_of::<NameBody>() == 520);

/// `from` stands for `to` (cuKernelGetFunction: function → kernel; __cudaGetKernel: kernel →
/// host stub), so `from` inherits `to`'s name.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AliasBody {
    pub from: u64,
    pub to: u64,
}
const _: () = assert!(core::mem::size_of::<AliasBody>() == 16);

/// An executable file mapping a process just made (`mmap` with `PROT_EXEC` and a file
/// descriptor, seen at the syscall's return, so the mapping exists in `/proc/PID/maps`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapBody {
    pub addr: u64,
    pub len: u64,
}
const _: () = assert!(core::mem::size_of::<MapBody>() == 16);

/// A process ended: its tgid may be reused by a new process from now on.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExitBody {
    /// The exiting thread's `comm`, NUL-padded: names a process that ended before the daemon
    /// could read procfs.
    pub comm: [u8; 16],
    /// The exiting task's real uid (`bpf_get_current_uid_gid`): who owned a process that ended
    /// before the daemon could read procfs. [`UID_UNKNOWN`] in records from before it existed.
    pub uid: u32,
    pub _reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ExitBody>() == 24);

/// [`ExitBody::uid`] of an exit record written before the field existed (16-byte body).
pub const UID_UNKNOWN: u32 = u32::MAX;

/// Most native frames a stack record carries (innermost first).
pub const STACK_NATIVE_MAX: usize = 32;
/// Most Python frames a stack record carries (innermost first).
pub const STACK_PY_MAX: usize = 16;

/// Stack record flags (`StackBody::flags`).
pub mod stackflags {
    /// More native frames than [`crate::STACK_NATIVE_MAX`]: the outermost were left out.
    pub const NATIVE_TRUNCATED: u32 = 1 << 0;
    /// More Python frames than [`crate::STACK_PY_MAX`]: the outermost were left out.
    pub const PY_TRUNCATED: u32 = 1 << 1;
    /// The process is a known CPython but the calling thread has no Python thread state (a
    /// thread the interpreter did not start, or more threads than the walk looks at).
    pub const PY_NO_THREAD: u32 = 1 << 2;
    /// Reading the interpreter's memory failed part way: the Python frames may be incomplete.
    pub const PY_FAULT: u32 = 1 << 3;
    /// `native[0]` is the return address read at the probed function's entry (the caller);
    /// else `native[0]` is the instruction pointer at a return probe (also in the caller).
    pub const AT_ENTRY: u32 = 1 << 4;
}

/// One Python frame as the probe saw it: the code object and the instruction pointer into its
/// bytecode. Userspace reads the code object (file, function, line table) from the process.
/// `instr == 0`: one of the interpreter's C-stack shim frames (3.12+), not Python code.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyFrameRaw {
    pub code: u64,
    pub instr: u64,
}

/// The call stack of a launch or sync (kind [`kind::STACK`]), taken on a sample of calls.
///
/// Native frames come from the kernel's frame-pointer walk (`bpf_get_stack`); every entry is
/// a return address (or the return probe's instruction pointer, which is one too), so the
/// daemon symbolises `addr - 1`. Code built without frame pointers gives a short or wrong
/// walk past the first frame, which the probe reads directly off the stack.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackBody {
    /// The sampled call's launch function handle (see [`LaunchBody::func`]) or sync handle.
    pub handle: u64,
    /// The sync's blocked time (return probe), else 0.
    pub dur_ns: u64,
    /// Kind of the sampled call ([`kind::LAUNCH`] or [`kind::SYNC`]).
    pub of_kind: u32,
    pub native_len: u32,
    pub py_len: u32,
    /// [`stackflags`].
    pub flags: u32,
    /// The sampling period in force: each call was drawn with probability 1/period, so this
    /// stack stands for `period` calls.
    pub period: u32,
    pub _pad: u32,
    pub native: [u64; STACK_NATIVE_MAX],
    pub py: [PyFrameRaw; STACK_PY_MAX],
}
const _: () = assert!(core::mem::size_of::<StackBody>() == 552);

impl Default for StackBody {
    fn default() -> Self {
        StackBody {
            handle: 0,
            dur_ns: 0,
            of_kind: 0,
            native_len: 0,
            py_len: 0,
            flags: 0,
            period: 1,
            _pad: 0,
            native: [0; STACK_NATIVE_MAX],
            py: [PyFrameRaw::default(); STACK_PY_MAX],
        }
    }
}

/// Where a CPython interpreter keeps what the probes read (byte offsets; [`PY_NONE`] where the
/// version lacks the field). Filled per version by the daemon.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyOffsets {
    /// `_PyRuntimeState.interpreters.head`.
    pub runtime_interp_head: u32,
    /// `PyInterpreterState.threads.head` (`.tstate_head` before 3.11).
    pub interp_threads_head: u32,
    pub tstate_next: u32,
    /// The field that names the thread a thread state belongs to: `native_thread_id` (3.11+,
    /// the kernel's thread id) or, when [`Self::task_fsbase`] is set, `thread_id` (3.9, 3.10:
    /// `pthread_self()`, which on x86-64 glibc is the thread's FS base).
    pub tstate_native_tid: u32,
    /// `PyThreadState.cframe` (3.11, 3.12), `.current_frame` (3.13) or `.frame` (3.9, 3.10).
    pub tstate_frame: u32,
    /// `_PyCFrame.current_frame`, or [`PY_NONE`] when `tstate_frame` is the frame itself.
    pub cframe_current: u32,
    /// `_PyInterpreterFrame.f_code` (`f_executable` in 3.13; `PyFrameObject.f_code` before 3.11).
    pub frame_code: u32,
    /// `previous` (`f_back` before 3.11).
    pub frame_previous: u32,
    /// `prev_instr` (3.11, 3.12), `instr_ptr` (3.13), or `f_lasti` (3.9, 3.10: an `int`, read as
    /// the low half of the 8 bytes the probe reads).
    pub frame_instr: u32,
    pub frame_owner: u32,
    /// `owner` of the interpreter's C-stack shim frames (skipped), or [`PY_NONE`].
    pub owner_cstack: u32,
    /// [`PY_NONE`]: thread states are matched by kernel thread id. Else the offset of
    /// `thread.fsbase` in the kernel's `task_struct` (from its BTF): thread states are matched by
    /// the calling thread's FS base (`pthread_self()`), for versions that keep no kernel thread id.
    pub task_fsbase: u32,
}
const _: () = assert!(core::mem::size_of::<PyOffsets>() == 48);

/// [`PyOffsets`]: the field does not exist in this version.
pub const PY_NONE: u32 = u32::MAX;

/// A CPython process the probes read Python frames from (`PY_PROCS` value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyProc {
    /// Address of `_PyRuntime` in the process.
    pub runtime: u64,
    pub off: PyOffsets,
}
const _: () = assert!(core::mem::size_of::<PyProc>() == 56);

/// Most Python thread states the probe looks through for the calling thread's.
pub const PY_MAX_THREADS: u32 = 64;

/// Header + body, as laid out in the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Record<B> {
    pub header: Header,
    pub body: B,
}
const _: () = assert!(core::mem::size_of::<Record<LaunchBody>>() == 80);
const _: () = assert!(core::mem::size_of::<Record<NameBody>>() == 544);
const _: () = assert!(kind::GPU_STATE < MAX_KINDS);

/// Byte size of the record of `kind` (header included), or `None` for an unknown kind.
pub const fn record_size(kind: u32) -> Option<usize> {
    let body = match kind {
        kind::LAUNCH => core::mem::size_of::<LaunchBody>(),
        kind::COPY => core::mem::size_of::<CopyBody>(),
        kind::SYNC => core::mem::size_of::<SyncBody>(),
        kind::MEM => core::mem::size_of::<MemBody>(),
        kind::GRAPH => core::mem::size_of::<GraphBody>(),
        kind::NAME => core::mem::size_of::<NameBody>(),
        kind::ALIAS => core::mem::size_of::<AliasBody>(),
        kind::MAP => core::mem::size_of::<MapBody>(),
        kind::EXIT | kind::EXEC => core::mem::size_of::<ExitBody>(),
        kind::STACK => core::mem::size_of::<StackBody>(),
        kind::LAUNCHES => core::mem::size_of::<LaunchesBody>(),
        kind::WINDOW => core::mem::size_of::<WindowBody>(),
        kind::NCCL => core::mem::size_of::<nccl::NcclBody>(),
        kind::GPU_ACTIVITY => core::mem::size_of::<gpu::GpuActivityBody>(),
        kind::GPU_NAME => core::mem::size_of::<gpu::GpuNameBody>(),
        kind::GPU_STATE => core::mem::size_of::<gpu::GpuStateBody>(),
        _ => return None,
    };
    Some(core::mem::size_of::<Header>() + body)
}

/// What a runtime call in flight on a thread is doing; a driver call of the same class made
/// inside it is the same call seen one layer down, and is not recorded again.
pub mod class {
    pub const LAUNCH: u32 = 1;
    pub const COPY: u32 = 2;
    pub const SYNC: u32 = 3;
    pub const MEM: u32 = 4;
    pub const GRAPH: u32 = 5;
    pub const NAME: u32 = 6;
}

/// Per-thread call in flight, kept between an entry probe and its return probe (or, for
/// entry-only runtime calls, until the enclosed driver call consumes it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Pending {
    pub ts_ns: u64,
    /// User stack pointer at entry.
    pub sp: u64,
    pub cookie: u64,
    /// Kind-specific saved values (arguments, computed bytes, out-pointers).
    pub v: [u64; 6],
    /// One of [`class`].
    pub class: u32,
    /// Record kind the return probe will emit.
    pub kind: u32,
    /// [`PENDING_HAS_RETURN`] when a return probe will clear this entry.
    pub state: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<Pending>() == 88);

/// `Pending::state`: nothing in flight (a thread's slot stays, cleared, until the thread exits).
pub const PENDING_NONE: u32 = 0;
/// `Pending::state`: a return probe will clear the entry; every driver call inside is nested.
pub const PENDING_HAS_RETURN: u32 = 1;
/// `Pending::state`: entry-only runtime call; the first driver call of its class consumes it.
pub const PENDING_ENTRY_ONLY: u32 = 2;
/// An entry-only runtime slot older than this is stale (its driver call never came). The
/// slot is also stale once the runtime call has returned, which the probe tells by the return
/// address no longer being where it was at entry; this bound only covers what that cannot
/// (a thread stopped for a long time). A thread preempted between the runtime's entry and its
/// driver call on an oversubscribed node waits far longer than a time slice: 10 ms here once
/// counted 2 of 4,000 launches of 8 threads on 2 CPUs twice.
///
/// Counted in jiffies (`bpf_jiffies64`, which the verifier inlines as a load), not with the
/// nanosecond clock: the driver probe that finds itself nested records nothing, so it need not
/// read the clock at all. 5,000 jiffies are 5 s on a kernel with HZ=1000, 20 s with 250, 50 s
/// with 100: a bound on staleness, not a measurement.
pub const PENDING_ENTRY_ONLY_MAX_JIFFIES: u64 = 5_000;

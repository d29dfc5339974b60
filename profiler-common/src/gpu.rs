//! GPU activity on the wire: what the opt-in injection library (`profiler-inject`, loaded by
//! the CUDA driver through `CUDA_INJECTION64_PATH`) hands to gpuprofd, and the records the
//! probes on its hand-over sites write (`profiler-ebpf/src/gpu.rs`).
//!
//! The channel. The library exports three plain C functions, the *sites*, that do nothing but
//! return, and a `u16` *semaphore* in its own `.probes` section (file-backed data, so the
//! kernel can find it by file offset). gpuprofd attaches entry uprobes to the sites with the
//! semaphore's file offset as their reference counter (`ref_ctr_offset`): while a probe is
//! attached in a process, the kernel keeps that process's semaphore above zero. The library's
//! own thread reads the semaphore every [`POLL_MS`] and enables CUPTI's activity records only
//! while it is non-zero. CUPTI completes buffers on its own worker thread; the library turns
//! each record it keeps into a [`GpuActivity`] and calls [`SITE_ACTIVITY`] with up to
//! [`BATCH`] of them. The application's launching threads never run any of this.
//!
//! Why plain functions and not USDT notes: the probes read arguments by the C calling
//! convention like every CUDA function they hook (a pointer in `rdi`, a count in `rsi`);
//! USDT argument specifications would need a second argument reader in eBPF for nothing
//! gained. The semaphore works the same for both (it is the kernel's uprobe reference
//! counter either way).

/// SONAME (and file name) of the injection library.
pub const INJECT_SONAME: &str = "libgpuprofd_inject.so";

/// `void gpuprofd_inject_activity(const GpuActivity batch[BATCH], uint32_t n)`: `n` of the
/// `BATCH` entries are in use (the array is always `BATCH` long, so a probe may read it whole).
pub const SITE_ACTIVITY: &str = "gpuprofd_inject_activity";
/// `void gpuprofd_inject_name(uint32_t id, const char *name)`: kernel name `id` (as carried by
/// [`GpuActivity::name`]) is the NUL-terminated mangled `name`. Announced once before the
/// first batch that uses it, and again for every name after each time the library enables
/// (a daemon that attached late still learns them).
pub const SITE_NAME: &str = "gpuprofd_inject_name";
/// `void gpuprofd_inject_state(uint32_t state, uint64_t detail)`: the library's state changed
/// (one of [`state`]); `detail` says more (see each state).
pub const SITE_STATE: &str = "gpuprofd_inject_state";
/// The semaphore: `uint16_t gpuprofd_inject_semaphore` in section `.probes`.
pub const SEMAPHORE: &str = "gpuprofd_inject_semaphore";

/// How often the library reads its semaphore (milliseconds): activity is enabled at most
/// this long after gpuprofd attaches, and disabled at most this long after it leaves.
pub const POLL_MS: u64 = 100;

/// Entries per hand-over call.
pub const BATCH: usize = 16;

/// [`GpuActivity::kind`].
pub mod activity {
    /// A kernel ran (`CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`).
    pub const KERNEL: u8 = 1;
    /// A copy ran (`CUPTI_ACTIVITY_KIND_MEMCPY`); `copy_kind` is CUPTI's `CUpti_ActivityMemcpyKind`.
    pub const MEMCPY: u8 = 2;
    /// A memset ran (`CUPTI_ACTIVITY_KIND_MEMSET`).
    pub const MEMSET: u8 = 3;
    /// A driver API call that launched work ran on the CPU (`CUPTI_ACTIVITY_KIND_DRIVER`,
    /// enabled only for the launch callbacks in [`super::LAUNCH_CBIDS`]): the join of the GPU
    /// records to the launch the probes saw. `correlation`: what the kernel records it caused
    /// carry (all of a graph launch's kernels share it); `start_ns`/`end_ns`: the call on the
    /// CPU (CLOCK_MONOTONIC); `bytes`: the calling thread's id as CUPTI reports it (`gettid`
    /// in the process's own PID namespace); `name`: CUPTI's driver callback id (cbid);
    /// `device`, `context`, `stream`, `copy_kind`: 0.
    pub const API: u8 = 4;

    /// The report's name of kind `k`.
    pub const fn name(k: u8) -> Option<&'static str> {
        Some(match k {
            KERNEL => "kernel",
            MEMCPY => "memcpy",
            MEMSET => "memset",
            API => "api",
            _ => return None,
        })
    }
}

/// CUPTI's driver callback ids (`cupti_driver_cbid.h`, CUDA 12.9) of the launch calls whose
/// [`activity::API`] records the library enables: the calls that start kernels.
pub mod cbid {
    pub const CU_LAUNCH_KERNEL: u32 = 307;
    pub const CU_LAUNCH_KERNEL_PTSZ: u32 = 442;
    pub const CU_LAUNCH_COOPERATIVE_KERNEL: u32 = 477;
    pub const CU_LAUNCH_COOPERATIVE_KERNEL_PTSZ: u32 = 478;
    pub const CU_GRAPH_LAUNCH: u32 = 514;
    pub const CU_GRAPH_LAUNCH_PTSZ: u32 = 515;
    pub const CU_LAUNCH_KERNEL_EX: u32 = 652;
    pub const CU_LAUNCH_KERNEL_EX_PTSZ: u32 = 653;
}

/// The driver callbacks enabled for [`activity::API`] records, in the order the library
/// enables them.
pub const LAUNCH_CBIDS: [u32; 8] = [
    cbid::CU_LAUNCH_KERNEL,
    cbid::CU_LAUNCH_KERNEL_PTSZ,
    cbid::CU_LAUNCH_KERNEL_EX,
    cbid::CU_LAUNCH_KERNEL_EX_PTSZ,
    cbid::CU_LAUNCH_COOPERATIVE_KERNEL,
    cbid::CU_LAUNCH_COOPERATIVE_KERNEL_PTSZ,
    cbid::CU_GRAPH_LAUNCH,
    cbid::CU_GRAPH_LAUNCH_PTSZ,
];

/// CUPTI's `CUpti_ActivityMemcpyKind` values ([`GpuActivity::copy_kind`]).
pub mod copykind {
    pub const UNKNOWN: u8 = 0;
    pub const HTOD: u8 = 1;
    pub const DTOH: u8 = 2;
    pub const HTOA: u8 = 3;
    pub const ATOH: u8 = 4;
    pub const ATOA: u8 = 5;
    pub const ATOD: u8 = 6;
    pub const DTOA: u8 = 7;
    pub const DTOD: u8 = 8;
    pub const HTOH: u8 = 9;
    pub const PTOP: u8 = 10;
}

/// Whether a file name is CUPTI's library (`libcupti.so`, `libcupti.so.N…`).
pub fn is_cupti_file(name: &[u8]) -> bool {
    name == b"libcupti.so" || name.starts_with(b"libcupti.so.")
}

/// How the injection library found the CUPTI it uses (in the `enabled` state's detail, from
/// bit [`found::SHIFT`]). Its path comes as the kernel name with id [`found::PATH_NAME_ID`]
/// (CUPTI's kernel names are numbered from 1).
pub mod found {
    pub const SHIFT: u32 = 32;
    /// Already mapped in the process (a framework had loaded it).
    pub const IN_PROCESS: u64 = 1;
    /// Beside a CUDA runtime the process maps (where a framework would load it from).
    pub const BESIDE_RUNTIME: u64 = 2;
    /// By name, through the loader's search path.
    pub const BY_NAME: u64 = 3;
    /// The name record that carries the CUPTI library's path.
    pub const PATH_NAME_ID: u32 = 0;

    /// The report's name of `f`.
    pub const fn name(f: u64) -> Option<&'static str> {
        Some(match f {
            IN_PROCESS => "in_process",
            BESIDE_RUNTIME => "beside_runtime",
            BY_NAME => "by_name",
            _ => return None,
        })
    }
}

/// [`SITE_STATE`]'s `state`.
pub mod state {
    /// Activity records are enabled (gpuprofd listens). `detail`: CUPTI's API version in the
    /// low 32 bits, how the library found CUPTI ([`super::found`]) in the next 8 (0 from a
    /// library older than that field).
    pub const ENABLED: u32 = 1;
    /// Activity records are disabled again (gpuprofd left). `detail`: 0.
    pub const DISABLED: u32 = 2;
    /// No CUPTI library could be loaded: the library does nothing. `detail`: 0.
    pub const NO_CUPTI: u32 = 3;
    /// CUPTI's API version is not one whose record layouts the library was built for.
    /// `detail`: the version found.
    pub const UNSUPPORTED_VERSION: u32 = 4;
    /// Another CUPTI client is active in the process (torch.profiler/Kineto, Nsight): the
    /// library stepped aside. `detail`: the CUPTI result code that told.
    pub const YIELDED: u32 = 5;
    /// CUPTI dropped records (its buffers were full) or the library did (the daemon's site
    /// took too long). `detail`: the number dropped since the last such report.
    pub const DROPPED: u32 = 6;
    /// A CUPTI call failed. `detail`: the CUPTI result code.
    pub const CUPTI_ERROR: u32 = 7;

    /// The report's name of state `s`.
    pub const fn name(s: u32) -> Option<&'static str> {
        Some(match s {
            ENABLED => "enabled",
            DISABLED => "disabled",
            NO_CUPTI => "no_cupti",
            UNSUPPORTED_VERSION => "unsupported_cupti_version",
            YIELDED => "yielded_to_another_cupti_client",
            DROPPED => "dropped",
            CUPTI_ERROR => "cupti_error",
            _ => return None,
        })
    }
}

/// One kernel, copy or memset as the GPU ran it. Times are CLOCK_MONOTONIC nanoseconds (the
/// library converts CUPTI's timestamps with an offset it measures on every buffer), so they
/// compare with the probes' `ts_ns`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuActivity {
    /// One of [`activity`].
    pub kind: u8,
    /// Copies: one of [`copykind`]; 0 otherwise.
    pub copy_kind: u8,
    pub _pad: u16,
    /// CUPTI's device id (the CUDA device ordinal).
    pub device: u32,
    /// CUPTI's context id.
    pub context: u32,
    /// CUPTI's stream id (CUPTI's own numbering, not the `cudaStream_t` handle).
    pub stream: u32,
    /// CUPTI's correlation id: the same as the API call that enqueued it.
    pub correlation: u32,
    /// Kernels: the name id ([`SITE_NAME`]); [`activity::API`]: the driver cbid; 0 otherwise.
    pub name: u32,
    /// When it started on the GPU.
    pub start_ns: u64,
    /// When it ended on the GPU.
    pub end_ns: u64,
    /// Copies and memsets: bytes; [`activity::API`]: CUPTI's thread id; kernels: 0.
    pub bytes: u64,
}
const _: () = assert!(core::mem::size_of::<GpuActivity>() == 48);

/// Record body of [`crate::kind::GPU_ACTIVITY`]: one hand-over call, copied whole.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuActivityBody {
    /// Entries of `items` in use (at most [`BATCH`]; the probe clamps what the library says).
    pub n: u32,
    pub _pad: u32,
    pub items: [GpuActivity; BATCH],
}
const _: () = assert!(core::mem::size_of::<GpuActivityBody>() == 8 + 48 * BATCH);

/// Bytes of a kernel name a [`GpuNameBody`] carries (longer names are cut; `len` says so).
pub const GPU_NAME_CAP: usize = 496;

/// Record body of [`crate::kind::GPU_NAME`]: name id `id` is `name`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuNameBody {
    pub id: u32,
    /// Bytes of `name` in use, without the terminating NUL.
    pub len: u32,
    pub name: [u8; GPU_NAME_CAP],
}
const _: () = assert!(core::mem::size_of::<GpuNameBody>() == 504);

/// Record body of [`crate::kind::GPU_STATE`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuStateBody {
    /// One of [`state`].
    pub state: u32,
    pub _pad: u32,
    pub detail: u64,
}
const _: () = assert!(core::mem::size_of::<GpuStateBody>() == 16);

//! The object's maps: the ring buffer, its counters, the filters, the per-thread call slots
//! (task storage), the launch counters, the stack and Python settings.

use super::*;

#[map(name = "EVENTS")]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(16 << 20, 0);
#[map(name = "DROPS")]
pub(crate) static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_KINDS, 0);
#[map(name = "SUBMITTED")]
pub(crate) static SUBMITTED: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_KINDS, 0);
#[map(name = "FAULTS")]
pub(crate) static FAULTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(fault::COUNT, 0);
#[map(name = "FILTER_MODE")]
pub(crate) static FILTER_MODE: Array<u32> = Array::with_max_entries(1, 0);
#[map(name = "FILTER_TGIDS")]
pub(crate) static FILTER_TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(65536, 0);
#[map(name = "FILTER_CGROUPS")]
pub(crate) static FILTER_CGROUPS: HashMap<u64, u8> = HashMap::with_max_entries(4096, 0);
#[map(name = "FILTER_VERDICT")]
pub(crate) static FILTER_VERDICT: LruHashMap<u32, u8> = LruHashMap::with_max_entries(65536, 0);
#[map(name = "MMAP_PEND")]
pub(crate) static MMAP_PEND: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);
#[map(name = "EXIT_CONFIG")]
pub(crate) static EXIT_CONFIG: Array<u32> = Array::with_max_entries(1, 0);
#[unsafe(link_section = ".maps")]
#[unsafe(export_name = "PEND_RT")]
pub(crate) static PEND_RT: TaskStorage<Pending> = TaskStorage::new();
#[unsafe(link_section = ".maps")]
#[unsafe(export_name = "PEND_DRV")]
pub(crate) static PEND_DRV: TaskStorage<Pending> = TaskStorage::new();

/// A task-local storage map (`BPF_MAP_TYPE_TASK_STORAGE`, defined in BTF as the kernel
/// requires; aya-ebpf 0.2 has the other local storages but not this one): one value per
/// thread, hung off its `task_struct`. A lookup finds the value in the task's storage cache,
/// where a hash map keyed by pid/tid hashes and compares the key in a bucket; the kernel frees a
/// thread's value with the thread, and there is no capacity that a node's threads can fill.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; aya_ebpf::bindings::bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; aya_ebpf::bindings::BPF_F_NO_PREALLOC as usize],
}

// SAFETY: placeholder pointers the loader reads from BTF; never dereferenced.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    const fn new() -> Self {
        Self {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    #[inline(always)]
    fn lookup(&self, flags: u64) -> Option<*mut T> {
        // SAFETY: plain helper calls; the task pointer is the kernel's own current task.
        let p = unsafe {
            bpf_task_storage_get(
                self as *const Self as *mut core::ffi::c_void,
                bpf_get_current_task_btf(),
                core::ptr::null_mut(),
                flags,
            )
        } as *mut T;
        (!p.is_null()).then_some(p)
    }

    /// The calling thread's value, if it has one.
    #[inline(always)]
    pub(crate) fn get_ptr_mut(&self) -> Option<*mut T> {
        self.lookup(0)
    }

    /// The calling thread's value, made (zeroed) if it has none. `None` only when the kernel
    /// cannot make one (out of memory, or the storage busy on this CPU in a nested program).
    #[inline(always)]
    pub(crate) fn get_or_create(&self) -> Option<*mut T> {
        self.lookup(aya_ebpf::bindings::BPF_LOCAL_STORAGE_GET_F_CREATE as u64)
    }
}

#[map(name = "LAUNCH_MODE")]
pub(crate) static LAUNCH_MODE: Array<u32> = Array::with_max_entries(1, 0);
#[map(name = "LAUNCH_GATE")]
pub(crate) static LAUNCH_GATE: Array<u32> = Array::with_max_entries(1, 0);
/// Sized for the distinct (process, kernel, configuration, stream) tuples a node's live
/// processes launch within one read period of the daemon; past that, launches go to the ring.
#[map(name = "LAUNCH_COUNTS")]
pub(crate) static LAUNCH_COUNTS: HashMap<LaunchKey, LaunchCount> =
    HashMap::with_max_entries(LAUNCH_COUNTS_MAX, 0);

#[map(name = "STACK_CONFIG")]
pub(crate) static STACK_CONFIG: Array<u32> = Array::with_max_entries(1, 0);
/// Per process, set by the daemon when it first sees a CPython process and never cleared at
/// exit: LRU, so entries of ended processes make room instead of filling the map for good.
#[map(name = "PY_PROCS")]
pub(crate) static PY_PROCS: LruHashMap<u32, PyProc> = LruHashMap::with_max_entries(4096, 0);

#[unsafe(link_section = ".maps")]
#[unsafe(export_name = "THREAD_CTX")]
pub(crate) static THREAD_CTX: TaskStorage<ThreadCtx> = TaskStorage::new();
/// Context → device per process. LRU: a process's contexts are not removed at its end; the
/// oldest make room.
#[map(name = "CTX_DEVICE")]
pub(crate) static CTX_DEVICE: LruHashMap<HandleKey, u32> = LruHashMap::with_max_entries(16384, 0);
/// Stream → device per process (LRU, as [`CTX_DEVICE`]).
#[map(name = "STREAM_DEVICE")]
pub(crate) static STREAM_DEVICE: LruHashMap<HandleKey, u32> =
    LruHashMap::with_max_entries(65536, 0);

/// Per thread: the NCCL group depth and the NCCL call in flight (`nccl.rs`).
#[unsafe(link_section = ".maps")]
#[unsafe(export_name = "NCCL_THREAD")]
pub(crate) static NCCL_THREAD: TaskStorage<profiler_common::nccl::NcclThread> = TaskStorage::new();

//! gpuprofd's eBPF uprobes: one record per CUDA call the program made, into one ring buffer.
//!
//! A handful of generic programs serve every hooked symbol; the attach cookie (see
//! `profiler_common::cookie`) says which API a probe stands for and where its arguments live.
//! Probes may sit on the first *emulated* instruction after the entry rather than on the entry
//! itself (the daemon's placement module guarantees that every instruction skipped leaves the
//! argument registers, the stack pointer and memory untouched), so argument reads below are the
//! x86-64 SysV entry view: rdi, rsi, rdx, rcx, r8, r9, then `[rsp+8]`, `[rsp+16]`, …
//!
//! Runtime calls enclose driver calls on the same thread. A runtime probe leaves a per-thread
//! slot in `PEND_RT`; a driver probe that finds itself inside one records nothing (the call is
//! already recorded under the runtime API the program called). See `nested_in_runtime`.
#![no_std]
#![no_main]
// The BPF target has no compare-and-swap, so `AtomicU64::fetch_add` does not exist there; the
// intrinsic compiles to BPF's atomic add (`lock xadd`), which the launch counters need.
#![feature(core_intrinsics)]
#![allow(internal_features)]

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, pt_regs},
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_ancestor_cgroup_id, bpf_get_current_comm,
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_get_current_task_btf,
        bpf_get_current_uid_gid, bpf_get_stack, bpf_jiffies64, bpf_ktime_get_ns,
        bpf_probe_read_kernel, bpf_probe_read_user, bpf_probe_read_user_str_bytes,
        bpf_task_storage_get,
    },
    macros::{map, tracepoint, uprobe, uretprobe},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray, RingBuf},
    programs::{ProbeContext, RetProbeContext, TracePointContext},
};
use profiler_common::{
    AliasBody, CopyBody, ExitBody, FILTER_CGROUPS as MODE_CGROUPS, FILTER_TGIDS as MODE_TGIDS,
    GraphBody, Header, LAUNCH_COUNTS_MAX, LAUNCHES_COUNTED, LaunchBody, LaunchCount, LaunchKey,
    MAX_CGROUP_DEPTH, MAX_KINDS, MapBody, MemBody, NAME_CAP, NameBody, PENDING_ENTRY_ONLY,
    PENDING_ENTRY_ONLY_MAX_JIFFIES, PENDING_HAS_RETURN, PENDING_NONE, PY_MAX_THREADS, PY_NONE,
    Pending, PyProc, Record, STACK_NATIVE_MAX, STACK_PY_MAX, StackBody, SyncBody, class,
    cookie::{self, Cookie},
    dir, fault, flags, kind, memkind, memop, stackflags,
};

#[map(name = "EVENTS")]
static EVENTS: RingBuf = RingBuf::with_byte_size(16 << 20, 0);
#[map(name = "DROPS")]
static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_KINDS, 0);
#[map(name = "SUBMITTED")]
static SUBMITTED: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_KINDS, 0);
#[map(name = "FAULTS")]
static FAULTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(fault::COUNT, 0);
#[map(name = "FILTER_MODE")]
static FILTER_MODE: Array<u32> = Array::with_max_entries(1, 0);
#[map(name = "FILTER_TGIDS")]
static FILTER_TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(65536, 0);
#[map(name = "FILTER_CGROUPS")]
static FILTER_CGROUPS: HashMap<u64, u8> = HashMap::with_max_entries(4096, 0);
#[map(name = "FILTER_VERDICT")]
static FILTER_VERDICT: LruHashMap<u32, u8> = LruHashMap::with_max_entries(65536, 0);
#[map(name = "MMAP_PEND")]
static MMAP_PEND: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);
#[map(name = "EXIT_CONFIG")]
static EXIT_CONFIG: Array<u32> = Array::with_max_entries(1, 0);
#[unsafe(link_section = ".maps")]
#[unsafe(export_name = "PEND_RT")]
static PEND_RT: TaskStorage<Pending> = TaskStorage::new();
#[unsafe(link_section = ".maps")]
#[unsafe(export_name = "PEND_DRV")]
static PEND_DRV: TaskStorage<Pending> = TaskStorage::new();

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
    fn get_ptr_mut(&self) -> Option<*mut T> {
        self.lookup(0)
    }

    /// The calling thread's value, made (zeroed) if it has none. `None` only when the kernel
    /// cannot make one (out of memory, or the storage busy on this CPU in a nested program).
    #[inline(always)]
    fn get_or_create(&self) -> Option<*mut T> {
        self.lookup(aya_ebpf::bindings::BPF_LOCAL_STORAGE_GET_F_CREATE as u64)
    }
}

#[map(name = "LAUNCH_MODE")]
static LAUNCH_MODE: Array<u32> = Array::with_max_entries(1, 0);
/// Sized for the distinct (process, kernel, configuration, stream) tuples a node's live
/// processes launch within one read period of the daemon; past that, launches go to the ring.
#[map(name = "LAUNCH_COUNTS")]
static LAUNCH_COUNTS: HashMap<LaunchKey, LaunchCount> =
    HashMap::with_max_entries(LAUNCH_COUNTS_MAX, 0);

#[map(name = "STACK_CONFIG")]
static STACK_CONFIG: Array<u32> = Array::with_max_entries(1, 0);
/// Per process, set by the daemon when it first sees a CPython process and never cleared at
/// exit: LRU, so entries of ended processes make room instead of filling the map for good.
#[map(name = "PY_PROCS")]
static PY_PROCS: LruHashMap<u32, PyProc> = LruHashMap::with_max_entries(4096, 0);

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

// ---------------------------------------------------------------------------------------------
// Common pieces

#[inline(always)]
fn bump(map: &PerCpuArray<u64>, k: u32) {
    if let Some(p) = map.get_ptr_mut(k) {
        // An atomic add even on this CPU's own slot: a uprobe program can be preempted (it runs
        // under RCU, not with preemption off; see `kernel_stack`), and another task's probe on
        // this CPU may bump the same counter between a plain load and store.
        // SAFETY: a valid pointer into the map's value for this CPU.
        unsafe {
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                p, 1,
            )
        };
    }
}

/// Program arrays that stay empty. Every program below starts with a tail call into one of
/// them, which fails at once and returns, so that the verifier never gives the program a
/// per-CPU *private stack*: Linux 6.13+ puts the frame of a KPROBE- or TRACEPOINT-type
/// program of 64 bytes or more on a per-CPU stack, assuming it cannot be preempted. Uprobe
/// programs can be (since 6.0 they run under RCU, not with preemption disabled; any kernel
/// booted with `preempt=full` or `lazy`): a second task running the same program on the same
/// CPU then overwrites the first one's frame, spilled pointers included, which means wrong
/// records or a kernel oops (reported by other uprobe-based tools on 6.13+ kernels). The
/// verifier keeps any program that contains a tail call on the task's own kernel stack. That
/// stack also makes user-memory reads cheaper: the kernel's hardened-usercopy check of a
/// destination there is a few compares, against a walk through its heap-object checks for
/// per-CPU memory. One array per program type (the kernel ties an array to one).
#[map(name = "NO_PRIV_STACK")]
static NO_PRIV_STACK: ProgramArray = ProgramArray::with_max_entries(1, 0);
#[map(name = "NO_PRIV_STACK_TP")]
static NO_PRIV_STACK_TP: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// See [`NO_PRIV_STACK`]: call first in every program (uprobes with `NO_PRIV_STACK`,
/// tracepoints with `NO_PRIV_STACK_TP`).
#[inline(always)]
fn kernel_stack<C: EbpfContext>(ctx: &C, empty: &ProgramArray) {
    // SAFETY: the array is never filled, so the tail call fails and control comes back here.
    unsafe { empty.tail_call(ctx, 0) };
}

/// Whether the current task's cgroup (v2) is a selected cgroup or lies below one. Decided once
/// per process and cached; userspace clears the cache when the selection grows.
#[inline(always)]
fn in_selected_cgroup(tgid: u32) -> bool {
    // SAFETY: read-only lookup of a plain value.
    if let Some(&v) = unsafe { FILTER_VERDICT.get(&tgid) } {
        return v != 0;
    }
    let mut yes = false;
    let mut level = 0;
    while level < MAX_CGROUP_DEPTH {
        // SAFETY: plain helper call; 0 past the task's own depth.
        let id = unsafe { bpf_get_current_ancestor_cgroup_id(level) };
        if id == 0 {
            break;
        }
        // SAFETY: read-only lookup of a plain value.
        if unsafe { FILTER_CGROUPS.get(&id) }.is_some() {
            yes = true;
            break;
        }
        level += 1;
    }
    let _ = FILTER_VERDICT.insert(&tgid, &(yes as u8), 0);
    yes
}

/// Whether the in-kernel filter (`--pid`, `--cgroup`, `--job`) selects process `tgid`.
#[inline(always)]
fn selected(tgid: u32) -> bool {
    if let Some(&mode) = FILTER_MODE.get(0) {
        // SAFETY: read-only lookup of a plain value.
        if mode == MODE_TGIDS && unsafe { FILTER_TGIDS.get(&tgid) }.is_none() {
            return false;
        }
        if mode == MODE_CGROUPS && !in_selected_cgroup(tgid) {
            return false;
        }
    }
    true
}

/// The calling thread if its process is selected, with the probe's cookie.
#[inline(always)]
fn start<C: EbpfContext>(ctx: &C) -> Option<(u64, Cookie)> {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !selected((pid_tgid >> 32) as u32) {
        return None;
    }
    // SAFETY: the context pointer is the program's own.
    let raw = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    Some((pid_tgid, Cookie::unpack(raw)))
}

#[inline(always)]
fn regs(ctx: &ProbeContext) -> &pt_regs {
    // SAFETY: the kernel hands uprobes a valid pt_regs.
    unsafe { &*ctx.regs }
}

/// A `T` at `addr` in the calling process, or `or` when the read fails. A failure is counted
/// in `FAULTS` (a bad pointer the program passed, whose call fails too): the record carries
/// `or` where the read would have filled it, and the report says how often that happened.
#[inline(always)]
fn user<T>(addr: u64, or: T) -> T {
    // SAFETY: bpf_probe_read_user faults safely on bad user addresses.
    match unsafe { bpf_probe_read_user(addr as *const T) } {
        Ok(v) => v,
        Err(_) => {
            bump(&FAULTS, fault::USER_READ);
            or
        }
    }
}

/// The `k`-th 8-byte stack slot at entry: 0 = return address, 1 = 7th integer argument, …
#[inline(always)]
fn stack(sp: u64, k: u64) -> u64 {
    user(sp + 8 * k, 0)
}

/// Integer argument `i` (SysV order) at entry; 0 for [`cookie::NONE`].
#[inline(always)]
fn arg(r: &pt_regs, i: u8) -> u64 {
    match i {
        0 => r.rdi,
        1 => r.rsi,
        2 => r.rdx,
        3 => r.rcx,
        4 => r.r8,
        5 => r.r9,
        6..=14 => stack(r.rsp, (i - 5) as u64),
        _ => 0,
    }
}

#[inline(always)]
fn header(k: u32, api: u16, pid_tgid: u64, ts: u64) -> Header {
    Header {
        kind: k,
        api: api as u32,
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        ts_ns: ts,
    }
}

/// Wake the reader once per this much data added to the backlog. A wakeup per record costs
/// more than the rest of a probe (and, for the mmap watcher, made every process start on the
/// node pay for a context switch); the reader drains on a 10 ms timer, so nothing waits longer
/// than that.
const WAKEUP_BYTES: u64 = 512 << 10;

/// Bytes a record of type `R` takes in the ring: the kernel's 8-byte header, rounded up to 8.
const fn ring_bytes<R>() -> u64 {
    (core::mem::size_of::<R>() as u64 + 8 + 7) & !7
}

/// Submit flags for a record of `bytes` ring bytes: a wakeup when it took the backlog across a
/// multiple of [`WAKEUP_BYTES`], none otherwise. Not "whenever the backlog is above it": a
/// reader that falls behind (held to a CPU quota, or starved) leaves the backlog up, and every
/// record then queued the wakeup's irq_work anew, a self-IPI each (a VM exit in a guest). Held
/// to 1 % of a CPU that slowed a thread asking for 250 k launches/s to 84 k/s. A crossing
/// missed when other CPUs reserve in between is caught at the next multiple or by the timer.
#[inline(always)]
fn submit_flags(bytes: u64) -> u64 {
    let avail = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    if avail / WAKEUP_BYTES > avail.saturating_sub(bytes) / WAKEUP_BYTES {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

#[inline(always)]
fn emit<B: Copy + 'static>(k: u32, api: u16, pid_tgid: u64, ts: u64, body: B) {
    match EVENTS.reserve::<Record<B>>(0) {
        Some(mut e) => {
            e.write(Record {
                header: header(k, api, pid_tgid, ts),
                body,
            });
            e.submit(submit_flags(ring_bytes::<Record<B>>()));
            bump(&SUBMITTED, k);
        }
        None => bump(&DROPS, k),
    }
}

/// A driver call made inside a runtime call on the same thread is that runtime call seen one
/// layer down: it is not recorded again.
///
/// * The runtime call has a return probe (`PENDING_HAS_RETURN`): every driver call beneath its
///   stack frame is nested until the return probe clears the slot.
/// * Entry-only runtime call (launch, async copy): the first driver call of the same class,
///   beneath its frame while it is still running — the return address it was called with is
///   still in its slot on the stack — consumes the slot (bounded by
///   `PENDING_ENTRY_ONLY_MAX_JIFFIES`). Once the runtime call has returned, whatever the caller
///   calls next overwrites that slot.
///
/// `None` when the call is nested; else the thread's `PEND_RT` slot, when it has one.
#[inline(always)]
fn nested_in_runtime(cls: u32, sp: u64) -> Option<Home> {
    let Some(slot) = PEND_RT.get_ptr_mut() else {
        return Some(None);
    };
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    let p = unsafe { &mut *slot };
    if sp >= p.sp {
        return Some(Some(slot));
    }
    if p.state == PENDING_HAS_RETURN {
        return None;
    }
    if p.state == PENDING_ENTRY_ONLY
        && p.class == cls
        // SAFETY: plain helper call (inlined by the verifier).
        && unsafe { bpf_jiffies64() }.wrapping_sub(p.v[1]) < PENDING_ENTRY_ONLY_MAX_JIFFIES
        && stack(p.sp, 0) == p.v[0]
    {
        // Consumed in place: the thread keeps its slot (freed with the thread).
        p.state = PENDING_NONE;
        return None;
    }
    Some(Some(slot))
}

/// The calling thread's `PEND_RT` slot when a probe has already looked it up (`None`: not
/// looked up, or the thread has none yet). Its stack-sampling countdown lives there.
type Home = Option<*mut Pending>;

/// The slots of a call of this cookie's layer: runtime calls in `PEND_RT`, driver calls in
/// `PEND_DRV`.
#[inline(always)]
fn slots(c: &Cookie) -> &'static TaskStorage<Pending> {
    if c.has(cookie::F_RUNTIME) {
        &PEND_RT
    } else {
        &PEND_DRV
    }
}

/// For a return probe: the thread's slot and a copy of what [`save`] left in it, the slot
/// cleared in place (it stays the thread's).
#[inline(always)]
fn take(map: &TaskStorage<Pending>) -> Option<(*mut Pending, Pending)> {
    let slot = map.get_ptr_mut()?;
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    let p = unsafe { *slot };
    unsafe { (*slot).state = PENDING_NONE };
    Some((slot, p))
}

/// Clears a thread's slot in place (see [`save`]).
#[inline(always)]
fn clear_slot(map: &TaskStorage<Pending>) {
    if let Some(slot) = map.get_ptr_mut() {
        // SAFETY: as in `save`.
        unsafe { (*slot).state = PENDING_NONE };
    }
}

/// Marks an entry-only runtime call in flight so the enclosed driver call is not recorded twice.
/// `ret` is the call's return address (stack slot 0), still there while the call runs.
/// `v[1]` holds `bpf_jiffies64()` at entry, for the staleness bound. Only the fields an
/// entry-only slot is read by are written in place (the rest keeps whatever an earlier call
/// left: nothing reads it while the slot is entry-only, and [`save`] writes all of it), which
/// spares the launch path a whole-slot copy.
#[inline(always)]
fn runtime_slot(cls: u32, sp: u64, c: &Cookie, ret: u64) -> Home {
    // SAFETY: plain helper call (inlined by the verifier).
    let jiffies = unsafe { bpf_jiffies64() };
    let slot = PEND_RT.get_or_create()?;
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    unsafe {
        (*slot).sp = sp;
        (*slot).cookie = c.pack();
        (*slot).v[0] = ret;
        (*slot).v[1] = jiffies;
        (*slot).class = cls;
        (*slot).kind = 0;
        (*slot).state = PENDING_ENTRY_ONLY;
    }
    Some(slot)
}

/// Entry bookkeeping shared by every recorded call. Returns `None` when the call is a nested
/// driver call that must not be recorded, else the thread's `PEND_RT` slot when this looked it
/// up. `ret`: the return address when the probe has already read it (it is read here
/// otherwise, and only when needed).
#[inline(always)]
fn enter(c: &Cookie, cls: u32, sp: u64, ret: Option<u64>) -> Option<Home> {
    if c.has(cookie::F_RUNTIME) {
        if c.has(cookie::F_RET) {
            return Some(None);
        }
        let ret = match ret {
            Some(v) => v,
            None => stack(sp, 0),
        };
        Some(runtime_slot(cls, sp, c, ret))
    } else {
        let home = nested_in_runtime(cls, sp);
        if home.is_none() && c.has(cookie::F_RET) {
            // No stale entry may be picked up by this call's return probe.
            clear_slot(&PEND_DRV);
        }
        home
    }
}

/// The common start of a probe that takes part in runtime/driver pairing: the selected calling
/// thread, the cookie, the registers, the entry time — or `None` when the call is not recorded
/// (process not selected, or a driver call made inside a runtime call on this thread).
#[inline(always)]
fn begin(ctx: &ProbeContext, cls: u32) -> Option<(u64, Cookie, &pt_regs, u64)> {
    let (pt, c) = start(ctx)?;
    let r = regs(ctx);
    enter(&c, cls, r.rsp, None)?;
    // After the nesting check: a nested driver call needs no clock read.
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    Some((pt, c, r, now))
}

/// [`begin`] for a launch probe, which needs the first `N` 8-byte stack slots at entry (slot 0
/// is the return address): one user-memory read serves the probe and the runtime slot. Each
/// read costs more than the rest of a launch probe's bookkeeping (the kernel checks the
/// destination of every user copy), so a runtime probe reads once, before the slot is written,
/// and a driver probe reads only once it knows the call is recorded. It reads no clock:
/// [`emit_launch`] reads one only where a time is kept.
#[inline(always)]
fn begin_stack<const N: usize>(
    ctx: &ProbeContext,
    cls: u32,
) -> Option<(u64, Cookie, &pt_regs, [u64; N], Home)> {
    let (pt, c) = start(ctx)?;
    let r = regs(ctx);
    let read = || -> [u64; N] { user(r.rsp, [0; N]) };
    // A runtime probe is never nested: it always records, so it reads now.
    let early = c.has(cookie::F_RUNTIME).then(read);
    let home = enter(&c, cls, r.rsp, early.map(|s| s[0]))?;
    let s = match early {
        Some(s) => s,
        None => read(),
    };
    Some((pt, c, r, s, home))
}

/// Saves a call for its return probe. Runtime calls also mark the thread as "inside the runtime".
/// The slot is written in place, one store per field: the stack-sampling countdown stays, and
/// the zero words of `v` do not become a call to the BPF target's byte-wise `memset` (a
/// subprogram call that cost a launch probe about as much as its ring-buffer record). A thread
/// whose slot the kernel cannot make (out of memory) loses this call's record: it is counted
/// as dropped.
#[inline(always)]
fn save(c: &Cookie, cls: u32, k: u32, sp: u64, now: u64, v: [u64; 6]) {
    let Some(slot) = slots(c).get_or_create() else {
        bump(&DROPS, k);
        return;
    };
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    unsafe {
        (*slot).ts_ns = now;
        (*slot).sp = sp;
        (*slot).cookie = c.pack();
        for (i, x) in v.iter().enumerate() {
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*slot).v[i]), *x);
        }
        (*slot).class = cls;
        (*slot).kind = k;
        (*slot).state = PENDING_HAS_RETURN;
    }
}

// ---------------------------------------------------------------------------------------------
// Call stacks (sampled)

/// The sampling period in force when this call of the calling thread is one whose stack is
/// taken (every Nth per thread, the first included, so a thread's samples are the same
/// whichever CPUs it ran on); `None` otherwise. The countdown is in the thread's `PEND_RT`
/// slot: `home` when the probe has it, else looked up here (and made for a thread that has
/// none: one that calls the driver directly).
#[inline(always)]
fn stack_due(home: Home) -> Option<u32> {
    let period = match STACK_CONFIG.get(0) {
        Some(&p) if p > 0 => p,
        _ => return None,
    };
    if period == 1 {
        return Some(1);
    }
    // A thread's new slot is zeroed: its first call is sampled.
    let slot = match home {
        Some(slot) => slot,
        None => PEND_RT.get_or_create()?,
    };
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    let left = unsafe { &mut (*slot).stack_left };
    let n = *left;
    *left = if n == 0 { period - 1 } else { n - 1 };
    (n == 0).then_some(period)
}

#[inline(always)]
fn read_u64(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user faults safely on bad user addresses.
    unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
}

/// The calling thread's Python frames (innermost first) into `out`, when its process is a
/// known CPython: find the thread state whose native thread id is this thread (the GIL need
/// not be held: ctypes and most extensions release it around foreign calls) — or, for 3.9 and
/// 3.10, whose `pthread_self()` is this thread's FS base — then follow the interpreter frames.
/// Returns (frames, flags).
#[inline(always)]
fn python_frames(
    tgid: u32,
    tid: u32,
    out: &mut [profiler_common::PyFrameRaw; STACK_PY_MAX],
) -> (u32, u32) {
    // SAFETY: read-only lookup of a plain value.
    let Some(pp) = (unsafe { PY_PROCS.get(&tgid) }) else {
        return (0, 0);
    };
    let o = pp.off;
    let Some(interp) = read_u64(pp.runtime + o.runtime_interp_head as u64) else {
        return (0, stackflags::PY_FAULT);
    };
    let Some(mut ts) = read_u64(interp + o.interp_threads_head as u64) else {
        return (0, stackflags::PY_FAULT);
    };
    let want = if o.task_fsbase == PY_NONE {
        tid as u64
    } else {
        // SAFETY: the current task is valid for the probe's duration; the read faults safely.
        let task = unsafe { bpf_get_current_task() };
        match unsafe { bpf_probe_read_kernel((task + o.task_fsbase as u64) as *const u64) } {
            Ok(fs) if fs != 0 => fs,
            _ => return (0, stackflags::PY_FAULT),
        }
    };
    let mut mine = 0u64;
    let mut i = 0;
    while i < PY_MAX_THREADS {
        if ts == 0 {
            break;
        }
        match read_u64(ts + o.tstate_native_tid as u64) {
            Some(t) if t == want => {
                mine = ts;
                break;
            }
            Some(_) => {}
            None => return (0, stackflags::PY_FAULT),
        }
        ts = match read_u64(ts + o.tstate_next as u64) {
            Some(n) => n,
            None => return (0, stackflags::PY_FAULT),
        };
        i += 1;
    }
    if mine == 0 {
        return (0, stackflags::PY_NO_THREAD);
    }
    let Some(mut f) = read_u64(mine + o.tstate_frame as u64) else {
        return (0, stackflags::PY_FAULT);
    };
    if o.cframe_current != PY_NONE && f != 0 {
        f = match read_u64(f + o.cframe_current as u64) {
            Some(x) => x,
            None => return (0, stackflags::PY_FAULT),
        };
    }
    // One slot per frame walked, fixed index (the verifier follows a precise counter far
    // more cheaply than one that depends on which frames were kept): the interpreter's C-stack
    // shim frames are written with `instr = 0`, and userspace leaves them out.
    let mut i = 0usize;
    while i < STACK_PY_MAX {
        if f == 0 {
            return (i as u32, 0);
        }
        let shim = o.owner_cstack != PY_NONE
            && match unsafe { bpf_probe_read_user((f + o.frame_owner as u64) as *const u8) } {
                Ok(b) => b as u32 == o.owner_cstack,
                Err(_) => return (i as u32, stackflags::PY_FAULT),
            };
        let code = read_u64(f + o.frame_code as u64).unwrap_or(0);
        let instr = if shim {
            0
        } else {
            read_u64(f + o.frame_instr as u64).unwrap_or(0)
        };
        if let Some(slot) = out.get_mut(i) {
            slot.code = code;
            slot.instr = instr;
        }
        f = match read_u64(f + o.frame_previous as u64) {
            Some(x) => x,
            None => return ((i + 1) as u32, stackflags::PY_FAULT),
        };
        i += 1;
    }
    (
        STACK_PY_MAX as u32,
        if f == 0 { 0 } else { stackflags::PY_TRUNCATED },
    )
}

/// Emits the stack record of the call just recorded (same thread, same `ts`; 0 when the call
/// read no precise time, as a launch counted into an existing counter: the clock is read here
/// then) when this call is one of the thread's sampled ones ([`stack_due`]). At an entry probe,
/// `caller` is the return address read off the stack: the frame-pointer walk cannot see the
/// caller there (the callee has not pushed its frame yet), so it replaces the walk's first
/// entry, which is the probed function itself.
#[inline(always)]
fn sample_stack<C: EbpfContext>(
    ctx: &C,
    api: u16,
    pid_tgid: u64,
    ts: u64,
    of_kind: u32,
    handle: u64,
    dur_ns: u64,
    caller: Option<u64>,
    home: Home,
) {
    let Some(period) = stack_due(home) else {
        return;
    };
    let ts = if ts == 0 {
        // SAFETY: plain helper call.
        unsafe { bpf_ktime_get_ns() }
    } else {
        ts
    };
    let Some(mut e) = EVENTS.reserve::<Record<StackBody>>(0) else {
        bump(&DROPS, kind::STACK);
        return;
    };
    let rec = e.as_mut_ptr();
    // SAFETY: `rec` points at reserved ring-buffer memory of the record's size; every field is
    // written before submit.
    unsafe {
        (*rec).header = header(kind::STACK, api, pid_tgid, ts);
        let b = &mut (*rec).body;
        b.handle = handle;
        b.dur_ns = dur_ns;
        b.of_kind = of_kind;
        b.period = period;
        b._pad = 0;
        // `native` needs no clearing: bpf_get_stack zero-fills what the walk leaves (and the
        // whole buffer when it fails). `py` is cleared one word at a time: a plain assignment
        // compiles to a call to the BPF target's byte-wise `memset`, which made a sampled
        // call cost hundreds of nanoseconds more.
        for i in 0..STACK_PY_MAX {
            core::ptr::write_volatile(
                core::ptr::addr_of_mut!(b.py[i]),
                profiler_common::PyFrameRaw::default(),
            );
        }
        let got = bpf_get_stack(
            ctx.as_ptr(),
            b.native.as_mut_ptr() as *mut core::ffi::c_void,
            (STACK_NATIVE_MAX * 8) as u32,
            aya_ebpf::bindings::BPF_F_USER_STACK as u64,
        );
        let mut n = if got > 0 { (got as u32) / 8 } else { 0 };
        let mut fl = 0;
        if let Some(ret) = caller {
            b.native[0] = ret;
            if n == 0 {
                n = 1;
            }
            fl |= stackflags::AT_ENTRY;
        }
        if n as usize >= STACK_NATIVE_MAX {
            fl |= stackflags::NATIVE_TRUNCATED;
        }
        b.native_len = n;
        let (np, pf) = python_frames((pid_tgid >> 32) as u32, pid_tgid as u32, &mut b.py);
        b.py_len = np;
        b.flags = fl | pf;
    }
    e.submit(submit_flags(ring_bytes::<Record<StackBody>>()));
    bump(&SUBMITTED, kind::STACK);
}

// ---------------------------------------------------------------------------------------------
// Launches (entry-only: the hot path)

/// Adds one launch to its process's counter for this configuration (service mode). `false`
/// when the counters are full: the launch must then be recorded instead.
///
/// The precise clock is read into `now` when this makes the entry (its `first_ns` orders it
/// against an exec), and after that once per kernel tick per entry (`last_ns`, stamped when
/// `bpf_jiffies64()`, a plain load, has moved on): a launch into an entry stamped this tick
/// reads no clock at all. Reading it at every launch cost about a sixth of a counted launch's
/// program time here (driver launch 529 -> 444 ns without it; the TSC is read through an
/// indirect call); `last_ns` only places the counts on the timeline, whose resolution is the
/// read period.
#[inline(always)]
fn count_launch(api: u16, pt: u64, now: &mut u64, b: &LaunchBody) -> bool {
    let key = LaunchKey {
        tgid: (pt >> 32) as u32,
        api: api as u32,
        func: b.func,
        stream: b.stream,
        grid: b.grid,
        block: b.block,
        shared_bytes: b.shared_bytes,
        flags: b.flags,
    };
    let add = |v: *mut LaunchCount| {
        // SAFETY: `v` points at a value of our own map; the count is shared by every CPU, so it
        // is added atomically; the stamp is a hint and the last writer wins (two CPUs that both
        // see a new tick both stamp it).
        unsafe {
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                core::ptr::addr_of_mut!((*v).count),
                1,
            );
            let jiffies = bpf_jiffies64();
            if core::ptr::read_volatile(core::ptr::addr_of!((*v).last_jiffies)) != jiffies {
                core::ptr::write_volatile(core::ptr::addr_of_mut!((*v).last_jiffies), jiffies);
                core::ptr::write_volatile(
                    core::ptr::addr_of_mut!((*v).last_ns),
                    bpf_ktime_get_ns(),
                );
            }
        }
    };
    if let Some(v) = LAUNCH_COUNTS.get_ptr_mut(&key) {
        add(v);
        return true;
    }
    // SAFETY: plain helper calls (jiffies is inlined by the verifier).
    let (t, jiffies) = unsafe { (bpf_ktime_get_ns(), bpf_jiffies64()) };
    *now = t;
    let first = LaunchCount {
        count: 1,
        last_ns: t,
        first_ns: t,
        last_jiffies: jiffies,
    };
    // BPF_NOEXIST: another CPU may have made the entry since the lookup; then add to it.
    if LAUNCH_COUNTS.insert(&key, &first, 1).is_ok() {
        return true;
    }
    match LAUNCH_COUNTS.get_ptr_mut(&key) {
        Some(v) => {
            add(v);
            true
        }
        None => {
            bump(&FAULTS, fault::COUNTS_FULL);
            false
        }
    }
}

/// Records a launch (or, in service mode, counts it), and its stack when the thread's sampling
/// says so. The precise clock is read only where a time is kept: a record, a counter's first
/// launch, a stack sample (0 in `now`: not read yet).
#[inline(always)]
fn emit_launch(ctx: &ProbeContext, api: u16, pt: u64, body: LaunchBody, home: Home) {
    let mut now = 0;
    let counted = matches!(LAUNCH_MODE.get(0), Some(&m) if m == LAUNCHES_COUNTED)
        && count_launch(api, pt, &mut now, &body);
    if !counted {
        if now == 0 {
            // SAFETY: plain helper call.
            now = unsafe { bpf_ktime_get_ns() };
        }
        emit(kind::LAUNCH, api, pt, now, body);
    }
    sample_stack(
        ctx,
        api,
        pt,
        now,
        kind::LAUNCH,
        body.func,
        0,
        Some(body.caller),
        home,
    );
}

/// `CUresult cuLaunchKernel(CUfunction f, unsigned gridX, gridY, gridZ, unsigned blockX, blockY,
///  blockZ, unsigned sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)`
/// (+ `_ptsz`, and `cuLaunchCooperativeKernel(_ptsz)`, which lacks `extra`).
/// rdi=f, esi/edx/ecx=grid, r8d/r9d=blockX/Y, [sp+8]=blockZ, [sp+16]=smem, [sp+24]=stream.
#[uprobe]
pub fn drv_launch(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    // [ret, blockZ, smem, stream]
    let Some((pt, c, r, s, home)) = begin_stack::<4>(&ctx, class::LAUNCH) else {
        return 0;
    };
    let fl = if c.has(cookie::F_COOP) {
        flags::COOPERATIVE
    } else {
        0
    };
    emit_launch(&ctx, c.api, pt, drv_launch_body(r, s, fl), home);
    0
}

/// A `cuLaunchKernel` call's record from its registers and first four stack slots (see
/// [`drv_launch`]); the benchmark's bare recording probe writes the same.
#[inline(always)]
fn drv_launch_body(r: &pt_regs, s: [u64; 4], flags: u32) -> LaunchBody {
    LaunchBody {
        func: r.rdi,
        stream: s[3],
        caller: s[0],
        grid: [r.rsi as u32, r.rdx as u32, r.rcx as u32],
        block: [r.r8 as u32, r.r9 as u32, s[1] as u32],
        shared_bytes: s[2] as u32,
        flags,
    }
}

/// `CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
///  void **extra)` (+ `_ptsz`). config: grid@0/4/8, block@12/16/20, smem@24 (u32), hStream@32.
#[uprobe]
pub fn drv_launch_ex(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, [ret], home)) = begin_stack::<1>(&ctx, class::LAUNCH) else {
        return 0;
    };
    // [grid x,y,z, block x,y,z, smem, pad, hStream lo, hStream hi]: one read
    let cfg: [u32; 10] = user::<[u32; 10]>(r.rdi, [0; 10]);
    let body = LaunchBody {
        func: r.rsi,
        stream: (cfg[8] as u64) | ((cfg[9] as u64) << 32),
        caller: ret,
        grid: [cfg[0], cfg[1], cfg[2]],
        block: [cfg[3], cfg[4], cfg[5]],
        shared_bytes: cfg[6],
        flags: flags::LAUNCH_EX,
    };
    emit_launch(&ctx, c.api, pt, body, home);
    0
}

/// `cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
///  size_t sharedMem, cudaStream_t stream)` (+ `_ptsz`, `cudaLaunchCooperativeKernel(_ptsz)`).
/// A `dim3` by value takes two registers: rsi = grid.x | grid.y << 32, rdx = grid.z;
/// rcx = block.x | block.y << 32, r8 = block.z; r9 = args; [sp+8] = sharedMem, [sp+16] = stream.
#[uprobe]
pub fn rt_launch(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    // [ret, sharedMem, stream]
    let Some((pt, c, r, s, home)) = begin_stack::<3>(&ctx, class::LAUNCH) else {
        return 0;
    };
    let body = LaunchBody {
        func: r.rdi,
        stream: s[2],
        caller: s[0],
        grid: [r.rsi as u32, (r.rsi >> 32) as u32, r.rdx as u32],
        block: [r.rcx as u32, (r.rcx >> 32) as u32, r.r8 as u32],
        shared_bytes: s[1] as u32,
        flags: if c.has(cookie::F_COOP) {
            flags::COOPERATIVE
        } else {
            0
        },
    };
    emit_launch(&ctx, c.api, pt, body, home);
    0
}

/// `cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
///  void **args)` (+ `_ptsz`). config: gridDim@0, blockDim@12, dynamicSmemBytes@24 (size_t),
///  stream@32.
#[uprobe]
pub fn rt_launch_ex(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, [ret], home)) = begin_stack::<1>(&ctx, class::LAUNCH) else {
        return 0;
    };
    // [grid x,y,z, block x,y,z, smem lo, smem hi, stream lo, stream hi]
    let cfg: [u32; 10] = user::<[u32; 10]>(r.rdi, [0; 10]);
    let body = LaunchBody {
        func: r.rsi,
        stream: (cfg[8] as u64) | ((cfg[9] as u64) << 32),
        caller: ret,
        grid: [cfg[0], cfg[1], cfg[2]],
        block: [cfg[3], cfg[4], cfg[5]],
        shared_bytes: cfg[6],
        flags: flags::LAUNCH_EX,
    };
    emit_launch(&ctx, c.api, pt, body, home);
    0
}

/// `cuGraphLaunch(CUgraphExec, CUstream)` / `cudaGraphLaunch(cudaGraphExec_t, cudaStream_t)`
/// (+ `_ptsz`): rdi = exec, rsi = stream.
#[uprobe]
pub fn graph_launch(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, now)) = begin(&ctx, class::GRAPH) else {
        return 0;
    };
    emit(
        kind::GRAPH,
        c.api,
        pt,
        now,
        GraphBody {
            graph_exec: r.rdi,
            stream: r.rsi,
        },
    );
    0
}

// ---------------------------------------------------------------------------------------------
// Copies

/// `cudaMemcpyKind` → direction (0 H2H, 1 H2D, 2 D2H, 3 D2D, 4 Default; else unknown).
#[inline(always)]
fn dir_of_kind(k: u64) -> u32 {
    if k <= 4 { k as u32 } else { dir::UNKNOWN }
}

/// `CUmemorytype` pair → direction (HOST=1, DEVICE=2, ARRAY=3 (device-side), UNIFIED=4).
#[inline(always)]
fn dir_of_types(src: u32, dst: u32) -> u32 {
    let s_host = src == 1;
    let d_host = dst == 1;
    if src == 4 || dst == 4 {
        dir::DEFAULT
    } else if src == 0 || dst == 0 || src > 4 || dst > 4 {
        dir::UNKNOWN
    } else {
        match (s_host, d_host) {
            (true, true) => dir::H2H,
            (true, false) => dir::H2D,
            (false, true) => dir::D2H,
            (false, false) => dir::D2D,
        }
    }
}

#[inline(always)]
fn finish_copy(
    pt: u64,
    c: &Cookie,
    sp: u64,
    now: u64,
    dst: u64,
    src: u64,
    bytes: u64,
    stream: u64,
    direction: u32,
) {
    let fl = if c.has(cookie::F_ASYNC) {
        flags::ASYNC
    } else {
        0
    };
    if c.has(cookie::F_RET) {
        save(
            c,
            class::COPY,
            kind::COPY,
            sp,
            now,
            [
                dst,
                src,
                bytes,
                stream,
                direction as u64 | ((fl as u64) << 32),
                0,
            ],
        );
    } else {
        let body = CopyBody {
            dst,
            src,
            bytes,
            stream,
            dur_ns: 0,
            direction,
            flags: fl,
            ret: 0,
            _pad: 0,
        };
        emit(kind::COPY, c.api, pt, now, body);
    }
}

/// Linear copies, every API whose arguments are plain integers:
/// `cuMemcpy{HtoD,DtoH,DtoD}_v2(dst, src, bytes)`, `…Async_v2(dst, src, bytes, stream)`,
/// `cuMemcpy(dst, src, bytes)`, `cuMemcpyPeer(dst, dstCtx, src, srcCtx, bytes[, stream])`,
/// `cudaMemcpy(dst, src, count, kind)`, `cudaMemcpyAsync(…, kind, stream)`,
/// `cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind)` (bytes = width × height),
/// `cudaMemcpyPeer(dst, dstDev, src, srcDev, count[, stream])`,
/// `cudaMemcpy{To,From}Symbol(sym/dst, src/sym, count, offset, kind)`.
/// Cookie: a = dst, b = src, c = bytes (F_2D: c × c+1), d = stream, e = kind (F_KIND_ARG),
/// p = fixed direction.
#[uprobe]
pub fn copy_linear(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, now)) = begin(&ctx, class::COPY) else {
        return 0;
    };
    let bytes = if c.has(cookie::F_2D) {
        arg(r, c.c).wrapping_mul(arg(r, c.c + 1))
    } else {
        arg(r, c.c)
    };
    let direction = if c.has(cookie::F_KIND_ARG) {
        dir_of_kind(arg(r, c.e))
    } else {
        c.p as u32
    };
    finish_copy(
        pt,
        &c,
        r.rsp,
        now,
        arg(r, c.a),
        arg(r, c.b),
        bytes,
        arg(r, c.d),
        direction,
    );
    0
}

/// `cuMemcpy2D_v2(const CUDA_MEMCPY2D *p)` / `2DUnaligned_v2` / `2DAsync_v2(p, stream)`:
/// srcMemoryType@16, srcHost@24, srcDevice@32, dstMemoryType@72, dstHost@80, dstDevice@88,
/// WidthInBytes@112, Height@120. Cookie: d = stream.
#[uprobe]
pub fn copy_2d(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, now)) = begin(&ctx, class::COPY) else {
        return 0;
    };
    let p: [u64; 16] = user::<[u64; 16]>(r.rdi, [0; 16]);
    let (st, dt) = (p[2] as u32, p[9] as u32);
    let src = if st == 1 { p[3] } else { p[4] };
    let dst = if dt == 1 { p[10] } else { p[11] };
    finish_copy(
        pt,
        &c,
        r.rsp,
        now,
        dst,
        src,
        p[14].wrapping_mul(p[15]),
        arg(r, c.d),
        dir_of_types(st, dt),
    );
    0
}

/// `cuMemcpy3D_v2(const CUDA_MEMCPY3D *p)`, `3DAsync_v2(p, stream)`, `cuMemcpy3DPeer(Async)`:
/// srcMemoryType@32, srcDevice@48, dstMemoryType@120, dstDevice@136, Width@176, Height@184,
/// Depth@192. Cookie: d = stream, p = PEER for the peer variants (else from memory types).
#[uprobe]
pub fn copy_3d(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, now)) = begin(&ctx, class::COPY) else {
        return 0;
    };
    let base = r.rdi;
    let src_t: [u64; 3] = user::<[u64; 3]>(base + 32, [0; 3]);
    let dst_t: [u64; 3] = user::<[u64; 3]>(base + 120, [0; 3]);
    let ext: [u64; 3] = user::<[u64; 3]>(base + 176, [0; 3]);
    let direction = if c.p as u32 == dir::PEER {
        dir::PEER
    } else {
        dir_of_types(src_t[0] as u32, dst_t[0] as u32)
    };
    let bytes = ext[0].wrapping_mul(ext[1]).wrapping_mul(ext[2]);
    finish_copy(
        pt,
        &c,
        r.rsp,
        now,
        dst_t[2],
        src_t[2],
        bytes,
        arg(r, c.d),
        direction,
    );
    0
}

/// `cudaMemcpy3D(const cudaMemcpy3DParms *p)` / `3DAsync(p, stream)`: extent@128 (w, h, d),
/// kind@152. Cookie: d = stream.
#[uprobe]
pub fn copy_rt3d(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, now)) = begin(&ctx, class::COPY) else {
        return 0;
    };
    let ext: [u64; 4] = user::<[u64; 4]>(r.rdi + 128, [0; 4]);
    let bytes = ext[0].wrapping_mul(ext[1]).wrapping_mul(ext[2]);
    finish_copy(
        pt,
        &c,
        r.rsp,
        now,
        0,
        0,
        bytes,
        arg(r, c.d),
        dir_of_kind(ext[3] & 0xffff_ffff),
    );
    0
}

// ---------------------------------------------------------------------------------------------
// Synchronisation

/// `cuCtxSynchronize()`, `cuStreamSynchronize(stream)`, `cuEventSynchronize(event)`,
/// `cudaDeviceSynchronize()`, `cudaStreamSynchronize(stream)`, `cudaEventSynchronize(event)`
/// (entry + return: blocked time), and the GPU-side waits `cuStreamWaitEvent(stream, event, f)`
/// / `cudaStreamWaitEvent` (entry only). Cookie: a = handle (NONE for context/device).
#[uprobe]
pub fn sync_entry(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, now)) = begin(&ctx, class::SYNC) else {
        return 0;
    };
    let handle = arg(r, c.a);
    if c.has(cookie::F_RET) {
        save(
            &c,
            class::SYNC,
            kind::SYNC,
            r.rsp,
            now,
            [handle, 0, 0, 0, 0, 0],
        );
    } else {
        let fl = if c.has(cookie::F_GPU_SIDE) {
            flags::GPU_SIDE
        } else {
            0
        };
        emit(
            kind::SYNC,
            c.api,
            pt,
            now,
            SyncBody {
                handle,
                dur_ns: 0,
                ret: 0,
                flags: fl,
            },
        );
    }
    0
}

// ---------------------------------------------------------------------------------------------
// Memory

/// Allocations: `cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)`, `cuMemAllocAsync(dptr, bytes,
/// stream)`, `cuMemAllocManaged(dptr, bytes, flags)`, `cuMemAllocHost_v2(void **pp, bytes)`,
/// `cuMemHostAlloc(pp, bytes, flags)`, `cuMemAllocFromPoolAsync(dptr, bytes, pool, stream)`,
/// `cuMemAllocPitch_v2(dptr, size_t *pitch, width, height, elem)` (bytes = *pitch × height),
/// `cuMemCreate(handle *, size, prop, flags)`, and the runtime's `cudaMalloc*`/`cudaHostAlloc`.
/// Frees: `cuMemFree_v2(ptr)`, `cuMemFreeAsync(ptr, stream)`, `cuMemFreeHost(p)`,
/// `cuMemRelease(handle)`, `cudaFree*`. Maps: `cuMemMap(ptr, size, offset, handle, flags)`,
/// `cuMemUnmap(ptr, size)` (entry only).
/// Cookie: q = memop, p = memkind, a = out-pointer (alloc) or pointer (free/map),
/// b = pitch out-pointer (pitched), c = bytes (or height when pitched), d = stream.
#[uprobe]
pub fn mem_entry(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, now)) = begin(&ctx, class::MEM) else {
        return 0;
    };
    let op = c.q as u32;
    let v = [arg(r, c.a), arg(r, c.c), arg(r, c.d), arg(r, c.b), 0, 0];
    if c.has(cookie::F_RET) {
        save(&c, class::MEM, kind::MEM, r.rsp, now, v);
    } else {
        let body = MemBody {
            ptr: v[0],
            bytes: v[1],
            dur_ns: 0,
            stream: v[2],
            op,
            mem_kind: c.p as u32,
            ret: 0,
            flags: if c.has(cookie::F_ASYNC) {
                flags::ASYNC
            } else {
                0
            },
        };
        emit(kind::MEM, c.api, pt, now, body);
    }
    0
}

// ---------------------------------------------------------------------------------------------
// The one return probe for copies, syncs and memory operations

/// Return probe of every call saved with [`save`]: measures the blocked time, reads results.
#[uretprobe]
pub fn api_ret(ctx: RetProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: the context pointer is the program's own.
    let c = Cookie::unpack(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let Some((slot, p)) = take(slots(&c)) else {
        return 0;
    };
    // The thread's own PEND_RT slot holds its stack-sampling countdown.
    let home = if c.has(cookie::F_RUNTIME) {
        Some(slot)
    } else {
        None
    };
    if p.state != PENDING_HAS_RETURN || p.cookie != c.pack() {
        return 0; // a slot left by another call: not ours to finish
    }
    let now = unsafe { bpf_ktime_get_ns() };
    let dur = now.wrapping_sub(p.ts_ns);
    let ret: i64 = ctx.ret();
    let ret = ret as i32;
    match p.kind {
        kind::COPY => {
            let body = CopyBody {
                dst: p.v[0],
                src: p.v[1],
                bytes: p.v[2],
                stream: p.v[3],
                dur_ns: dur,
                direction: p.v[4] as u32,
                flags: ((p.v[4] >> 32) as u32) | flags::HAS_RETURN,
                ret,
                _pad: 0,
            };
            emit(kind::COPY, c.api, pid_tgid, p.ts_ns, body);
            sample_stack(
                &ctx,
                c.api,
                pid_tgid,
                p.ts_ns,
                kind::COPY,
                p.v[2],
                dur,
                None,
                home,
            );
        }
        kind::SYNC => {
            let body = SyncBody {
                handle: p.v[0],
                dur_ns: dur,
                ret,
                flags: flags::HAS_RETURN,
            };
            emit(kind::SYNC, c.api, pid_tgid, p.ts_ns, body);
            sample_stack(
                &ctx,
                c.api,
                pid_tgid,
                p.ts_ns,
                kind::SYNC,
                p.v[0],
                dur,
                None,
                home,
            );
        }
        kind::MEM => {
            let op = c.q as u32;
            let mem_kind = c.p as u32;
            let (mut ptr, mut bytes) = (p.v[0], p.v[1]);
            if op == memop::ALLOC || op == memop::VMM_CREATE {
                // v[0] is the out-pointer: read what the call stored there.
                ptr = if ret == 0 { user::<u64>(p.v[0], 0) } else { 0 };
                if mem_kind == memkind::PITCHED && ret == 0 {
                    let pitch = user::<u64>(p.v[3], 0);
                    bytes = pitch.wrapping_mul(p.v[1]);
                }
            }
            let body = MemBody {
                ptr,
                bytes,
                dur_ns: dur,
                stream: p.v[2],
                op,
                mem_kind,
                ret,
                flags: flags::HAS_RETURN
                    | if c.has(cookie::F_ASYNC) {
                        flags::ASYNC
                    } else {
                        0
                    },
            };
            emit(kind::MEM, c.api, pid_tgid, p.ts_ns, body);
        }
        _ => {}
    }
    0
}

// ---------------------------------------------------------------------------------------------
// Kernel names

/// Name-learning calls, saved for their return probe ([`name_ret`]). Cookie p = source:
/// * `cuModuleGetFunction(CUfunction *out, CUmodule mod, const char *name)` and
///   `cuLibraryGetKernel(CUkernel *out, CUlibrary lib, const char *name)`: a = out, b = scope,
///   c = name (MODULE_GET_FUNCTION / LIBRARY_GET_KERNEL);
/// * `cuFuncGetName(const char **name, CUfunction f)` / `cuKernelGetName`: a = name out, b = f
///   (GET_NAME);
/// * `cuKernelGetFunction(CUfunction *out, CUkernel k)` / `__cudaGetKernel(cudaKernel_t *out,
///   const void *hostFun)`: a = out, b = what `*out` stands for (source 0: alias).
#[uprobe]
pub fn name_entry(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((_, c)) = start(&ctx) else { return 0 };
    let r = regs(&ctx);
    let now = unsafe { bpf_ktime_get_ns() };
    save(
        &c,
        class::NAME,
        kind::NAME,
        r.rsp,
        now,
        [arg(r, c.a), arg(r, c.b), arg(r, c.c), 0, 0, 0],
    );
    0
}

#[inline(always)]
fn emit_name(pt: u64, api: u16, ts: u64, handle: u64, scope: u64, source: u32, name: u64) {
    let Some(mut e) = EVENTS.reserve::<Record<NameBody>>(0) else {
        bump(&DROPS, kind::NAME);
        return;
    };
    let rec = e.as_mut_ptr();
    // SAFETY: `rec` points at our reserved ring-buffer slot, sized for Record<NameBody>.
    unsafe {
        (*rec).header = header(kind::NAME, api, pt, ts);
        (*rec).body.handle = handle;
        (*rec).body.scope = scope;
        (*rec).body.source = source;
        (*rec).body._pad = 0;
        let buf: &mut [u8; NAME_CAP] = &mut (*rec).body.name;
        let n = match bpf_probe_read_user_str_bytes(name as *const u8, buf) {
            Ok(s) => s.len(),
            Err(_) => 0,
        };
        (*rec).body.len = n as u32;
        (*rec).body.flags = if n >= NAME_CAP - 1 {
            flags::TRUNCATED
        } else {
            0
        };
    }
    e.submit(submit_flags(ring_bytes::<Record<NameBody>>()));
    bump(&SUBMITTED, kind::NAME);
}

#[uretprobe]
pub fn name_ret(ctx: RetProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let pid_tgid = bpf_get_current_pid_tgid();
    let c = Cookie::unpack(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let Some((_, p)) = take(slots(&c)) else {
        return 0;
    };
    let ret: i64 = ctx.ret();
    if p.kind != kind::NAME || p.cookie != c.pack() || ret as i32 != 0 {
        return 0;
    }
    let out = user::<u64>(p.v[0], 0);
    let source = c.p as u32;
    if source == 0 {
        if out != 0 && out != p.v[1] {
            emit(
                kind::ALIAS,
                c.api,
                pid_tgid,
                p.ts_ns,
                AliasBody {
                    from: out,
                    to: p.v[1],
                },
            );
        }
    } else if source == profiler_common::namesrc::GET_NAME {
        emit_name(pid_tgid, c.api, p.ts_ns, p.v[1], 0, source, out);
    } else if out != 0 {
        emit_name(pid_tgid, c.api, p.ts_ns, out, p.v[1], source, p.v[2]);
    }
    0
}

/// `void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
///  const char *deviceName, …)`: rsi = host stub (the `func` later passed to cudaLaunchKernel),
/// rdx = mangled device name. Entry only; fires at module registration.
#[uprobe]
pub fn register_function(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c)) = start(&ctx) else { return 0 };
    let r = regs(&ctx);
    let now = unsafe { bpf_ktime_get_ns() };
    emit_name(
        pt,
        c.api,
        now,
        r.rsi,
        r.rdi,
        profiler_common::namesrc::REGISTER_FUNCTION,
        r.rdx,
    );
    0
}

// ---------------------------------------------------------------------------------------------
// Discovery of late loads: mmap(PROT_EXEC) of a file, reported when the syscall returns (the
// mapping is then in /proc/PID/maps). The daemon reads that process's maps and attaches a CUDA
// library it has not attached yet. Field offsets are those of the syscalls:sys_{enter,exit}_mmap
// tracepoint formats, which follow the syscall ABI (8-byte slots from offset 16).

const PROT_EXEC: u64 = 4;

#[tracepoint]
pub fn mmap_enter(ctx: TracePointContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK_TP);
    // SAFETY: reads inside the tracepoint's own record.
    let prot: u64 = unsafe { ctx.read_at(32) }.unwrap_or(0);
    // SAFETY: as above.
    let fd: u64 = unsafe { ctx.read_at(48) }.unwrap_or(u64::MAX);
    if prot & PROT_EXEC == 0 || (fd as i64) < 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !selected((pid_tgid >> 32) as u32) {
        return 0;
    }
    // SAFETY: as above.
    let len: u64 = unsafe { ctx.read_at(24) }.unwrap_or(0);
    let _ = MMAP_PEND.insert(&(pid_tgid as u32), &len, 0);
    0
}

#[tracepoint]
pub fn mmap_exit(ctx: TracePointContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK_TP);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // SAFETY: read-only lookup of a plain value.
    let Some(&len) = (unsafe { MMAP_PEND.get(&tid) }) else {
        return 0;
    };
    let _ = MMAP_PEND.remove(&tid);
    // SAFETY: reads inside the tracepoint's own record.
    let ret: i64 = unsafe { ctx.read_at(16) }.unwrap_or(-1);
    if (-4095..0).contains(&ret) {
        return 0;
    }
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    emit(
        kind::MAP,
        0,
        pid_tgid,
        now,
        MapBody {
            addr: ret as u64,
            len,
        },
    );
    0
}

// ---------------------------------------------------------------------------------------------
// Process ends: sched:sched_process_exit fires for every thread. Where the kernel says which exit
// ends the thread group (`group_dead`, 6.16+), that one is the process's end: no thread of the
// process can record anything after it, so every later record with the same tgid belongs to a
// new process that was given the same pid. On older kernels the group leader's exit stands in.

#[tracepoint]
pub fn proc_exit(ctx: TracePointContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK_TP);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    // What this thread left in MMAP_PEND goes with it, whether or not its process is selected:
    // LRU eviction would make room eventually, but entries of ended threads must not crowd out
    // live ones, and a node's entry counts must come back when its jobs end. (Its PEND_RT and
    // PEND_DRV slots are task storage: the kernel frees them with the thread.)
    let _ = MMAP_PEND.remove(&tid);
    match EXIT_CONFIG.get(0) {
        Some(&off) if off != 0 => {
            // SAFETY: a read inside the tracepoint's own record, at the offset its format gives.
            let dead: u8 = unsafe { ctx.read_at(off as usize) }.unwrap_or(0);
            if dead == 0 {
                return 0;
            }
        }
        _ => {
            if tgid != pid_tgid as u32 {
                return 0;
            }
        }
    }
    let wanted = selected(tgid);
    // The pid may be handed to another process now: it must be judged afresh, and a `--pid`
    // selection named this process, not whichever comes next with its number. (After
    // `selected`, which may have cached a verdict just now.)
    let _ = FILTER_VERDICT.remove(&tgid);
    let _ = FILTER_TGIDS.remove(&tgid);
    let _ = PY_PROCS.remove(&tgid);
    if !wanted {
        return 0;
    }
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let comm = bpf_get_current_comm().unwrap_or([0; 16]);
    // The low half is the real uid.
    let uid = bpf_get_current_uid_gid() as u32;
    emit(
        kind::EXIT,
        0,
        pid_tgid,
        now,
        ExitBody {
            comm,
            uid,
            _reserved: 0,
        },
    );
    0
}

// ---------------------------------------------------------------------------------------------
// Image replaced: sched:sched_process_exec fires in the process after a successful exec, under
// its new name. The pid stays; the program, its mappings and every handle the old one held do
// not. Per-thread state went with the threads exec ended (proc_exit); what the probes keep per
// process for the old program goes now.

#[tracepoint]
pub fn proc_exec(ctx: TracePointContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK_TP);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let _ = PY_PROCS.remove(&tgid);
    if !selected(tgid) {
        return 0;
    }
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let comm = bpf_get_current_comm().unwrap_or([0; 16]);
    let uid = bpf_get_current_uid_gid() as u32;
    emit(
        kind::EXEC,
        0,
        pid_tgid,
        now,
        ExitBody {
            comm,
            uid,
            _reserved: 0,
        },
    );
    0
}

// ---------------------------------------------------------------------------------------------
// The benchmark's floor: an empty uprobe, attached by `gpuprofd floor` at the same sites as the
// real probes, to measure what the kernel's uprobe machinery costs before any work of ours.

#[uprobe]
pub fn empty(_ctx: ProbeContext) -> u32 {
    0
}

// The benchmark's lower bound for full capture: `gpuprofd floor --program NAME` puts one of
// these at the outermost probe site of a call (the rest keep `empty`). `bench_record` does only
// what any probe that records a launch must do: read the stack-passed arguments and the return
// address (one user-memory read), read the clock, and put one launch-sized record with the
// thread's ids into the ring buffer (no wakeup). No filter, no cookie, no pairing, no counters,
// no stack sampling: whatever a full capture costs above it is our own bookkeeping. The other
// three are its parts alone, so that the benchmark can say what each part costs on the host.
// The empty tail call is kept (see `NO_PRIV_STACK`): without it a program with this frame runs
// on a per-CPU stack, which is wrong under preemption, so no correct probe can leave it out.

/// The first four stack slots at entry: the return address and three stack-passed arguments
/// (`cuLaunchKernel`'s blockDimZ, sharedMemBytes and hStream).
#[inline(always)]
fn bench_stack(r: &pt_regs) -> [u64; 4] {
    // SAFETY: bpf_probe_read_user faults safely on bad user addresses.
    unsafe { bpf_probe_read_user(r.rsp as *const [u64; 4]) }.unwrap_or([0; 4])
}

#[inline(always)]
fn bench_emit(r: &pt_regs, s: [u64; 4], now: u64) {
    let pt = bpf_get_current_pid_tgid();
    if let Some(mut e) = EVENTS.reserve::<Record<LaunchBody>>(0) {
        e.write(Record {
            header: header(kind::LAUNCH, 0, pt, now),
            body: drv_launch_body(r, s, 0),
        });
        e.submit(BPF_RB_NO_WAKEUP as u64);
    }
}

/// Stack read, clock read and ring record: the least a recording probe does.
#[uprobe]
pub fn bench_record(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let r = regs(&ctx);
    let s = bench_stack(r);
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    bench_emit(r, s, now);
    0
}

/// The user-memory read alone.
#[uprobe]
pub fn bench_read(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    // A helper call is opaque to the compiler: the read stays although its result is unused.
    let _ = bench_stack(regs(&ctx));
    0
}

/// The clock read alone.
#[uprobe]
pub fn bench_clock(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    // SAFETY: plain helper call (kept although unused, as above).
    let _ = unsafe { bpf_ktime_get_ns() };
    0
}

/// The ring record alone (its arguments from registers only, no time).
#[uprobe]
pub fn bench_ring(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    bench_emit(regs(&ctx), [0; 4], 0);
    0
}

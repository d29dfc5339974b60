//! What every probe does first and last: the empty tail call that keeps it off a per-CPU
//! stack, the in-kernel filter, argument and user-memory reads, the record header, the ring
//! buffer's submit and its counters.

use super::*;

// Common pieces

#[inline(always)]
pub(crate) fn bump(map: &PerCpuArray<u64>, k: u32) {
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
pub(crate) static NO_PRIV_STACK: ProgramArray = ProgramArray::with_max_entries(1, 0);
#[map(name = "NO_PRIV_STACK_TP")]
pub(crate) static NO_PRIV_STACK_TP: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// See [`NO_PRIV_STACK`]: call first in every program (uprobes with `NO_PRIV_STACK`,
/// tracepoints with `NO_PRIV_STACK_TP`).
#[inline(always)]
pub(crate) fn kernel_stack<C: EbpfContext>(ctx: &C, empty: &ProgramArray) {
    // SAFETY: the array is never filled, so the tail call fails and control comes back here.
    unsafe { empty.tail_call(ctx, 0) };
}

/// Whether the current task's cgroup (v2) is a selected cgroup or lies below one. Decided once
/// per process and cached; userspace clears the cache when the selection grows.
#[inline(always)]
pub(crate) fn in_selected_cgroup(tgid: u32) -> bool {
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

/// Whether the in-kernel filter (`--pid`, a wrapped command's tree, `--cgroup`, `--job`)
/// selects process `tgid`.
#[inline(always)]
pub(crate) fn selected(tgid: u32) -> bool {
    if let Some(&mode) = FILTER_MODE.get(0) {
        // SAFETY: read-only lookup of a plain value.
        if (mode == MODE_TGIDS || mode == MODE_TREE) && unsafe { FILTER_TGIDS.get(&tgid) }.is_none()
        {
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
pub(crate) fn start<C: EbpfContext>(ctx: &C) -> Option<(u64, Cookie)> {
    let pid_tgid = bpf_get_current_pid_tgid();
    if !selected((pid_tgid >> 32) as u32) {
        return None;
    }
    // SAFETY: the context pointer is the program's own.
    let raw = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    Some((pid_tgid, Cookie::unpack(raw)))
}

#[inline(always)]
pub(crate) fn regs(ctx: &ProbeContext) -> &pt_regs {
    // SAFETY: the kernel hands uprobes a valid pt_regs.
    unsafe { &*ctx.regs }
}

/// A `T` at `addr` in the calling process, or `or` when the read fails. A failure is counted
/// in `FAULTS` (a bad pointer the program passed, whose call fails too): the record carries
/// `or` where the read would have filled it, and the report says how often that happened.
#[inline(always)]
pub(crate) fn user<T>(addr: u64, or: T) -> T {
    // SAFETY: bpf_probe_read_user faults safely on bad user addresses.
    match unsafe { bpf_probe_read_user(addr as *const T) } {
        Ok(v) => v,
        Err(_) => {
            bump(&FAULTS, fault::USER_READ);
            or
        }
    }
}

/// A `T` at `addr` in the calling process, or `or` when the read fails, not counted: for a read
/// whose failure is an answer rather than a field lost (the pairing check of a slot an earlier
/// call left, whose stack the thread may have left since).
#[inline(always)]
pub(crate) fn peek_user<T>(addr: u64, or: T) -> T {
    // SAFETY: bpf_probe_read_user faults safely on bad user addresses.
    unsafe { bpf_probe_read_user(addr as *const T) }.unwrap_or(or)
}

/// The `k`-th 8-byte stack slot at entry: 0 = return address, 1 = 7th integer argument, …
#[inline(always)]
pub(crate) fn stack(sp: u64, k: u64) -> u64 {
    user(sp + 8 * k, 0)
}

/// Integer argument `i` (SysV order) at entry; 0 for [`cookie::NONE`].
#[inline(always)]
pub(crate) fn arg(r: &pt_regs, i: u8) -> u64 {
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
pub(crate) fn header(k: u32, api: u16, pid_tgid: u64, ts: u64) -> Header {
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
pub(crate) const WAKEUP_BYTES: u64 = 512 << 10;

/// Bytes a record of type `R` takes in the ring: the kernel's 8-byte header, rounded up to 8.
pub(crate) const fn ring_bytes<R>() -> u64 {
    (core::mem::size_of::<R>() as u64 + 8 + 7) & !7
}

/// Submit flags for a record of `bytes` ring bytes: a wakeup when it took the backlog across a
/// multiple of [`WAKEUP_BYTES`], none otherwise. Not "whenever the backlog is above it": a
/// reader that falls behind (held to a CPU quota, or starved) leaves the backlog up, and every
/// record then queued the wakeup's irq_work anew, a self-IPI each (a VM exit in a guest). Held
/// to 1 % of a CPU that slowed a thread asking for 250 k launches/s to 84 k/s. A crossing
/// missed when other CPUs reserve in between is caught at the next multiple or by the timer.
#[inline(always)]
pub(crate) fn submit_flags(bytes: u64) -> u64 {
    let avail = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    if avail / WAKEUP_BYTES > avail.saturating_sub(bytes) / WAKEUP_BYTES {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

#[inline(always)]
pub(crate) fn emit<B: Copy + 'static>(k: u32, api: u16, pid_tgid: u64, ts: u64, body: B) {
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

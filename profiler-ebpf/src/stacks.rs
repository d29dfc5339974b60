//! Call stacks, sampled at random (on average one call in N): the frame-pointer walk and the CPython
//! frame walk.

use super::*;

// Call stacks (sampled)

/// The sampling period in force when this call is one whose stack is taken; `None` otherwise.
///
/// Each call is drawn independently with probability 1/period (`bpf_get_prandom_u32`): a
/// call's chance does not depend on where it falls in the program's call pattern, so a loop
/// that makes the same sequence of calls every step cannot alias with the sampling (every
/// Nth call of a 4-call step would see the same call every time). Each sample stands for
/// `period` calls; docs/STACKS.md states the estimator and its error. The draw compares the
/// top bits of `r × period` with zero: a probability of ⌈2³²/period⌉/2³², within 2⁻³² of
/// 1/period, and no division on the probe path.
#[inline(always)]
pub(crate) fn stack_due() -> Option<u32> {
    let period = match STACK_CONFIG.get(0) {
        Some(&p) if p > 0 => p,
        _ => return None,
    };
    if period == 1 {
        return Some(1);
    }
    // SAFETY: plain helper call.
    let r = unsafe { bpf_get_prandom_u32() };
    ((u64::from(r) * u64::from(period)) >> 32 == 0).then_some(period)
}

#[inline(always)]
pub(crate) fn read_u64(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user faults safely on bad user addresses.
    unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
}

/// The calling thread's Python frames (innermost first) into `out`, when its process is a
/// known CPython: find the thread state whose native thread id is this thread (the GIL need
/// not be held: ctypes and most extensions release it around foreign calls) — or, for 3.9 and
/// 3.10, whose `pthread_self()` is this thread's FS base — then follow the interpreter frames.
/// Returns (frames, flags).
#[inline(always)]
pub(crate) fn python_frames(
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
/// then) when this call is drawn for sampling ([`stack_due`]). At an entry probe,
/// `caller` is the return address read off the stack: the frame-pointer walk cannot see the
/// caller there (the callee has not pushed its frame yet), so it replaces the walk's first
/// entry, which is the probed function itself.
#[inline(always)]
pub(crate) fn sample_stack<C: EbpfContext>(
    ctx: &C,
    api: u16,
    pid_tgid: u64,
    ts: u64,
    of_kind: u32,
    handle: u64,
    dur_ns: u64,
    caller: Option<u64>,
) {
    let Some(period) = stack_due() else {
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

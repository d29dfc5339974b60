//! Device attribution: which GPU each launch, copy, memset, sync and memory operation went to.
//!
//! A CUDA call goes to the device of its stream's context, or, on a default stream (0, 1, 2)
//! or a stream made before attach, to the device of the calling thread's current context. The
//! probes here follow the calls that set or reveal those (see `profiler_common::device::op`)
//! and keep, per thread, the current context and its device (task storage: freed with the
//! thread), per process, context → device and stream → device (LRU maps). No record is
//! written: the device travels in the top byte of each call's own record `flags`, and in a
//! counted launch's key. A launch pays one stream lookup (named streams only) and one
//! task-storage lookup.
//!
//! Nothing is guessed: a context whose device no call revealed stays unknown (0).

use super::*;
use profiler_common::device::op;

/// The wire value (device + 1, 0 unknown) of the device a call on `stream` by the calling
/// thread of `pt` goes to.
#[inline(always)]
pub(crate) fn device_for(pt: u64, stream: u64) -> u32 {
    if stream > 2 {
        let key = HandleKey {
            handle: stream,
            tgid: (pt >> 32) as u32,
            _pad: 0,
        };
        // SAFETY: read-only lookup of a plain value.
        if let Some(&d) = unsafe { STREAM_DEVICE.get(&key) } {
            return d;
        }
    }
    thread_device()
}

/// The calling thread's device (wire value).
#[inline(always)]
pub(crate) fn thread_device() -> u32 {
    match THREAD_CTX.get_ptr_mut() {
        // SAFETY: our own map's value; only this thread touches it.
        Some(t) => unsafe { (*t).dev },
        None => 0,
    }
}

#[inline(always)]
fn ctx_key(pt: u64, handle: u64) -> HandleKey {
    HandleKey {
        handle,
        tgid: (pt >> 32) as u32,
        _pad: 0,
    }
}

/// The device (wire value) of context `ctx` of the process of `pt`, 0 unknown.
#[inline(always)]
fn ctx_device(pt: u64, ctx: u64) -> u32 {
    if ctx == 0 {
        return 0;
    }
    // SAFETY: read-only lookup of a plain value.
    unsafe { CTX_DEVICE.get(&ctx_key(pt, ctx)) }
        .copied()
        .unwrap_or(0)
}

#[inline(always)]
fn learn_ctx(pt: u64, ctx: u64, dev: u32) {
    if ctx != 0 && dev != 0 {
        let _ = CTX_DEVICE.insert(&ctx_key(pt, ctx), &dev, 0);
    }
}

/// Entry of every context call. Cookie: q = [`op`], a = the context argument or the
/// out-pointer, b = the device argument; `F_RET`: the return probe finishes it.
#[uprobe]
pub fn ctx_entry(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    // Not `begin`: a context call inside a runtime call is the runtime's own, and the device it
    // sets is the one the runtime's later calls go to; it is never "seen twice".
    let Some((pt, c)) = start(&ctx) else {
        return 0;
    };
    let r = regs(&ctx);
    let Some(t) = THREAD_CTX.get_or_create() else {
        return 0;
    };
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    let t = unsafe { &mut *t };
    let a = arg(r, c.a);
    match c.q {
        op::SET_CURRENT => {
            t.ctx = a;
            t.dev = ctx_device(pt, a);
        }
        op::PUSH => {
            t.prev_ctx = t.ctx;
            t.prev_dev = t.dev;
            t.ctx = a;
            t.dev = ctx_device(pt, a);
        }
        op::POP => {
            t.ctx = t.prev_ctx;
            t.dev = t.prev_dev;
            // One level only: what lies further down is not known.
            t.prev_ctx = 0;
            t.prev_dev = 0;
        }
        _ => {
            if c.has(cookie::F_RET) {
                let i = c.has(cookie::F_RUNTIME) as usize;
                t.pend_op[i] = c.q as u32;
                t.pend_ptr[i] = a;
                t.pend_arg[i] = arg(r, c.b);
            }
        }
    }
    0
}

/// Return of a context call saved by [`ctx_entry`]: reads what the call wrote.
#[uretprobe]
pub fn ctx_ret(ctx: RetProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let pt = bpf_get_current_pid_tgid();
    // SAFETY: the context pointer is the program's own.
    let c = Cookie::unpack(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let Some(t) = THREAD_CTX.get_ptr_mut() else {
        return 0;
    };
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    let t = unsafe { &mut *t };
    let i = c.has(cookie::F_RUNTIME) as usize;
    if i > 1 || t.pend_op[i] != c.q as u32 {
        return 0; // not the call this slot was saved for
    }
    t.pend_op[i] = 0;
    let ret: i64 = ctx.ret();
    if ret as i32 != 0 {
        return 0; // failed: nothing was set
    }
    let (ptr, argv) = (t.pend_ptr[i], t.pend_arg[i]);
    match c.q {
        op::PRIMARY_RETAIN => {
            let cx = user::<u64>(ptr, 0);
            let d = profiler_common::device::wire(argv as i32 as i64);
            learn_ctx(pt, cx, d);
            if cx != 0 && cx == t.ctx && t.dev == 0 {
                t.dev = d;
            }
        }
        op::CREATE => {
            let cx = user::<u64>(ptr, 0);
            let d = profiler_common::device::wire(argv as i32 as i64);
            learn_ctx(pt, cx, d);
            if cx != 0 {
                t.prev_ctx = t.ctx;
                t.prev_dev = t.dev;
                t.ctx = cx;
                t.dev = d;
            }
        }
        op::GET_CURRENT => {
            let cx = user::<u64>(ptr, 0);
            if t.ctx == 0 && t.dev != 0 && cx != 0 {
                // The device came first (`cudaGetDevice`/`cudaSetDevice` on a thread whose
                // context was made current before the attach): this is its context.
                t.ctx = cx;
                learn_ctx(pt, cx, t.dev);
            } else if cx != t.ctx || t.dev == 0 {
                t.ctx = cx;
                t.dev = ctx_device(pt, cx);
            }
        }
        op::GET_DEVICE | op::SET_DEVICE => {
            let d = if c.q == op::GET_DEVICE {
                user::<i32>(ptr, -1) as i64
            } else {
                argv as i32 as i64
            };
            let d = profiler_common::device::wire(d);
            if d != 0 {
                t.dev = d;
                learn_ctx(pt, t.ctx, d);
            }
        }
        op::STREAM_CREATE => {
            let s = user::<u64>(ptr, 0);
            if s > 2 && t.dev != 0 {
                let _ = STREAM_DEVICE.insert(&ctx_key(pt, s), &t.dev, 0);
            }
        }
        _ => {}
    }
    0
}

//! NCCL: communicators made, split, queried and ended, collectives, sends and receives, and the
//! group each call belonged to. One record per call (collectives are far rarer than launches),
//! none for `ncclGroupStart`/`ncclGroupEnd`, which move the thread's group depth only.
//!
//! Argument positions come from the cookie (`a`..`e`, `p`: see `attach/rules.rs`). The unique id
//! of `ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)` is a 128-byte
//! struct passed by value: by the SysV ABI it lies in memory at `[rsp+8]` at entry (the first
//! stack slot after the return address), and `rank`, the next integer argument, is in `edx`.
//! The entry copies its bytes into the thread's `NCCL_THREAD` slot; the return probe reads the
//! communicator NCCL wrote to `*comm` and writes one record with both. The daemon turns the
//! bytes into a communicator id (a hash, the same in every rank).

use super::*;
use profiler_common::nccl::{INIT_ALL_MAX, NcclBody, NcclThread, call, made, nflags, redop};

/// A signed 32-bit argument as NCCL passes `int`s, -1 where the API has none.
#[inline(always)]
fn int_arg(r: &pt_regs, i: u8) -> i32 {
    if i == cookie::NONE {
        -1
    } else {
        arg(r, i) as i32
    }
}

/// Reserves a record and fills it; `id` is copied from the thread's slot when given.
#[inline(always)]
fn emit_nccl(api: u16, pt: u64, ts: u64, body: &NcclBody, id: Option<&NcclThread>) {
    let Some(mut e) = EVENTS.reserve::<Record<NcclBody>>(0) else {
        bump(&DROPS, kind::NCCL);
        return;
    };
    let p = e.as_mut_ptr();
    // SAFETY: `p` points at the reserved record; every byte is written below before submit.
    // Field by field (and the id word by word) so that no byte-wise `memcpy`/`memset`
    // subprogram is called for the 128-byte id.
    unsafe {
        (*p).header = header(kind::NCCL, api, pt, ts);
        let b = core::ptr::addr_of_mut!((*p).body);
        (*b).comm = body.comm;
        (*b).count = body.count;
        (*b).stream = body.stream;
        (*b).parent = body.parent;
        (*b).dur_ns = body.dur_ns;
        (*b).call = body.call;
        (*b).datatype = body.datatype;
        (*b).redop = body.redop;
        (*b).peer = body.peer;
        (*b).rank = body.rank;
        (*b).nranks = body.nranks;
        (*b).group = body.group;
        (*b).flags = body.flags;
        (*b).ret = body.ret;
        (*b)._pad = 0;
        let dst = core::ptr::addr_of_mut!((*b).id) as *mut u64;
        let src = id.map(|t| core::ptr::addr_of!(t.id) as *const u64);
        let mut i = 0;
        while i < 16 {
            let w = match src {
                Some(s) => core::ptr::read_volatile(s.add(i)),
                None => 0,
            };
            core::ptr::write_volatile(dst.add(i), w);
            i += 1;
        }
    }
    e.submit(submit_flags(ring_bytes::<Record<NcclBody>>()));
    bump(&SUBMITTED, kind::NCCL);
}

/// Entry of every hooked NCCL function. Cookie: q = [`call`]; collectives and send/recv: a =
/// count, b = datatype, c = reduction op, d = communicator, e = stream, p = root or peer;
/// creations: a = the communicator out-pointer, b = nranks (InitAll: ndev), c = rank (InitAll:
/// devlist), d = the parent (CommSplit), p = the color; queries: d = communicator, a = the
/// `int *` they write. `F_RET`: [`nccl_ret`] finishes the call.
#[uprobe]
pub fn nccl_entry(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c)) = start(&ctx) else {
        return 0;
    };
    let r = regs(&ctx);
    let Some(t) = NCCL_THREAD.get_or_create() else {
        return 0;
    };
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    let t = unsafe { &mut *t };
    let q = c.q as u32;
    match q {
        call::GROUP_START => {
            t.depth = t.depth.saturating_add(1);
            return 0;
        }
        call::GROUP_END => {
            t.depth = t.depth.saturating_sub(1);
            return 0;
        }
        _ => {}
    }
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    if call::is_op(q) {
        let stream = arg(r, c.e);
        let body = NcclBody {
            comm: arg(r, c.d),
            count: arg(r, c.a),
            stream,
            datatype: arg(r, c.b) as u32,
            redop: if c.c == cookie::NONE {
                redop::NONE
            } else {
                arg(r, c.c) as u32
            },
            peer: int_arg(r, c.p),
            call: q,
            group: t.depth,
            flags: profiler_common::device::with(0, device_for(pt, stream)),
            ..NcclBody::default()
        };
        emit_nccl(c.api, pt, now, &body, None);
        return 0;
    }
    if q == call::DESTROY || q == call::ABORT {
        let body = NcclBody {
            comm: arg(r, c.d),
            call: q,
            group: t.depth,
            flags: profiler_common::device::with(0, thread_device()),
            ..NcclBody::default()
        };
        emit_nccl(c.api, pt, now, &body, None);
        return 0;
    }
    if !c.has(cookie::F_RET) {
        return 0;
    }
    t.pend_call = q;
    t.ts_ns = now;
    t.ptr = arg(r, c.a);
    t.comm = arg(r, c.d);
    t.a = if q == call::SPLIT {
        int_arg(r, c.p) as i64
    } else {
        int_arg(r, c.b) as i64
    };
    t.b = arg(r, c.c);
    t.dev = thread_device();
    t.flags = 0;
    if q == call::INIT_RANK || q == call::INIT_RANK_CONFIG {
        // The 128-byte id by value: at [rsp+8] at entry (the placement keeps rsp as it was).
        // SAFETY: the helper faults safely on a bad user address and writes into our slot.
        let ok = unsafe { bpf_probe_read_user_buf((r.rsp + 8) as *const u8, &mut t.id) };
        match ok {
            Ok(()) => t.flags = nflags::HAS_ID,
            Err(_) => bump(&FAULTS, fault::USER_READ),
        }
    }
    0
}

/// Return of a creation or query saved by [`nccl_entry`]: reads what NCCL wrote and records it.
#[uretprobe]
pub fn nccl_ret(ctx: RetProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let pt = bpf_get_current_pid_tgid();
    // SAFETY: the context pointer is the program's own.
    let c = Cookie::unpack(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let Some(t) = NCCL_THREAD.get_ptr_mut() else {
        return 0;
    };
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    let t = unsafe { &mut *t };
    let q = c.q as u32;
    if t.pend_call != q {
        return 0; // not the call this slot was saved for
    }
    t.pend_call = 0;
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let ret: i64 = ctx.ret();
    let ret = ret as i32;
    let mut body = NcclBody {
        call: q,
        dur_ns: now.wrapping_sub(t.ts_ns),
        ret,
        group: t.depth,
        flags: profiler_common::device::with(nflags::HAS_RETURN, t.dev),
        ..NcclBody::default()
    };
    match q {
        call::INIT_RANK | call::INIT_RANK_CONFIG => {
            body.comm = if made(ret) { user::<u64>(t.ptr, 0) } else { 0 };
            body.nranks = t.a as i32;
            body.rank = t.b as i32;
            body.flags |= t.flags;
            let ts = t.ts_ns;
            emit_nccl(c.api, pt, ts, &body, Some(&*t));
        }
        call::SPLIT => {
            body.comm = if made(ret) { user::<u64>(t.ptr, 0) } else { 0 };
            body.parent = t.comm;
            body.peer = t.a as i32;
            emit_nccl(c.api, pt, t.ts_ns, &body, None);
        }
        call::INIT_ALL => {
            // One record per communicator of the clique, its index as the rank; the device
            // from devlist (NULL: the index).
            let n = t.a;
            body.nranks = n as i32;
            body.parent = if made(ret) { user::<u64>(t.ptr, 0) } else { 0 };
            let mut i: u32 = 0;
            while i < INIT_ALL_MAX {
                if i as i64 >= n || !made(ret) {
                    break;
                }
                body.comm = user::<u64>(t.ptr + 8 * i as u64, 0);
                body.rank = i as i32;
                let dev = if t.b == 0 {
                    i as i64
                } else {
                    user::<i32>(t.b + 4 * i as u64, -1) as i64
                };
                body.flags = profiler_common::device::with(
                    nflags::HAS_RETURN,
                    profiler_common::device::wire(dev),
                );
                emit_nccl(c.api, pt, t.ts_ns, &body, None);
                i += 1;
            }
            if !made(ret) {
                emit_nccl(c.api, pt, t.ts_ns, &body, None);
            }
        }
        call::COUNT | call::USER_RANK | call::CU_DEVICE => {
            body.comm = t.comm;
            body.peer = if ret == 0 { user::<i32>(t.ptr, -1) } else { -1 };
            emit_nccl(c.api, pt, t.ts_ns, &body, None);
        }
        _ => {}
    }
    0
}

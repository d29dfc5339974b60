//! The one return probe for copies, syncs and memory operations.

use super::*;

// The one return probe for copies, syncs and memory operations

/// Return probe of every call saved with [`save`]: measures the blocked time, reads results.
#[uretprobe]
pub fn api_ret(ctx: RetProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: the context pointer is the program's own.
    let c = Cookie::unpack(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let Some(p) = take(slots(&c)) else {
        return 0;
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
            );
        }
        kind::SYNC => {
            let body = SyncBody {
                handle: p.v[0],
                dur_ns: dur,
                ret,
                flags: profiler_common::device::with(flags::HAS_RETURN, p.v[1] as u32),
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
                flags: profiler_common::device::with(
                    flags::HAS_RETURN
                        | if c.has(cookie::F_ASYNC) {
                            flags::ASYNC
                        } else {
                            0
                        },
                    p.v[4] as u32,
                ),
            };
            emit(kind::MEM, c.api, pid_tgid, p.ts_ns, body);
        }
        _ => {}
    }
    0
}

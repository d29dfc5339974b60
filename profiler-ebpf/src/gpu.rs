//! GPU activity from the opt-in injection library (`profiler-inject`): the three hand-over
//! sites it calls on CUPTI's worker thread (see `profiler_common::gpu`). One record per call:
//! a batch of up to `BATCH` kernels/copies/memsets copied whole into the ring, a kernel name,
//! or a change of the library's state. The sites are cold (one call per 16 GPU records), never
//! on a launch path; the daemon attaches them with the library's semaphore as the uprobes'
//! reference counter, which is what tells the library to enable CUPTI.

use super::*;
use profiler_common::gpu::{BATCH, GPU_NAME_CAP, GpuActivityBody, GpuNameBody, GpuStateBody};

/// `gpuprofd_inject_activity(const GpuActivity batch[BATCH], uint32_t n)`: rdi = the array
/// (always `BATCH` long), rsi = entries in use (clamped to `BATCH`). One read of the whole
/// array straight into the reserved record; a failed read drops the record and counts a fault.
#[uprobe]
pub fn gpu_activity(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c)) = start(&ctx) else {
        return 0;
    };
    let r = regs(&ctx);
    let src = r.rdi;
    let n = (r.rsi as u32).min(BATCH as u32);
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(mut e) = EVENTS.reserve::<Record<GpuActivityBody>>(0) else {
        bump(&DROPS, kind::GPU_ACTIVITY);
        return 0;
    };
    let p = e.as_mut_ptr();
    // SAFETY: `p` points at the reserved record; the header and `n` are written here, the
    // items by the one read below (or the record is discarded).
    let ok = unsafe {
        (*p).header = header(kind::GPU_ACTIVITY, c.api, pt, now);
        (*p).body.n = n;
        (*p).body._pad = 0;
        let items = core::ptr::addr_of_mut!((*p).body.items) as *mut u8;
        bpf_probe_read_user_buf(
            src as *const u8,
            core::slice::from_raw_parts_mut(
                items,
                core::mem::size_of::<[profiler_common::gpu::GpuActivity; BATCH]>(),
            ),
        )
        .is_ok()
    };
    if !ok {
        e.discard(0);
        bump(&FAULTS, fault::USER_READ);
        return 0;
    }
    e.submit(submit_flags(ring_bytes::<Record<GpuActivityBody>>()));
    bump(&SUBMITTED, kind::GPU_ACTIVITY);
    0
}

/// `gpuprofd_inject_name(uint32_t id, const char *name)`: edi = id, rsi = the NUL-terminated
/// mangled name (cut at `GPU_NAME_CAP - 1` bytes; `len` then says `GPU_NAME_CAP - 1`).
#[uprobe]
pub fn gpu_name(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c)) = start(&ctx) else {
        return 0;
    };
    let r = regs(&ctx);
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(mut e) = EVENTS.reserve::<Record<GpuNameBody>>(0) else {
        bump(&DROPS, kind::GPU_NAME);
        return 0;
    };
    let p = e.as_mut_ptr();
    // SAFETY: `p` points at the reserved record; every field is written before submit (the
    // name's bytes past `len` are whatever the ring held: `len` bounds what is read).
    unsafe {
        (*p).header = header(kind::GPU_NAME, c.api, pt, now);
        (*p).body.id = r.rdi as u32;
        let buf: &mut [u8; GPU_NAME_CAP] = &mut (*p).body.name;
        let n = match bpf_probe_read_user_str_bytes(r.rsi as *const u8, buf) {
            Ok(s) => s.len(),
            Err(_) => {
                bump(&FAULTS, fault::USER_READ);
                0
            }
        };
        (*p).body.len = n as u32;
    }
    e.submit(submit_flags(ring_bytes::<Record<GpuNameBody>>()));
    bump(&SUBMITTED, kind::GPU_NAME);
    0
}

/// `gpuprofd_inject_state(uint32_t state, uint64_t detail)`: edi = state, rsi = detail.
#[uprobe]
pub fn gpu_state(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c)) = start(&ctx) else {
        return 0;
    };
    let r = regs(&ctx);
    let now = unsafe { bpf_ktime_get_ns() };
    emit(
        kind::GPU_STATE,
        c.api,
        pt,
        now,
        GpuStateBody {
            state: r.rdi as u32,
            _pad: 0,
            detail: r.rsi,
        },
    );
    0
}

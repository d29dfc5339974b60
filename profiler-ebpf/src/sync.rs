//! Synchronisations: the CPU time the caller waits for the GPU.

use super::*;

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
    // A stream sync or wait: the stream's device; a context, device or event sync: the
    // thread's (an event handle is no stream, and misses the stream map).
    let dev = device_for(pt, handle);
    if c.has(cookie::F_RET) {
        save(
            &c,
            class::SYNC,
            kind::SYNC,
            r.rsp,
            now,
            [handle, dev as u64, 0, 0, 0, 0],
        );
    } else {
        let fl = if c.has(cookie::F_GPU_SIDE) {
            flags::GPU_SIDE
        } else {
            0
        };
        let fl = profiler_common::device::with(fl, dev);
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

//! Device allocations, frees and virtual-memory operations.

use super::*;

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
    let stream = arg(r, c.d);
    let dev = device_for(pt, stream);
    let v = [arg(r, c.a), arg(r, c.c), stream, arg(r, c.b), dev as u64, 0];
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
            flags: profiler_common::device::with(
                if c.has(cookie::F_ASYNC) {
                    flags::ASYNC
                } else {
                    0
                },
                dev,
            ),
        };
        emit(kind::MEM, c.api, pt, now, body);
    }
    0
}

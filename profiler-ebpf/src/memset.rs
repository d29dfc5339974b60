//! Memsets, through the driver and the runtime: recorded as copies of direction `memset`, on
//! the copies' path (pairing, return probe, ring record).

use super::*;
use crate::copy::finish_copy;

/// Argument `i` as one dimension of a memset: 1 when the API has no such dimension.
#[inline(always)]
fn dim(r: &pt_regs, i: u8) -> u64 {
    if i == cookie::NONE { 1 } else { arg(r, i) }
}

/// Every memset API, its arguments at the cookie's positions:
/// `cuMemsetD{8,16,32}_v2(dst, value, N)`, `…Async(dst, value, N, stream)`,
/// `cuMemsetD2D{8,16,32}_v2(dst, pitch, value, Width, Height)`, `…Async(…, stream)`,
/// `cudaMemset(dst, value, count)`, `cudaMemsetAsync(…, stream)`,
/// `cudaMemset2D(dst, pitch, value, width, height)`, `cudaMemset2DAsync(…, stream)`,
/// `cudaMemset3D(cudaPitchedPtr p, int value, cudaExtent e)`, `cudaMemset3DAsync(…, stream)`
/// (both structs are larger than 16 bytes, so they are passed in memory: `p.ptr` at `[sp+8]`,
/// `e.width/height/depth` at `[sp+40/48/56]`; `value` in edi and the stream in rsi).
/// Cookie: a = dst, c = width (or count), b = height, e = depth (`NONE`: 1), q = element
/// bytes (the driver's D16/D32 count 2- and 4-byte elements), d = stream.
/// The value is not read: the D8/D16 driver entries zero-extend it after the probe site.
/// (Not named `memset`: that is the C library symbol the BPF target links.)
#[uprobe]
pub fn memset_entry(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, now)) = begin(&ctx, class::COPY) else {
        return 0;
    };
    let bytes = profiler_common::memset::bytes(arg(r, c.c), dim(r, c.b), dim(r, c.e), c.q as u64);
    finish_copy(
        pt,
        &c,
        r.rsp,
        now,
        arg(r, c.a),
        0,
        bytes,
        arg(r, c.d),
        dir::MEMSET,
    );
    0
}

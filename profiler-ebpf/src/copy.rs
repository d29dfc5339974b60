//! Memory copies: linear, 2D and 3D, through the driver and the runtime.

use super::*;

// Copies

/// `cudaMemcpyKind` → direction (0 H2H, 1 H2D, 2 D2H, 3 D2D, 4 Default; else unknown).
#[inline(always)]
pub(crate) fn dir_of_kind(k: u64) -> u32 {
    if k <= 4 { k as u32 } else { dir::UNKNOWN }
}

/// `CUmemorytype` pair → direction (HOST=1, DEVICE=2, ARRAY=3 (device-side), UNIFIED=4).
#[inline(always)]
pub(crate) fn dir_of_types(src: u32, dst: u32) -> u32 {
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
pub(crate) fn finish_copy(
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
    let fl = profiler_common::device::with(fl, device_for(pt, stream));
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

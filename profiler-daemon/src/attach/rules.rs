//! The probe list: which exported symbol gets which eBPF program, and where its arguments live.
//!
//! Rules are keyed by the *current* API name (`cuMemcpyHtoD_v2`, not the legacy v1
//! `cuMemcpyHtoD` whose arguments are 32-bit); the per-thread-stream variants `_ptsz`/`_ptds`
//! share their base's rule. The daemon applies the rules to each library's own export table, so
//! a symbol that a driver or runtime version does not export is simply not attached.

pub mod gpu;
pub mod nccl;

use crate::api::Layer;
use profiler_common::cookie::{
    Cookie, F_2D, F_ASYNC, F_COOP, F_GPU_SIDE, F_KIND_ARG, F_RET, F_RUNTIME, NONE,
};
use profiler_common::device::op as ctx;
use profiler_common::{dir, memkind, memop, namesrc};

/// The eBPF programs (names as in profiler-ebpf).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prog {
    DrvLaunch,
    DrvLaunchEx,
    RtLaunch,
    RtLaunchEx,
    GraphLaunch,
    CopyLinear,
    Copy2d,
    Copy3d,
    CopyRt3d,
    Memset,
    SyncEntry,
    MemEntry,
    NameEntry,
    RegisterFunction,
    CtxEntry,
    NcclEntry,
    GpuActivity,
    GpuName,
    GpuState,
}

impl Prog {
    pub const ALL: [Prog; 19] = [
        Prog::DrvLaunch,
        Prog::DrvLaunchEx,
        Prog::RtLaunch,
        Prog::RtLaunchEx,
        Prog::GraphLaunch,
        Prog::CopyLinear,
        Prog::Copy2d,
        Prog::Copy3d,
        Prog::CopyRt3d,
        Prog::Memset,
        Prog::SyncEntry,
        Prog::MemEntry,
        Prog::NameEntry,
        Prog::RegisterFunction,
        Prog::CtxEntry,
        Prog::NcclEntry,
        Prog::GpuActivity,
        Prog::GpuName,
        Prog::GpuState,
    ];

    /// The entry program's name in the eBPF object.
    pub fn name(self) -> &'static str {
        match self {
            Prog::DrvLaunch => "drv_launch",
            Prog::DrvLaunchEx => "drv_launch_ex",
            Prog::RtLaunch => "rt_launch",
            Prog::RtLaunchEx => "rt_launch_ex",
            Prog::GraphLaunch => "graph_launch",
            Prog::CopyLinear => "copy_linear",
            Prog::Copy2d => "copy_2d",
            Prog::Copy3d => "copy_3d",
            Prog::CopyRt3d => "copy_rt3d",
            Prog::Memset => "memset_entry",
            Prog::SyncEntry => "sync_entry",
            Prog::MemEntry => "mem_entry",
            Prog::NameEntry => "name_entry",
            Prog::RegisterFunction => "register_function",
            Prog::CtxEntry => "ctx_entry",
            Prog::NcclEntry => "nccl_entry",
            Prog::GpuActivity => "gpu_activity",
            Prog::GpuName => "gpu_name",
            Prog::GpuState => "gpu_state",
        }
    }

    /// The return program that pairs with this entry program when the rule asks for one.
    pub fn ret_name(self) -> &'static str {
        match self {
            Prog::NameEntry => "name_ret",
            Prog::CtxEntry => "ctx_ret",
            Prog::NcclEntry => "nccl_ret",
            _ => "api_ret",
        }
    }
}

/// Return-program names, for loading.
pub const RET_PROGS: [&str; 4] = ["api_ret", "name_ret", "ctx_ret", "nccl_ret"];

/// How one symbol is probed. `cookie.api` is filled in by the attach layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub prog: Prog,
    pub cookie: Cookie,
}

impl Rule {
    pub fn has_return(&self) -> bool {
        self.cookie.has(F_RET)
    }

    /// The packed attach cookie of this rule's probes (entry and return) on API `api`.
    pub fn packed_cookie(&self, api: u16) -> u64 {
        let mut c = self.cookie;
        c.api = api;
        c.pack()
    }
}

/// Builder shorthand: argument indices a..e, p, q, flags.
#[derive(Clone, Copy)]
pub(crate) struct B(Cookie);

impl B {
    fn new() -> B {
        B(Cookie::new(0))
    }
    fn a(mut self, i: u8) -> B {
        self.0.a = i;
        self
    }
    fn b(mut self, i: u8) -> B {
        self.0.b = i;
        self
    }
    fn c(mut self, i: u8) -> B {
        self.0.c = i;
        self
    }
    fn d(mut self, i: u8) -> B {
        self.0.d = i;
        self
    }
    fn e(mut self, i: u8) -> B {
        self.0.e = i;
        self
    }
    fn p(mut self, v: u32) -> B {
        self.0.p = v as u8;
        self
    }
    fn q(mut self, v: u32) -> B {
        self.0.q = v as u8;
        self
    }
    fn f(mut self, f: u8) -> B {
        self.0.flags |= f;
        self
    }
    fn rule(self, prog: Prog) -> Rule {
        Rule {
            prog,
            cookie: self.0,
        }
    }
}

/// Strips one per-thread-default-stream suffix (`_ptsz`, `_ptds`).
pub fn base_name(sym: &str) -> &str {
    sym.strip_suffix("_ptsz")
        .or_else(|| sym.strip_suffix("_ptds"))
        .unwrap_or(sym)
}

/// The rule for `sym` exported by a library of `layer`, or `None` when it is not hooked.
pub fn rule_for(layer: Layer, sym: &str) -> Option<Rule> {
    match layer {
        Layer::Driver => driver_rule(base_name(sym)),
        Layer::Runtime => runtime_rule(base_name(sym)).map(|mut r| {
            r.cookie.flags |= F_RUNTIME;
            r
        }),
        Layer::Nccl => nccl::rule(sym),
        Layer::Inject => gpu::rule(sym),
    }
}

/// An allocation of kind `k`: pointer out-parameter in arg 0, bytes in arg 1.
fn alloc(k: u32) -> B {
    B::new().q(memop::ALLOC).p(k).a(0).c(1).f(F_RET)
}

/// Page-locking the process's own memory: pointer in arg 0 (the region itself, not an
/// out-pointer), bytes in arg 1; the result tells whether it took.
fn host_register() -> B {
    B::new()
        .q(memop::HOST_REGISTER)
        .p(memkind::HOST_PINNED)
        .a(0)
        .c(1)
        .f(F_RET)
}

/// The region at the pointer in arg 0 is pageable again.
fn host_unregister() -> B {
    B::new()
        .q(memop::HOST_UNREGISTER)
        .p(memkind::HOST_PINNED)
        .a(0)
        .f(F_RET)
}

/// A context call the device tracker follows (see `profiler-ebpf/src/device.rs`): operation
/// `op`, its context argument or out-pointer in arg 0.
fn ctx_call(op: u8) -> B {
    B::new().q(op as u32).a(0)
}

/// A free of kind `k`: pointer in arg 0.
fn free(k: u32) -> B {
    B::new().q(memop::FREE).p(k).a(0).f(F_RET)
}

/// Peer copies, both layers: dst arg 0, src arg 2, bytes arg 4, stream arg 5 when async.
fn peer_copy(is_async: bool) -> Rule {
    let b = B::new().a(0).b(2).c(4).p(dir::PEER);
    if is_async {
        b.d(5).f(F_ASYNC)
    } else {
        b.f(F_RET)
    }
    .rule(Prog::CopyLinear)
}

/// A memset of `elem`-byte elements: dst in arg 0, the element count (or row width) in arg
/// `width`, the rows in arg `height` when there are rows, the stream in arg `stream` for the
/// async variants (which have no return probe, as async copies have none).
fn memset(elem: u32, width: u8, height: Option<u8>, stream: Option<u8>) -> Rule {
    let b = B::new().a(0).c(width).q(elem);
    let b = match height {
        Some(h) => b.b(h),
        None => b,
    };
    match stream {
        Some(s) => b.d(s).f(F_ASYNC),
        None => b.f(F_RET),
    }
    .rule(Prog::Memset)
}

fn driver_rule(base: &str) -> Option<Rule> {
    use Prog::*;
    let sync_copy = |d: u32| B::new().a(0).b(1).c(2).p(d).f(F_RET).rule(CopyLinear);
    let async_copy = |d: u32| {
        B::new()
            .a(0)
            .b(1)
            .c(2)
            .d(3)
            .p(d)
            .f(F_ASYNC)
            .rule(CopyLinear)
    };
    Some(match base {
        "cuLaunchKernel" => B::new().rule(DrvLaunch),
        "cuLaunchCooperativeKernel" => B::new().f(F_COOP).rule(DrvLaunch),
        "cuLaunchKernelEx" => B::new().rule(DrvLaunchEx),
        "cuGraphLaunch" => B::new().rule(GraphLaunch),
        "cuMemcpyHtoD_v2" => sync_copy(dir::H2D),
        "cuMemcpyDtoH_v2" => sync_copy(dir::D2H),
        "cuMemcpyDtoD_v2" => sync_copy(dir::D2D),
        "cuMemcpy" => sync_copy(dir::DEFAULT),
        "cuMemcpyHtoDAsync_v2" => async_copy(dir::H2D),
        "cuMemcpyDtoHAsync_v2" => async_copy(dir::D2H),
        "cuMemcpyDtoDAsync_v2" => async_copy(dir::D2D),
        "cuMemcpyAsync" => async_copy(dir::DEFAULT),
        // cuMemcpyPeer(dst, dstCtx, src, srcCtx, bytes[, stream])
        "cuMemcpyPeer" => peer_copy(false),
        "cuMemcpyPeerAsync" => peer_copy(true),
        "cuMemcpy2D_v2" | "cuMemcpy2DUnaligned_v2" => B::new().f(F_RET).rule(Copy2d),
        "cuMemcpy2DAsync_v2" => B::new().d(1).f(F_ASYNC).rule(Copy2d),
        "cuMemcpy3D_v2" => B::new().f(F_RET).rule(Copy3d),
        "cuMemcpy3DAsync_v2" => B::new().d(1).f(F_ASYNC).rule(Copy3d),
        "cuMemcpy3DPeer" => B::new().p(dir::PEER).f(F_RET).rule(Copy3d),
        "cuMemcpy3DPeerAsync" => B::new().p(dir::PEER).d(1).f(F_ASYNC).rule(Copy3d),
        // cuMemsetD{8,16,32}_v2(dst, value, N) / …Async(…, stream): N elements
        "cuMemsetD8_v2" => memset(1, 2, None, None),
        "cuMemsetD16_v2" => memset(2, 2, None, None),
        "cuMemsetD32_v2" => memset(4, 2, None, None),
        "cuMemsetD8Async" => memset(1, 2, None, Some(3)),
        "cuMemsetD16Async" => memset(2, 2, None, Some(3)),
        "cuMemsetD32Async" => memset(4, 2, None, Some(3)),
        // cuMemsetD2D{8,16,32}_v2(dst, pitch, value, Width, Height) / …Async(…, stream): Width
        // in elements
        "cuMemsetD2D8_v2" => memset(1, 3, Some(4), None),
        "cuMemsetD2D16_v2" => memset(2, 3, Some(4), None),
        "cuMemsetD2D32_v2" => memset(4, 3, Some(4), None),
        "cuMemsetD2D8Async" => memset(1, 3, Some(4), Some(5)),
        "cuMemsetD2D16Async" => memset(2, 3, Some(4), Some(5)),
        "cuMemsetD2D32Async" => memset(4, 3, Some(4), Some(5)),
        "cuCtxSynchronize" => B::new().f(F_RET).rule(SyncEntry),
        // The device tracker: what each thread's current context is, and its device.
        "cuCtxSetCurrent" => ctx_call(ctx::SET_CURRENT).rule(CtxEntry),
        "cuCtxPushCurrent_v2" => ctx_call(ctx::PUSH).rule(CtxEntry),
        "cuCtxPopCurrent_v2" => ctx_call(ctx::POP).rule(CtxEntry),
        // cuDevicePrimaryCtxRetain(CUcontext *, CUdevice)
        "cuDevicePrimaryCtxRetain" => ctx_call(ctx::PRIMARY_RETAIN).b(1).f(F_RET).rule(CtxEntry),
        // cuCtxCreate_v2(pctx, flags, dev), _v3(pctx, params, n, flags, dev),
        // _v4(pctx, CUctxCreateParams *, flags, dev)
        "cuCtxCreate_v2" => ctx_call(ctx::CREATE).b(2).f(F_RET).rule(CtxEntry),
        "cuCtxCreate_v3" => ctx_call(ctx::CREATE).b(4).f(F_RET).rule(CtxEntry),
        "cuCtxCreate_v4" => ctx_call(ctx::CREATE).b(3).f(F_RET).rule(CtxEntry),
        "cuCtxGetCurrent" => ctx_call(ctx::GET_CURRENT).f(F_RET).rule(CtxEntry),
        "cuCtxGetDevice" => ctx_call(ctx::GET_DEVICE).f(F_RET).rule(CtxEntry),
        // cuStreamCreate(CUstream *, flags), cuStreamCreateWithPriority(CUstream *, flags, prio)
        "cuStreamCreate" | "cuStreamCreateWithPriority" => {
            ctx_call(ctx::STREAM_CREATE).f(F_RET).rule(CtxEntry)
        }
        "cuStreamSynchronize" | "cuEventSynchronize" => B::new().a(0).f(F_RET).rule(SyncEntry),
        "cuStreamWaitEvent" => B::new().a(0).f(F_GPU_SIDE).rule(SyncEntry),
        "cuMemAlloc_v2" => alloc(memkind::DEVICE).rule(MemEntry),
        "cuMemAllocAsync" => alloc(memkind::ASYNC).d(2).f(F_ASYNC).rule(MemEntry),
        "cuMemAllocFromPoolAsync" => alloc(memkind::ASYNC).d(3).f(F_ASYNC).rule(MemEntry),
        "cuMemAllocManaged" => alloc(memkind::MANAGED).rule(MemEntry),
        "cuMemAllocHost_v2" | "cuMemHostAlloc" => alloc(memkind::HOST_PINNED).rule(MemEntry),
        // cuMemAllocPitch_v2(dptr, size_t *pitch, width, height, elem): bytes = *pitch × height
        "cuMemAllocPitch_v2" => alloc(memkind::PITCHED).b(1).c(3).rule(MemEntry),
        "cuMemCreate" => B::new()
            .q(memop::VMM_CREATE)
            .p(memkind::VMM)
            .a(0)
            .c(1)
            .f(F_RET)
            .rule(MemEntry),
        "cuMemFree_v2" => free(memkind::DEVICE).rule(MemEntry),
        "cuMemFreeAsync" => free(memkind::ASYNC).d(1).f(F_ASYNC).rule(MemEntry),
        "cuMemFreeHost" => free(memkind::HOST_PINNED).rule(MemEntry),
        // cuMemHostRegister(void *p, size_t bytes, unsigned flags), cuMemHostUnregister(p)
        "cuMemHostRegister_v2" | "cuMemHostRegister" => host_register().rule(MemEntry),
        "cuMemHostUnregister" => host_unregister().rule(MemEntry),
        "cuMemRelease" => B::new()
            .q(memop::VMM_RELEASE)
            .p(memkind::VMM)
            .a(0)
            .f(F_RET)
            .rule(MemEntry),
        "cuMemMap" => B::new()
            .q(memop::VMM_MAP)
            .p(memkind::VMM)
            .a(0)
            .c(1)
            .rule(MemEntry),
        "cuMemUnmap" => B::new()
            .q(memop::VMM_UNMAP)
            .p(memkind::VMM)
            .a(0)
            .c(1)
            .rule(MemEntry),
        "cuModuleGetFunction" => B::new()
            .p(namesrc::MODULE_GET_FUNCTION)
            .a(0)
            .b(1)
            .c(2)
            .f(F_RET)
            .rule(NameEntry),
        "cuLibraryGetKernel" => B::new()
            .p(namesrc::LIBRARY_GET_KERNEL)
            .a(0)
            .b(1)
            .c(2)
            .f(F_RET)
            .rule(NameEntry),
        "cuFuncGetName" | "cuKernelGetName" => B::new()
            .p(namesrc::GET_NAME)
            .a(0)
            .b(1)
            .f(F_RET)
            .rule(NameEntry),
        // alias: the function returned stands for the kernel given
        "cuKernelGetFunction" => B::new().p(0).a(0).b(1).f(F_RET).rule(NameEntry),
        _ => return None,
    })
}

/// Symbols probed only for [`LEARN_FOR`] after their library is attached: called too often to
/// be probed for good, and needed only to learn what was set before the attach.
pub fn learning_only(symbol: &str) -> bool {
    symbol == "cudaGetDevice"
}

/// How long [`learning_only`] symbols stay probed after their library is attached (let go at
/// the session's next once-a-second tick after it). A process that uses its GPU calls
/// `cudaGetDevice` many times a second (PyTorch: about 8 times per launch), each call then
/// paying two traps, so the time is short.
pub const LEARN_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// The driver launch a runtime launch entry calls (`cudaLaunchKernel_ptsz` →
/// `cuLaunchKernel_ptsz`): with one trap per launch the runtime's entry is left unprobed and
/// its launches are seen there. `None` for anything that is not a runtime kernel launch.
pub fn driver_launch_of(runtime_symbol: &str) -> Option<String> {
    let (base, suffix) = match runtime_symbol.strip_suffix("_ptsz") {
        Some(b) => (b, "_ptsz"),
        None => (runtime_symbol, ""),
    };
    let driver = match base {
        "cudaLaunchKernel" => "cuLaunchKernel",
        "cudaLaunchCooperativeKernel" => "cuLaunchCooperativeKernel",
        "cudaLaunchKernelExC" => "cuLaunchKernelEx",
        _ => return None,
    };
    Some(format!("{driver}{suffix}"))
}

fn runtime_rule(base: &str) -> Option<Rule> {
    use Prog::*;
    Some(match base {
        // __cudaLaunchKernel(_ptsz) tail-jumps into cudaLaunchKernel(_ptsz) (cudart 12.0–13.5):
        // hooking it too would count every nvcc ≥ 12.4 launch twice.
        "cudaLaunchKernel" => B::new().rule(RtLaunch),
        "cudaLaunchCooperativeKernel" => B::new().f(F_COOP).rule(RtLaunch),
        "cudaLaunchKernelExC" => B::new().rule(RtLaunchEx),
        "cudaGraphLaunch" => B::new().rule(GraphLaunch),
        // cudaMemcpy(dst, src, count, kind) / Async(…, stream)
        "cudaMemcpy" => B::new()
            .a(0)
            .b(1)
            .c(2)
            .e(3)
            .f(F_KIND_ARG | F_RET)
            .rule(CopyLinear),
        "cudaMemcpyAsync" => B::new()
            .a(0)
            .b(1)
            .c(2)
            .e(3)
            .d(4)
            .f(F_KIND_ARG | F_ASYNC)
            .rule(CopyLinear),
        // cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind) / Async(…, stream)
        "cudaMemcpy2D" => B::new()
            .a(0)
            .b(2)
            .c(4)
            .e(6)
            .f(F_2D | F_KIND_ARG | F_RET)
            .rule(CopyLinear),
        "cudaMemcpy2DAsync" => B::new()
            .a(0)
            .b(2)
            .c(4)
            .e(6)
            .d(7)
            .f(F_2D | F_KIND_ARG | F_ASYNC)
            .rule(CopyLinear),
        // cudaMemcpyPeer(dst, dstDev, src, srcDev, count) / Async(…, stream): the driver's layout
        "cudaMemcpyPeer" => peer_copy(false),
        "cudaMemcpyPeerAsync" => peer_copy(true),
        // cudaMemcpyToSymbol(symbol, src, count, offset, kind), FromSymbol(dst, symbol, …)
        "cudaMemcpyToSymbol" | "cudaMemcpyFromSymbol" => B::new()
            .a(0)
            .b(1)
            .c(2)
            .e(4)
            .f(F_KIND_ARG | F_RET)
            .rule(CopyLinear),
        "cudaMemcpyToSymbolAsync" | "cudaMemcpyFromSymbolAsync" => B::new()
            .a(0)
            .b(1)
            .c(2)
            .e(4)
            .d(5)
            .f(F_KIND_ARG | F_ASYNC)
            .rule(CopyLinear),
        "cudaMemcpy3D" => B::new().f(F_RET).rule(CopyRt3d),
        "cudaMemcpy3DAsync" => B::new().d(1).f(F_ASYNC).rule(CopyRt3d),
        // cudaMemset(dst, value, count) / Async(…, stream)
        "cudaMemset" => memset(1, 2, None, None),
        "cudaMemsetAsync" => memset(1, 2, None, Some(3)),
        // cudaMemset2D(dst, pitch, value, width, height) / Async(…, stream)
        "cudaMemset2D" => memset(1, 3, Some(4), None),
        "cudaMemset2DAsync" => memset(1, 3, Some(4), Some(5)),
        // cudaMemset3D(cudaPitchedPtr p, int value, cudaExtent e) / Async(…, stream): both
        // structs are passed in memory, p at stack slots 1–4 (ptr = argument 6), e at slots
        // 5–7 (width, height, depth = arguments 10, 11, 12); value in edi, stream in rsi.
        "cudaMemset3D" => B::new().a(6).c(10).b(11).e(12).q(1).f(F_RET).rule(Memset),
        "cudaMemset3DAsync" => B::new()
            .a(6)
            .c(10)
            .b(11)
            .e(12)
            .q(1)
            .d(1)
            .f(F_ASYNC)
            .rule(Memset),
        "cudaDeviceSynchronize" => B::new().f(F_RET).rule(SyncEntry),
        // cudaSetDevice(int): the thread's device once it returns (the runtime may make the
        // context current inside, through the driver, or only at the next call).
        "cudaSetDevice" => ctx_call(ctx::SET_DEVICE).b(0).f(F_RET).rule(CtxEntry),
        // cudaGetDevice(int *): frameworks call it around every operation (PyTorch's device
        // guard), so it is probed only for a second after the libraries of processes already
        // running are attached (see [`learning_only`]): long enough to learn the device of a
        // context made before the attach, which the real runtime otherwise never reveals (it
        // asks the driver through its private export table, which no probe sees).
        "cudaGetDevice" => ctx_call(ctx::GET_DEVICE).f(F_RET).rule(CtxEntry),
        // cudaStreamCreate(cudaStream_t *), …WithFlags(…, flags), …WithPriority(…, flags, prio)
        "cudaStreamCreate" | "cudaStreamCreateWithFlags" | "cudaStreamCreateWithPriority" => {
            ctx_call(ctx::STREAM_CREATE).f(F_RET).rule(CtxEntry)
        }
        "cudaStreamSynchronize" | "cudaEventSynchronize" => B::new().a(0).f(F_RET).rule(SyncEntry),
        "cudaStreamWaitEvent" => B::new().a(0).f(F_GPU_SIDE).rule(SyncEntry),
        "cudaMalloc" => alloc(memkind::DEVICE).rule(MemEntry),
        "cudaMallocAsync" => alloc(memkind::ASYNC).d(2).f(F_ASYNC).rule(MemEntry),
        "cudaMallocFromPoolAsync" => alloc(memkind::ASYNC).d(3).f(F_ASYNC).rule(MemEntry),
        "cudaMallocManaged" => alloc(memkind::MANAGED).rule(MemEntry),
        "cudaMallocHost" | "cudaHostAlloc" => alloc(memkind::HOST_PINNED).rule(MemEntry),
        // cudaMallocPitch(void **p, size_t *pitch, width, height)
        "cudaMallocPitch" => alloc(memkind::PITCHED).b(1).c(3).rule(MemEntry),
        "cudaFree" => free(memkind::DEVICE).rule(MemEntry),
        "cudaFreeAsync" => free(memkind::ASYNC).d(1).f(F_ASYNC).rule(MemEntry),
        "cudaFreeHost" => free(memkind::HOST_PINNED).rule(MemEntry),
        // cudaHostRegister(void *p, size_t bytes, unsigned flags), cudaHostUnregister(p)
        "cudaHostRegister" => host_register().rule(MemEntry),
        "cudaHostUnregister" => host_unregister().rule(MemEntry),
        "__cudaRegisterFunction" => B::new().rule(RegisterFunction),
        // CUDA 13: *out becomes a cudaKernel_t that stands for the host stub.
        "__cudaGetKernel" => B::new().p(0).a(0).b(1).f(F_RET).rule(NameEntry),
        _ => return None,
    })
}

/// Argument index used by rules for "no such argument" (re-exported for tests).
pub const NO_ARG: u8 = NONE;

#[cfg(test)]
mod tests;

//! Kernel launches (entry-only: the hot path), recorded or counted in the kernel.

use super::*;

// Launches (entry-only: the hot path)

/// Adds one launch to its process's counter for this configuration (service mode). `false`
/// when the counters are full: the launch must then be recorded instead.
///
/// The precise clock is read into `now` when this makes the entry (its `first_ns` orders it
/// against an exec), and after that once per kernel tick per entry (`last_ns`, stamped when
/// `bpf_jiffies64()`, a plain load, has moved on): a launch into an entry stamped this tick
/// reads no clock at all. Reading it at every launch cost about a sixth of a counted launch's
/// program time here (driver launch 529 -> 444 ns without it; the TSC is read through an
/// indirect call); `last_ns` only places the counts on the timeline, whose resolution is the
/// read period.
#[inline(always)]
pub(crate) fn count_launch(
    api: u16,
    runtime: bool,
    pt: u64,
    now: &mut u64,
    b: &LaunchBody,
) -> bool {
    let key = LaunchKey {
        tgid: (pt >> 32) as u32,
        api: api as u32,
        func: b.func,
        stream: b.stream,
        grid: b.grid,
        block: b.block,
        shared_bytes: b.shared_bytes,
        flags: b.flags,
        caller: if runtime { 0 } else { b.caller },
    };
    let add = |v: *mut LaunchCount| {
        // SAFETY: `v` points at a value of our own map; the count is shared by every CPU, so it
        // is added atomically; the stamp is a hint and the last writer wins (two CPUs that both
        // see a new tick both stamp it).
        unsafe {
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                core::ptr::addr_of_mut!((*v).count),
                1,
            );
            let jiffies = bpf_jiffies64();
            if core::ptr::read_volatile(core::ptr::addr_of!((*v).last_jiffies)) != jiffies {
                core::ptr::write_volatile(core::ptr::addr_of_mut!((*v).last_jiffies), jiffies);
                core::ptr::write_volatile(
                    core::ptr::addr_of_mut!((*v).last_ns),
                    bpf_ktime_get_ns(),
                );
            }
        }
    };
    if let Some(v) = LAUNCH_COUNTS.get_ptr_mut(&key) {
        add(v);
        return true;
    }
    // SAFETY: plain helper calls (jiffies is inlined by the verifier).
    let (t, jiffies) = unsafe { (bpf_ktime_get_ns(), bpf_jiffies64()) };
    *now = t;
    let first = LaunchCount {
        count: 1,
        last_ns: t,
        first_ns: t,
        last_jiffies: jiffies,
    };
    // BPF_NOEXIST: another CPU may have made the entry since the lookup; then add to it.
    if LAUNCH_COUNTS.insert(&key, &first, 1).is_ok() {
        return true;
    }
    match LAUNCH_COUNTS.get_ptr_mut(&key) {
        Some(v) => {
            add(v);
            true
        }
        None => {
            bump(&FAULTS, fault::COUNTS_FULL);
            false
        }
    }
}

/// Records a launch (or, in service mode, counts it), and its stack when the sampling draw
/// says so. The precise clock is read only where a time is kept: a record, a counter's first
/// launch, a stack sample (0 in `now`: not read yet).
#[inline(always)]
pub(crate) fn emit_launch(
    ctx: &ProbeContext,
    api: u16,
    runtime: bool,
    pt: u64,
    mut body: LaunchBody,
) {
    body.flags = profiler_common::device::with(body.flags, device_for(pt, body.stream));
    let mut now = 0;
    let counting = matches!(LAUNCH_MODE.get(0), Some(&m) if m == LAUNCHES_COUNTED);
    // Outside a duty cycle's window (its links still going in, or on their way out).
    if counting && matches!(LAUNCH_GATE.get(0), Some(&g) if g == GATE_SHUT) {
        return;
    }
    let counted = counting && count_launch(api, runtime, pt, &mut now, &body);
    if !counted {
        if now == 0 {
            // SAFETY: plain helper call.
            now = unsafe { bpf_ktime_get_ns() };
        }
        emit(kind::LAUNCH, api, pt, now, body);
    }
    sample_stack(
        ctx,
        api,
        pt,
        now,
        kind::LAUNCH,
        body.func,
        0,
        Some(body.caller),
    );
}

/// `CUresult cuLaunchKernel(CUfunction f, unsigned gridX, gridY, gridZ, unsigned blockX, blockY,
///  blockZ, unsigned sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)`
/// (+ `_ptsz`, and `cuLaunchCooperativeKernel(_ptsz)`, which lacks `extra`).
/// rdi=f, esi/edx/ecx=grid, r8d/r9d=blockX/Y, [sp+8]=blockZ, [sp+16]=smem, [sp+24]=stream.
#[uprobe]
pub fn drv_launch(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    // [ret, blockZ, smem, stream]
    let Some((pt, c, r, s)) = begin_stack::<4>(&ctx, class::LAUNCH) else {
        return 0;
    };
    let fl = if c.has(cookie::F_COOP) {
        flags::COOPERATIVE
    } else {
        0
    };
    emit_launch(&ctx, c.api, false, pt, drv_launch_body(r, s, fl));
    0
}

/// A `cuLaunchKernel` call's record from its registers and first four stack slots (see
/// [`drv_launch`]); the benchmark's bare recording probe writes the same.
#[inline(always)]
pub(crate) fn drv_launch_body(r: &pt_regs, s: [u64; 4], flags: u32) -> LaunchBody {
    LaunchBody {
        func: r.rdi,
        stream: s[3],
        caller: s[0],
        grid: [r.rsi as u32, r.rdx as u32, r.rcx as u32],
        block: [r.r8 as u32, r.r9 as u32, s[1] as u32],
        shared_bytes: s[2] as u32,
        flags,
    }
}

/// `CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
///  void **extra)` (+ `_ptsz`). config: grid@0/4/8, block@12/16/20, smem@24 (u32), hStream@32.
#[uprobe]
pub fn drv_launch_ex(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, [ret])) = begin_stack::<1>(&ctx, class::LAUNCH) else {
        return 0;
    };
    // [grid x,y,z, block x,y,z, smem, pad, hStream lo, hStream hi]: one read
    let cfg: [u32; 10] = user::<[u32; 10]>(r.rdi, [0; 10]);
    let body = LaunchBody {
        func: r.rsi,
        stream: (cfg[8] as u64) | ((cfg[9] as u64) << 32),
        caller: ret,
        grid: [cfg[0], cfg[1], cfg[2]],
        block: [cfg[3], cfg[4], cfg[5]],
        shared_bytes: cfg[6],
        flags: flags::LAUNCH_EX,
    };
    emit_launch(&ctx, c.api, false, pt, body);
    0
}

/// `cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
///  size_t sharedMem, cudaStream_t stream)` (+ `_ptsz`, `cudaLaunchCooperativeKernel(_ptsz)`).
/// A `dim3` by value takes two registers: rsi = grid.x | grid.y << 32, rdx = grid.z;
/// rcx = block.x | block.y << 32, r8 = block.z; r9 = args; [sp+8] = sharedMem, [sp+16] = stream.
#[uprobe]
pub fn rt_launch(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    // [ret, sharedMem, stream]
    let Some((pt, c, r, s)) = begin_stack::<3>(&ctx, class::LAUNCH) else {
        return 0;
    };
    let body = LaunchBody {
        func: r.rdi,
        stream: s[2],
        caller: s[0],
        grid: [r.rsi as u32, (r.rsi >> 32) as u32, r.rdx as u32],
        block: [r.rcx as u32, (r.rcx >> 32) as u32, r.r8 as u32],
        shared_bytes: s[1] as u32,
        flags: if c.has(cookie::F_COOP) {
            flags::COOPERATIVE
        } else {
            0
        },
    };
    emit_launch(&ctx, c.api, true, pt, body);
    0
}

/// `cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
///  void **args)` (+ `_ptsz`). config: gridDim@0, blockDim@12, dynamicSmemBytes@24 (size_t),
///  stream@32.
#[uprobe]
pub fn rt_launch_ex(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, [ret])) = begin_stack::<1>(&ctx, class::LAUNCH) else {
        return 0;
    };
    // [grid x,y,z, block x,y,z, smem lo, smem hi, stream lo, stream hi]
    let cfg: [u32; 10] = user::<[u32; 10]>(r.rdi, [0; 10]);
    let body = LaunchBody {
        func: r.rsi,
        stream: (cfg[8] as u64) | ((cfg[9] as u64) << 32),
        caller: ret,
        grid: [cfg[0], cfg[1], cfg[2]],
        block: [cfg[3], cfg[4], cfg[5]],
        shared_bytes: cfg[6],
        flags: flags::LAUNCH_EX,
    };
    emit_launch(&ctx, c.api, true, pt, body);
    0
}

/// `cuGraphLaunch(CUgraphExec, CUstream)` / `cudaGraphLaunch(cudaGraphExec_t, cudaStream_t)`
/// (+ `_ptsz`): rdi = exec, rsi = stream.
#[uprobe]
pub fn graph_launch(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c, r, now)) = begin(&ctx, class::GRAPH) else {
        return 0;
    };
    emit(
        kind::GRAPH,
        c.api,
        pt,
        now,
        GraphBody {
            graph_exec: r.rdi,
            stream: r.rsi,
        },
    );
    0
}

//! The benchmark's floor and lower bound: an empty uprobe and a bare recording probe at the
//! same sites as gpuprofd's.

use super::*;

// The benchmark's floor: an empty uprobe, attached by `gpuprofd floor` at the same sites as the
// real probes, to measure what the kernel's uprobe machinery costs before any work of ours.

#[uprobe]
pub fn empty(_ctx: ProbeContext) -> u32 {
    0
}

// The benchmark's lower bound for full capture: `gpuprofd floor --program NAME` puts one of
// these at the outermost probe site of a call (the rest keep `empty`). `bench_record` does only
// what any probe that records a launch must do: read the stack-passed arguments and the return
// address (one user-memory read), read the clock, and put one launch-sized record with the
// thread's ids into the ring buffer (no wakeup). No filter, no cookie, no pairing, no counters,
// no stack sampling: whatever a full capture costs above it is our own bookkeeping. The other
// three are its parts alone, so that the benchmark can say what each part costs on the host.
// The empty tail call is kept (see `NO_PRIV_STACK`): without it a program with this frame runs
// on a per-CPU stack, which is wrong under preemption, so no correct probe can leave it out.

/// The first four stack slots at entry: the return address and three stack-passed arguments
/// (`cuLaunchKernel`'s blockDimZ, sharedMemBytes and hStream).
#[inline(always)]
pub(crate) fn bench_stack(r: &pt_regs) -> [u64; 4] {
    // SAFETY: bpf_probe_read_user faults safely on bad user addresses.
    unsafe { bpf_probe_read_user(r.rsp as *const [u64; 4]) }.unwrap_or([0; 4])
}

#[inline(always)]
pub(crate) fn bench_emit(r: &pt_regs, s: [u64; 4], now: u64) {
    let pt = bpf_get_current_pid_tgid();
    if let Some(mut e) = EVENTS.reserve::<Record<LaunchBody>>(0) {
        e.write(Record {
            header: header(kind::LAUNCH, 0, pt, now),
            body: drv_launch_body(r, s, 0),
        });
        e.submit(BPF_RB_NO_WAKEUP as u64);
    }
}

/// Stack read, clock read and ring record: the least a recording probe does.
#[uprobe]
pub fn bench_record(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let r = regs(&ctx);
    let s = bench_stack(r);
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    bench_emit(r, s, now);
    0
}

/// The user-memory read alone.
#[uprobe]
pub fn bench_read(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    // A helper call is opaque to the compiler: the read stays although its result is unused.
    let _ = bench_stack(regs(&ctx));
    0
}

/// The clock read alone.
#[uprobe]
pub fn bench_clock(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    // SAFETY: plain helper call (kept although unused, as above).
    let _ = unsafe { bpf_ktime_get_ns() };
    0
}

/// The ring record alone (its arguments from registers only, no time).
#[uprobe]
pub fn bench_ring(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    bench_emit(regs(&ctx), [0; 4], 0);
    0
}

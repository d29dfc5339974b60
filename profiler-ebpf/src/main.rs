//! gpuprofd's eBPF uprobes: one record per CUDA call the program made, into one ring buffer.
//!
//! A handful of generic programs serve every hooked symbol; the attach cookie (see
//! `profiler_common::cookie`) says which API a probe stands for and where its arguments live.
//! Probes may sit on the first *emulated* instruction after the entry rather than on the entry
//! itself (the daemon's placement module guarantees that every instruction skipped leaves the
//! argument registers, the stack pointer and memory untouched), so argument reads below are the
//! x86-64 SysV entry view: rdi, rsi, rdx, rcx, r8, r9, then `[rsp+8]`, `[rsp+16]`, …
//!
//! Runtime calls enclose driver calls on the same thread. A runtime probe leaves a per-thread
//! slot in `PEND_RT`; a driver probe that finds itself inside one records nothing (the call is
//! already recorded under the runtime API the program called). See `nested_in_runtime`.
#![no_std]
#![no_main]
// The BPF target has no compare-and-swap, so `AtomicU64::fetch_add` does not exist there; the
// intrinsic compiles to BPF's atomic add (`lock xadd`), which the launch counters need.
#![feature(core_intrinsics)]
#![allow(internal_features)]

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, pt_regs},
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_ancestor_cgroup_id, bpf_get_current_comm,
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_get_current_task_btf,
        bpf_get_current_uid_gid, bpf_get_prandom_u32, bpf_get_stack, bpf_jiffies64,
        bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user, bpf_probe_read_user_buf,
        bpf_probe_read_user_str_bytes, bpf_task_storage_get,
    },
    macros::{map, tracepoint, uprobe, uretprobe},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray, RingBuf},
    programs::{ProbeContext, RetProbeContext, TracePointContext},
};
use profiler_common::{
    AliasBody, CopyBody, ExitBody, FILTER_CGROUPS as MODE_CGROUPS, FILTER_TGIDS as MODE_TGIDS,
    FILTER_TREE as MODE_TREE, GATE_SHUT, GraphBody, HandleKey, Header, LAUNCH_COUNTS_MAX,
    LAUNCHES_COUNTED, LaunchBody, LaunchCount, LaunchKey, MAX_CGROUP_DEPTH, MAX_KINDS, MapBody,
    MemBody, NAME_CAP, NameBody, PENDING_ENTRY_ONLY, PENDING_HAS_RETURN, PENDING_NONE,
    PY_MAX_THREADS, PY_NONE, Pending, PyProc, Record, STACK_NATIVE_MAX, STACK_PY_MAX, StackBody,
    SyncBody, ThreadCtx, class,
    cookie::{self, Cookie},
    dir, fault, flags, kind, memkind, memop, stackflags,
};

mod bench;
mod common;
mod copy;
mod device;
mod gpu;
mod launch;
mod maps;
mod memory;
mod memset;
mod names;
mod nccl;
mod pairing;
mod ret;
mod stacks;
mod sync;
mod watch;

use common::*;
use device::*;
use launch::*;
use maps::*;
use pairing::*;
use stacks::*;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

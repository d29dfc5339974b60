//! The process watchers (tracepoints): executable file mappings (late loads), process ends,
//! images replaced by exec, processes made by a selected one (a wrapped command's tree).

use super::*;

// Discovery of late loads: mmap(PROT_EXEC) of a file, reported when the syscall returns (the
// mapping is then in /proc/PID/maps). The daemon reads that process's maps and attaches a CUDA
// library it has not attached yet. Field offsets are those of the syscalls:sys_{enter,exit}_mmap
// tracepoint formats, which follow the syscall ABI (8-byte slots from offset 16).

pub(crate) const PROT_EXEC: u64 = 4;

#[tracepoint]
pub fn mmap_enter(ctx: TracePointContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK_TP);
    // SAFETY: reads inside the tracepoint's own record.
    let prot: u64 = unsafe { ctx.read_at(32) }.unwrap_or(0);
    // SAFETY: as above.
    let fd: u64 = unsafe { ctx.read_at(48) }.unwrap_or(u64::MAX);
    if prot & PROT_EXEC == 0 || (fd as i64) < 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if !selected((pid_tgid >> 32) as u32) {
        return 0;
    }
    // SAFETY: as above.
    let len: u64 = unsafe { ctx.read_at(24) }.unwrap_or(0);
    let _ = MMAP_PEND.insert(&(pid_tgid as u32), &len, 0);
    0
}

#[tracepoint]
pub fn mmap_exit(ctx: TracePointContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK_TP);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // SAFETY: read-only lookup of a plain value.
    let Some(&len) = (unsafe { MMAP_PEND.get(&tid) }) else {
        return 0;
    };
    let _ = MMAP_PEND.remove(&tid);
    // SAFETY: reads inside the tracepoint's own record.
    let ret: i64 = unsafe { ctx.read_at(16) }.unwrap_or(-1);
    if (-4095..0).contains(&ret) {
        return 0;
    }
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    emit(
        kind::MAP,
        0,
        pid_tgid,
        now,
        MapBody {
            addr: ret as u64,
            len,
        },
    );
    0
}

// ---------------------------------------------------------------------------------------------
// Process ends: sched:sched_process_exit fires for every thread. Where the kernel says which exit
// ends the thread group (`group_dead`, 6.16+), that one is the process's end: no thread of the
// process can record anything after it, so every later record with the same tgid belongs to a
// new process that was given the same pid. On older kernels the group leader's exit stands in.

#[tracepoint]
pub fn proc_exit(ctx: TracePointContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK_TP);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    // What this thread left in MMAP_PEND goes with it, whether or not its process is selected:
    // LRU eviction would make room eventually, but entries of ended threads must not crowd out
    // live ones, and a node's entry counts must come back when its jobs end. (Its PEND_RT and
    // PEND_DRV slots are task storage: the kernel frees them with the thread.)
    let _ = MMAP_PEND.remove(&tid);
    match EXIT_CONFIG.get(0) {
        Some(&off) if off != 0 => {
            // SAFETY: a read inside the tracepoint's own record, at the offset its format gives.
            let dead: u8 = unsafe { ctx.read_at(off as usize) }.unwrap_or(0);
            if dead == 0 {
                return 0;
            }
        }
        _ => {
            if tgid != pid_tgid as u32 {
                return 0;
            }
        }
    }
    let wanted = selected(tgid);
    // The pid may be handed to another process now: it must be judged afresh, and a `--pid`
    // selection named this process, not whichever comes next with its number. (After
    // `selected`, which may have cached a verdict just now.)
    let _ = FILTER_VERDICT.remove(&tgid);
    let _ = FILTER_TGIDS.remove(&tgid);
    let _ = PY_PROCS.remove(&tgid);
    if !wanted {
        return 0;
    }
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let comm = bpf_get_current_comm().unwrap_or([0; 16]);
    // The low half is the real uid.
    let uid = bpf_get_current_uid_gid() as u32;
    emit(
        kind::EXIT,
        0,
        pid_tgid,
        now,
        ExitBody {
            comm,
            uid,
            _reserved: 0,
        },
    );
    0
}

// ---------------------------------------------------------------------------------------------
// Image replaced: sched:sched_process_exec fires in the process after a successful exec, under
// its new name. The pid stays; the program, its mappings and every handle the old one held do
// not. Per-thread state went with the threads exec ended (proc_exit); what the probes keep per
// process for the old program goes now.

#[tracepoint]
pub fn proc_exec(ctx: TracePointContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK_TP);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let _ = PY_PROCS.remove(&tgid);
    if !selected(tgid) {
        return 0;
    }
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let comm = bpf_get_current_comm().unwrap_or([0; 16]);
    let uid = bpf_get_current_uid_gid() as u32;
    emit(
        kind::EXEC,
        0,
        pid_tgid,
        now,
        ExitBody {
            comm,
            uid,
            _reserved: 0,
        },
    );
    0
}

// ---------------------------------------------------------------------------------------------
// A new task: task:task_newtask fires in the parent while copy_process makes the child, after
// the child has its pid and before it is first woken, so a child added here is selected from its
// first instruction (no call it makes can come before its selection). In the tree mode, a child
// of a selected process is selected; threads (CLONE_THREAD) share their process's tgid and need
// nothing. The record's fields: `pid_t pid` at 8, `u64 clone_flags` at 32 (the format file's
// offsets, unchanged since the event was added in 3.11).

const CLONE_THREAD: u64 = 0x0001_0000;

#[tracepoint]
pub fn proc_fork(ctx: TracePointContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK_TP);
    if FILTER_MODE.get(0).copied() != Some(MODE_TREE) {
        return 0;
    }
    // SAFETY: a read inside the tracepoint's own record.
    let flags: u64 = unsafe { ctx.read_at(32) }.unwrap_or(CLONE_THREAD);
    if flags & CLONE_THREAD != 0 {
        return 0;
    }
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: read-only lookup of a plain value.
    if unsafe { FILTER_TGIDS.get(&parent) }.is_none() {
        return 0;
    }
    // SAFETY: as above.
    let child: i32 = unsafe { ctx.read_at(8) }.unwrap_or(0);
    if child > 0 {
        let _ = FILTER_TGIDS.insert(&(child as u32), &1, 0);
    }
    0
}

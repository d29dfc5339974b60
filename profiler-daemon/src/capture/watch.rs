//! The process watchers: tracepoints on executable file mappings (late loads), process ends,
//! images replaced by exec and, for a wrapped command's tree, new processes; mounting tracefs
//! where a fresh machine has it unmounted.

use super::CaptureError;
use aya::Ebpf;
use aya::maps::Array;
use profiler_common::maps;

/// Why the process watchers (mmap, exit, exec tracepoints) could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("tracefs is not mounted and mounting it at /sys/kernel/tracing failed: {0}")]
    Tracefs(#[source] std::io::Error),
    #[error("this kernel has no syscall tracepoints (CONFIG_FTRACE_SYSCALLS)")]
    NoSyscallTracepoints,
    #[error(transparent)]
    Map(#[from] CaptureError),
    #[error("the eBPF object has no program {0}")]
    NoProgram(&'static str),
    #[error("{what} {prog}: {source}")]
    Program {
        what: &'static str,
        prog: String,
        #[source]
        source: aya::programs::ProgramError,
    },
}

/// Loads and attaches the process watchers: mmap of executable files
/// (`syscalls:sys_{enter,exit}_mmap`) and process ends (`sched:sched_process_exit`), mounting
/// tracefs first when it is not mounted (a fresh machine often has it unmounted).
///
/// Returns whether a process's end is reported when its last thread exits (the kernel's record
/// says which exit ends the group) rather than when its group leader does.
pub fn watch_processes(ebpf: &mut Ebpf) -> Result<bool, WatchError> {
    use aya::programs::TracePoint;
    let tracefs = ensure_tracefs()?;
    let group_dead =
        std::fs::read_to_string(tracefs.join("events/sched/sched_process_exit/format"))
            .ok()
            .and_then(|f| field_offset(&f, "group_dead"))
            .unwrap_or(0);
    let name = maps::EXIT_CONFIG;
    let map = ebpf
        .map_mut(name)
        .ok_or(CaptureError::MissingMap { name })?;
    let mut config: Array<_, u32> =
        Array::try_from(map).map_err(|source| CaptureError::Map { name, source })?;
    config
        .set(0, group_dead, 0)
        .map_err(|source| CaptureError::Map { name, source })?;
    for (prog, category, event) in [
        ("mmap_enter", "syscalls", "sys_enter_mmap"),
        ("mmap_exit", "syscalls", "sys_exit_mmap"),
        ("proc_exit", "sched", "sched_process_exit"),
        ("proc_exec", "sched", "sched_process_exec"),
    ] {
        let failed = |what: &'static str, prog: String| {
            move |source| WatchError::Program { what, prog, source }
        };
        let tp: &mut TracePoint = ebpf
            .program_mut(prog)
            .ok_or(WatchError::NoProgram(prog))?
            .try_into()
            .map_err(failed("program", prog.into()))?;
        tp.load().map_err(failed("loading", prog.into()))?;
        tp.attach(category, event)
            .map_err(failed("attaching to", format!("{category}:{event}")))?;
    }
    Ok(group_dead != 0)
}

/// Attaches the fork watcher (`task:task_newtask`), which selects the children of selected
/// processes in the tree mode ([`super::Filter::Tree`]). Needs tracefs, which
/// [`watch_processes`] mounts where it is missing. Not attached in other modes: every process
/// start on the node would run it for nothing.
pub fn follow_forks(ebpf: &mut Ebpf) -> Result<(), WatchError> {
    use aya::programs::TracePoint;
    ensure_tracefs()?;
    let prog = "proc_fork";
    let failed =
        |what: &'static str, prog: String| move |source| WatchError::Program { what, prog, source };
    let tp: &mut TracePoint = ebpf
        .program_mut(prog)
        .ok_or(WatchError::NoProgram(prog))?
        .try_into()
        .map_err(failed("program", prog.into()))?;
    tp.load().map_err(failed("loading", prog.into()))?;
    tp.attach("task", "task_newtask")
        .map_err(failed("attaching to", "task:task_newtask".into()))?;
    Ok(())
}

/// The byte offset of `field` in a tracepoint's `format` file (`field:bool group_dead;
/// offset:32; size:1; signed:0;`), if it has one.
fn field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let mut parts = line.trim().split(';').map(str::trim);
        let decl = parts.next()?.strip_prefix("field:")?;
        if decl.rsplit(' ').next()? != field {
            return None;
        }
        parts.find_map(|p| p.strip_prefix("offset:")?.parse().ok())
    })
}

/// Makes sure tracefs is mounted; returns where.
fn ensure_tracefs() -> Result<std::path::PathBuf, WatchError> {
    let mounted = |p: &str| std::path::Path::new(p).join("events/syscalls").is_dir();
    for p in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if mounted(p) {
            return Ok(p.into());
        }
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: plain mount(2) with valid NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(WatchError::Tracefs(std::io::Error::last_os_error()));
    }
    if mounted("/sys/kernel/tracing") {
        Ok("/sys/kernel/tracing".into())
    } else {
        Err(WatchError::NoSyscallTracepoints)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_dead_offset_is_read_from_the_format() {
        let format = "name: sched_process_exit\nID: 369\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
            \tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n\
            \tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n\
            \tfield:bool group_dead;\toffset:32;\tsize:1;\tsigned:0;\n";
        assert_eq!(field_offset(format, "group_dead"), Some(32));
        assert_eq!(field_offset(format, "pid"), Some(24));
        assert_eq!(field_offset(format, "dead"), None);
        let old = format.replace(
            "\tfield:bool group_dead;\toffset:32;\tsize:1;\tsigned:0;\n",
            "",
        );
        assert_eq!(field_offset(&old, "group_dead"), None);
    }
}

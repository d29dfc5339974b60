//! Which processes' Python frames the probes read (`PY_PROCS`): each CUDA process is looked at
//! once, and a CPython's interpreter is handed to the probes before its next call.
//!
//! The probes walk a thread's Python frames only for processes in `PY_PROCS`, and only at the
//! call itself: a call made before its process is there keeps native frames only, for good.
//! So a process is looked at as early as the daemon can know it uses CUDA — the processes
//! that map a CUDA library when the capture starts (a live attach: `--all-jobs`, `--pid`),
//! before a single probe is attached; later ones when the kernel reports that they map one, or
//! a rescan of /proc finds them; any other at its first recorded call.

use crate::capture;
use crate::discovery::Scanner;
use aya::Ebpf;
use std::collections::HashMap;

/// The processes looked at, so that each is read once.
#[derive(Default)]
pub(super) struct PythonProcs {
    /// Processes looked at, with their start time (a reused tgid is looked at again).
    checked: HashMap<u32, u64>,
}

/// Processes remembered as looked at, at most (then the oldest knowledge is dropped).
const MAX_PYTHON_CHECKED: usize = 65536;

impl PythonProcs {
    /// Looks at every process `scanner` found mapping a CUDA library (once each).
    pub fn seen_cuda(&mut self, ebpf: &mut Ebpf, scanner: &Scanner, stack_period: u32) {
        for tgid in scanner.cuda_processes() {
            self.seen(ebpf, tgid, stack_period);
        }
    }

    /// Looks at `tgid` once (per process): if it runs a supported CPython, the probes read its
    /// Python frames from now on.
    pub fn seen(&mut self, ebpf: &mut Ebpf, tgid: u32, stack_period: u32) {
        if stack_period == 0 {
            return;
        }
        let start = crate::enrich::process::start_time(tgid).unwrap_or(0);
        if self.checked.get(&tgid) == Some(&start) {
            return;
        }
        if self.checked.len() >= MAX_PYTHON_CHECKED {
            self.checked.clear();
        }
        self.checked.insert(tgid, start);
        let found = crate::enrich::stacks::python::detect(tgid);
        let value = found.as_ref().and_then(|p| p.probe());
        if let Err(e) = capture::set_python(ebpf, tgid, value) {
            super::console::warn(format_args!(
                "Python frames of process {tgid} not read: {e}"
            ));
        }
    }

    /// `tgid`'s process ended or ran another program: the next one under that pid is looked
    /// at afresh.
    pub fn forget(&mut self, tgid: u32) {
        self.checked.remove(&tgid);
    }
}

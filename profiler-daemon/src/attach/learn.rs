//! Probes kept for a while only ([`rules::learning_only`]): `cudaGetDevice`, which frameworks
//! call around every operation, is probed for [`rules::LEARN_FOR`] after its library is
//! attached and then let go. A thread whose context was made current before gpuprofd attached
//! has a device nothing else reveals (the real runtime asks the driver through its private
//! export table, which no probe sees); one `cudaGetDevice` inside that time gives it, and the
//! device tracker passes it on to the context (see `profiler-ebpf/src/device.rs`), so every
//! thread that later names that context (`cuCtxGetCurrent`) has it too.
//!
//! Only for the libraries attached while the session sets up ([`Attacher::set_learning`]):
//! those of processes already running. A library found later is mapped by a process that
//! starts under watch, whose contexts the probes see being made; it would only pay (PyTorch
//! calls `cudaGetDevice` about 8 times per kernel launch: on the H100 the context probes ran
//! 4,101 times for 500 launches while it was probed, against 100 without it).
//!
//! These are not counted among a library's probes (the ready line, `status`, the report's
//! `libraries[].probes`): they come and go.
//!
//! Only with `uprobe_multi` links: a perf-event probe cannot be let go on its own here (those
//! links go with the eBPF object), so without them the symbol is not probed at all.

use super::{Attacher, CudaLibrary, ProbeError, Site, attach_multi, rules, scope};
use std::os::fd::OwnedFd;
use std::time::Instant;

/// The links of learning probes, with when they were made.
#[derive(Default)]
pub(super) struct Learning {
    /// Whether libraries attached now get learning probes.
    on: bool,
    links: Vec<(Instant, Vec<OwnedFd>)>,
}

impl Learning {
    /// Every link, for the release at the end.
    pub(super) fn take_all(&mut self) -> Vec<OwnedFd> {
        self.links.drain(..).flat_map(|(_, l)| l).collect()
    }
}

impl Attacher {
    /// Links `sites` (learning probes of `lib`) for every process, or for each chosen one;
    /// returns the symbols that failed.
    pub(super) fn attach_learning(
        &mut self,
        lib: &CudaLibrary,
        sites: &[Site],
    ) -> Vec<(usize, ProbeError)> {
        let Some(m) = self.multi.as_ref() else {
            return Vec::new();
        };
        if sites.is_empty() || !self.learning.on {
            return Vec::new();
        }
        let pids = match &self.processes {
            Some(p) => p.pids(),
            None => vec![0],
        };
        let mut links = Vec::new();
        let mut failed = Vec::new();
        for pid in pids {
            let f = attach_multi(m, &lib.open_path, sites, pid, &mut links);
            if failed.is_empty() {
                failed = f;
            }
        }
        tracing::debug!(lib = %lib.display, links = links.len(), "learning probes attached");
        self.learning.links.push((Instant::now(), links));
        failed
    }

    /// Whether libraries attached from now on get learning probes (the session: while it
    /// attaches the libraries of the processes running when it starts).
    pub fn set_learning(&mut self, on: bool) {
        self.learning.on = on;
    }

    /// Lets go of the learning probes attached [`rules::LEARN_FOR`] ago or more (on a thread
    /// of their own: each release waits for RCU grace periods). How many links went.
    pub fn end_learning(&mut self) -> usize {
        let now = Instant::now();
        let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.learning.links)
            .into_iter()
            .partition(|(t, _)| now.duration_since(*t) >= rules::LEARN_FOR);
        self.learning.links = keep;
        let links: Vec<OwnedFd> = old.into_iter().flat_map(|(_, l)| l).collect();
        let n = links.len();
        if n > 0 {
            tracing::debug!(links = n, "learning probes let go");
        }
        scope::close_later(links);
        n
    }

    /// Whether learning probes are attached now.
    pub fn learning(&self) -> bool {
        !self.learning.links.is_empty()
    }
}

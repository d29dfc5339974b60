//! Probes for chosen processes only: `uprobe_multi` links that carry a pid, so that the kernel
//! puts breakpoints into those processes alone and every other process that maps the library
//! runs at full speed (no trap, no program run). Used for `--pid`, a fixed set of live
//! processes; why not for selections that grow is said at `session::setup::per_process`.
//!
//! What the kernel does with the pid (kernel/trace/bpf_trace.c, `bpf_uprobe_multi_link_attach`
//! and its consumer, 6.6 and later): the pid names a process (`get_pid_task(…, PIDTYPE_TGID)`,
//! its leader thread); the link's filter installs breakpoints only into that task's address
//! space (at the attach for what it maps already, at `mmap` for what it maps later, after an
//! exec too), and the program runs only for a thread of that process (`same_thread_group`;
//! by address space before 6.12). A child made by `fork` gets a copy of its parent's text
//! pages, breakpoints included: it traps on them, but none of the parent's links runs a
//! program for it (so `--pid`'s children are not recorded, as before, but pay the trap). An
//! exec from a thread other than the main one ends the task a link holds: see
//! [`Attacher::revive`].
//!
//! Where the kernel has no `uprobe_multi` links, or refuses their pid, the probes stay on every
//! process (the in-kernel filter still records only the selection) and the session says so.

use super::{Attacher, CudaLibrary, ProbeError, Site, attach_multi, multi};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

/// The links of each chosen process, by tgid.
#[derive(Default)]
pub(super) struct Processes {
    links: BTreeMap<u32, Vec<OwnedFd>>,
}

impl Processes {
    /// The chosen processes.
    pub(super) fn pids(&self) -> Vec<u32> {
        self.links.keys().copied().collect()
    }

    /// Every link, for the release at the end; the processes stay chosen.
    pub(super) fn take_all(&mut self) -> Vec<OwnedFd> {
        self.links.values_mut().flat_map(std::mem::take).collect()
    }
}

/// Why the probes could not be limited to chosen processes.
#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    #[error(
        "probes are attached for every process that maps a CUDA library (perf-event uprobes \
         cannot be limited to chosen processes here): other CUDA processes on this node pay \
         a trap per probed call, unrecorded"
    )]
    NoMulti,
}

/// The errno a kernel gives for a link attribute it does not know (`uprobe_multi.pid`).
fn refused_pid(e: &ProbeError) -> bool {
    matches!(
        e.errno(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::E2BIG)
    )
}

fn gone(failed: &[(usize, ProbeError)]) -> bool {
    failed.iter().any(|(_, e)| e.errno() == Some(libc::ESRCH))
}

/// The path of a library's kept file (see `Attacher::files`).
fn kept_path(
    files: &std::collections::HashMap<(u64, u64), std::fs::File>,
    key: &(u64, u64),
) -> Option<std::path::PathBuf> {
    use std::os::fd::AsRawFd as _;
    files
        .get(key)
        .map(|f| format!("/proc/self/fd/{}", f.as_raw_fd()).into())
}

/// The process a `uprobe_multi` link is for, as its fdinfo says (`pid:`; 0 once the task the
/// link holds is gone); `None` where the kernel does not say.
fn link_pid(link: &OwnedFd) -> Option<u32> {
    use std::os::fd::AsRawFd as _;
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", link.as_raw_fd())).ok()?;
    fdinfo_pid(&text)
}

fn fdinfo_pid(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("pid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Closes `links` on a thread of their own: each close waits for RCU grace periods, which the
/// caller (the session's run loop) must not.
pub(super) fn close_later(links: Vec<OwnedFd>) {
    if !links.is_empty() {
        std::thread::spawn(move || multi::release(links));
    }
}

impl Attacher {
    /// From now on, probes go into processes `pids` only. Call before any library is
    /// attached. Fails, leaving every process probed, where
    /// the probes are perf-event uprobes.
    pub fn select_processes(&mut self, pids: &[u32]) -> Result<(), ScopeError> {
        if self.multi.is_none() {
            return Err(ScopeError::NoMulti);
        }
        debug_assert!(self.libraries.is_empty(), "select before attaching");
        self.processes = Some(Processes::default());
        for &p in pids {
            self.add_process(p);
        }
        Ok(())
    }

    /// Whether probes go into chosen processes only.
    pub fn per_process(&self) -> bool {
        self.processes.is_some()
    }

    /// A one-line note for the user when the probes had to go back to every process (once).
    pub fn take_note(&mut self) -> Option<String> {
        self.note.take()
    }

    /// Probes process `pid` too: links on every library attached so far (and on those attached
    /// later). Whether it was added (not when it was already, when probes go to every process,
    /// or when it is gone).
    fn add_process(&mut self, pid: u32) -> bool {
        let (Some(procs), Some(m)) = (self.processes.as_mut(), self.multi.as_ref()) else {
            return false;
        };
        if pid == 0 || procs.links.contains_key(&pid) {
            return false;
        }
        let mut links = Vec::new();
        for (key, sites) in &self.sites {
            let la = &self.libraries[key];
            let path = kept_path(&self.files, key).unwrap_or_else(|| la.lib.open_path.clone());
            let failed = attach_multi(m, &path, sites, pid, &mut links);
            if gone(&failed) {
                close_later(links);
                return false;
            }
            for (i, e) in failed {
                tracing::warn!(
                    pid,
                    symbol = %la.symbols[i].symbol,
                    lib = %la.lib.display,
                    "not attached for this process: {e}"
                );
            }
        }
        tracing::debug!(pid, links = links.len(), "probes for process");
        procs.links.insert(pid, links);
        true
    }

    /// Makes links again for each chosen process whose links no longer hold it, and returns
    /// those processes. The kernel ties a link to the process's main thread; an `exec` from
    /// another thread ends that thread and gives the pid to the one that called it, and the
    /// link's fdinfo then says `pid: 0` (its task is gone): without new links the new program
    /// would run unprobed. (Kernels whose fdinfo has no pid line cannot tell; nothing changes.)
    pub fn revive(&mut self) -> Vec<u32> {
        let Some(procs) = self.processes.as_mut() else {
            return Vec::new();
        };
        let lost: Vec<u32> = procs
            .links
            .iter()
            .filter(|&(&pid, links)| {
                links.first().is_some_and(|l| link_pid(l) == Some(0))
                    && crate::discovery::process_exists(pid)
            })
            .map(|(&pid, _)| pid)
            .collect();
        for p in &lost {
            if let Some(links) = procs.links.remove(p) {
                close_later(links);
            }
        }
        lost.into_iter().filter(|&p| self.add_process(p)).collect()
    }

    /// Makes the links of one library: for every process, or for each chosen one. Returns the
    /// symbols that failed (for the chosen processes: as the first live one saw it).
    pub(super) fn attach_sites(
        &mut self,
        lib: &CudaLibrary,
        sites: &[Site],
    ) -> Vec<(usize, ProbeError)> {
        let Some(m) = self.multi.as_ref() else {
            return Vec::new();
        };
        let Some(procs) = self.processes.as_mut() else {
            return attach_multi(m, &lib.open_path, sites, 0, &mut self.multi_links);
        };
        let mut failed: Option<Vec<(usize, ProbeError)>> = None;
        let mut ended = Vec::new();
        for (&pid, links) in procs.links.iter_mut() {
            let mut made = Vec::new();
            let f = attach_multi(m, &lib.open_path, sites, pid, &mut made);
            if gone(&f) {
                close_later(made);
                ended.push(pid);
                continue;
            }
            links.extend(made);
            failed.get_or_insert(f);
        }
        for p in ended {
            if let Some(links) = procs.links.remove(&p) {
                close_later(links);
            }
        }
        let failed = failed.unwrap_or_default();
        // Every site refused as an unknown attribute would be: a kernel that takes no pid.
        // Where links for every process work, all probes go back to every process.
        let refused = !sites.is_empty()
            && failed.len() == sites.len()
            && failed.iter().all(|(_, e)| refused_pid(e));
        if !refused {
            return failed;
        }
        let mut all = Vec::new();
        let f = attach_multi(m, &lib.open_path, sites, 0, &mut all);
        if f.len() == failed.len() {
            close_later(all);
            return failed;
        }
        self.multi_links.extend(all);
        self.widen(&failed[0].1);
        f
    }

    /// Probes every process from now on: links for every process on each library attached
    /// before, the chosen processes' links closed; notes why.
    fn widen(&mut self, why: &ProbeError) {
        let Some(mut procs) = self.processes.take() else {
            return;
        };
        close_later(procs.take_all());
        if let Some(m) = self.multi.as_ref() {
            for (key, sites) in &self.sites {
                let la = &self.libraries[key];
                let path = kept_path(&self.files, key).unwrap_or_else(|| la.lib.open_path.clone());
                for (i, e) in attach_multi(m, &path, sites, 0, &mut self.multi_links) {
                    tracing::warn!(symbol = %la.symbols[i].symbol, "not attached: {e}");
                }
            }
        }
        self.files.clear();
        self.note = Some(format!(
            "the kernel refused uprobe_multi links for one process ({why}): probes are attached \
             for every process that maps a CUDA library; other CUDA processes on this node pay \
             a trap per probed call, unrecorded"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::fdinfo_pid;

    #[test]
    fn the_pid_of_a_link_from_its_fdinfo() {
        let link = "pos:\t0\nflags:\t02000000\nlink_type:\tuprobe_multi\nlink_id:\t38987\n\
                    prog_id:\t38175\nuprobe_cnt:\t4\npid:\t6451\npath:\t/lib/libcuda.so.1\n\
                    cookie\t offset\t ref_ctr_offset\n288230441113026593\t 0x952a\t 0x0\n";
        assert_eq!(fdinfo_pid(link), Some(6451));
        assert_eq!(fdinfo_pid(&link.replace("6451", "0")), Some(0));
        // A kernel whose fdinfo has no pid line (before show_fdinfo for these links).
        assert_eq!(fdinfo_pid("link_type:\tuprobe_multi\nprog_id:\t1\n"), None);
    }
}

//! Before the capture runs: check the target, find the CUDA libraries, load the eBPF object,
//! set its filter, attach the probes, and take the ring buffer and the launch counters.

use super::python::PythonProcs;
use super::selection::Selection;
use super::{CaptureOptions, SessionError, Target};
use crate::attach::duty::{DutyCycle, LaunchSites};
use crate::attach::{AttachError, Attacher, layer_label};
use crate::capture;
use crate::discovery::{self, CudaLibrary, Scanner};
use crate::enrich::launch_origin::SeenAtDriver;
use crate::enrich::process::read_proc_info;
use aya::Ebpf;
use aya::maps::{MapData, RingBuf};
use std::time::Duration;

/// The probes attached and what the run loop keeps using.
pub(super) struct Probes {
    pub ebpf: Ebpf,
    pub attacher: Attacher,
    pub scanner: Scanner,
    pub selection: Selection,
    /// How often /proc is rescanned for CUDA libraries.
    pub rescan_every: Duration,
    /// Whether the kernel reports a process's end at its last thread's exit (see `Seen`).
    pub exit_final: bool,
    pub ring: Option<RingBuf<MapData>>,
    /// Service mode: launches counted in the kernel, read every period.
    pub counting: Option<capture::Counting>,
    pub launch_mode: Option<capture::counted::LaunchMode>,
    /// The processes whose Python frames the probes read.
    pub python: PythonProcs,
    /// What a driver launch stands for when a runtime called it (one trap per launch), as
    /// the attach says; read by the ring reader.
    pub seen_at_driver: SeenAtDriver,
    /// The duty cycle, the launch probes' sites kept for its windows and the gate on their
    /// counts (taken at the start).
    pub duty: Option<(DutyCycle, LaunchSites, capture::counted::LaunchGate)>,
    /// The running cycle: its stop flag and thread (stopped before the reader's last drain).
    pub duty_thread: Option<(
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<()>,
    )>,
}

impl Probes {
    /// Loads and attaches everything the capture needs, or says why it cannot run.
    pub async fn start(opts: &CaptureOptions) -> Result<Probes, SessionError> {
        // A bad --cgroup / --job is refused before anything is scanned or attached.
        let mut selection = Selection::new(opts)?;
        let mut scanner = Scanner::new();
        // Said before the search, which it cripples (and which may then find nothing).
        let maps_followable = match discovery::map_files_followable() {
            Ok(()) => true,
            Err(e) => {
                super::console::warn(format_args!("{e}: {}", discovery::MAP_FILES_HINT));
                false
            }
        };
        let initial = initial_libraries(opts, &mut scanner, maps_followable).await?;
        // Every attached library holds descriptors (links, or perf events before 6.6): a node
        // with many runtime copies outgrows a shell's soft limit of 1,024 (see `rlimit`).
        match crate::sys::rlimit::raise_open_files() {
            Ok(l) if l.after != l.before => {
                tracing::debug!(before = l.before, after = l.after, "open-file limit raised")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(
                "could not raise the open-file limit ({e}); probes on many libraries may fail to \
                 attach with \"Too many open files\""
            ),
        }
        let mut ebpf = capture::load(opts.ring_bytes)?;
        let filter = match opts.target {
            Target::Pid(p) => capture::Filter::Tgids(vec![p]),
            Target::AllJobs if selection.active() => {
                capture::Filter::Cgroups(selection.refresh().iter().map(|c| c.id).collect())
            }
            Target::AllJobs => capture::Filter::All,
            Target::Command => capture::Filter::Tree,
        };
        capture::set_filter(&mut ebpf, &filter)?;
        capture::set_stack_period(&mut ebpf, opts.stack_period)?;
        let mut attacher = Attacher::new();
        attacher.set_launch_traps(opts.launch_traps);
        // The libraries attached while setting up are those of processes already running,
        // whose contexts were made before: they get the learning probes (see attach::learn).
        attacher.set_learning(true);
        // Now, while the eBPF object still holds every map (the ring and the counters are
        // taken below): `uprobe_multi` programs are loaded against them.
        attacher.load_programs(&mut ebpf)?;
        let duty = match opts.launch_duty {
            Some(cycle) if attacher.duty_possible() => {
                let sites = LaunchSites::default();
                attacher.set_duty_sites(sites.clone());
                Some((cycle, sites))
            }
            Some(cycle) => {
                super::console::warn(format_args!(
                    "no duty cycle ({cycle}): the kernel gave no uprobe_multi links, and \
                     perf-event probes take about 0.1 s each to detach; launch probes stay \
                     attached all the time"
                ));
                None
            }
            None => None,
        };
        // Only the selected processes get breakpoints, where the selection is a set of
        // processes; the others run at full speed.
        if let Some(pids) = per_process(&opts.target)
            && let Err(e) = attacher.select_processes(&pids)
        {
            super::console::warn(e);
        }
        // A live attach: the CPython processes already running are known to the probes before
        // any is attached, so that their first call after the attach has its Python frames.
        let mut python = PythonProcs::default();
        python.seen_cuda(&mut ebpf, &scanner, opts.stack_period);
        attach_initial(&mut attacher, &mut ebpf, &initial, opts.verbose)?;
        // Late loads: an mmap watcher in the kernel reports executable file mappings as they
        // happen; the /proc rescan is then only a slow safety net.
        let (rescan_every, exit_final) = match capture::watch_processes(&mut ebpf) {
            Ok(final_exit) => (opts.rescan.unwrap_or(Duration::from_secs(30)), final_exit),
            Err(e) => {
                super::console::warn(format_args!(
                    "cannot watch mmap in the kernel ({e}); new CUDA library files are found by \
                     rescanning /proc every second instead"
                ));
                (opts.rescan.unwrap_or(Duration::from_secs(1)), false)
            }
        };
        if opts.target == Target::Command {
            capture::follow_forks(&mut ebpf).map_err(SessionError::FollowForks)?;
        }
        // A process that mapped a CUDA library after the start-up scan but before the watcher
        // started is in neither: one more scan closes that gap (the watcher reports everything
        // from here on). It matters most to an `--all-jobs` that starts with nothing to attach.
        if matches!(opts.target, Target::AllJobs) && maps_followable {
            let late: Vec<CudaLibrary> = scanner
                .scan_all()
                .into_iter()
                .filter(|l| !attacher.is_attached(l))
                .collect();
            python.seen_cuda(&mut ebpf, &scanner, opts.stack_period);
            for lib in &late {
                if let Err(e) = attach_and_report(&mut attacher, &mut ebpf, lib, opts.verbose) {
                    super::console::warn(format_args!(
                        "not attached to \"{}\": {e}; capture goes on without it",
                        lib.display
                    ));
                }
            }
        }
        // Libraries found from here on are mapped by processes that start under watch.
        attacher.set_learning(false);
        let ring = capture::take_ring(&mut ebpf)?;
        // Service mode's default: launches are counted in the kernel, read every period.
        let (counting, launch_mode) = match opts.count_launches {
            Some(period) => {
                let (counts, mut mode) = capture::counted::take(&mut ebpf)?;
                mode.set(true)?;
                (Some(capture::Counting::new(counts, period)), Some(mode))
            }
            None => (None, None),
        };
        let duty = match duty {
            Some((cycle, sites)) => {
                Some((cycle, sites, capture::counted::LaunchGate::take(&mut ebpf)?))
            }
            None => None,
        };
        let seen_at_driver = SeenAtDriver::default();
        publish(&attacher, &seen_at_driver);
        Ok(Probes {
            seen_at_driver,
            duty,
            duty_thread: None,
            ebpf,
            attacher,
            scanner,
            selection,
            rescan_every,
            exit_final,
            ring: Some(ring),
            counting,
            launch_mode,
            python,
        })
    }

    /// Attaches the libraries found while running. One that cannot be attached (its process
    /// ended and took the file with it, a file that is not what it looked like, out of fds) is
    /// reported and skipped: a library a process offers must not stop the capture of all
    /// others. Whether any was attached (the API table grew).
    pub fn attach_new(&mut self, found: Vec<CudaLibrary>, verbose: bool) -> bool {
        let mut grew = false;
        for lib in found {
            if !self.attacher.is_attached(&lib) {
                match attach_and_report(&mut self.attacher, &mut self.ebpf, &lib, verbose) {
                    Ok(()) => {
                        grew = true;
                        publish(&self.attacher, &self.seen_at_driver);
                    }
                    Err(e) => super::console::warn(format_args!(
                        "not attached to \"{}\": {e}; capture goes on without it",
                        lib.display
                    )),
                }
            }
        }
        grew
    }

    /// Probes attached now.
    pub fn probe_count(&self) -> usize {
        self.attacher.libraries().map(|l| l.attached()).sum()
    }
}

/// Hands the attach's view of runtime launches seen at the driver to the reader.
fn publish(attacher: &Attacher, to: &SeenAtDriver) {
    let (via, runtimes) = attacher.seen_at_driver();
    to.set(via, &runtimes);
}

/// The processes to probe alone, when the selection is a fixed set of live processes: `--pid`.
/// `None`: probes for every process that maps a library, the in-kernel filter recording only
/// the selection — `--all-jobs` and the service (everyone is selected), `--job` and `--cgroup`,
/// and a command's tree. Those selections gain members while they run, and a new member is
/// exact only if it is probed before its first call: a process can be given links only once it
/// exists, by the daemon, after the kernel reported it (fork, exec or mmap records, a
/// millisecond later), while a forked child runs at once with its parent's breakpoints, which
/// the parent's links do not record, and an exec'd one maps and calls its libraries within a
/// millisecond or two. (Tried for the command's tree: the test's grandchild, a workload run by
/// `sh -c`, made all its calls before its links existed and was missing from the report.)
/// Holding new members until they are probed would take SIGSTOP or ptrace, which the wrapped
/// command would notice.
///
/// Also `None` where `GPUPROFD_PER_PROCESS=0` asks for it (to measure what per-process probes
/// save), and for a process whose main thread has ended (warned): the kernel ties a link to the
/// process's leader thread and installs breakpoints into the leader's address space, which a
/// leader that exited no longer has.
fn per_process(target: &Target) -> Option<Vec<u32>> {
    if std::env::var("GPUPROFD_PER_PROCESS").as_deref() == Ok("0") {
        return None;
    }
    let Target::Pid(p) = *target else {
        return None;
    };
    if crate::enrich::process::read_stat(p).is_some_and(|s| s.state == 'Z') {
        super::console::warn(format_args!(
            "process {p}'s main thread has ended, and the kernel cannot limit probes to a \
             process without it: probes are attached for every process that maps a CUDA \
             library; other CUDA processes on this node pay a trap per probed call, unrecorded"
        ));
        return None;
    }
    Some(vec![p])
}

/// Whether a library that failed to attach at the start was only reachable through a process
/// (`/proc/PID/map_files`, `/proc/PID/root`) that may have ended between the scan and the
/// attach: on a busy node that is a race, not the user's mistake, and must not stop the capture
/// of everything else (a `--lib` file that cannot be read still does).
fn gone_with_its_process(lib: &CudaLibrary, e: &AttachError) -> bool {
    matches!(e, AttachError::Elf { .. }) && lib.open_path.starts_with("/proc/")
}

/// Attaches the libraries found before the start. A library the kernel refused every probe of
/// for want of privilege is reported and skipped; the capture stops only when that left it no
/// probe at all.
fn attach_initial(
    attacher: &mut Attacher,
    ebpf: &mut Ebpf,
    initial: &[CudaLibrary],
    verbose: bool,
) -> Result<(), SessionError> {
    // Drivers first: a runtime leaves its launch entries to the driver's probe (one trap per
    // launch) only where a driver is already probed.
    let mut initial: Vec<&CudaLibrary> = initial.iter().collect();
    initial.sort_by_key(|l| l.layer != crate::api::Layer::Driver);
    let mut denied = None;
    for lib in initial {
        match attach_and_report(attacher, ebpf, lib, verbose) {
            Err(e @ AttachError::Permission { .. }) => {
                super::console::warn(&e);
                denied.get_or_insert(e);
            }
            Err(e) if gone_with_its_process(lib, &e) => {
                super::console::warn(format_args!(
                    "not attached to \"{}\": {e}; the process that mapped it has probably \
                     ended; capture goes on without it",
                    lib.display
                ));
            }
            r => r?,
        }
    }
    match denied {
        Some(e) if attacher.libraries().all(|l| l.attached() == 0) => Err(e.into()),
        _ => Ok(()),
    }
}

/// The libraries to attach before capture starts; validates `--pid`. With `--all-jobs` (and
/// the service) an empty list is fine: the capture waits for the first process that maps a
/// CUDA library, as "all jobs, now or later" promises — unless the daemon cannot follow
/// `/proc/PID/map_files`, when no library a process maps could ever be attached.
async fn initial_libraries(
    opts: &CaptureOptions,
    scanner: &mut Scanner,
    maps_followable: bool,
) -> Result<Vec<CudaLibrary>, SessionError> {
    let mut libs: Vec<CudaLibrary> = Vec::new();
    let add = |l: CudaLibrary, libs: &mut Vec<CudaLibrary>| {
        if !libs.iter().any(|x| x.dev == l.dev && x.ino == l.ino) {
            libs.push(l);
        }
    };
    for p in discovery::expand_lib_args(&opts.libs) {
        match scanner.add_file(&p) {
            Some(l) => add(l, &mut libs),
            None => {
                tracing::warn!(path = %p.display(), "--lib: not a CUDA driver or runtime (SONAME libcuda.so.1 / libcudart.so.N); ignored")
            }
        }
    }
    match opts.target {
        Target::Pid(pid) => {
            for l in wait_for_cuda(opts, scanner, pid).await? {
                add(l, &mut libs);
            }
        }
        Target::AllJobs | Target::Command => {
            for l in scanner.scan_all() {
                add(l, &mut libs);
            }
            if opts.system_libs {
                for p in discovery::system_libraries() {
                    if let Some(l) = scanner.add_file(&p) {
                        add(l, &mut libs);
                    }
                }
            }
        }
    }
    if libs.is_empty() && !(opts.target.scans_node() && maps_followable) {
        return Err(SessionError::NothingToAttach);
    }
    Ok(libs)
}

/// The CUDA libraries process `pid` maps; with `--wait`, waits until it maps one.
async fn wait_for_cuda(
    opts: &CaptureOptions,
    scanner: &mut Scanner,
    pid: u32,
) -> Result<Vec<CudaLibrary>, SessionError> {
    if !discovery::process_exists(pid) {
        return Err(SessionError::NoSuchProcess(pid));
    }
    loop {
        let found = scanner.scan_process(pid);
        if !found.is_empty() {
            return Ok(found);
        }
        if !discovery::process_exists(pid) {
            return Err(SessionError::ExitedBeforeCuda(pid));
        }
        if !opts.wait {
            let comm = read_proc_info(pid)
                .map(|i| i.comm)
                .unwrap_or_else(|| "?".into());
            return Err(SessionError::NoCuda { pid, comm });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn attach_and_report(
    attacher: &mut Attacher,
    ebpf: &mut Ebpf,
    lib: &CudaLibrary,
    verbose: bool,
) -> Result<(), AttachError> {
    let attached = attacher.attach_library(ebpf, lib).map(|_| ());
    // The probes went back to every process (the kernel refused a link for one).
    if let Some(note) = attacher.take_note() {
        super::console::warn(note);
    }
    attached?;
    let Some(la) = attacher.library(lib) else {
        return Ok(());
    };
    tracing::info!(
        lib = %lib.display,
        soname = %lib.soname,
        layer = layer_label(lib.layer),
        attached = la.attached(),
        failed = la.failed(),
        "attached"
    );
    for s in &la.symbols {
        if let Some(err) = &s.error {
            tracing::warn!(symbol = %s.symbol, lib = %lib.display, "not attached: {err}");
        } else if verbose {
            super::console::raw(format_args!(
                "  {:<34} {:<8} entry {:#08x} probe +{:<2} ({}){}",
                s.symbol,
                layer_label(lib.layer),
                s.entry_offset,
                s.placement.offset,
                s.placement.reason,
                if s.has_return { " +return" } else { "" }
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Layer;

    fn lib(open_path: &str) -> CudaLibrary {
        CudaLibrary {
            open_path: open_path.into(),
            display: "/usr/lib/libcuda.so.1".into(),
            soname: "libcuda.so.1".into(),
            layer: Layer::Driver,
            dev: 1,
            ino: 2,
            static_runtime: false,
        }
    }

    fn elf_error() -> AttachError {
        AttachError::Elf {
            path: "x".into(),
            source: crate::discovery::elf::ElfError::Io {
                path: "/proc/27212/map_files/7fda1b365000-7fda1b36b000".into(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            },
        }
    }

    #[test]
    fn only_pid_probes_its_process_alone() {
        let me = std::process::id();
        assert_eq!(per_process(&Target::Pid(me)), Some(vec![me]));
        assert_eq!(per_process(&Target::Command), None);
        assert_eq!(per_process(&Target::AllJobs), None);
    }

    #[test]
    fn a_library_seen_through_a_vanished_process_is_skipped_a_lib_file_is_not() {
        assert!(gone_with_its_process(
            &lib("/proc/27212/map_files/7fda1b365000-7fda1b36b000"),
            &elf_error()
        ));
        assert!(!gone_with_its_process(
            &lib("/opt/cuda/lib64/libcuda.so.1"),
            &elf_error()
        ));
        let missing = AttachError::MissingProgram { name: "p".into() };
        assert!(!gone_with_its_process(
            &lib("/proc/1/root/usr/lib/libcuda.so.1"),
            &missing
        ));
    }
}

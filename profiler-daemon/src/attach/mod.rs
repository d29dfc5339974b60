//! Attach: probe list from export tables, probe-site placement, and every aya attach call.
//!
//! aya changes `UProbe::attach` between releases; this module is the only place that calls it.

pub mod duty;
mod learn;
pub mod multi;
pub mod placement;
#[cfg(test)]
mod placement_objdump;
pub mod rules;
pub mod scope;
mod version;

pub use version::library_version;

use crate::api::{ApiTable, Layer};
use crate::discovery::{CudaLibrary, elf};
use aya::Ebpf;
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
use aya::programs::{ProgramError, UProbe};
use placement::Placement;
use rules::{Prog, RET_PROGS, Rule};
use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;

/// Why attaching could not even start (a single symbol's failure is recorded, not raised).
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error(
        "the eBPF object has no program \"{name}\": the daemon and its eBPF object are out of step; rebuild with `cargo xtask build`"
    )]
    MissingProgram { name: String },
    #[error("could not load eBPF program \"{name}\" into the kernel: {source}")]
    Load {
        name: String,
        #[source]
        source: ProgramError,
    },
    #[error("could not read the export table of \"{path}\": {source}")]
    Elf {
        path: String,
        #[source]
        source: elf::ElfError,
    },
    #[error("could not load the probes: {detail}; {hint}")]
    Descriptors { detail: String, hint: &'static str },
    #[error("cannot attach any uprobe to \"{path}\": {detail}. {hint}")]
    Permission {
        path: String,
        detail: String,
        hint: &'static str,
    },
}

/// Why the injection library gets no probe on the perf-event path.
pub const NO_REF_CTR: &str = "GPU activity needs uprobe_multi links (Linux 6.6): the \
    injection library's probes must raise its semaphore (a uprobe reference counter), which \
    gpuprofd's perf-event uprobes cannot";

/// What to do when the kernel refused every probe of a library for want of privilege.
const HINT_PERF_EVENT: &str = "Without uprobe_multi links (Linux 6.6+) gpuprofd attaches \
    perf-event uprobes, and the kernel's uprobe PMU refuses those without CAP_SYS_ADMIN \
    (CAP_PERFMON is not enough): run gpuprofd as root with CAP_SYS_ADMIN. For the systemd \
    service, delete the least-privilege drop-in \
    /etc/systemd/system/gpuprofd.service.d/least-privilege.conf and run `systemctl \
    daemon-reload`; on Kubernetes, deploy deploy/kubernetes/kernel-before-6.6 (`gpuprofd \
    doctor` checks this machine)";
const HINT_REFUSED_ANYWAY: &str = "The kernel refused perf-event uprobes although gpuprofd has \
    CAP_SYS_ADMIN: a security policy (SELinux, AppArmor, kernel lockdown) or a sandbox forbids \
    them here (`gpuprofd doctor` checks this machine)";
const HINT_MULTI: &str = "uprobe_multi links need CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): \
    run gpuprofd as root, or give it those capabilities (`gpuprofd doctor` checks this machine)";

/// One symbol of one library, and what became of it.
#[derive(Clone, Debug)]
pub struct SymbolAttach {
    pub symbol: String,
    pub api: u16,
    pub prog: Prog,
    /// File offset of the symbol's entry.
    pub entry_offset: u64,
    pub placement: Placement,
    pub has_return: bool,
    /// `None` when attached; else why not (the other symbols are attached regardless).
    pub error: Option<ProbeError>,
}

/// Why one symbol got no probe.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "the kernel's uprobes refuse the entry instruction `{0}` (its prefix); this function \
         cannot be probed"
    )]
    RefusedInstruction(String),
    #[error("no program {0}")]
    NoProgram(&'static str),
    /// The injection library's probes need a reference counter, which only `uprobe_multi`
    /// links give (aya 0.14's perf-event uprobes take none).
    #[error("{NO_REF_CTR}")]
    NoRefCtr,
    /// The injection library's semaphore was not found: its probes would not enable it.
    #[error("no semaphore: {0}")]
    NoSemaphore(String),
    #[error("{prog}: {detail}")]
    NotUprobe { prog: &'static str, detail: String },
    /// The kernel refused the attach; `detail` is the error with its causes (the errno).
    #[error("{prog} at {offset:#x}: {detail}")]
    Attach {
        prog: &'static str,
        offset: u64,
        detail: String,
        /// Refused for want of privilege (EPERM or EACCES).
        denied: bool,
        /// The kernel's errno, where the attach call gave one.
        errno: Option<i32>,
    },
}

impl ProbeError {
    /// Whether the kernel refused for want of privilege.
    pub fn permission_denied(&self) -> bool {
        matches!(self, ProbeError::Attach { denied: true, .. })
    }

    /// The kernel's errno behind this failure, where known.
    pub fn errno(&self) -> Option<i32> {
        match self {
            ProbeError::Attach { errno, .. } => *errno,
            _ => None,
        }
    }

    fn attach(
        prog: &'static str,
        offset: u64,
        e: &dyn std::error::Error,
        errno: Option<i32>,
    ) -> ProbeError {
        let detail = error_chain(e);
        ProbeError::Attach {
            prog,
            offset,
            denied: crate::capture::says_permission_denied(&detail),
            detail,
            errno,
        }
    }
}

/// What was attached to one library file.
#[derive(Clone, Debug)]
pub struct LibraryAttach {
    pub lib: CudaLibrary,
    pub symbols: Vec<SymbolAttach>,
    /// The file's `NT_GNU_BUILD_ID` (none for a static runtime, whose file is the program's).
    pub build_id: Option<Vec<u8>>,
    /// Runtime launch entries left unprobed (one trap per launch): their launches are seen at
    /// the driver call they make.
    pub seen_at_driver: Vec<String>,
}

impl LibraryAttach {
    pub fn attached(&self) -> usize {
        self.symbols.iter().filter(|s| s.error.is_none()).count()
    }
    pub fn failed(&self) -> usize {
        self.symbols.len() - self.attached()
    }
}

/// How many probes a runtime's kernel launch passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LaunchTraps {
    /// The runtime's launch entry and the driver launch it calls are both probed (the driver
    /// one is not recorded again).
    #[default]
    Two,
    /// A shared runtime's launch entries are left unprobed: the launch is seen at the driver
    /// call it makes, reported under the runtime's API when the driver's caller is that
    /// runtime's code, named by the driver's handle. A runtime linked into a program keeps
    /// both: its code cannot be told from the program's by mapping.
    One,
}

/// Owns the API table and the record of what is attached where.
#[derive(Default)]
pub struct Attacher {
    api: ApiTable,
    launch_traps: LaunchTraps,
    /// Driver launch API → the runtime launch API it stands for when a runtime whose launch
    /// entries are left unprobed called it.
    via_runtime: HashMap<u32, u32>,
    /// Under a duty cycle: the launch probes' sites, linked only inside the windows.
    duty_sites: Option<duty::LaunchSites>,
    libraries: HashMap<(u64, u64), LibraryAttach>,
    loaded: bool,
    /// The uprobe programs loaded for `uprobe_multi` links, where the kernel has them.
    multi: Option<multi::MultiProgs>,
    /// `uprobe_multi` links made for every process (one per program, library and direction).
    multi_links: Vec<OwnedFd>,
    /// Each attached library's probe sites, for links made later for one process each.
    sites: HashMap<(u64, u64), Vec<Site>>,
    /// `Some` when only chosen processes are probed (see [`scope`]): their links.
    processes: Option<scope::Processes>,
    /// Each attached library's file, kept open while processes are chosen: links made later
    /// name it as `/proc/self/fd/N`, since the path it was found by may be gone by then (a
    /// process's `/proc/PID/map_files` entry ends with the mapping).
    files: HashMap<(u64, u64), std::fs::File>,
    /// A note for the user, once, when the probes went back to every process.
    note: Option<String>,
    /// Perf-event probe links made (entry and return probes), where `uprobe_multi` is missing.
    links: usize,
    /// Probes kept for a while only (see [`learn`]).
    learning: learn::Learning,
    /// Whether [`NO_REF_CTR`] was said.
    inject_noted: bool,
}

impl Attacher {
    pub fn new() -> Self {
        Self::default()
    }

    /// Launch probes kept for a duty cycle's windows instead of attached now (libraries
    /// attached from now on; only with `uprobe_multi` links, see [`Self::duty_possible`]).
    pub fn set_duty_sites(&mut self, sites: duty::LaunchSites) {
        self.duty_sites = Some(sites);
    }

    /// Whether the kernel gave `uprobe_multi` links (a duty cycle needs them: perf-event
    /// probes take about 0.1 s each to detach).
    pub fn duty_possible(&self) -> bool {
        self.multi.is_some()
    }

    /// One or two traps per runtime launch, for the libraries attached from now on.
    pub fn set_launch_traps(&mut self, t: LaunchTraps) {
        self.launch_traps = t;
    }

    pub fn api(&self) -> &ApiTable {
        &self.api
    }

    /// What a driver launch stands for when a runtime called it: driver API → runtime API, and
    /// the runtime files (device, inode) whose launch entries are left unprobed.
    pub fn seen_at_driver(&self) -> (HashMap<u32, u32>, Vec<(u64, u64)>) {
        let files = self
            .libraries
            .iter()
            .filter(|(_, l)| !l.seen_at_driver.is_empty())
            .map(|(k, _)| *k)
            .collect();
        (self.via_runtime.clone(), files)
    }

    pub fn libraries(&self) -> impl Iterator<Item = &LibraryAttach> {
        self.libraries.values()
    }

    /// The attached libraries as the report lists them, by path.
    pub fn library_list(&self) -> Vec<crate::api::LibraryReport> {
        let mut v: Vec<_> = self
            .libraries
            .values()
            .map(|la| crate::api::LibraryReport {
                path: la.lib.display.clone(),
                soname: la.lib.soname.clone(),
                layer: la.lib.layer.label().into(),
                version: if la.lib.static_runtime {
                    None
                } else {
                    library_version(&la.lib.open_path, &la.lib.display, &la.lib.soname)
                },
                build_id: la
                    .build_id
                    .as_ref()
                    .map(|b| b.iter().map(|x| format!("{x:02x}")).collect()),
                probes: la.attached() as u64,
            })
            .collect();
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    }

    /// What was attached to `lib`'s file, if it was.
    pub fn library(&self, lib: &CudaLibrary) -> Option<&LibraryAttach> {
        self.libraries.get(&(lib.dev, lib.ino))
    }

    pub fn is_attached(&self, lib: &CudaLibrary) -> bool {
        self.libraries.contains_key(&(lib.dev, lib.ino))
    }

    /// Loads every uprobe program into the kernel (once): for `uprobe_multi` links where the
    /// kernel has them (6.6+) unless `GPUPROFD_UPROBE_MULTI=0`, else into aya for one
    /// perf-event uprobe per symbol.
    pub fn load_programs(&mut self, ebpf: &mut Ebpf) -> Result<(), AttachError> {
        if self.loaded {
            return Ok(());
        }
        let names: Vec<&str> = Prog::ALL
            .iter()
            .map(|p| p.name())
            .chain(RET_PROGS)
            .collect();
        match multi::MultiProgs::load(ebpf, &names) {
            Ok(m) => {
                tracing::debug!("uprobe programs loaded for uprobe_multi links");
                self.multi = Some(m);
                self.loaded = true;
                return Ok(());
            }
            Err(e) if e.out_of_fds().is_some() => {
                let hint = e.out_of_fds().map_or("", crate::sys::rlimit::io_hint);
                return Err(AttachError::Descriptors {
                    detail: e.to_string(),
                    hint,
                });
            }
            // Expected before 6.6; on a kernel that has them it is a fault worth seeing (a
            // map the loader could not hand over once made every start fall back silently).
            Err(e) if crate::sys::kernel::running_at_least((6, 6)) => tracing::warn!(
                "uprobe_multi links failed on a kernel that has them ({e}): one perf-event \
                 uprobe per symbol instead (each probe hit costs a little more; stopping takes \
                 about 0.1 s per probe)"
            ),
            Err(e) => tracing::info!(
                "uprobe_multi links unavailable (kernels before 6.6 have none; {e}): one \
                 perf-event uprobe per symbol instead (stopping then takes about 0.1 s per \
                 probe)"
            ),
        }
        for name in names {
            let prog: &mut UProbe = ebpf
                .program_mut(name)
                .ok_or_else(|| AttachError::MissingProgram {
                    name: name.to_owned(),
                })?
                .try_into()
                .map_err(|source| AttachError::Load {
                    name: name.to_owned(),
                    source,
                })?;
            prog.load().map_err(|source| AttachError::Load {
                name: name.to_owned(),
                source,
            })?;
        }
        self.loaded = true;
        Ok(())
    }

    /// Attaches every hooked symbol `lib` exports, for all processes that map the file (now or
    /// later). A library already attached (same inode) is not attached again.
    pub fn attach_library(
        &mut self,
        ebpf: &mut Ebpf,
        lib: &CudaLibrary,
    ) -> Result<&LibraryAttach, AttachError> {
        let key = (lib.dev, lib.ino);
        if self.libraries.contains_key(&key) {
            return Ok(&self.libraries[&key]);
        }
        self.load_programs(ebpf)?;
        let elf_err = |source| AttachError::Elf {
            path: lib.display.clone(),
            source,
        };
        let (functions, build_id) = if lib.static_runtime {
            let f = elf::read_static_runtime(&lib.open_path, u64::MAX)
                .map_err(elf_err)?
                .unwrap_or_default();
            (f, None)
        } else {
            let info = elf::read_elf(&lib.open_path).map_err(elf_err)?;
            (info.exports, info.build_id)
        };
        let mut symbols = Vec::new();
        let mut sites = Vec::new();
        let mut learn_sites = Vec::new();
        let mut learn_names: Vec<String> = Vec::new();
        let mut seen_at_driver = Vec::new();
        // NCCL exports each function as `ncclX` and `pncclX` at one address: one probe there,
        // under the public name (`rules::nccl`).
        let mut nccl_sites: std::collections::HashSet<u64> = Default::default();
        // The injection library's probes count in its semaphore (the kernel raises it while
        // they are attached, which enables CUPTI in that process). Without the offset, or
        // without `uprobe_multi` links, none of its probes is attached.
        let (ref_ctr, no_semaphore) = if lib.layer == Layer::Inject {
            match self.inject_semaphore(lib) {
                Ok(o) => (o, None),
                Err(e) => (0, Some(ProbeError::NoSemaphore(e))),
            }
        } else {
            (0, None)
        };
        for f in &functions {
            let Some(rule) = rules::rule_for(lib.layer, &f.name) else {
                continue;
            };
            let name = if lib.layer == Layer::Nccl {
                if !nccl_sites.insert(f.file_offset) {
                    continue;
                }
                rules::nccl::public_name(&f.name)
            } else {
                f.name.as_str()
            };
            // Only where a driver is probed: without one, the runtime's entry is the launch's
            // only trap.
            if self.launch_traps == LaunchTraps::One
                && lib.layer == Layer::Runtime
                && !lib.static_runtime
                && self
                    .libraries
                    .values()
                    .any(|l| l.lib.layer == Layer::Driver && l.attached() > 0)
                && let Some(driver) = rules::driver_launch_of(&f.name)
            {
                let rt = self.api.intern(&f.name, Layer::Runtime);
                let drv = self.api.intern(&driver, Layer::Driver);
                self.via_runtime.insert(u32::from(drv), u32::from(rt));
                seen_at_driver.push(f.name.clone());
                continue;
            }
            if rules::learning_only(&f.name) {
                // Not one of the library's probes: linked for a while only, if at all (see
                // `learn`), and only where it can be let go.
                let placement = placement::choose(&f.entry_bytes, f.vaddr);
                if self.multi.is_some() && placement.reason != placement::Reason::Refused {
                    learn_sites.push(Site {
                        symbol: learn_names.len(),
                        rule,
                        api: self.api.intern(&f.name, lib.layer),
                        offset: f.file_offset + placement.offset,
                        ref_ctr: 0,
                    });
                    learn_names.push(f.name.clone());
                }
                continue;
            }
            let api = self.api.intern(name, lib.layer);
            let placement = placement::choose(&f.entry_bytes, f.vaddr);
            let error = if placement.reason == placement::Reason::Refused {
                Some(ProbeError::RefusedInstruction(
                    placement.site_insn.to_string(),
                ))
            } else if let Some(e) = &no_semaphore {
                Some(e.clone())
            } else if self.multi.is_some() {
                // Attached below, all of the library's symbols at once.
                sites.push(Site {
                    symbol: symbols.len(),
                    rule,
                    api,
                    offset: f.file_offset + placement.offset,
                    ref_ctr,
                });
                None
            } else if lib.layer == Layer::Inject {
                Some(ProbeError::NoRefCtr)
            } else {
                attach_one(
                    ebpf,
                    lib,
                    &rule,
                    api,
                    f.file_offset + placement.offset,
                    &mut self.links,
                )
                .err()
            };
            symbols.push(SymbolAttach {
                symbol: name.to_owned(),
                api,
                prog: rule.prog,
                entry_offset: f.file_offset,
                placement,
                has_return: rule.has_return(),
                error,
            });
        }
        if let (Some(m), Some(d)) = (&self.multi, &self.duty_sites) {
            sites = keep_for_windows(m, d, lib, sites);
        }
        if self.multi.is_some() {
            if self.processes.is_some()
                && let Ok(f) = std::fs::File::open(&lib.open_path)
            {
                self.files.insert(key, f);
            }
            for (i, e) in self.attach_sites(lib, &sites) {
                symbols[i].error = Some(e);
            }
            for (i, e) in self.attach_learning(lib, &learn_sites) {
                tracing::warn!(symbol = %learn_names[i], lib = %lib.display,
                    "learning probe not attached: {e}");
            }
            self.sites.insert(key, sites);
        }
        // Every probe the kernel was asked for refused for want of privilege: a daemon that
        // went on would report "ready" and capture nothing. The library is recorded all the
        // same (nothing is attached, so nothing is left behind), so that it is not tried again
        // at every rescan.
        let tried: Vec<&SymbolAttach> = symbols
            .iter()
            .filter(|s| s.placement.reason != placement::Reason::Refused)
            .collect();
        let denied = (!tried.is_empty()
            && tried
                .iter()
                .all(|s| s.error.as_ref().is_some_and(ProbeError::permission_denied)))
        .then(|| AttachError::Permission {
            path: lib.display.clone(),
            detail: tried[0]
                .error
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            hint: if self.multi.is_some() {
                HINT_MULTI
            } else if crate::sys::kernel::has_capability(crate::sys::kernel::CAP_SYS_ADMIN) {
                HINT_REFUSED_ANYWAY
            } else {
                HINT_PERF_EVENT
            },
        });
        self.libraries.insert(
            key,
            LibraryAttach {
                lib: lib.clone(),
                symbols,
                build_id,
                seen_at_driver,
            },
        );
        match denied {
            Some(e) => Err(e),
            None => Ok(&self.libraries[&key]),
        }
    }

    /// The file offset of the injection library's semaphore (see [`Site::ref_ctr`]); on the
    /// perf-event path, a note once (its probes are refused there, see [`NO_REF_CTR`]).
    fn inject_semaphore(&mut self, lib: &CudaLibrary) -> Result<u64, String> {
        if self.multi.is_none() && !self.inject_noted {
            self.inject_noted = true;
            tracing::warn!(library = %lib.display, "{NO_REF_CTR}");
            if self.note.is_none() {
                self.note = Some(NO_REF_CTR.to_owned());
            }
        }
        crate::discovery::inject::semaphore_offset(&lib.open_path).map_err(|e| {
            tracing::warn!(library = %lib.display, "no GPU activity: {e}");
            e.to_string()
        })
    }

    /// How many perf-event probe links are attached now (none where `uprobe_multi` links are
    /// used). They are released with the eBPF object, which is slow by nature: the kernel waits
    /// for RCU grace periods on every perf-event uprobe detach, under a global mutex
    /// (perf_event_detach_bpf_prog, perf_trace_event_unreg), about 0.1 s per link (measured:
    /// 150 links in 15 s on 6.18; releasing them from 64 threads at once took as long), so
    /// callers write their results first.
    pub fn link_count(&self) -> usize {
        self.links
    }

    /// Whether probes go through `uprobe_multi` links (else one perf event per probe).
    pub fn uses_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// Releases the `uprobe_multi` links, concurrently (each waits for its own grace periods;
    /// concurrent waits overlap). The perf-event links go with the eBPF object.
    pub fn release_links(&mut self) {
        let mut links = std::mem::take(&mut self.multi_links);
        if let Some(p) = &mut self.processes {
            links.extend(p.take_all());
        }
        links.extend(self.learning.take_all());
        multi::release(links);
    }
}

/// One symbol's probe site in a library: its index in the library's symbol list, its rule and
/// API, and the file offset of the probe.
#[derive(Clone, Copy, Debug)]
struct Site {
    symbol: usize,
    rule: Rule,
    api: u16,
    offset: u64,
    /// File offset of the `u16` the kernel counts this probe in (the injection library's
    /// semaphore), 0 for none.
    ref_ctr: u64,
}

/// Hands the launch probes' sites of `lib` to the duty cycle (linked in its windows only) and
/// returns the rest to attach now. A launch program whose sites cannot be kept (the file cannot
/// be opened again) is attached now, and says so.
fn keep_for_windows(
    m: &multi::MultiProgs,
    d: &duty::LaunchSites,
    lib: &CudaLibrary,
    sites: Vec<Site>,
) -> Vec<Site> {
    let is_launch = |r: &Rule| {
        matches!(
            r.prog,
            Prog::DrvLaunch | Prog::DrvLaunchEx | Prog::RtLaunch | Prog::RtLaunchEx
        )
    };
    let (launch, mut rest): (Vec<_>, Vec<_>) = sites.into_iter().partition(|s| is_launch(&s.rule));
    let mut groups: BTreeMap<&'static str, Vec<Site>> = BTreeMap::new();
    for s in launch {
        groups.entry(s.rule.prog.name()).or_default().push(s);
    }
    for (name, g) in groups {
        let kept = m.fd(name).map(|fd| {
            d.add(
                fd,
                &lib.open_path,
                g.iter().map(|s| s.offset).collect(),
                g.iter().map(|s| s.rule.packed_cookie(s.api)).collect(),
                lib.layer == Layer::Runtime,
            )
        });
        match kept {
            Some(Ok(())) => {}
            other => {
                tracing::warn!(
                    program = name,
                    library = %lib.display,
                    error = ?other.map(|r| r.err()),
                    "launch probes attached all the time: the duty cycle cannot keep them"
                );
                rest.extend(g);
            }
        }
    }
    rest
}

/// A site's symbol index, offset and packed cookie.
type SiteCookie = (usize, u64, u64);

/// Attaches `sites` with one `uprobe_multi` link per program and direction, for process `pid`
/// (0: every process); returns the symbols that failed, with why.
/// Return probes go first: a symbol whose return probe failed gets no entry probe, which would
/// leave state that nobody clears. When a link fails, its symbols are tried one by one so the
/// error names the symbol.
fn attach_multi(
    m: &multi::MultiProgs,
    path: &std::path::Path,
    sites: &[Site],
    pid: u32,
    links: &mut Vec<OwnedFd>,
) -> Vec<(usize, ProbeError)> {
    let mut failed: Vec<(usize, ProbeError)> = Vec::new();
    for ret in [true, false] {
        // (program name, reference counter) -> [(symbol index, offset, cookie)]
        let mut groups: BTreeMap<(&'static str, u64), Vec<SiteCookie>> = BTreeMap::new();
        for s in sites {
            if ret && !s.rule.has_return() || failed.iter().any(|(j, _)| *j == s.symbol) {
                continue;
            }
            let name = if ret {
                s.rule.prog.ret_name()
            } else {
                s.rule.prog.name()
            };
            groups.entry((name, s.ref_ctr)).or_default().push((
                s.symbol,
                s.offset,
                s.rule.packed_cookie(s.api),
            ));
        }
        for ((name, ref_ctr), g) in groups {
            let Some(fd) = m.fd(name) else {
                failed.extend(g.iter().map(|(i, ..)| (*i, ProbeError::NoProgram(name))));
                continue;
            };
            let offs: Vec<u64> = g.iter().map(|(_, o, _)| *o).collect();
            let cookies: Vec<u64> = g.iter().map(|(.., c)| *c).collect();
            match multi::attach_counted(fd, path, &offs, &cookies, ref_ctr, ret, pid) {
                Ok(link) => links.push(link),
                // The process is gone: one by one would only say so again for each symbol.
                Err(e) if pid != 0 && e.raw_os_error() == Some(libc::ESRCH) => {
                    let errno = e.raw_os_error();
                    failed.extend(
                        g.iter()
                            .map(|(i, off, _)| (*i, ProbeError::attach(name, *off, &e, errno))),
                    );
                }
                Err(e) => {
                    tracing::debug!(name, error = %e, "uprobe_multi link failed; one by one");
                    for (i, off, c) in g {
                        match multi::attach_counted(fd, path, &[off], &[c], ref_ctr, ret, pid) {
                            Ok(link) => links.push(link),
                            Err(e) => {
                                let errno = e.raw_os_error();
                                failed.push((i, ProbeError::attach(name, off, &e, errno)))
                            }
                        }
                    }
                }
            }
        }
    }
    failed
}

/// Attaches the entry program (and the return program when the rule has one) at `offset`.
/// (A link already made stays if a later one fails; it is released with the eBPF object.)
/// The placement guarantees the stack pointer at `offset` equals the entry's, so the return
/// probe finds the return address at `[rsp]` there too.
fn attach_one(
    ebpf: &mut Ebpf,
    lib: &CudaLibrary,
    rule: &Rule,
    api: u16,
    offset: u64,
    links: &mut usize,
) -> Result<(), ProbeError> {
    let cookie = rule.packed_cookie(api);
    // Return probe first: if it fails, no entry probe is left saving state nobody clears.
    let mut names = Vec::with_capacity(2);
    if rule.has_return() {
        names.push(rule.prog.ret_name());
    }
    names.push(rule.prog.name());
    for name in names {
        let prog: &mut UProbe = ebpf
            .program_mut(name)
            .ok_or(ProbeError::NoProgram(name))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| ProbeError::NotUprobe {
                prog: name,
                detail: e.to_string(),
            })?;
        // One transient perf_event_open failure was seen once in CI-like runs (errno not
        // recorded then); a failed attach has no side effect, so try again before giving up.
        let mut attempt = 0;
        loop {
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(offset),
                cookie: Some(cookie),
            };
            match prog.attach(point, &lib.open_path, UProbeScope::AllProcesses) {
                Ok(_) => break,
                Err(e) if attempt < 2 => {
                    attempt += 1;
                    tracing::debug!(name, offset, error = %error_chain(&e), "attach retry");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(ProbeError::attach(name, offset, &e, None)),
            }
        }
        *links += 1;
    }
    Ok(())
}

/// An error and its sources, so a failed `perf_event_open` says which errno it got.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Whether `layer` is the driver (used by the verbose listing).
pub fn layer_label(layer: Layer) -> &'static str {
    layer.label()
}

//! `uprobe_multi` links (Linux 6.6+): one link per program and library instead of one perf
//! event per symbol.
//!
//! Why: the kernel releases every perf-event uprobe with its own RCU grace periods, one after
//! another (about 0.1 s each on 6.18; 150 probes took 15 s to detach). A `uprobe_multi` link
//! unregisters all its offsets and then waits once, and separate links release concurrently.
//! The probes themselves run the same programs with the same `pt_regs` context and cookies.
//!
//! aya 0.14 loads uprobe programs without an expected attach type, and the kernel only accepts
//! programs loaded with `BPF_TRACE_UPROBE_MULTI` in such a link. So the uprobe programs are
//! loaded here instead: the same eBPF object, parsed by aya's object crate, with its map
//! references resolved to the maps aya already created (so both share every map), and loaded
//! with the `bpf()` system call. Kernels without `uprobe_multi` fail that load, and the caller
//! falls back to aya's perf-event attach.

use aya::Ebpf;
use aya::maps::Map;
use aya_obj::generated::{
    BPF_F_UPROBE_MULTI_RETURN, bpf_attach_type, bpf_attr, bpf_cmd, bpf_insn, bpf_map_type,
    bpf_prog_type,
};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Why `uprobe_multi` programs could not be loaded or attached (the perf-event path is taken
/// instead where there is one).
#[derive(Debug, thiserror::Error)]
pub enum MultiError {
    #[error("GPUPROFD_UPROBE_MULTI=0")]
    Disabled,
    #[error("parsing: {0}")]
    Parse(#[source] aya_obj::ParseError),
    #[error("map {0} was not created")]
    NoMap(String),
    #[error("program array {name}: {source}")]
    ProgramArray {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("map {0}: no fd for its type")]
    NoFd(String),
    #[error("relocating {what}: {source}")]
    Relocate {
        what: &'static str,
        #[source]
        source: aya_obj::relocation::EbpfRelocationError,
    },
    #[error("no program {0}")]
    NoProgram(String),
    #[error("loading {name}: {source}{}", verifier_tail(verifier))]
    Load {
        name: String,
        #[source]
        source: std::io::Error,
        /// The verifier log's last lines, when it refused the program.
        verifier: Option<String>,
    },
    #[error("attaching {name} to {}: {source}", path.display())]
    Link {
        name: String,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Uprobe {
        what: String,
        #[source]
        source: aya::programs::ProgramError,
    },
}

impl MultiError {
    /// The descriptor shortage behind this failure, if that is what it was: falling back to
    /// perf-event uprobes cannot help then (each needs a descriptor too).
    pub fn out_of_fds(&self) -> Option<&std::io::Error> {
        let io = match self {
            MultiError::ProgramArray { source, .. }
            | MultiError::Load { source, .. }
            | MultiError::Link { source, .. } => source,
            _ => return None,
        };
        matches!(io.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)).then_some(io)
    }
}

fn verifier_tail(v: &Option<String>) -> String {
    v.as_ref()
        .map(|t| format!("; verifier: {t}"))
        .unwrap_or_default()
}

/// Uprobe programs loaded for `uprobe_multi` links, by program name.
pub struct MultiProgs {
    progs: HashMap<String, OwnedFd>,
    /// Their own empty program arrays (see [`empty_prog_array`]).
    _arrays: Vec<OwnedFd>,
}

impl MultiProgs {
    /// Loads the programs `names` of the embedded eBPF object (the one `ebpf` was loaded from),
    /// sharing `ebpf`'s maps. Fails on a kernel without `uprobe_multi`, when
    /// `GPUPROFD_UPROBE_MULTI=0` asks for perf-event uprobes, or if the object and `ebpf`
    /// disagree.
    pub fn load(ebpf: &Ebpf, names: &[&str]) -> Result<Self, MultiError> {
        if std::env::var("GPUPROFD_UPROBE_MULTI").as_deref() == Ok("0") {
            return Err(MultiError::Disabled);
        }
        let mut obj =
            aya_obj::Object::parse(crate::capture::object()).map_err(MultiError::Parse)?;
        let mut fds: Vec<(String, i32)> = Vec::new();
        let mut arrays = Vec::new();
        for name in obj.maps.keys() {
            let map = ebpf
                .map(name)
                .ok_or_else(|| MultiError::NoMap(name.clone()))?;
            let fd = match map {
                // The always-empty arrays that keep the programs off a private stack: the
                // kernel ties a program array to the attach type of its first program (6.17+),
                // and aya's programs have none, so these programs get arrays of their own.
                Map::ProgramArray(_) => {
                    let a = empty_prog_array().map_err(|source| MultiError::ProgramArray {
                        name: name.clone(),
                        source,
                    })?;
                    let fd = a.as_raw_fd();
                    arrays.push(a);
                    fd
                }
                m => map_fd(m).ok_or_else(|| MultiError::NoFd(name.clone()))?,
            };
            fds.push((name.clone(), fd));
        }
        let text: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
        let defs = obj.maps.clone();
        obj.relocate_maps(fds.iter().map(|(n, fd)| (n.as_str(), *fd, &defs[n])), &text)
            .map_err(|source| MultiError::Relocate {
                what: "maps",
                source,
            })?;
        obj.relocate_calls(&text)
            .map_err(|source| MultiError::Relocate {
                what: "calls",
                source,
            })?;
        let mut progs = HashMap::new();
        for &name in names {
            let p = obj
                .programs
                .get(name)
                .ok_or_else(|| MultiError::NoProgram(name.into()))?;
            let f = &obj.functions[&p.function_key()];
            let fd = prog_load(name, &f.instructions, &p.license)?;
            progs.insert(name.to_owned(), fd);
        }
        Ok(Self {
            progs,
            _arrays: arrays,
        })
    }

    pub fn fd(&self, name: &str) -> Option<BorrowedFd<'_>> {
        self.progs.get(name).map(|f| f.as_fd())
    }
}

/// The fd of the map types gpuprofd's object uses.
fn map_fd(m: &Map) -> Option<i32> {
    let d = match m {
        Map::Array(d)
        | Map::PerCpuArray(d)
        | Map::HashMap(d)
        | Map::LruHashMap(d)
        | Map::PerCpuHashMap(d)
        | Map::RingBuf(d)
        // Task-local storage (PEND_RT, PEND_DRV), which aya creates but has no type for.
        | Map::Unsupported(d) => d,
        _ => return None,
    };
    Some(d.fd().as_fd().as_raw_fd())
}

/// A new, empty `BPF_MAP_TYPE_PROG_ARRAY` of one slot.
fn empty_prog_array() -> std::io::Result<OwnedFd> {
    // SAFETY: bpf_attr is plain data; all zero is its documented empty state.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the union member BPF_MAP_CREATE reads.
    let m = unsafe { &mut attr.__bindgen_anon_1 };
    m.map_type = bpf_map_type::BPF_MAP_TYPE_PROG_ARRAY as u32;
    m.key_size = 4;
    m.value_size = 4;
    m.max_entries = 1;
    sys_bpf(bpf_cmd::BPF_MAP_CREATE, &mut attr)
}

fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is a zero-initialised bpf_attr whose pointers outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new fd that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

fn prog_load(name: &str, insns: &[bpf_insn], license: &CString) -> Result<OwnedFd, MultiError> {
    let mut log = Vec::new();
    let attempt = |log: &mut Vec<u8>| {
        // SAFETY: bpf_attr is plain data; all zero is its documented empty state.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // SAFETY: writing the union member BPF_PROG_LOAD reads.
        let u = unsafe { &mut attr.__bindgen_anon_3 };
        u.prog_type = bpf_prog_type::BPF_PROG_TYPE_KPROBE as u32;
        u.expected_attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
        u.insn_cnt = insns.len() as u32;
        u.insns = insns.as_ptr() as u64;
        u.license = license.as_ptr() as u64;
        let n = name.len().min(u.prog_name.len() - 1);
        for (d, s) in u.prog_name.iter_mut().zip(&name.as_bytes()[..n]) {
            *d = *s as libc::c_char;
        }
        if !log.is_empty() {
            u.log_level = 1;
            u.log_size = log.len() as u32;
            u.log_buf = log.as_mut_ptr() as u64;
        }
        sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr)
    };
    let failed = |source, verifier| MultiError::Load {
        name: name.into(),
        source,
        verifier,
    };
    match attempt(&mut log) {
        // The verifier refused it (EINVAL is also what a kernel without uprobe_multi answers):
        // load again with its log, and keep the log's last lines.
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            log = vec![0u8; 1 << 20];
            let e = match attempt(&mut log) {
                Ok(fd) => return Ok(fd),
                Err(e) => e,
            };
            let text = String::from_utf8_lossy(&log);
            let lines: Vec<&str> = text.trim_end_matches('\0').lines().collect();
            let tail = lines[lines.len().saturating_sub(8)..].join("\n");
            Err(failed(e, Some(tail)))
        }
        r => r.map_err(|e| failed(e, None)),
    }
}

/// One link: `prog` at each file offset of `path` (with its cookie), at entry or, with `ret`,
/// at return. With `pid` 0, every process that maps the file hits it; else only process `pid`
/// does (see [`super::scope`]).
pub fn attach(
    prog: BorrowedFd<'_>,
    path: &Path,
    offsets: &[u64],
    cookies: &[u64],
    ret: bool,
    pid: u32,
) -> std::io::Result<OwnedFd> {
    attach_counted(prog, path, offsets, cookies, 0, ret, pid)
}

/// [`attach`], with every probe counted in the `u16` at file offset `ref_ctr` of `path` (0:
/// none): the kernel's uprobe reference counter (`ref_ctr_offsets`, 6.6's `uprobe_multi`
/// takes one per offset). While the link has a probe in a process, the kernel keeps that
/// process's counter above zero: the injection library's semaphore (`profiler_common::gpu`).
pub fn attach_counted(
    prog: BorrowedFd<'_>,
    path: &Path,
    offsets: &[u64],
    cookies: &[u64],
    ref_ctr: u64,
    ret: bool,
    pid: u32,
) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    assert_eq!(offsets.len(), cookies.len());
    let ref_ctrs = vec![ref_ctr; offsets.len()];
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: as in `prog_load`.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the union member BPF_LINK_CREATE reads.
    let l = unsafe { &mut attr.link_create };
    l.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
    l.attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
    // SAFETY: writing the union member for this attach type.
    let m = unsafe { &mut l.__bindgen_anon_3.uprobe_multi };
    m.path = cpath.as_ptr() as u64;
    m.offsets = offsets.as_ptr() as u64;
    m.cookies = cookies.as_ptr() as u64;
    if ref_ctr != 0 {
        m.ref_ctr_offsets = ref_ctrs.as_ptr() as u64;
    }
    m.cnt = offsets.len() as u32;
    m.flags = if ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 };
    m.pid = pid;
    sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)
}

/// Closes `links` from several threads at once: each close waits for its own grace periods,
/// and concurrent waits overlap.
pub fn release(links: Vec<OwnedFd>) {
    if links.len() < 2 {
        return;
    }
    let per = links.len().div_ceil(16);
    let mut it = links.into_iter();
    std::thread::scope(|s| {
        loop {
            let chunk: Vec<OwnedFd> = it.by_ref().take(per).collect();
            if chunk.is_empty() {
                break;
            }
            s.spawn(move || drop(chunk));
        }
    });
}

/// One program's probes at `offsets` of `path`, attached as the capture attaches them (a
/// `uprobe_multi` link where it can, else a perf-event uprobe each, owned by `ebpf`); the
/// benchmark's floor and doctor's round trip. Detached when this and `ebpf` are dropped.
/// [`OneProgram::how`] for a `uprobe_multi` link.
pub const MULTI_HOW: &str = "uprobe_multi link";

pub struct OneProgram {
    _link: Option<(MultiProgs, OwnedFd)>,
    /// "uprobe_multi link" or "perf-event uprobes".
    pub how: &'static str,
}

pub fn attach_program(
    ebpf: &mut Ebpf,
    name: &str,
    path: &Path,
    offsets: &[u64],
    cookie: u64,
) -> Result<OneProgram, MultiError> {
    if let Ok(m) = MultiProgs::load(ebpf, &[name]) {
        let fd = m
            .fd(name)
            .ok_or_else(|| MultiError::NoProgram(name.into()))?;
        let link = attach(fd, path, offsets, &vec![cookie; offsets.len()], false, 0).map_err(
            |source| MultiError::Link {
                name: name.into(),
                path: path.into(),
                source,
            },
        )?;
        return Ok(OneProgram {
            _link: Some((m, link)),
            how: MULTI_HOW,
        });
    }
    let prog: &mut aya::programs::UProbe = ebpf
        .program_mut(name)
        .ok_or_else(|| MultiError::NoProgram(name.into()))?
        .try_into()
        .map_err(|source| MultiError::Uprobe {
            what: name.into(),
            source,
        })?;
    prog.load().map_err(|source| MultiError::Uprobe {
        what: format!("loading {name}"),
        source,
    })?;
    for off in offsets {
        prog.attach(
            aya::programs::uprobe::UProbeAttachPoint {
                location: aya::programs::uprobe::UProbeAttachLocation::AbsoluteOffset(*off),
                cookie: Some(cookie),
            },
            path,
            aya::programs::uprobe::UProbeScope::AllProcesses,
        )
        .map_err(|source| MultiError::Uprobe {
            what: format!("attaching a uprobe to {}+{off:#x}", path.display()),
            source,
        })?;
    }
    Ok(OneProgram {
        _link: None,
        how: "perf-event uprobes",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(errno: i32) -> MultiError {
        MultiError::Load {
            name: "name_ret".into(),
            source: std::io::Error::from_raw_os_error(errno),
            verifier: None,
        }
    }

    #[test]
    fn only_a_descriptor_shortage_counts_as_out_of_fds() {
        assert_eq!(
            load(libc::EMFILE)
                .out_of_fds()
                .and_then(|e| e.raw_os_error()),
            Some(libc::EMFILE)
        );
        assert!(load(libc::ENFILE).out_of_fds().is_some());
        assert!(load(libc::EPERM).out_of_fds().is_none());
        assert!(MultiError::Disabled.out_of_fds().is_none());
    }
}

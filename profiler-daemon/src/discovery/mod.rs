//! Which processes map which CUDA libraries: procfs scanning and ELF identity (SONAME).

pub mod elf;
pub mod inject;
pub mod nccl;

use crate::api::Layer;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A CUDA library file, identified by its SONAME and by the inode the kernel attaches to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaLibrary {
    /// A path this daemon can open (through `/proc/PID/root` for files seen in a process).
    pub open_path: PathBuf,
    /// The path as the process sees it (for messages).
    pub display: String,
    pub soname: String,
    pub layer: Layer,
    pub dev: u64,
    pub ino: u64,
    /// A CUDA runtime linked statically into this executable or library (its entry points come
    /// from the symbol tables, not the export table).
    pub static_runtime: bool,
}

/// One line of `/proc/PID/maps` that maps a file with execute permission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecMapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    /// The mapped file's device (`major:minor` packed as `st_dev` is) and inode, as the kernel
    /// reports them: what any path later opened for this mapping must still be.
    pub dev: u64,
    pub inode: u64,
    pub path: String,
}

/// Parses `/proc/PID/maps` text; keeps executable file mappings (bounded: 1M lines).
pub fn parse_maps(text: &str) -> Vec<ExecMapping> {
    let mut out = Vec::new();
    for line in text.lines().take(1 << 20) {
        let mut it = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off), Some(dev), Some(ino)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path = it.next().unwrap_or("").trim_start();
        if !perms.contains('x') || !path.starts_with('/') {
            continue;
        }
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset)) = (
            u64::from_str_radix(s, 16),
            u64::from_str_radix(e, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        let dev = dev
            .split_once(':')
            .and_then(|(ma, mi)| {
                Some(libc::makedev(
                    u32::from_str_radix(ma, 16).ok()?,
                    u32::from_str_radix(mi, 16).ok()?,
                ))
            })
            .unwrap_or(0);
        // " (deleted)" marks a file replaced on disk: the mapping still holds the old inode.
        out.push(ExecMapping {
            start,
            end,
            offset,
            dev,
            inode: ino.parse().unwrap_or(0),
            path: path.to_owned(),
        });
    }
    out
}

/// Does this file name look like a CUDA driver or runtime? A cheap pre-filter before the
/// ELF's SONAME decides: `libcuda.so*`, `libcudart*.so*` (wheels vendor hashed copies such as
/// `libcudart.3eda8113.so.13` or `libcudart-80664282.so.10.2`).
pub fn looks_like_cuda(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let name = name.strip_suffix(" (deleted)").unwrap_or(name);
    (name.starts_with("libcuda.so")
        || name.starts_with("libcudart")
        || nccl::looks_like(name)
        || inject::looks_like(name))
        && name.contains(".so")
}

/// The layer a SONAME belongs to: `libcuda.so.1` is the driver, `libcudart.so.N` a runtime.
pub fn layer_of_soname(soname: &str) -> Option<Layer> {
    if soname == "libcuda.so.1" {
        Some(Layer::Driver)
    } else if soname.starts_with("libcudart.so.") {
        Some(Layer::Runtime)
    } else if nccl::is_soname(soname) {
        Some(Layer::Nccl)
    } else if inject::is_soname(soname) {
        Some(Layer::Inject)
    } else {
        None
    }
}

/// Identifies one file: SONAME and inode. `None` when it is not a CUDA driver/runtime.
pub fn identify(open_path: &Path, display: &str) -> Option<CudaLibrary> {
    let md = fs::metadata(open_path).ok()?;
    let info = elf::read_elf(open_path).ok()?;
    let soname = info.soname?;
    let layer = layer_of_soname(&soname)?;
    Some(CudaLibrary {
        open_path: open_path.to_owned(),
        display: display.to_owned(),
        soname,
        layer,
        dev: md.dev(),
        ino: md.ino(),
        static_runtime: false,
    })
}

/// A path to the very file a mapping of `tgid` maps: `/proc/PID/map_files/START-END`, a magic
/// link to the mapped inode. Unlike the path in the maps line opened through
/// `/proc/PID/root`, it cannot be redirected by a symlink a container plants on the way (an
/// absolute link would otherwise resolve against the daemon's root, on the host); it works for
/// deleted files, and it needs no mount namespace games. The attach (perf_event_open) follows
/// it to the same inode.
pub fn mapped_file(tgid: u32, m: &ExecMapping) -> PathBuf {
    PathBuf::from(format!("/proc/{tgid}/map_files/{:x}-{:x}", m.start, m.end))
}

/// Why `/proc/PID/map_files` links cannot be followed here.
#[derive(Debug, thiserror::Error)]
pub enum MapFilesError {
    #[error("/proc/self/maps: {0}")]
    OwnMaps(#[source] std::io::Error),
    #[error("no file mapping of its own to try")]
    NothingMapped,
    #[error("{}: {source}", link.display())]
    Link {
        link: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Whether this process can follow `/proc/PID/map_files` links ([`mapped_file`]): the kernel
/// asks for CAP_CHECKPOINT_RESTORE (Linux 5.9+) or CAP_SYS_ADMIN, whatever the target. Without,
/// the libraries running processes map cannot be found or opened by their inode. `Err`: why not.
pub fn map_files_followable() -> Result<(), MapFilesError> {
    let text = fs::read_to_string("/proc/self/maps").map_err(MapFilesError::OwnMaps)?;
    let m = parse_maps(&text)
        .into_iter()
        .find(|m| m.inode != 0)
        .ok_or(MapFilesError::NothingMapped)?;
    let link = mapped_file(std::process::id(), &m);
    fs::metadata(&link)
        .map(|_| ())
        .map_err(|source| MapFilesError::Link { link, source })
}

/// What to tell a user whose daemon cannot follow map_files links (see [`map_files_followable`]).
pub const MAP_FILES_HINT: &str = "following /proc/PID/map_files needs CAP_CHECKPOINT_RESTORE or \
    CAP_SYS_ADMIN; without either, the CUDA libraries that running processes load are not found \
    (only --lib paths and the dynamic linker's cache are attached)";

/// A file a process maps, opened for reading without trusting anything the process controls.
/// `path` names exactly the mapped inode for as long as the value lives.
#[derive(Debug)]
pub struct MappedFile {
    pub path: PathBuf,
    /// Keeps `/proc/self/fd/N` valid when the file was opened rather than named.
    _held: Option<fs::File>,
}

/// Opens the file behind mapping `m` of `tgid`, in this order:
/// 1. `/proc/PID/map_files/START-END` ([`mapped_file`]): the mapped inode itself; no path is
///    walked, so nothing the process planted can redirect it;
/// 2. the path in the maps line inside the process's root with `openat2(RESOLVE_IN_ROOT |
///    RESOLVE_NO_MAGICLINKS)`: a symlink planted in a container resolves inside that
///    container, never to a host file (`/proc/PID/root` + path would follow an absolute link
///    out to the daemon's root);
/// 3. the same path in the daemon's own root, only if it is still the very inode mapped
///    (same device and inode) — for a host process that has exited by the time its stacks are
///    named.
///
/// `None` when none applies: the caller names the frame `module+0xOFFSET`.
pub fn open_mapping(tgid: u32, m: &ExecMapping) -> Option<MappedFile> {
    use std::os::unix::fs::MetadataExt;
    let direct = mapped_file(tgid, m);
    if fs::metadata(&direct).is_ok() {
        return Some(MappedFile {
            path: direct,
            _held: None,
        });
    }
    let clean = m.path.strip_suffix(" (deleted)").unwrap_or(&m.path);
    if let Ok(f) = open_in_root(tgid, clean) {
        return Some(MappedFile {
            path: fd_path(&f),
            _held: Some(f),
        });
    }
    let md = fs::metadata(clean).ok()?;
    (m.inode != 0 && md.ino() == m.inode && md.dev() == m.dev).then(|| MappedFile {
        path: PathBuf::from(clean),
        _held: None,
    })
}

/// `/proc/self/fd/N` for an open file: a magic link to its inode.
fn fd_path(f: &fs::File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// Opens `path` (absolute, as `tgid` sees it) read-only inside `tgid`'s root directory: every
/// symlink and `..` on the way resolves within that root (`RESOLVE_IN_ROOT`) and no magic link
/// is followed.
pub fn open_in_root(tgid: u32, path: &str) -> std::io::Result<fs::File> {
    let root = fs::File::open(format!("/proc/{tgid}/root"))?;
    open_beneath(&root, path)
}

/// `openat2(dir, path, O_RDONLY|O_CLOEXEC|O_NOCTTY, RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS)`.
pub fn open_beneath(dir: &fs::File, path: &str) -> std::io::Result<fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let c = std::ffi::CString::new(path.trim_start_matches('/'))
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: open_how is plain old data; zeroed is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: valid NUL-terminated path, a live directory fd, and `how` with its true size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { fs::File::from_raw_fd(fd as i32) })
}

/// [`identify`] for any mapped file: files named like CUDA libraries are parsed in full; any
/// other file only when its SONAME (read cheaply, [`elf::read_soname`]) is a driver's or a
/// runtime's.
pub fn identify_by_soname(open_path: &Path, display: &str) -> Option<CudaLibrary> {
    if looks_like_cuda(display)
        || elf::read_soname(open_path)
            .and_then(|s| layer_of_soname(&s))
            .is_some()
    {
        identify(open_path, display)
    } else {
        None
    }
}

/// Files bigger than this are not searched for a statically linked runtime (the main
/// executable always is, up to [`MAX_STATIC_EXE_BYTES`]).
pub const MAX_STATIC_LIB_BYTES: u64 = 64 << 20;
/// The main executable is searched up to this size.
pub const MAX_STATIC_EXE_BYTES: u64 = 512 << 20;

/// A CUDA runtime linked statically into `open_path` (see [`elf::read_static_runtime`]).
pub fn identify_static(open_path: &Path, display: &str, max_bytes: u64) -> Option<CudaLibrary> {
    let md = fs::metadata(open_path).ok()?;
    elf::read_static_runtime(open_path, max_bytes).ok()??;
    Some(linked_into(
        open_path,
        display,
        &md,
        "static libcudart",
        Layer::Runtime,
        true,
    ))
}

/// A CUDA library linked into the file at `open_path` (a program or a framework's library):
/// named "`what` in FILE", since it has no SONAME of its own.
pub(crate) fn linked_into(
    open_path: &Path,
    display: &str,
    md: &fs::Metadata,
    what: &str,
    layer: Layer,
    static_runtime: bool,
) -> CudaLibrary {
    let name = Path::new(display)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| display.to_owned());
    CudaLibrary {
        open_path: open_path.to_owned(),
        display: display.to_owned(),
        soname: format!("{what} in {name}"),
        layer,
        dev: md.dev(),
        ino: md.ino(),
        static_runtime,
    }
}

/// Every process id in `/proc`.
pub fn all_tgids() -> Vec<u32> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Does process `tgid` exist?
pub fn process_exists(tgid: u32) -> bool {
    Path::new(&format!("/proc/{tgid}")).exists()
}

/// Scans processes' maps for CUDA libraries, remembering files already classified.
#[derive(Default)]
pub struct Scanner {
    /// (dev, ino) → library (Some) or "checked, not CUDA" (None).
    seen: HashMap<(u64, u64), Option<CudaLibrary>>,
    /// (dev, ino) → static runtime inside (Some) or "checked, none" (None).
    statics: HashMap<(u64, u64), Option<CudaLibrary>>,
    /// Processes known to map a CUDA library.
    cuda_tgids: HashSet<u32>,
}

impl Scanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Libraries mapped by `tgid` (all of them, known before or not).
    pub fn scan_process(&mut self, tgid: u32) -> Vec<CudaLibrary> {
        let Ok(text) = fs::read_to_string(format!("/proc/{tgid}/maps")) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut done: HashSet<&str> = HashSet::new();
        let maps = parse_maps(&text);
        for m in &maps {
            if !done.insert(m.path.as_str()) || m.path.starts_with('[') {
                continue;
            }
            let clean = m.path.strip_suffix(" (deleted)").unwrap_or(&m.path);
            let open_path = mapped_file(tgid, m);
            let Ok(md) = fs::metadata(&open_path) else {
                continue;
            };
            let key = (md.dev(), md.ino());
            // By identity, not by name: a renamed or vendored copy is found by its SONAME
            // (one cheap read per file, remembered by inode).
            let lib = self
                .seen
                .entry(key)
                .or_insert_with(|| identify_by_soname(&open_path, clean))
                .clone();
            if let Some(lib) = lib {
                found.push(lib);
            }
        }
        // A process that maps the driver may carry the runtime inside its executable or one
        // of its libraries (nvcc links libcudart statically by default): look there too, each
        // file once. Only processes that use CUDA are searched, so the cost stays bounded.
        if found.iter().any(|l| l.layer == Layer::Driver) {
            let exe = fs::read_link(format!("/proc/{tgid}/exe"))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut done_static: HashSet<&str> = HashSet::new();
            for m in &maps {
                if looks_like_cuda(&m.path) || !done_static.insert(m.path.as_str()) {
                    continue;
                }
                let clean = m.path.strip_suffix(" (deleted)").unwrap_or(&m.path);
                let open_path = mapped_file(tgid, m);
                let Ok(md) = fs::metadata(&open_path) else {
                    continue;
                };
                let limit = if clean == exe {
                    MAX_STATIC_EXE_BYTES
                } else {
                    MAX_STATIC_LIB_BYTES
                };
                let lib = self
                    .statics
                    .entry((md.dev(), md.ino()))
                    .or_insert_with(|| {
                        identify_static(&open_path, clean, limit)
                            .or_else(|| nccl::identify_linked_in(&open_path, clean, limit))
                    })
                    .clone();
                if let Some(lib) = lib {
                    found.push(lib);
                }
            }
        }
        if !found.is_empty() {
            self.cuda_tgids.insert(tgid);
        }
        found
    }

    /// Libraries in every process, each file once.
    pub fn scan_all(&mut self) -> Vec<CudaLibrary> {
        let mut libs: Vec<CudaLibrary> = Vec::new();
        for tgid in all_tgids() {
            for lib in self.scan_process(tgid) {
                if !libs.iter().any(|l| l.dev == lib.dev && l.ino == lib.ino) {
                    libs.push(lib);
                }
            }
        }
        libs
    }

    /// A library file given on the command line or found on the system (not in a process).
    pub fn add_file(&mut self, path: &Path) -> Option<CudaLibrary> {
        let md = fs::metadata(path).ok()?;
        let key = (md.dev(), md.ino());
        let disp = path.display().to_string();
        self.seen
            .entry(key)
            .or_insert_with(|| identify(path, &disp))
            .clone()
    }

    /// Whether the executable mapping `[addr, addr+len)` of `tgid` may be a CUDA library not
    /// known yet, judged from the mapped file itself (`/proc/PID/map_files`): by name first,
    /// else by its SONAME, each file once. A mapping that cannot be read (merged with a
    /// neighbour, or the process is gone) answers yes: only a scan of its maps can tell.
    pub fn mapping_may_be_cuda(&mut self, tgid: u32, addr: u64, len: u64) -> bool {
        let end = addr.saturating_add(len.div_ceil(4096) * 4096);
        let link = PathBuf::from(format!("/proc/{tgid}/map_files/{addr:x}-{end:x}"));
        let Ok(target) = fs::read_link(&link) else {
            return true;
        };
        let name = target.to_string_lossy();
        if looks_like_cuda(&name) {
            return true;
        }
        let Ok(md) = fs::metadata(&link) else {
            return true;
        };
        if let Some(known) = self.seen.get(&(md.dev(), md.ino())) {
            return known.is_some();
        }
        elf::read_soname(&link)
            .and_then(|s| layer_of_soname(&s))
            .is_some()
            || self.cuda_tgids.contains(&tgid)
    }

    /// The processes found mapping a CUDA library (and not forgotten since).
    pub fn cuda_processes(&self) -> impl Iterator<Item = u32> + '_ {
        self.cuda_tgids.iter().copied()
    }

    pub fn is_cuda_process(&self, tgid: u32) -> bool {
        self.cuda_tgids.contains(&tgid)
    }

    /// `tgid`'s process ended and was dropped: its pid may come back as another process.
    pub fn forget(&mut self, tgid: u32) {
        self.cuda_tgids.remove(&tgid);
    }
}

/// CUDA libraries installed on the system (the dynamic linker's cache and the usual
/// directories), so that processes which load CUDA later are seen from their first call.
pub fn system_libraries() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(o) = std::process::Command::new("ldconfig").arg("-p").output() {
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            if let Some((lhs, path)) = line.split_once("=>") {
                let name = lhs.split_whitespace().next().unwrap_or("");
                if (name == "libcuda.so.1"
                    || name.starts_with("libcudart.so.")
                    || nccl::is_soname(name))
                    && lhs.contains("x86-64")
                {
                    out.push(PathBuf::from(path.trim()));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Expands `--lib` arguments: a file is itself; a directory gives the CUDA libraries in it.
pub fn expand_lib_args(args: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for a in args {
        if a.is_dir() {
            if let Ok(rd) = fs::read_dir(a) {
                let mut v: Vec<PathBuf> = rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file() && looks_like_cuda(&p.to_string_lossy()))
                    .collect();
                v.sort();
                out.extend(v);
            }
        } else {
            out.push(a.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keeps_exec_file_mappings_only() {
        let text = "\
5581c0a00000-5581c0a02000 r--p 00000000 fd:01 1234 /usr/bin/python3.11
5581c0a02000-5581c0a90000 r-xp 00002000 fd:01 1234 /usr/bin/python3.11
7f1c00000000-7f1c00021000 rw-p 00000000 00:00 0
7f1c10000000-7f1c12000000 r-xp 00120000 fd:01 99 /usr/lib/x86_64-linux-gnu/libcuda.so.535.309.01
7f1c20000000-7f1c20001000 r-xp 00000000 fd:01 98 /opt/venv/nvidia/cuda_runtime/lib/libcudart.so.12 (deleted)
7ffd1000-7ffd2000 r-xp 00000000 00:00 0 [vdso]
garbage line
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].start, 0x7f1c10000000);
        assert_eq!(m[1].offset, 0x120000);
        assert_eq!(m[1].path, "/usr/lib/x86_64-linux-gnu/libcuda.so.535.309.01");
        assert_eq!(
            m[2].path,
            "/opt/venv/nvidia/cuda_runtime/lib/libcudart.so.12 (deleted)"
        );
        assert_eq!((m[0].dev, m[0].inode), (libc::makedev(0xfd, 1), 1234));
        assert_eq!(m[2].inode, 98);
    }

    #[test]
    fn a_planted_symlink_resolves_inside_the_root_never_to_the_host() {
        use std::os::unix::fs::{MetadataExt, symlink};
        let base = std::env::temp_dir().join(format!("gpuprofd-inroot-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let root = base.join("root");
        fs::create_dir_all(root.join("lib")).unwrap();
        let host = base.join("host-secret");
        fs::write(&host, b"host").unwrap();
        fs::write(root.join("lib/real.so"), b"inside").unwrap();
        // Absolute and relative escapes, as a container could plant them.
        symlink(&host, root.join("lib/abs.so")).unwrap();
        symlink(
            "../../../../../../../../host-secret",
            root.join("lib/rel.so"),
        )
        .unwrap();
        symlink("/proc/self/root/etc/hostname", root.join("lib/magic.so")).unwrap();
        let dir = fs::File::open(&root).unwrap();
        let read = |p: &str| {
            open_beneath(&dir, p).map(|mut f| {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut f, &mut s).unwrap();
                s
            })
        };
        assert_eq!(read("/lib/real.so").unwrap(), "inside");
        assert_eq!(
            read("/lib/abs.so").unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        // `..` stops at the root: the link lands on ROOT/host-secret, which is absent...
        assert_eq!(
            read("/lib/rel.so").unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        // ...and once the container has such a file, that is what is read, not the host's.
        fs::write(root.join("host-secret"), b"container's own").unwrap();
        assert_eq!(read("/lib/rel.so").unwrap(), "container's own");
        fs::create_dir_all(root.join(host.parent().unwrap().strip_prefix("/").unwrap())).unwrap();
        fs::write(root.join(host.strip_prefix("/").unwrap()), b"also inside").unwrap();
        assert_eq!(read("/lib/abs.so").unwrap(), "also inside");
        assert!(
            read("/lib/magic.so").is_err(),
            "a magic link is never followed"
        );

        // The host-root fallback of open_mapping takes a path only while it is the mapped inode.
        let md = fs::metadata(root.join("lib/real.so")).unwrap();
        let m = |inode| ExecMapping {
            start: 0,
            end: 0x1000,
            offset: 0,
            dev: md.dev(),
            inode,
            path: root.join("lib/real.so").display().to_string(),
        };
        let gone = u32::MAX; // no such process: map_files and its root are absent
        assert!(open_mapping(gone, &m(md.ino())).is_some());
        assert!(open_mapping(gone, &m(md.ino() + 1)).is_none());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn name_prefilter() {
        assert!(looks_like_cuda("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
        assert!(looks_like_cuda("/x/libcuda.so.535.309.01"));
        assert!(looks_like_cuda(
            "/site/torchvision.libs/libcudart.3eda8113.so.13"
        ));
        assert!(looks_like_cuda("/a/libcudart-80664282.so.10.2"));
        assert!(looks_like_cuda("/a/libcudart.so.12 (deleted)"));
        assert!(!looks_like_cuda("/a/libcudnn.so.9"));
        assert!(!looks_like_cuda("/a/libcuda_stub.a"));
        assert!(!looks_like_cuda("/a/libtorch_cuda.so"));
    }

    #[test]
    fn soname_layers() {
        assert_eq!(layer_of_soname("libcuda.so.1"), Some(Layer::Driver));
        assert_eq!(layer_of_soname("libcudart.so.12"), Some(Layer::Runtime));
        assert_eq!(layer_of_soname("libcudart.so.13"), Some(Layer::Runtime));
        assert_eq!(layer_of_soname("libnccl.so.2"), Some(Layer::Nccl));
        assert_eq!(
            layer_of_soname("libgpuprofd_inject.so"),
            Some(Layer::Inject)
        );
        assert_eq!(layer_of_soname("libcuda.so"), None);
        assert_eq!(layer_of_soname("liblookalike.so"), None);
    }
}

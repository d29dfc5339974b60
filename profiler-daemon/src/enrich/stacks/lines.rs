//! Source lines of native frames from DWARF (`addr2line`), where a file carries debug
//! information (or a `.gnu_debuglink` / split DWARF the loader finds): `file:line` of each
//! frame, and the functions inlined at the address, each as a frame of its own.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// One function at an address: the real function last, inlined ones before it (innermost
/// first), each with where in it the address is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceFrame {
    /// Raw (mangled) name from DWARF, when it has one.
    pub function: Option<String>,
    /// File name (no directory) and line.
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// Files larger than this are not searched for DWARF (it would be mapped whole).
const MAX_DWARF_FILE: u64 = 1 << 30;
/// Files whose DWARF is kept open at once; past it the cache starts again.
const MAX_OPEN: usize = 64;

/// By file identity ([`crate::enrich::process::file_key`]), not path.
struct Cache(HashMap<crate::enrich::process::FileKey, Option<addr2line::Loader>>);

fn cache() -> &'static Mutex<Cache> {
    static C: std::sync::OnceLock<Mutex<Cache>> = std::sync::OnceLock::new();
    C.get_or_init(|| Mutex::new(Cache(HashMap::new())))
}

/// The source frames at `vaddr` (a link-time address) of the file at `path`, innermost first;
/// empty when the file has no line information for it.
pub fn frames_at(path: &Path, vaddr: u64) -> Vec<SourceFrame> {
    let Some(key) = crate::enrich::process::file_key(path) else {
        return Vec::new();
    };
    let Ok(mut c) = cache().lock() else {
        return Vec::new();
    };
    if !c.0.contains_key(&key) {
        if c.0.len() >= MAX_OPEN {
            c.0.clear();
        }
        // The loader maps the file and reads DWARF lazily: a file without any costs a map.
        let usable = std::fs::metadata(path).is_ok_and(|m| m.len() <= MAX_DWARF_FILE);
        let loader = if usable {
            addr2line::Loader::new(path).ok()
        } else {
            None
        };
        c.0.insert(key, loader);
    }
    let Some(Some(loader)) = c.0.get(&key) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let Ok(mut it) = loader.find_frames(vaddr) else {
        return out;
    };
    while let Ok(Some(f)) = it.next() {
        if out.len() >= 16 {
            break;
        }
        let function = f
            .function
            .as_ref()
            .and_then(|n| n.raw_name().ok().map(|s| s.into_owned()));
        let (file, line) = match &f.location {
            Some(l) => (
                l.file.map(|p| p.rsplit('/').next().unwrap_or(p).to_owned()),
                l.line,
            ),
            None => (None, None),
        };
        out.push(SourceFrame {
            function,
            file,
            line,
        });
    }
    // Only the location is worth keeping when DWARF knows nothing at all.
    if out.iter().all(|f| f.file.is_none() && f.function.is_none()) {
        out.clear();
    }
    out
}

//! NCCL's library: `libnccl.so.2` by its SONAME (the system's, pip's `nvidia-nccl-cu12/cu13`
//! wheels, which ship it as `nvidia/nccl/lib/libnccl.so.2`), or NCCL linked into a framework's
//! library, found by the NCCL API it exports.

use super::{CudaLibrary, elf};
use crate::api::Layer;
use std::path::Path;

/// Whether a file name looks like NCCL's library (`libnccl.so.2`, `libnccl.so.2.21.5`): a
/// cheap pre-filter before the SONAME decides.
pub fn looks_like(name: &str) -> bool {
    name.starts_with("libnccl.so")
}

/// Whether `soname` is NCCL's (`libnccl.so.2`; any major version).
pub fn is_soname(soname: &str) -> bool {
    soname.starts_with("libnccl.so.")
}

/// The functions whose presence in a file's export table says NCCL is inside: a communicator
/// made by rank and the all-reduce (either the public name or the profiling `p` alias).
const MARKERS: [[&str; 2]; 2] = [
    ["ncclCommInitRank", "pncclCommInitRank"],
    ["ncclAllReduce", "pncclAllReduce"],
];

/// Whether `exports` hold NCCL's API (see [`MARKERS`]).
pub fn exports_api(exports: &[elf::ExportedFn]) -> bool {
    MARKERS
        .iter()
        .all(|m| exports.iter().any(|e| m.contains(&e.name.as_str())))
}

/// NCCL linked into the library or executable at `open_path` (a framework that carries its own
/// copy and exports its API), when the file is at most `max_bytes` and its export table holds
/// NCCL's API. Its functions are then hooked like `libnccl.so.2`'s.
pub fn identify_linked_in(open_path: &Path, display: &str, max_bytes: u64) -> Option<CudaLibrary> {
    let md = std::fs::metadata(open_path).ok()?;
    if md.len() > max_bytes {
        return None;
    }
    let info = elf::read_elf(open_path).ok()?;
    if info.soname.as_deref().is_some_and(is_soname) || !exports_api(&info.exports) {
        return None;
    }
    Some(super::linked_into(
        open_path,
        display,
        &md,
        "NCCL",
        Layer::Nccl,
        false,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str) -> elf::ExportedFn {
        elf::ExportedFn {
            name: name.into(),
            vaddr: 0,
            file_offset: 0,
            size: 0,
            entry_bytes: Vec::new(),
        }
    }

    #[test]
    fn names_and_sonames() {
        assert!(looks_like("libnccl.so.2"));
        assert!(looks_like("libnccl.so.2.21.5"));
        assert!(!looks_like("libnccl-net.so"));
        assert!(is_soname("libnccl.so.2"));
        assert!(!is_soname("libnccl-net.so"));
        assert!(super::super::looks_like_cuda(
            "/venv/nvidia/nccl/lib/libnccl.so.2"
        ));
    }

    #[test]
    fn the_api_is_found_by_either_name() {
        assert!(exports_api(&[f("ncclCommInitRank"), f("ncclAllReduce")]));
        assert!(exports_api(&[f("pncclCommInitRank"), f("pncclAllReduce")]));
        // A library that only calls NCCL, or exports half of a look-alike, is not NCCL.
        assert!(!exports_api(&[f("ncclAllReduce")]));
        assert!(!exports_api(&[f("ncclGetVersion"), f("ncclCommInitRankX")]));
    }
}

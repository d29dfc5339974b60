//! gpuprofd's injection library (`libgpuprofd_inject.so`, see `profiler_common::gpu`): found by
//! its SONAME like the CUDA libraries, and the file offset of its semaphore, which the attach
//! layer hands the kernel as the uprobes' reference counter.

use super::elf;
use profiler_common::gpu::{INJECT_SONAME, SEMAPHORE};
use std::path::Path;

/// Whether a file name looks like the injection library: a cheap pre-filter before the SONAME
/// decides.
pub fn looks_like(name: &str) -> bool {
    name.starts_with("libgpuprofd_inject")
}

/// Whether `soname` is the injection library's.
pub fn is_soname(soname: &str) -> bool {
    soname == INJECT_SONAME
}

/// Why the semaphore's offset could not be found.
#[derive(Debug, thiserror::Error)]
pub enum SemaphoreError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Elf(#[from] elf::ElfError),
    #[error("no symbol {SEMAPHORE}: not gpuprofd's injection library, or one too old")]
    Missing,
    #[error("{SEMAPHORE} at {0:#x} lies in no file-backed part of a loaded segment")]
    NotInFile(u64),
}

/// The file offset of `gpuprofd_inject_semaphore` in the library at `path` (what the kernel's
/// `ref_ctr_offset` takes). The symbol's address maps to the file through its `PT_LOAD`
/// segment, which is the same as "value − section address + section offset" for the
/// `.probes` section inside it; the semaphore must lie in the segment's file-backed part (a
/// `.bss` variable would not: the kernel maps the offset into the file's writable mapping).
pub fn semaphore_offset(path: &Path) -> Result<u64, SemaphoreError> {
    let data = std::fs::read(path).map_err(|source| SemaphoreError::Read {
        path: path.display().to_string(),
        source,
    })?;
    semaphore_offset_in(&data)
}

/// [`semaphore_offset`] of a file's bytes.
pub fn semaphore_offset_in(data: &[u8]) -> Result<u64, SemaphoreError> {
    let syms = elf::data_symbols(data, &[SEMAPHORE], 0)?;
    let vaddr = syms.get(SEMAPHORE).ok_or(SemaphoreError::Missing)?.vaddr;
    file_offset(&elf::load_segments(data)?, vaddr).ok_or(SemaphoreError::NotInFile(vaddr))
}

/// `vaddr`'s file offset through `loads` (`(file offset, bytes in file, address)`), when a
/// segment's file-backed part holds it (a 2-byte semaphore whole).
fn file_offset(loads: &[(u64, u64, u64)], vaddr: u64) -> Option<u64> {
    loads.iter().find_map(|&(off, filesz, v)| {
        (vaddr >= v && vaddr + 2 <= v + filesz).then(|| off + (vaddr - v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sonames() {
        assert!(looks_like("libgpuprofd_inject.so"));
        assert!(!looks_like("libcupti.so.12"));
        assert!(is_soname("libgpuprofd_inject.so"));
        assert!(!is_soname("libgpuprofd_inject.so.1"));
        assert!(super::super::looks_like_cuda(
            "/opt/gpuprofd/lib/libgpuprofd_inject.so"
        ));
    }

    #[test]
    fn the_offset_goes_through_the_segment_that_holds_it() {
        // text at 0/0x1000 bytes; data at file 0x2df0, address 0x3df0, 0x230 bytes in the file.
        let loads = [(0, 0x1000, 0), (0x2df0, 0x230, 0x3df0)];
        assert_eq!(file_offset(&loads, 0x4010), Some(0x3010));
        assert_eq!(file_offset(&loads, 0x3df0), Some(0x2df0));
        // Past the file-backed part (.bss), or straddling its end: none.
        assert_eq!(file_offset(&loads, 0x4020), None);
        assert_eq!(file_offset(&loads, 0x401f), None);
        assert!(matches!(
            semaphore_offset_in(b"not an elf"),
            Err(SemaphoreError::Elf(_))
        ));
    }
}

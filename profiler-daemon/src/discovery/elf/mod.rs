//! Reads untrusted x86-64 ELF files: SONAME, build-id, exported functions with their uprobe file offsets, and an address → function-symbol index.
//!
//! Every input here may be a file owned by an unprivileged user or a container, so parsing is
//! bounds-checked throughout (the `object` crate's raw ELF layer plus checked arithmetic here),
//! never panics on arbitrary bytes, and caps what a hostile file can make us allocate: file size
//! ([`MAX_ELF_BYTES`]), symbols per table ([`MAX_SYMBOLS`]) and symbol name length
//! ([`MAX_SYMBOL_NAME_BYTES`]; longer names are skipped).
//!
//! Parsing needs the input to be 8-byte aligned (a `Vec<u8>` or an mmap is); a misaligned slice
//! is reported as [`ElfError::Malformed`].

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use object::LittleEndian as LE;
use object::elf::{self, Dyn64, FileHeader64, ProgramHeader64, SectionHeader64, Sym64, Versym};
use object::read::elf::{Dyn, FileHeader, ProgramHeader, SectionHeader, Sym};

/// Files larger than this are refused (2 GiB).
pub const MAX_ELF_BYTES: u64 = 2 << 30;
/// Symbol names longer than this many bytes are skipped.
pub const MAX_SYMBOL_NAME_BYTES: usize = 4096;
/// A symbol table with more entries than this makes the whole file be refused.
pub const MAX_SYMBOLS: usize = 4 << 20;
/// How many bytes of each exported function [`ExportedFn::entry_bytes`] holds at most.
pub const ENTRY_BYTES: usize = 32;
/// Total bytes of distinct export names we are willing to allocate for one file.
const MAX_EXPORT_NAME_BYTES: usize = 256 << 20;
/// Build-ids are 16–20 bytes in practice; anything longer than this is ignored.
const MAX_BUILD_ID_BYTES: usize = 1024;
/// Largest `.gnu_debugdata` read (compressed), and its largest decompressed size.
const MAX_DEBUGDATA_PACKED: u64 = 64 << 20;
const MAX_DEBUGDATA: usize = 512 << 20;

/// Why an ELF file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// Opening, inspecting or reading the file failed.
    #[error("cannot read \"{}\": {source}; {}", path.display(), crate::sys::rlimit::io_hint(source))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The path is a directory, device, socket, … rather than a regular file.
    #[error("\"{}\" is not a regular file; pass the path of an ELF executable or shared library", path.display())]
    NotAFile { path: PathBuf },
    /// The file is larger than [`MAX_ELF_BYTES`].
    #[error("\"{}\" is {size} bytes, more than the {limit}-byte limit for ELF files; it is skipped", path.display())]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    /// The bytes do not start with the ELF magic number.
    #[error(
        "not an ELF file (starts with \"{}\"); only ELF executables and shared libraries can be profiled",
        hex(magic)
    )]
    NotElf { magic: Vec<u8> },
    /// A valid ELF file, but not x86-64 ELF64 little-endian.
    #[error(
        "unsupported ELF {what} \"{value}\": gpuprofd handles only x86-64 ELF64 little-endian files"
    )]
    Unsupported { what: &'static str, value: String },
    /// A table or header is out of bounds, misaligned or inconsistent.
    #[error("malformed ELF file: {what}; the file is truncated or corrupt and is skipped")]
    Malformed {
        what: &'static str,
        #[source]
        source: Option<object::read::Error>,
    },
    /// A symbol table has more than [`MAX_SYMBOLS`] entries.
    #[error("ELF {table} has {count} entries, more than the limit of {limit}; the file is skipped")]
    TooManySymbols {
        table: &'static str,
        count: usize,
        limit: usize,
    },
    /// The distinct exported names add up to an implausible amount of memory.
    #[error("ELF exported function names exceed {limit} bytes in total; the file is skipped")]
    ExportNamesTooLarge { limit: usize },
    /// A parse error in a file read by path ([`read_elf`], [`SymbolIndex::load`]).
    #[error("cannot use ELF file \"{}\"", path.display())]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<ElfError>,
    },
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\x{b:02x}")).collect()
}

fn malformed(what: &'static str) -> impl FnOnce(object::read::Error) -> ElfError {
    move |source| ElfError::Malformed {
        what,
        source: Some(source),
    }
}

/// Identity and exported functions of one ELF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// `DT_SONAME`, if the file has one (shared libraries usually do, executables do not).
    pub soname: Option<String>,
    /// Defined global/weak `STT_FUNC` symbols of `.dynsym` that lie in a `PT_LOAD` segment,
    /// sorted by name, one per name (the default version wins over hidden versions; otherwise
    /// the first in `.dynsym` order). A name whose chosen symbol is an `STT_GNU_IFUNC` resolver
    /// is left out (even when a hidden version of it is a plain function).
    pub exports: Vec<ExportedFn>,
    /// The `NT_GNU_BUILD_ID` note's descriptor, if present.
    pub build_id: Option<Vec<u8>>,
}

/// One exported function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedFn {
    /// Symbol name without any `@version` suffix.
    pub name: String,
    /// `st_value`.
    pub vaddr: u64,
    /// File offset of `vaddr` through its `PT_LOAD` segment (what perf/aya uprobes take).
    pub file_offset: u64,
    /// `st_size`.
    pub size: u64,
    /// Up to [`ENTRY_BYTES`] bytes of the function read from the file at `file_offset`; fewer
    /// when the segment's file-backed part (or the file) ends earlier.
    pub entry_bytes: Vec<u8>,
}

/// The CUDA runtime's entry points when `path` has one linked in statically (nvcc's default,
/// `-cudart static`): `cudaLaunchKernel` and `__cudaRegisterFunction` both defined, in
/// `.dynsym` or, for an executable that exports nothing, in `.symtab`. `None` when the file
/// has no runtime inside (or is stripped, which leaves nothing to hook by name). Only the
/// `cuda*`/`__cuda*` functions are returned.
pub fn read_static_runtime(
    path: &Path,
    max_bytes: u64,
) -> Result<Option<Vec<ExportedFn>>, ElfError> {
    let size = std::fs::metadata(path)
        .map_err(|source| ElfError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .len();
    if size > max_bytes {
        return Ok(None);
    }
    let data = read_limited(path)?;
    static_runtime_in(&data).map_err(|e| in_file(path, e))
}

/// [`read_static_runtime`] on bytes in memory.
pub fn static_runtime_in(data: &[u8]) -> Result<Option<Vec<ExportedFn>>, ElfError> {
    let file = RawElf::parse(data)?;
    let has_runtime = |f: &[ExportedFn]| {
        ["cudaLaunchKernel", "__cudaRegisterFunction"]
            .iter()
            .all(|n| f.iter().any(|e| e.name == *n))
    };
    for table in [elf::SHT_DYNSYM, elf::SHT_SYMTAB] {
        let mut f = file.functions(table)?;
        if has_runtime(&f) {
            f.retain(|e| e.name.starts_with("cuda") || e.name.starts_with("__cuda"));
            return Ok(Some(f));
        }
    }
    Ok(None)
}

/// An ELF64 x86-64 file's program headers, read with two small reads (ELF header, program
/// headers); the file stays open for more. `None` for anything else or anything malformed.
fn program_headers(path: &Path) -> Option<(File, Vec<ProgramHeader64<LE>>)> {
    use object::pod::slice_from_bytes;
    let f = File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let eh = read_at(&f, 0, std::mem::size_of::<FileHeader64<LE>>())?;
    let eh = FileHeader64::<LE>::parse(&*eh).ok()?;
    if eh.endian().is_err() || eh.e_machine(LE) != elf::EM_X86_64 {
        return None;
    }
    let phnum = usize::from(eh.e_phnum(LE));
    if usize::from(eh.e_phentsize(LE)) != std::mem::size_of::<ProgramHeader64<LE>>()
        || phnum == 0
        || phnum > 512
    {
        return None;
    }
    let ph = read_at(
        &f,
        eh.e_phoff(LE),
        phnum * std::mem::size_of::<ProgramHeader64<LE>>(),
    )?;
    let (phdrs, _) = slice_from_bytes::<ProgramHeader64<LE>>(&ph, phnum).ok()?;
    Some((f, phdrs.to_vec()))
}

/// `len` bytes of `f` at `off`, all of them or `None`.
fn read_at(f: &File, off: u64, len: usize) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, off).ok()?;
    Some(buf)
}

/// The `NT_GNU_BUILD_ID` of an ELF64 x86-64 file, from its `PT_NOTE` segments (each read up to
/// 64 KiB), not the whole file: a driver is 30 MB. `None` without one or when malformed.
pub fn read_build_id(path: &Path) -> Option<Vec<u8>> {
    let (f, phdrs) = program_headers(path)?;
    for p in phdrs.iter().filter(|p| p.p_type(LE) == elf::PT_NOTE) {
        let size = usize::try_from(p.p_filesz(LE).min(64 << 10)).ok()?;
        let notes = read_at(&f, p.p_offset(LE), size)?;
        let mut at = 0usize;
        let word = |i: usize| -> Option<usize> {
            let b = notes.get(i..i + 4)?;
            Some(u32::from_le_bytes(b.try_into().ok()?) as usize)
        };
        let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
        while at + 12 <= notes.len() {
            let (namesz, descsz, kind) = (word(at)?, word(at + 4)?, word(at + 8)?);
            let name_at = at + 12;
            let desc_at = name_at.checked_add(align4(namesz)?)?;
            let end = desc_at.checked_add(align4(descsz)?)?;
            let name = notes.get(name_at..name_at.checked_add(namesz)?)?;
            let desc = notes.get(desc_at..desc_at.checked_add(descsz)?)?;
            if kind == elf::NT_GNU_BUILD_ID as usize
                && name == b"GNU\0"
                && !desc.is_empty()
                && desc.len() <= MAX_BUILD_ID_BYTES
            {
                return Some(desc.to_vec());
            }
            at = end;
        }
    }
    None
}

/// The `DT_SONAME` of an ELF64 x86-64 file, read with a handful of small reads (ELF header,
/// program headers, the dynamic segment, one string) rather than the whole file: cheap enough
/// to ask of every library a process maps. `None` for anything else or anything malformed.
pub fn read_soname(path: &Path) -> Option<String> {
    use object::pod::slice_from_bytes;
    let (f, phdrs) = program_headers(path)?;
    let read = |off: u64, len: usize| read_at(&f, off, len);
    let loads: Vec<&ProgramHeader64<LE>> = phdrs
        .iter()
        .filter(|p| p.p_type(LE) == elf::PT_LOAD)
        .collect();
    let dynamic = phdrs.iter().find(|p| p.p_type(LE) == elf::PT_DYNAMIC)?;
    let dsize = usize::try_from(dynamic.p_filesz(LE).min(64 << 10)).ok()?;
    let dynb = read(dynamic.p_offset(LE), dsize)?;
    let n = dynb.len() / std::mem::size_of::<Dyn64<LE>>();
    let (dyns, _) = slice_from_bytes::<Dyn64<LE>>(&dynb, n).ok()?;
    let (mut soname, mut strtab) = (None, None);
    for d in dyns {
        match u32::try_from(d.d_tag(LE)).unwrap_or(u32::MAX) {
            elf::DT_NULL => break,
            elf::DT_SONAME => soname = Some(d.d_val(LE)),
            elf::DT_STRTAB => strtab = Some(d.d_val(LE)),
            _ => {}
        }
    }
    let (name_off, strtab) = (soname?, strtab?);
    // The string table's address, through the segment that holds it, as a file offset.
    let file_off = loads.iter().find_map(|p| {
        let (vaddr, filesz) = (p.p_vaddr(LE), p.p_filesz(LE));
        (strtab >= vaddr && strtab < vaddr.checked_add(filesz)?)
            .then(|| p.p_offset(LE) + (strtab - vaddr))
    })?;
    let at = file_off.checked_add(name_off)?;
    let bytes = read(at, 256).or_else(|| read(at, 64))?;
    let end = bytes.iter().position(|&b| b == 0)?;
    String::from_utf8(bytes[..end].to_vec())
        .ok()
        .filter(|s| !s.is_empty())
}

/// Reads `path` (at most [`MAX_ELF_BYTES`]) and parses it with [`parse_elf`].
pub fn read_elf(path: &Path) -> Result<ElfInfo, ElfError> {
    let data = read_limited(path)?;
    parse_elf(&data).map_err(|e| in_file(path, e))
}

/// Parses an x86-64 ELF64 little-endian file held in memory.
///
/// Malformed `.dynsym`/`.dynstr` make this fail; a malformed dynamic section or note only makes
/// `soname`/`build_id` absent.
pub fn parse_elf(data: &[u8]) -> Result<ElfInfo, ElfError> {
    let file = RawElf::parse(data)?;
    Ok(ElfInfo {
        soname: file.soname(),
        exports: file.exports()?,
        build_id: file.build_id(),
    })
}

fn in_file(path: &Path, source: ElfError) -> ElfError {
    ElfError::InFile {
        path: path.to_path_buf(),
        source: Box::new(source),
    }
}

/// Opens `path`, a regular file of at most [`MAX_ELF_BYTES`]; with its size.
fn open_limited(path: &Path) -> Result<(File, u64), ElfError> {
    let io = |source| ElfError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(ElfError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    if meta.len() > MAX_ELF_BYTES {
        return Err(too_large(path, meta.len()));
    }
    Ok((file, meta.len()))
}

fn too_large(path: &Path, size: u64) -> ElfError {
    ElfError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit: MAX_ELF_BYTES,
    }
}

fn read_limited(path: &Path) -> Result<Vec<u8>, ElfError> {
    let (file, len) = open_limited(path)?;
    // The file may grow between stat and read: never read more than the limit + 1.
    let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(MAX_ELF_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|source| ElfError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if data.len() as u64 > MAX_ELF_BYTES {
        return Err(too_large(path, data.len() as u64));
    }
    Ok(data)
}

mod raw;
mod symbols;

use raw::RawElf;

pub use raw::{DataSymbol, data_symbols, load_segments};
pub use symbols::SymbolIndex;

#[cfg(test)]
mod tests;

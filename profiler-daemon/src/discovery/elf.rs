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

/// A sink that refuses to grow past [`MAX_DEBUGDATA`] (a decompression bomb stops there).
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_DEBUGDATA {
            return Err(std::io::Error::other(".gnu_debugdata too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

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

/// The `DT_SONAME` of an ELF64 x86-64 file, read with a handful of small reads (ELF header,
/// program headers, the dynamic segment, one string) rather than the whole file: cheap enough
/// to ask of every library a process maps. `None` for anything else or anything malformed.
pub fn read_soname(path: &Path) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let f = File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let read = |off: u64, len: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, off).ok()?;
        Some(buf)
    };
    let u16_at = |b: &[u8], o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |b: &[u8], o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let eh = read(0, 64)?;
    // \x7fELF, ELFCLASS64, little-endian, EM_X86_64
    if eh[..4] != *b"\x7fELF" || eh[4] != 2 || eh[5] != 1 || u16_at(&eh, 18)? != 62 {
        return None;
    }
    let phoff = u64_at(&eh, 32)?;
    let phentsize = usize::from(u16_at(&eh, 54)?);
    let phnum = usize::from(u16_at(&eh, 56)?);
    if phentsize < 56 || phnum == 0 || phnum > 512 {
        return None;
    }
    let ph = read(phoff, phentsize * phnum)?;
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let b = &ph[i * phentsize..];
        let (p_type, off, vaddr, filesz) =
            (u32_at(b, 0)?, u64_at(b, 8)?, u64_at(b, 16)?, u64_at(b, 32)?);
        match p_type {
            1 => loads.push((vaddr, off, filesz)),
            2 => dynamic = Some((off, filesz)),
            _ => {}
        }
    }
    let (doff, dsize) = dynamic?;
    let dsize = usize::try_from(dsize.min(64 << 10)).ok()?;
    let dynb = read(doff, dsize)?;
    let (mut soname, mut strtab) = (None, None);
    for e in dynb.chunks_exact(16) {
        let tag = u64_at(e, 0)?;
        let val = u64_at(e, 8)?;
        match tag {
            0 => break,
            14 => soname = Some(val),
            5 => strtab = Some(val),
            _ => {}
        }
    }
    let (name_off, strtab) = (soname?, strtab?);
    let file_off = loads.iter().find_map(|&(vaddr, off, filesz)| {
        (strtab >= vaddr && strtab < vaddr.checked_add(filesz)?).then(|| off + (strtab - vaddr))
    })?;
    let bytes =
        read(file_off.checked_add(name_off)?, 256).or_else(|| read(file_off + name_off, 64))?;
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

/// The parts of `path` a [`SymbolIndex`] reads, at their offsets in a buffer the file's size:
/// the ELF, program and section headers, every symbol and string table and `.gnu_debugdata`.
/// The rest stays unread and, in a buffer of more than a few pages, unbacked (zeroed pages the
/// kernel has not handed out): a PyTorch process's stack goes through libraries of 0.45 GB,
/// of which the symbol tables are a sixth; reading them whole took 0.5–1.6 s each, and as
/// much memory, while the records behind the stack waited. A file whose headers do not
/// describe it is read whole, for the parser to say what is wrong with it.
fn read_symbol_parts(path: &Path) -> Result<(FileBytes, Option<File>), ElfError> {
    use std::os::unix::fs::FileExt;
    let (file, len) = open_limited(path)?;
    let len = len as usize;
    let whole = || read_limited(path).map(|d| (FileBytes::Whole(d), None));
    // Zeroed pages the kernel backs only where written (and charges no swap for).
    let Ok(mut data) = memmap2::MmapOptions::new()
        .len(len)
        .no_reserve_swap()
        .map_anon()
    else {
        return whole();
    };
    // [start, end) of the file, read into place; false when it does not lie inside the file
    // or cannot be read (the file changed since its size was taken).
    fn fill(file: &File, data: &mut [u8], start: u64, size: u64) -> bool {
        let Some(end) = start.checked_add(size).filter(|&e| e <= data.len() as u64) else {
            return false;
        };
        file.read_exact_at(&mut data[start as usize..end as usize], start)
            .is_ok()
    }
    let header_len = std::mem::size_of::<FileHeader64<LE>>() as u64;
    if !fill(&file, &mut data, 0, header_len.min(len as u64)) {
        return whole();
    }
    let Ok(&header) = FileHeader64::<LE>::parse(&data[..]) else {
        return whole();
    };
    let table = |off: u64, num: u16, size: u16| (off, u64::from(num) * u64::from(size));
    let phdrs = table(
        header.e_phoff(LE),
        header.e_phnum(LE),
        header.e_phentsize(LE),
    );
    let shdrs = table(
        header.e_shoff(LE),
        header.e_shnum(LE),
        header.e_shentsize(LE),
    );
    // e_shnum 0 with sections present (more than 0xff00 of them) keeps the count elsewhere:
    // rare enough to read such a file whole.
    if shdrs.0 == 0
        || shdrs.1 == 0
        || !fill(&file, &mut data, phdrs.0, phdrs.1)
        || !fill(&file, &mut data, shdrs.0, shdrs.1)
    {
        return whole();
    }
    // (type, offset, size, name) of every section.
    let parts: Vec<(u32, u64, u64, u32)> = match header.section_headers(LE, &data[..]) {
        Ok(sections) => sections
            .iter()
            .map(|s| (s.sh_type(LE), s.sh_offset(LE), s.sh_size(LE), s.sh_name(LE)))
            .collect(),
        Err(_) => return whole(),
    };
    let shstrndx = usize::from(header.e_shstrndx(LE));
    let wanted = |t: u32| matches!(t, elf::SHT_SYMTAB | elf::SHT_DYNSYM | elf::SHT_STRTAB);
    for (i, &(t, off, size, _)) in parts.iter().enumerate() {
        if (wanted(t) || i == shstrndx)
            && t != elf::SHT_NOBITS
            && !fill(&file, &mut data, off, size)
        {
            return whole();
        }
    }
    // Section names are readable now: `.gnu_debugdata` (MiniDebugInfo) is found by name.
    let debugdata: Vec<(u64, u64)> = match parts.get(shstrndx) {
        Some(&(_, off, size, _)) => {
            let names = bytes_at(&data, off, size);
            parts
                .iter()
                .filter(|&&(t, _, size, name)| {
                    t == elf::SHT_PROGBITS
                        && size <= MAX_DEBUGDATA_PACKED
                        && name_at(names, u64::from(name)) == Some(".gnu_debugdata")
                })
                .map(|&(_, off, size, _)| (off, size))
                .collect()
        }
        None => Vec::new(),
    };
    for (off, size) in debugdata {
        if !fill(&file, &mut data, off, size) {
            return whole();
        }
    }
    Ok((FileBytes::Sparse(data), Some(file)))
}

/// A file's bytes: read whole, or the parts an index needs ([`read_symbol_parts`]).
enum FileBytes {
    Whole(Vec<u8>),
    Sparse(memmap2::MmapMut),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Whole(v) => v,
            FileBytes::Sparse(m) => m,
        }
    }
}

/// A `PT_LOAD` segment: how virtual addresses map to file offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LoadSegment {
    vaddr: u64,
    memsz: u64,
    offset: u64,
    filesz: u64,
}

impl LoadSegment {
    fn from_header(ph: &ProgramHeader64<LE>) -> Self {
        LoadSegment {
            vaddr: ph.p_vaddr(LE),
            memsz: ph.p_memsz(LE),
            offset: ph.p_offset(LE),
            filesz: ph.p_filesz(LE),
        }
    }

    /// `(file offset, bytes file-backed from there)` of `vaddr`, if the segment maps it.
    fn file_offset_of(&self, vaddr: u64) -> Option<(u64, u64)> {
        let delta = vaddr.checked_sub(self.vaddr)?;
        if delta >= self.memsz {
            return None;
        }
        Some((
            self.offset.checked_add(delta)?,
            self.filesz.saturating_sub(delta),
        ))
    }

    fn vaddr_of_file_offset(&self, off: u64) -> Option<u64> {
        let delta = off.checked_sub(self.offset)?;
        if delta >= self.filesz {
            return None;
        }
        self.vaddr.checked_add(delta)
    }
}

fn file_offset_of(loads: &[LoadSegment], vaddr: u64) -> Option<(u64, u64)> {
    loads.iter().find_map(|l| l.file_offset_of(vaddr))
}

/// At most `len` bytes of `data` from `offset` (fewer if the data ends first).
fn bytes_at(data: &[u8], offset: u64, len: u64) -> &[u8] {
    let Ok(start) = usize::try_from(offset) else {
        return &[];
    };
    let Some(rest) = data.get(start..) else {
        return &[];
    };
    let len = usize::try_from(len).unwrap_or(usize::MAX).min(rest.len());
    &rest[..len]
}

/// The NUL-terminated name at `offset` of a string table, if it is at most
/// [`MAX_SYMBOL_NAME_BYTES`] long, terminated within the table, and UTF-8.
///
/// Only the first `MAX_SYMBOL_NAME_BYTES + 1` bytes are scanned, so a hostile table without
/// NULs costs bounded time per symbol.
fn name_at(strtab: &[u8], offset: u64) -> Option<&str> {
    let rest = strtab.get(usize::try_from(offset).ok()?..)?;
    let window = &rest[..rest.len().min(MAX_SYMBOL_NAME_BYTES + 1)];
    let end = window.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&window[..end]).ok()
}

/// A validated header plus the tables every query needs.
struct RawElf<'a> {
    data: &'a [u8],
    phdrs: &'a [ProgramHeader64<LE>],
    sections: &'a [SectionHeader64<LE>],
    /// Section names (empty when the file has none).
    shstrtab: &'a [u8],
    loads: Vec<LoadSegment>,
}

impl<'a> RawElf<'a> {
    fn parse(data: &'a [u8]) -> Result<Self, ElfError> {
        if data.len() < 4 || data[..4] != elf::ELFMAG {
            return Err(ElfError::NotElf {
                magic: data[..data.len().min(4)].to_vec(),
            });
        }
        if let Some(&class) = data.get(4)
            && class != elf::ELFCLASS64
        {
            let value = match class {
                elf::ELFCLASS32 => "ELF32".to_string(),
                other => format!("class {other}"),
            };
            return Err(ElfError::Unsupported {
                what: "class",
                value,
            });
        }
        if let Some(&order) = data.get(5)
            && order != elf::ELFDATA2LSB
        {
            let value = match order {
                elf::ELFDATA2MSB => "big-endian".to_string(),
                other => format!("data encoding {other}"),
            };
            return Err(ElfError::Unsupported {
                what: "byte order",
                value,
            });
        }
        let header = FileHeader64::<LE>::parse(data).map_err(malformed("invalid ELF header"))?;
        let machine = header.e_machine(LE);
        if machine != elf::EM_X86_64 {
            let value = match machine {
                elf::EM_386 => "i386".to_string(),
                elf::EM_AARCH64 => "AArch64".to_string(),
                elf::EM_PPC64 => "PowerPC64".to_string(),
                other => format!("e_machine {other}"),
            };
            return Err(ElfError::Unsupported {
                what: "machine",
                value,
            });
        }
        let phdrs = header
            .program_headers(LE, data)
            .map_err(malformed("program header table out of bounds"))?;
        let sections = header
            .section_headers(LE, data)
            .map_err(malformed("section header table out of bounds"))?;
        let loads = phdrs
            .iter()
            .filter(|ph| ph.p_type(LE) == elf::PT_LOAD)
            .map(LoadSegment::from_header)
            .collect();
        let shstrtab = sections
            .get(usize::from(header.e_shstrndx(LE)))
            .and_then(|s| s.data(LE, data).ok())
            .unwrap_or(&[]);
        Ok(RawElf {
            data,
            phdrs,
            sections,
            shstrtab,
            loads,
        })
    }

    fn section_named(&self, name: &str) -> Option<&'a SectionHeader64<LE>> {
        self.sections
            .iter()
            .find(|s| name_at(self.shstrtab, u64::from(s.sh_name(LE))) == Some(name))
    }

    /// The MiniDebugInfo ELF (`.gnu_debugdata`, xz-compressed, as Fedora and others ship to
    /// name a stripped file's local functions), decompressed within bounds.
    fn mini_debuginfo(&self) -> Option<Vec<u8>> {
        let section = self.section_named(".gnu_debugdata")?;
        let packed = section.data(LE, self.data).ok()?;
        if packed.len() as u64 > MAX_DEBUGDATA_PACKED {
            return None;
        }
        let mut out = Bounded(Vec::new());
        lzma_rs::xz_decompress(&mut std::io::BufReader::new(packed), &mut out).ok()?;
        Some(out.0)
    }

    fn first_section(&self, sh_type: u32) -> Option<&'a SectionHeader64<LE>> {
        self.sections.iter().find(|s| s.sh_type(LE) == sh_type)
    }

    /// The raw bytes of the string table a section links to.
    fn linked_strtab(&self, section: &SectionHeader64<LE>) -> Result<&'a [u8], ElfError> {
        let link = usize::try_from(section.sh_link(LE)).unwrap_or(usize::MAX);
        let strtab = self.sections.get(link).ok_or(ElfError::Malformed {
            what: "symbol table links to a missing string table",
            source: None,
        })?;
        strtab
            .data(LE, self.data)
            .map_err(malformed("string table out of bounds"))
    }

    /// The symbols of a symbol table section and its string table.
    fn symbols(
        &self,
        section: &SectionHeader64<LE>,
        table: &'static str,
    ) -> Result<(&'a [Sym64<LE>], &'a [u8]), ElfError> {
        let syms: &[Sym64<LE>] = section
            .data_as_array(LE, self.data)
            .map_err(malformed("symbol table out of bounds or misaligned"))?;
        if syms.len() > MAX_SYMBOLS {
            return Err(ElfError::TooManySymbols {
                table,
                count: syms.len(),
                limit: MAX_SYMBOLS,
            });
        }
        Ok((syms, self.linked_strtab(section)?))
    }

    fn soname(&self) -> Option<String> {
        let (dynamic, strtab): (&[Dyn64<LE>], &[u8]) =
            if let Some(section) = self.first_section(elf::SHT_DYNAMIC) {
                (
                    section.data_as_array(LE, self.data).ok()?,
                    self.linked_strtab(section).ok()?,
                )
            } else {
                // No section headers (stripped with sstrip, or crafted): use PT_DYNAMIC.
                let ph = self
                    .phdrs
                    .iter()
                    .find(|ph| ph.p_type(LE) == elf::PT_DYNAMIC)?;
                let dynamic: &[Dyn64<LE>] = ph.data_as_array(LE, self.data).ok()?;
                let tag = |t: u32| {
                    dynamic
                        .iter()
                        .take_while(|d| d.d_tag(LE) != u64::from(elf::DT_NULL))
                        .find(|d| d.d_tag(LE) == u64::from(t))
                        .map(|d| d.d_val(LE))
                };
                let (offset, _) = file_offset_of(&self.loads, tag(elf::DT_STRTAB)?)?;
                (dynamic, bytes_at(self.data, offset, tag(elf::DT_STRSZ)?))
            };
        let soname = dynamic
            .iter()
            .take_while(|d| d.d_tag(LE) != u64::from(elf::DT_NULL))
            .find(|d| d.d_tag(LE) == u64::from(elf::DT_SONAME))?;
        name_at(strtab, soname.d_val(LE)).map(str::to_string)
    }

    fn build_id(&self) -> Option<Vec<u8>> {
        let from_sections = self
            .sections
            .iter()
            .filter_map(|s| s.notes(LE, self.data).ok()?);
        let from_segments = self
            .phdrs
            .iter()
            .filter_map(|p| p.notes(LE, self.data).ok()?);
        from_sections
            .chain(from_segments)
            .flat_map(|notes| notes.map_while(Result::ok))
            .find(|note| {
                note.name() == elf::ELF_NOTE_GNU
                    && note.n_type(LE) == elf::NT_GNU_BUILD_ID
                    && !note.desc().is_empty()
                    && note.desc().len() <= MAX_BUILD_ID_BYTES
            })
            .map(|note| note.desc().to_vec())
    }

    fn exports(&self) -> Result<Vec<ExportedFn>, ElfError> {
        self.functions(elf::SHT_DYNSYM)
    }

    /// Defined global/weak functions of `.dynsym` (exports: default or protected visibility)
    /// or of `.symtab` (any visibility: a statically linked library's functions are often
    /// hidden in the final object yet are real entry points).
    fn functions(&self, table: u32) -> Result<Vec<ExportedFn>, ElfError> {
        let dynamic = table == elf::SHT_DYNSYM;
        let Some(section) = self.first_section(table) else {
            return Ok(Vec::new());
        };
        let (syms, strtab) = self.symbols(section, if dynamic { ".dynsym" } else { ".symtab" })?;
        // A versym table that does not match .dynsym one-to-one is ignored (all default).
        let versyms: Option<&[Versym<LE>]> = self
            .first_section(elf::SHT_GNU_VERSYM)
            .filter(|_| dynamic)
            .and_then(|s| s.data_as_array(LE, self.data).ok())
            .filter(|v: &&[Versym<LE>]| v.len() == syms.len());

        struct Candidate<'n> {
            name: &'n str,
            hidden: bool,
            is_ifunc: bool,
            vaddr: u64,
            size: u64,
            file_offset: u64,
            file_backed: u64,
        }
        let mut candidates = Vec::new();
        for (index, sym) in syms.iter().enumerate().skip(1) {
            let is_ifunc = match sym.st_type() {
                elf::STT_FUNC => false,
                elf::STT_GNU_IFUNC => true,
                _ => continue,
            };
            if !matches!(sym.st_bind(), elf::STB_GLOBAL | elf::STB_WEAK)
                || sym.st_shndx(LE) == elf::SHN_UNDEF
                || (dynamic && matches!(sym.st_visibility(), elf::STV_HIDDEN | elf::STV_INTERNAL))
            {
                continue;
            }
            let Some(name) = name_at(strtab, u64::from(sym.st_name(LE))) else {
                continue;
            };
            let name = name.split('@').next().unwrap_or(name);
            if name.is_empty() {
                continue;
            }
            let vaddr = sym.st_value(LE);
            let Some((file_offset, file_backed)) = file_offset_of(&self.loads, vaddr) else {
                continue;
            };
            let hidden = versyms
                .and_then(|v| v.get(index))
                .is_some_and(|v| v.0.get(LE) & elf::VERSYM_HIDDEN != 0);
            candidates.push(Candidate {
                name,
                hidden,
                is_ifunc,
                vaddr,
                size: sym.st_size(LE),
                file_offset,
                file_backed,
            });
        }
        // Stable: among equal (name, hidden) the .dynsym order is kept.
        candidates.sort_by(|a, b| a.name.cmp(b.name).then(a.hidden.cmp(&b.hidden)));
        candidates.dedup_by(|later, first| later.name == first.name);
        // IFUNCs take part in the version choice (glibc's default memcpy@@GLIBC_2.14 is an IFUNC,
        // its hidden memcpy@GLIBC_2.2.5 a plain function), then are dropped: probing a resolver
        // or a legacy version would not see the calls the name stands for.
        candidates.retain(|c| !c.is_ifunc);

        let mut name_bytes = 0usize;
        let mut exports = Vec::with_capacity(candidates.len());
        for c in candidates {
            name_bytes = name_bytes.saturating_add(c.name.len());
            if name_bytes > MAX_EXPORT_NAME_BYTES {
                return Err(ElfError::ExportNamesTooLarge {
                    limit: MAX_EXPORT_NAME_BYTES,
                });
            }
            let len = c.file_backed.min(ENTRY_BYTES as u64);
            exports.push(ExportedFn {
                name: c.name.to_string(),
                vaddr: c.vaddr,
                file_offset: c.file_offset,
                size: c.size,
                entry_bytes: bytes_at(self.data, c.file_offset, len).to_vec(),
            });
        }
        Ok(exports)
    }
}

/// A data symbol of a file: its link-time address and the bytes the file holds there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSymbol {
    pub vaddr: u64,
    pub size: u64,
    /// At most the requested number of bytes from the file (fewer for `.bss` or a short file).
    pub bytes: Vec<u8>,
}

/// The defined symbols named `names` (any type; `.dynsym` first, then `.symtab`), each with up
/// to `want` bytes of its initial contents. Missing names are left out.
pub fn data_symbols(
    data: &[u8],
    names: &[&str],
    want: u64,
) -> Result<std::collections::HashMap<String, DataSymbol>, ElfError> {
    let file = RawElf::parse(data)?;
    let mut out = std::collections::HashMap::new();
    for (sh_type, table) in [(elf::SHT_DYNSYM, ".dynsym"), (elf::SHT_SYMTAB, ".symtab")] {
        let Some(section) = file.first_section(sh_type) else {
            continue;
        };
        let (syms, strtab) = file.symbols(section, table)?;
        for sym in syms.iter().skip(1) {
            if sym.st_shndx(LE) == elf::SHN_UNDEF {
                continue;
            }
            let Some(name) = name_at(strtab, u64::from(sym.st_name(LE))) else {
                continue;
            };
            if !names.contains(&name) || out.contains_key(name) {
                continue;
            }
            let vaddr = sym.st_value(LE);
            let size = sym.st_size(LE);
            let bytes = match file_offset_of(&file.loads, vaddr) {
                Some((off, backed)) => bytes_at(data, off, want.min(backed)).to_vec(),
                None => Vec::new(),
            };
            out.insert(name.to_owned(), DataSymbol { vaddr, size, bytes });
        }
    }
    Ok(out)
}

/// The file's `PT_LOAD` segments as `(file offset, bytes in the file, link-time address)`.
pub fn load_segments(data: &[u8]) -> Result<Vec<(u64, u64, u64)>, ElfError> {
    let file = RawElf::parse(data)?;
    Ok(file
        .loads
        .iter()
        .map(|l| (l.offset, l.filesz, l.vaddr))
        .collect())
}

/// Function symbols (`STT_FUNC`, `STT_GNU_IFUNC`) of `.symtab` and `.dynsym`, for address → name.
///
/// Used to name a runtime launch's host-stub address, which is usually a LOCAL symbol present
/// only in `.symtab`. Names are kept in copies of the string tables, so memory is bounded by the
/// file's size whatever the symbols point at.
pub struct SymbolIndex {
    /// The string tables the entries point into.
    strtabs: Vec<Strtab>,
    /// The file [`Strtab::InFile`] tables are read from (kept open: a file replaced on disk
    /// since is still this one).
    file: Option<File>,
    /// Sorted by `(vaddr, preference, name)`; one entry per distinct `(vaddr, name)`.
    entries: Vec<SymEntry>,
    loads: Vec<LoadSegment>,
}

/// Where a string table's bytes are.
enum Strtab {
    /// A copy (an index built from bytes in memory; MiniDebugInfo's table).
    Mem(Box<[u8]>),
    /// In the index's file, at this offset: the names of an index loaded from a file are read
    /// from it when asked for. PyTorch's two largest libraries hold 150 MB of string tables,
    /// which the daemon would otherwise keep for as long as it names their frames.
    InFile { offset: u64, len: u64 },
}

#[derive(Debug, Clone, Copy)]
struct SymEntry {
    vaddr: u64,
    size: u64,
    name_off: u32,
    name_len: u16,
    strtab: u8,
    /// Lower is preferred: FUNC before IFUNC, GLOBAL before WEAK before LOCAL, .symtab first.
    rank: u8,
}

/// How many entries [`SymbolIndex::lookup_containing`] looks back for an enclosing symbol.
const CONTAINING_LOOKBACK: usize = 64;

impl SymbolIndex {
    /// Builds the index from a file in memory. A file without symbol tables gives an empty index.
    pub fn from_elf(data: &[u8]) -> Result<SymbolIndex, ElfError> {
        SymbolIndex::build(data, None)
    }

    /// [`SymbolIndex::from_elf`]; with `source`, the file `data` was read from, whose string
    /// tables are then read from it when a name is asked for instead of being copied.
    fn build(data: &[u8], source: Option<File>) -> Result<SymbolIndex, ElfError> {
        let file = RawElf::parse(data)?;
        // The tables' bytes while the index is built, and how the index keeps them.
        let mut tables: Vec<&[u8]> = Vec::new();
        let mut strtabs: Vec<Strtab> = Vec::new();
        let mut strtab_links: Vec<u32> = Vec::new();
        let mut entries = Vec::new();
        let mut add = |syms: &[Sym64<LE>], strtab: &[u8], strtab_id: usize, source_rank: u8| {
            for sym in syms.iter().skip(1) {
                let type_rank = match sym.st_type() {
                    elf::STT_FUNC => 0u8,
                    elf::STT_GNU_IFUNC => 1,
                    _ => continue,
                };
                let vaddr = sym.st_value(LE);
                if sym.st_shndx(LE) == elf::SHN_UNDEF || vaddr == 0 {
                    continue;
                }
                let name_off = sym.st_name(LE);
                let Some(name) = name_at(strtab, u64::from(name_off)) else {
                    continue;
                };
                let Ok(name_len) = u16::try_from(name.len()) else {
                    continue;
                };
                if name.is_empty() {
                    continue;
                }
                let bind_rank = match sym.st_bind() {
                    elf::STB_GLOBAL => 0u8,
                    elf::STB_WEAK => 1,
                    _ => 2,
                };
                entries.push(SymEntry {
                    vaddr,
                    size: sym.st_size(LE),
                    name_off,
                    name_len,
                    strtab: strtab_id as u8,
                    rank: type_rank * 6 + bind_rank * 2 + source_rank,
                });
            }
        };
        for (sh_type, table, source_rank) in [
            (elf::SHT_SYMTAB, ".symtab", 0u8),
            (elf::SHT_DYNSYM, ".dynsym", 1u8),
        ] {
            let Some(section) = file.first_section(sh_type) else {
                continue;
            };
            let (syms, strtab) = file.symbols(section, table)?;
            let link = section.sh_link(LE);
            let strtab_id = match strtab_links.iter().position(|&l| l == link) {
                Some(id) => id,
                None => {
                    strtab_links.push(link);
                    tables.push(strtab);
                    let offset = file.sections.get(link as usize).map(|s| s.sh_offset(LE));
                    strtabs.push(match (&source, offset) {
                        (Some(_), Some(offset)) => Strtab::InFile {
                            offset,
                            len: strtab.len() as u64,
                        },
                        _ => Strtab::Mem(strtab.into()),
                    });
                    strtabs.len() - 1
                }
            };
            add(syms, strtab, strtab_id, source_rank);
        }
        // A stripped file's local functions, from its MiniDebugInfo (same addresses); a damaged
        // one is ignored.
        let mini = if file.first_section(elf::SHT_SYMTAB).is_none() {
            file.mini_debuginfo()
        } else {
            None
        };
        if let Some(mini) = &mini
            && let Ok(inner) = RawElf::parse(mini)
            && let Some(section) = inner.first_section(elf::SHT_SYMTAB)
            && let Ok((syms, strtab)) = inner.symbols(section, ".gnu_debugdata .symtab")
        {
            tables.push(strtab);
            strtabs.push(Strtab::Mem(strtab.into()));
            add(syms, strtab, strtabs.len() - 1, 0);
        }
        let name_of = |e: &SymEntry| {
            let start = e.name_off as usize;
            &tables[usize::from(e.strtab)][start..start + usize::from(e.name_len)]
        };
        entries.sort_by(|a, b| {
            (a.vaddr, a.rank)
                .cmp(&(b.vaddr, b.rank))
                .then_with(|| name_of(a).cmp(name_of(b)))
        });
        entries.dedup_by(|later, first| {
            later.vaddr == first.vaddr && name_of(later) == name_of(first)
        });
        let file_backed = strtabs.iter().any(|t| matches!(t, Strtab::InFile { .. }));
        Ok(SymbolIndex {
            strtabs,
            file: if file_backed { source } else { None },
            entries,
            loads: file.loads,
        })
    }

    /// Reads what the index needs of `path` (at most [`MAX_ELF_BYTES`]; see
    /// [`read_symbol_parts`]) and builds it with [`SymbolIndex::from_elf`], keeping the file
    /// open to read names from when asked for.
    pub fn load(path: &Path) -> Result<SymbolIndex, ElfError> {
        let (data, source) = read_symbol_parts(path)?;
        SymbolIndex::build(&data, source).map_err(|e| in_file(path, e))
    }

    fn name(&self, e: &SymEntry) -> Option<String> {
        use std::os::unix::fs::FileExt;
        let len = usize::from(e.name_len);
        let bytes = match self.strtabs.get(usize::from(e.strtab))? {
            Strtab::Mem(t) => t.get(e.name_off as usize..)?.get(..len)?.to_vec(),
            Strtab::InFile { offset, len: size } => {
                if u64::from(e.name_off) + len as u64 > *size {
                    return None;
                }
                let mut buf = vec![0u8; len];
                self.file
                    .as_ref()?
                    .read_exact_at(&mut buf, offset + u64::from(e.name_off))
                    .ok()?;
                buf
            }
        };
        String::from_utf8(bytes).ok()
    }

    /// The preferred function symbol whose value is exactly `vaddr` (FUNC over IFUNC, then
    /// GLOBAL over WEAK over LOCAL, then `.symtab` over `.dynsym`, then the smaller name).
    pub fn lookup_exact(&self, vaddr: u64) -> Option<String> {
        let first = self.entries.partition_point(|e| e.vaddr < vaddr);
        let entry = self.entries.get(first).filter(|e| e.vaddr == vaddr)?;
        self.name(entry)
    }

    /// The function symbol containing `vaddr` (`st_value <= vaddr < st_value + max(st_size, 1)`)
    /// with the nearest start, and the offset of `vaddr` into it.
    pub fn lookup_containing(&self, vaddr: u64) -> Option<(String, u64)> {
        let end = self.entries.partition_point(|e| e.vaddr <= vaddr);
        let start = end.saturating_sub(CONTAINING_LOOKBACK);
        let candidates = &self.entries[start..end];
        // Nearest start first; within one start, the preferred (first) entry.
        let mut best: Option<&SymEntry> = None;
        for e in candidates.iter().rev() {
            let offset = vaddr - e.vaddr;
            if offset < e.size.max(1) {
                if best.is_some_and(|b| b.vaddr != e.vaddr) {
                    break;
                }
                best = Some(e);
            }
        }
        let e = best?;
        Some((self.name(e)?, vaddr - e.vaddr))
    }

    /// The virtual address a file offset is loaded at, through the first `PT_LOAD` segment
    /// whose file-backed part contains it.
    pub fn vaddr_of_file_offset(&self, off: u64) -> Option<u64> {
        self.loads.iter().find_map(|l| l.vaddr_of_file_offset(off))
    }

    /// Number of distinct `(address, name)` function symbols.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file had no function symbols.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The memory the index holds (its entries and any string table copied into memory; the
    /// string tables of a file are read from it, not held).
    pub fn heap_bytes(&self) -> usize {
        let tables: usize = self
            .strtabs
            .iter()
            .map(|t| match t {
                Strtab::Mem(b) => b.len(),
                Strtab::InFile { .. } => 0,
            })
            .sum();
        self.entries.capacity() * std::mem::size_of::<SymEntry>()
            + self.loads.capacity() * std::mem::size_of::<LoadSegment>()
            + self.strtabs.capacity() * std::mem::size_of::<Strtab>()
            + tables
    }
}

impl fmt::Debug for SymbolIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SymbolIndex")
            .field("symbols", &self.entries.len())
            .field("load_segments", &self.loads.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSegment, ObjectSymbol};
    use std::process::Command;

    const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
    const TRUE: &str = "/bin/true";

    fn read(path: &str) -> Vec<u8> {
        std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
    }

    /// Independent "readelf-style" file offset of a dynamic symbol, via object's high-level API.
    fn reference_file_offset(data: &[u8], name: &str) -> u64 {
        let file = object::File::parse(data).unwrap();
        let sym = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok(name) && s.is_definition())
            .unwrap();
        let addr = sym.address();
        let seg = file
            .segments()
            .find(|s| s.address() <= addr && addr < s.address() + s.size())
            .unwrap();
        addr - seg.address() + seg.file_range().0
    }

    #[test]
    fn libc_identity_and_malloc() {
        let data = read(LIBC);
        let info = read_elf(Path::new(LIBC)).unwrap();
        assert_eq!(info.soname.as_deref(), Some("libc.so.6"));
        let build_id = info.build_id.as_ref().expect("libc has a build-id");
        assert!(build_id.len() >= 16, "{build_id:?}");

        assert!(info.exports.len() > 1000, "{}", info.exports.len());
        assert!(info.exports.windows(2).all(|w| w[0].name < w[1].name));
        assert!(info.exports.iter().all(|e| !e.name.contains('@')));

        let malloc = info.exports.iter().find(|e| e.name == "malloc").unwrap();
        assert_eq!(malloc.file_offset, reference_file_offset(&data, "malloc"));
        assert!(malloc.size > 0);
        assert_eq!(malloc.entry_bytes.len(), ENTRY_BYTES);
        let off = malloc.file_offset as usize;
        assert_eq!(malloc.entry_bytes, data[off..off + ENTRY_BYTES]);

        // Every export's entry bytes are the file's bytes at its file offset.
        for e in &info.exports {
            let off = e.file_offset as usize;
            assert_eq!(
                e.entry_bytes,
                data[off..off + e.entry_bytes.len()],
                "{}",
                e.name
            );
        }
        // memcpy@@GLIBC_2.14 is an IFUNC (skipped); the hidden plain memcpy@GLIBC_2.2.5 must not
        // take its place.
        assert!(info.exports.iter().all(|e| e.name != "memcpy"));
    }

    #[test]
    fn libc_versioned_duplicates_keep_default_version() {
        // glibc exports several symbols in two versions (e.g. pthread_cond_wait@GLIBC_2.2.5 and
        // @@GLIBC_2.3.2); the export must be the default (non-hidden) one.
        let data = read(LIBC);
        let file = RawElf::parse(&data).unwrap();
        let dynsym = file.first_section(elf::SHT_DYNSYM).unwrap();
        let (syms, strtab) = file.symbols(dynsym, ".dynsym").unwrap();
        let versyms: &[Versym<LE>] = file
            .first_section(elf::SHT_GNU_VERSYM)
            .unwrap()
            .data_as_array(LE, &data[..])
            .unwrap();
        let info = parse_elf(&data).unwrap();
        let mut checked = 0;
        for e in &info.exports {
            let versions: Vec<(u64, bool)> = syms
                .iter()
                .zip(versyms)
                .filter(|(s, _)| {
                    s.st_type() == elf::STT_FUNC
                        && s.st_shndx(LE) != elf::SHN_UNDEF
                        && name_at(strtab, s.st_name(LE).into()) == Some(e.name.as_str())
                })
                .map(|(s, v)| (s.st_value(LE), v.0.get(LE) & elf::VERSYM_HIDDEN != 0))
                .collect();
            if versions.len() > 1 && versions.iter().any(|v| !v.1) {
                let default = versions.iter().find(|v| !v.1).unwrap();
                assert_eq!(e.vaddr, default.0, "{}", e.name);
                checked += 1;
            }
        }
        assert!(checked > 0, "libc has no multi-version function exports?");
    }

    #[test]
    fn bin_true_has_no_soname() {
        let info = read_elf(Path::new(TRUE)).unwrap();
        assert_eq!(info.soname, None);
        assert!(info.build_id.is_some());
    }

    #[test]
    fn rejects_non_elf_and_wrong_class() {
        assert!(matches!(parse_elf(b""), Err(ElfError::NotElf { .. })));
        assert!(matches!(
            parse_elf(b"#!/bin/sh\n"),
            Err(ElfError::NotElf { .. })
        ));
        assert!(matches!(
            parse_elf(b"\x7fELF"),
            Err(ElfError::Malformed { .. })
        ));
        let mut data = read(TRUE);
        data[4] = elf::ELFCLASS32;
        let err = parse_elf(&data).unwrap_err();
        assert!(matches!(err, ElfError::Unsupported { what: "class", .. }));
        assert!(err.to_string().contains("\"ELF32\""), "{err}");
        let mut data = read(TRUE);
        data[5] = elf::ELFDATA2MSB;
        assert!(matches!(
            parse_elf(&data),
            Err(ElfError::Unsupported {
                what: "byte order",
                ..
            })
        ));
        let mut data = read(TRUE);
        data[18] = elf::EM_AARCH64 as u8;
        data[19] = 0;
        let err = parse_elf(&data).unwrap_err();
        assert!(err.to_string().contains("\"AArch64\""), "{err}");
    }

    #[test]
    fn soname_read_cheaply_matches_the_full_parse() {
        // libc of this machine, found through our own maps
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("libc.so"))
            .expect("libc mapped");
        let full = read_elf(Path::new(libc)).unwrap().soname;
        assert!(full.is_some());
        assert_eq!(read_soname(Path::new(libc)), full);
        // an executable has none; a non-ELF file and a directory give None
        assert_eq!(read_soname(Path::new("/proc/self/exe")), None);
        assert_eq!(read_soname(Path::new("/proc/self/status")), None);
        assert_eq!(read_soname(Path::new("/")), None);
    }

    #[test]
    fn read_elf_errors_name_the_path() {
        let err = read_elf(Path::new("/nonexistent/libcuda.so.1")).unwrap_err();
        assert!(matches!(err, ElfError::Io { .. }));
        assert!(err.to_string().contains("\"/nonexistent/libcuda.so.1\""));
        assert!(matches!(
            read_elf(Path::new("/")),
            Err(ElfError::NotAFile { .. })
        ));
        let err = read_elf(Path::new("/etc/hostname")).unwrap_err();
        assert!(
            matches!(&err, ElfError::InFile { source, .. } if matches!(**source, ElfError::NotElf { .. }))
        );
    }

    #[test]
    fn long_names_are_bounded() {
        let table = [
            b"ok\0".as_slice(),
            &[b'a'; MAX_SYMBOL_NAME_BYTES + 10],
            b"\0",
        ]
        .concat();
        assert_eq!(name_at(&table, 0), Some("ok"));
        assert_eq!(name_at(&table, 3), None);
        assert_eq!(
            name_at(&table, 13),
            Some(&*"a".repeat(MAX_SYMBOL_NAME_BYTES))
        );
        assert_eq!(name_at(&table, u64::MAX), None);
        assert_eq!(name_at(b"no-nul", 0), None);
    }

    /// xorshift64*: deterministic, dependency-free randomness for the mutation test.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn exercise(data: &[u8]) {
        if let Ok(info) = parse_elf(data) {
            for e in &info.exports {
                assert!(e.entry_bytes.len() <= ENTRY_BYTES);
            }
        }
        if let Ok(index) = SymbolIndex::from_elf(data) {
            for addr in [0, 0x1000, 0x2_0000, u64::MAX] {
                let _ = index.lookup_exact(addr);
                let _ = index.lookup_containing(addr);
                let _ = index.vaddr_of_file_offset(addr);
            }
        }
    }

    /// Offsets of the structures a mutation is most likely to break: headers, tables.
    fn interesting_ranges(data: &[u8]) -> Vec<(usize, usize)> {
        let mut ranges = vec![(0, data.len().min(4096))];
        if let Ok(file) = RawElf::parse(data) {
            let shoff = FileHeader64::<LE>::parse(data).unwrap().e_shoff(LE) as usize;
            ranges.push((shoff, file.sections.len() * 64));
            for s in file.sections {
                if matches!(
                    s.sh_type(LE),
                    elf::SHT_DYNSYM | elf::SHT_DYNAMIC | elf::SHT_NOTE | elf::SHT_GNU_VERSYM
                ) && let Some((off, size)) = s.file_range(LE)
                {
                    ranges.push((off as usize, (size as usize).min(8192)));
                }
            }
        }
        ranges.retain(|&(off, len)| len > 0 && off + len <= data.len());
        ranges
    }

    #[test]
    fn never_panics_on_truncated_or_mutated_files() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for path in [TRUE, LIBC] {
            let original = read(path);
            // Truncations: every length in the headers, then spread over the file.
            let header_lengths = if path == LIBC { 0..128 } else { 0..512 };
            for len in header_lengths.chain((0..150).map(|_| rng.below(original.len()))) {
                exercise(&original[..len]);
            }
            let ranges = interesting_ranges(&original);
            let mut data = original.clone();
            let rounds = if path == LIBC { 700 } else { 3000 };
            for round in 0..rounds {
                // 1–4 byte changes, mostly in headers and tables, sometimes anywhere.
                let mut changed = Vec::new();
                for _ in 0..=rng.below(4) {
                    let pos = if round % 4 == 0 {
                        rng.below(data.len())
                    } else {
                        let (off, len) = ranges[rng.below(ranges.len())];
                        off + rng.below(len)
                    };
                    changed.push((pos, data[pos]));
                    data[pos] = match rng.below(3) {
                        0 => data[pos] ^ (1 << rng.below(8)),
                        1 => 0xff,
                        _ => rng.next() as u8,
                    };
                }
                exercise(&data);
                for (pos, byte) in changed.into_iter().rev() {
                    data[pos] = byte;
                }
            }
            assert_eq!(data, original);
        }
        // Pure garbage behind a valid magic.
        for _ in 0..200 {
            let mut junk: Vec<u8> = (0..rng.below(4096)).map(|_| rng.next() as u8).collect();
            if junk.len() >= 6 {
                junk[..6].copy_from_slice(b"\x7fELF\x02\x01");
            }
            exercise(&junk);
        }
    }

    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "gpuprofd-elf-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Compiles `src` with gcc and extra flags; None (test skipped) when gcc is not installed.
    fn compile(dir: &Path, out: &str, flags: &[&str]) -> Option<PathBuf> {
        let src = dir.join("stub.c");
        std::fs::write(
            &src,
            "__attribute__((noinline, used)) static void local_stub(void) { __asm__ volatile(\"\"); }\n\
             void global_fn(void) { local_stub(); }\n\
             int main(void) { global_fn(); return 0; }\n",
        )
        .unwrap();
        let out = dir.join(out);
        let status = match Command::new("gcc")
            .args(["-O0", "-fno-inline", "-o"])
            .arg(&out)
            .arg(&src)
            .args(flags)
            .status()
        {
            Ok(status) => status,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("gcc not installed: skipping");
                return None;
            }
            Err(e) => panic!("running gcc: {e}"),
        };
        assert!(status.success(), "gcc failed");
        Some(out)
    }

    fn symtab_address(path: &Path, name: &str) -> u64 {
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} not in .symtab"))
            .address()
    }

    #[test]
    fn symbol_index_finds_local_symbols_in_symtab() {
        let dir = TempDir::new("symtab");
        let Some(exe) = compile(&dir.0, "stub", &[]) else {
            return;
        };
        let index = SymbolIndex::load(&exe).unwrap();
        assert!(!index.is_empty());
        let local = symtab_address(&exe, "local_stub");
        let global = symtab_address(&exe, "global_fn");
        assert_eq!(index.lookup_exact(local).as_deref(), Some("local_stub"));
        assert_eq!(index.lookup_exact(global).as_deref(), Some("global_fn"));
        assert_eq!(
            index.lookup_containing(local + 1),
            Some(("local_stub".into(), 1))
        );
        assert_eq!(
            index.lookup_containing(global),
            Some(("global_fn".into(), 0))
        );
        assert_eq!(index.lookup_exact(local + 1), None);

        // File offset ↔ vaddr through PT_LOAD agrees with the export-side computation.
        let data = std::fs::read(&exe).unwrap();
        let file = RawElf::parse(&data).unwrap();
        let (off, _) = file_offset_of(&file.loads, local).unwrap();
        assert_eq!(index.vaddr_of_file_offset(off), Some(local));
    }

    #[test]
    fn symbol_index_of_stripped_library_has_only_dynsym() {
        let dir = TempDir::new("stripped");
        let Some(full) = compile(&dir.0, "libfull.so", &["-shared", "-fPIC"]) else {
            return;
        };
        let stripped = compile(&dir.0, "libstripped.so", &["-shared", "-fPIC", "-s"]).unwrap();
        let local = symtab_address(&full, "local_stub");
        let global = symtab_address(&full, "global_fn");
        assert_eq!(
            SymbolIndex::load(&full).unwrap().lookup_exact(local),
            Some("local_stub".into())
        );

        let index = SymbolIndex::load(&stripped).unwrap();
        assert!(
            index
                .entries
                .iter()
                .all(|e| index.name(e).as_deref() != Some("local_stub"))
        );
        assert_ne!(index.lookup_exact(local).as_deref(), Some("local_stub"));
        assert_eq!(index.lookup_exact(global).as_deref(), Some("global_fn"));

        let info = read_elf(&stripped).unwrap();
        assert!(info.exports.iter().any(|e| e.name == "global_fn"));
        assert!(info.exports.iter().all(|e| e.name != "local_stub"));
    }

    /// What an index holds, comparable: (vaddr, size, rank, name) of every entry, and the
    /// load segments.
    type Contents = (Vec<(u64, u64, u8, String)>, Vec<LoadSegment>);
    fn index_contents(index: &SymbolIndex) -> Contents {
        let entries = index
            .entries
            .iter()
            .map(|e| (e.vaddr, e.size, e.rank, index.name(e).unwrap().to_owned()))
            .collect();
        (entries, index.loads.clone())
    }

    #[test]
    fn symbol_index_from_the_parts_read_equals_the_whole_file_index() {
        let dir = TempDir::new("parts");
        let mut files = vec![PathBuf::from(LIBC), std::env::current_exe().unwrap()];
        if let Some(lib) = compile(&dir.0, "libfull.so", &["-shared", "-fPIC"]) {
            files.push(lib);
            files.push(compile(&dir.0, "libstripped.so", &["-shared", "-fPIC", "-s"]).unwrap());
        }
        for f in &files {
            let whole = SymbolIndex::from_elf(&std::fs::read(f).unwrap()).unwrap();
            let (parts, source) = read_symbol_parts(f).unwrap();
            assert!(
                matches!(parts, FileBytes::Sparse(_)) && source.is_some(),
                "{} was read whole",
                f.display()
            );
            let loaded = SymbolIndex::build(&parts, source).unwrap();
            // Its names are read from the file, not kept: only MiniDebugInfo's are copies.
            assert!(loaded.file.is_some(), "{}", f.display());
            assert!(
                loaded
                    .strtabs
                    .iter()
                    .all(|t| matches!(t, Strtab::InFile { .. })),
                "{}",
                f.display()
            );
            drop(parts);
            assert!(!whole.is_empty(), "{}", f.display());
            assert_eq!(
                index_contents(&loaded),
                index_contents(&whole),
                "{}",
                f.display()
            );
        }
        // What is not ELF, or is cut short, is refused as the whole file would be.
        let junk = dir.0.join("junk");
        std::fs::write(&junk, b"#!/bin/sh\necho not an elf\n").unwrap();
        assert!(matches!(
            SymbolIndex::load(&junk),
            Err(ElfError::InFile { source, .. }) if matches!(*source, ElfError::NotElf { .. })
        ));
        let cut = dir.0.join("cut.so");
        let bytes = std::fs::read(LIBC).unwrap();
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let err = SymbolIndex::load(&cut).err().map(|e| e.to_string());
        let whole_err = SymbolIndex::from_elf(&bytes[..bytes.len() / 2])
            .err()
            .map(|e| in_file(&cut, e).to_string());
        assert_eq!(err, whole_err);
        let empty = dir.0.join("empty");
        std::fs::write(&empty, b"").unwrap();
        assert!(SymbolIndex::load(&empty).is_err());
    }

    #[test]
    fn symbol_index_of_libc_names_malloc() {
        let index = SymbolIndex::load(Path::new(LIBC)).unwrap();
        let info = read_elf(Path::new(LIBC)).unwrap();
        let malloc = info.exports.iter().find(|e| e.name == "malloc").unwrap();
        assert_eq!(
            index.vaddr_of_file_offset(malloc.file_offset),
            Some(malloc.vaddr)
        );
        let (name, off) = index.lookup_containing(malloc.vaddr + 1).unwrap();
        assert_eq!((index.lookup_exact(malloc.vaddr).is_some(), off), (true, 1));
        assert!(!name.is_empty());
    }
}

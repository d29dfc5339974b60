//! Address → function name for one file: its `.symtab` and `.dynsym` function symbols (and
//! those of its `.gnu_debugdata`), with the string tables read in pieces from the open file.

use super::raw::*;
use super::*;

/// The parts of `path` a [`SymbolIndex`] reads, at their offsets in a buffer the file's size:
/// the ELF, program and section headers, every symbol and string table and `.gnu_debugdata`.
/// The rest stays unread and, in a buffer of more than a few pages, unbacked (zeroed pages the
/// kernel has not handed out): a PyTorch process's stack goes through libraries of 0.45 GB,
/// of which the symbol tables are a sixth; reading them whole took 0.5–1.6 s each, and as
/// much memory, while the records behind the stack waited. A file whose headers do not
/// describe it is read whole, for the parser to say what is wrong with it.
pub(super) fn read_symbol_parts(path: &Path) -> Result<(FileBytes, Option<File>), ElfError> {
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
pub(super) enum FileBytes {
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

/// Function symbols (`STT_FUNC`, `STT_GNU_IFUNC`) of `.symtab` and `.dynsym`, for address → name.
///
/// Used to name a runtime launch's host-stub address, which is usually a LOCAL symbol present
/// only in `.symtab`. Names are kept in copies of the string tables, so memory is bounded by the
/// file's size whatever the symbols point at.
pub struct SymbolIndex {
    /// The string tables the entries point into.
    pub(super) strtabs: Vec<Strtab>,
    /// The file [`Strtab::InFile`] tables are read from (kept open: a file replaced on disk
    /// since is still this one).
    pub(super) file: Option<File>,
    /// Sorted by `(vaddr, preference, name)`; one entry per distinct `(vaddr, name)`.
    pub(super) entries: Vec<SymEntry>,
    pub(super) loads: Vec<LoadSegment>,
}

/// Where a string table's bytes are.
pub(super) enum Strtab {
    /// A copy (an index built from bytes in memory; MiniDebugInfo's table).
    Mem(Box<[u8]>),
    /// In the index's file, at this offset: the names of an index loaded from a file are read
    /// from it when asked for. PyTorch's two largest libraries hold 150 MB of string tables,
    /// which the daemon would otherwise keep for as long as it names their frames.
    InFile { offset: u64, len: u64 },
}

#[derive(Debug, Clone, Copy)]
pub(super) struct SymEntry {
    pub(super) vaddr: u64,
    pub(super) size: u64,
    pub(super) name_off: u32,
    pub(super) name_len: u16,
    pub(super) strtab: u8,
    /// Lower is preferred: FUNC before IFUNC, GLOBAL before WEAK before LOCAL, .symtab first.
    pub(super) rank: u8,
}

/// How many entries [`SymbolIndex::lookup_containing`] looks back for an enclosing symbol.
pub(super) const CONTAINING_LOOKBACK: usize = 64;

impl SymbolIndex {
    /// Builds the index from a file in memory. A file without symbol tables gives an empty index.
    pub fn from_elf(data: &[u8]) -> Result<SymbolIndex, ElfError> {
        SymbolIndex::build(data, None)
    }

    /// [`SymbolIndex::from_elf`]; with `source`, the file `data` was read from, whose string
    /// tables are then read from it when a name is asked for instead of being copied.
    pub(super) fn build(data: &[u8], source: Option<File>) -> Result<SymbolIndex, ElfError> {
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

    pub(super) fn name(&self, e: &SymEntry) -> Option<String> {
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

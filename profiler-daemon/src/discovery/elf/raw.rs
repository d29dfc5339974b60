//! The ELF layer under the readers: a parsed file's sections, segments, symbol tables and
//! notes, bounds-checked on top of `object`'s raw ELF types, and the `.gnu_debugdata`
//! (MiniDebugInfo) it may carry.

use super::*;

/// A sink that refuses to grow past [`MAX_DEBUGDATA`] (a decompression bomb stops there).
pub(super) struct Bounded(Vec<u8>);

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

/// A `PT_LOAD` segment: how virtual addresses map to file offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LoadSegment {
    pub(super) vaddr: u64,
    pub(super) memsz: u64,
    pub(super) offset: u64,
    pub(super) filesz: u64,
}

impl LoadSegment {
    pub(super) fn from_header(ph: &ProgramHeader64<LE>) -> Self {
        LoadSegment {
            vaddr: ph.p_vaddr(LE),
            memsz: ph.p_memsz(LE),
            offset: ph.p_offset(LE),
            filesz: ph.p_filesz(LE),
        }
    }

    /// `(file offset, bytes file-backed from there)` of `vaddr`, if the segment maps it.
    pub(super) fn file_offset_of(&self, vaddr: u64) -> Option<(u64, u64)> {
        let delta = vaddr.checked_sub(self.vaddr)?;
        if delta >= self.memsz {
            return None;
        }
        Some((
            self.offset.checked_add(delta)?,
            self.filesz.saturating_sub(delta),
        ))
    }

    pub(super) fn vaddr_of_file_offset(&self, off: u64) -> Option<u64> {
        let delta = off.checked_sub(self.offset)?;
        if delta >= self.filesz {
            return None;
        }
        self.vaddr.checked_add(delta)
    }
}

pub(super) fn file_offset_of(loads: &[LoadSegment], vaddr: u64) -> Option<(u64, u64)> {
    loads.iter().find_map(|l| l.file_offset_of(vaddr))
}

/// At most `len` bytes of `data` from `offset` (fewer if the data ends first).
pub(super) fn bytes_at(data: &[u8], offset: u64, len: u64) -> &[u8] {
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
pub(super) fn name_at(strtab: &[u8], offset: u64) -> Option<&str> {
    let rest = strtab.get(usize::try_from(offset).ok()?..)?;
    let window = &rest[..rest.len().min(MAX_SYMBOL_NAME_BYTES + 1)];
    let end = window.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&window[..end]).ok()
}

/// A validated header plus the tables every query needs.
pub(super) struct RawElf<'a> {
    pub(super) data: &'a [u8],
    pub(super) phdrs: &'a [ProgramHeader64<LE>],
    pub(super) sections: &'a [SectionHeader64<LE>],
    /// Section names (empty when the file has none).
    pub(super) shstrtab: &'a [u8],
    pub(super) loads: Vec<LoadSegment>,
}

impl<'a> RawElf<'a> {
    pub(super) fn parse(data: &'a [u8]) -> Result<Self, ElfError> {
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

    pub(super) fn section_named(&self, name: &str) -> Option<&'a SectionHeader64<LE>> {
        self.sections
            .iter()
            .find(|s| name_at(self.shstrtab, u64::from(s.sh_name(LE))) == Some(name))
    }

    /// The MiniDebugInfo ELF (`.gnu_debugdata`, xz-compressed, as Fedora and others ship to
    /// name a stripped file's local functions), decompressed within bounds.
    pub(super) fn mini_debuginfo(&self) -> Option<Vec<u8>> {
        let section = self.section_named(".gnu_debugdata")?;
        let packed = section.data(LE, self.data).ok()?;
        if packed.len() as u64 > MAX_DEBUGDATA_PACKED {
            return None;
        }
        let mut out = Bounded(Vec::new());
        lzma_rs::xz_decompress(&mut std::io::BufReader::new(packed), &mut out).ok()?;
        Some(out.0)
    }

    pub(super) fn first_section(&self, sh_type: u32) -> Option<&'a SectionHeader64<LE>> {
        self.sections.iter().find(|s| s.sh_type(LE) == sh_type)
    }

    /// The raw bytes of the string table a section links to.
    pub(super) fn linked_strtab(
        &self,
        section: &SectionHeader64<LE>,
    ) -> Result<&'a [u8], ElfError> {
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
    pub(super) fn symbols(
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

    pub(super) fn soname(&self) -> Option<String> {
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

    pub(super) fn build_id(&self) -> Option<Vec<u8>> {
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

    pub(super) fn exports(&self) -> Result<Vec<ExportedFn>, ElfError> {
        self.functions(elf::SHT_DYNSYM)
    }

    /// Defined global/weak functions of `.dynsym` (exports: default or protected visibility)
    /// or of `.symtab` (any visibility: a statically linked library's functions are often
    /// hidden in the final object yet are real entry points).
    pub(super) fn functions(&self, table: u32) -> Result<Vec<ExportedFn>, ElfError> {
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

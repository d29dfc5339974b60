use super::raw::*;
use super::symbols::*;
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
    // The small-read path (notes segments only) finds the same one.
    assert_eq!(read_build_id(Path::new(LIBC)).as_ref(), Some(build_id));
    assert_eq!(read_build_id(Path::new("/nonexistent/libc.so.6")), None);

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

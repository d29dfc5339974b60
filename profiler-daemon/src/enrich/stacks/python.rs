//! CPython processes: which interpreter a process runs, where its `_PyRuntime` is, and the
//! code objects the probes' Python frames point at (file, function, line).
//!
//! The probes walk the interpreter's thread states and frames in the kernel (they need only
//! the offsets in [`PyOffsets`]); everything else — strings, line tables — is read here from
//! `/proc/PID/mem` when a frame is first met, and cached per code object.
//!
//! Supported: CPython 3.9 to 3.13 on x86-64 (offsets per version below, taken from each
//! version's headers — pyenv's 3.9.18, 3.10.13, 3.12.1 and 3.13.0 builds, Debian's 3.11.2 and
//! 3.13.18 packages, the 3.12.6 release sources — by compiling `offsetof` against them; 3.12.1
//! and 3.12.6, 3.13.0 and 3.13.18 agree on every field read). 3.9 and 3.10 keep no kernel
//! thread id in their thread states, only `pthread_self()`: the probe matches that against
//! the calling thread's FS base, read from its `task_struct` at the offset the kernel's BTF
//! gives ([`crate::sys::btf`]); without BTF those versions get native frames only.

use profiler_common::{PY_NONE, PyOffsets};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, OnceLock};

/// Where one CPython version keeps what gpuprofd reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyLayout {
    pub minor: u8,
    /// For the probes.
    pub probe: PyOffsets,
    pub code_filename: u64,
    /// `co_qualname` (3.11+), the function's dotted name; `co_name` before 3.11.
    pub code_qualname: u64,
    pub code_firstlineno: u64,
    /// `co_linetable` (3.10+) or `co_lnotab` (3.9); see [`PyCode::line_at`] for each format.
    pub code_linetable: u64,
    /// `co_code_adaptive` (3.11+: where the bytecode starts in the code object); 0 before.
    pub code_adaptive: u64,
    /// The thread-state match needs the calling thread's FS base (3.9, 3.10).
    pub match_fsbase: bool,
    /// `str` and `bytes` objects.
    pub obj: PyObjLayout,
}

/// Where `str` and `bytes` objects keep their length, state and characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyObjLayout {
    pub unicode_length: u64,
    pub unicode_state: u64,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    pub ascii_size: u64,
    /// `sizeof(PyCompactUnicodeObject)`: where a compact non-ASCII string's characters start.
    pub compact_size: u64,
    pub state_kind_shift: u32,
    pub state_compact_bit: u32,
    pub state_ascii_bit: u32,
    pub bytes_size: u64,
    pub bytes_sval: u64,
}

/// 3.9–3.11: strings still carry the legacy `wstr` pointer (and `wstr_length` when compact).
const OBJ_WSTR: PyObjLayout = PyObjLayout {
    unicode_length: 16,
    unicode_state: 32,
    ascii_size: 48,
    compact_size: 72,
    state_kind_shift: 2,
    state_compact_bit: 5,
    state_ascii_bit: 6,
    bytes_size: 16,
    bytes_sval: 32,
};

/// 3.12+: `wstr` is gone, so the characters start 8 (ASCII) and 16 (compact) bytes earlier.
const OBJ_312: PyObjLayout = PyObjLayout {
    ascii_size: 40,
    compact_size: 56,
    ..OBJ_WSTR
};

const fn probe_offsets(
    runtime_interp_head: u32,
    interp_threads_head: u32,
    tstate_next: u32,
    tstate_native_tid: u32,
    tstate_frame: u32,
    cframe_current: u32,
    frame: [u32; 5],
) -> PyOffsets {
    PyOffsets {
        runtime_interp_head,
        interp_threads_head,
        tstate_next,
        tstate_native_tid,
        tstate_frame,
        cframe_current,
        frame_code: frame[0],
        frame_previous: frame[1],
        frame_instr: frame[2],
        frame_owner: frame[3],
        owner_cstack: frame[4],
        task_fsbase: PY_NONE,
    }
}

/// 3.9: frames are `PyFrameObject`s (`f_back`, `f_code`, `int f_lasti`), thread states are
/// found by `thread_id` (`pthread_self()`), names are `co_name`.
const PY39: PyLayout = PyLayout {
    minor: 9,
    probe: probe_offsets(32, 8, 8, 176, 24, PY_NONE, [32, 24, 104, PY_NONE, PY_NONE]),
    code_filename: 104,
    code_qualname: 112,
    code_firstlineno: 40,
    code_linetable: 120,
    code_adaptive: 0,
    match_fsbase: true,
    obj: OBJ_WSTR,
};

/// The versions whose frames the probes can walk.
pub static LAYOUTS: &[PyLayout] = &[
    PY39,
    // 3.10 differs from 3.9 only in where `f_lasti` sits (and in its line table's format).
    PyLayout {
        minor: 10,
        probe: probe_offsets(32, 8, 8, 176, 24, PY_NONE, [32, 24, 96, PY_NONE, PY_NONE]),
        ..PY39
    },
    PyLayout {
        minor: 11,
        probe: probe_offsets(40, 16, 8, 160, 56, 8, [32, 48, 56, 69, PY_NONE]),
        code_filename: 112,
        code_qualname: 128,
        code_firstlineno: 72,
        code_linetable: 136,
        code_adaptive: 184,
        match_fsbase: false,
        obj: OBJ_WSTR,
    },
    // 3.12: the frame's code and link moved to the front; C-stack shim frames (owner 3).
    PyLayout {
        minor: 12,
        probe: probe_offsets(40, 72, 8, 144, 56, 0, [0, 8, 56, 70, 3]),
        code_filename: 112,
        code_qualname: 128,
        code_firstlineno: 68,
        code_linetable: 136,
        code_adaptive: 192,
        match_fsbase: false,
        obj: OBJ_312,
    },
    // 3.13 (from 3.13.18's headers; `_PyRuntime` starts with the debug offsets table, and the
    // interpreter state has grown within the 3.13 series: earlier patch releases unchecked).
    PyLayout {
        minor: 13,
        probe: probe_offsets(632, 7344, 8, 160, 72, PY_NONE, [0, 8, 56, 70, 3]),
        code_filename: 112,
        code_qualname: 128,
        code_firstlineno: 68,
        code_linetable: 136,
        code_adaptive: 200,
        match_fsbase: false,
        obj: OBJ_312,
    },
];

/// The layout of CPython 3.`minor`, if supported.
pub fn layout(minor: u8) -> Option<&'static PyLayout> {
    LAYOUTS.iter().find(|l| l.minor == minor)
}

/// A CPython interpreter found in a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyInterp {
    /// The mapped file that holds the interpreter (the `python3.X` executable or `libpython`).
    pub module: String,
    pub minor: u8,
    /// Address of `_PyRuntime` in the process.
    pub runtime: u64,
    /// `None`: a version whose frames are not read (see the module docs).
    pub layout: Option<&'static PyLayout>,
}

impl PyInterp {
    /// What the probes need to read this process's Python frames (`None`: not read).
    pub fn probe(&self) -> Option<profiler_common::PyProc> {
        let l = self.layout?;
        let mut off = l.probe;
        if l.match_fsbase {
            off.task_fsbase = crate::sys::btf::task_fsbase()?;
        }
        Some(profiler_common::PyProc {
            runtime: self.runtime,
            off,
        })
    }
}

/// What an interpreter file says: `_PyRuntime`'s link-time address, the minor version (from
/// `Py_Version`, else the file name) and its load segments `(offset, file bytes, vaddr)`.
type InterpFile = (u64, u8, Vec<(u64, u64, u64)>);

/// By file identity (the same interpreter seen through many `/proc/PID/root` paths is read
/// once); bounded by [`MAX_INTERP_FILES`].
type FileCache = HashMap<crate::enrich::process::FileKey, Option<InterpFile>>;

fn file_cache() -> &'static Mutex<FileCache> {
    static C: OnceLock<Mutex<FileCache>> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// Most interpreter files remembered at once.
const MAX_INTERP_FILES: usize = 256;

/// Bytes of an interpreter file read at most (a static python3.X is ~7 MiB; libpython ~25 MiB
/// with symbols).
const MAX_INTERP_FILE: u64 = 256 << 20;

/// Whether a mapped file's name looks like a CPython interpreter: its minor version, and
/// whether it is a free-threaded build (`python3.13t`, `libpython3.13t.so`), whose objects
/// are laid out differently (their frames are not read).
fn looks_like_python(path: &str) -> Option<(u8, bool)> {
    let base = path.rsplit('/').next().unwrap_or(path);
    let rest = base
        .strip_prefix("libpython3.")
        .or_else(|| base.strip_prefix("python3."))?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let free_threaded = rest[digits.len()..].starts_with('t');
    Some((digits.parse().ok()?, free_threaded))
}

/// From 3.13, `_PyRuntime` starts with the debugger offsets table: cookie `xdebugpy`, the
/// version, then whether the build is free-threaded. `Some(true)` for a free-threaded build,
/// `None` when the table is not there to say.
fn runtime_says_free_threaded(tgid: u32, runtime: u64) -> Option<bool> {
    let mem = File::open(format!("/proc/{tgid}/mem")).ok()?;
    let head = read_mem(&mem, runtime, 24)?;
    (&head[..8] == b"xdebugpy").then(|| head[16..24] != [0; 8])
}

fn interp_file(path: &std::path::Path, name_minor: u8) -> Option<InterpFile> {
    let key = crate::enrich::process::file_key(path)?;
    let mut cache = file_cache().lock().ok()?;
    if let Some(v) = cache.get(&key) {
        return v.clone();
    }
    if cache.len() >= MAX_INTERP_FILES {
        cache.clear();
    }
    let found = (|| {
        let meta = std::fs::metadata(path).ok()?;
        if meta.len() > MAX_INTERP_FILE {
            return None;
        }
        let data = std::fs::read(path).ok()?;
        let syms =
            crate::discovery::elf::data_symbols(&data, &["_PyRuntime", "Py_Version"], 4).ok()?;
        let runtime = syms.get("_PyRuntime")?.vaddr;
        // Py_Version (3.11+) is PY_VERSION_HEX: 0xMMmmppRS.
        let minor = syms
            .get("Py_Version")
            .and_then(|s| <[u8; 4]>::try_from(s.bytes.as_slice()).ok())
            .map(u32::from_le_bytes)
            .filter(|v| v >> 24 == 3)
            .map_or(name_minor, |v| ((v >> 16) & 0xff) as u8);
        let loads = crate::discovery::elf::load_segments(&data).ok()?;
        Some((runtime, minor, loads))
    })();
    cache.insert(key, found.clone());
    found
}

/// The CPython interpreter of `tgid`, if it runs one (`None`: not Python, or gone).
pub fn detect(tgid: u32) -> Option<PyInterp> {
    let maps = std::fs::read_to_string(format!("/proc/{tgid}/maps")).ok()?;
    let mut tried = Vec::new();
    for m in crate::discovery::parse_maps(&maps) {
        let Some((name_minor, free_threaded)) = looks_like_python(&m.path) else {
            continue;
        };
        if tried.contains(&m.path) {
            continue;
        }
        tried.push(m.path.clone());
        let clean = m.path.strip_suffix(" (deleted)").unwrap_or(&m.path);
        let Some(opened) = crate::discovery::open_mapping(tgid, &m) else {
            continue;
        };
        let Some((runtime_vaddr, minor, loads)) = interp_file(&opened.path, name_minor) else {
            continue;
        };
        // The mapping's start is its file offset's link-time address plus the load bias.
        let Some(map_vaddr) = loads.iter().find_map(|&(off, filesz, vaddr)| {
            let d = m.offset.checked_sub(off)?;
            (d < filesz).then(|| vaddr + d)
        }) else {
            continue;
        };
        let bias = m.start.wrapping_sub(map_vaddr);
        let runtime = runtime_vaddr.wrapping_add(bias);
        let free_threaded = free_threaded
            || (minor >= 13 && runtime_says_free_threaded(tgid, runtime) == Some(true));
        return Some(PyInterp {
            module: clean.to_owned(),
            minor,
            runtime,
            // 3.9/3.10 frames need the FS base's place in the kernel's task_struct.
            layout: layout(minor).filter(|l| {
                !free_threaded && (!l.match_fsbase || crate::sys::btf::task_fsbase().is_some())
            }),
        });
    }
    None
}

/// A code object, as much as the report needs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PyCode {
    pub filename: String,
    pub qualname: String,
    pub firstlineno: u32,
    /// `co_linetable` (the 3.11+ location table).
    #[serde(with = "serde_bytes")]
    pub linetable: Vec<u8>,
    /// Bytes from the code object's start to its bytecode (`co_code_adaptive`).
    pub code_adaptive: u64,
}

/// Longest string and line table read from a process.
const MAX_STR: u64 = 1024;
const MAX_LINETABLE: u64 = 64 << 10;

fn read_mem(mem: &File, addr: u64, len: u64) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    mem.read_exact_at(&mut buf, addr).ok()?;
    Some(buf)
}

fn read_u64(mem: &File, addr: u64) -> Option<u64> {
    let b = read_mem(mem, addr, 8)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// A `str` object's text (compact strings, which is all the interpreter makes for names).
fn read_str(mem: &File, l: &PyObjLayout, obj: u64) -> Option<String> {
    let len = read_u64(mem, obj + l.unicode_length)?.min(MAX_STR);
    let state = u32::from_le_bytes(read_mem(mem, obj + l.unicode_state, 4)?.try_into().ok()?);
    let kind = (state >> l.state_kind_shift) & 7;
    let compact = state >> l.state_compact_bit & 1 == 1;
    let ascii = state >> l.state_ascii_bit & 1 == 1;
    if !compact {
        return None;
    }
    if ascii {
        let b = read_mem(mem, obj + l.ascii_size, len)?;
        return Some(String::from_utf8_lossy(&b).into_owned());
    }
    let width = u64::from(kind);
    if !matches!(width, 1 | 2 | 4) {
        return None;
    }
    let b = read_mem(mem, obj + l.compact_size, len * width)?;
    let chars: String = b
        .chunks_exact(width as usize)
        .map(|c| {
            let v = match width {
                1 => u32::from(c[0]),
                2 => u32::from(u16::from_le_bytes([c[0], c[1]])),
                _ => u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            };
            char::from_u32(v).unwrap_or('\u{fffd}')
        })
        .collect();
    Some(chars)
}

/// Why a code object could not be read (the next stack through it tries again).
#[derive(Debug, thiserror::Error)]
pub enum CodeReadError {
    #[error("/proc/{tgid}/mem: {source}")]
    Mem {
        tgid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("code object 0x{code:x}: {field} unreadable")]
    Field { code: u64, field: &'static str },
}

/// Reads the code object at `code` in `tgid`.
pub fn read_code(tgid: u32, l: &PyLayout, code: u64) -> Result<PyCode, CodeReadError> {
    let mem = File::open(format!("/proc/{tgid}/mem"))
        .map_err(|source| CodeReadError::Mem { tgid, source })?;
    let field = |field| CodeReadError::Field { code, field };
    let filename = read_u64(&mem, code + l.code_filename)
        .and_then(|s| read_str(&mem, &l.obj, s))
        .ok_or_else(|| field("co_filename"))?;
    let qualname = read_u64(&mem, code + l.code_qualname)
        .and_then(|s| read_str(&mem, &l.obj, s))
        .ok_or_else(|| field("co_qualname"))?;
    let firstlineno = read_mem(&mem, code + l.code_firstlineno, 4)
        .and_then(|b| Some(u32::from_le_bytes(b.try_into().ok()?)))
        .ok_or_else(|| field("co_firstlineno"))?;
    let linetable = read_u64(&mem, code + l.code_linetable)
        .and_then(|lt| {
            let len = read_u64(&mem, lt + l.obj.bytes_size)?.min(MAX_LINETABLE);
            read_mem(&mem, lt + l.obj.bytes_sval, len)
        })
        .ok_or_else(|| field("co_linetable"))?;
    Ok(PyCode {
        filename,
        qualname,
        firstlineno,
        linetable,
        code_adaptive: l.code_adaptive,
    })
}

impl PyCode {
    /// The source line of the instruction a frame of CPython 3.`minor` stands at: `instr` is
    /// what the probe read (a pointer into the bytecode from 3.11; before, 8 bytes whose low
    /// half is the `int f_lasti`), for a frame whose code object is at `code`.
    pub fn line_at(&self, minor: u8, code: u64, instr: u64) -> Option<u32> {
        if minor < 11 {
            // f_lasti: a byte offset in 3.9, an instruction index in 3.10; -1 before the
            // first instruction.
            let lasti = u64::try_from(instr as u32 as i32).ok()?;
            return if minor == 9 {
                lnotab_line(&self.linetable, self.firstlineno, lasti)
            } else {
                linetable310_line(&self.linetable, self.firstlineno, lasti * 2)
            };
        }
        let start = code.checked_add(self.code_adaptive)?;
        // 3.11/3.12 `prev_instr` may point at the call's last inline cache entry, 3.13
        // `instr_ptr` at the call itself: the location table covers both with the call's line.
        let byte = instr.checked_sub(start)?;
        line_for_offset(&self.linetable, self.firstlineno, byte / 2)
    }
}

/// The line of bytecode offset `byte` from a 3.9 `co_lnotab` (`PyCode_Addr2Line`): pairs of
/// (bytecode offset increment, signed line increment); the line is the one in force at the
/// last offset not past `byte`.
pub fn lnotab_line(table: &[u8], firstlineno: u32, byte: u64) -> Option<u32> {
    let mut line = i64::from(firstlineno);
    let mut addr: u64 = 0;
    for pair in table.chunks_exact(2) {
        addr += u64::from(pair[0]);
        if addr > byte {
            break;
        }
        line += i64::from(pair[1] as i8);
    }
    u32::try_from(line).ok().filter(|&l| l > 0)
}

/// The line of bytecode offset `byte` from a 3.10 `co_linetable` (PEP 626): pairs of (range
/// length in bytes, signed line delta, -128 for "no line"), each pair one address range.
pub fn linetable310_line(table: &[u8], firstlineno: u32, byte: u64) -> Option<u32> {
    let mut line = i64::from(firstlineno);
    let mut start: u64 = 0;
    for pair in table.chunks_exact(2) {
        let end = start + u64::from(pair[0]);
        let delta = pair[1] as i8;
        let here = if delta == -128 {
            None
        } else {
            line += i64::from(delta);
            Some(line)
        };
        if byte >= start && byte < end {
            return here.and_then(|l| u32::try_from(l).ok()).filter(|&l| l > 0);
        }
        start = end;
    }
    None
}

fn varint(t: &[u8], i: &mut usize) -> Option<u32> {
    let mut v: u32 = 0;
    let mut shift = 0;
    loop {
        let b = *t.get(*i)?;
        *i += 1;
        v |= u32::from(b & 63).checked_shl(shift)?;
        shift += 6;
        if b & 64 == 0 || shift > 30 {
            return Some(v);
        }
    }
}

fn svarint(t: &[u8], i: &mut usize) -> Option<i64> {
    let u = varint(t, i)?;
    Some(if u & 1 == 1 {
        -i64::from(u >> 1)
    } else {
        i64::from(u >> 1)
    })
}

/// The line of code unit `unit` from a 3.11+ location table (`Objects/locations.md`): entries
/// of `(code, length)` headers with a line delta per entry; `None` for "no location".
pub fn line_for_offset(table: &[u8], firstlineno: u32, unit: u64) -> Option<u32> {
    let mut line = i64::from(firstlineno);
    let mut at: u64 = 0;
    let mut i = 0;
    while i < table.len() {
        let head = table[i];
        if head & 0x80 == 0 {
            return None; // not at an entry start: a damaged table
        }
        i += 1;
        let code = (head >> 3) & 15;
        let len = u64::from(head & 7) + 1;
        let (delta, located) = match code {
            15 => (0, false),
            14 => {
                let d = svarint(table, &mut i)?;
                varint(table, &mut i)?; // end line delta
                varint(table, &mut i)?; // column + 1
                varint(table, &mut i)?; // end column + 1
                (d, true)
            }
            13 => (svarint(table, &mut i)?, true),
            10..=12 => {
                i += 2; // start and end column
                (i64::from(code) - 10, true)
            }
            _ => {
                i += 1; // column bits
                (0, true)
            }
        };
        line += delta;
        if unit < at + len {
            return (located && line > 0)
                .then(|| u32::try_from(line).ok())
                .flatten();
        }
        at += len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreter_file_names() {
        assert_eq!(looks_like_python("/usr/bin/python3.11"), Some((11, false)));
        assert_eq!(
            looks_like_python("/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"),
            Some((12, false))
        );
        assert_eq!(looks_like_python("/usr/bin/python3.13t"), Some((13, true)));
        assert_eq!(
            looks_like_python("/usr/lib/libpython3.13t.so.1.0"),
            Some((13, true))
        );
        assert_eq!(
            looks_like_python("/usr/lib/libpython3.9.so.1.0"),
            Some((9, false))
        );
        assert_eq!(looks_like_python("/usr/bin/python3"), None);
        assert_eq!(looks_like_python("/usr/lib/libpythonista.so"), None);
    }

    #[test]
    fn location_table_lines() {
        // firstlineno 10. Entries: short form (code 0, 2 units, same line); one-line form
        // code 11 (+1 line, 1 unit); no-column form code 13 with delta +3 (svarint 6), 3 units;
        // no location (code 15, 1 unit); long form code 14 with delta -2 (svarint 5), 2 units.
        let table = [
            0x80 | 1, // code 0
            0x00,
            0x80 | (11 << 3),
            4,
            9,
            0x80 | (13 << 3) | 2,
            6,
            0x80 | (15 << 3),
            0x80 | (14 << 3) | 1,
            5,
            0,
            1,
            1,
        ];
        let line = |u| line_for_offset(&table, 10, u);
        assert_eq!(line(0), Some(10));
        assert_eq!(line(1), Some(10));
        assert_eq!(line(2), Some(11));
        assert_eq!(line(3), Some(14));
        assert_eq!(line(5), Some(14));
        assert_eq!(line(6), None);
        assert_eq!(line(7), Some(12));
        assert_eq!(line(8), Some(12));
        assert_eq!(line(9), None, "past the table");
        // A table that does not start at an entry is refused, not misread.
        assert_eq!(line_for_offset(&[0x05, 0x80], 1, 0), None);
        // Varints with continuation bits: delta 100 = svarint 200 = 0b11_001000.
        let long = [0x80 | (13 << 3), 0x40 | (200 & 63) as u8, (200 >> 6) as u8];
        assert_eq!(line_for_offset(&long, 1, 0), Some(101));
    }

    #[test]
    fn line_tables_before_3_11() {
        // Read off the real interpreters for `def f():\n x = 1\n y = 2\n\n return x + y` at
        // line 46 (instructions at bytes 0, 4 and 8 start lines 47, 48 and 50; 16 bytes).
        let lnotab39 = [0, 1, 4, 1, 4, 2];
        let l39 = |b| lnotab_line(&lnotab39, 46, b);
        assert_eq!(
            [l39(0), l39(2), l39(4), l39(6), l39(8), l39(14)],
            [47, 47, 48, 48, 50, 50].map(Some)
        );
        let table310 = [4, 1, 4, 1, 8, 2];
        let l310 = |b| linetable310_line(&table310, 46, b);
        assert_eq!(
            [l310(0), l310(2), l310(4), l310(8), l310(14)],
            [47, 47, 48, 50, 50].map(Some)
        );
        assert_eq!(l310(16), None, "past the table");
        // A "no line" range (-128) and a negative delta.
        let t = [2, 3, 2, 0x80, 2, (-1i8) as u8];
        assert_eq!(linetable310_line(&t, 10, 0), Some(13));
        assert_eq!(linetable310_line(&t, 10, 2), None);
        assert_eq!(linetable310_line(&t, 10, 4), Some(12));
        // Through `line_at`: 3.9 reads f_lasti as bytes, 3.10 as instructions; the high half
        // of what the probe read (f_lineno) is ignored, and f_lasti = -1 has no line.
        let code = |table: &[u8]| PyCode {
            filename: "m.py".into(),
            qualname: "f".into(),
            firstlineno: 46,
            linetable: table.to_vec(),
            code_adaptive: 0,
        };
        let hi = 50u64 << 32;
        assert_eq!(code(&lnotab39).line_at(9, 0x1000, hi | 4), Some(48));
        assert_eq!(code(&table310).line_at(10, 0x1000, hi | 4), Some(50));
        assert_eq!(
            code(&table310).line_at(10, 0x1000, u64::from(u32::MAX)),
            None
        );
    }

    #[test]
    fn instruction_pointer_to_line() {
        let code = PyCode {
            filename: "m.py".into(),
            qualname: "f".into(),
            firstlineno: 5,
            linetable: vec![0x80 | (13 << 3) | 1, 0, 0x80 | (13 << 3) | 1, 2],
            code_adaptive: 184,
        };
        let base = 0x1000;
        assert_eq!(code.line_at(11, base, base + 184), Some(5));
        assert_eq!(code.line_at(11, base, base + 184 + 2), Some(5));
        assert_eq!(code.line_at(11, base, base + 184 + 4), Some(6));
        assert_eq!(
            code.line_at(11, base, base + 100),
            None,
            "before the bytecode"
        );
    }
}

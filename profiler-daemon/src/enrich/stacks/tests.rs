//! The stack resolver: names from the process, from a capture, and in which order.
use super::*;
use profiler_common::{PyFrameRaw, kind};

pub(crate) fn stack(native: &[u64], py: &[(u64, u64)], of_kind: u32, period: u32) -> StackBody {
    let mut st = StackBody {
        of_kind,
        period,
        handle: 0x77,
        dur_ns: 1_000,
        native_len: native.len() as u32,
        py_len: py.len() as u32,
        flags: stackflags::AT_ENTRY,
        ..StackBody::default()
    };
    st.native[..native.len()].copy_from_slice(native);
    for (i, &(code, instr)) in py.iter().enumerate() {
        st.py[i] = PyFrameRaw { code, instr };
    }
    st
}

pub(crate) fn frame(module: &str, symbol: &str) -> Option<NativeFrame> {
    Some(NativeFrame {
        module: module.into(),
        symbol: Some(symbol.into()),
        offset: 0x40,
        source: Vec::new(),
    })
}

/// A CPython 3.12 code object built in this process's memory (the buffers it points
/// into live as long as it does).
struct FakeCode {
    code: Vec<u8>,
    filename: Vec<u8>,
    _qualname: Vec<u8>,
    _linetable: Vec<u8>,
}

impl FakeCode {
    fn new(filename: &str, qualname: &str, firstlineno: u32) -> FakeCode {
        let l = python::layout(12).expect("3.12 layout");
        // A compact ASCII str: length, state (compact + ascii, kind 1), then its characters.
        let ascii = |text: &str| {
            let mut o = vec![0u8; l.obj.ascii_size as usize + text.len() + 1];
            o[l.obj.unicode_length as usize..][..8]
                .copy_from_slice(&(text.len() as u64).to_le_bytes());
            let state: u32 = (1 << l.obj.state_kind_shift)
                | (1 << l.obj.state_compact_bit)
                | (1 << l.obj.state_ascii_bit);
            o[l.obj.unicode_state as usize..][..4].copy_from_slice(&state.to_le_bytes());
            o[l.obj.ascii_size as usize..][..text.len()].copy_from_slice(text.as_bytes());
            o
        };
        let mut c = FakeCode {
            code: vec![0u8; 512],
            filename: ascii(filename),
            _qualname: ascii(qualname),
            _linetable: vec![0u8; l.obj.bytes_sval as usize],
        };
        c.put(l.code_qualname, c._qualname.as_ptr() as u64);
        c.put(l.code_linetable, c._linetable.as_ptr() as u64);
        c.code[l.code_firstlineno as usize..][..4].copy_from_slice(&firstlineno.to_le_bytes());
        c.put(l.code_filename, c.filename.as_ptr() as u64);
        c
    }

    fn put(&mut self, at: u64, v: u64) {
        self.code[at as usize..][..8].copy_from_slice(&v.to_le_bytes());
    }

    fn addr(&self) -> u64 {
        std::hint::black_box(self.code.as_ptr() as u64)
    }
}

/// The native frames named since the last look: (address, whether a file named it).
fn natives_logged(r: &mut StackResolver) -> Vec<(u64, bool)> {
    r.take_log()
        .into_iter()
        .filter_map(|s| match s {
            StackSym::Native { addr, frame, .. } => Some((addr, frame.is_some())),
            _ => None,
        })
        .collect()
}

/// A resolver for this process, which it takes to be CPython 3.12.
fn resolver_of_this_process() -> StackResolver {
    let mut r = StackResolver::live(Arc::new(crate::enrich::process::ProcSymbols::new()));
    r.learn(vec![StackSym::Python {
        tgid: std::process::id(),
        module: "python3.12".into(),
        minor: 12,
        frames: true,
    }]);
    r
}

/// A code object whose first read fails (its file name is not there yet) is read again at
/// its next sighting, and named; one that never reads is given up after
/// [`PY_READ_TRIES`]. The "process" is this one, its code objects built in its memory with
/// CPython 3.12's layout.
#[test]
fn a_code_object_that_fails_to_read_is_tried_again() {
    let l = python::layout(12).expect("3.12 layout");
    let tgid = std::process::id();
    let mut code = FakeCode::new("train.py", "Net.forward", 7);
    // Not there yet: a file name pointer into the unmapped first page.
    code.put(l.code_filename, 8);
    let addr = code.addr();
    let mut r = resolver_of_this_process();
    assert!(r.py(tgid, addr).is_none(), "the first read fails");
    let filename = code.filename.as_ptr() as u64;
    code.put(l.code_filename, filename);
    let c = r.py(tgid, code.addr()).expect("read again");
    assert_eq!(
        (c.filename.as_str(), c.qualname.as_str(), c.firstlineno),
        ("train.py", "Net.forward", 7)
    );
    let logged: Vec<bool> = r
        .take_log()
        .iter()
        .filter_map(|s| match s {
            StackSym::PyCode { info, .. } => Some(info.is_some()),
            _ => None,
        })
        .collect();
    assert_eq!(
        logged,
        [false, true],
        "both reads go to the capture file, the last wins"
    );
    // A code object that never reads: PY_READ_TRIES attempts, then no more.
    let mut bad = FakeCode::new("bad.py", "bad", 1);
    bad.put(l.code_filename, 8);
    let bad_addr = bad.addr();
    for _ in 0..10 {
        assert!(r.py(tgid, bad_addr).is_none());
    }
    assert_eq!(r.take_log().len(), PY_READ_TRIES as usize);
}

/// A stack's Python code objects are read when it arrives, whatever its native frames
/// wait for: the process may be gone by the time a large library's symbol tables are read.
/// The native frames are named on the namer's thread, held here until the Python frames
/// are named; `settle` then waits for them.
#[test]
fn python_frames_are_named_while_native_ones_wait() {
    let tgid = std::process::id();
    let code = FakeCode::new("train.py", "Net.forward", 7);
    let mut r = resolver_of_this_process();
    let (release, held) = std::sync::mpsc::channel();
    r.namer
        .as_ref()
        .expect("a live resolver has a namer")
        .jobs
        .send(NamerJob::Hold(held))
        .unwrap();
    // Return addresses inside two of this test binary's functions.
    let native = [
        native_frame as *const () as u64 + 1,
        resolver_of_this_process as *const () as u64 + 1,
    ];
    let st = stack(&native, &[(code.addr(), 0x10)], kind::LAUNCH, 1);
    r.prepare(tgid, &st);
    let py: Vec<_> = r
        .take_log()
        .into_iter()
        .filter_map(|s| match s {
            StackSym::PyCode { info, .. } => info.map(|c| (c.filename, c.qualname)),
            StackSym::Native { .. } => panic!("a native frame named while the namer waits"),
            StackSym::Python { .. } => None,
        })
        .collect();
    assert_eq!(py, [("train.py".to_string(), "Net.forward".to_string())]);
    assert!(r.naming(tgid));
    let key = StackKey::of(&st);
    assert_eq!(
        r.labels(tgid, &key),
        [
            "train.py Net.forward".to_string(),
            format!("0x{:x}", native[0])
        ]
    );
    release.send(()).unwrap();
    r.settle();
    assert!(!r.naming(tgid));
    let named: Vec<(u64, Option<String>)> = r
        .take_log()
        .into_iter()
        .filter_map(|s| match s {
            StackSym::Native { addr, frame, .. } => Some((addr, frame?.symbol)),
            _ => None,
        })
        .collect();
    assert_eq!(named.len(), 2, "{named:?}");
    assert_eq!(named[0].0, native[0]);
    assert!(
        named[0].1.as_deref().unwrap().ends_with("native_frame"),
        "{named:?}"
    );
    assert!(
        named[1]
            .1
            .as_deref()
            .unwrap()
            .ends_with("resolver_of_this_process"),
        "{named:?}"
    );
    // Known now: the same stack again asks the namer for nothing.
    r.prepare(tgid, &st);
    assert!(!r.naming(tgid));
    let labels = r.labels(tgid, &key);
    assert!(
        labels.iter().any(|l| l.contains("native_frame")),
        "{labels:?}"
    );
}

/// A walk ends at an address no file maps: what lies past it is not named, nor waited
/// for (each such address once stayed "being named" for good, a leak per process).
#[test]
fn a_walk_ends_at_an_unmapped_address() {
    let tgid = std::process::id();
    let mut r = resolver_of_this_process();
    let native = [
        native_frame as *const () as u64 + 1,
        0x10,
        resolver_of_this_process as *const () as u64 + 1,
    ];
    let st = stack(&native, &[], kind::LAUNCH, 1);
    r.prepare(tgid, &st);
    r.settle();
    assert!(!r.naming(tgid));
    assert!(r.requested.is_empty(), "{:?}", r.requested);
    assert_eq!(natives_logged(&mut r), [(native[0], true), (0x10, false)]);
    let labels = r.labels(tgid, &StackKey::of(&st));
    assert_eq!(labels.len(), 1, "{labels:?}");
    assert!(labels[0].contains("native_frame"), "{labels:?}");
    // Seen again: nothing more to name.
    r.prepare(tgid, &st);
    assert!(!r.naming(tgid));
}

/// Without a namer thread (it could not start), native frames are named in `prepare`.
#[test]
fn without_a_namer_native_frames_are_named_in_turn() {
    let tgid = std::process::id();
    let mut r = resolver_of_this_process();
    r.namer = None;
    let native = [native_frame as *const () as u64 + 1, 0x10, 0x20];
    let st = stack(&native, &[], kind::LAUNCH, 1);
    r.prepare(tgid, &st);
    assert!(!r.naming(tgid));
    assert_eq!(natives_logged(&mut r), [(native[0], true), (0x10, false)]);
}

#[test]
fn the_caller_counted_once_whether_or_not_the_kernel_added_it() {
    // Kernels from 6.13 repeat the caller after the one read off the stack.
    let k = StackKey::of(&stack(&[0x10, 0x10, 0x20], &[], kind::LAUNCH, 1));
    assert_eq!(&*k.native, &[0x10, 0x20]);
    let k = StackKey::of(&stack(&[0x10, 0x20], &[], kind::LAUNCH, 1));
    assert_eq!(&*k.native, &[0x10, 0x20]);
    // At a return probe nothing is read off the stack: no deduplication.
    let mut st = stack(&[0x10, 0x10], &[], kind::SYNC, 1);
    st.flags = 0;
    assert_eq!(&*StackKey::of(&st).native, &[0x10, 0x10]);
    // Shim frames (instr 0) are left out.
    let k = StackKey::of(&stack(
        &[0x10],
        &[(0x100, 0x1c0), (0x200, 0)],
        kind::LAUNCH,
        1,
    ));
    assert_eq!(&*k.py, &[(0x100, 0x1c0)]);
}

#[test]
fn names_from_a_capture_merge_python_and_native_frames() {
    let mut r = StackResolver::replay();
    let code = |q: &str, first: u32| PyCode {
        filename: "/m.py".into(),
        qualname: q.into(),
        firstlineno: first,
        // one entry: no-column form, line delta 0, 8 code units
        linetable: vec![0x80 | (13 << 3) | 7, 0],
        code_adaptive: 184,
    };
    r.learn(vec![
        StackSym::Python {
            tgid: 7,
            module: "/usr/bin/python3.11".into(),
            minor: 11,
            frames: true,
        },
        StackSym::Native {
            tgid: 7,
            addr: 0x10,
            frame: frame("libffi.so.8", "ffi_call"),
        },
        StackSym::Native {
            tgid: 7,
            addr: 0x20,
            frame: frame("python3.11", "_PyEval_EvalFrameDefault"),
        },
        StackSym::PyCode {
            tgid: 7,
            code: 0x1000,
            info: Some(code("launch", 14)),
        },
        StackSym::PyCode {
            tgid: 7,
            code: 0x2000,
            info: Some(code("<module>", 30)),
        },
    ]);
    let key = StackKey::of(&stack(
        &[0x10, 0x20, 0x10],
        &[(0x1000, 0x1000 + 184 + 4), (0x2000, 0x2000 + 184)],
        kind::LAUNCH,
        1,
    ));
    // Outermost first: Python frames, then native frames below the interpreter.
    assert_eq!(
        r.labels(7, &key),
        [
            "/m.py:30 <module>",
            "/m.py:14 launch",
            "ffi_call (libffi.so.8)"
        ]
    );
    assert_eq!(r.caller_module(7, &key), "libffi.so.8");
    assert_eq!(
        r.python_of(7).as_deref(),
        Some("CPython 3.11 (/usr/bin/python3.11)")
    );
    // Without Python frames the native walk is kept whole, and stops at an address no file
    // maps (past the first frame).
    r.learn(vec![StackSym::Native {
        tgid: 7,
        addr: 0x99,
        frame: None,
    }]);
    let key = StackKey::of(&stack(&[0x99, 0x10, 0x99, 0x20], &[], kind::LAUNCH, 1));
    assert_eq!(r.labels(7, &key), ["ffi_call (libffi.so.8)", "0x99"]);
    // A retired tgid's names are forgotten.
    r.forget(7);
    assert_eq!(r.python_of(7), None);
}

#[test]
fn dwarf_lines_and_inlined_functions_become_frames() {
    let f = NativeFrame {
        module: "app".into(),
        symbol: Some("main".into()),
        offset: 0x1234,
        source: vec![
            lines::SourceFrame {
                function: Some("_Z6helperv".into()),
                file: Some("app.c".into()),
                line: Some(12),
            },
            lines::SourceFrame {
                function: None,
                file: Some("app.c".into()),
                line: Some(40),
            },
        ],
    };
    // Outermost first: the real function (named by its symbol when DWARF has no name) at
    // the inlined call's line, then the inlined function.
    assert_eq!(
        f.labels(),
        ["app.c:40 main (app)", "app.c:12 helper() (app)"]
    );
    let bare = NativeFrame {
        source: Vec::new(),
        ..f.clone()
    };
    assert_eq!(bare.labels(), ["main (app)"]);
    let unnamed = NativeFrame {
        symbol: None,
        source: Vec::new(),
        ..f
    };
    assert_eq!(unnamed.labels(), ["app+0x1234"]);
}
